// Faults between an isolate and a key's object (docs/design.md, "Nothing lost under faults"), for the client's unit
// tests: the in-memory object (store.ts) behind a namespace whose stubs, send by send, as a plan fast-check made says,
// let the call through, drop it before the object applies it, or let the object apply it and drop its answer. Three
// isolates (three clients, each with its own lease table) share the one object and the one clock.
//
// The faults stay within what the client promises to survive: a call with an id (one that may change the key's state)
// (a release too) meets at most MAX_SENDS − 1 of them, of any kind the client sends again after (policy.ts,
// `isAmbiguous`); a call without one (a read) meets at most one, retryable, which `callObject` tries again. Where a test asks
// (`Faults.plan`'s `down`), a call carrying lease settlements may also fail on every send, never applied: its
// settlements ride on with a later call, which goes through.

import fc from "fast-check";
import { LimiterClient, type LimiterNamespace } from "../../src/client/index.ts";
import { MAX_SENDS } from "../../src/client/policy.ts";
import { setup } from "./store.ts";

/** The flags of a fault's error, as the runtime sets them: a dropped connection, an object reset, an internal error. */
export type FaultFlags = { readonly retryable?: true; readonly durableObjectReset?: true };

/** What happens to one send of a call: it goes through, is dropped before the object applies it, or loses its answer. */
export type Fault = { readonly kind: "through" } | { readonly kind: "dropped" | "lost"; readonly flags: FaultFlags };

/** One send's fault: mostly none, else either kind with any of the runtime's flags for it. */
export const fault: fc.Arbitrary<Fault> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({ kind: "through" } as const) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constantFrom("dropped" as const, "lost" as const),
      flags: fc.constantFrom<FaultFlags>({ retryable: true }, { durableObjectReset: true }, {}),
    }),
  },
);

/** The call id a send carries (protocol.ts, `CallId`), by the method's signature; none for a read. */
function callIdOf(method: string, args: readonly unknown[]): string | undefined {
  const id =
    method === "settle"
      ? args[2]
      : method === "topUp"
        ? args[3]
        : method === "release"
          ? args[1]
          : (args[1] as { readonly call?: unknown } | undefined)?.call;
  return typeof id === "string" ? id : undefined;
}

/**
 * Which call a send belongs to: its id; without one, what it asks (a send again of a client without call ids may leave
 * out a take's settlements and refusal count, so those are not part of it). Identical calls without an id share their
 * faults, which only makes them fewer.
 */
function callOf(
  name: string,
  method: string,
  args: readonly unknown[],
): { readonly key: string; readonly id: boolean } {
  const id = callIdOf(method, args);
  if (id !== undefined) return { key: `${name}\u0000${id}`, id: true };
  const asked = JSON.stringify(args, (k, v) => (k === "settle" || k === "refused" ? undefined : v));
  return { key: `${name}\u0000${method}\u0000${asked}`, id: false };
}

/** The lease settlements a send carries: a request's take's, or a lease settle's. */
function settlementsIn(method: string, args: readonly unknown[]): number {
  if (method === "settle") return (args[1] as readonly unknown[] | undefined)?.length ?? 0;
  if (method === "take") return (args[1] as { readonly settle?: readonly unknown[] } | undefined)?.settle?.length ?? 0;
  return 0;
}

/** Faults injected into the sends of calls to keys' objects, one planned {@link Fault} per send, in order. */
export class Faults {
  /** What was injected, by kind, and the sends made: for a test to show what it exercised. */
  readonly injected = { dropped: 0, lost: 0, failedEverySend: 0, sends: 0 };
  #plan: readonly Fault[] = [];
  #next = 0;
  #down = false;
  /** Per call (see {@link callOf}): the faults it met, and whether a send of it reached the object. */
  readonly #calls = new Map<string, { met: number; applied: boolean }>();

  /**
   * Plans the next sends' faults: each send's in turn, from now on; sends past its end go through. With `down`, a call
   * carrying lease settlements (a request's take, a lease settle) fails on every send too, dropped before the object:
   * the request gets the failure mode, the settle goes unanswered, and their settlements ride on with a later call
   * (docs/design.md, "Nothing lost under faults"), which goes through.
   */
  plan(faults: readonly Fault[], down = false): void {
    this.#plan = faults;
    this.#next = 0;
    this.#down = down;
  }

  /** `inner`'s namespace, its stubs' every method faulting as planned. */
  wrap(inner: LimiterNamespace): LimiterNamespace {
    const getByName = (name: string) => {
      const stub = inner.getByName(name) as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
      const faulty: Record<string, (...args: unknown[]) => Promise<unknown>> = {};
      for (const [method, call] of Object.entries(stub)) {
        faulty[method] = (...args) => this.#send(name, method, args, () => call(...args));
      }
      return faulty;
    };
    return { getByName } as unknown as LimiterNamespace;
  }

  /** One send: through, dropped before `apply`, or `apply`'s answer dropped after it, as the plan and the cap say. */
  async #send(name: string, method: string, args: readonly unknown[], apply: () => Promise<unknown>): Promise<unknown> {
    this.injected.sends++;
    const planned = this.#plan[this.#next++] ?? { kind: "through" };
    const { key, id } = callOf(name, method, args);
    const call = this.#calls.get(key) ?? { met: 0, applied: false };
    this.#calls.set(key, call);
    if (this.#down && !call.applied && call.met < MAX_SENDS && settlementsIn(method, args) > 0) {
      if (++call.met === MAX_SENDS) this.injected.failedEverySend++;
      throw Object.assign(new Error("call dropped"), planned.kind === "through" ? {} : planned.flags);
    }
    if (planned.kind === "through" || call.met >= (id ? MAX_SENDS - 1 : 1)) {
      call.applied = true;
      return apply();
    }
    call.met++;
    this.injected[planned.kind]++;
    // Only a call with an id is sent again after any ambiguous failure; one without is tried again when retryable.
    const flags = id ? planned.flags : { retryable: true };
    if (planned.kind === "dropped") throw Object.assign(new Error("call dropped"), flags);
    call.applied = true;
    await apply();
    throw Object.assign(new Error("answer lost"), flags);
  }
}

/**
 * Three isolates under `settings` (as in wrangler.toml) sharing one in-memory object and one clock, their calls
 * faulting as `faults` plans: `setup()`'s (store.ts) with two more clients, all calling through the faulty namespace.
 */
export function isolates(settings: Record<string, unknown>) {
  const t = setup(settings);
  const faults = new Faults();
  const clock = () => t.client.now();
  const clients = [
    t.client,
    new LimiterClient(t.client.config, { clock }),
    new LimiterClient(t.client.config, { clock }),
  ] as const;
  const { store, bg, advance, settle } = t;
  return { store, bg, advance, settle, ns: faults.wrap(t.ns), clients, faults };
}
