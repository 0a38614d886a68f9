// The RateLimiter Durable Object inside workerd: decisions, storage rows, eviction, the idle alarm, limit changes.
// Time is the object's `clock()` seam, replaced per instance through runInDurableObject (no sleeping).
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { LimitSpec } from "../../src/core/sliding-log.ts";
import type { RateLimiter } from "../../src/limiter.ts";
import { type DecisionResult, decodeDecision, wireLimits } from "../../src/wire.ts";

const T0 = 1_800_000_000_000;

/** A fresh object with a controllable clock; `at(t)` moves it (survives only until eviction). */
async function object(name = crypto.randomUUID()) {
  const stub = env.LIMITER.getByName(name);
  let now = T0;
  const install = () =>
    runInDurableObject(stub, (instance: RateLimiter) => {
      instance.clock = () => now;
    });
  await install();
  return {
    stub,
    /** One RPC to the object, in the wire form the Worker uses (src/wire.ts), read back. */
    async decide(limits: readonly LimitSpec[], cost: number): Promise<DecisionResult> {
      return decodeDecision(await stub.decide(wireLimits(limits), cost));
    },
    at(t: number) {
      now = t;
    },
    /** Evicts the instance (storage kept) and installs the clock in the new one. */
    async evict() {
      await evictDurableObject(stub);
      await install();
    },
    rows: () =>
      runInDurableObject(stub, (_: RateLimiter, state) =>
        state.storage.sql
          .exec<{ slot: number; ts: number; cost: number }>("SELECT slot, ts, cost FROM slots ORDER BY slot")
          .toArray(),
      ),
    alarm: () => runInDurableObject(stub, (_: RateLimiter, state) => state.storage.getAlarm()),
  };
}

const perSecond: LimitSpec[] = [{ limit: 3, windowMs: 1000, name: "per-second" }];

describe("decide", () => {
  it("grants up to N in a window, then refuses with the exact wait", async () => {
    const o = await object();
    const results = [];
    for (let i = 0; i < 4; i++) {
      o.at(T0 + i * 100);
      results.push(await o.decide(perSecond, 1));
    }
    expect(results.map((r) => r.allowed)).toEqual([true, true, true, false]);
    expect(results.map((r) => r.limits[0]?.remaining)).toEqual([2, 1, 0, 0]);
    const denied = results[3];
    // The grant at T0 leaves the window (t > now - W) at T0 + 1000; now is T0 + 300.
    expect(denied).toMatchObject({ allowed: false, neverAllowed: false, now: T0 + 300, retryAfterMs: 700 });
    expect(denied?.blockedForMs).toBe(700);
    expect(denied?.limits[0]).toEqual({ remaining: 0, resetMs: 700, exceeded: true });

    o.at(T0 + 999);
    expect((await o.decide(perSecond, 1)).allowed).toBe(false);
    o.at(T0 + 1000);
    expect((await o.decide(perSecond, 1)).allowed).toBe(true);
  });

  it("answers a cost above a limit with 'never', without recording", async () => {
    const o = await object();
    const r = await o.decide(perSecond, 4);
    expect(r).toMatchObject({ allowed: false, neverAllowed: true, retryAfterMs: Number.POSITIVE_INFINITY });
    expect(await o.rows()).toEqual([]);
    expect((await o.decide(perSecond, 3)).allowed).toBe(true);
  });

  it("weighs cost across several limits and names the one that refuses", async () => {
    const o = await object();
    const limits: LimitSpec[] = [
      { limit: 5, windowMs: 1000, name: "per-second" },
      { limit: 8, windowMs: 60_000, name: "per-minute" },
    ];
    expect((await o.decide(limits, 5)).allowed).toBe(true);
    o.at(T0 + 1000);
    const r = await o.decide(limits, 4);
    // 5 + 4 > 8 in the minute; the second is free again.
    expect(r.allowed).toBe(false);
    expect(r.limits.map((l) => l.exceeded)).toEqual([false, true]);
    expect(r.retryAfterMs).toBe(59_000);
    expect((await o.decide(limits, 3)).allowed).toBe(true);
  });

  it("treats a clock that goes back as the newest recorded time", async () => {
    const o = await object();
    o.at(T0 + 500);
    await o.decide(perSecond, 3);
    o.at(T0);
    const r = await o.decide(perSecond, 1);
    expect(r).toMatchObject({ allowed: false, now: T0 + 500, retryAfterMs: 1000 });
  });

  it("rejects malformed limits with an error and records nothing", async () => {
    const o = await object();
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      for (const limits of [[], [3], [3, 1000, 5], "3,1000", null, { limit: 3, windowMs: 1000 }]) {
        await expect(instance.decide(limits as never, 1)).rejects.toThrow(/limits: expected \[limit, windowMs, …\]/);
      }
      for (const limits of [
        [0, 1000],
        [3, 0],
        [3, 1.5],
        ["3", 1000],
      ]) {
        await expect(instance.decide(limits as never, 1)).rejects.toThrow(RangeError);
      }
    });
    expect(await o.rows()).toEqual([]);
  });

  it("refuses the limit objects an earlier version's Worker sent (a rollout window fails safe, never grants)", async () => {
    const o = await object();
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      for (const limits of [perSecond, [...perSecond, { limit: 10, windowMs: 60_000, name: "per-minute" }]]) {
        await expect(instance.decide(limits as never, 1)).rejects.toThrow(RangeError);
      }
    });
    expect(await o.rows()).toEqual([]);
  });

  it("rejects an invalid cost with an error and records nothing", async () => {
    const o = await object();
    // Called on the instance: the test pool's RPC wrapper reports a rejected RPC call as unhandled.
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      for (const cost of [0, -1, 1.5, Number.NaN]) {
        await expect(instance.decide(wireLimits(perSecond), cost)).rejects.toThrow(/cost: expected a positive integer/);
      }
    });
    expect(await o.rows()).toEqual([]);
  });
});

