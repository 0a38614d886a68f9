/** @module The isolate's lease table: spending inside a lease's lifetime, sizing, refills, returns, bounds. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LeaseTable, leaseMargin, MIN_LEASE_UNITS, sameLimits, type Unused } from "../../src/client/leases.ts";
import type { Lease, LimitStatus, NamedLimit } from "../../src/core/index.ts";

const LIMITS: LimitStatus[] = [{ remaining: 50, resetMs: 1000, exceeded: false }];
const SPECS = [{ limit: 1000, windowMs: 1000 }];

function lease(units: number, lifetimeMs = 100, recordedAt: number[] = [1100]): Lease {
  return { units, lifetimeMs, recordedAt };
}

describe("LeaseTable", () => {
  it("spends a lease only while the local clock is before sentAt + lifetime − margin", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const e = table.touch("k", SPECS, 1000, unused);
    table.add(e, lease(3), 1000, LIMITS);
    const last = 1000 + 100 - leaseMargin(100) - 1;
    expect(table.spend(e, 1, 1000, unused)?.left).toBe(2);
    expect(table.spend(e, 1, last, unused)?.left).toBe(1);
    expect(table.spend(e, 1, last + 1, unused)).toBeNull();
    // The expired lease's last unit is handed back, once.
    expect(unused).toEqual([{ name: "k", limits: SPECS, recordedAt: [1100], units: 1 }]);
    expect(table.spend(e, 1, last + 2, unused)).toBeNull();
    expect(unused).toHaveLength(1);
  });

  it("never spends more than a lease holds, and uses the lease that expires first", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, lease(5, 200, [200]), 0, LIMITS);
    table.add(e, lease(2, 100, [100]), 0, LIMITS);
    expect(table.spend(e, 3, 10, unused)?.recordedAt).toEqual([200]); // the 2-unit lease cannot pay 3
    expect(table.spend(e, 2, 10, unused)?.recordedAt).toEqual([100]);
    expect(table.spend(e, 2, 10, unused)?.recordedAt).toEqual([200]);
    expect(table.spend(e, 1, 10, unused)).toBeNull();
  });

  it("sizes leases from the key's recent rate here, and gives rarely seen keys none", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const rare = table.touch("rare", SPECS, 0, unused);
    expect(table.want(rare, 1000, 1000, 0)).toBe(0);
    table.touch("rare", SPECS, 5000, unused);
    expect(table.want(rare, 1000, 1000, 0)).toBe(0);
    // 100 requests in 100 ms: about 100 per second, decayed.
    let hot = table.touch("hot", SPECS, 0, unused);
    for (let t = 1; t < 100; t++) hot = table.touch("hot", SPECS, t, unused);
    // One lifetime's worth at that rate.
    const want = table.want(hot, 1000, 10_000, 0);
    expect(want).toBeGreaterThan(80);
    expect(want).toBeLessThanOrEqual(100);
    expect(table.want(hot, 1000, 20, 0)).toBe(20);
    expect(table.want(hot, 5, 1000, 0)).toBe(0); // under one unit expected in 5 ms at ~95/s
    // While the object has no lease to give, none is asked for.
    hot.quietUntil = 500;
    expect(table.want(hot, 1000, 10_000, 499)).toBe(0);
    expect(table.want(hot, 1000, 10_000, 500)).toBeGreaterThan(0);
  });

  it("asks for no lease whose lifetime is under four recent round trips to the object", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    let hot = table.touch("hot", SPECS, 0, unused);
    for (let t = 1; t < 100; t++) hot = table.touch("hot", SPECS, t, unused);
    expect(table.want(hot, 50, 1000, 0)).toBeGreaterThan(0);
    table.observeRtt(20);
    expect(table.rttMs).toBe(20);
    expect(table.want(hot, 50, 1000, 0)).toBe(0); // a 50 ms lease would arrive 20 ms into its life
    expect(table.want(hot, 80, 1000, 0)).toBeGreaterThan(0);
    for (let i = 0; i < 40; i++) table.observeRtt(2);
    expect(table.rttMs).toBeLessThan(3);
    expect(table.want(hot, 50, 1000, 0)).toBeGreaterThan(0);
  });

  it("asks for a refill when the held units or time would run out within two round trips, never with a call out", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const e = table.touch("k", SPECS, 0, unused); // about 1 request per second: 1 unit in the 10 ms lead
    expect(table.needsRefill(e, 0, 10)).toBe(true);
    table.add(e, lease(10), 0, LIMITS); // spendable until 97
    expect(table.needsRefill(e, 0, 10)).toBe(false);
    expect(table.needsRefill(e, 86, 10)).toBe(false); // 11 ms left
    expect(table.needsRefill(e, 87, 10)).toBe(true); // 10 ms left: two round trips of at least 5 ms
    table.spend(e, 8, 1, unused);
    expect(table.needsRefill(e, 1, 10)).toBe(false); // 2 left
    table.spend(e, 1, 1, unused);
    expect(table.needsRefill(e, 1, 10)).toBe(true); // 1 left: what the lead will use
    e.inflightSince = 1;
    expect(table.needsRefill(e, 1, 10)).toBe(false);
    expect(table.needsRefill(table.touch("cold", SPECS, 0, unused), 0, 0)).toBe(false);
  });

  it("stays bounded: the oldest key makes room, and its unused units go back to its own object", () => {
    const table = new LeaseTable(2);
    const unused: Unused[] = [];
    const other = [{ limit: 64, windowMs: 60_000 }];
    table.add(table.touch("a", other, 0, unused), lease(4, 100, [7]), 0, LIMITS);
    table.touch("b", SPECS, 0, unused);
    table.touch("c", SPECS, 0, unused);
    expect(table.size).toBe(2);
    expect(table.get("a")).toBeUndefined();
    expect(unused).toEqual([{ name: "a", limits: other, recordedAt: [7], units: 4 }]);
  });

  it("drop forgets a key and hands back what its leases still hold", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, lease(1, 100, [8]), 0, LIMITS);
    table.add(e, lease(4, 100, [9]), 0, LIMITS);
    table.spend(e, 1, 0, unused); // the 1-unit lease is used up: nothing of it to hand back
    table.spend(e, 1, 0, unused); // the 4-unit lease pays
    table.drop("k", unused);
    expect(table.get("k")).toBeUndefined();
    expect(unused).toEqual([{ name: "k", limits: SPECS, recordedAt: [9], units: 3 }]);
  });

  it("keeps a margin of 1 ms plus 1/50 of the lifetime, floored", () => {
    expect([0, 1, 49, 50, 99, 100, 1000].map(leaseMargin)).toEqual([1, 1, 1, 2, 2, 3, 21]);
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    table.add(e, lease(1, 1000), 5000, LIMITS);
    expect(e.held[0]?.expiresAt).toBe(5000 + 1000 - 21);
  });

  it("estimates the key's rate per second: +1 per request, decayed by e^(−Δt/1 s), never grown by a clock going back", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 1000, []);
    expect([e.score, e.seenAt]).toEqual([1, 1000]);
    table.touch("k", SPECS, 1000, []);
    expect(e.score).toBe(2);
    table.touch("k", SPECS, 2000, []);
    expect(e.score).toBeCloseTo(2 * Math.exp(-1) + 1, 12);
    expect(e.seenAt).toBe(2000);
    const before = e.score;
    table.touch("k", SPECS, 1500, []); // an earlier local time: no decay, and no growth either
    expect(e.score).toBeCloseTo(before + 1, 12);
    expect(e.seenAt).toBe(1500);
  });

  it("asks for one lifetime of units at the key's rate once that is at least two units, within the bounds", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    expect(table.want(e, 10_000, 1000, 0)).toBe(0); // score 1: rare, however long the lease
    table.touch("k", SPECS, 0, []);
    expect(e.score).toBe(2);
    expect(MIN_LEASE_UNITS).toBe(2);
    expect(table.want(e, 1000, 1000, 0)).toBe(2); // 2/s × 1 s
    expect(table.want(e, 999, 1000, 0)).toBe(0); // 1.998: one unit costs a call, as asking per request does
    expect(table.want(e, 5000, 1000, 0)).toBe(10); // 2/s × 5 s
    expect(table.want(e, 5000, 1, 0)).toBe(1); // the isolate's bound (max_units)
    expect(table.want(e, 0, 1000, 0)).toBe(0);
    expect(table.want(e, -1000, 1000, 0)).toBe(0);
  });

  it("refills two round trips (at least 5 ms each) before the held units or time run out, counting only leases not yet expired", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []); // score 1: 1 unit in the 10 ms lead
    table.add(e, lease(2, 100), 0, LIMITS); // expires at 97
    expect(table.needsRefill(e, 0, 10)).toBe(false);
    table.spend(e, 1, 0, []);
    expect(table.needsRefill(e, 0, 10)).toBe(true); // 1 left: what the lead uses
    const g = table.touch("g", SPECS, 0, []);
    table.add(g, lease(50, 100), 0, LIMITS); // expires at 97
    expect(table.needsRefill(g, 86, 10)).toBe(false); // 11 ms left
    expect(table.needsRefill(g, 87, 10)).toBe(true); // 10 ms left
    // A big lease that has just expired counts for nothing, whatever its units.
    const f = table.touch("f", SPECS, 0, []);
    table.add(f, lease(100, 100), 0, LIMITS); // expires at 97
    table.add(f, lease(5, 200), 0, LIMITS); // expires at 195
    expect(table.needsRefill(f, 96, 10)).toBe(false);
    expect(table.needsRefill(f, 185, 10)).toBe(true);
    table.observeRtt(50); // slower round trips: a longer lead
    expect(table.needsRefill(f, 96, 10)).toBe(true);
  });

  it("sizes the refill's unit lead from the key's rate: a hot key refills while it still holds units", () => {
    const table = new LeaseTable();
    let e = table.touch("hot", SPECS, 0, []);
    for (let i = 1; i < 1000; i++) e = table.touch("hot", SPECS, 0, []); // 1000 requests a second
    table.add(e, lease(50, 1000), 0, LIMITS); // expires at 979: time is no reason to refill
    table.spend(e, 39, 0, []);
    // The 10 ms lead uses 1000 × 10 / 1000 = 10 units at this rate.
    expect(table.needsRefill(e, 0, 10)).toBe(false); // 11 left
    table.spend(e, 1, 0, []);
    expect(table.needsRefill(e, 0, 10)).toBe(true); // 10 left
  });

  it("counts no units of a lease expiring at exactly now, even with a live one that holds few", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []); // score 1: 1 unit in the 10 ms lead
    table.add(e, lease(100, 100), 0, LIMITS); // expires at 97
    table.add(e, lease(1, 1000), 0, LIMITS); // expires at 979
    expect(table.needsRefill(e, 96, 10)).toBe(false);
    expect(table.needsRefill(e, 97, 10)).toBe(true); // only the live lease's 1 unit counts
  });

  it("averages round trips: each new one moves the estimate an eighth of the way", () => {
    const table = new LeaseTable();
    table.observeRtt(10);
    expect(table.rttMs).toBe(10);
    table.observeRtt(90);
    expect(table.rttMs).toBe(20);
  });

  it("spends leases that expire at the same time in the order they came", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, lease(1, 100, [1]), 0, LIMITS);
    table.add(e, lease(1, 100, [2]), 0, LIMITS);
    table.add(e, lease(1, 100, [3]), 0, LIMITS);
    expect([1, 2, 3].map(() => table.spend(e, 1, 0, unused)?.recordedAt[0])).toEqual([1, 2, 3]);
  });

  it("hands back every lease that expired, and their limits are the key's latest", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, lease(2, 100, [1]), 0, LIMITS);
    table.add(e, lease(3, 100, [2]), 10, LIMITS);
    table.add(e, lease(4, 200, [3]), 0, LIMITS);
    const later = [{ limit: 500, windowMs: 1000 }];
    table.touch("k", later, 150, unused);
    expect(e.limits).toBe(later);
    expect(table.spend(e, 1, 150, unused)?.recordedAt).toEqual([3]);
    expect(unused).toEqual([
      { name: "k", limits: later, recordedAt: [1], units: 2 },
      { name: "k", limits: later, recordedAt: [2], units: 3 },
    ]);
    // A lease spent to the last unit expires without anything to hand back.
    table.spend(e, 3, 150, unused);
    expect(table.spend(e, 1, 400, unused)).toBeNull();
    expect(unused).toHaveLength(2);
    expect(e.held).toEqual([]);
  });

  it("makes room by dropping the oldest key with no call in flight", () => {
    const table = new LeaseTable(2);
    const unused: Unused[] = [];
    const busy = table.touch("busy", SPECS, 0, unused);
    busy.inflightSince = 0;
    table.touch("idle", SPECS, 0, unused);
    table.touch("new", SPECS, 0, unused);
    expect([table.get("busy"), table.get("idle"), table.get("new")].map((e) => e?.name)).toEqual([
      "busy",
      undefined,
      "new",
    ]);
    expect(table.size).toBe(2);
  });

  it("drop and dropOthers on an unknown key do nothing", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    table.drop("nobody", unused);
    table.dropOthers("nobody", null, unused);
    expect([table.size, unused]).toEqual([0, []]);
  });

  it("dropOthers keeps the leases granted under the limits now applied and hands back the others' unused units", () => {
    const table = new LeaseTable();
    const unused: Unused[] = [];
    const vip: NamedLimit[] = [{ limit: 500, windowMs: 1000, tickMs: 1, name: "vip" }];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, lease(2, 100, [1]), 0, LIMITS); // the plan's
    table.add(e, lease(3, 100, [2]), 0, LIMITS, vip);
    table.add(e, lease(4, 100, [3]), 0, LIMITS); // the plan's
    table.add(e, lease(5, 100, [4]), 0, LIMITS, [{ ...(vip[0] as NamedLimit) }]); // equal to vip
    table.spend(e, 2, 0, unused); // the first plan lease is used up
    table.dropOthers("k", vip, unused);
    expect(e.held.map((h) => h.recordedAt[0])).toEqual([2, 4]);
    expect(unused).toEqual([{ name: "k", limits: SPECS, recordedAt: [3], units: 4 }]);
    table.dropOthers("k", null, unused);
    expect(e.held).toEqual([]);
    expect(unused.map((u) => u.units)).toEqual([4, 5, 3]);
    expect(table.get("k")).toBe(e); // the key itself stays
  });

  it("sameLimits compares override lists field by field (null: the plan's)", () => {
    const a: NamedLimit = { limit: 10, windowMs: 1000, tickMs: 1, name: "x" };
    expect(sameLimits(null, null)).toBe(true);
    expect(sameLimits([a], [{ ...a }])).toBe(true);
    expect(sameLimits([a], null)).toBe(false);
    expect(sameLimits(null, [a])).toBe(false);
    expect(sameLimits([a], [a, a])).toBe(false);
    expect(sameLimits([a, a], [a])).toBe(false);
    expect(sameLimits([], [])).toBe(true);
    for (const change of [{ limit: 11 }, { windowMs: 2000 }, { tickMs: 2 }, { name: "y" }]) {
      expect(sameLimits([a], [{ ...a, ...change }]), JSON.stringify(change)).toBe(false);
    }
  });
});

describe("LeaseTable, property: never spends a unit at or after its lease's expiry, and loses none", () => {
  /** One step: time moves on by `dt`, then a lease arrives (sent `delay` ms ago) or a request spends `cost`. */
  const step = fc.oneof(
    fc.record({
      kind: fc.constant("add" as const),
      dt: fc.nat(30),
      units: fc.integer({ min: 1, max: 10 }),
      lifetimeMs: fc.integer({ min: 1, max: 120 }),
      delay: fc.nat(50),
    }),
    fc.record({ kind: fc.constant("spend" as const), dt: fc.nat(30), cost: fc.integer({ min: 1, max: 5 }) }),
  );

  it("against a model of leases by expiry, in any order of arrival", () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
        const table = new LeaseTable();
        const unused: Unused[] = [];
        const e = table.touch("k", SPECS, 0, unused);
        // The model: every lease by id (its recordedAt), with what it still holds and when it expires.
        const model = new Map<number, { left: number; expiresAt: number }>();
        let now = 0;
        let added = 0;
        let spent = 0;
        for (const [id, s] of steps.entries()) {
          now += s.dt;
          if (s.kind === "add") {
            const sentAt = now - s.delay;
            table.add(e, lease(s.units, s.lifetimeMs, [id]), sentAt, LIMITS);
            model.set(id, { left: s.units, expiresAt: sentAt + s.lifetimeMs - leaseMargin(s.lifetimeMs) });
            added += s.units;
            continue;
          }
          const held = table.spend(e, s.cost, now, unused);
          const spendable = [...model.values()].some((m) => now < m.expiresAt && m.left >= s.cost);
          expect(held !== null).toBe(spendable);
          if (!held) continue;
          const m = model.get(held.recordedAt[0] as number);
          expect(m).toBeDefined();
          expect(now).toBeLessThan(m?.expiresAt as number);
          // The lease spent is one that expires first among those that could pay.
          for (const other of model.values())
            if (now < other.expiresAt && other.left >= s.cost)
              expect(m?.expiresAt).toBeLessThanOrEqual(other.expiresAt);
          (m as { left: number }).left -= s.cost;
          spent += s.cost;
        }
        // Every unit was spent, is still held, or was handed back as unused, once, after its lease expired.
        for (const u of unused) {
          const m = model.get(u.recordedAt[0] as number);
          expect(m && m.expiresAt <= now && m.left === u.units).toBe(true);
        }
        const held = e.held.reduce((sum, h) => sum + h.left, 0);
        const returned = unused.reduce((sum, u) => sum + u.units, 0);
        expect(spent + held + returned).toBe(added);
        expect(e.held.every((h) => h.left >= 0)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
