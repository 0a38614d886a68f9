// The test kit (src/testing/, package export "./testing"; docs/configuration.md, "Testing your code") in plain Node:
// the clock a test moves, the in-memory limiter's decisions against a brute-force window, its quotas, credits,
// refunds, settled costs and reset, what it refuses to model — and that no production entry can reach it.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../src/config/types.ts";
import { memoryLimiter, TestClock } from "../../src/testing/index.ts";

describe("TestClock", () => {
  it("stands still until advanced, and never goes back", () => {
    const clock = new TestClock(1_000);
    expect(clock.now()).toBe(1_000);
    expect(clock.advance(250)).toBe(1_250);
    const { now } = clock;
    expect(now()).toBe(1_250);
    for (const bad of [-1, 0.5, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => clock.advance(bad)).toThrow(RangeError);
    expect(() => new TestClock(-5)).toThrow(RangeError);
    expect(clock.now()).toBe(1_250);
    expect(new TestClock().now()).toBe(Date.UTC(2030, 0, 1));
  });
});

describe("memoryLimiter()", () => {
  it("refuses at the limit with the exact wait, and allows again once the clock has moved past the window", async () => {
    const limiter = memoryLimiter({ name: "api", limits: [{ limit: 2, window: "1m" }] });
    const first = await limiter.limit({}, "k");
    limiter.clock.advance(10_000);
    expect((await limiter.limit({}, "k")).allowed).toBe(true);
    const refused = await limiter.limit({}, "k");
    expect(refused).toMatchObject({ allowed: false, retryAfterMs: 50_000 });
    expect(refused.at + refused.retryAfterMs).toBe(first.at + 60_000);
    limiter.clock.advance(49_999);
    expect((await limiter.limit({}, "k")).allowed).toBe(false);
    limiter.clock.advance(1);
    expect((await limiter.limit({}, "k")).allowed).toBe(true);
    // Keys apart, and any env (or none, as hono's app.request gives) reaches the same objects.
    expect((await limiter.limit(undefined as unknown as object, "other")).allowed).toBe(true);
    expect((await limiter.peek({ LIMITER: "ignored" }, "other")).limits[0]?.remaining).toBe(1);
  });

  it("decides as an exact sliding window: every decision equals a brute-force count of the grants (property)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ wait: fc.integer({ min: 0, max: 4_000 }), cost: fc.integer({ min: 1, max: 4 }) }), {
          maxLength: 60,
        }),
        fc.boolean(),
        async (steps, leases) => {
          const limit = 7;
          const limiter = memoryLimiter({ name: "p", limits: [{ limit, window: "10s" }], leases });
          const granted: { t: number; cost: number }[] = [];
          for (const { wait, cost } of steps) {
            const now = limiter.clock.advance(wait);
            const used = granted.filter((g) => g.t > now - 10_000).reduce((sum, g) => sum + g.cost, 0);
            const r = await limiter.limit({}, "k", { cost });
            expect(r.allowed).toBe(used + cost <= limit);
            if (r.allowed) granted.push({ t: now, cost });
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it("refunds and settles as the library does, once", async () => {
    const limiter = memoryLimiter({ name: "api", limits: [{ limit: 5, window: "1m" }] });
    const r = await limiter.limit({}, "k", { cost: 3 });
    expect(await limiter.refund({}, r)).toBe(true);
    expect(await limiter.refund({}, structuredClone(r))).toBe(false);
    expect((await limiter.peek({}, "k")).limits[0]?.remaining).toBe(5);
    const reserved = await limiter.limit({}, "k", { cost: 4 });
    expect(await limiter.settle({}, reserved, 1)).toMatchObject({ settled: true, returned: 3, debt: 0 });
    expect((await limiter.peek({}, "k")).limits[0]?.remaining).toBe(4);
  });

  it("keeps calendar quotas and credits: a month's quota resets at the month's start, credits top up", async () => {
    const clock = new TestClock(Date.UTC(2030, 0, 31, 23, 59));
    const limiter = memoryLimiter({
      name: "billing",
      clock,
      limits: [{ limit: 2, period: "month" }],
      credits: { initial: 10 },
    });
    expect((await limiter.limit({}, "k", { cost: 2 })).allowed).toBe(true);
    const refused = await limiter.limit({}, "k");
    expect(refused.allowed).toBe(false);
    expect(refused.limits.map((l) => [l.name, l.exceeded])).toEqual([["monthly", true]]);
    clock.advance(60_000); // February
    expect((await limiter.limit({}, "k", { cost: 2 })).allowed).toBe(true);
    clock.advance(31 * 86_400_000); // March: the quota is back, but only 6 credits are left
    expect(await limiter.limit({}, "k", { cost: 2 })).toMatchObject({ allowed: true });
    expect(await limiter.topUp({}, "k", 5)).toEqual({ balance: 9, applied: true });
  });

  it("resetAll() forgets every key, with this limiter's leases and deny cache", async () => {
    const limiter = memoryLimiter({ name: "api", limits: [{ limit: 1, window: "1h" }] });
    expect((await limiter.limit({}, "a")).allowed).toBe(true);
    expect((await limiter.limit({}, "a")).allowed).toBe(false);
    expect((await limiter.limit({}, "a")).reason).toBe("cached_denial");
    await limiter.resetAll();
    expect((await limiter.limit({}, "a")).allowed).toBe(true);
  });

  it("has the binding's shape too; service() is workerd's", async () => {
    const limiter = memoryLimiter({ name: "api", limits: [{ limit: 1, window: "1m" }] });
    const binding = limiter.binding({});
    expect(await binding.limit({ key: "k" })).toEqual({ success: true });
    expect(await binding.limit({ key: "k" })).toEqual({ success: false });
    await expect(binding.limit({ key: "k", cost: 0 })).rejects.toThrow(RangeError);
    expect(() => limiter.service()).toThrow(/workerd only/);
  });

  it("refuses what it does not model, naming it, rather than deciding otherwise than workerd", () => {
    const limits = [{ limit: 5, window: "1m" as const }];
    expect(() => memoryLimiter({ limits, routes: [{ name: "search", limits }] })).toThrow(
      new ConfigError(
        'memoryLimiter.routes: not modelled in memory (plan "default"); test it in workerd with @cloudflare/vitest-plugin',
      ),
    );
    expect(() => memoryLimiter({ limits, penalty: { after: 3, within: "1m", block: "5m" } })).toThrow(
      /memoryLimiter\.penalty/,
    );
    expect(() => memoryLimiter({ name: "u", limits, usage: true })).toThrow(/memoryLimiter\.usage/);
  });
});

describe("never in a production path", () => {
  /** Every module of src/ that `entry` imports, following relative imports (type-only ones too). */
  function reach(entry: string, seen = new Set<string>()): Set<string> {
    if (seen.has(entry)) return seen;
    seen.add(entry);
    const text = readFileSync(entry, "utf8");
    for (const m of text.matchAll(/(?:import|export)[^"';]*?from\s+"(\.[^"]+)"/g)) {
      reach(resolve(dirname(entry), m[1] as string), seen);
    }
    return seen;
  }

  it("no entry but ./testing reaches src/testing/, and ./testing reaches nothing of the runtime", () => {
    const pkg = JSON.parse(readFileSync("package.json", "utf8")) as { exports: Record<string, { import?: string }> };
    const source = (dist: string) => resolve(dist.replace("./dist/", "src/").replace(/\.js$/, ".ts"));
    const entries = Object.entries(pkg.exports).filter(([name]) => name !== "./package.json");
    expect(entries.map(([name]) => name)).toEqual([".", "./hono", "./proxy", "./testing"]);
    for (const [name, target] of entries) {
      const reached = [...reach(source(target.import as string))];
      const testing = reached.filter((f) => f.includes(join("src", "testing")));
      if (name === "./testing") {
        expect(testing.length).toBeGreaterThan(0);
        // Plain Node loads it: nothing it reaches imports the runtime's modules.
        for (const f of reached) expect(readFileSync(f, "utf8"), f).not.toMatch(/from "cloudflare:/);
      } else {
        expect(reached.length, name).toBeGreaterThan(10);
        expect(testing, name).toEqual([]);
      }
    }
  });
});
