// The calendar periods inside workerd (the runtime the key's object runs in): its Intl has the zones' rules, so the
// periods are the ones Node computes (test/unit/calendar.test.ts).
import { describe, expect, it } from "vitest";
import { checkTimeZone, periodAt } from "../../src/core/calendar.ts";

const HOUR = 3_600_000;

describe("calendar periods in workerd", () => {
  it("knows the IANA zones and their daylight saving: New York's spring day is 23 hours, Havana's repeated midnight", () => {
    expect(checkTimeZone("America/New_York")).toBe("America/New_York");
    expect(() => checkTimeZone("Mars/Olympus_Mons")).toThrow(RangeError);
    const spring = periodAt(Date.parse("2026-03-08T12:00:00Z"), "day", "America/New_York");
    expect([new Date(spring.start).toISOString(), spring.end - spring.start]).toEqual([
      "2026-03-08T05:00:00.000Z",
      23 * HOUR,
    ]);
    const havana = periodAt(Date.parse("2026-11-01T12:00:00Z"), "day", "America/Havana");
    expect([new Date(havana.start).toISOString(), havana.end - havana.start]).toEqual([
      "2026-11-01T04:00:00.000Z",
      25 * HOUR,
    ]);
    const month = periodAt(Date.parse("2026-11-15T00:00:00Z"), "month", "Europe/Berlin");
    expect([new Date(month.start).toISOString(), new Date(month.end).toISOString()]).toEqual([
      "2026-10-31T23:00:00.000Z",
      "2026-11-30T23:00:00.000Z",
    ]);
  });
});
