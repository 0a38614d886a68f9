/** @module The isolate's lease table: spending inside a lease's lifetime, settlements, sizing, refills, bounds. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { leaseShare, sameOverride } from "../../src/client/held.ts";
import { IDLE_RETURN_MS, type KeySettlements, LeaseTable } from "../../src/client/leases.ts";
import { type Lease, type LimitStatus, leaseMargin, MIN_LEASE_UNITS, type NamedLimit } from "../../src/core/index.ts";
import { MAX_USE_GROUPS } from "../../src/core/limits.ts";

const LIMITS: LimitStatus[] = [{ remaining: 50, resetMs: 1000, exceeded: false }];
const SPECS = [{ limit: 1000, windowMs: 1000 }];
/** Limits no rate in these tests comes near. */
const ROOMY = [{ limit: 1_000_000, windowMs: 1000 }];

/** A lease ask of `units` (for needsRefill, which only asks whether there is one). */
const ask = (units: number) => ({ units, lifetimeMs: 100, leadMs: 0 });

function lease(units: number, lifetimeMs = 100, recordedAt: number[] = [1100]): Lease {
  return { units, lifetimeMs, recordedAt };
}

describe("LeaseTable", () => {
  it("spends a lease only while the local clock is before sentAt + lifetime − margin", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    const e = table.touch("k", SPECS, 1000, unused);
    table.add(e, { lease: lease(3), sentAt: 1000, issuedAt: 1000, limits: LIMITS });
    const last = 1000 + 100 - leaseMargin(100) - 1;
    expect(table.spend(e, 1, 1000)?.left).toBe(2);
    expect(table.spend(e, 1, last)?.left).toBe(1);
    expect(table.spend(e, 1, last + 1)).toBeNull();
    // The expired lease waits to be settled with the key's next call, once: its 2 uses, its last unit given back.
    expect(table.settle(e, last + 1)).toEqual([
      { recordedAt: [1100], issuedAt: 1000, used: 1, lastUseMs: 0, unused: 0 },
      { recordedAt: [1100], issuedAt: 1000, used: 1, lastUseMs: last - 1000, unused: 1 },
    ]);
    expect(table.spend(e, 1, last + 2)).toBeNull();
    expect(table.settle(e, last + 2)).toEqual([]);
    expect(unused).toEqual([]);
  });

  it("refund: a grant back to its own lease once, never one settled since, never another lease's", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    const h = table.add(e, { lease: lease(10, 5000, [5000]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    const spend = (at: number) => {
      const from = table.spend(e, 1, at) as NonNullable<ReturnType<typeof table.spend>>;
      return table.grantId(from);
    };
    const a = spend(10);
    const b = spend(20);
    expect(table.refund("k", h.id, b, 1)).toBe(true);
    expect(table.refund("k", h.id, b, 1)).toBe(false); // once
    expect(table.refund("other", h.id, a, 1)).toBe(false);
    expect(table.refund("k", "elsewhere.1", a, 1)).toBe(false);
    expect(table.refund("k", h.id, `${h.id}.99`, 1)).toBe(false); // no such grant yet
    expect(h.left).toBe(9);
    // Settled: a's use was re-dated to when it happened. A later use's unit must not go back in its place.
    expect(table.settle(e, 30, true).reduce((n, x) => n + x.used, 0)).toBe(1);
    spend(40);
    expect(table.refund("k", h.id, a, 1)).toBe(false);
    expect([h.left, h.used]).toEqual([8, 1]);
    // Expired and not yet settled: the unit goes back into the lease, to be given back with its settlement.
    const g = table.add(e, { lease: lease(2, 100, [7000]), sentAt: 50, issuedAt: 50, limits: LIMITS });
    const late = table.grantId(table.spend(e, 1, 60) === g ? g : (undefined as never));
    table.spend(e, 0, 200); // expires `g`
    expect(e.expired).toContain(g);
    expect(table.refund("k", g.id, late, 1)).toBe(true);
    expect(g.left).toBe(2);
  });

  it("settles a lease's uses in at most MAX_USE_GROUPS groups, each at its own last use; the cheapest merge first", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    table.add(e, { lease: lease(30, 5000, [5000]), sentAt: 0, issuedAt: 0, limits: LIMITS, applied: null, used: 1 }); // the request's own unit, used at 0
    table.spend(e, 1, 100);
    table.spend(e, 1, 100); // the same millisecond: the same group
    table.spend(e, 1, 200);
    table.spend(e, 1, 2000); // after a pause
    // A fifth group: merging 200 into 2000 costs 1 × 1800 unit-ms, 100 into 200 2 × 100, 0 into 100 1 × 100, and
    // 2000 into 2010 1 × 10: the last is the cheapest.
    table.spend(e, 1, 2010);
    expect(MAX_USE_GROUPS).toBe(4);
    expect(table.settle(e, 2020, true)).toEqual([
      { recordedAt: [5000], issuedAt: 0, used: 1, lastUseMs: 0, unused: 0 },
      { recordedAt: [5000], issuedAt: 0, used: 2, lastUseMs: 100, unused: 0 },
      { recordedAt: [5000], issuedAt: 0, used: 1, lastUseMs: 200, unused: 0 },
      { recordedAt: [5000], issuedAt: 0, used: 2, lastUseMs: 2010, unused: 0 },
    ]);
    expect(table.settle(e, 2030, true)).toEqual([]);
    // Inside the groups: 0 into 100 costs 1 × 100 = 100 < 2 × 100 into 200.
    table.spend(e, 1, 3000);
    table.spend(e, 1, 3100);
    table.spend(e, 2, 3200);
    table.spend(e, 1, 3300);
    table.spend(e, 1, 3300); // the same millisecond: no merge
    table.spend(e, 1, 4000);
    expect(table.settle(e, 4000, true).map((s) => [s.used, s.lastUseMs])).toEqual([
      [2, 3100],
      [2, 3200],
      [2, 3300],
      [1, 4000],
    ]);
    // A refund takes from the earlier uses first (what stays is recorded at its use or later), then the later ones.
    const h = table.spend(e, 1, 4100);
    table.spend(e, 1, 4200);
    table.spend(e, 1, 4210);
    expect(h && table.unspend(e, h, 2)).toBe(true);
    expect([h?.earlier?.map((g) => g.used), h?.used]).toEqual([[0, 0], 1]);
    expect(h && table.unspend(e, h, 2)).toBe(false);
    expect(h && table.unspend(e, h, 1)).toBe(true);
    expect(table.settle(e, 4220, true)).toEqual([]);
  });

  it("re-dates a valid lease's uses only near a limit; an expired lease's when it is given up, far or near", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    const far: LimitStatus[] = [{ remaining: 900, resetMs: 1000, exceeded: false }];
    table.add(e, { lease: lease(3, 100, [100]), sentAt: 0, issuedAt: 0, limits: far });
    table.spend(e, 1, 10);
    expect(table.settle(e, 20)).toEqual([]); // 900 + 2 of 1000 left: nothing worth a row
    expect(table.settle(e, 200)).toEqual([{ recordedAt: [100], issuedAt: 0, used: 1, lastUseMs: 10, unused: 2 }]);
    // The object's latest answer says the key is near a limit now: uses are re-dated.
    table.add(e, { lease: lease(3, 100, [300]), sentAt: 200, issuedAt: 200, limits: far });
    table.spend(e, 1, 210);
    table.saw(e, {
      limits: [{ remaining: 400, resetMs: 1000, exceeded: false }],
      decidedAt: 205,
      sentAt: 200,
      applied: null,
    });
    expect(table.settle(e, 220)).toEqual([{ recordedAt: [300], issuedAt: 200, used: 1, lastUseMs: 10, unused: 0 }]);
    // Heading for a limit: at its rate here (about one a millisecond) the key would use half of 1000 a second.
    const fast = table.touch("fast", SPECS, 0, []);
    table.add(fast, { lease: lease(3, 200, [200]), sentAt: 0, issuedAt: 0, limits: far });
    for (let t = 1; t <= 100; t++) table.touch("fast", SPECS, t, []);
    table.spend(fast, 1, 100);
    expect(table.settle(fast, 100)).toEqual([{ recordedAt: [200], issuedAt: 0, used: 1, lastUseMs: 100, unused: 0 }]);
  });

  it("join: a request may wait for the lease call out only while its unpromised units cover it and it is not late", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    expect(table.join(e, 1, 0)).toBeNull(); // no call out
    const call = table.calling(e, 3, 100); // due after at least 5 ms, late at least 5 ms after that: until 110
    expect(call.until).toBe(110);
    expect(table.join(e, 2, 100)).toBe(call);
    expect(table.join(e, 2, 101)).toBeNull(); // one unit left unpromised
    expect(table.join(e, 1, 109)).toBe(call);
    expect(call.spare).toBe(0);
    call.spare = 5;
    expect(table.join(e, 1, 110)).toBeNull(); // late: its answer may never come
    // The first round trip seen: 40 ms, deviating by half of it (RFC 6298's start): due at 40, late at most a round
    // trip later (4 × 20 would be 80).
    table.observeRtt(40);
    expect(table.calling(e, 3, 200).until).toBe(280);
    // Steady round trips of 40 ms: the deviation shrinks by a quarter each time, and a call is late soon after due.
    for (let i = 0; i < 20; i++) table.observeRtt(40);
    const out = table.calling(e, 3, 300);
    expect([out.dueAt, out.until, out.done]).toEqual([340, 345, false]);
    table.answered(e, call); // an older call's answer clears nothing of the newer one
    expect([e.call, call.done]).toEqual([out, true]);
    table.answered(e, out);
    expect([e.call, out.done]).toEqual([null, true]);
    // Round trips of 30 and 50 ms by turns: late about four deviations (~10.7 ms each) after due.
    for (let i = 0; i < 40; i++) table.observeRtt(i % 2 === 0 ? 30 : 50);
    const varied = table.calling(e, 3, 400);
    expect(varied.dueAt - 400).toBeGreaterThanOrEqual(40);
    expect(varied.dueAt - 400).toBeLessThanOrEqual(42);
    expect(varied.until - varied.dueAt).toBeGreaterThan(38);
    expect(varied.until - varied.dueAt).toBeLessThanOrEqual(41); // a round trip at most
  });

  it("never spends more than a lease holds, and uses the lease that expires first", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, { lease: lease(5, 200, [200]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.add(e, { lease: lease(2, 100, [100]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    expect(table.spend(e, 3, 10)?.recordedAt).toEqual([200]); // the 2-unit lease cannot pay 3
    expect(table.spend(e, 2, 10)?.recordedAt).toEqual([100]);
    expect(table.spend(e, 2, 10)?.recordedAt).toEqual([200]);
    expect(table.spend(e, 1, 10)).toBeNull();
  });

  it("lets the object size a rarely seen key's lease, and sizes it from the key's recent rate here once it has one", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    const rare = table.touch("rare", SPECS, 0, unused);
    expect(table.fromLog(rare)).toBe(true);
    // Met here for the first time: no lease (this isolate may see one of its requests now and then).
    expect(table.want(rare, 0, { lifetimeMs: 1000, maxUnits: 1000 }).units).toBe(0);
    // Seen again within about 5 s: a cap, for the object to size from the key's log.
    table.touch("rare", SPECS, 5000, unused);
    expect(table.want(rare, 5000, { lifetimeMs: 1000, maxUnits: 1000 })).toEqual({
      units: 1000,
      lifetimeMs: 1000,
      leadMs: 0,
    });
    expect(table.want(rare, 5000, { lifetimeMs: 0, maxUnits: 1000 }).units).toBe(0);
    const again = table.touch("later", SPECS, 0, unused);
    table.touch("later", SPECS, 5200, unused); // seen again only after about 5 s: still none
    expect(table.want(again, 5200, { lifetimeMs: 1000, maxUnits: 1000 }).units).toBe(0);
    table.touch("rare", SPECS, 50_000, unused);
    expect(table.fromLog(rare)).toBe(true);
    // 100 requests in 10 s: 10 a second. The 10 s estimate's decayed count (about 63) over what it reaches in the
    // 9.9 s the key has been watched (63 %): the rate since, not the 6 a second the count alone would say.
    let hot = table.touch("hot", SPECS, 0, unused);
    for (let t = 100; t < 10_000; t += 100) hot = table.touch("hot", SPECS, t, unused);
    expect(table.fromLog(hot)).toBe(false);
    // 0.8 of what that rate spends in the lifetime, here as long as the key has been watched (9.9 s): 0.8 · 99.
    const want = table.want(hot, 9900, { lifetimeMs: 10_000, maxUnits: 10_000 });
    expect(want.lifetimeMs).toBe(9900);
    expect(want.units).toBeGreaterThanOrEqual(77);
    expect(want.units).toBeLessThanOrEqual(79);
    // Capped by max_units: asked for about the time it takes to spend them (20 at 8 a second).
    const capped = table.want(hot, 9900, { lifetimeMs: 10_000, maxUnits: 20 });
    expect(capped.units).toBe(20);
    expect(capped.lifetimeMs).toBeGreaterThan(2400);
    expect(capped.lifetimeMs).toBeLessThan(2600);
    expect(table.want(hot, 9900, { lifetimeMs: 30, maxUnits: 1000 }).units).toBe(0); // under two units expected in 30 ms at 10/s
    // While the object has no lease to give, none is asked for.
    hot.quietUntil = 10_500;
    expect(table.want(hot, 10_499, { lifetimeMs: 1000, maxUnits: 10_000 }).units).toBe(0);
    expect(table.want(hot, 10_500, { lifetimeMs: 1000, maxUnits: 10_000 }).units).toBeGreaterThan(0);
  });

  it("expects the object's share of a lease from its latest answer: none under 1/4 of a limit free, all from 3/4", () => {
    const table = new LeaseTable();
    let e = table.touch("k", SPECS, 0, []);
    for (let t = 10; t <= 1000; t += 10) e = table.touch("k", SPECS, t, []); // 100 a second, watched for 1 s
    const answer = (remaining: number, decidedAt: number) => ({
      limits: [{ remaining, resetMs: 500, exceeded: false }],
      decidedAt,
      sentAt: decidedAt - 5,
      applied: null,
    });
    expect(leaseShare(e, 1000)).toBe(1); // no answer yet
    expect(table.want(e, 1000, { lifetimeMs: 1000, maxUnits: 1000 }).units).toBeGreaterThan(0);
    table.saw(e, answer(250, 1000)); // a quarter of 1000 left: the object grants no lease
    expect(leaseShare(e, 1000)).toBe(0);
    expect(table.want(e, 1000, { lifetimeMs: 1000, maxUnits: 1000 })).toEqual({ units: 0, lifetimeMs: 0, leadMs: 0 });
    // 250 more held here count as free: half of the limit, half way from 1/4 to 3/4.
    table.add(e, { lease: lease(250, 500, [1500]), sentAt: 1000, issuedAt: 1000, limits: LIMITS });
    expect(leaseShare(e, 1001)).toBe(0.5);
    expect(table.want(e, 1001, { lifetimeMs: 1000, maxUnits: 1000 }).units).toBeGreaterThan(0);
    // Requests may wait for the share of a call's units the object is expected to grant.
    expect(table.calling(e, 10, 1001).spare).toBe(5);
    table.saw(e, answer(750, 1010));
    expect(leaseShare(e, 1010)).toBe(1);
  });

  it("asks for no longer than it has watched the key (at least youngMs): a burst's rate says little about the next 10 s", () => {
    const table = new LeaseTable();
    let e = table.touch("burst", ROOMY, 0, []);
    for (let t = 1; t < 100; t++) e = table.touch("burst", ROOMY, t, []); // about one request a millisecond
    const now = table.want(e, 99, { lifetimeMs: 10_000, maxUnits: 1_000_000, youngMs: 31 });
    expect(now.lifetimeMs).toBe(99);
    // One a millisecond since it was first seen (the 100 ms estimate, decayed, says 0.62): 0.8 of it over 99 ms.
    expect(now.units).toBeGreaterThanOrEqual(77);
    expect(now.units).toBeLessThanOrEqual(79);
    expect(table.want(e, 99, { lifetimeMs: 10_000, maxUnits: 1_000_000, youngMs: 500 }).lifetimeMs).toBe(500);
  });

  it("far below every limit, asks for a young key's lease over the whole lifetime; near, heading near or in a burst, for the watched span", () => {
    const limits = [
      { limit: 100, windowMs: 1000 },
      { limit: 1000, windowMs: 60_000 },
    ];
    const answer = (remaining: readonly number[], decidedAt: number) => ({
      limits: remaining.map((r) => ({ remaining: r, resetMs: 500, exceeded: false })),
      decidedAt,
      sentAt: decidedAt - 5,
      applied: null,
    });
    /** A key seen 5 times a second for 1 s here, its object's latest answer leaving `remaining`. */
    const young = (remaining: readonly number[] | null) => {
      const table = new LeaseTable();
      let e = table.touch("k", limits, 0, []);
      for (let t = 200; t <= 1000; t += 200) e = table.touch("k", limits, t, []);
      if (remaining) table.saw(e, answer(remaining, 1000));
      return { table, e };
    };
    const sizing = { lifetimeMs: 30_000, maxUnits: 1000, youngMs: 31 };
    // Far below both limits (every limit ≥ 3/4 free), 5 a second steady: 0.8 of it over the whole 30 s.
    const far = young([95, 990]);
    expect(far.table.want(far.e, 1000, sizing)).toEqual({ units: 118, lifetimeMs: 30_000, leadMs: 0 });
    // No answer seen yet, or one under 3/4 of a limit free: the watched second only (0.8 · 4.95 a second: 3 units).
    for (const remaining of [null, [95, 740], [70, 990]]) {
      const { table, e } = young(remaining);
      expect(table.want(e, 1000, sizing)).toEqual({ units: 3, lifetimeMs: 1000, leadMs: 0 });
    }
    // Units held here count as free, as the object will see them once given back: 70 + 10 held is 4/5 of 100.
    const holding = young([70, 990]);
    holding.table.add(holding.e, { lease: lease(10, 5000, [6000]), sentAt: 1000, issuedAt: 1000, limits: LIMITS });
    expect(holding.table.want(holding.e, 1000, sizing).lifetimeMs).toBe(30_000);
    // In a burst (the 100 ms estimate above the 10 s one): the watched span, however far below.
    const burst = young([95, 990]);
    for (let t = 1001; t <= 1010; t++) burst.table.touch("k", limits, t, []);
    expect(burst.table.want(burst.e, 1010, sizing).lifetimeMs).toBe(1010);
    // Watched for less than a second, a rate says too little to be trusted for 30 s, however far below: 20 requests in
    // the key's first 95 ms ask for what they would spend in those 95 ms (the ring's slack, 31 ms, at the least).
    const table0 = new LeaseTable();
    let first = table0.touch("k", limits, 0, []);
    table0.saw(first, answer([95, 990], 0));
    for (let t = 5; t < 100; t += 5) first = table0.touch("k", limits, t, []);
    expect(table0.want(first, 95, sizing).lifetimeMs).toBe(95);
    // Heading near a limit at its rate here, though the answer is far: 5 a second is 300 a minute, over half of 500.
    const tight = [
      { limit: 100, windowMs: 1000 },
      { limit: 500, windowMs: 60_000 },
    ];
    const table = new LeaseTable();
    let e = table.touch("k", tight, 0, []);
    for (let t = 200; t <= 1000; t += 200) e = table.touch("k", tight, t, []);
    table.saw(e, answer([95, 495], 1000));
    expect(table.want(e, 1000, sizing)).toEqual({ units: 3, lifetimeMs: 1000, leadMs: 0 });
    // The same when an operator's override set that tighter limit: heading near what the object decides against.
    const overridden = young(null);
    const applied: NamedLimit[] = [
      { name: "per-second", limit: 100, windowMs: 1000, tickMs: 1 },
      { name: "per-minute", limit: 500, windowMs: 60_000, tickMs: 1 },
    ];
    overridden.table.saw(overridden.e, { ...answer([95, 495], 1000), applied });
    expect(overridden.table.want(overridden.e, 1000, sizing)).toEqual({ units: 3, lifetimeMs: 1000, leadMs: 0 });
  });

  it("reports the units it holds unspent per key, expired ones not yet given back included", () => {
    const table = new LeaseTable();
    const a = table.touch("a", SPECS, 0, []);
    table.add(a, { lease: lease(5, 100, [100]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.add(a, { lease: lease(3, 1000, [1000]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.spend(a, 2, 10);
    const b = table.touch("b", SPECS, 0, []);
    table.add(b, { lease: lease(2, 100, [100]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.spend(b, 2, 10);
    table.touch("c", SPECS, 0, []);
    expect(table.unspent()).toEqual(new Map([["a", 6]]));
    // Past the first lease's expiry its 3 unused units are still here, until the key's next call gives them back.
    table.idle(500, []);
    expect(table.unspent()).toEqual(new Map([["a", 6]]));
    expect(table.settle(a, 500).reduce((n, x) => n + x.unused, 0)).toBe(3);
    expect(table.unspent()).toEqual(new Map([["a", 3]]));
  });

  it("asks for no lease for a key too slow to use two units within 10 s here, however far below its limits", () => {
    const limits = [{ limit: 1000, windowMs: 60_000 }];
    const far = { limits: [{ remaining: 990, resetMs: 500, exceeded: false }], decidedAt: 0, sentAt: 0, applied: null };
    const every = (gapMs: number) => {
      const table = new LeaseTable();
      let e = table.touch("k", limits, 0, []);
      table.saw(e, far);
      for (let t = gapMs; t <= 60_000; t += gapMs) e = table.touch("k", limits, t, []);
      return table.want(e, 60_000, { lifetimeMs: 30_000, maxUnits: 1000, youngMs: 31 }).units;
    };
    expect(every(6000)).toBe(0); // about 1.2 requests in 10 s by the 10 s estimate
    expect(every(3000)).toBe(6); // about 2.9: 0.8 of it over the whole 30 s
  });

  it("asks for no lease whose lifetime is under four recent round trips to the object", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    let hot = table.touch("hot", ROOMY, 0, unused);
    for (let t = 1; t < 1000; t++) hot = table.touch("hot", ROOMY, t, unused);
    expect(table.want(hot, 1000, { lifetimeMs: 1000, maxUnits: 1000 }).units).toBeGreaterThan(0);
    table.observeRtt(300);
    expect(table.rttMs).toBe(300);
    expect(table.want(hot, 1000, { lifetimeMs: 1000, maxUnits: 1000 }).units).toBe(0); // a 1 s lease would arrive 300 ms into its life
    expect(table.want(hot, 1200, { lifetimeMs: 1200, maxUnits: 1000 }).units).toBeGreaterThan(0);
    for (let i = 0; i < 60; i++) table.observeRtt(2);
    expect(table.rttMs).toBeLessThan(3);
    expect(table.want(hot, 1000, { lifetimeMs: 1000, maxUnits: 1000 }).units).toBeGreaterThan(0);
  });

  it("asks for the whole watched span near a limit too: settlement, not a shorter lease, keeps used units cheap", () => {
    const table = new LeaseTable();
    const limits = [
      { limit: 100_000, windowMs: 1000 },
      { limit: 1000, windowMs: 60_000 },
    ];
    // About 10 requests a second, steady: 600 a minute here, more than half of 1000 a minute.
    let e = table.touch("k", limits, 0, []);
    for (let t = 100; t <= 60_000; t += 100) e = table.touch("k", limits, t, []);
    // 0.8 · ~10/s over the 30 s asked for; capped at max_units, for the time 100 units take at that rate.
    expect(table.want(e, 60_000, { lifetimeMs: 30_000, maxUnits: 100, youngMs: 31 })).toEqual({
      units: 100,
      lifetimeMs: 12_563,
      leadMs: 0,
    });
    expect(table.want(e, 60_000, { lifetimeMs: 30_000, maxUnits: 10_000, youngMs: 31 })).toEqual({
      units: 238,
      lifetimeMs: 30_000,
      leadMs: 0,
    });
  });

  it("asks for a refill when the held units or time would run out within two round trips, never with a call out", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    table.touch("k", SPECS, 0, unused);
    const e = table.touch("k", SPECS, 0, unused); // two requests in 100 ms: 1 unit in the 10 ms lead
    expect(table.needsRefill(e, 0, ask(10))).toBe(true);
    table.add(e, { lease: lease(10), sentAt: 0, issuedAt: 0, limits: LIMITS }); // spendable until 97
    expect(table.needsRefill(e, 0, ask(10))).toBe(false);
    expect(table.needsRefill(e, 86, ask(10))).toBe(false); // 11 ms left
    expect(table.needsRefill(e, 87, ask(10))).toBe(true); // 10 ms left: two round trips of at least 5 ms
    table.spend(e, 8, 1);
    expect(table.needsRefill(e, 1, ask(10))).toBe(false); // 2 left
    table.spend(e, 1, 1);
    expect(table.needsRefill(e, 1, ask(10))).toBe(true); // 1 left: what the lead will use
    table.calling(e, 10, 1);
    expect(table.needsRefill(e, 1, ask(10))).toBe(false);
    expect(table.needsRefill(table.touch("cold", SPECS, 0, unused), 0, ask(0))).toBe(false);
  });

  it("stays bounded: the oldest key makes room, and its unused units go back to its own object", () => {
    const table = new LeaseTable(2);
    const unused: KeySettlements[] = [];
    const other = [{ limit: 64, windowMs: 60_000 }];
    table.add(table.touch("a", other, 0, unused), {
      lease: lease(4, 100, [7]),
      sentAt: 0,
      issuedAt: 0,
      limits: LIMITS,
    });
    table.touch("b", SPECS, 0, unused);
    table.touch("c", SPECS, 0, unused);
    expect(table.size).toBe(2);
    expect(table.get("a")).toBeUndefined();
    expect(unused).toEqual([
      { name: "a", limits: other, settle: [{ recordedAt: [7], issuedAt: 0, used: 0, lastUseMs: 0, unused: 4 }] },
    ]);
  });

  it("drop forgets a key and hands back what its leases still hold", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, { lease: lease(1, 100, [8]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.add(e, { lease: lease(4, 100, [9]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.spend(e, 1, 0); // the 1-unit lease is used up: nothing of it to hand back
    table.spend(e, 1, 0); // the 4-unit lease pays
    table.drop("k", unused);
    expect(table.get("k")).toBeUndefined();
    // The used-up lease is settled too (its use re-dated); the other gives back its 3 unused units.
    expect(unused).toEqual([
      {
        name: "k",
        limits: SPECS,
        settle: [
          { recordedAt: [8], issuedAt: 0, used: 1, lastUseMs: 0, unused: 0 },
          { recordedAt: [9], issuedAt: 0, used: 1, lastUseMs: 0, unused: 3 },
        ],
      },
    ]);
    // A request still holding the dropped entry (it was waiting) finds nothing to spend: those units were given back.
    expect(table.spend(e, 1, 1)).toBeNull();
    expect(e.held.map((h) => h.left)).toEqual([0, 0]);
  });

  it("keeps a margin of 1 ms plus 1/50 of the lifetime, floored", () => {
    expect([0, 1, 49, 50, 99, 100, 1000].map(leaseMargin)).toEqual([1, 1, 1, 2, 2, 3, 21]);
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    table.add(e, { lease: lease(1, 1000), sentAt: 5000, issuedAt: 5000, limits: LIMITS });
    expect(e.held[0]?.expiresAt).toBe(5000 + 1000 - 21);
  });

  it("estimates the key's rate: +1 per request, decayed by e^(−Δt/10 s), never grown by a clock going back", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 1000, []);
    expect([e.score, e.seenAt]).toEqual([1, 1000]);
    table.touch("k", SPECS, 1000, []);
    expect(e.score).toBe(2);
    table.touch("k", SPECS, 11_000, []);
    expect(e.score).toBeCloseTo(2 * Math.exp(-1) + 1, 12);
    expect(e.burst).toBeCloseTo(2 * Math.exp(-100) + 1, 12); // the 100 ms estimate has forgotten them
    expect(e.seenAt).toBe(11_000);
    const before = e.score;
    table.touch("k", SPECS, 10_500, []); // an earlier local time: no decay, and no growth either
    expect(e.score).toBeCloseTo(before + 1, 12);
    expect(e.seenAt).toBe(10_500);
    // The burst estimate decays with its own 100 ms constant: 50 ms later, by e^(−1/2).
    const b = e.burst;
    table.touch("k", SPECS, 10_550, []);
    expect(e.burst).toBeCloseTo(b * Math.exp(-0.5) + 1, 12);
  });

  it("asks for 0.8 of a lifetime's units at the key's rate once that is at least two units, within the bounds", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    table.touch("k", SPECS, 0, []);
    expect([e.score, e.burst]).toEqual([2, 2]);
    expect(table.fromLog(e)).toBe(false);
    expect(MIN_LEASE_UNITS).toBe(2);
    // The burst estimate leaves out the request just counted: 1 in 100 ms.
    expect(table.want(e, 50_000, { lifetimeMs: 250, maxUnits: 1000 })).toEqual({
      units: 2,
      lifetimeMs: 250,
      leadMs: 0,
    });
    expect(table.want(e, 50_000, { lifetimeMs: 249, maxUnits: 1000 }).units).toBe(0); // 1.99: one unit costs a call, as asking per request does
    expect(table.want(e, 50_000, { lifetimeMs: 1000, maxUnits: 1000 })).toEqual({
      units: 8,
      lifetimeMs: 1000,
      leadMs: 0,
    });
    // The isolate's bound (max_units), for the time it takes to spend it.
    expect(table.want(e, 50_000, { lifetimeMs: 1000, maxUnits: 4 })).toEqual({ units: 4, lifetimeMs: 500, leadMs: 0 });
    // Exactly max_units: the whole lifetime (8 units in 1100 ms, though 8 would take 1000 ms at this rate).
    expect(table.want(e, 50_000, { lifetimeMs: 1100, maxUnits: 8 })).toEqual({ units: 8, lifetimeMs: 1100, leadMs: 0 });
    expect(table.want(e, 50_000, { lifetimeMs: 0, maxUnits: 1000 }).units).toBe(0);
    expect(table.want(e, 50_000, { lifetimeMs: -1000, maxUnits: 1000 }).units).toBe(0);
    // The round trip comes first: the units are those spent in the rest of the lifetime, which is the lead plus it.
    // The lead is the round trip and four of its deviations: a first one of 49.5 ms deviates by half of it.
    table.observeRtt(49.5);
    expect(table.want(e, 50_000, { lifetimeMs: 1000, maxUnits: 1000 })).toEqual({
      units: 6,
      lifetimeMs: 851 + 149,
      leadMs: 149,
    });
    expect(table.want(e, 50_000, { lifetimeMs: 1000, maxUnits: 4 })).toEqual({
      units: 4,
      lifetimeMs: 149 + 500,
      leadMs: 149,
    });
    // Round trips that keep to 49.5 ms: the deviation dies away, and the lead with it.
    for (let i = 0; i < 40; i++) table.observeRtt(49.5);
    expect(table.want(e, 50_000, { lifetimeMs: 1000, maxUnits: 1000 })).toEqual({
      units: 7,
      lifetimeMs: 950 + 50,
      leadMs: 50,
    });
    // Round trips of 20 and 80 ms in turn: a lease arriving in 80 ms still has its spending time.
    for (let i = 0; i < 40; i++) table.observeRtt(i % 2 === 0 ? 20 : 80);
    const { leadMs } = table.want(e, 50_000, { lifetimeMs: 1000, maxUnits: 1000 });
    expect(leadMs).toBeGreaterThan(80 + 50);
    expect(leadMs).toBeLessThan(80 + 4 * 30);
  });

  it("refills two round trips (at least 5 ms each) before the held units or time run out, counting only leases not yet expired", () => {
    const table = new LeaseTable();
    table.touch("k", SPECS, 0, []);
    const e = table.touch("k", SPECS, 0, []); // two requests in 100 ms: 1 unit in the 10 ms lead
    table.add(e, { lease: lease(2, 100), sentAt: 0, issuedAt: 0, limits: LIMITS }); // expires at 97
    expect(table.needsRefill(e, 0, ask(10))).toBe(false);
    table.spend(e, 1, 0);
    expect(table.needsRefill(e, 0, ask(10))).toBe(true); // 1 left: what the lead uses
    const g = table.touch("g", SPECS, 0, []);
    table.add(g, { lease: lease(50, 100), sentAt: 0, issuedAt: 0, limits: LIMITS }); // expires at 97
    expect(table.needsRefill(g, 86, ask(10))).toBe(false); // 11 ms left
    expect(table.needsRefill(g, 87, ask(10))).toBe(true); // 10 ms left
    // A big lease that has just expired counts for nothing, whatever its units.
    const f = table.touch("f", SPECS, 0, []);
    table.add(f, { lease: lease(100, 100), sentAt: 0, issuedAt: 0, limits: LIMITS }); // expires at 97
    table.add(f, { lease: lease(5, 200), sentAt: 0, issuedAt: 0, limits: LIMITS }); // expires at 195
    expect(table.needsRefill(f, 96, ask(10))).toBe(false);
    expect(table.needsRefill(f, 185, ask(10))).toBe(true);
    table.observeRtt(50); // slower round trips: a longer lead
    expect(table.needsRefill(f, 96, ask(10))).toBe(true);
  });

  it("sizes the refill's unit lead from the key's rate: a hot key refills while it still holds units", () => {
    const table = new LeaseTable();
    const e = table.touch("hot", SPECS, 0, []);
    e.burst = 101; // 100 requests in the last 100 ms besides this one: one a millisecond
    table.add(e, { lease: lease(50, 1000), sentAt: 0, issuedAt: 0, limits: LIMITS }); // expires at 979: time is no reason to refill
    table.spend(e, 39, 0);
    // The 10 ms lead uses 10 units at this rate.
    expect(table.needsRefill(e, 0, ask(10))).toBe(false); // 11 left
    table.spend(e, 1, 0);
    expect(table.needsRefill(e, 0, ask(10))).toBe(true); // 10 left
  });

  it("counts no units of a lease expiring at exactly now, even with a live one that holds few", () => {
    const table = new LeaseTable();
    table.touch("k", SPECS, 0, []);
    const e = table.touch("k", SPECS, 0, []); // two requests in 100 ms: 1 unit in the 10 ms lead
    table.add(e, { lease: lease(100, 100), sentAt: 0, issuedAt: 0, limits: LIMITS }); // expires at 97
    table.add(e, { lease: lease(1, 1000), sentAt: 0, issuedAt: 0, limits: LIMITS }); // expires at 979
    expect(table.needsRefill(e, 96, ask(10))).toBe(false);
    expect(table.needsRefill(e, 97, ask(10))).toBe(true); // only the live lease's 1 unit counts
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
    const unused: KeySettlements[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, { lease: lease(1, 100, [1]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.add(e, { lease: lease(1, 100, [2]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    table.add(e, { lease: lease(1, 100, [3]), sentAt: 0, issuedAt: 0, limits: LIMITS });
    expect([1, 2, 3].map(() => table.spend(e, 1, 0)?.recordedAt[0])).toEqual([1, 2, 3]);
  });

  it("keeps every expired lease's units for the key's next call; an idle key's go back on a call of their own only near a limit", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    const e = table.touch("k", SPECS, 0, unused);
    const far: LimitStatus[] = [{ remaining: 900, resetMs: 1000, exceeded: false }];
    const near: LimitStatus[] = [{ remaining: 400, resetMs: 1000, exceeded: false }];
    table.add(e, { lease: lease(2, 100, [1]), sentAt: 0, issuedAt: 0, limits: far });
    table.add(e, { lease: lease(3, 100, [2]), sentAt: 10, issuedAt: 10, limits: near });
    table.add(e, { lease: lease(4, 200, [3]), sentAt: 0, issuedAt: 0, limits: far });
    const later = [{ limit: 1000, windowMs: 1000 }];
    table.touch("k", later, 150, unused);
    expect(e.limits).toBe(later);
    expect(table.spend(e, 1, 150)?.recordedAt).toEqual([3]);
    expect(e.expired.map((h) => [h.recordedAt[0], h.left])).toEqual([
      [1, 2],
      [2, 3],
    ]);
    // Not idle yet: nothing goes on its own.
    table.idle(150 + IDLE_RETURN_MS - 1, unused);
    expect(unused).toEqual([]);
    // Idle: only the lease granted with less than half of a limit left goes back (400 + 3 of 1000).
    table.idle(150 + IDLE_RETURN_MS, unused);
    expect(unused).toEqual([
      { name: "k", limits: later, settle: [{ recordedAt: [2], issuedAt: 10, used: 0, lastUseMs: 0, unused: 3 }] },
    ]);
    // Far from every limit, the expired leases' unused units wait for the key's own next call (no call of their
    // own), which gives them back first: `RateLimit` counts them as coming back meanwhile.
    expect(e.expired.map((h) => [h.recordedAt[0], h.left])).toEqual([
      [1, 2],
      [3, 3],
    ]);
    expect(table.spend(e, 1, 400)).toBeNull();
    expect(table.spare(e, 400, null)).toBe(5);
    expect(table.settle(e, 400).map((x) => [x.recordedAt[0], x.unused])).toEqual([
      [1, 2],
      [3, 3],
    ]);
    expect(e.held).toEqual([]);
  });

  it("holding: the units of the leases still valid under the limits applied", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    const vip: NamedLimit[] = [{ limit: 500, windowMs: 1000, tickMs: 1, name: "vip" }];
    table.add(e, { lease: lease(5, 200, [1]), sentAt: 10, issuedAt: 10, limits: LIMITS }); // expires at 10 + 200 − 5 = 205
    table.add(e, { lease: lease(3, 100, [2]), sentAt: 20, issuedAt: 20, limits: LIMITS }); // expires at 117
    table.add(e, { lease: lease(7, 300, [3]), sentAt: 30, issuedAt: 30, limits: LIMITS, applied: vip });
    expect(table.holding(e, 50, null)).toBe(8);
    expect(table.holding(e, 50, vip)).toBe(7);
    // At its expiry a lease no longer counts.
    expect(table.holding(e, 117, null)).toBe(5);
    expect(table.holding(e, 205, null)).toBe(0);
  });

  it("keeps the object's latest decided answer about a key, whatever order the answers arrive in", () => {
    const table = new LeaseTable();
    const e = table.touch("k", SPECS, 0, []);
    const view = (decidedAt: number) => ({ limits: LIMITS, decidedAt, sentAt: decidedAt - 5, applied: null });
    table.saw(e, view(20));
    table.saw(e, view(10)); // decided earlier, arrived later
    expect(e.view?.decidedAt).toBe(20);
    table.saw(e, view(20));
    table.saw(e, view(30));
    expect(e.view?.decidedAt).toBe(30);
  });

  it("an idle key is near a limit when some limit had less than half left with the lease's units counted", () => {
    const two = [
      { limit: 1000, windowMs: 1000 },
      { limit: 100, windowMs: 60_000 },
    ];
    const returned = (limits: LimitStatus[], left: number) => {
      const table = new LeaseTable();
      const unused: KeySettlements[] = [];
      const e = table.touch("k", two, 0, unused);
      table.add(e, { lease: lease(left, 100, [1, 2]), sentAt: 0, issuedAt: 0, limits });
      table.idle(100 + IDLE_RETURN_MS, unused);
      return unused.flatMap((k) => k.settle.map((x) => x.unused));
    };
    const status = (remaining: number) => ({ remaining, resetMs: 1000, exceeded: false });
    // The second limit alone is near: 40 + 5 of 100.
    expect(returned([status(900), status(40)], 5)).toEqual([5]);
    // Exactly half left (480 + 20 of 1000, 30 + 20 of 100) is not near; the lease's units count as left.
    expect(returned([status(480), status(30)], 20)).toEqual([]);
    expect(returned([status(479), status(60)], 20)).toEqual([20]);
  });

  it("makes room by dropping the oldest key with no call in flight", () => {
    const table = new LeaseTable(2);
    const unused: KeySettlements[] = [];
    const busy = table.touch("busy", SPECS, 0, unused);
    table.calling(busy, 10, 0);
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
    const unused: KeySettlements[] = [];
    table.drop("nobody", unused);
    table.dropOthers("nobody", null, unused);
    expect([table.size, unused]).toEqual([0, []]);
  });

  it("dropOthers keeps the leases granted under the limits now applied and hands back the others' unused units", () => {
    const table = new LeaseTable();
    const unused: KeySettlements[] = [];
    const vip: NamedLimit[] = [{ limit: 500, windowMs: 1000, tickMs: 1, name: "vip" }];
    const e = table.touch("k", SPECS, 0, unused);
    table.add(e, { lease: lease(2, 100, [1]), sentAt: 0, issuedAt: 0, limits: LIMITS }); // the plan's
    table.add(e, { lease: lease(3, 100, [2]), sentAt: 0, issuedAt: 0, limits: LIMITS, applied: vip });
    table.add(e, { lease: lease(4, 100, [3]), sentAt: 0, issuedAt: 0, limits: LIMITS }); // the plan's
    table.add(e, {
      lease: lease(5, 100, [4]),
      sentAt: 0,
      issuedAt: 0,
      limits: LIMITS,
      applied: [{ ...(vip[0] as NamedLimit) }],
    }); // equal to vip
    table.spend(e, 2, 0); // the first plan lease is used up
    table.dropOthers("k", vip, unused);
    expect(e.held.map((h) => h.recordedAt[0])).toEqual([2, 4]);
    expect(unused.flatMap((k) => k.settle)).toEqual([
      { recordedAt: [3], issuedAt: 0, used: 0, lastUseMs: 0, unused: 4 },
      { recordedAt: [1], issuedAt: 0, used: 2, lastUseMs: 0, unused: 0 },
    ]);
    table.dropOthers("k", null, unused);
    expect(e.held).toEqual([]);
    expect(unused.flatMap((k) => k.settle.map((x) => x.unused))).toEqual([4, 0, 5, 3]);
    expect(table.get("k")).toBe(e); // the key itself stays
  });

  it("sameOverride compares override lists field by field (null: the plan's)", () => {
    const a: NamedLimit = { limit: 10, windowMs: 1000, tickMs: 1, name: "x" };
    expect(sameOverride(null, null)).toBe(true);
    expect(sameOverride([a], [{ ...a }])).toBe(true);
    expect(sameOverride([a], null)).toBe(false);
    expect(sameOverride(null, [a])).toBe(false);
    expect(sameOverride([a], [a, a])).toBe(false);
    expect(sameOverride([a, a], [a])).toBe(false);
    expect(sameOverride([], [])).toBe(true);
    for (const change of [{ limit: 11 }, { windowMs: 2000 }, { tickMs: 2 }, { name: "y" }]) {
      expect(sameOverride([a], [{ ...a, ...change }]), JSON.stringify(change)).toBe(false);
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
        const unused: KeySettlements[] = [];
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
            table.add(e, { lease: lease(s.units, s.lifetimeMs, [id]), sentAt, issuedAt: sentAt, limits: LIMITS });
            model.set(id, { left: s.units, expiresAt: sentAt + s.lifetimeMs - leaseMargin(s.lifetimeMs) });
            added += s.units;
            continue;
          }
          const held = table.spend(e, s.cost, now);
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
        // Every unit was spent, is still held, or goes back, once, after its lease expired.
        const settled = table.settle(e, now);
        expect(unused).toEqual([]);
        for (const u of settled) {
          const m = model.get(u.recordedAt[0] as number);
          expect(m !== undefined && (u.unused === 0 || (m.expiresAt <= now && m.left === u.unused))).toBe(true);
        }
        const held = e.held.reduce((sum, h) => sum + h.left, 0);
        const returned = settled.reduce((sum, u) => sum + u.unused, 0);
        const used = settled.reduce((sum, u) => sum + u.used, 0);
        expect(spent + held + returned).toBe(added);
        // Every use is settled, once.
        expect(used).toBe(spent);
        expect(table.settle(e, now).reduce((sum, u) => sum + u.used, 0)).toBe(0);
        expect(e.held.every((h) => h.left >= 0)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
