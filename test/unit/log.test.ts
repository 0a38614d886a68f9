/** @module The key log against the brute-force model with real use times, plus named edge cases. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type Decision,
  defaultTickMs,
  KeyLog,
  type LimitSpec,
  MAX_KEY_SLOTS,
  MAX_RING_SLOTS,
  normalizeLimits,
  type SlotRow,
} from "../../src/core/index.ts";
import { type Grant, Model, sweepViolation } from "./model.ts";

const limitArb = fc.record({
  // Small limits reach their edges quickly; limits from 16 on also get leases (at most N/16).
  limit: fc.oneof(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 16, max: 120 })),
  windowMs: fc.integer({ min: 1, max: 200 }),
  tickMs: fc.option(fc.integer({ min: 1, max: 7 }), { nil: undefined }),
});
const limitsArb = fc
  .array(limitArb, { minLength: 1, maxLength: 3 })
  .map((ls) => ls.map((l) => (l.tickMs === undefined || l.tickMs > l.windowMs ? { ...l, tickMs: undefined } : l)));

/** One step of a run: time moves by `dt` (0: a stall; large: a jump), then something happens. */
const stepArb = fc.record({
  dt: fc.oneof(
    { weight: 6, arbitrary: fc.integer({ min: 0, max: 8 }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 400 }) },
  ),
  action: fc.oneof(
    {
      weight: 5,
      arbitrary: fc.record({ kind: fc.constant("request" as const), cost: fc.integer({ min: 1, max: 6 }) }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant("lease" as const),
        cost: fc.integer({ min: 0, max: 3 }),
        units: fc.integer({ min: 1, max: 40 }),
        // Lifetimes from a few ms to longer than any window (the log caps them at the longest).
        ms: fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 600 })),
        // The part of it before the lease reaches the caller (at most the lifetime asked).
        lead: fc.integer({ min: 0, max: 60 }),
        // No rate of the caller's own: sized from the key's log.
        fromLog: fc.boolean(),
        // Give back an expired lease's unused units with this call.
        give: fc.boolean(),
      }),
    },
    { weight: 5, arbitrary: fc.record({ kind: fc.constant("spend" as const), cost: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("return" as const) }) },
    // The caller dies: its oldest lease is neither spent nor given back.
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("die" as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("refund" as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("restart" as const) }) },
  ),
});
const stepsArb = fc.array(stepArb, { minLength: 1, maxLength: 80 });
type Step = typeof stepArb extends fc.Arbitrary<infer T> ? T : never;

/** A lease as a caller holds it: spendable while the caller's clock is before `expiresAt`. */
interface Held {
  left: number;
  expiresAt: number;
  recordedAt: readonly number[];
}

/** A settlement that gives back what a lease did not use. */
function given(h: Held) {
  return { recordedAt: h.recordedAt, issuedAt: 0, used: 0, lastUseMs: 0, unused: h.left };
}

/** A stand-in for the object's table: rows upserted by (ring, key). */
class Store {
  readonly rows = new Map<string, SlotRow>();
  apply(writes: readonly SlotRow[]): void {
    for (const w of writes) this.rows.set(`${w.ring}:${w.key}`, w);
  }
  replace(rows: readonly SlotRow[]): void {
    this.rows.clear();
    this.apply(rows);
  }
}

/**
 * Runs steps against the log and the model side by side, as one caller that spends leased units
 * at real times inside each lease's lifetime. Returns the real use times.
 */
function run(limits: readonly LimitSpec[], steps: readonly Step[], start: number): Grant[] {
  let log = new KeyLog(limits);
  const model = new Model(limits);
  const store = new Store();
  const uses: Grant[] = [];
  const held: Held[] = [];
  /** Per-request grants not yet refunded: their use and where the log recorded them. */
  const refundable: { use: Grant; recordedAt: readonly number[] }[] = [];
  let real = start;
  for (const { dt, action } of steps) {
    real += dt;
    switch (action.kind) {
      case "request": {
        const out = log.take(real, { cost: action.cost });
        expect(out.decision).toEqual(model.take(real, action.cost));
        store.apply(out.writes);
        if (out.decision.allowed) {
          const use = { t: real, cost: action.cost };
          uses.push(use);
          refundable.push({ use, recordedAt: out.decision.recordedAt ?? [] });
        } else expect(out.writes).toEqual([]);
        break;
      }
      case "lease": {
        // The caller reads its clock just before it asks: here the same real time.
        const sentAt = real;
        const i = action.give ? held.findIndex((h) => real >= h.expiresAt && h.left > 0) : -1;
        const settle = i === -1 ? [] : held.splice(i, 1).map((h) => given(h));
        const lead = Math.min(action.lead, action.ms);
        const ask = {
          cost: action.cost,
          leaseUnits: action.units,
          leaseMs: action.ms,
          leaseLeadMs: lead,
          leaseFromLog: action.fromLog,
        };
        const out = log.take(real, { ...ask, settle });
        expect(out.decision).toEqual(
          model.take(real, action.cost, action.units, action.ms, action.fromLog, settle, lead),
        );
        store.apply(out.writes);
        const d = out.decision;
        if (d.allowed && action.cost > 0) uses.push({ t: real, cost: action.cost });
        if (d.lease)
          held.push({ left: d.lease.units, expiresAt: sentAt + d.lease.lifetimeMs, recordedAt: d.lease.recordedAt });
        break;
      }
      case "spend": {
        const lease = held.find((h) => real < h.expiresAt && h.left >= action.cost);
        if (lease) {
          lease.left -= action.cost;
          uses.push({ t: real, cost: action.cost });
        }
        break;
      }
      case "return": {
        // Give back what an expired (or abandoned) lease did not use; it is then never spent.
        const lease = held.shift();
        if (lease && lease.left > 0) {
          store.apply(log.giveBack(lease.recordedAt, lease.left));
          model.giveBack(lease.recordedAt, lease.left);
        }
        break;
      }
      case "die": {
        held.shift();
        break;
      }
      case "refund": {
        // A refunded request is not counted: its units go back where they were recorded, and its
        // use leaves the judged uses; every other use must still fit every window.
        const r = refundable.pop();
        if (r) {
          store.apply(log.giveBack(r.recordedAt, r.use.cost));
          model.giveBack(r.recordedAt, r.use.cost);
          uses.splice(uses.indexOf(r.use), 1);
        }
        break;
      }
      case "restart": {
        const restored = KeyLog.restore(limits, store.rows.values(), real);
        // A plain restart never needs its rows rewritten (each row written is billed).
        expect(restored.rewrite).toBe(false);
        log = restored.log;
        model.restart(real);
        break;
      }
    }
  }
  return uses;
}

