// Prepaid credits (src/core/credits.ts) and the meters deciding them with the sliding limits (src/core/meters.ts):
// spent by cost, never below zero, refused with nothing spent, given back by refunds and unused leased units, topped
// up, refilled at each period's start; and, through the client against the in-memory object, a balance never spent
// twice with leases on and requests sent at once.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { headersOf } from "../../src/client/result.ts";
import { CreditAccount, checkCredits, MAX_CREDITS } from "../../src/core/credits.ts";
import { KeyLog } from "../../src/core/log.ts";
import { takeMetered } from "../../src/core/meters.ts";
import { refusal } from "../../src/pipeline/http.ts";
import { setup } from "../support/store.ts";

const at = (iso: string) => Date.parse(iso);

describe("CreditAccount", () => {
  it("starts at initial, spends by cost, never below zero, gives back and tops up", () => {
    const c = new CreditAccount({ initial: 10 });
    const t = at("2027-03-01T00:00:00Z");
    expect(c.balance(t)).toBe(10);
    expect(c.take(t, 7)).toEqual({ balance: 3, refilledAt: null });
    expect(c.fits(t, 4)).toBe(false);
    expect(() => c.take(t, 4)).toThrow(/^units: 4 are more than the balance/);
    expect(c.balance(t)).toBe(3);
    expect(c.giveBack(2, t, t)?.balance).toBe(5);
    expect(c.add(t, 100).balance).toBe(105);
    expect(c.leaseRoom(t, 5)).toEqual({ units: 100, endsAt: Number.POSITIVE_INFINITY });
    expect(c.fitsAt(t, 200)).toBe(Number.POSITIVE_INFINITY);
    expect(() => c.add(t, 0)).toThrow(/^add: expected a whole number ≥ 1/);
    expect(() => c.add(t, 1.5)).toThrow(/^add: /);
    expect(() => c.add(t, MAX_CREDITS)).toThrow(
      new RangeError(`add: ${MAX_CREDITS} would take the balance of 105 past ${MAX_CREDITS}, the most it holds`),
    );
    expect(() => c.giveBack(-1, t, t)).toThrow(/^units: /);
  });

  it("a refill raises a smaller balance to its amount at each period's start, keeping credits bought", () => {
    const refill = { amount: 50, period: "month" as const, zone: "Europe/Paris" };
    const c = new CreditAccount({ initial: 50, refill });
    const march = at("2027-03-15T12:00:00Z");
    c.take(march, 45);
    expect(c.fitsAt(march, 10)).toBe(at("2027-03-31T22:00:00Z")); // April starts at 00:00 CEST
    expect(c.balance(at("2027-03-31T21:59:59Z"))).toBe(5);
    expect(c.balance(at("2027-03-31T22:00:00Z"))).toBe(50);
    // Twice in one period: once.
    c.take(at("2027-04-02T00:00:00Z"), 50);
    expect(c.balance(at("2027-04-30T00:00:00Z"))).toBe(0);
    c.add(at("2027-04-30T00:00:00Z"), 500);
    expect(c.balance(at("2027-05-01T00:00:00Z"))).toBe(500);
    // A give-back of a spend made before the last refill gives nothing: the refill restored the balance already.
    expect(c.giveBack(45, march, at("2027-05-01T00:00:00Z"))).toBeNull();
    expect(c.giveBack(5, at("2027-05-01T00:00:00Z"), at("2027-05-01T00:00:00Z"))?.balance).toBe(505);
    c.take(at("2027-05-01T00:00:00Z"), 5);
    // Stored and read back: the period it was refilled in comes with it.
    const again = new CreditAccount({ initial: 50, refill }, c.state());
    expect(again.balance(at("2027-05-20T00:00:00Z"))).toBe(500);
    expect(new CreditAccount({ initial: 7 }, { balance: -1, refilledAt: null }).balance(0)).toBe(7);
  });

  it("rejects what is not credits, naming the field", () => {
    expect(() => checkCredits(null as never)).toThrow(/^credits: /);
    expect(() => checkCredits({ initial: -1 })).toThrow(/^initial: /);
    expect(() => checkCredits({ initial: 1, refill: { amount: 0, period: "day", zone: "UTC" } })).toThrow(
      /^refill\.amount: /,
    );
    expect(() => checkCredits({ initial: 1, refill: { amount: 1, period: "year" as never, zone: "UTC" } })).toThrow(
      /^refill\.period: /,
    );
    expect(() => checkCredits({ initial: 1, refill: { amount: 1, period: "day", zone: "Nowhere/Land" } })).toThrow(
      /^refill\.time_zone: /,
    );
  });
});

