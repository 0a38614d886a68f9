/**
 * @module A reset of every key between `@cloudflare/vitest-plugin` tests ({@link resetLimiters}): the limiter's objects
 * deleted through the plugin's `cloudflare:test`, and every library limiter of the isolate started afresh (a new epoch,
 * src/base/clock.ts). `cloudflare:test` is imported only when it runs, so plain Node loads the kit.
 */

import { testSeam } from "../base/clock.ts";

/** A Durable Object namespace binding (`env.LIMITER`), as far as the reset uses it. */
export interface ObjectNamespace {
  get(id: never): unknown;
}

/** What the reset uses of `cloudflare:test` (@cloudflare/vitest-plugin). */
interface PluginTest {
  listDurableObjectIds(ns: ObjectNamespace): Promise<unknown[]>;
  runInDurableObject<R>(stub: unknown, run: (instance: unknown, state: ObjectState) => Promise<R>): Promise<R>;
  evictDurableObject(stub: unknown): Promise<void>;
}

interface ObjectState {
  readonly storage: { deleteAlarm(): Promise<void>; deleteAll(): Promise<void> };
}

/** Named apart so that neither a bundler nor TypeScript looks for it outside the plugin's runtime. */
const PLUGIN_MODULE = "cloudflare:test";

/**
 * Forgets every key of the limiters bound to `namespaces` (`env.LIMITER`, the `RateLimiter` class the tests' main
 * Worker exports): each of their objects' storage and alarm deleted and its instance evicted; then every library
 * limiter of the isolate drops what it keeps in memory — leases, deny cache, verified keys — as if just made. For
 * `@cloudflare/vitest-plugin` tests (`afterEach(() => resetLimiters(env.LIMITER))`); other Durable Objects are left
 * as they are. A {@link memoryLimiter} has its own `resetAll()`.
 *
 * @throws TypeError without a namespace
 */
export async function resetLimiters(...namespaces: readonly ObjectNamespace[]): Promise<void> {
  if (namespaces.length === 0) throw new TypeError("resetLimiters(env.LIMITER): expected the limiter's namespace");
  const plugin = (await import(/* @vite-ignore */ PLUGIN_MODULE)) as PluginTest;
  for (const ns of namespaces) {
    for (const id of await plugin.listDurableObjectIds(ns)) {
      const stub = ns.get(id as never);
      await plugin.runInDurableObject(stub, async (_, state) => {
        await state.storage.deleteAlarm();
        await state.storage.deleteAll();
      });
      await plugin.evictDurableObject(stub);
    }
  }
  testSeam.nextEpoch();
}
