/**
 * @module Settled leases over real use times: many holders with their own clocks and round trips spend leases,
 * settle them (used units re-dated, unused given back), let them expire and vanish; no real window is ever over N.
 * The same judge catches a settlement that re-dates to the holder's clock reading instead of `issuedAt + δ`.
 */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { KeyLog, type LimitSpec, leaseMargin, type Settlement } from "../../src/core/index.ts";
import { type Grant, sweepViolation } from "./model.ts";

const limitArb = fc.record({
  // Limits from 16 on get leases; small ones reach their edges quickly.
  limit: fc.oneof(
    { weight: 4, arbitrary: fc.integer({ min: 16, max: 64 }) },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 12 }) },
  ),
  windowMs: fc.integer({ min: 20, max: 300 }),
  tickMs: fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined }),
});
const limitsArb = fc
  .array(limitArb, { minLength: 1, maxLength: 2 })
  .map((ls) => ls.map((l) => (l.tickMs === undefined || l.tickMs > l.windowMs ? { ...l, tickMs: undefined } : l)));

/** A holder: an isolate whose clock reads `offset` ms off real time, `delay` ms from the object each way. */
const holderArb = fc.record({ offset: fc.integer({ min: -500, max: 300 }), delay: fc.integer({ min: 0, max: 30 }) });

const stepArb = fc.record({
  dt: fc.oneof({ weight: 6, arbitrary: fc.nat(10) }, { weight: 1, arbitrary: fc.nat(400) }),
  holder: fc.nat(3),
  action: fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant("ask" as const),
        cost: fc.integer({ min: 0, max: 3 }),
        units: fc.integer({ min: 1, max: 40 }),
        ms: fc.integer({ min: 1, max: 600 }),
      }),
    },
    { weight: 10, arbitrary: fc.record({ kind: fc.constant("spend" as const), cost: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant("settle" as const), giveUp: fc.boolean() }) },
    {
      weight: 2,
      arbitrary: fc.record({ kind: fc.constant("request" as const), cost: fc.integer({ min: 1, max: 4 }) }),
    },
    // The holder vanishes with whatever it holds, unsettled.
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("vanish" as const) }) },
  ),
});

type Step = typeof stepArb extends fc.Arbitrary<infer T> ? T : never;

/** A lease as its holder keeps it (times on the holder's clock). */
interface Held {
  left: number;
  used: number;
  lastUseAt: number;
  readonly sentAt: number;
  readonly expiresAt: number;
  readonly issuedAt: number;
  readonly recordedAt: readonly number[];
}

/**
 * Runs the steps; returns the real use times. `wrong`: holders report `issuedAt` as their own clock reading when
 * they asked, so the object re-dates used units to the holder's clock reading of their last use.
 */
function run(
  limits: readonly LimitSpec[],
  holders: readonly { offset: number; delay: number }[],
  steps: readonly Step[],
  wrong = false,
): Grant[] {
  const log = new KeyLog(limits);
  const uses: Grant[] = [];
  const held: Held[][] = holders.map(() => []);
  let real = 1_000_000;
  const settlements = (h: number, local: number, giveUp: boolean): Settlement[] => {
    const out: Settlement[] = [];
    held[h] = (held[h] as Held[]).filter((l) => {
      const gone = giveUp || local >= l.expiresAt;
      if (l.used === 0 && !gone) return true;
      out.push({
        recordedAt: l.recordedAt,
        issuedAt: wrong ? l.sentAt : l.issuedAt,
        used: l.used,
        lastUseMs: Math.ceil(l.lastUseAt - l.sentAt),
        unused: gone ? l.left : 0,
      });
      l.used = 0;
      return !gone;
    });
    return out;
  };
  for (const { dt, holder, action } of steps) {
    real += dt;
    const h = holder % holders.length;
    const { offset, delay } = holders[h] as { offset: number; delay: number };
    const local = real + offset;
    switch (action.kind) {
      case "ask": {
        const settle = settlements(h, local, false);
        // The call reaches the object `delay` ms after the holder read its clock.
        real += delay;
        const d = log.take(real, { cost: action.cost, leaseUnits: action.units, leaseMs: action.ms, settle }).decision;
        if (d.allowed && action.cost > 0) uses.push({ t: real, cost: action.cost });
        if (d.lease) {
          const lifetime = d.lease.lifetimeMs;
          (held[h] as Held[]).push({
            left: d.lease.units,
            // The request's own cost is recorded with the lease: its first use, settled with it.
            used: d.allowed ? action.cost : 0,
            lastUseAt: local,
            sentAt: local,
            expiresAt: local + lifetime - leaseMargin(lifetime),
            issuedAt: d.now,
            recordedAt: d.lease.recordedAt,
          });
        }
        break;
      }
      case "spend": {
        const l = (held[h] as Held[]).find((x) => local < x.expiresAt && x.left >= action.cost);
        if (l) {
          l.left -= action.cost;
          l.used += action.cost;
          l.lastUseAt = local;
          uses.push({ t: real, cost: action.cost });
        }
        break;
      }
      case "settle": {
        const settle = settlements(h, local, action.giveUp);
        real += delay;
        for (const s of settle) log.settle(real, s);
        break;
      }
      case "request": {
        real += delay;
        if (log.take(real, { cost: action.cost }).decision.allowed) uses.push({ t: real, cost: action.cost });
        break;
      }
      case "vanish":
        held[h] = [];
        break;
    }
  }
  return uses;
}

