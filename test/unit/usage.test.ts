// Exact usage per key (src/core/usage.ts): days in a zone, months summed from days (daylight saving and month ends
// included), the retention's first day, CSV, and the spec's checks.

import { describe, expect, it } from "vitest";
import { checkUsage, keptFrom, usageBy, usageCsv, usageDay } from "../../src/core/usage.ts";

const at = (iso: string) => Date.parse(iso);

describe("usage", () => {
  const ny = { zone: "America/New_York", keepDays: 400 };

  it("a grant counts in its day in the zone; months are summed from days", () => {
    expect(usageDay(ny, at("2026-11-01T03:59:59Z"))).toBe(at("2026-10-31T04:00:00Z"));
    expect(usageDay(ny, at("2026-11-01T04:00:00Z"))).toBe(at("2026-11-01T04:00:00Z"));
    // 1 November is 25 hours long in New York: the 2nd starts at 05:00 UTC.
    expect(usageDay(ny, at("2026-11-02T04:59:59Z"))).toBe(at("2026-11-01T04:00:00Z"));
    const rows = [
      { day: at("2026-10-31T04:00:00Z"), requests: 3, cost: 7 },
      { day: at("2026-11-01T04:00:00Z"), requests: 2, cost: 2 },
      { day: at("2026-11-30T05:00:00Z"), requests: 1, cost: 10 },
    ];
    const all = { from: 0, to: at("2100-01-01T00:00:00Z") };
    expect(usageBy(ny, rows, { period: "month", ...all })).toEqual([
      { start: at("2026-10-01T04:00:00Z"), end: at("2026-11-01T04:00:00Z"), requests: 3, cost: 7 },
      { start: at("2026-11-01T04:00:00Z"), end: at("2026-12-01T05:00:00Z"), requests: 3, cost: 12 },
    ]);
    const days = usageBy(ny, rows, { period: "day", ...all });
    expect(days.map((d) => d.end - d.start)).toEqual([24, 25, 24].map((h) => h * 3_600_000));
    // A range keeps the periods that overlap it, whole.
    expect(
      usageBy(ny, rows, { period: "month", from: at("2026-11-15T00:00:00Z"), to: at("2026-11-16T00:00:00Z") }),
    ).toHaveLength(1);
    expect(
      usageBy(ny, rows, { period: "day", from: at("2026-11-02T00:00:00Z"), to: at("2026-11-03T00:00:00Z") }),
    ).toEqual([{ start: at("2026-11-01T04:00:00Z"), end: at("2026-11-02T05:00:00Z"), requests: 2, cost: 2 }]);
    expect(usageCsv(days.slice(0, 1))).toBe(
      "start,end,requests,cost\n2026-10-31T04:00:00.000Z,2026-11-01T04:00:00.000Z,3,7\n",
    );
    expect(usageCsv([])).toBe("start,end,requests,cost\n");
  });

  it("keeps days from the retention's first one; rejects what is not a spec or a range, naming the field", () => {
    expect(keptFrom({ zone: "UTC", keepDays: 2 }, at("2026-05-10T12:00:00Z"))).toBe(at("2026-05-08T00:00:00Z"));
    expect(checkUsage({ zone: "utc", keepDays: 1 })).toEqual({ zone: "UTC", keepDays: 1 });
    expect(() => checkUsage(null as never)).toThrow(/^usage: /);
    expect(() => checkUsage({ zone: "UTC", keepDays: 0 })).toThrow(/^keepDays: /);
    expect(() => checkUsage({ zone: "UTC", keepDays: 3661 })).toThrow(/^keepDays: /);
    expect(() => checkUsage({ zone: "Nowhere", keepDays: 5 })).toThrow(/^time zone: /);
    expect(() => usageBy(ny, [], { period: "week" as never, from: 0, to: 1 })).toThrow(/^period: /);
    expect(() => usageBy(ny, [], { period: "day", from: 2, to: 1 })).toThrow(/^from, to: /);
    expect(() => usageBy(ny, [], { period: "day", from: Number.NaN, to: 1 })).toThrow(/^from, to: /);
  });
});