describe("storage", () => {
  it("writes one row per grant, none per denial, and grants in one millisecond share a row", async () => {
    const o = await object();
    await o.decide(perSecond, 1);
    await o.decide(perSecond, 1);
    expect(await o.rows()).toEqual([{ slot: expect.any(Number), ts: T0, cost: 2 }]);
    o.at(T0 + 10);
    await o.decide(perSecond, 1);
    const afterGrants = await o.rows();
    expect(afterGrants.map((r) => [r.ts, r.cost])).toEqual([
      [T0, 2],
      [T0 + 10, 1],
    ]);
    o.at(T0 + 20);
    expect((await o.decide(perSecond, 1)).allowed).toBe(false);
    expect(await o.rows()).toEqual(afterGrants);
  });

  it("keeps at most capacity rows: a new slot overwrites the one that can no longer count", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 2, windowMs: 1000 }];
    for (const t of [0, 1000, 2000, 3000]) {
      o.at(T0 + t);
      expect((await o.decide(limits, 1)).allowed).toBe(true);
    }
    const rows = await o.rows();
    expect(rows).toHaveLength(2);
    expect(rows.map((r) => r.ts).sort()).toEqual([T0 + 2000, T0 + 3000]);
  });

  it("rebuilds from storage after eviction and decides exactly as before", async () => {
    const o = await object();
    for (let i = 0; i < 3; i++) {
      o.at(T0 + i * 100);
      await o.decide(perSecond, 1);
    }
    await o.evict();
    o.at(T0 + 999);
    const r = await o.decide(perSecond, 1);
    expect(r).toMatchObject({ allowed: false, retryAfterMs: 1 });
    o.at(T0 + 1000);
    expect((await o.decide(perSecond, 1)).allowed).toBe(true);
    o.at(T0 + 1050);
    expect((await o.decide(perSecond, 1)).allowed).toBe(false);
  });

  it("keeps the history that still matters when the limits change between deploys", async () => {
    const o = await object();
    const before: LimitSpec[] = [{ limit: 10, windowMs: 60_000 }];
    for (let i = 0; i < 6; i++) {
      o.at(T0 + i * 1000);
      await o.decide(before, 1);
    }
    await o.evict();
    // A new deploy: a stricter per-minute limit and a per-second one. The six grants still count.
    const after: LimitSpec[] = [
      { limit: 2, windowMs: 1000 },
      { limit: 7, windowMs: 60_000 },
    ];
    o.at(T0 + 6000);
    const r1 = await o.decide(after, 1);
    expect(r1.allowed).toBe(true);
    expect(r1.limits[1]?.remaining).toBe(0);
    const r2 = await o.decide(after, 1);
    expect(r2.allowed).toBe(false);
    // The oldest grant (T0) leaves the minute at T0 + 60000.
    expect(r2.retryAfterMs).toBe(54_000);
    expect((await o.rows()).length).toBeLessThanOrEqual(8);

    // Shrinking the longest window shrinks the ring to the new capacity (2) and keeps the newest slots.
    const shorter: LimitSpec[] = [{ limit: 2, windowMs: 1000 }];
    const r3 = await o.decide(shorter, 1);
    expect(r3).toMatchObject({ allowed: true, limits: [{ remaining: 0, resetMs: 1000, exceeded: false }] });
    const rows = await o.rows();
    expect(rows.length).toBeLessThanOrEqual(2);
    expect(rows.find((row) => row.ts === T0 + 6000)?.cost).toBe(2);
  });
});

describe("idle alarm", () => {
  it("is set on the first grant, re-arms while the key is active, and deletes the state once idle", async () => {
    const o = await object();
    const limits: LimitSpec[] = [
      { limit: 5, windowMs: 1000 },
      { limit: 50, windowMs: 10_000 },
    ];
    expect(await o.alarm()).toBeNull();
    o.at(T0 + 100);
    await o.decide(limits, 1);
    // Idle once the newest grant has left the longest window.
    expect(await o.alarm()).toBe(T0 + 100 + 10_000);
    o.at(T0 + 5000);
    await o.decide(limits, 1);
    expect(await o.alarm()).toBe(T0 + 100 + 10_000);

    // Fires while the grant at T0 + 5000 still counts: nothing is deleted, it re-arms.
    o.at(T0 + 10_100);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toHaveLength(2);
    expect(await o.alarm()).toBe(T0 + 5000 + 10_000);

    o.at(T0 + 15_000);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
    expect(await o.alarm()).toBeNull();
    const fresh = await o.decide(limits, 1);
    expect(fresh.limits.map((l) => l.remaining)).toEqual([4, 49]);
  });

  it("deletes the state of an evicted object from storage alone", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 5, windowMs: 1000 }];
    await o.decide(limits, 2);
    await o.evict();
    o.at(T0 + 1000);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
  });

  it("does not delete a key that is still blocked after an eviction", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 5, windowMs: 1000 }];
    await o.decide(limits, 5);
    await o.evict();
    o.at(T0 + 999);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.decide(limits, 1)).allowed).toBe(false);
  });
});