describe("takeMetered with credits", () => {
  const t = at("2027-03-01T10:00:00Z");
  const wide = () => new KeyLog([{ limit: 1_000, windowMs: 60_000 }]);

  it("a cost the balance cannot cover records nothing, is not cached, and waits for a refill that covers it", () => {
    const log = wide();
    const credits = new CreditAccount({ initial: 3, refill: { amount: 3, period: "day", zone: "UTC" } });
    const meters = { quotas: null, credits };
    expect(takeMetered([log], meters, t, { cost: 2 }).credits).toEqual({ balance: 1, refilledAt: at("2027-03-01") });
    const out = takeMetered([log], meters, t + 1, { cost: 2 });
    expect(out.decision).toMatchObject({
      allowed: false,
      neverAllowed: false,
      retryAfterMs: at("2027-03-02") - t - 1,
      blockedUntil: t + 1,
      credits: { balance: 1, exceeded: true },
    });
    expect(out.decision.limits[0]?.remaining).toBe(998);
    expect(out.credits).toBeNull();
    expect(takeMetered([log], meters, t + 2, { cost: 4 }).decision.retryAfterMs).toBe(Number.POSITIVE_INFINITY);
  });

  it("a lease spends its units when leased; its unused units come back with the next call", () => {
    const log = wide();
    const credits = new CreditAccount({ initial: 20 });
    const meters = { quotas: null, credits };
    const d = takeMetered([log], meters, t, { cost: 1, leaseUnits: 100, leaseMs: 10_000 }).decision;
    const units = d.lease?.units ?? 0;
    expect(units).toBeGreaterThan(0);
    expect(units).toBeLessThanOrEqual(19);
    expect(credits.balance(t)).toBe(19 - units);
    const settle = [{ recordedAt: d.lease?.recordedAt ?? [], issuedAt: d.now, used: 0, lastUseMs: 0, unused: units }];
    expect(takeMetered([log], meters, t + 100, { cost: 1, settle }).credits?.balance).toBe(18);
  });
});

