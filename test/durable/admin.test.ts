// What operators set on a key, inside the object: status without consuming or storing anything,
// reset, block and per-key overrides, and how they meet leases, eviction and the idle alarm. Time is
// the object's `clock()` seam (no sleeping).
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Decision, LimitSpec, NamedLimit } from "../../src/core/index.ts";
import type { KeyStatus, RateLimiter } from "../../src/object/index.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
import { object, perSecond, T0 } from "./object.ts";

const bigger: NamedLimit[] = [{ limit: 10, windowMs: 1000, tickMs: 1, name: "vip" }];

describe("status", () => {
  it("of a key never seen creates no stored state: no table, no row, no alarm", async () => {
    const untouched = await object();
    const o = await object();
    const s = await o.status();
    expect(s).toMatchObject({ now: T0, stored: false, blockedUntil: null, override: null });
    expect(s.decision.limits).toEqual([{ remaining: 3, resetMs: 0, exceeded: false }]);
    expect(s.history).toMatchObject({ limit: 0, counts: new Array(10).fill(0), ahead: 0 });
    const stored = await o.stored();
    expect(stored).toEqual({
      tables: [],
      meta: [],
      schema: null,
      once: [],
      alarm: null,
      size: (await untouched.stored()).size,
    });
    // …and after a restart, too (the constructor creates nothing either).
    await o.evict();
    await o.status();
    expect((await o.stored()).tables).toEqual([]);
  });

  it("consumes nothing and writes nothing, also when it rebuilds the log from storage", async () => {
    const o = await object();
    o.at(T0 + 100);
    await o.take(perSecond, 2);
    const rows = await o.slots();
    const before = await o.stored();
    o.at(T0 + 200);
    for (let i = 0; i < 5; i++) expect((await o.status()).decision.limits[0]?.remaining).toBe(1);
    await o.evict();
    // Other limits than stored: a take would rewrite the rows; status must not.
    const s = await o.status([{ limit: 5, windowMs: 2000, tickMs: 10 }]);
    expect(s.decision.limits[0]?.remaining).toBe(3);
    expect(await o.slots()).toEqual(rows);
    expect(await o.stored()).toEqual(before);
    expect((await o.take(perSecond, 1)).limits[0]?.remaining).toBe(0);
  });

  it("reports the longest window's grants per bucket and what is leased ahead", async () => {
    const o = await object();
    const limits: LimitSpec[] = [
      { limit: 100, windowMs: 1000, tickMs: 1 },
      { limit: 1000, windowMs: 10_000, tickMs: 1 },
    ];
    o.at(T0 + 500);
    await o.take(limits, 3);
    o.at(T0 + 9_500);
    await o.take(limits, 2, { leaseUnits: 4, leaseMs: 50 });
    o.at(T0 + 9_520);
    // The lease's 6 units are recorded at T0 + 9550: ahead of now.
    expect((await o.status(limits, 10)).history).toMatchObject({ counts: [3, 0, 0, 0, 0, 0, 0, 0, 0, 0], ahead: 6 });
    o.at(T0 + 10_000);
    const s = await o.status(limits, 10);
    // Window (T0, T0 + 10000] in 1 s buckets: 3 at T0 + 500, 6 at T0 + 9550.
    expect(s.history).toEqual({
      limit: 1,
      startMs: T0,
      bucketMs: 1000,
      counts: [3, 0, 0, 0, 0, 0, 0, 0, 0, 6],
      ahead: 0,
    });
  });
});

describe("reset", () => {
  it("forgets the grants up to now but keeps units leased and not yet expired", async () => {
    const o = await object();
    // A lease of 20 units for 50 ms: far from the limit, granted as asked.
    const limits: LimitSpec[] = [{ limit: 1000, windowMs: 1600, tickMs: 1 }];
    o.at(T0 + 10);
    await o.take(limits, 10);
    o.at(T0 + 20);
    const leased = await o.take(limits, 1, { leaseUnits: 20, leaseMs: 50 });
    expect(leased.lease?.units).toBe(20);
    o.at(T0 + 30);
    const s = (await o.stub.reset(limits, 10)) as KeyStatus;
    // The lease (21 units at T0 + 70) still counts; the 10 at T0 + 10 are gone, in memory and in storage.
    expect(s.decision.limits[0]?.remaining).toBe(979);
    expect(await o.slots()).toEqual([{ ring: 1, ts: T0 + 70, cost: 21 }]);
    await o.evict();
    expect((await o.take(limits, 1)).limits[0]?.remaining).toBe(978);
  });

  it("of a key never seen stores nothing", async () => {
    const o = await object();
    await o.stub.reset(perSecond, 10);
    expect((await o.stored()).tables).toEqual([]);
  });

  it("lets a used-up key through at once", async () => {
    const o = await object();
    await o.take(perSecond, 3);
    expect((await o.take(perSecond, 1)).allowed).toBe(false);
    o.at(T0 + 1);
    await o.stub.reset(perSecond, 10);
    expect((await o.take(perSecond, 1)).allowed).toBe(true);
  });
});