describe("KeyLog against the reference model, with leases and real use times", () => {
  it("matches the model at every step and never lets a real window exceed N", () => {
    fc.assert(
      fc.property(limitsArb, stepsArb, fc.integer({ min: 0, max: 1e12 }), (limits, steps, start) => {
        const uses = run(limits, steps, start);
        expect(sweepViolation(uses, limits)).toBeNull();
      }),
      { numRuns: 500 },
    );
  });

  it("keeps every real window within N when leases are spent up to the last millisecond of their lifetime", () => {
    // The sweep alone judges here (no model): every lease is spent in full at sentAt + lifetime − 1,
    // the latest use a lease allows, mixed with per-request grants.
    // Gaps near a window's length put late lease uses and fresh grants into one window.
    const runArb = limitsArb.chain((limits) => {
      const near = fc
        .tuple(fc.constantFrom(...limits.map((l) => l.windowMs)), fc.integer({ min: -8, max: 2 }))
        .map(([w, d]) => Math.max(0, w + d));
      const askArb = fc.record({
        gap: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 12 }), near),
        cost: fc.integer({ min: 1, max: 4 }),
        lease: fc.boolean(),
      });
      return fc.tuple(fc.constant(limits), fc.array(askArb, { minLength: 1, maxLength: 120 }));
    });
    fc.assert(
      fc.property(runArb, ([limits, asks]) => {
        const log = new KeyLog(limits);
        const uses: Grant[] = [];
        let real = 1_000;
        for (const { gap, cost, lease } of asks) {
          real += gap;
          const d = log.take(real, lease ? { cost, leaseUnits: 50, leaseMs: 50 } : { cost }).decision;
          if (d.allowed) uses.push({ t: real, cost });
          if (d.lease) uses.push({ t: real + d.lease.lifetimeMs - 1, cost: d.lease.units });
        }
        uses.sort((a, b) => a.t - b.t);
        expect(sweepViolation(uses, limits)).toBeNull();
      }),
      { numRuns: 500 },
    );
  });

  it("evaluates a restored log at the real now, never at its newest (future) record", () => {
    // A lease recorded in the future must not move the clock: at 1650 the grant at 10 would have
    // left the 1.6 s window, and a clamped log would grant one unit too many in (1, 1601].
    const limits = [{ limit: 32, windowMs: 1600 }];
    const log = new KeyLog(limits);
    const rows = new Map<string, SlotRow>();
    const keep = (w: readonly SlotRow[]) => {
      for (const r of w) rows.set(`${r.ring}:${r.key}`, r);
    };
    keep(log.take(10, { cost: 1 }).writes);
    const leased = log.take(1600, { cost: 1, leaseUnits: 2, leaseMs: 50 });
    keep(leased.writes);
    expect(leased.decision.lease).toEqual({ units: 2, lifetimeMs: 50, recordedAt: [1650] });
    const uses: Grant[] = [
      { t: 10, cost: 1 },
      { t: 1600, cost: 1 },
      { t: 1600, cost: 2 }, // the leased units, spent at once
    ];
    const { log: restored } = KeyLog.restore(limits, rows.values(), 1601);
    expect(restored.take(1601, { cost: 28 }).decision.allowed).toBe(true);
    uses.push({ t: 1601, cost: 28 });
    expect(restored.take(1601, { cost: 1 }).decision).toMatchObject({ allowed: false, retryAfterMs: 9 });
    expect(sweepViolation(uses, limits)).toBeNull();
  });
});

