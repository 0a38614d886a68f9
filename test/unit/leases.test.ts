/** @module The isolate's lease table: spending inside a lease's lifetime, sizing, refills, returns, bounds. */

import { describe, expect, it } from "vitest";
import type { Lease, LimitStatus } from "../../src/core/index.ts";
import { LeaseTable, leaseMargin, type Unused } from "../../src/leases.ts";

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
    table.add(e, lease(4, 100, [9]), 0, LIMITS);
    table.spend(e, 1, 0, unused);
    table.drop("k", unused);
    expect(table.get("k")).toBeUndefined();
    expect(unused).toEqual([{ name: "k", limits: SPECS, recordedAt: [9], units: 3 }]);
  });
});
