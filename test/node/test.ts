// `cloudflare:test` for the Node stand-in (test/node/runtime.ts): the three helpers the Durable Object and integration
// tests use, with the semantics @cloudflare/vitest-plugin documents for them.
import { slotOf } from "./runtime.ts";

/** Runs `fn` with the object's live instance and its state (constructing it first when needed). */
export async function runInDurableObject<O, R>(
  stub: unknown,
  fn: (instance: O, state: DurableObjectState) => R | Promise<R>,
): Promise<R> {
  const { object, state } = await slotOf(stub).live();
  return fn(object as O, state as unknown as DurableObjectState);
}

/** Drops the object's instance; its storage stays. */
export async function evictDurableObject(stub: unknown): Promise<void> {
  slotOf(stub).evict();
}

/** Runs the object's alarm if one is set (clearing it first); whether it ran. */
export async function runDurableObjectAlarm(stub: unknown): Promise<boolean> {
  const slot = slotOf(stub);
  const { object } = await slot.live();
  if (slot.disk.alarm === null) return false;
  slot.disk.alarm = null;
  await object.alarm?.();
  return true;
}
