/** @module The sliding log against the brute-force model, plus named edge cases. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type Decision, type LimitSpec, MAX_CAPACITY, SlidingLog, type SlotRow } from "../../src/core/index.ts";
import { type Grant, Model, type ModelDecision, sweepViolation } from "./model.ts";

const limitArb = fc.record({
  limit: fc.integer({ min: 1, max: 12 }),
  windowMs: fc.integer({ min: 1, max: 40 }),
});
const limitsArb = fc.array(limitArb, { minLength: 1, maxLength: 3 });
/** A step: time moves by dt (sometimes backwards), then a request of `cost`. */
const stepArb = fc.record({
  dt: fc.oneof(
    { weight: 6, arbitrary: fc.integer({ min: 0, max: 8 }) },
    { weight: 1, arbitrary: fc.integer({ min: -10, max: 60 }) },
  ),
  cost: fc.oneof({ weight: 8, arbitrary: fc.constant(1) }, { weight: 3, arbitrary: fc.integer({ min: 1, max: 14 }) }),
});
const stepsArb = fc.array(stepArb, { minLength: 1, maxLength: 80 });

function view(d: Decision): ModelDecision {
  return {
    allowed: d.allowed,
    neverAllowed: d.neverAllowed,
    now: d.now,
    retryAfterMs: d.retryAfterMs,
    blockedUntil: d.blockedUntil,
    limits: d.limits.map((l) => ({
      remaining: l.remaining,
      resetMs: l.resetMs,
      exceeded: l.exceeded,
    })),
  };
}

/** A stand-in for the object's table: rows upserted by slot. */
class Store {
  readonly rows = new Map<number, SlotRow>();
  apply(d: Decision): void {
    if (d.write) this.rows.set(d.write.slot, { ...d.write });
  }
  replace(rows: readonly SlotRow[]): void {
    this.rows.clear();
    for (const r of rows) this.rows.set(r.slot, r);
  }
  restore(limits: readonly LimitSpec[]): SlidingLog {
    const { log, rewrite } = SlidingLog.restore(limits, this.rows.values());
    if (rewrite) this.replace(log.rows());
    return log;
  }
}

/** A model whose history is exactly the rows a store holds. */
function seeded(store: Store, limits: readonly LimitSpec[]): Model {
  const model = new Model(limits);
  const rows = [...store.rows.values()].sort((a, b) => a.ts - b.ts);
  for (const r of rows) model.grants.push({ t: r.ts, cost: r.cost });
  return model;
}

function granted(log: SlidingLog, now: number, cost = 1): boolean {
  return log.decide(now, cost).allowed;
}

