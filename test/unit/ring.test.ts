/** @module Rings through the key log: memory growth, storage keys, lease give-backs and forgetting, at their edges. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { KeyLog, type SlotRow } from "../../src/core/index.ts";
import { Ring } from "../../src/core/ring.ts";

/** Decisions of cost 1 at each time, as allowed/denied. */
const allowed = (log: KeyLog, times: number[]) => times.map((t) => log.take(t, { cost: 1 }).decision.allowed);

describe("Ring memory", () => {
  it("allocates at most 16 slots up front, a power of two no larger than needed, and doubles as slots arrive", () => {
    expect(new KeyLog([{ limit: 1, windowMs: 1000 }]).rings[0]?.allocated).toBe(1);
    expect(new KeyLog([{ limit: 3, windowMs: 1000 }]).rings[0]?.allocated).toBe(4);
    expect(new KeyLog([{ limit: 4, windowMs: 1000 }]).rings[0]?.allocated).toBe(4);
    const log = new KeyLog([{ limit: 1_000_000, windowMs: 1000 }]);
    const ring = log.rings[0];
    expect(ring?.capacity).toBe(1033);
    expect(ring?.allocated).toBe(16);
    for (let t = 0; t < 16; t++) log.take(t, { cost: 1 });
    expect(ring?.allocated).toBe(16); // full, not grown
    log.take(16, { cost: 1 });
    expect(ring?.allocated).toBe(32);
    for (let t = 17; t < 100; t++) log.take(t, { cost: 1 });
    expect([ring?.size, ring?.allocated]).toEqual([100, 128]);
  });

  it("keeps every slot and its order through growth while the ring wraps", () => {
    const log = new KeyLog([{ limit: 40, windowMs: 100 }]);
    // Fill to 10 slots, let 8 leave, then grow past 16 with the ring's start in the middle of its arrays.
    for (let t = 0; t < 10; t++) log.take(t, { cost: 1 });
    for (let t = 108; t < 140; t++) log.take(t, { cost: 1 });
    const rows = log.rows();
    expect(rows.map((r) => r.ts)).toEqual(Array.from({ length: 32 }, (_, i) => 108 + i));
    expect(new Set(rows.map((r) => r.key)).size).toBe(32);
    // (40, 140]: the 32 slots from 108 count; 8 more fit, then the oldest must leave first.
    expect(log.peek(140).limits[0]).toEqual({ remaining: 8, resetMs: 68, exceeded: false });
    const d = log.take(140, { cost: 9 }).decision;
    expect([d.allowed, d.retryAfterMs]).toEqual([false, 68]);
  });
});

describe("storage keys", () => {
  it("after a restore, hands out exactly the keys no stored row holds (key 0 too)", () => {
    const limits = [{ limit: 3, windowMs: 1000 }];
    const rows: SlotRow[] = [
      { ring: 1, key: 1, ts: 10, cost: 1 },
      { ring: 1, key: 2, ts: 20, cost: 1 },
    ];
    const { log, rewrite } = KeyLog.restore(limits, rows, 30);
    expect(rewrite).toBe(false);
    expect(log.take(30, { cost: 1 }).writes).toEqual([{ ring: 1, key: 0, ts: 30, cost: 1 }]);
    const again = KeyLog.restore(limits, [rows[0] as SlotRow, { ring: 1, key: 0, ts: 20, cost: 1 }], 30).log;
    expect(again.take(30, { cost: 1 }).writes).toEqual([{ ring: 1, key: 2, ts: 30, cost: 1 }]);
  });

  it("a lease given back in full frees its slot and its key: leasing and giving back forever never runs out", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 40 }]);
    const capacity = log.rings[0]?.capacity as number;
    for (let t = 0; t < 3 * capacity; t++) {
      const lease = log.take(t, { cost: 0, leaseUnits: 5, leaseMs: 1 }).decision.lease;
      expect(lease?.units).toBe(5);
      expect(log.giveBack(lease?.recordedAt ?? [], 5)).toEqual([expect.objectContaining({ cost: 0 })]);
    }
    expect(log.rings[0]?.size).toBe(0);
  });

  it("a lease given back while an older slot stays frees its key too: the ring never runs out of keys", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 60_000 }]);
    const capacity = log.rings[0]?.capacity as number;
    log.take(0, { cost: 1 }); // counts for the whole test: the ring is never empty
    for (let t = 1; t < 3 * capacity; t++) {
      const lease = log.take(t, { cost: 0, leaseUnits: 5, leaseMs: 1 }).decision.lease;
      expect(log.giveBack(lease?.recordedAt ?? [], 5)).toEqual([expect.objectContaining({ cost: 0 })]);
    }
    expect(log.rows().map((r) => [r.key, r.ts])).toEqual([[0, 0]]);
    expect(log.take(3 * capacity, { cost: 1 }).writes[0]?.key).toBeLessThan(capacity);
  });

  it("a ring whose slots have all left goes back to its initial memory, and its keys start again from 0", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 100 }]);
    for (let t = 0; t < 100; t++) log.take(t, { cost: 1 });
    expect(log.rings[0]?.allocated).toBe(128);
    expect(log.peek(300).limits[0]?.remaining).toBe(1000);
    expect([log.rings[0]?.size, log.rings[0]?.allocated]).toEqual([0, 16]);
    expect(log.take(300, { cost: 1 }).writes[0]?.key).toBe(0);
  });
});