const runArb = fc.tuple(
  limitsArb,
  fc.array(holderArb, { minLength: 1, maxLength: 4 }),
  fc.array(stepArb, { minLength: 1, maxLength: 150, size: "max" }),
);

describe("settled leases, property: never a record earlier than a use", () => {
  it("many holders with their own clocks settle, give back, expire and vanish: no real window over N", () => {
    fc.assert(
      fc.property(runArb, ([limits, holders, steps]) => {
        expect(sweepViolation(run(limits, holders, steps), limits)).toBeNull();
      }),
      { numRuns: 1000 },
    );
  });

  it("the judge catches a settlement that re-dates to the holder's clock reading instead of issuedAt + δ", () => {
    // Holders whose clocks run behind: a record at their reading of a use lies before the use.
    const behind = fc.array(
      fc.record({ offset: fc.integer({ min: -400, max: -20 }), delay: fc.integer({ min: 0, max: 30 }) }),
      { minLength: 1, maxLength: 4 },
    );
    const wrongArb = fc.tuple(limitsArb, behind, fc.array(stepArb, { minLength: 1, maxLength: 150, size: "max" }));
    const found = fc.check(
      fc.property(
        wrongArb,
        ([limits, holders, steps]) => sweepViolation(run(limits, holders, steps, true), limits) === null,
      ),
      { numRuns: 2000 },
    );
    expect(found.failed).toBe(true);
  });

  it("settlement costs what the use cost: a lease used at once and settled frees its window like a per-request grant", () => {
    const limits = [{ limit: 32, windowMs: 1000 }];
    const log = new KeyLog(limits);
    const d = log.take(0, { cost: 1, leaseUnits: 3, leaseMs: 500 }).decision;
    expect(d.lease).toMatchObject({ units: 3, recordedAt: [500] });
    // All four units used by 10 ms after the ask: settled, they count until 1000 + 12, not 1500.
    log.settle(20, { recordedAt: [500], issuedAt: d.now, used: 4, lastUseMs: 10, unused: 0 });
    expect(log.peek(1011).limits[0]?.remaining).toBe(28);
    expect(log.peek(1012).limits[0]?.remaining).toBe(32);
  });

  it("settled after its use has left every window, a used unit counts nowhere (not a millisecond more at the edge)", () => {
    const log = new KeyLog([{ limit: 32, windowMs: 1000 }]);
    const d = log.take(0, { cost: 1, leaseUnits: 3, leaseMs: 500 }).decision;
    expect(d.lease).toMatchObject({ units: 3, recordedAt: [500] });
    // All four used by 10 ms after the ask, reported at 1.2 s (their record at 500 still counts): their use left the
    // window at 1012.
    const settle = [{ recordedAt: [500], issuedAt: d.now, used: 4, lastUseMs: 10, unused: 0 }];
    expect(log.take(1200, { cost: 32, settle }).decision.allowed).toBe(true);
    // With two windows in one ring, a unit whose use left only the shorter one is kept inside the longer one.
    const two = new KeyLog([
      { limit: 32, windowMs: 1000 },
      { limit: 64, windowMs: 10_000 },
    ]);
    expect(two.rings).toHaveLength(1);
    const e = two.take(0, { cost: 1, leaseUnits: 3, leaseMs: 500 }).decision;
    two.settle(1200, { recordedAt: e.lease?.recordedAt ?? [], issuedAt: e.now, used: 4, lastUseMs: 10, unused: 0 });
    expect(two.peek(1202).limits.map((l) => l.remaining)).toEqual([32, 60]);
  });
});
