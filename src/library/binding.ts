/**
 * @module The shape of Cloudflare's rate limiting binding (`const { success } = await env.X.limit({ key })`) over a
 * library limiter, in-process ({@link bindingOf}); src/library/service.ts gives the same calls over a service binding.
 * What a call asks is checked here once for both (the key and the cost then by `limit()` itself, before anything is
 * counted).
 */

import type { Background } from "../client/index.ts";
import type { BindingLimitOptions, LimitBinding, Limiter } from "./limiter.ts";

/** What a binding-shaped `limit({ key, cost? })` asks: the key, and its cost (`delta`, the platform's name, too). */
export interface BindingAsk {
  readonly key: string;
  readonly cost: number;
}

/**
 * `options` read as the binding's `limit()` reads them: `{ key, cost? }`, where `delta` (the platform binding's name)
 * may stand for `cost`. The key and the cost are left for `limit()` to check (its TypeError and RangeError).
 *
 * @throws TypeError when `options` is not an object; RangeError when `cost` and `delta` are both given and differ
 */
export function askOf(options: unknown, call = "limit"): BindingAsk {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`${call}(): expected { key, cost? }, got ${options === null ? "null" : typeof options}`);
  }
  const { key, cost, delta } = options as { key?: unknown; cost?: unknown; delta?: unknown };
  if (cost !== undefined && delta !== undefined && cost !== delta) {
    throw new RangeError(`${call}(): cost and delta differ (delta is the platform binding's name for cost: give one)`);
  }
  return { key: key as string, cost: (cost ?? delta ?? 1) as number };
}

/**
 * The binding's shape over `limiter` for `env`: `limit({ key, cost? })` resolves `{ success }`, the library's exact
 * decision (`success` is its `allowed`). Bad input rejects as `limit()` does, and nothing is counted.
 */
export function bindingOf(limiter: Limiter, env: object, ctx?: Background): LimitBinding {
  return {
    async limit(options: BindingLimitOptions) {
      const { key, cost } = askOf(options);
      const result = await limiter.limit(env, key, ctx === undefined ? { cost } : { cost, ctx });
      return { success: result.allowed };
    },
  };
}