describe("KeyLog edge cases", () => {
  it("counts a grant at t for exactly W milliseconds: t > now − W", () => {
    const log = new KeyLog([{ limit: 1, windowMs: 100 }]);
    expect(log.take(1000, { cost: 1 }).decision.allowed).toBe(true);
    expect(log.take(1099, { cost: 1 }).decision).toMatchObject({ allowed: false, retryAfterMs: 1 });
    expect(log.take(1100, { cost: 1 }).decision.allowed).toBe(true);
  });

  it("shares one slot among thousands of grants in the same millisecond", () => {
    const log = new KeyLog([{ limit: 10_000_000, windowMs: 1000 }]);
    let writes: readonly SlotRow[] = [];
    for (let i = 0; i < 5000; i++) writes = log.take(42, { cost: 1 }).writes;
    expect(writes).toEqual([{ ring: 1, key: expect.any(Number), ts: 42, cost: 5000 }]);
    expect(log.rings[0]?.size).toBe(1);
  });

  it("wraps its ring many times and reuses storage keys only after their slot left", () => {
    const log = new KeyLog([{ limit: 3, windowMs: 10 }]);
    const live = new Map<number, number>();
    for (let t = 0; t < 5000; t += 3) {
      const out = log.take(t, { cost: 1 });
      for (const [key, ts] of live) if (ts <= t - 10) live.delete(key);
      for (const w of out.writes) {
        expect(live.has(w.key) && live.get(w.key) !== w.ts).toBe(false);
        expect(w.key).toBeLessThan(3);
        live.set(w.key, w.ts);
      }
    }
  });

  it("shrinks a ring back to its initial size once everything in it has left", () => {
    const log = new KeyLog([{ limit: 2000, windowMs: 2000 }]);
    for (let t = 0; t < 2000; t++) log.take(t, { cost: 1 });
    const ring = log.rings[0];
    expect(ring?.allocated).toBeGreaterThanOrEqual(2000);
    log.peek(4000);
    expect(ring?.size).toBe(0);
    expect(ring?.allocated).toBe(16);
    // Every stored row is dead now: storage keys start again from 0.
    expect(log.take(4000, { cost: 1 }).writes[0]?.key).toBe(0);
  });

  it("rounds grants up to the tick, records a lease at now + lifetime, and a later grant at its own time, before it", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 60_000, tickMs: 1000 }]);
    expect(log.take(1, { cost: 1 }).writes[0]?.ts).toBe(1000);
    const lease = log.take(2500, { cost: 1, leaseUnits: 10, leaseMs: 2000 });
    expect(lease.writes[0]?.ts).toBe(5000);
    expect(lease.decision.lease).toEqual({ units: 10, lifetimeMs: 2000, recordedAt: [5000] });
    // A later per-request grant is recorded at its own time, among the slots in time order.
    expect(log.take(2600, { cost: 1 }).writes[0]).toMatchObject({ ts: 3000, cost: 1 });
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([
      [1000, 1],
      [3000, 1],
      [5000, 11],
    ]);
    expect(log.giveBack([5000], 10)).toEqual([expect.objectContaining({ ts: 5000, cost: 1 })]);
  });

  it("joins the next later slot when the ring has no free slot left (later is safe)", () => {
    // 10,000 per 100 ms at 1 ms: the ring holds the window's 100 tick positions plus 3 ms of slack
    // and 2; a minute limit on its own ring lets leases live for a second.
    const log = new KeyLog([
      { limit: 10_000, windowMs: 100 },
      { limit: 1_000_000, windowMs: 10_000, tickMs: 100 },
    ]);
    const ring = log.rings[0];
    expect(ring?.capacity).toBe(105);
    // Ten leases far ahead take ten slots, more than the slack; grants take the window's positions.
    for (let t = 0; t < 10; t++) log.take(t, { cost: 0, leaseUnits: 2, leaseMs: 1000 });
    for (let t = 10; t < 105; t++) log.take(t, { cost: 1 });
    expect(ring?.size).toBe(105);
    const full = log.take(105, { cost: 1 });
    expect(full.decision).toMatchObject({ allowed: true, recordedAt: [1000, 200] });
    expect(full.writes[0]).toMatchObject({ ts: 1000, cost: 3 });
    expect(ring?.size).toBe(105);
  });

  it("sizes a lease from every limit's headroom and what is leased out already", () => {
    const log = new KeyLog([
      { limit: 1000, windowMs: 1000 },
      { limit: 300, windowMs: 60_000 },
    ]);
    // Far below every limit (3/4 free), one lease holds at most 1/4 of the smallest limit (2 · 37 of 300), for the
    // share of the lifetime those units are of the units asked (74 of 1000 asked for 10 s: 740 ms).
    const d = log.take(0, { cost: 2, leaseUnits: 1000, leaseMs: 10_000 }).decision;
    expect(d.lease).toMatchObject({ units: 74, lifetimeMs: 740 });
    expect(d.limits.map((l) => l.remaining)).toEqual([924, 224]);
    // All leases together stay within half of the tightest headroom: 300 / 2 = 150 units ahead (76 + 2 · 37).
    const ask = { cost: 0, leaseUnits: 37, leaseMs: 10_000 };
    const units = [1, 2, 3, 4].map((t) => log.take(t, ask).decision.lease?.units ?? 0);
    expect(units).toEqual([37, 37, 0, 0]);
    // Given back, the share is free again.
    log.giveBack(d.lease?.recordedAt ?? [], 74);
    expect(log.take(6, ask).decision.lease?.units).toBe(37);
    // Under 3/4 of a limit free, one lease holds at most 1/8 of the smallest limit.
    const near = new KeyLog([{ limit: 300, windowMs: 60_000 }]);
    near.take(0, { cost: 76 });
    expect(near.take(1, { cost: 1, leaseUnits: 100, leaseMs: 1000 }).decision.lease?.units).toBe(37);
    const edge = new KeyLog([{ limit: 300, windowMs: 60_000 }]);
    edge.take(0, { cost: 74 });
    expect(edge.take(1, { cost: 1, leaseUnits: 100, leaseMs: 1000 }).decision.lease?.units).toBe(74);
    // A lifetime is at most the longest window (and a minute).
    const short = new KeyLog([{ limit: 1000, windowMs: 500 }]);
    expect(short.take(0, { cost: 1, leaseUnits: 10, leaseMs: 10_000 }).decision.lease?.lifetimeMs).toBe(500);
  });

  it("shortens leases below three quarters of a limit free, none below a quarter, and leases nothing under two units", () => {
    const leaseAfter = (used: number, leaseLeadMs = 0, windowMs = 16_000) => {
      const log = new KeyLog([{ limit: 1000, windowMs }]);
      log.take(0, { cost: used });
      const lease = log.take(1, { cost: 1, leaseUnits: 100, leaseMs: 1000, leaseLeadMs }).decision.lease;
      return lease ? [lease.units, lease.lifetimeMs] : null;
    };
    // Free after the request: 759 of 1000, all asked for the whole lifetime; then units and the time to spend them
    // scaled by 2 · free − 1/2 (floored units, the time in proportion to them), down to none at 1/4.
    expect(leaseAfter(240)).toEqual([100, 1000]);
    expect(leaseAfter(250)).toEqual([99, 990]);
    expect(leaseAfter(390)).toEqual([71, 710]);
    // A few units still get MIN_SPEND_MS (50 ms) to be spent in: spent faster, they are settled at their use.
    expect(leaseAfter(730)).toEqual([3, 50]);
    expect(leaseAfter(740)).toBeNull();
    // The lead (the round trip before the lease arrives) is not scaled: only the time the units are spent in.
    expect(leaseAfter(240, 200)).toEqual([100, 1000]);
    expect(leaseAfter(390, 200)).toEqual([71, 200 + 568]);
    expect(leaseAfter(730, 200)).toEqual([3, 200 + 50]);
    // Below 3/4 free, the units are spent within 1/8 of the limit's window, fewer of them in proportion: 125 ms of a
    // second's window instead of 710 (or 568 after a lead); far below, the whole lifetime.
    expect(leaseAfter(390, 0, 1000)).toEqual([12, 125]);
    expect(leaseAfter(390, 200, 1000)).toEqual([15, 200 + 125]);
    expect(leaseAfter(240, 0, 1000)).toEqual([100, 1000]);
    expect(
      new KeyLog([{ limit: 4, windowMs: 1000 }]).take(0, { cost: 1, leaseUnits: 5, leaseMs: 50 }).decision.lease,
    ).toBeNull();
    // Under 16 no lease, even far below the limit (where a lease may otherwise carry twice 1/8 of it).
    expect(
      new KeyLog([{ limit: 15, windowMs: 1000 }]).take(0, { cost: 1, leaseUnits: 5, leaseMs: 50 }).decision.lease,
    ).toBeNull();
    expect(
      new KeyLog([{ limit: 16, windowMs: 1000 }]).take(0, { cost: 1, leaseUnits: 5, leaseMs: 50 }).decision.lease,
    ).toMatchObject({ units: 4 });
    expect(
      new KeyLog([{ limit: 100, windowMs: 1000 }]).take(0, { cost: 1, leaseUnits: 1, leaseMs: 50 }).decision.lease,
    ).toBeNull();
  });

  it("sizes the first lease of a caller new to the key from the key's fastest recent rate, a few units at most, none near a limit", () => {
    const log = new KeyLog([
      { limit: 100, windowMs: 1000 },
      { limit: 1000, windowMs: 60_000 },
    ]);
    // A key without history: nothing to size from.
    const ask = { cost: 1, leaseUnits: 1000, leaseMs: 10_000, leaseFromLog: true };
    expect(log.take(0, ask).decision.lease).toBeNull();
    // One a second: 59 units in the minute before 60 s, its fastest rate; 4 units last the key 4068 ms.
    for (let t = 1000; t < 60_000; t += 1000) log.take(t, { cost: 1 });
    expect(log.take(60_000, ask).decision.lease).toEqual({ units: 4, lifetimeMs: 4068, recordedAt: [64_068] });
    // 30 in its last second as well: 69 of 100 free, under 3/4: near a limit a caller new to the key gets no lease
    // (what it would leave unused would be missing from the key's budget), while one with a rate of its own does.
    log.take(60_500, { cost: 30 });
    expect(log.take(60_600, ask).decision.lease).toBeNull();
    const own = { ...ask, leaseFromLog: false, leaseUnits: 8, leaseMs: 250 };
    expect(log.take(60_601, own).decision.lease).toMatchObject({ units: 4, lifetimeMs: 125 });
    // 20 instead: 79 of 100 free, far below; the whole 4 / 0.02 ms.
    const far = new KeyLog([
      { limit: 100, windowMs: 1000 },
      { limit: 1000, windowMs: 60_000 },
    ]);
    for (let t = 1000; t < 60_000; t += 1000) far.take(t, { cost: 1 });
    far.take(60_500, { cost: 20 });
    expect(far.take(60_600, ask).decision.lease).toMatchObject({ units: 4, lifetimeMs: 200 });
  });

  it("grants no lease for a shortest window after a refusal: a key at its limit gets the per-request path", () => {
    const log = new KeyLog([{ limit: 320, windowMs: 1000 }]);
    log.take(0, { cost: 320 });
    expect(log.take(10, { cost: 1 }).decision.allowed).toBe(false);
    // At 1000 everything has left, but the refusal at 10 is less than a window ago.
    expect(log.take(1000, { cost: 1, leaseUnits: 10, leaseMs: 31 }).decision).toMatchObject({
      allowed: true,
      lease: null,
    });
    expect(log.take(1010, { cost: 1, leaseUnits: 10, leaseMs: 31 }).decision.lease?.units).toBe(10);
    // A cost of exactly the smallest limit, refused because some is used, is pressure too.
    const whole = new KeyLog([{ limit: 320, windowMs: 1000 }]);
    whole.take(0, { cost: 1 });
    expect(whole.take(1, { cost: 320 }).decision.allowed).toBe(false);
    expect(whole.take(2, { cost: 1, leaseUnits: 10, leaseMs: 31 }).decision.lease).toBeNull();
    // The quiet time is the shortest window, not the longest.
    const two = new KeyLog([
      { limit: 320, windowMs: 1000 },
      { limit: 10_000, windowMs: 60_000 },
    ]);
    two.take(0, { cost: 320 });
    expect(two.take(10, { cost: 1 }).decision.allowed).toBe(false);
    expect(two.take(1009, { cost: 1, leaseUnits: 10, leaseMs: 31 }).decision.lease).toBeNull();
    expect(two.take(1010, { cost: 1, leaseUnits: 10, leaseMs: 31 }).decision.lease?.units).toBe(10);
    // A cost that can never fit is no sign of pressure.
    const other = new KeyLog([{ limit: 320, windowMs: 1000 }]);
    expect(other.take(0, { cost: 321 }).decision.neverAllowed).toBe(true);
    expect(other.take(1, { cost: 1, leaseUnits: 10, leaseMs: 31 }).decision.lease?.units).toBe(10);
  });

  it("gives back unused units and drops a slot that holds nothing any more", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 1600 }]);
    const d = log.take(0, { cost: 0, leaseUnits: 10, leaseMs: 50 }).decision;
    expect(d.lease?.units).toBe(10);
    expect(log.giveBack(d.lease?.recordedAt ?? [], 4)).toEqual([{ ring: 1, key: expect.any(Number), ts: 50, cost: 6 }]);
    expect(log.giveBack(d.lease?.recordedAt ?? [], 6)).toEqual([expect.objectContaining({ ts: 50, cost: 0 })]);
    expect(log.rings[0]?.size).toBe(0);
    expect(log.take(10, { cost: 1 }).decision.limits[0]?.remaining).toBe(999);
    // A lease whose slot has left every window gives back nothing.
    expect(log.giveBack([50], 1)).toEqual([]);
  });

  it("answers 'never' for a cost above a limit, without a bogus retry time", () => {
    const log = new KeyLog([{ limit: 5, windowMs: 1000 }]);
    expect(log.take(0, { cost: 6 }).decision).toMatchObject({
      allowed: false,
      neverAllowed: true,
      retryAfterMs: Number.POSITIVE_INFINITY,
      blockedUntil: 0,
    });
  });

  it("grants only when every limit fits, then charges every ring once", () => {
    const log = new KeyLog([
      { limit: 2, windowMs: 100 },
      { limit: 3, windowMs: 100_000, tickMs: 1000 },
    ]);
    expect(log.take(0, { cost: 2 }).writes.map((w) => [w.ring, w.ts])).toEqual([
      [1, 0],
      [1000, 0],
    ]);
    const denied = log.take(1, { cost: 2 });
    expect(denied.writes).toEqual([]);
    expect(denied.decision.limits.map((l) => l.exceeded)).toEqual([true, true]);
    expect(denied.decision.retryAfterMs).toBe(100_000 - 1);
  });

  it("rejects invalid costs, times, leases and limits with messages that name the field", () => {
    const log = new KeyLog([{ limit: 5, windowMs: 1000 }]);
    expect(() => log.take(0, { cost: 1.5 })).toThrow(/^cost: /);
    expect(() => log.take(0, { cost: 0 })).toThrow(/^cost: 0 asks for nothing/);
    expect(() => log.take(Number.NaN, { cost: 1 })).toThrow(/^now: /);
    expect(() => log.take(0, { cost: 1, leaseUnits: -1 })).toThrow(/^leaseUnits: /);
    expect(() => log.take(0, { cost: 1, leaseMs: 0.5 })).toThrow(/^leaseMs: /);
    expect(() => log.giveBack([1, 2], 1)).toThrow(/^recordedAt: /);
    // Settlements: a list; an entry that is no lease of these rings is skipped (its units expire), bad counts throw.
    expect(() => log.take(0, { cost: 1, settle: {} as never })).toThrow(
      /^settle: expected a list of lease settlements$/,
    );
    const elsewhere = { recordedAt: [1, 2], issuedAt: 0, used: 1, lastUseMs: 0, unused: 1 };
    expect(log.take(0, { cost: 1, settle: [null, elsewhere] as never }).decision.allowed).toBe(true);
    const own = { recordedAt: [1], issuedAt: 0, used: 0, lastUseMs: 0, unused: 0 };
    expect(() => log.take(0, { cost: 1, settle: [{ ...own, used: -1 }] })).toThrow(/^used: /);
    expect(() => log.take(0, { cost: 1, settle: [{ ...own, unused: 0.5 }] })).toThrow(/^unused: /);
    expect(() => log.take(0, { cost: 1, settle: [{ ...own, lastUseMs: Number.NaN }] })).toThrow(/^lastUseMs: /);
    expect(() => log.take(0, { cost: 1, settle: [{ ...own, issuedAt: 1.5 }] })).toThrow(/^issuedAt: /);
    expect(() => new KeyLog(null as never)).toThrow(/^limits: /);
    expect(() => new KeyLog([{ limit: 0, windowMs: 1 }])).toThrow(/^limits\[0\]\.limit: /);
    expect(() => new KeyLog([{ limit: 1, windowMs: 0 }])).toThrow(/^limits\[0\]\.windowMs: /);
    expect(() => new KeyLog([{ limit: 1, windowMs: 10, tickMs: 11 }])).toThrow(/^limits\[0\]\.tickMs: /);
    expect(() => new KeyLog([{ limit: 1e6, windowMs: 86_400_000, tickMs: 1 }])).toThrow(
      /^limits\[0\]\.tickMs: 1000000 per 1d at a tick of 1ms needs up to 1000000 slots per key, more than 2048; use a tick of at least/,
    );
  });

  it("with no limits (a key limited by calendar quotas alone) grants every cost, records nothing and leases nothing", () => {
    const log = new KeyLog([]);
    const out = log.take(5, { cost: 1_000_000, leaseUnits: 10, leaseMs: 1_000 });
    expect(out.decision).toMatchObject({ allowed: true, neverAllowed: false, limits: [], lease: null, recordedAt: [] });
    expect(out.writes).toEqual([]);
    expect(log.idleAt).toBe(Number.NEGATIVE_INFINITY);
    expect(log.check(6, 7).allowed).toBe(true);
  });
});

