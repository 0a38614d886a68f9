// What an isolate reports of its leases (src/client/settlement.ts) and what it counts of them (src/client/held.ts),
// at their edges: which leases a call, an idle key or a dropped key settles; uses grouped by the milliseconds they fell in; the units coming
// back that `RateLimit` and the expected lease share count; what expiry keeps.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { expire, leaseShare, spendFrom, unitsReturning } from "../../src/client/held.ts";
import { type KeyLeases, LeaseTable } from "../../src/client/leases.ts";
import { FAR_USE_GROUPS, giveUp, settleForCall, settleIdle } from "../../src/client/settlement.ts";
import type { Lease, LimitStatus } from "../../src/core/index.ts";
import { MAX_USE_GROUPS } from "../../src/core/limits.ts";

const SPECS = [{ limit: 1000, windowMs: 1000 }];
const far: LimitStatus[] = [{ remaining: 900, resetMs: 1000, exceeded: false }];
const near: LimitStatus[] = [{ remaining: 100, resetMs: 1000, exceeded: false }];
const lease = (units: number, lifetimeMs: number, at: number): Lease => ({
  units,
  lifetimeMs,
  recordedAt: [at],
});

/** A key with no rate here yet (nothing counted near a limit by its rate) and the given leases added at 0. */
function key(...leases: [units: number, lifetimeMs: number, limits: LimitStatus[]][]) {
  const table = new LeaseTable();
  const e = table.touch("k", SPECS, 0, []) as KeyLeases;
  e.score = 0;
  e.burst = 0;
  leases.forEach(([units, life, limits], i) => {
    table.add(e, { lease: lease(units, life, 5000 + i), sentAt: 0, issuedAt: 0, limits });
  });
  return { table, e };
}

describe("settleForCall", () => {
  it("far from every limit and not deciding: an expired lease is given up, its uses re-dated; a valid one's are not", () => {
    const { e } = key([3, 100, far], [2, 100, far], [4, 5000, far]);
    spendFrom(e.held[0] as never, 3, 10); // used up: nothing to give back, its uses re-dated all the same
    spendFrom(e.held[1] as never, 1, 10);
    spendFrom(e.held[2] as never, 1, 10);
    // Left at their records (ahead of now), the expired leases' uses would count in a later burst's windows.
    expect(settleForCall(e, 200).map((s) => [s.recordedAt[0], s.used, s.unused])).toEqual([
      [5000, 3, 0],
      [5001, 1, 1],
    ]);
    expect(e.expired).toEqual([]);
    // Deciding a request: every use is re-dated, a valid lease's too.
    expect(settleForCall(e, 200, true).map((s) => [s.recordedAt[0], s.used, s.unused])).toEqual([[5002, 1, 0]]);
    expect(settleForCall(e, 201, true)).toEqual([]);
  });

  it("re-dates in FAR_USE_GROUPS groups far from every limit, in MAX_USE_GROUPS near one", () => {
    const uses = (limits: LimitStatus[]) => {
      const { e } = key([20, 5000, limits]);
      for (const at of [10, 20, 400, 410, 800]) spendFrom(e.held[0] as never, 1, at);
      return settleForCall(e, 900, true).map((s) => [s.used, s.lastUseMs]);
    };
    expect(FAR_USE_GROUPS).toBe(2);
    // Spent: 10 into 20 merged at the fifth group (10 unit-ms; 400 into 410 ties, the earlier pair goes first).
    expect(MAX_USE_GROUPS).toBe(4);
    expect(uses(near)).toEqual([
      [2, 20],
      [1, 400],
      [1, 410],
      [1, 800],
    ]);
    // Far: then 400 into 410 (10), then 410 into 800 (2 × 390, a tie with 20 into 410: the latest goes first).
    expect(uses(far)).toEqual([
      [2, 20],
      [3, 800],
    ]);
  });
});

describe("uses in groups", () => {
  it("property: every settled unit is dated at or after its own use, all counted once, in at most the groups allowed", () => {
    const use = fc.record({ gapMs: fc.integer({ min: 0, max: 300 }), cost: fc.integer({ min: 1, max: 3 }) });
    fc.assert(
      fc.property(
        fc.array(use, { minLength: 1, maxLength: 40 }),
        fc.boolean(),
        fc.boolean(),
        (uses, nearby, refundOne) => {
          const { table, e } = key([1000, 60_000, nearby ? near : far]);
          const h = e.held[0] as Parameters<typeof spendFrom>[0];
          const times: number[] = []; // each unit's use time, in order
          let now = 0;
          for (const u of uses) {
            now += u.gapMs;
            spendFrom(h, u.cost, now);
            for (let i = 0; i < u.cost; i++) times.push(now);
          }
          // A refund takes from the earliest units first (leases.ts, `unspend`).
          if (refundOne && table.unspend(e, h, 1)) times.shift();
          const settled = settleForCall(e, now + 1, true);
          expect(settled.length).toBeLessThanOrEqual(nearby ? MAX_USE_GROUPS : FAR_USE_GROUPS);
          // In order, each group's units are the next ones used, and its date is at or after every one of them.
          let next = 0;
          for (const s of settled) {
            for (let i = 0; i < s.used; i++) expect(times[next++]).toBeLessThanOrEqual(s.lastUseMs);
          }
          expect(next).toBe(times.length);
        },
      ),
    );
  });
});