describe("giving back a lease", () => {
  it("removes the slot from the middle of the ring and keeps the others, oldest first", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 1000 }]);
    log.take(0, { cost: 1 });
    log.take(5, { cost: 2 });
    const lease = log.take(10, { cost: 0, leaseUnits: 7, leaseMs: 20 }).decision.lease;
    expect(lease?.recordedAt).toEqual([30]);
    log.take(11, { cost: 3 }); // recorded at its own time, before the lease's slot
    const second = log.take(12, { cost: 0, leaseUnits: 4, leaseMs: 40 }).decision.lease;
    log.take(13, { cost: 1 });
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([
      [0, 1],
      [5, 2],
      [11, 3],
      [13, 1],
      [30, 7],
      [52, 4],
    ]);
    expect(log.giveBack([30], 7)).toEqual([expect.objectContaining({ ts: 30, cost: 0 })]);
    log.giveBack(second?.recordedAt ?? [], 3);
    log.giveBack([11], 5); // an unknown give-back can only take what the slot holds
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([
      [0, 1],
      [5, 2],
      [13, 1],
      [52, 1],
    ]);
    expect(log.peek(50).limits[0]?.remaining).toBe(1000 - 5);
  });

  it("takes units back only from the limits whose window still holds the slot", () => {
    // One ring, two windows: by 200 the slot at 3 has left the 100 ms window but not the 10 s one.
    const log = new KeyLog([
      { limit: 32, windowMs: 100 },
      { limit: 1000, windowMs: 10_000 },
    ]);
    const lease = log.take(0, { cost: 0, leaseUnits: 2, leaseMs: 3 }).decision.lease;
    expect(lease).toEqual({ units: 2, lifetimeMs: 3, recordedAt: [3] });
    log.take(150, { cost: 30 });
    expect(log.peek(200).limits.map((l) => l.remaining)).toEqual([2, 968]);
    log.giveBack([3], 2);
    expect(log.peek(200).limits.map((l) => l.remaining)).toEqual([2, 970]);
    expect(allowed(log, [200, 200, 200])).toEqual([true, true, false]);
    // The short window's oldest slot is now the one at 150: it leaves at 250.
    expect(log.take(249, { cost: 1 }).decision.retryAfterMs).toBe(1);
  });

  it("removes a slot that is the oldest of a short window, with an older slot kept by a long one", () => {
    const log = new KeyLog([
      { limit: 32, windowMs: 100 },
      { limit: 1000, windowMs: 10_000 },
    ]);
    log.take(0, { cost: 1 }); // at 0: only the long window holds it from 100 on
    const lease = log.take(150, { cost: 0, leaseUnits: 2, leaseMs: 3 }).decision.lease;
    expect(lease?.recordedAt).toEqual([153]);
    log.take(160, { cost: 5 }); // at 160: a slot after the lease's
    log.giveBack([153], 2);
    expect(log.peek(200).limits.map((l) => l.remaining)).toEqual([27, 994]);
    // The slot at 0 never counts for the short window again, even once the slot at 160 has left it.
    expect(log.peek(255).limits.map((l) => l.remaining)).toEqual([27, 994]);
    expect(log.peek(260).limits.map((l) => l.remaining)).toEqual([32, 994]);
  });
});