describe("limits of any size", () => {
  const big: LimitSpec[][] = [
    [{ limit: 100, windowMs: 1000 }],
    [{ limit: 100_000, windowMs: 86_400_000 }],
    [{ limit: 1_000_000, windowMs: 30 * 86_400_000 }],
    [{ limit: 10_000_000, windowMs: 86_400_000 }],
    [{ limit: Number.MAX_SAFE_INTEGER, windowMs: 366 * 86_400_000 }],
  ];
  it.each(big)("fits %o in at most MAX_RING_SLOTS slots with the default tick", (spec) => {
    const [limit] = normalizeLimits([spec]);
    expect(limit?.tickMs).toBe(defaultTickMs(spec.limit, spec.windowMs));
    const log = new KeyLog([spec]);
    expect(log.rings[0]?.capacity).toBeLessThanOrEqual(MAX_RING_SLOTS);
  });

  it("uses 1ms ticks where the limit fits, and coarser ones only where it must", () => {
    expect(defaultTickMs(100, 1000)).toBe(1);
    expect(defaultTickMs(10_000_000, 1000)).toBe(1);
    expect(defaultTickMs(100_000, 86_400_000)).toBe(Math.ceil((86_400_000 + 2_700_000) / 2046));
  });

  it("refuses a key whose rings together need more than MAX_KEY_SLOTS slots", () => {
    const limits = [1, 2, 3].map((tickMs) => ({ limit: 1e9, windowMs: 1900 * tickMs, tickMs }));
    expect(() => new KeyLog(limits)).toThrow(new RegExp(`more than ${MAX_KEY_SLOTS}`));
  });

  it("holds a grant at most one tick longer than exactly, never shorter", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 10_000 }), (tick, t) => {
        const log = new KeyLog([{ limit: 1, windowMs: 10_000, tickMs: tick }]);
        log.take(t, { cost: 1 });
        const d = log.take(t + 1, { cost: 1 }).decision;
        const exact = t + 10_000 - (t + 1);
        expect(d.retryAfterMs).toBeGreaterThanOrEqual(exact);
        expect(d.retryAfterMs).toBeLessThan(exact + tick);
      }),
    );
  });
});

