/**
 * @module `createLimiter` (package export `.`, through src/index.ts): a limiter (src/library/create.ts) whose
 * `service()` makes a `LimiterService` — a `WorkerEntrypoint` other Workers reach over a service binding, so that many
 * Workers share one limiter deployment and its leases. The one module of the library that imports the runtime.
 */

import { WorkerEntrypoint } from "cloudflare:workers";
import { askOf } from "./binding.ts";
import { limiterOf, type ServedCalls } from "./create.ts";
import type { BindingLimitOptions, Limiter, LimiterServiceCalls, ServiceResult } from "./limiter.ts";
import type { LimiterOptions } from "./settings.ts";

/** A `LimiterService`: a `WorkerEntrypoint` with the limiter's calls. Type a service binding `Service<LimiterService>`. */
export type LimiterService = WorkerEntrypoint<object> & LimiterServiceCalls;

/**
 * The `LimiterService` class of `limiter` (or of the calls the proxy serves, src/proxy/index.ts): each call decides with the serving Worker's `env` (its `RateLimiter`
 * binding) and `ctx` (lease refills and give-backs outlive the call). An error crosses the binding as the runtime
 * carries it: a `TypeError` or `RangeError` as itself, a `LimiterError` as an `Error` with its `name` and `code`.
 */
export function serviceOf(limiter: ServedCalls): new (ctx: ExecutionContext, env: object) => LimiterService {
  return class LimiterService extends WorkerEntrypoint<object> {
    async limit(options: BindingLimitOptions): Promise<ServiceResult> {
      const { key, cost } = askOf(options);
      const result = await limiter.limit(this.env, key, { cost, ctx: this.ctx });
      return { ...result, success: result.allowed };
    }

    async peek(options: BindingLimitOptions) {
      const { key, cost } = askOf(options, "peek");
      return limiter.peek(this.env, key, { cost });
    }

    async refund(result: Parameters<Limiter["refund"]>[1]) {
      return limiter.refund(this.env, result);
    }

    async settle(result: Parameters<Limiter["settle"]>[1], actual: number) {
      return limiter.settle(this.env, result, actual);
    }
  };
}

/**
 * A limiter for these settings, validated now: a bad setting throws a `ConfigError` that
 * names it (`createLimiter.limits[0].window: …`). Create it once, at module level: its leases and
 * deny cache live as long as the isolate.
 *
 * @throws ConfigError naming the first bad setting
 */
export function createLimiter(options: LimiterOptions): Limiter {
  return limiterOf(options, serviceOf);
}