describe("block", () => {
  it("refuses every request until its end, exactly, and records nothing", async () => {
    const o = await object();
    await o.take(perSecond, 1);
    const rows = await o.slots();
    await o.stub.block(T0 + 5000);
    o.at(T0 + 1000);
    const d = await o.take(perSecond, 1);
    expect(d).toMatchObject({
      allowed: false,
      blockedBy: T0 + 5000,
      retryAfterMs: 4000,
      blockedUntil: T0 + 5000,
      limits: [{ remaining: 0, resetMs: 4000, exceeded: false }],
      lease: null,
    });
    // A lease asked ahead of any request is refused too.
    expect(await o.take(perSecond, 0, { leaseUnits: 5, leaseMs: 50 })).toMatchObject({ allowed: false, lease: null });
    expect(await o.slots()).toEqual(rows);
    o.at(T0 + 4999);
    expect((await o.take(perSecond, 1)).retryAfterMs).toBe(1);
    o.at(T0 + 5000);
    expect(await o.take(perSecond, 1)).toMatchObject({ allowed: true });
  });

  it("says when the request would really pass: the block's end or later, when the key is used up then", async () => {
    const o = await object();
    await o.take(perSecond, 3);
    await o.stub.block(T0 + 500);
    o.at(T0 + 100);
    // Used up until T0 + 1000, blocked until T0 + 500: the exact wait runs to T0 + 1000.
    expect(await o.take(perSecond, 1)).toMatchObject({ allowed: false, retryAfterMs: 900, blockedBy: T0 + 500 });
  });

  it("survives an eviction, keeps the key's state until it ends, and unblock lifts it", async () => {
    const o = await object();
    await o.stub.block(T0 + 60_000);
    expect((await o.stored()).alarm).toBe(T0 + 60_000 + IDLE_KEEP_MS);
    await o.evict();
    o.at(T0 + 10_000);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true); // early: it re-arms and deletes nothing
    expect((await o.stored()).alarm).toBe(T0 + 60_000 + IDLE_KEEP_MS);
    expect((await o.take(perSecond, 1)).blockedBy).toBe(T0 + 60_000);
    expect((await o.status()).blockedUntil).toBe(T0 + 60_000);
    await o.stub.unblock();
    expect(await o.take(perSecond, 1)).toMatchObject({ allowed: true });
    expect((await o.status()).blockedUntil).toBeNull();
  });

  it("on a key never seen, is deleted by the idle alarm a day after it has ended", async () => {
    const o = await object();
    await o.stub.block(T0 + 1000);
    expect((await o.stored()).alarm).toBe(T0 + 1000 + IDLE_KEEP_MS);
    o.at(T0 + 1000 + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.stored()).toMatchObject({ tables: [], alarm: null });
  });
});

describe("override", () => {
  it("decides against its limits instead of the ones sent, and says so", async () => {
    const o = await object();
    await o.stub.override(bigger, null);
    const results: Decision[] = [];
    for (let i = 0; i < 11; i++) results.push(await o.take(perSecond, 1));
    expect(results.filter((r) => r.allowed)).toHaveLength(10);
    expect(results[0]).toMatchObject({ limitsOverride: bigger, limits: [{ remaining: 9 }] });
    const s = await o.status();
    expect(s.override).toEqual({ limits: bigger, expiresAt: null });
    expect(s.decision.limitsOverride).toEqual(bigger);
  });

  it("expires: the plan's limits apply again, with the history that still counts", async () => {
    const o = await object();
    await o.stub.override(bigger, T0 + 500);
    for (let i = 0; i < 5; i++) await o.take(perSecond, 1);
    o.at(T0 + 499);
    expect((await o.take(perSecond, 1)).limitsOverride).toEqual(bigger);
    o.at(T0 + 500);
    const d = await o.take(perSecond, 1);
    expect(d.limitsOverride).toBeUndefined();
    expect(d).toMatchObject({ allowed: false, limits: [{ remaining: 0 }] }); // 6 granted still count against 3
    expect((await o.status()).override).toBeNull();
    // The override's row is gone; a second's window is not stored.
    expect((await o.stored()).meta).toEqual([]);
  });

  it("survives an eviction, is removed by clearOverride, and keeps the state alive while it lasts", async () => {
    const o = await object();
    await o.stub.override(bigger, null);
    await o.evict();
    expect((await o.take(perSecond, 1)).limitsOverride).toEqual(bigger);
    o.at(T0 + 10 * 86_400_000);
    await runDurableObjectAlarm(o.stub);
    expect((await o.status()).override).not.toBeNull(); // no expiry: kept however long the key is idle
    await o.stub.clearOverride();
    const d = await o.take(perSecond, 1);
    expect(d.limitsOverride).toBeUndefined();
    expect(d.limits).toEqual([{ remaining: 2, resetMs: 1000, exceeded: false }]);
  });

  it("lets a lease granted under the plan be given back without error (its units just expire)", async () => {
    const o = await object();
    const plan: LimitSpec[] = [
      { limit: 1000, windowMs: 1000, tickMs: 1 },
      { limit: 10_000, windowMs: 3_600_000, tickMs: 2000 },
    ];
    const d = await o.take(plan, 1, { leaseUnits: 10, leaseMs: 50 });
    expect(d.lease?.recordedAt).toHaveLength(2);
    await o.stub.override(bigger, null);
    expect(await o.giveBack(plan, d.lease?.recordedAt ?? [], 10)).toBe(0);
  });

  it("refuses invalid limits with a RangeError naming the field", async () => {
    const o = await object();
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      await expect(instance.override([{ limit: 0, windowMs: 1000, tickMs: 1, name: "x" }], null)).rejects.toThrow(
        /^limits\[0\]\.limit: /,
      );
    });
    expect((await o.stored()).tables).toEqual([]);
  });
});