describe("restore", () => {
  function store(log: KeyLog, steps: [number, number][]): SlotRow[] {
    const rows = new Map<string, SlotRow>();
    for (const [t, cost] of steps) for (const w of log.take(t, { cost }).writes) rows.set(`${w.ring}:${w.key}`, w);
    return [...rows.values()];
  }

  it("needs no rewrite after a plain restart, before anything is written", () => {
    const limits = [{ limit: 5, windowMs: 100 }];
    const rows = store(new KeyLog(limits), [
      [0, 1],
      [10, 2],
      [50, 1],
      [120, 1],
      [121, 1],
    ]);
    const { log, rewrite } = KeyLog.restore(limits, rows, 130);
    expect(rewrite).toBe(false);
    // (30, 130] holds 50, 120 and 121.
    expect(log.take(130, { cost: 1 }).decision.limits[0]?.remaining).toBe(5 - 3 - 1);
  });

  it("keeps what still counts when the tick changes: old records rounded up to the new tick", () => {
    const before = [{ limit: 10, windowMs: 60_000, tickMs: 1 }];
    const rows = store(new KeyLog(before), [
      [1001, 3],
      [2002, 4],
    ]);
    const after = [{ limit: 10, windowMs: 60_000, tickMs: 1000 }];
    const { log, rewrite } = KeyLog.restore(after, rows, 3000);
    expect(rewrite).toBe(true);
    expect(log.rows().map((r) => [r.ts, r.cost])).toEqual([
      [2000, 3],
      [3000, 4],
    ]);
    expect(log.take(3000, { cost: 4 }).decision.allowed).toBe(false);
  });

  it("keeps the newest slots when a smaller limit shrinks the ring", () => {
    const rows = store(new KeyLog([{ limit: 10, windowMs: 1000 }]), [
      [0, 1],
      [1, 1],
      [2, 1],
      [3, 1],
    ]);
    const { log, rewrite } = KeyLog.restore([{ limit: 2, windowMs: 1000 }], rows, 4);
    expect(rewrite).toBe(true);
    expect(log.rows().map((r) => r.ts)).toEqual([2, 3]);
  });

  it("tells when its state can be dropped, counting future records", () => {
    const log = new KeyLog([{ limit: 100, windowMs: 1600 }]);
    expect(log.idleAt).toBe(Number.NEGATIVE_INFINITY);
    log.take(0, { cost: 1, leaseUnits: 2, leaseMs: 50 });
    expect(log.idleAt).toBe(50 + 1600);
  });
});

