// A calendar quota (src/core/quota.ts): limit units per calendar period in a time zone, reset at each period's start,
// never one unit over in a period — across month ends, leap days and days the clocks change.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type Period, periodAt } from "../../src/core/calendar.ts";
import { KeyLog } from "../../src/core/log.ts";
import { giveBackUnused, leaseWithin, type Meters, takeMetered, withMeters } from "../../src/core/meters.ts";
import { Quota, QuotaBook } from "../../src/core/quota.ts";

/** `takeMetered` with quotas alone. */
const takeQuoted = (logs: KeyLog[], quotas: QuotaBook, now: number, ask: Parameters<typeof takeMetered>[3]) =>
  takeMetered(logs, { quotas, credits: null }, now, ask);
const withQuotas = (d: Parameters<typeof withMeters>[0], quotas: QuotaBook, fits: boolean) =>
  withMeters(d, { quotas, credits: null }, { quotas: fits, credits: true });
const only = (quotas: QuotaBook): Meters => ({ quotas, credits: null });

const at = (iso: string) => Date.parse(iso);

describe("Quota", () => {
  it("grants up to the limit in a month, all or nothing, and starts afresh at the next month's local midnight", () => {
    const q = new Quota({ limit: 10, period: "month", zone: "America/New_York" });
    expect(q.take(at("2026-10-31T12:00:00Z"), 7)).toBe(at("2026-10-01T04:00:00Z"));
    expect(q.take(at("2026-10-31T13:00:00Z"), 4)).toBeNull();
    expect(q.remaining(at("2026-10-31T13:00:00Z"))).toBe(3);
    expect(q.take(at("2026-11-01T03:59:59.999Z"), 3)).toBe(at("2026-10-01T04:00:00Z"));
    expect(q.resetAt(at("2026-11-01T03:59:59.999Z"))).toBe(at("2026-11-01T04:00:00Z"));
    // Midnight in New York (EDT, UTC−4): November.
    expect(q.remaining(at("2026-11-01T04:00:00Z"))).toBe(10);
    expect(q.state()).toEqual({ periodStart: at("2026-11-01T04:00:00Z"), used: 0 });
  });

  it("a leap day and the day the clocks go forward are periods like any other", () => {
    const q = new Quota({ limit: 2, period: "day", zone: "UTC" });
    expect(q.take(at("2028-02-29T23:00:00Z"), 2)).toBe(at("2028-02-29T00:00:00Z"));
    expect(q.take(at("2028-03-01T00:00:00Z"), 2)).toBe(at("2028-03-01T00:00:00Z"));
    const ny = new Quota({ limit: 1, period: "day", zone: "America/New_York" });
    expect(ny.take(at("2026-03-08T05:00:00Z"), 1)).not.toBeNull();
    // 23 hours later it is the next day in New York.
    expect(ny.take(at("2026-03-09T03:59:59Z"), 1)).toBeNull();
    expect(ny.take(at("2026-03-09T04:00:00Z"), 1)).not.toBeNull();
  });

  it("gives back to the period a grant counted in, only while it lasts; a lease ends by the period's end", () => {
    const q = new Quota({ limit: 5, period: "hour", zone: "UTC" });
    const period = q.take(at("2026-06-01T10:59:00Z"), 4) as number;
    expect(q.leaseEnd(at("2026-06-01T10:59:00Z"))).toBe(at("2026-06-01T11:00:00Z"));
    expect(q.giveBack(at("2026-06-01T10:59:30Z"), period, 3)).toBe(true);
    expect(q.remaining(at("2026-06-01T10:59:30Z"))).toBe(4);
    // The next hour: nothing of the last one is given back to it.
    q.take(at("2026-06-01T11:00:00Z"), 2);
    expect(q.giveBack(at("2026-06-01T11:00:01Z"), period, 1)).toBe(false);
    expect(q.remaining(at("2026-06-01T11:00:01Z"))).toBe(3);
    // More than counted: what was counted.
    expect(q.giveBack(at("2026-06-01T11:00:02Z"), at("2026-06-01T11:00:00Z"), 9)).toBe(true);
    expect(q.remaining(at("2026-06-01T11:00:02Z"))).toBe(5);
    expect(q.giveBack(at("2026-06-01T11:00:02Z"), at("2026-06-01T11:00:00Z"), 1)).toBe(false);
  });

  it("counts a settle's debt over the limit (over) in the period containing now; it refuses until the next period", () => {
    const q = new Quota({ limit: 5, period: "day", zone: "UTC" });
    expect(q.take(at("2026-06-01T10:00:00Z"), 4)).not.toBeNull();
    expect(q.take(at("2026-06-01T11:00:00Z"), 3, true)).toBe(at("2026-06-01T00:00:00Z"));
    expect(q.state()).toEqual({ periodStart: at("2026-06-01T00:00:00Z"), used: 7 });
    expect(q.remaining(at("2026-06-01T12:00:00Z"))).toBe(0);
    expect(q.take(at("2026-06-01T12:00:00Z"), 1)).toBeNull();
    // A give-back of the period takes off what it gives, the debt's units included.
    expect(q.giveBack(at("2026-06-01T12:00:00Z"), at("2026-06-01T00:00:00Z"), 3)).toBe(true);
    expect(q.remaining(at("2026-06-01T12:00:00Z"))).toBe(1);
    // A debt charged in the next period counts there, not in the one before.
    q.take(at("2026-06-02T00:00:00Z"), 2, true);
    expect(q.state()).toEqual({ periodStart: at("2026-06-02T00:00:00Z"), used: 2 });
    expect(() => q.take(at("2026-06-02T00:00:00Z"), 0, true)).toThrow(/^cost: /);
    expect(() => q.take(at("2026-06-02T00:00:00Z"), 1.5, true)).toThrow(/^cost: /);
    const b = new QuotaBook([
      { limit: 5, period: "day", zone: "UTC" },
      { limit: 50, period: "month", zone: "UTC" },
    ]);
    expect(() => b.take(at("2026-06-01T10:00:00Z"), 9)).toThrow(/^units: 9 do not fit/);
    expect(b.take(at("2026-06-01T10:00:00Z"), 9, true).map((r) => r.used)).toEqual([9, 9]);
  });

  it("comes back from its stored state while the period lasts; a stale or odd state starts afresh", () => {
    const spec = { limit: 5, period: "week" as const, zone: "Europe/Berlin" };
    const q = new Quota(spec);
    expect(q.state()).toBeNull();
    q.take(at("2026-11-25T12:00:00Z"), 3);
    const stored = q.state();
    // The ISO week from Monday 2026-11-23, 00:00 in Berlin (UTC+1).
    expect(stored).toEqual({ periodStart: at("2026-11-22T23:00:00Z"), used: 3 });
    expect(new Quota(spec, stored).remaining(at("2026-11-29T22:59:59Z"))).toBe(2);
    expect(new Quota(spec, stored).remaining(at("2026-11-29T23:00:00Z"))).toBe(5);
    expect(
      new Quota(spec, { periodStart: at("2026-11-23T00:00:00Z"), used: 3 }).remaining(at("2026-11-25T12:00:00Z")),
    ).toBe(5);
    expect(new Quota(spec, { periodStart: Number.NaN, used: 3 }).state()).toBeNull();
    expect(new Quota(spec, { periodStart: at("2026-11-22T23:00:00Z"), used: -1 }).state()).toBeNull();
    // A clock read early does not go back to an earlier period.
    const later = new Quota(spec, stored);
    expect(later.remaining(at("2026-11-20T00:00:00Z"))).toBe(2);
  });

  it("rejects what is not a quota, naming the field", () => {
    expect(() => new Quota({ limit: 0, period: "day", zone: "UTC" })).toThrow(/^limit: /);
    expect(() => new Quota({ limit: 1.5, period: "day", zone: "UTC" })).toThrow(/^limit: /);
    expect(() => new Quota({ limit: 1, period: "year" as Period, zone: "UTC" })).toThrow(/^period: /);
    expect(() => new Quota({ limit: 1, period: "day", zone: "Nowhere/Atlantis" })).toThrow(/^time zone: /);
    const q = new Quota({ limit: 1, period: "day", zone: "UTC" });
    expect(() => q.take(0, 0)).toThrow(/^cost: /);
    expect(() => q.giveBack(0, 0, 0)).toThrow(/^units: /);
    expect(() => q.remaining(Number.POSITIVE_INFINITY)).toThrow(/^now: /);
  });

  it("property: never more than the limit in any period, whatever the traffic, the zone and the refunds", () => {
    const zones = ["UTC", "America/New_York", "America/Havana", "America/Santiago", "Asia/Kathmandu"];
    fc.assert(
      fc.property(
        fc.constantFrom(...zones),
        fc.constantFrom<Period>("hour", "day", "week", "month"),
        fc.integer({ min: 1, max: 20 }),
        fc.array(
          fc.record({
            gap: fc.integer({ min: 0, max: 6 * 3_600_000 }),
            cost: fc.integer({ min: 1, max: 5 }),
            refund: fc.boolean(),
          }),
          { maxLength: 120 },
        ),
        (zone, period, limit, steps) => {
          const q = new Quota({ limit, period, zone });
          const used = new Map<number, number>();
          let t = at("2026-03-01T00:00:00Z");
          let last: { start: number; cost: number } | null = null;
          for (const s of steps) {
            t += s.gap;
            const start = periodAt(t, period, zone).start;
            if (s.refund && last !== null && q.giveBack(t, last.start, last.cost)) {
              used.set(last.start, (used.get(last.start) ?? 0) - last.cost);
              last = null;
              continue;
            }
            const counted = q.take(t, s.cost);
            if (counted === null) continue;
            expect(counted).toBe(start);
            used.set(start, (used.get(start) ?? 0) + s.cost);
            last = { start, cost: s.cost };
          }
          for (const n of used.values()) expect(n).toBeLessThanOrEqual(limit);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe("QuotaBook: a key's quotas decided as one", () => {
  const day = { limit: 5, period: "day" as const, zone: "UTC" };
  const hour = { limit: 3, period: "hour" as const, zone: "Europe/Berlin" };

  it("fits a cost only when every quota has room; leases get the least room and end at the earliest period end", () => {
    const b = new QuotaBook([day, hour]);
    const t = at("2026-05-04T10:30:00Z");
    expect(b.fits(t, 3)).toBe(true);
    expect(b.fits(t, 4)).toBe(false);
    // Half of what the tighter quota (3 an hour) has left after the cost: an isolate that vanishes strands no more.
    expect(b.leaseRoom(t, 1)).toEqual({ units: 1, endsAt: at("2026-05-04T11:00:00Z") });
    b.take(t, 2);
    expect(b.leaseRoom(t, 1)).toEqual({ units: 0, endsAt: at("2026-05-04T11:00:00Z") });
    expect(b.leaseRoom(t, 5).units).toBe(0);
    expect(() => b.take(t, 2)).toThrow(/^units: 2 do not fit every quota/);
    // Nothing was counted by the take that did not fit.
    expect(b.statuses(t, 1, true).map((s) => s.remaining)).toEqual([3, 1]);
  });

  it("states, waits and idle time: to the next start of each quota used", () => {
    const b = new QuotaBook([day, hour]);
    const t = at("2026-05-04T10:30:00Z");
    expect(b.statuses(t, 1, true)).toEqual([
      { remaining: 5, resetMs: 0, exceeded: false },
      { remaining: 3, resetMs: 0, exceeded: false },
    ]);
    expect(b.idleAt).toBe(Number.NEGATIVE_INFINITY);
    b.take(t, 3);
    expect(b.statuses(t, 1, false)).toEqual([
      { remaining: 2, resetMs: at("2026-05-05T00:00:00Z") - t, exceeded: false },
      { remaining: 0, resetMs: 30 * 60_000, exceeded: true },
    ]);
    expect(b.wait(t, 1)).toEqual({
      never: false,
      fitsAt: at("2026-05-04T11:00:00Z"),
      oneFitsAt: at("2026-05-04T11:00:00Z"),
    });
    expect(b.wait(t, 3).fitsAt).toBe(at("2026-05-05T00:00:00Z"));
    expect(b.wait(t, 4)).toEqual({
      never: true,
      fitsAt: Number.POSITIVE_INFINITY,
      oneFitsAt: at("2026-05-04T11:00:00Z"),
    });
    expect(b.idleAt).toBe(at("2026-05-05T00:00:00Z"));
  });

  it("gives back to the period a grant was counted in while it lasts; rows carry the specs and come back", () => {
    const b = new QuotaBook([day, hour]);
    const t = at("2026-05-04T10:30:00Z");
    b.take(t, 3);
    // An hour later the hour's period has ended: only the day gets the units back.
    const rows = b.giveBack(t + 3_600_000, t, 2);
    expect(rows).toEqual([
      { ...day, start: at("2026-05-04T00:00:00Z"), end: at("2026-05-05T00:00:00Z"), used: 1 },
      { ...hour, start: at("2026-05-04T11:00:00Z"), end: at("2026-05-04T12:00:00Z"), used: 0 },
    ]);
    expect(b.giveBack(t + 3_600_000, at("2026-05-03T10:00:00Z"), 1)).toEqual([]);
    expect(() => b.giveBack(t, 1.5, 1)).toThrow(/^at: /);
    // Stored and read back: counts by period and zone, whatever the limit now.
    const again = new QuotaBook([{ ...day, limit: 50 }], rows);
    expect(again.statuses(t + 3_600_000, 1, true)[0]?.remaining).toBe(49);
    expect(QuotaBook.stored(rows).isFor([day, hour])).toBe(true);
    expect(again.isFor([day])).toBe(false);
    expect(again.isFor([{ ...day, limit: 50 }])).toBe(true);
    expect(again.isFor([{ ...day, limit: 50, zone: "Europe/Berlin" }])).toBe(false);
    expect(again.isFor(null as never)).toBe(false);
  });

  it("rejects what is not a list of quotas, naming the field", () => {
    expect(() => new QuotaBook(null as never)).toThrow(/^quotas: expected a list/);
    expect(() => new QuotaBook([null as never])).toThrow(/^quotas\[0\]: expected a quota/);
    expect(() => new QuotaBook([day, { ...day, period: "year" as never }])).toThrow(/^quotas\[1\]\.period: /);
    expect(() => new QuotaBook([{ ...day, zone: "Mars/Olympus" }])).toThrow(/^quotas\[0\]\.time zone: /);
  });
});

describe("takeMetered with quotas: the sliding limits and the quotas, all or nothing", () => {
  const t = at("2026-05-04T10:59:50Z");

  it("a cost the quota refuses records nothing in the log, and waits for the next period", () => {
    const log = new KeyLog([{ limit: 100, windowMs: 60_000 }]);
    const book = new QuotaBook([{ limit: 2, period: "hour", zone: "UTC" }]);
    expect(takeQuoted([log], book, t, { cost: 2 }).decision.allowed).toBe(true);
    const out = takeQuoted([log], book, t + 1, { cost: 1 });
    expect(out.decision).toMatchObject({
      allowed: false,
      retryAfterMs: 10_000 - 1,
      blockedUntil: at("2026-05-04T11:00:00Z"),
    });
    expect(out.decision.quotas).toEqual([{ remaining: 0, resetMs: 10_000 - 1, exceeded: true }]);
    expect(out.decision.limits).toEqual([expect.objectContaining({ remaining: 98, exceeded: false })]);
    expect(out.quotaRows).toBeNull();
    expect(out.writes).toEqual([[]]);
    expect(takeQuoted([log], book, t + 2, { cost: 3 }).decision).toMatchObject({
      neverAllowed: true,
      retryAfterMs: Number.POSITIVE_INFINITY,
    });
  });

  it("a sliding limit's refusal counts nothing in the quota", () => {
    const log = new KeyLog([{ limit: 1, windowMs: 60_000 }]);
    const book = new QuotaBook([{ limit: 5, period: "day", zone: "UTC" }]);
    takeQuoted([log], book, t, { cost: 1 });
    const out = takeQuoted([log], book, t + 1, { cost: 1 });
    expect(out.decision.allowed).toBe(false);
    expect(out.decision.quotas?.[0]).toEqual({
      remaining: 4,
      resetMs: at("2026-05-05T00:00:00Z") - t - 1,
      exceeded: false,
    });
    expect(out.quotaRows).toBeNull();
  });

  it("a lease counts in the quota at once, is cut to its room and its period; unused units come back while it lasts", () => {
    const log = new KeyLog([{ limit: 1_000, windowMs: 60_000 }]);
    const book = new QuotaBook([{ limit: 10, period: "hour", zone: "UTC" }]);
    const out = takeQuoted([log], book, t, { cost: 1, leaseUnits: 50, leaseMs: 30_000 });
    const lease = out.decision.lease;
    expect(lease).not.toBeNull();
    expect(lease?.units).toBeLessThanOrEqual(9);
    // Spent before 11:00 (the caller's lifetime runs from before it asked).
    expect(t + (lease?.lifetimeMs ?? 0)).toBeLessThan(at("2026-05-04T11:00:00Z"));
    expect(out.quotaRows?.[0]?.used).toBe(1 + (lease?.units ?? 0));
    const unused = lease?.units ?? 0;
    const settle = [{ recordedAt: lease?.recordedAt ?? [], issuedAt: t, used: 0, lastUseMs: 0, unused }];
    const back = takeQuoted([log], book, t + 5_000, { cost: 1, settle });
    expect(back.quotaRows?.[0]?.used).toBe(2);
    // In the next hour, units of a lease issued in this one go back nowhere.
    const late = new QuotaBook(
      [{ limit: 10, period: "hour", zone: "UTC" }],
      [
        {
          limit: 10,
          period: "hour",
          zone: "UTC",
          start: at("2026-05-04T10:00:00Z"),
          end: at("2026-05-04T11:00:00Z"),
          used: 10,
        },
      ],
    );
    expect(giveBackUnused(only(late), at("2026-05-04T11:00:01Z"), settle)).toEqual({ quotaRows: null, credits: null });
    expect(
      giveBackUnused(only(late), t + 1, [null as never, { ...settle[0], unused: 0 } as never]).quotaRows,
    ).toBeNull();
  });

  it("a lease asked alone with no room left grants nothing and counts nothing", () => {
    const log = new KeyLog([{ limit: 1_000, windowMs: 60_000 }]);
    const book = new QuotaBook([{ limit: 1, period: "hour", zone: "UTC" }]);
    takeQuoted([log], book, t, { cost: 1 });
    const out = takeQuoted([log], book, t + 1, { cost: 0, leaseUnits: 5, leaseMs: 1_000 });
    expect(out.decision).toMatchObject({ allowed: true, cost: 0, lease: null });
    expect(out.quotaRows).toBeNull();
  });

  it("leaseWithin: no lease past the period or over the room; a lead never longer than the lifetime", () => {
    const ask = { cost: 1, leaseUnits: 20, leaseMs: 30_000, leaseLeadMs: 25_000 };
    expect(leaseWithin(ask, { units: 5, endsAt: t + 10_000 }, t)).toEqual({
      cost: 1,
      leaseUnits: 5,
      leaseMs: 9_999,
      leaseLeadMs: 9_999,
    });
    expect(leaseWithin(ask, { units: 0, endsAt: t + 10_000 }, t)).toMatchObject({ leaseUnits: 0, leaseMs: 0 });
    expect(leaseWithin(ask, { units: 5, endsAt: t + 1 }, t)).toMatchObject({ leaseUnits: 0, leaseMs: 0 });
    expect(leaseWithin({ cost: 1 }, { units: 5, endsAt: t + 1 }, t)).toEqual({ cost: 1 });
  });

  it("withQuotas keeps a grant's own fields and drops a refused one's record and lease", () => {
    const log = new KeyLog([{ limit: 10, windowMs: 1_000 }]);
    const book = new QuotaBook([{ limit: 10, period: "day", zone: "UTC" }]);
    const d = log.take(t, { cost: 1 }).decision;
    expect(withQuotas(d, book, true)).toMatchObject({ allowed: true, recordedAt: d.recordedAt });
    const refused = withQuotas(d, book, false);
    expect(refused.allowed).toBe(false);
    expect(refused.recordedAt).toBeUndefined();
    expect(refused.lease).toBeNull();
  });
});

describe("meters, at their edges", () => {
  const t = at("2026-05-04T10:00:00Z");

  it("leaseWithin keeps a lease of one unit or one millisecond", () => {
    expect(leaseWithin({ cost: 1, leaseUnits: 5, leaseMs: 1_000 }, { units: 1, endsAt: t + 2 }, t)).toEqual({
      cost: 1,
      leaseUnits: 1,
      leaseMs: 1,
      leaseLeadMs: 0,
    });
  });

  it("giveBackUnused: one unused unit comes back; what is not a settlement is skipped", () => {
    const quotas = new QuotaBook([{ limit: 10, period: "day", zone: "UTC" }]);
    quotas.take(t, 5);
    const m = only(quotas);
    expect(giveBackUnused(m, t, null as never)).toEqual({ quotaRows: null, credits: null });
    expect(
      giveBackUnused(m, t, [{ recordedAt: [], issuedAt: 1.5, used: 0, lastUseMs: 0, unused: 2 }]).quotaRows,
    ).toBeNull();
    const one = giveBackUnused(m, t, [{ recordedAt: [], issuedAt: t, used: 0, lastUseMs: 0, unused: 1 }]);
    expect(one.quotaRows?.[0]?.used).toBe(4);
  });

  it("takeMetered writes the settled rows before the grant's, and with a route, the route's apart", () => {
    const log = new KeyLog([{ limit: 1_000, windowMs: 60_000 }]);
    const quotas = new QuotaBook([{ limit: 100, period: "day", zone: "UTC" }]);
    const leased = takeMetered([log], only(quotas), t, { cost: 1, leaseUnits: 10, leaseMs: 10_000 }).decision;
    const settle = [
      { recordedAt: leased.lease?.recordedAt ?? [], issuedAt: leased.now, used: 1, lastUseMs: 5, unused: 0 },
    ];
    const out = takeMetered([log], only(quotas), t + 100, { cost: 1, settle });
    expect(out.writes).toHaveLength(1);
    expect(out.writes[0]?.length).toBeGreaterThanOrEqual(2);
    // The settled rows first (the used unit moved to its use, t + 5 plus the margins), then the grant's.
    const times = (out.writes[0] ?? []).map((w) => w.ts);
    const moved = times.findIndex((ts) => ts > t && ts < t + 100);
    expect(moved).toBeGreaterThanOrEqual(0);
    expect(moved).toBeLessThan(times.length - 1);
    const route = new KeyLog([{ limit: 5, windowMs: 60_000 }]);
    const routed = takeMetered([log, route], only(quotas), t + 200, { cost: 1, settle: [] });
    expect(routed.writes).toHaveLength(2);
    expect(routed.writes.map((w) => w.length)).toEqual([1, 1]);
    expect(routed.quotaRows?.[0]?.used).toBe(leased.cost + (leased.lease?.units ?? 0) + 2);
  });
});
