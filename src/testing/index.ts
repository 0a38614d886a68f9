/**
 * @module The test kit (package export `./testing`; docs/configuration.md, "Testing your code"): a clock a test moves
 * ({@link TestClock}); in `@cloudflare/vitest-plugin` tests, that clock read by the isolate's limiters and the key's
 * objects alike ({@link useTestClock}) and a reset of every key ({@link resetLimiters}); and an in-memory limiter
 * ({@link memoryLimiter}) with the library's API and decisions, for plain Node tests without workerd. For tests only: nothing in the package's other entries imports this module
 * (`.dependency-cruiser.cjs`, "testing-is-a-leaf"; test/unit/testing.test.ts follows every entry's imports), so a
 * Worker built from them cannot reach it.
 *
 * ```ts
 * import { memoryLimiter } from "strict-edge-rate-limiter/testing";
 * const limiter = memoryLimiter({ name: "api", limits: [{ limit: 2, window: "1m" }] });
 * await limiter.limit({}, "k"); // granted
 * limiter.clock.advance(60_000);
 * ```
 */

import type { Background } from "../client/index.ts";
import { ConfigError } from "../config/types.ts";
import { limiterOf } from "../library/create.ts";
import type { Limiter } from "../library/limiter.ts";
import type { LimiterOptions } from "../library/settings.ts";
import { TestClock } from "./clock.ts";
import { MemoryObjects } from "./objects.ts";

export { TestClock, useRealClock, useTestClock } from "./clock.ts";
export { resetLimiters } from "./reset.ts";

/** {@link memoryLimiter}'s options: `createLimiter()`'s, with a {@link TestClock} for its `clock`. */
export type MemoryLimiterOptions = Omit<LimiterOptions, "clock"> & {
  /** The clock the limiter and its objects read (default: a new one, at 2030-01-01T00:00:00Z). */
  readonly clock?: TestClock;
};

/** A limiter whose objects live in memory: the library's {@link Limiter}, plus its clock and a reset of every key. */
export interface MemoryLimiter extends Limiter {
  /** The clock the limiter and its objects read: `limiter.clock.advance(60_000)`. */
  readonly clock: TestClock;
  /** Forgets every key: the objects' state (grants, quotas, credits, slots) and this limiter's leases and deny cache. */
  resetAll(): Promise<void>;
}

/** The calls of a {@link Limiter} that take `env` first. */
const WITH_ENV = [
  "limit",
  "acquire",
  "release",
  "peek",
  "refund",
  "settle",
  "decideRequest",
  "whenEnded",
  "settleWhenEnded",
  "reset",
  "credit",
  "topUp",
  "usage",
  "mintKey",
  "binding",
] as const satisfies readonly (keyof Limiter)[];

/** The `env` of a call made without one (`app.request(path)` in hono gives `c.env` undefined). */
const NO_ENV = {};

/**
 * What the in-memory objects do not model — routes, penalties, usage — refused by name rather than approximated.
 *
 * @throws ConfigError naming the setting and where to test it
 */
function checkModelled(config: Limiter["config"]): void {
  for (const plan of [config.defaultPlan, config.anonymous, ...config.plans]) {
    if (!plan) continue;
    const setting = plan.routes.length > 0 ? "routes" : plan.penalty ? "penalty" : plan.meters?.usage ? "usage" : null;
    if (setting !== null) {
      throw new ConfigError(
        `memoryLimiter.${setting}: not modelled in memory (plan ${JSON.stringify(plan.name)}); test it in workerd with @cloudflare/vitest-plugin`,
      );
    }
  }
}

/**
 * An in-memory limiter for plain Node tests: `createLimiter()`'s limiter — the same client, leases, deny cache and
 * pipeline — over objects that decide with the same pure core in memory, all at `clock`. Pass it any `env` (or `{}`):
 * its objects are used whatever `env` binds. Limits, plans, costs, calendar quotas, credits, refunds, settled costs,
 * address and account budgets and concurrency slots decide as in workerd; routes, penalties and usage are refused.
 * `service()` throws (a `LimiterService` runs in workerd).
 *
 * @throws ConfigError naming the first bad setting, or one it does not model
 */
export function memoryLimiter(options: MemoryLimiterOptions): MemoryLimiter {
  const { clock = new TestClock(), ...settings } = options;
  const objects = new MemoryObjects(clock.now);
  const real = limiterOf({ ...settings, clock: clock.now }, () => {
    throw new Error("memoryLimiter: service() makes a WorkerEntrypoint, which runs in workerd only");
  });
  checkModelled(real.config);
  const ns = objects.namespace();
  const envs = new WeakMap<object, object>();
  // The caller's env with the objects bound in place of the RateLimiter binding (one per env: the limiter keeps its
  // namespace per env).
  const withObjects = (env: object | undefined): object => {
    const given = env ?? NO_ENV;
    let e = envs.get(given);
    if (!e) {
      e = { ...given, [real.bindingName]: ns };
      envs.set(given, e);
    }
    return e;
  };
  const calls = Object.fromEntries(
    WITH_ENV.map((m) => [
      m,
      (env: object, ...rest: unknown[]) => (real[m] as (...a: unknown[]) => unknown)(withObjects(env), ...rest),
    ]),
  ) as Pick<Limiter, (typeof WITH_ENV)[number]>;
  return {
    ...real,
    ...calls,
    // The limiter's current pipeline (a reset's new epoch makes another), not the one spread above.
    get pipeline() {
      return real.pipeline;
    },
    clock,
    async resetAll() {
      const pending: Promise<unknown>[] = [];
      const bg: Background = { waitUntil: (p) => void pending.push(p) };
      for (const name of objects.names()) real.pipeline.client.forget(ns, name, bg);
      await Promise.allSettled(pending);
      objects.clear();
    },
  };
}