describe("peek and forget", () => {
  it("peek consumes nothing", () => {
    const log = new KeyLog([{ limit: 3, windowMs: 1000 }]);
    log.take(0, { cost: 2 });
    const d: Decision = log.peek(10);
    expect(d.limits[0]).toEqual({ remaining: 1, resetMs: 990, exceeded: false });
    expect(log.take(11, { cost: 1 }).decision.allowed).toBe(true);
  });

  it("forget drops what was granted up to now but keeps units leased into the future", () => {
    const log = new KeyLog([{ limit: 1000, windowMs: 1000 }]);
    log.take(0, { cost: 5 });
    const d = log.take(10, { cost: 1, leaseUnits: 10, leaseMs: 50 }).decision;
    expect(d.lease?.units).toBe(10);
    log.forget(20);
    expect(log.peek(20).limits[0]?.remaining).toBe(1000 - 11);
  });
});

describe("operators: refuse, history, forget", () => {
  const limits = [{ limit: 3, windowMs: 1000, tickMs: 1 }];

  it("refuse: records nothing, nothing remains before the block's end, and the wait is the later of it and the limits'", () => {
    const log = new KeyLog(limits);
    log.take(0, { cost: 3 });
    const d = log.refuse(100, 1, 500);
    expect(d).toMatchObject({ allowed: false, blockedBy: 500, retryAfterMs: 900, blockedUntil: 1000, lease: null });
    expect(d.limits).toEqual([{ remaining: 0, resetMs: 900, exceeded: false }]);
    expect(log.refuse(100, 1, 5000)).toMatchObject({ retryAfterMs: 4900, blockedUntil: 5000 });
    expect(log.refuse(100, 4, 500)).toMatchObject({ neverAllowed: true, retryAfterMs: Number.POSITIVE_INFINITY });
    expect(log.peek(100).limits[0]?.remaining).toBe(0); // still the three grants, nothing more
  });

  it("history: per-bucket units of one limit's window, and what lies ahead of now", () => {
    const log = new KeyLog(limits);
    log.take(100, { cost: 1 });
    log.take(950, { cost: 1, leaseUnits: 0 });
    expect(log.history(0, 1000, 4)).toEqual({ startMs: 0, bucketMs: 250, counts: [1, 0, 0, 1], ahead: 0 });
    expect(log.history(0, 900, 2)).toEqual({ startMs: -100, bucketMs: 500, counts: [1, 0], ahead: 1 });
    expect(() => log.history(1, 1000, 4)).toThrow(RangeError);
  });
});