describe("SlidingLog against the reference model", () => {
  it("gives the model's decision, remaining, reset, retry and block time at every step", () => {
    fc.assert(
      fc.property(limitsArb, stepsArb, fc.integer({ min: 0, max: 1e12 }), (limits, steps, start) => {
        const log = new SlidingLog(limits);
        const model = new Model(limits);
        let now = start;
        for (const { dt, cost } of steps) {
          now += dt;
          expect(view(log.decide(now, cost))).toEqual(model.decide(now, cost));
        }
        expect(sweepViolation(model.grants, limits)).toBeNull();
      }),
      { numRuns: 400 },
    );
  });

  it("keeps every window of the granted timestamps within its limit, at any start", () => {
    fc.assert(
      fc.property(limitsArb, stepsArb, (limits, steps) => {
        const log = new SlidingLog(limits);
        const grants: Grant[] = [];
        let now = 0;
        for (const { dt, cost } of steps) {
          now += dt;
          const d = log.decide(now, cost);
          if (d.allowed) grants.push({ t: d.now, cost });
        }
        expect(sweepViolation(grants, limits)).toBeNull();
      }),
      { numRuns: 400 },
    );
  });

  it("behaves identically after a rebuild from its stored rows", () => {
    fc.assert(
      fc.property(
        limitsArb,
        stepsArb,
        fc.array(fc.boolean(), { minLength: 80, maxLength: 80 }),
        (limits, steps, restarts) => {
          let log = new SlidingLog(limits);
          const model = new Model(limits);
          const store = new Store();
          let now = 1_000;
          steps.forEach(({ dt, cost }, i) => {
            if (restarts[i]) {
              log = store.restore(limits);
              model.restart();
              // Same limits: the stored layout is always reusable, so no rewrite is ever needed.
              expect(SlidingLog.restore(limits, store.rows.values()).rewrite).toBe(false);
            }
            now += dt;
            const d = log.decide(now, cost);
            store.apply(d);
            expect(view(d)).toEqual(model.decide(now, cost));
          });
          expect(store.rows.size).toBeLessThanOrEqual(log.capacity);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("keeps its decisions exact across a change of limits (capacity grows or shrinks)", () => {
    fc.assert(
      fc.property(limitsArb, limitsArb, stepsArb, stepsArb, (before, after, steps1, steps2) => {
        let log = new SlidingLog(before);
        const model = new Model(before);
        const store = new Store();
        let now = 0;
        for (const { dt, cost } of steps1) {
          now += dt;
          const d = log.decide(now, cost);
          store.apply(d);
          model.decide(now, cost);
        }
        const longestOf = (ls: readonly LimitSpec[]) => Math.max(...ls.map((l) => l.windowMs));
        // A longer window reaches back past what the old ring had to keep: then the truth is
        // what storage still holds. Otherwise it is the whole history.
        const reference = longestOf(after) <= longestOf(before) ? model : seeded(store, after);
        log = store.restore(after);
        reference.limits = after;
        reference.restart();
        const longest = after.indexOf(
          after.reduce((a, b) => (b.windowMs > a.windowMs || (b.windowMs === a.windowMs && b.limit < a.limit) ? b : a)),
        );
        for (const { dt, cost } of steps2) {
          now += dt;
          const d = log.decide(now, cost);
          store.apply(d);
          const got = view(d);
          const want = reference.decide(now, cost);
          const { limits: gotLimits, ...gotRest } = got;
          const { limits: wantLimits, ...wantRest } = want;
          expect(gotRest).toEqual(wantRest);
          expect(gotLimits[longest]).toEqual(wantLimits[longest]);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe("SlidingLog edge cases", () => {
  it("counts a grant at t for exactly W milliseconds: t > now − W", () => {
    const log = new SlidingLog([{ limit: 1, windowMs: 1000 }]);
    expect(granted(log, 5_000)).toBe(true);
    const d = log.decide(5_999);
    expect(d.allowed).toBe(false);
    expect(d.retryAfterMs).toBe(1);
    expect(d.blockedUntil).toBe(6_000);
    expect(granted(log, 6_000)).toBe(true);
  });

  it("works with a capacity of one slot, wrapping on every grant", () => {
    const log = new SlidingLog([{ limit: 1, windowMs: 10 }]);
    expect(log.capacity).toBe(1);
    for (let t = 0; t < 1_000; t += 10) {
      expect(granted(log, t)).toBe(true);
      expect(granted(log, t + 9)).toBe(false);
    }
    expect(log.allocatedSlots).toBe(1);
  });

  it("wraps around its ring many times and keeps exact counts", () => {
    const log = new SlidingLog([{ limit: 5, windowMs: 100 }]);
    let grantedCount = 0;
    for (let t = 0; t < 10_000; t++) if (granted(log, t)) grantedCount++;
    // 5 per 100 ms, back to back: grants at 0..4, 100..104, …
    expect(grantedCount).toBe(500);
    expect(log.allocatedSlots).toBe(8);
  });

  it("shares one slot among thousands of grants in the same millisecond", () => {
    const log = new SlidingLog([{ limit: 5_000, windowMs: 1_000 }]);
    for (let i = 0; i < 5_000; i++) expect(log.decide(42).allowed).toBe(true);
    const d = log.decide(42);
    expect(d.allowed).toBe(false);
    expect(d.retryAfterMs).toBe(1_000);
    expect(log.rows()).toEqual([{ slot: 0, ts: 42, cost: 5_000 }]);
    expect(log.allocatedSlots).toBe(16);
  });

  it("holds 10,000,000 per second in about 1001 slots", () => {
    const log = new SlidingLog([{ limit: 10_000_000, windowMs: 1_000 }]);
    expect(log.capacity).toBe(1_001);
    let total = 0;
    for (let t = 0; t < 5_000; t++) {
      for (let k = 0; k < 4; k++) if (log.decide(t, 2_500).allowed) total += 2_500;
    }
    expect(total).toBe(5_000 * 10_000);
    expect(log.allocatedSlots).toBe(1_024);
    expect(log.rows().length).toBe(1_000);
  });

  it("treats a clock that goes backwards as the newest slot's time", () => {
    const log = new SlidingLog([{ limit: 2, windowMs: 1_000 }]);
    expect(granted(log, 10_000)).toBe(true);
    const d = log.decide(5_000);
    expect(d.now).toBe(10_000);
    expect(d.allowed).toBe(true);
    expect(log.rows()).toEqual([{ slot: 0, ts: 10_000, cost: 2 }]);
    const denied = log.decide(0);
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBe(1_000);
  });

  it("never lets a later denial's eviction leak into an earlier time", () => {
    const log = new SlidingLog([{ limit: 1, windowMs: 10 }]);
    expect(granted(log, 100)).toBe(true);
    // A denial at 110 (cost too high) evicts the slot at 100 …
    expect(log.decide(110, 2).allowed).toBe(false);
    // … so a request stamped 105 is decided at 110, where the window is indeed empty.
    const d = log.decide(105);
    expect(d.now).toBe(110);
    expect(d.allowed).toBe(true);
  });

  it("answers 'never' for a cost above a limit, without a bogus retry time", () => {
    const log = new SlidingLog([
      { limit: 10, windowMs: 1_000 },
      { limit: 100, windowMs: 60_000 },
    ]);
    const d = log.decide(0, 11);
    expect(d.allowed).toBe(false);
    expect(d.neverAllowed).toBe(true);
    expect(d.retryAfterMs).toBe(Number.POSITIVE_INFINITY);
    expect(d.limits.map((l) => l.exceeded)).toEqual([true, false]);
    expect(d.blockedUntil).toBe(0);
    expect(log.decide(0, 10).allowed).toBe(true);
  });

  it("grants only when every limit fits, and then charges every limit", () => {
    const log = new SlidingLog([
      { limit: 3, windowMs: 10, name: "short" },
      { limit: 4, windowMs: 100, name: "long" },
    ]);
    expect([0, 1, 2, 3].map((t) => granted(log, t))).toEqual([true, true, true, false]);
    // At 12 the short window is free again, but the long one has one unit left.
    const d = log.decide(12, 2);
    expect(d.allowed).toBe(false);
    expect(d.limits.map((l) => [l.name, l.exceeded, l.remaining])).toEqual([
      ["short", false, 3],
      ["long", true, 1],
    ]);
    expect(d.retryAfterMs).toBe(88);
    expect(granted(log, 12, 1)).toBe(true);
    expect(log.decide(13).blockedUntil).toBe(100);
  });

  it("reports a cost-1 block time after the grant that used the quota up", () => {
    const log = new SlidingLog([{ limit: 2, windowMs: 1_000 }]);
    expect(log.decide(0).blockedUntil).toBe(0);
    const d = log.decide(300);
    expect(d.allowed).toBe(true);
    expect(d.blockedUntil).toBe(1_000);
    expect(d.limits[0]?.resetMs).toBe(700);
  });

  it("writes exactly one row per grant and none per denial", () => {
    const log = new SlidingLog([{ limit: 3, windowMs: 100 }]);
    // The decision is reused by the next call: copy each write as it comes.
    const writes = [0, 0, 5, 6, 7].map((t) => {
      const w = log.decide(t).write;
      return w ? { ...w } : null;
    });
    expect(writes).toEqual([
      { slot: 0, ts: 0, cost: 1 },
      { slot: 0, ts: 0, cost: 2 },
      { slot: 1, ts: 5, cost: 1 },
      null,
      null,
    ]);
  });

  it("rejects invalid costs, times and limits with messages that name the field", () => {
    const log = new SlidingLog([{ limit: 1, windowMs: 1 }]);
    expect(() => log.decide(0, 0)).toThrow(/cost: expected a positive integer, got 0/);
    expect(() => log.decide(0, 1.5)).toThrow(/cost/);
    expect(() => log.decide(0, -1)).toThrow(/cost/);
    expect(() => log.decide(Number.NaN)).toThrow(/now: expected a finite time/);
    expect(() => new SlidingLog([])).toThrow(/limits: expected at least one limit/);
    expect(() => new SlidingLog([{ limit: 0, windowMs: 1 }])).toThrow(/limits\[0\]\.limit/);
    expect(
      () =>
        new SlidingLog([
          { limit: 1, windowMs: 1 },
          { limit: 2.5, windowMs: 1 },
        ]),
    ).toThrow(/limits\[1\]\.limit/);
    expect(() => new SlidingLog([{ limit: 1, windowMs: 0 }])).toThrow(/limits\[0\]\.windowMs/);
    expect(() => new SlidingLog([{ limit: 100_000_000, windowMs: 86_400_000 }])).toThrow(
      new RegExp(`more than the ${MAX_CAPACITY}`),
    );
  });

  it("rewrites storage only when the capacity changed, keeping the newest slots", () => {
    const limits = [{ limit: 10, windowMs: 1_000 }];
    const log = new SlidingLog(limits);
    const store = new Store();
    for (let t = 0; t < 10; t++) store.apply(log.decide(t));
    expect(SlidingLog.restore(limits, store.rows.values()).rewrite).toBe(false);
    const smaller = SlidingLog.restore([{ limit: 4, windowMs: 1_000 }], store.rows.values());
    expect(smaller.rewrite).toBe(true);
    expect(smaller.log.rows()).toEqual([6, 7, 8, 9].map((ts, slot) => ({ slot, ts, cost: 1 })));
    expect(smaller.log.decide(10).retryAfterMs).toBe(996);
  });

  it("tells when its state can be dropped", () => {
    const log = new SlidingLog([
      { limit: 5, windowMs: 1_000 },
      { limit: 50, windowMs: 60_000 },
    ]);
    expect(log.idleAt).toBe(Number.NEGATIVE_INFINITY);
    log.decide(1_000);
    expect(log.idleAt).toBe(61_000);
  });
});