describe("credits through the client", () => {
  it("refuses with reason credits, 402 and the balance; a top-up counts at once", async () => {
    const t = setup({ limits: [{ limit: 100, window: "1m" }], credits: { initial: 2 } });
    expect((await t.limit()).credits).toEqual({ balance: 1, refuseWith: 402 });
    await t.limit();
    const refused = await t.limit();
    expect(refused).toMatchObject({
      allowed: false,
      reason: "credits",
      retryAfterMs: Number.POSITIVE_INFINITY,
      credits: { balance: 0, refuseWith: 402 },
    });
    const response = refusal(refused);
    expect(response.status).toBe(402);
    expect(await response.json()).toMatchObject({ title: "Payment Required", reason: "credits", balance: 0, cost: 1 });
    expect(headersOf(refused, "draft-11").get("Retry-After")).toBeNull();
    // Not cached: after a top-up the next request passes.
    const meters = t.store.meters.get("key:a");
    meters?.credits?.add(t.client.now(), 5);
    expect((await t.limit()).allowed).toBe(true);
  });

  it("status = 429 where the plan says so", async () => {
    const t = setup({
      limits: [{ limit: 100, window: "1m" }],
      plans: [
        { name: "pre", key_prefix: "pre_", limits: [{ limit: 9, window: "1s" }], credits: { initial: 0, status: 429 } },
      ],
    });
    const plan = t.client.config.plans[0];
    const r = await t.client.limit({ ns: t.ns, name: "key:pre_1", plan: plan as never, cost: 1 });
    expect(r.reason).toBe("credits");
    expect(refusal(r).status).toBe(429);
    // The default plan has none: no credits in its results.
    expect((await t.limit()).credits).toBeUndefined();
  });

  it("property: the balance is exactly what was bought less what was granted, with parallel requests, refunds and top-ups", async () => {
    const step = fc.oneof(
      fc.record({
        kind: fc.constant("burst" as const),
        n: fc.integer({ min: 1, max: 6 }),
        cost: fc.integer({ min: 1, max: 3 }),
      }),
      fc.record({ kind: fc.constant("wait" as const), ms: fc.integer({ min: 0, max: 40_000 }) }),
      fc.record({ kind: fc.constant("refund" as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant("add" as const), units: fc.integer({ min: 1, max: 5 }) }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 30 }),
        fc.boolean(),
        fc.array(step, { maxLength: 40 }),
        async (initial, leases, steps) => {
          const t = setup({ limits: [{ limit: 10_000, window: "1m" }], credits: { initial }, leases });
          let bought = initial;
          let spent = 0;
          const kept: { units: number; r: Awaited<ReturnType<typeof t.limit>> }[] = [];
          for (const s of steps) {
            if (s.kind === "wait") t.advance(s.ms);
            else if (s.kind === "add") {
              // As an operator's top-up at the object.
              const meters = t.store.book("key:a", { credits: t.plan.meters?.credits as never });
              meters?.credits?.add(t.client.now(), s.units);
              bought += s.units;
            } else if (s.kind === "burst") {
              const out = await Promise.all(
                Array.from({ length: s.n }, () =>
                  t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: s.cost, bg: t.bg }),
                ),
              );
              for (const r of out) {
                expect(r.reason).not.toMatch(/^limiter_/);
                if (r.allowed) {
                  spent += s.cost;
                  kept.push({ units: s.cost, r });
                }
              }
            } else if (kept.length > 0) {
              const i = s.pick % kept.length;
              const g = kept[i] as (typeof kept)[number];
              if (await t.client.refund(t.ns, g.r.handle?.grants[0] as never)) {
                spent -= g.units;
                kept.splice(i, 1);
              }
            }
            await t.settle();
            // Exact: no leases for a plan with credits, so the balance is what was bought less what was granted.
            expect(spent).toBeLessThanOrEqual(bought);
            expect(t.store.meters.get("key:a")?.credits?.balance(t.client.now()) ?? initial).toBe(bought - spent);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("CreditAccount, at its edges", () => {
  const t = at("2027-03-10T00:00:00Z");
  const refill = { amount: 50, period: "month" as const, zone: "UTC" };

  it("checks a spec: no refill is null; the refill's fields named", () => {
    expect(checkCredits({ initial: 1 })).toEqual({ initial: 1, refill: null });
    expect(checkCredits({ initial: 0, refill: null })).toEqual({ initial: 0, refill: null });
    expect(() => checkCredits({ initial: 1, refill: { amount: 1, period: "year" as never, zone: "UTC" } })).toThrow(
      'refill.period: expected one of "hour", "day", "week", "month", got "year"',
    );
    expect(() => checkCredits({ initial: 1, refill: { amount: 1, period: "day", zone: "Nowhere/Land" } })).toThrow(
      /^refill\.time_zone: the runtime knows no zone "Nowhere\/Land"/,
    );
    expect(() => new CreditAccount({ initial: 1 }).take(t, 0)).toThrow(/^units: expected a whole number ≥ 1/);
  });

  it("comes back from what was stored: a balance of 0, and the period it was last refilled in", () => {
    expect(new CreditAccount({ initial: 7 }, { balance: 0, refilledAt: null }).balance(t)).toBe(0);
    // Stored in February: March's refill is due.
    const feb = new CreditAccount({ initial: 7, refill }, { balance: 5, refilledAt: at("2027-02-01T00:00:00Z") });
    expect(feb.balance(t)).toBe(50);
    const march = new CreditAccount({ initial: 7, refill }, { balance: 5, refilledAt: at("2027-03-01T00:00:00Z") });
    expect(march.balance(t)).toBe(5);
    // A clock read before the period it was refilled in changes nothing; back in it, no second refill.
    expect(march.balance(at("2027-02-27T00:00:00Z"))).toBe(5);
    expect(march.balance(at("2027-03-31T23:59:59Z"))).toBe(5);
    expect(march.balance(at("2027-04-01T00:00:00Z"))).toBe(50);
    expect(march.state()).toEqual({ balance: 50, refilledAt: at("2027-04-01T00:00:00Z") });
  });

  it("gives back: not across a refill it had not yet seen; at the refill's first instant, yes; without a refill, always", () => {
    const c = new CreditAccount({ initial: 50, refill });
    c.take(t, 30);
    // April's refill comes with the give-back's own clock.
    expect(c.giveBack(30, t, at("2027-04-02T00:00:00Z"))).toBeNull();
    expect(c.balance(at("2027-04-02T00:00:00Z"))).toBe(50);
    c.take(at("2027-04-01T00:00:00Z"), 10);
    expect(c.giveBack(10, at("2027-04-01T00:00:00Z"), at("2027-04-02T00:00:00Z"))?.balance).toBe(50);
    // No refill (any more): a stored refill period does not stop a give-back.
    const plain = new CreditAccount({ initial: 5 }, { balance: 5, refilledAt: at("2027-04-01T00:00:00Z") });
    expect(plain.giveBack(1, at("2027-03-01T00:00:00Z"), t)?.balance).toBe(6);
  });

  it("adds up to the most a balance may hold; fits now, at a refill that covers the cost exactly, or never", () => {
    expect(new CreditAccount({ initial: 0 }).add(t, MAX_CREDITS).balance).toBe(MAX_CREDITS);
    // The case: 9007199254740986 then 6 fits exactly; then 1 more is refused and changes nothing.
    const near = new CreditAccount({ initial: 0 });
    near.add(t, MAX_CREDITS - 5);
    expect(near.add(t, 5).balance).toBe(MAX_CREDITS);
    expect(() => near.add(t, 1)).toThrow(
      new RangeError(`add: 1 would take the balance of ${MAX_CREDITS} past ${MAX_CREDITS}, the most it holds`),
    );
    expect(near.state()).toEqual({ balance: MAX_CREDITS, refilledAt: null });
    const c = new CreditAccount({ initial: 10, refill: { amount: 10, period: "day", zone: "UTC" } });
    expect(c.fitsAt(t, 10)).toBe(t);
    c.take(t, 10);
    expect(c.fitsAt(t, 10)).toBe(at("2027-03-11T00:00:00Z"));
    expect(c.fitsAt(t, 11)).toBe(Number.POSITIVE_INFINITY);
  });
});