describe("restore: stored rows as the object finds them", () => {
  const row = (ring: number, key: number, ts: number, cost: number): SlotRow => ({ ring, key, ts, cost });
  const slots = (log: KeyLog) => log.rows().map((r) => [r.ring, r.ts, r.cost]);

  it("ignores rows that hold nothing (given back) or are not whole numbers", () => {
    const limits = [{ limit: 5, windowMs: 100 }];
    const { log, rewrite } = KeyLog.restore(
      limits,
      [row(1, 0, 10, 0), row(1, 1, 20, 1.5), row(1, 2, Number.NaN, 1), row(1, 3, 30, -1), row(1, 4, 40, 2)],
      50,
    );
    expect(rewrite).toBe(false);
    expect(slots(log)).toEqual([[1, 40, 2]]);
    expect(log.peek(50).limits[0]?.remaining).toBe(3);
  });

  it("keeps a ring whose every row was given back empty: it is not a new tick, seeded from another ring", () => {
    // Found by the model test (seed 1108532162): a grant at 0, the 1 ms ring's slot gone by 1, the 2 ms ring's slot
    // refunded. Seeding the 2 ms ring from the 1 ms ring's dead row counted the refunded unit again, and rewrote.
    const limits = [
      { limit: 1, windowMs: 1 },
      { limit: 16, windowMs: 2, tickMs: 2 },
    ];
    const { log, rewrite } = KeyLog.restore(limits, [row(1, 0, 0, 1), row(2, 0, 0, 0)], 1);
    expect(rewrite).toBe(false);
    expect(slots(log)).toEqual([]);
    expect(log.peek(1).limits.map((l) => l.remaining)).toEqual([1, 16]);
  });

  it("takes its own rows in any order", () => {
    const limits = [{ limit: 5, windowMs: 100 }];
    const rows = [row(1, 2, 60, 1), row(1, 0, 20, 1), row(1, 1, 40, 2)];
    const { log, rewrite } = KeyLog.restore(limits, rows, 100);
    expect(rewrite).toBe(false);
    expect(slots(log)).toEqual([
      [1, 20, 1],
      [1, 40, 2],
      [1, 60, 1],
    ]);
    // The slot at 20 leaves first: at 120 one unit comes back.
    expect(log.take(100, { cost: 2 }).decision).toMatchObject({ allowed: false, retryAfterMs: 20 });
    expect(log.clock).toBe(100);
  });

  it("leaves out rows that have left the window, and needs no rewrite for them", () => {
    const { log, rewrite } = KeyLog.restore([{ limit: 5, windowMs: 100 }], [row(1, 0, 0, 1), row(1, 1, 50, 1)], 100);
    expect([rewrite, slots(log)]).toEqual([false, [[1, 50, 1]]]);
  });

  it("rewrites when a stored ring no longer exists, even when none of its rows still counts", () => {
    const { log, rewrite } = KeyLog.restore([{ limit: 5, windowMs: 100, tickMs: 10 }], [row(1, 0, 5, 1)], 500);
    expect([rewrite, slots(log)]).toEqual([true, []]);
  });

  it("rewrites when a new ring is seeded while the old one stays", () => {
    const before = [{ limit: 5, windowMs: 1000 }];
    const after = [...before, { limit: 50, windowMs: 10_000, tickMs: 100 }];
    const { log, rewrite } = KeyLog.restore(after, [row(1, 0, 10, 1), row(1, 1, 20, 2)], 30);
    expect(rewrite).toBe(true);
    expect(slots(log)).toEqual([
      [1, 10, 1],
      [1, 20, 2],
      [100, 100, 3],
    ]);
  });

  it("seeds a new tick from the stored ring that holds the most units, rows in any order, merged when they round together", () => {
    const after = [{ limit: 100, windowMs: 10_000, tickMs: 1000 }];
    const rows = [
      row(1, 2, 2500, 4), // newest first: restore takes rows in any order
      row(1, 1, 1500, 2),
      row(1, 0, 1001, 3),
      row(10, 0, 1010, 1),
    ];
    for (const given of [rows, [...rows].reverse()]) {
      const { log, rewrite } = KeyLog.restore(after, given, 3000);
      expect(rewrite).toBe(true);
      expect(slots(log)).toEqual([
        [1000, 2000, 5],
        [1000, 3000, 4],
      ]);
      expect(log.rows().map((r) => r.key)).toEqual([0, 1]);
    }
    // Rows that left the new window are not seeded, even one that rounding up would bring back into it.
    expect(slots(KeyLog.restore(after, rows, 11_600).log)).toEqual([[1000, 3000, 4]]);
    expect(slots(KeyLog.restore(after, [row(1, 0, 1600, 1), row(1, 1, 2500, 4)], 11_600).log)).toEqual([
      [1000, 3000, 4],
    ]);
  });

  it("renumbers rows whose keys or times do not fit the ring, and keeps the newest when there are too many", () => {
    const limits = [{ limit: 3, windowMs: 1000 }];
    const cases: [SlotRow[], number[][]][] = [
      [
        [row(1, 0, 10, 1), row(1, 0, 20, 1)],
        [
          [1, 10, 1],
          [1, 20, 1],
        ],
      ], // a key twice
      [[row(1, 5, 10, 1)], [[1, 10, 1]]], // a key beyond the capacity
      [
        [row(1, 1, 10, 1), row(1, 3, 20, 1)],
        [
          [1, 10, 1],
          [1, 20, 1],
        ],
      ], // a key of exactly the capacity
      [[row(1, -1, 10, 1)], [[1, 10, 1]]], // a negative key
      [[row(1, 0, 10, 1), row(1, 1, 10, 2)], [[1, 10, 3]]], // one time twice: merged
    ];
    for (const [rows, expected] of cases) {
      const { log, rewrite } = KeyLog.restore(limits, rows, 30);
      expect(rewrite, JSON.stringify(rows)).toBe(true);
      expect(slots(log)).toEqual(expected);
      expect(log.rows().map((r) => r.key)).toEqual(expected.map((_, k) => k));
    }
    const ticked = KeyLog.restore([{ limit: 3, windowMs: 1000, tickMs: 10 }], [row(10, 0, 15, 1)], 30);
    expect([ticked.rewrite, slots(ticked.log)]).toEqual([true, [[10, 20, 1]]]);
    const many = [0, 1, 2, 3, 4].map((k) => row(1, k, 10 + k, 1));
    expect(slots(KeyLog.restore([{ limit: 2, windowMs: 1000 }], many, 30).log)).toEqual([
      [1, 13, 1],
      [1, 14, 1],
    ]);
  });

  it("idleAt counts each ring's own longest window", () => {
    const log = new KeyLog([
      { limit: 10, windowMs: 1000, tickMs: 1 },
      { limit: 100, windowMs: 100_000, tickMs: 100 },
    ]);
    log.take(50, { cost: 1 });
    expect(log.rows().map((r) => r.ts)).toEqual([50, 100]);
    expect(log.idleAt).toBe(100 + 100_000);
    // The coarse ring's newest slot is the later one, but only its own 1 s window counts for it.
    const coarse = new KeyLog([
      { limit: 10, windowMs: 1000, tickMs: 1000 },
      { limit: 100, windowMs: 100_000, tickMs: 1 },
    ]);
    coarse.take(50, { cost: 1 });
    expect(coarse.idleAt).toBe(50 + 100_000);
    const short = new KeyLog([{ limit: 10, windowMs: 1000 }]);
    short.take(50, { cost: 1 });
    expect(short.idleAt).toBe(1050);
  });
});

