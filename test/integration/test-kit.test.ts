// The test kit in @cloudflare/vitest-plugin tests (docs/configuration.md, "Testing your code"): useTestClock() is the
// time the isolate's limiters and the key's objects both read, so a test moves past a window without sleeping;
// resetLimiters() forgets every key, in the objects and in the isolate; useRealClock() gives `Date.now()` back.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createLimiter } from "../../src/index.ts";
import type { RateLimiter } from "../../src/object/index.ts";
import { resetLimiters, TestClock, useRealClock, useTestClock } from "../../src/testing/index.ts";
import { envWith, freshKey, handle, request } from "./helpers.ts";

const clock = useTestClock();
afterEach(() => resetLimiters(env.LIMITER));
afterAll(() => useRealClock());

const perMinute = (limit: number, leases = false) =>
  createLimiter({ name: "kit", limits: [{ limit, window: "1m" }], leases });

/** The time the key's object reads. */
async function objectClock(limiter: ReturnType<typeof perMinute>, key: string): Promise<number> {
  const stub = env.LIMITER.getByName(limiter.identify(key).name);
  return runInDurableObject(stub, (instance: RateLimiter) => instance.clock());
}

describe("useTestClock()", () => {
  it("is the time the key's object and the isolate's limiter read: a refused key passes once it moves 60 s", async () => {
    const limiter = perMinute(2);
    const key = freshKey();
    const first = await limiter.limit(env, key);
    expect(first.at).toBe(Date.UTC(2030, 0, 1));
    expect(await objectClock(limiter, key)).toBe(clock.now());
    expect(limiter.pipeline.client.now()).toBe(clock.now());
    clock.advance(10_000);
    expect((await limiter.limit(env, key)).allowed).toBe(true);
    // Exact, the clock standing still: the first grant leaves the window 60 s after it was made.
    expect(await limiter.limit(env, key)).toMatchObject({ allowed: false, retryAfterMs: 50_000 });
    // The isolate's deny cache holds the refusal, at the same clock.
    expect(await limiter.limit(env, key)).toMatchObject({ allowed: false, reason: "cached_denial" });
    clock.advance(49_999);
    expect((await limiter.limit(env, key)).allowed).toBe(false);
    clock.advance(1);
    const again = await limiter.limit(env, key);
    expect(again).toMatchObject({ allowed: true, at: first.at + 60_000 });
    expect(await objectClock(limiter, key)).toBe(first.at + 60_000);
  });

  it("serves the binding's shape too: advance 61 s and the key succeeds again", async () => {
    const binding = perMinute(1).binding(env);
    const key = freshKey();
    expect(await binding.limit({ key })).toEqual({ success: true });
    expect(await binding.limit({ key })).toEqual({ success: false });
    clock.advance(61_000);
    expect(await binding.limit({ key })).toEqual({ success: true });
  });

  it("takes a clock of the test's own; a limiter given its own clock keeps it", async () => {
    const mine = useTestClock(new TestClock(Date.UTC(2031, 5, 1)));
    try {
      const own = new TestClock(Date.UTC(2032, 0, 1));
      const limiter = createLimiter({ name: "own", limits: [{ limit: 1, window: "1m" }], clock: own.now });
      expect(limiter.pipeline.client.now()).toBe(own.now());
      expect(perMinute(1).pipeline.client.now()).toBe(mine.now());
      expect(() => useTestClock({ now: () => 0 } as unknown as TestClock)).toThrow(TypeError);
    } finally {
      useTestClock(clock);
    }
  });
});

describe("resetLimiters(env.LIMITER)", () => {
  it("forgets every key: its objects deleted, and the isolate's leases and cached denials dropped", async () => {
    const strict = perMinute(1);
    const leasing = perMinute(1000, true);
    const [a, b] = [freshKey(), freshKey()];
    expect((await strict.limit(env, a)).allowed).toBe(true);
    expect(await strict.limit(env, a)).toMatchObject({ allowed: false });
    expect(await strict.limit(env, a)).toMatchObject({ allowed: false, reason: "cached_denial" });
    for (let i = 0; i < 20; i++) await leasing.limit(env, b);
    expect(leasing.pipeline.client.leases.size).toBe(1);
    // Before: the object keeps b's 20 grants and the units it leased, which the isolate counts as its own.
    expect((await leasing.peek(env, b)).limits[0]?.remaining).toBe(980);

    await resetLimiters(env.LIMITER);

    // Granted by the object (a cached denial would be refused here; a kept grant, at the object).
    expect(await strict.limit(env, a)).toMatchObject({ allowed: true, reason: "granted" });
    expect((await strict.peek(env, a)).limits[0]?.remaining).toBe(0);
    // No lease left in the isolate, and nothing recorded at the object.
    expect(leasing.pipeline.client.leases.size).toBe(0);
    expect((await leasing.peek(env, b)).limits[0]?.remaining).toBe(1000);
    // The clock is the test's: a reset moves nothing.
    expect(await objectClock(strict, a)).toBe(clock.now());
  });

  it("asks for the namespace", async () => {
    await expect((resetLimiters as () => Promise<void>)()).rejects.toThrow(/expected the limiter's namespace/);
  });
});

describe("the proxy (createProxy)", () => {
  it("reads the kit's clock too, and a reset gives it new clients", async () => {
    const vars = envWith({ limits: [{ limit: 1, window: "1m" }], leases: false });
    const key = freshKey();
    expect((await handle(request(key), vars)).status).toBe(200);
    const refused = await handle(request(key), vars);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("Retry-After")).toBe("60");
    clock.advance(60_000);
    expect((await handle(request(key), vars)).status).toBe(200);
    // Refused now from the isolate's deny cache, which the reset drops with the key's object.
    expect((await handle(request(key), vars)).status).toBe(429);
    await resetLimiters(env.LIMITER);
    expect((await handle(request(key), vars)).status).toBe(200);
  });
});

describe("useRealClock()", () => {
  it("gives the objects and the limiters Date.now() back", async () => {
    useRealClock();
    try {
      const limiter = perMinute(5);
      const key = freshKey();
      const before = Date.now();
      const r = await limiter.limit(env, key);
      const t = await objectClock(limiter, key);
      expect(r.at).toBeGreaterThanOrEqual(before);
      expect(t).toBeGreaterThanOrEqual(r.at);
      expect(t).toBeLessThanOrEqual(Date.now());
      expect(t).toBeLessThan(Date.UTC(2030, 0, 1));
    } finally {
      useTestClock(clock);
    }
  });
});