describe("giving back many leases", () => {
  it("finds each lease's slot wherever it is, keeps the rest intact, and shrinks once the last is gone", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 60_000 }]); // a 1 ms tick
    const leases = Array.from({ length: 20 }, (_, t) => {
      const lease = log.take(t, { cost: 0, leaseUnits: 3, leaseMs: 1 }).decision.lease;
      return lease?.recordedAt ?? [];
    });
    expect([log.rings[0]?.size, log.rings[0]?.allocated]).toEqual([20, 32]);
    // Every other one from the second (left of the first midpoint), then the rest.
    for (let i = 1; i < 20; i += 2) expect(log.giveBack(leases[i] as number[], 3)).toHaveLength(1);
    const left = log.rows();
    expect(left.map((r) => r.ts)).toEqual(Array.from({ length: 10 }, (_, i) => 2 * i + 1));
    expect(new Set(left.map((r) => r.key)).size).toBe(10);
    expect(log.rings[0]?.allocated).toBe(32);
    for (let i = 0; i < 20; i += 2) expect(log.giveBack(leases[i] as number[], 3)).toHaveLength(1);
    expect([log.rings[0]?.size, log.rings[0]?.allocated]).toEqual([0, 16]);
  });
});

describe("forget (an operator's reset)", () => {
  it("drops slots at or before now (at now too), keeps later ones, and frees their keys", () => {
    const log = new KeyLog([{ limit: 3, windowMs: 1000 }]);
    expect(allowed(log, [0, 10, 20, 20])).toEqual([true, true, true, false]);
    expect(log.forget(20)).toBe(20);
    expect(log.rows()).toEqual([]);
    expect(log.peek(20).limits[0]).toEqual({ remaining: 3, resetMs: 0, exceeded: false });
    // The ring can fill to its capacity again: every key came back.
    expect(allowed(log, [21, 22, 23, 24])).toEqual([true, true, true, false]);
    expect(new Set(log.rows().map((r) => r.key))).toEqual(new Set([0, 1, 2]));
  });

  it("keeps a future slot, and the limits still count it", () => {
    const log = new KeyLog([{ limit: 64, windowMs: 1000 }]);
    log.take(0, { cost: 10 });
    log.take(5, { cost: 1, leaseUnits: 4, leaseMs: 31 }); // recorded at 36
    log.forget(35);
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([[36, 5]]);
    expect(log.peek(35).limits[0]?.remaining).toBe(59);
    log.forget(36);
    expect(log.peek(36).limits[0]?.remaining).toBe(64);
  });

  it("a full ring recording later than every slot moves its newest slot later: no slot beyond its capacity", () => {
    // 16 per 8 ms at a tick of 7: three slots (7, 14, 21 here); a lease recorded at 22 → 28 needs a fourth.
    const log = new KeyLog([{ limit: 16, windowMs: 8, tickMs: 7 }]);
    log.take(1, { cost: 1 });
    log.take(7, { cost: 0, leaseUnits: 2, leaseMs: 8 });
    log.take(9, { cost: 1 });
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([
      [7, 1],
      [14, 1],
      [21, 2],
    ]);
    const d = log.take(14, { cost: 0, leaseUnits: 2, leaseMs: 8 }).decision;
    expect(d.lease?.recordedAt).toEqual([28]);
    // The newest slot (21) moved later to 28 with the new units: later is safe; the other two stay.
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([
      [7, 1],
      [14, 1],
      [28, 4],
    ]);
    expect(log.rings[0]?.size).toBeLessThanOrEqual(log.rings[0]?.capacity ?? 0);
    // The new units count at once: 16 less the 6 recorded.
    expect(log.peek(14).limits[0]?.remaining).toBe(10);
  });

  it("moves a lease's units only to an earlier time, from a slot that exists, and never more than it holds", () => {
    const log = new KeyLog([{ limit: 64, windowMs: 1000 }]);
    const ring = log.rings[0] as NonNullable<(typeof log.rings)[0]>;
    log.take(0, { cost: 0, leaseUnits: 4, leaseMs: 500 }); // recorded at 500
    expect(ring.move(400, 10, 1, 0)).toEqual([]); // no slot at 400
    expect(ring.move(500, 500, 1, 0)).toEqual([]); // not earlier
    expect(ring.move(500, 600, 1, 0)).toEqual([]);
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([[500, 4]]);
    const rows = ring.move(500, 10, 9, 0); // all four, not nine
    expect(rows.map((r) => [r.ts, r.cost])).toEqual([
      [500, 0],
      [10, 4],
    ]);
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([[10, 4]]);
    expect(log.peek(20).limits[0]?.remaining).toBe(60);
    expect(log.peek(1010).limits[0]?.remaining).toBe(64);
  });
});

