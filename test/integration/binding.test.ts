// The platform binding's shape over the library inside workerd (docs/configuration.md, "Coming from the Workers rate
// limiting binding"): `limiter.binding(env).limit({ key, cost? })` → `{ success }`, the library's exact decision; bad
// input rejected with the library's errors and nothing counted; the same calls on the `LimiterService` class, in-process.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createLimiter, type LimitBinding, LimiterError } from "../../src/index.ts";
import { freshKey, spyLimiter } from "./helpers.ts";

const perMinute = (limit: number) => ({
  name: "binding-test",
  limits: [{ limit, window: "1m" as const }],
  leases: false,
});

describe("limiter.binding(env)", () => {
  it("is the platform binding's type: code typed against RateLimit takes it unchanged", () => {
    const limiter = createLimiter(perMinute(1));
    const typed: RateLimit = limiter.binding(env);
    expect(typeof typed.limit).toBe("function");
  });

  it("succeeds exactly up to the limit, then refuses until the window has passed", async () => {
    const limiter = createLimiter(perMinute(3));
    const binding = limiter.binding(env);
    const key = freshKey();
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push(await binding.limit({ key }));
    expect(outcomes).toEqual([
      { success: true },
      { success: true },
      { success: true },
      { success: false },
      { success: false },
    ]);
    // What it decided is the library's decision: the key's log holds exactly the three grants.
    expect((await limiter.peek(env, key)).limits[0]).toMatchObject({ remaining: 0, exceeded: true });
  });

  it("charges cost (or the platform's delta) in full, and never lets a request through that does not fit", async () => {
    const limiter = createLimiter(perMinute(5));
    const binding = limiter.binding(env);
    const key = freshKey();
    expect(await binding.limit({ key, cost: 3 })).toEqual({ success: true });
    // The platform binding lets a call through while its counter is below the limit: here 3 + 3 would be 6 of 5.
    expect(await binding.limit({ key, cost: 3 })).toEqual({ success: false });
    expect(await binding.limit({ key, delta: 2 })).toEqual({ success: true });
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(0);
    expect(await binding.limit({ key, cost: 1, delta: 1 })).toEqual({ success: false });
  });

  it("rejects bad input with the library's errors, counting nothing and calling no object", async () => {
    const spy = spyLimiter();
    const limiter = createLimiter({ ...perMinute(5), key: { pattern: "k_[a-z0-9-]+" } });
    const binding = limiter.binding({ LIMITER: spy.namespace });
    const call = (options: unknown) => binding.limit(options as Parameters<LimitBinding["limit"]>[0]);
    const bad: [unknown, ErrorConstructor | typeof LimiterError, RegExp][] = [
      [undefined, TypeError, /^limit\(\): expected \{ key, cost\? \}/],
      [null, TypeError, /^limit\(\): expected \{ key, cost\? \}, got null/],
      [{}, TypeError, /^key: expected a non-empty string/],
      [{ key: "" }, TypeError, /^key: expected a non-empty string/],
      [{ key: 42 }, TypeError, /^key: expected a non-empty string/],
      [{ key: "k_a", cost: 0 }, RangeError, /^cost: expected a whole number ≥ 1, got 0/],
      [{ key: "k_a", cost: -1 }, RangeError, /^cost: expected a whole number ≥ 1, got -1/],
      [{ key: "k_a", cost: 1.5 }, RangeError, /^cost: expected a whole number ≥ 1, got 1\.5/],
      [{ key: "k_a", cost: "2" }, RangeError, /^cost: expected a whole number ≥ 1, got 2/],
      [{ key: "k_a", cost: Number.NaN }, RangeError, /got NaN/],
      [{ key: "k_a", delta: Number.POSITIVE_INFINITY }, RangeError, /got Infinity/],
      [{ key: "k_a", cost: 2, delta: 3 }, RangeError, /^limit\(\): cost and delta differ/],
      [{ key: "pk_a" }, LimiterError, /^This API key is not valid\./],
    ];
    for (const [options, type, message] of bad) {
      const error = await call(options).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error, JSON.stringify(options)).toBeInstanceOf(type);
      expect((error as Error).message, JSON.stringify(options)).toMatch(message);
    }
    expect(spy.calls).toEqual([]);
    // And the key the good calls use starts with all of its units.
    expect(await call({ key: "k_a", cost: 5 })).toEqual({ success: true });
  });

  it("a key matching no plan is the library's no_plan", async () => {
    const limiter = createLimiter({
      name: "binding-plans",
      plans: [{ name: "pro", key_prefix: "pro_", limits: [{ limit: 1, window: "1m" }] }],
    });
    const error = await limiter
      .binding(env)
      .limit({ key: freshKey("free_") })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LimiterError);
    expect((error as LimiterError).code).toBe("no_plan");
  });
});