describe("settleIdle", () => {
  it("near a limit: settles the uses of a lease still valid without giving its units back; an expired one's too", () => {
    const { e } = key([5, 5000, near], [3, 100, near], [2, 100, far]);
    const valid = e.held.find((h) => h.expiresAt > 1000);
    spendFrom(valid as never, 2, 10);
    const settled = settleIdle(e, 2000);
    expect(settled?.settle.map((s) => [s.recordedAt[0], s.used, s.unused])).toEqual([
      [5001, 0, 3],
      [5000, 2, 0],
    ]);
    expect(valid?.left).toBe(3);
    // The far expired lease with units to give back waits for the key's own call; nothing else is left to settle.
    expect(e.expired.map((h) => h.recordedAt[0])).toEqual([5002]);
    expect(settleIdle(e, 2001)).toBeNull();
  });

  it("drops a far expired lease with nothing to give back", () => {
    const { e } = key([2, 100, far]);
    spendFrom(e.held[0] as never, 2, 10);
    expect(settleIdle(e, 2000)).toBeNull();
    expect(e.expired).toEqual([]);
  });
});

describe("giveUp", () => {
  it("settles each lease's uses and unused units, nothing for a lease with neither, and empties them", () => {
    const { e } = key([2, 5000, far], [3, 5000, far]);
    spendFrom(e.held[0] as never, 2, 10);
    spendFrom(e.held[0] as never, 0, 10);
    const given = giveUp(e, e.held);
    expect(given?.settle.map((s) => [s.used, s.unused])).toEqual([
      [2, 0],
      [0, 3],
    ]);
    expect(e.held.map((h) => h.left)).toEqual([0, 0]);
    expect(giveUp(e, e.held)).toBeNull();
  });
});

describe("held", () => {
  it("spendFrom: a use in a later millisecond starts a new group; a use in the same one joins the last", () => {
    const { e } = key([10, 5000, far]);
    const h = e.held[0] as Parameters<typeof spendFrom>[0];
    spendFrom(h, 1, 0);
    spendFrom(h, 1, 0);
    expect([h.earlier ?? null, h.used]).toEqual([null, 2]);
    spendFrom(h, 1, 1);
    expect([h.earlier, h.used, h.lastUseAt]).toEqual([[{ used: 2, lastUseAt: 0 }], 1, 1]);
    // Past the most groups the cheapest neighbours merge: here the last earlier group into the latest.
    spendFrom(h, 1, 500);
    spendFrom(h, 1, 501);
    expect([h.earlier, h.used, h.left]).toEqual([
      [
        { used: 2, lastUseAt: 0 },
        { used: 1, lastUseAt: 1 },
        { used: 1, lastUseAt: 500 },
      ],
      1,
      5,
    ]);
    // A fifth group: 500 into 501 and 501 into the latest (502) both cost 1 unit-ms; a tie merges into the latest.
    spendFrom(h, 1, 502);
    expect([h.earlier, h.used]).toEqual([
      [
        { used: 2, lastUseAt: 0 },
        { used: 1, lastUseAt: 1 },
        { used: 1, lastUseAt: 500 },
      ],
      2,
    ]);
  });

  it("unitsReturning: expired leases under the limits applied, a held lease from the moment it expires", () => {
    const { table, e } = key([2, 100, far], [3, 300, far]);
    const override = [{ limit: 5, windowMs: 1000, tickMs: 1, name: "o" }];
    table.add(e, { lease: lease(7, 100, 6000), sentAt: 0, issuedAt: 0, limits: far, applied: override });
    const at = (e.held[0]?.expiresAt ?? 0) as number;
    expect(unitsReturning(e, at - 1, null)).toBe(0);
    expect(unitsReturning(e, at, null)).toBe(2);
    expect(unitsReturning(e, at, override)).toBe(7);
    expire(e, at);
    expect(unitsReturning(e, at, null)).toBe(2);
    // Expiry keeps a lease with units to give back or uses to settle, and drops one with neither.
    const { e: f } = key([1, 100, far], [1, 100, far]);
    spendFrom(f.held[0] as never, 1, 0);
    (f.held[0] as { used: number }).used = 0;
    expire(f, 1000);
    expect(f.expired.map((h) => h.recordedAt[0])).toEqual([5001]);
  });

  it("leaseShare counts units held here and unused ones on their way back as free", () => {
    const { table, e } = key([200, 100, far]);
    table.saw(e, {
      limits: [{ remaining: 400, resetMs: 1000, exceeded: false }],
      decidedAt: 0,
      sentAt: 0,
      applied: null,
    });
    // 400 + 200 held of 1000: 0.6 free, scaled between 1/4 and 3/4.
    expect(leaseShare(e, 0)).toBeCloseTo((0.6 - 0.25) / 0.5);
    // Expired, the 200 come back with the next call: still free as the object will know.
    expect(leaseShare(e, 1000)).toBeCloseTo((0.6 - 0.25) / 0.5);
    e.givingBack = 100;
    expect(leaseShare(e, 1000)).toBeCloseTo((0.7 - 0.25) / 0.5);
  });
});