describe("recording before a short window (a use settled after the fact)", () => {
  // One ring, two windows (both at a 1 ms tick): 30 a second and 300 a minute.
  const TWO = [
    { limit: 30, windowMs: 1000 },
    { limit: 300, windowMs: 60_000 },
  ];

  it("a lease's use that left the second's window counts in the minute's only, from the settlement on", () => {
    const log = new KeyLog(TWO);
    // Leased at 0 for 400 ms: its 5 units recorded at 400; all used by 100, settled at 1_300.
    const lease = log.take(0, { cost: 0, leaseUnits: 5, leaseMs: 400 }).decision.lease;
    expect(lease?.recordedAt).toEqual([400]);
    // Until settled, they count where they are recorded: in the second's window (300, 1_300] too.
    expect(log.peek(1_300).limits.map((l) => l.remaining)).toEqual([25, 295]);
    log.take(1_300, { cost: 3 });
    expect(log.peek(1_300).limits.map((l) => l.remaining)).toEqual([22, 292]);
    const rows = log.settle(1_300, { recordedAt: [400], issuedAt: 0, used: 5, lastUseMs: 100, unused: 0 });
    // Moved to 104 (the use, a millisecond and the margin of 3): before the second's window (300, 1300], inside the minute.
    expect(rows.map((r) => [r.ts, r.cost])).toEqual([
      [400, 0],
      [104, 5],
    ]);
    expect(log.peek(1_300).limits.map((l) => l.remaining)).toEqual([27, 292]);
    // The second's window never counts them; the slot at 1_300 leaves it at 2_300, the minute's at 60_104 and 61_300.
    expect(log.peek(2_299).limits.map((l) => l.remaining)).toEqual([27, 292]);
    expect(log.peek(2_300).limits.map((l) => l.remaining)).toEqual([30, 292]);
    expect(log.peek(60_104).limits.map((l) => l.remaining)).toEqual([30, 297]);
    expect(log.peek(61_300).limits.map((l) => l.remaining)).toEqual([30, 300]);
    expect(log.rows()).toEqual([]);
  });

  it("a use whose record has left the second's window too stays where it is: no rows for the minute alone", () => {
    const log = new KeyLog(TWO);
    log.take(0, { cost: 0, leaseUnits: 5, leaseMs: 400 }); // recorded at 400
    // Settled at 1_500: the second's window (500, 1500] holds neither the use (104) nor the record (400).
    expect(log.settle(1_500, { recordedAt: [400], issuedAt: 0, used: 5, lastUseMs: 100, unused: 0 })).toEqual([]);
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([[400, 5]]);
    // They count in the minute until 60_400 (moved, until 60_104): later, never earlier.
    expect(log.peek(60_399).limits.map((l) => l.remaining)).toEqual([30, 295]);
    expect(log.peek(60_400).limits.map((l) => l.remaining)).toEqual([30, 300]);
  });

  it("moves a use whose record lies exactly at the second's edge no more than one further out", () => {
    const log = new KeyLog(TWO);
    log.take(0, { cost: 0, leaseUnits: 5, leaseMs: 400 }); // recorded at 400
    // At 1_400 the second's window is (400, 1400]: the record at 400 has just left it.
    expect(log.settle(1_400, { recordedAt: [400], issuedAt: 0, used: 5, lastUseMs: 100, unused: 0 })).toEqual([]);
  });

  it("judges each ring by its own shortest window", () => {
    // A 1 ms ring (a second, a minute) and a 10 ms ring (100 ms): the second is the 1 ms ring's shortest window.
    const log = new KeyLog([...TWO, { limit: 64, windowMs: 100, tickMs: 10 }]);
    const lease = log.take(0, { cost: 0, leaseUnits: 3, leaseMs: 400 }).decision.lease;
    expect(lease?.recordedAt).toEqual([400, 400]);
    // Settled at 700: the use (~104) has left the second, the record (400) has not: moved there. The 10 ms ring's
    // 100 ms window holds neither: its record stays.
    const rows = log.settle(700, { recordedAt: [400, 400], issuedAt: 0, used: 3, lastUseMs: 100, unused: 0 });
    expect(rows.map((r) => [r.ring, r.ts, r.cost])).toEqual([
      [1, 400, 0],
      [1, 104, 3],
    ]);
  });

  it("units used elsewhere long ago count in the minute's window only", () => {
    const log = new KeyLog(TWO);
    log.take(10_000, { cost: 2 });
    // Used 5 s ago (plus a millisecond and the margin): in the minute, not in the second.
    log.record(10_000, [{ ageMs: 5_000, units: 4 }]);
    expect(log.peek(10_000).limits.map((l) => l.remaining)).toEqual([28, 294]);
    expect(allowed(log, Array(28).fill(10_000))).toEqual(Array(28).fill(true));
    expect(log.take(10_000, { cost: 1 }).decision.allowed).toBe(false);
  });

  it("a full ring whose newest slot had left the short window counts it there again once moved into it", () => {
    // 2 a second and 5 a minute at 1 ms: five slots fill the ring, all older than the second by 59_950.
    const log = new KeyLog([
      { limit: 2, windowMs: 1000 },
      { limit: 5, windowMs: 60_000 },
    ]);
    expect(allowed(log, [0, 100, 1200, 1300, 2400])).toEqual([true, true, true, true, true]);
    // A use reported at 59_950 (+ a millisecond and the margin): later than every slot, the newest moves there with it.
    log.record(59_950, [{ ageMs: 0, units: 1 }]);
    expect(log.peek(59_952).limits.map((l) => l.remaining)).toEqual([0, 0]);
    // The second holds those 2 units until 60_952: nothing more fits in it before then (it granted a third before).
    expect(log.take(60_101, { cost: 1 }).decision.allowed).toBe(false);
    expect(log.take(60_952, { cost: 1 }).decision.allowed).toBe(true);
  });

  it("property: a full ring's limits count exactly the slots it holds in each window, and never record earlier", () => {
    const limits = [
      { limit: 1_000, windowMs: 10 },
      { limit: 1_000, windowMs: 100 },
    ];
    const step = fc.record({
      advance: fc.integer({ min: 0, max: 40 }),
      age: fc.integer({ min: -30, max: 99 }),
      units: fc.integer({ min: 1, max: 3 }),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }),
        fc.array(step, { minLength: 1, maxLength: 60 }),
        (capacity, steps) => {
          const ring = new Ring(1, capacity, limits);
          let now = 0;
          for (const { advance, age, units } of steps) {
            now += advance;
            ring.evict(now);
            const at = now - age;
            expect(ring.record(at, units, now).ts).toBeGreaterThanOrEqual(at);
            expect(ring.size).toBeLessThanOrEqual(capacity);
            const rows = ring.rows();
            limits.forEach((l, j) => {
              const held = rows.filter((r) => r.ts > now - l.windowMs).reduce((n, r) => n + r.cost, 0);
              expect(ring.remaining(j)).toBe(l.limit - held);
            });
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it("property: a ring's limits count exactly the slots each window holds, whatever order the times come in", () => {
    const limits = [
      { limit: 1_000, windowMs: 10 },
      { limit: 1_000, windowMs: 40 },
      { limit: 1_000, windowMs: 100 },
    ];
    const step = fc.record({
      advance: fc.integer({ min: 0, max: 30 }),
      age: fc.integer({ min: -5, max: 99 }),
      units: fc.integer({ min: 1, max: 3 }),
    });
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 60 }), (steps) => {
        const ring = new Ring(1, 1_000, limits);
        const kept: { ts: number; cost: number }[] = [];
        let now = 0;
        for (const { advance, age, units } of steps) {
          now += advance;
          ring.evict(now);
          // At `now` or later (a grant, a lease), or earlier within the longest window (a settled use).
          const at = now - age;
          ring.record(at, units, now);
          kept.push({ ts: at, cost: units });
          limits.forEach((l, j) => {
            const inWindow = kept.filter((k) => k.ts > now - l.windowMs).reduce((n, k) => n + k.cost, 0);
            expect(ring.remaining(j)).toBe(l.limit - inWindow);
          });
        }
      }),
      { numRuns: 300 },
    );
  });
});
