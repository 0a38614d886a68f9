/** @module Several budgets of one key decided as one (src/core/budgets.ts): against two models, and named cases. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { combine, type Decision, KeyLog, type LimitSpec, takeTogether } from "../../src/core/index.ts";
import { type Grant, Model, sweepViolation } from "./model.ts";

const limitArb = fc.record({
  limit: fc.oneof(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 16, max: 60 })),
  windowMs: fc.integer({ min: 1, max: 150 }),
});
const limitsArb = fc.array(limitArb, { minLength: 1, maxLength: 2 });

/** A step: time moves, then a plain request (leasing or not), a request of the route, or a leased unit spent. */
const stepArb = fc.record({
  dt: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 0, max: 6 }) }, fc.integer({ min: 0, max: 200 })),
  kind: fc.constantFrom("request", "lease", "route", "route", "spend", "refund"),
  cost: fc.integer({ min: 1, max: 4 }),
});

describe("takeTogether against a model of each budget, with the key's leases spent at real times", () => {
  it("grants a route's request exactly when it fits both, records it in both or neither, and no window goes over", () => {
    fc.assert(
      fc.property(limitsArb, limitsArb, fc.array(stepArb, { minLength: 1, maxLength: 80 }), (own, routed, steps) => {
        const key = new KeyLog(own);
        const route = new KeyLog(routed);
        const keyModel = new Model(own);
        const routeModel = new Model(routed);
        const keyUses: Grant[] = [];
        const routeUses: Grant[] = [];
        const held: { left: number; expiresAt: number }[] = [];
        const refundable: { recordedAt: readonly number[]; use: Grant; routeUse: Grant }[] = [];
        let t = 1_000;
        for (const step of steps) {
          t += step.dt;
          if (step.kind === "request" || step.kind === "lease") {
            const ask = step.kind === "lease" ? { cost: step.cost, leaseUnits: 6, leaseMs: 20 } : { cost: step.cost };
            const d = key.take(t, ask).decision;
            expect(d).toEqual(keyModel.take(t, ask.cost, ask.leaseUnits ?? 0, ask.leaseMs ?? 0));
            if (d.allowed) keyUses.push({ t, cost: step.cost });
            if (d.lease) held.push({ left: d.lease.units, expiresAt: t + d.lease.lifetimeMs });
          } else if (step.kind === "spend") {
            const lease = held.find((h) => t < h.expiresAt && h.left >= step.cost);
            if (lease) {
              lease.left -= step.cost;
              keyUses.push({ t, cost: step.cost });
            }
          } else if (step.kind === "route") {
            const { decision, writes } = takeTogether([key, route], t, step.cost);
            const checks = [keyModel.check(t, step.cost), routeModel.check(t, step.cost)] as const;
            const fits = checks.every((c) => c.allowed);
            expect(decision.allowed).toBe(fits);
            expect(decision.limits).toEqual(checks.flatMap((c) => c.limits).map((l) => (fits ? expect.anything() : l)));
            if (fits) {
              const k = keyModel.take(t, step.cost);
              const r = routeModel.take(t, step.cost);
              expect(decision.limits).toEqual([...k.limits, ...r.limits]);
              expect(decision.recordedAt).toEqual([...(k.recordedAt ?? []), ...(r.recordedAt ?? [])]);
              expect(writes.map((w) => w.length)).toEqual([key.rings.length, route.rings.length]);
              const use = { t, cost: step.cost };
              const routeUse = { t, cost: step.cost };
              keyUses.push(use);
              routeUses.push(routeUse);
              refundable.push({ recordedAt: decision.recordedAt ?? [], use, routeUse });
            } else {
              // Nothing recorded anywhere; each refusing model remembers its refusal, as the core's take does.
              for (const [i, m] of [keyModel, routeModel].entries()) if (!checks[i]?.allowed) m.take(t, step.cost);
              expect(writes).toEqual([[], []]);
              const fitsAt = Math.max(...checks.map((c) => c.now + c.retryAfterMs));
              const never = checks.some((c) => c.neverAllowed);
              expect(decision.retryAfterMs).toBe(never ? Number.POSITIVE_INFINITY : fitsAt - decision.now);
            }
          } else {
            // A refunded route request gives its units back to both budgets, where each recorded them.
            const r = refundable.pop();
            if (r) {
              const split = key.rings.length;
              key.giveBack(r.recordedAt.slice(0, split), r.use.cost);
              route.giveBack(r.recordedAt.slice(split), r.use.cost);
              keyModel.giveBack(r.recordedAt.slice(0, split), r.use.cost);
              routeModel.giveBack(r.recordedAt.slice(split), r.use.cost);
              keyUses.splice(keyUses.indexOf(r.use), 1);
              routeUses.splice(routeUses.indexOf(r.routeUse), 1);
            }
          }
        }
        keyUses.sort((a, b) => a.t - b.t);
        expect(sweepViolation(keyUses, own)).toBeNull();
        expect(sweepViolation(routeUses, routed)).toBeNull();
      }),
      { numRuns: 400 },
    );
  });
});

