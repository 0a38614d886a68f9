// Calendar periods in a time zone (src/core/calendar.ts): month ends, leap days, ISO weeks, and days the clocks change
// in both directions — including midnights the clocks skip (Santiago, Beirut) and repeat (Havana) — with the zone's
// rules from the runtime's Intl.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { checkTimeZone, firstInstantShowing, type Period, periodAt } from "../../src/core/calendar.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const at = (iso: string) => Date.parse(iso);
const iso = (ms: number) => new Date(ms).toISOString();
const span = (t: string, period: Period, zone: string) => {
  const { start, end } = periodAt(at(t), period, zone);
  return [iso(start), iso(end)];
};

describe("periodAt", () => {
  it("UTC: the hour, the day, the ISO week from Monday, the month — a leap February included", () => {
    expect(span("2028-02-29T13:45:10.123Z", "hour", "UTC")).toEqual([
      "2028-02-29T13:00:00.000Z",
      "2028-02-29T14:00:00.000Z",
    ]);
    expect(span("2028-02-29T13:45:10.123Z", "day", "UTC")).toEqual([
      "2028-02-29T00:00:00.000Z",
      "2028-03-01T00:00:00.000Z",
    ]);
    // 2028-02-27 is a Sunday: its ISO week began on Monday the 21st.
    expect(span("2028-02-27T23:59:59.999Z", "week", "UTC")).toEqual([
      "2028-02-21T00:00:00.000Z",
      "2028-02-28T00:00:00.000Z",
    ]);
    expect(span("2028-02-28T00:00:00.000Z", "week", "UTC")).toEqual([
      "2028-02-28T00:00:00.000Z",
      "2028-03-06T00:00:00.000Z",
    ]);
    expect(span("2028-02-15T00:00:00.000Z", "month", "UTC")).toEqual([
      "2028-02-01T00:00:00.000Z",
      "2028-03-01T00:00:00.000Z",
    ]);
    expect(span("2027-02-15T00:00:00.000Z", "month", "UTC")).toEqual([
      "2027-02-01T00:00:00.000Z",
      "2027-03-01T00:00:00.000Z",
    ]);
    expect(span("2026-12-31T23:59:59.999Z", "month", "UTC")).toEqual([
      "2026-12-01T00:00:00.000Z",
      "2027-01-01T00:00:00.000Z",
    ]);
  });

  it("New York: the day the clocks go forward is 23 hours, the day they go back 25; months start at local midnight", () => {
    const spring = periodAt(at("2026-03-08T12:00:00Z"), "day", "America/New_York");
    expect([iso(spring.start), spring.end - spring.start]).toEqual(["2026-03-08T05:00:00.000Z", 23 * HOUR]);
    const fall = periodAt(at("2026-11-01T12:00:00Z"), "day", "America/New_York");
    expect([iso(fall.start), fall.end - fall.start]).toEqual(["2026-11-01T04:00:00.000Z", 25 * HOUR]);
    // November began at midnight EDT (UTC−4); December begins at midnight EST (UTC−5).
    expect(span("2026-11-15T00:00:00Z", "month", "America/New_York")).toEqual([
      "2026-11-01T04:00:00.000Z",
      "2026-12-01T05:00:00.000Z",
    ]);
    // The hour the clocks repeat (01:00–02:00) is two hours, one per occurrence.
    const first = periodAt(at("2026-11-01T05:30:00Z"), "hour", "America/New_York");
    const second = periodAt(at("2026-11-01T06:30:00Z"), "hour", "America/New_York");
    expect([iso(first.start), iso(first.end), iso(second.start), iso(second.end)]).toEqual([
      "2026-11-01T05:00:00.000Z",
      "2026-11-01T06:00:00.000Z",
      "2026-11-01T06:00:00.000Z",
      "2026-11-01T07:00:00.000Z",
    ]);
  });

  it("a midnight the clocks skip starts the day at the end of the gap (Santiago, Beirut)", () => {
    // Santiago, 2026-09-06: 00:00 (UTC−4) is 01:00 (UTC−3); the day starts then and is 23 hours long.
    const santiago = periodAt(at("2026-09-06T15:00:00Z"), "day", "America/Santiago");
    expect([iso(santiago.start), santiago.end - santiago.start]).toEqual(["2026-09-06T04:00:00.000Z", 23 * HOUR]);
    expect(iso(periodAt(at("2026-09-06T03:59:59.999Z"), "day", "America/Santiago").end)).toBe(
      "2026-09-06T04:00:00.000Z",
    );
    // Beirut, 2026-03-29: 00:00 (UTC+2) is 01:00 (UTC+3).
    expect(span("2026-03-29T10:00:00Z", "day", "Asia/Beirut")).toEqual([
      "2026-03-28T22:00:00.000Z",
      "2026-03-29T21:00:00.000Z",
    ]);
    // A month that starts in such a gap: Santiago's September 2026 starts at 00:00 on the 1st (no gap then).
    expect(span("2026-09-20T00:00:00Z", "month", "America/Santiago")[0]).toBe("2026-09-01T04:00:00.000Z");
  });

  it("a midnight the clocks repeat starts the day at its first occurrence (Havana, 2026-11-01)", () => {
    // 01:00 (UTC−4) goes back to 00:00 (UTC−5): midnight is 04:00Z and again 05:00Z; the day starts at the first.
    const day = periodAt(at("2026-11-01T12:00:00Z"), "day", "America/Havana");
    expect([iso(day.start), day.end - day.start]).toEqual(["2026-11-01T04:00:00.000Z", 25 * HOUR]);
    expect(iso(periodAt(at("2026-10-31T12:00:00Z"), "day", "America/Havana").end)).toBe("2026-11-01T04:00:00.000Z");
  });

  it("zones with offsets of 30 and 45 minutes: hours start at the local hour", () => {
    expect(span("2026-06-01T10:10:00Z", "hour", "Asia/Kolkata")).toEqual([
      "2026-06-01T09:30:00.000Z",
      "2026-06-01T10:30:00.000Z",
    ]);
    expect(span("2026-06-01T10:10:00Z", "day", "Asia/Kathmandu")).toEqual([
      "2026-05-31T18:15:00.000Z",
      "2026-06-01T18:15:00.000Z",
    ]);
  });

  it("property: periods tile time in every zone — each instant in one, each ending where the next starts", () => {
    const zones = [
      "UTC",
      "America/New_York",
      "Europe/Berlin",
      "Australia/Sydney",
      "Asia/Kolkata",
      "Asia/Kathmandu",
      "America/Santiago",
      "America/Havana",
      "Asia/Beirut",
      "Pacific/Chatham",
      "Pacific/Apia",
    ];
    const lengths: Record<Period, [number, number]> = {
      hour: [HOUR, HOUR],
      day: [22 * HOUR, 26 * HOUR],
      week: [7 * DAY - 2 * HOUR, 7 * DAY + 2 * HOUR],
      month: [28 * DAY - 2 * HOUR, 31 * DAY + 2 * HOUR],
    };
    fc.assert(
      fc.property(
        fc.integer({ min: at("2020-01-01T00:00:00Z"), max: at("2036-01-01T00:00:00Z") }),
        fc.constantFrom(...zones),
        fc.constantFrom<Period>("hour", "day", "week", "month"),
        (t, zone, period) => {
          const { start, end } = periodAt(t, period, zone);
          expect(start).toBeLessThanOrEqual(t);
          expect(end).toBeGreaterThan(t);
          expect(periodAt(end, period, zone).start).toBe(end);
          expect(periodAt(start - 1, period, zone).end).toBe(start);
          const [shortest, longest] = lengths[period];
          expect(end - start).toBeGreaterThanOrEqual(shortest);
          expect(end - start).toBeLessThanOrEqual(longest);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("rejects an unknown period and a time that is not one", () => {
    expect(() => periodAt(0, "fortnight" as Period, "UTC")).toThrow(
      /^period: expected one of "hour", "day", "week", "month"/,
    );
    expect(() => periodAt(Number.NaN, "day", "UTC")).toThrow(/^t: expected a time/);
  });
});

describe("checkTimeZone", () => {
  it("accepts IANA names the runtime knows, as configured (the runtime's case); rejects anything else naming it", () => {
    expect(checkTimeZone("Europe/Berlin")).toBe("Europe/Berlin");
    expect(checkTimeZone("utc")).toBe("UTC");
    expect(checkTimeZone("asia/tokyo")).toBe("Asia/Tokyo");
    // ICU resolves these to older names ("Asia/Katmandu", "Asia/Calcutta", "Europe/Kiev"): the name given is kept, and
    // either spelling keeps its own.
    for (const zone of ["Asia/Kathmandu", "Asia/Katmandu", "Asia/Kolkata", "Asia/Calcutta", "Europe/Kyiv"]) {
      expect(checkTimeZone(zone)).toBe(zone);
    }
    expect(periodAt(at("2026-11-28T12:00:00Z"), "day", checkTimeZone("Asia/Kathmandu")).start).toBe(
      at("2026-11-27T18:15:00Z"),
    );
    expect(() => checkTimeZone("Mars/Olympus_Mons")).toThrow(/the runtime knows no zone "Mars\/Olympus_Mons"/);
    for (const bad of ["", 1, null]) expect(() => checkTimeZone(bad)).toThrow(/^time zone: expected an IANA name/);
  });
});

describe("firstInstantShowing (a synthetic zone whose offset changes once at T)", () => {
  const T = 1000 * HOUR;
  const zone = (before: number, after: number) => (t: number) => (t < T ? before : after);

  it("a wall-clock reading the clocks skip: the end of the gap, wherever in the gap it falls", () => {
    // Forward an hour at T: the wall clock jumps from T to T + 1 h.
    const forward = zone(0, HOUR);
    expect(firstInstantShowing(T, forward)).toBe(T);
    expect(firstInstantShowing(T + HOUR / 2, forward)).toBe(T);
    expect(firstInstantShowing(T + HOUR, forward)).toBe(T);
    // Forward an hour at T − 30 min on the old clock: a reading halfway through the gap still starts at the jump.
    const halfPast = (t: number) => (t < T - HOUR / 2 ? 0 : HOUR);
    expect(firstInstantShowing(T, halfPast)).toBe(T - HOUR / 2);
  });

  it("a wall-clock reading the clocks repeat: its first occurrence; one shown once: that instant", () => {
    // Back an hour at T (wall clock T + 1 h goes back to T).
    const back = zone(HOUR, 0);
    expect(firstInstantShowing(T + HOUR / 2, back)).toBe(T - HOUR / 2);
    expect(firstInstantShowing(T + 2 * HOUR, back)).toBe(T + 2 * HOUR);
    expect(firstInstantShowing(T - 5 * HOUR, back)).toBe(T - 6 * HOUR);
  });
});