describe("KeyLog: asks at their edges", () => {
  it("rejects negative costs, lease lifetimes and leads longer than them, and give-backs of no or part units", () => {
    const log = new KeyLog([{ limit: 64, windowMs: 1000 }]);
    expect(() => log.take(0, { cost: -1 })).toThrow(/^cost: expected a whole number ≥ 0, got -1$/);
    expect(() => log.take(0, { cost: 1, leaseUnits: 1, leaseMs: -1 })).toThrow(/^leaseMs: .*got -1$/);
    expect(() => log.take(0, { cost: 1, leaseUnits: 1, leaseMs: 10, leaseLeadMs: 11 })).toThrow(
      /^leaseLeadMs: expected whole milliseconds from 0 to leaseMs, got 11$/,
    );
    expect(() => log.take(0, { cost: 1, leaseUnits: 1, leaseMs: 10, leaseLeadMs: 0.5 })).toThrow(
      /^leaseLeadMs: .*0.5$/,
    );
    expect(log.take(0, { cost: 1, leaseUnits: 8, leaseMs: 10, leaseLeadMs: 10 }).decision.lease).toBeNull();
    expect(() => log.giveBack([0], 0)).toThrow(/^units: expected a positive integer, got 0$/);
    expect(() => log.giveBack([0], 1.5)).toThrow(/^units: .*got 1.5$/);
  });

  it("grants no lease with a lifetime of 0, and records nothing for a lease-only ask it cannot grant", () => {
    const log = new KeyLog([{ limit: 64, windowMs: 1000 }]);
    const out = log.take(0, { cost: 1, leaseUnits: 3, leaseMs: 0 });
    expect(out.decision.lease).toBeNull();
    expect(out.writes).toEqual([expect.objectContaining({ ts: 0, cost: 1 })]);
    log.take(0, { cost: 62 });
    // 1 unit left: half of it, floored, is 0.
    const none = log.take(1, { cost: 0, leaseUnits: 3, leaseMs: 10 });
    expect(none).toEqual({ decision: expect.objectContaining({ allowed: true, cost: 0, lease: null }), writes: [] });
  });

  it("peek is an allowed decision of cost 0", () => {
    const log = new KeyLog([{ limit: 1, windowMs: 1000 }]);
    log.take(0, { cost: 1 });
    expect(log.peek(10)).toMatchObject({ allowed: true, neverAllowed: false, cost: 0, retryAfterMs: 0, now: 10 });
  });

  it("refuse: a cost of exactly the limit can pass once the block and the window allow it", () => {
    const log = new KeyLog([{ limit: 3, windowMs: 1000 }]);
    log.take(0, { cost: 1 });
    expect(log.refuse(100, 3, 500)).toMatchObject({ neverAllowed: false, retryAfterMs: 900, blockedUntil: 500 });
    // A block that outlasts the window: every limit reports the block's end.
    expect(log.refuse(100, 1, 5000).limits).toEqual([{ remaining: 0, resetMs: 4900, exceeded: false }]);
  });

  it("history: a slot at the window's start is out, one at now is in the last bucket, bucket ends are inclusive", () => {
    const log = new KeyLog([{ limit: 10, windowMs: 1000 }]);
    for (const t of [0, 250, 251, 1000]) log.take(t, { cost: 1 });
    expect(log.history(0, 1000, 4)).toEqual({ startMs: 0, bucketMs: 250, counts: [1, 1, 0, 1], ahead: 0 });
    expect(log.history(0, 1000, 1).counts).toEqual([3]);
    expect(() => log.history(1, 1000, 4)).toThrow(/^limit: expected an index below 1, got 1$/);
    // A short window sharing a ring with a long one: the ring still holds slots the short window no longer counts.
    const shared = new KeyLog([
      { limit: 10, windowMs: 100 },
      { limit: 100, windowMs: 1000 },
    ]);
    for (const t of [0, 50, 150]) shared.take(t, { cost: 1 });
    expect(shared.history(0, 150, 1)).toEqual({ startMs: 50, bucketMs: 100, counts: [1], ahead: 0 });
    expect(shared.history(0, 150, 2)).toEqual({ startMs: 50, bucketMs: 50, counts: [0, 1], ahead: 0 });
    expect(() => log.history(0, 1000, 0)).toThrow(/^buckets: expected a positive integer, got 0$/);
    expect(() => log.history(0, 1000, 1.5)).toThrow(/^buckets: /);
  });
});