describe("takeTogether and combine: named cases", () => {
  const own: LimitSpec[] = [{ limit: 10, windowMs: 1000 }];
  const search: LimitSpec[] = [{ limit: 2, windowMs: 60_000 }];

  it("records a request that fits both in both, and a refused one in neither, with the route's exact wait", () => {
    const key = new KeyLog(own);
    const route = new KeyLog(search);
    expect(takeTogether([key, route], 0, 1).decision).toMatchObject({ allowed: true, recordedAt: [0, 0] });
    expect(takeTogether([key, route], 500, 1).decision.allowed).toBe(true);
    const refused = takeTogether([key, route], 700, 1);
    expect(refused.writes).toEqual([[], []]);
    expect(refused.decision).toMatchObject({
      allowed: false,
      neverAllowed: false,
      retryAfterMs: 60_000 - 700,
      blockedUntil: 60_000,
      limits: [
        { remaining: 8, exceeded: false },
        { remaining: 0, exceeded: true },
      ],
      lease: null,
    });
    expect(refused.decision.recordedAt).toBeUndefined();
    // The key's own budget is untouched by the refusal: eight units remain for other routes.
    expect(key.peek(700).limits[0]?.remaining).toBe(8);
  });

  it("waits for the later of the two when both refuse, and never when the cost is above a route limit", () => {
    const key = new KeyLog([{ limit: 1, windowMs: 100_000 }]);
    const route = new KeyLog(search);
    takeTogether([key, route], 0, 1);
    expect(takeTogether([key, route], 10, 1).decision.retryAfterMs).toBe(100_000 - 10);
    const never = takeTogether([new KeyLog(own), new KeyLog(search)], 0, 3).decision;
    expect(never).toMatchObject({ allowed: false, neverAllowed: true, retryAfterMs: Number.POSITIVE_INFINITY });
  });

  it("combine returns a single decision as it is, and refuses an empty list", () => {
    const d = new KeyLog(own).take(0, { cost: 1 }).decision;
    expect(combine([d])).toBe(d);
    expect(() => combine([])).toThrow(RangeError);
  });

  it("combine keeps the key's operator fields and drops recordedAt unless every budget recorded", () => {
    const allowed: Decision = {
      allowed: true,
      neverAllowed: false,
      cost: 1,
      now: 5,
      retryAfterMs: 0,
      blockedUntil: 5,
      limits: [{ remaining: 1, resetMs: 0, exceeded: false }],
      lease: null,
      recordedAt: [5],
      limitsOverride: [{ limit: 2, windowMs: 10, tickMs: 1, name: "vip" }],
    };
    const refused: Decision = { ...allowed, allowed: false, now: 7, retryAfterMs: 3, blockedUntil: 10 };
    const { recordedAt: _, limitsOverride: __, ...bare } = refused;
    const out = combine([allowed, bare]);
    expect(out).toEqual({
      ...allowed,
      allowed: false,
      now: 7,
      retryAfterMs: 3,
      blockedUntil: 10,
      limits: [...allowed.limits, ...allowed.limits],
      recordedAt: undefined,
    });
    expect("recordedAt" in out).toBe(false);
  });
});
