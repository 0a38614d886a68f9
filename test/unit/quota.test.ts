// A calendar quota (src/core/quota.ts): limit units per calendar period in a time zone, reset at each period's start,
// never one unit over in a period — across month ends, leap days and days the clocks change.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type Period, periodAt } from "../../src/core/calendar.ts";
import { Quota } from "../../src/core/quota.ts";

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
