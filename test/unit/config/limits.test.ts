/**
 * @module Lists of limits (src/config/limits.ts): calendar quotas (`period`, `time_zone`) beside the sliding limits.
 * Sliding limits' windows and ticks: parse.test.ts; their errors: errors.test.ts.
 */

import { describe, expect, it } from "vitest";
import { policyHeader as policyOf } from "../../../src/client/headers.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { ConfigError, type Plan } from "../../../src/config/types.ts";
import { type Obj, ORIGIN } from "./support.ts";

describe('calendar quotas (docs/configuration.md, "Quotas and credits")', () => {
  const parse = (rl: Obj) => parseConfig({ ORIGIN, RATE_LIMIT: rl });

  it("a limit with period (and time_zone) is a quota: kept apart from the sliding limits, shown after them", () => {
    const config = parse({
      limits: [
        { limit: 100, window: "1m" },
        { limit: 10_000, period: "month", time_zone: "America/New_York" },
        { limit: 500, period: "day", name: "calls-today" },
      ],
    });
    const plan = config.defaultPlan as Plan;
    expect(plan.limits?.map((l) => l.name)).toEqual(["per-minute"]);
    expect(plan.meters?.quotas).toEqual([
      { name: "monthly", limit: 10_000, period: "month", zone: "America/New_York", windowMs: 2_592_000_000 },
      { name: "calls-today", limit: 500, period: "day", zone: "UTC", windowMs: 86_400_000 },
    ]);
    expect(plan.shown?.map((l) => l.name)).toEqual(["per-minute", "monthly", "calls-today"]);
    expect(policyOf(plan.shown ?? [])).toBe('"per-minute";q=100;w=60, "monthly";q=10000, "calls-today";q=500');
    // Leases as before: sized by the sliding limits (the object cuts them to the quota).
    expect(plan.leaseMs).toBe(30_000);
  });

  it("a plan of quotas alone has no sliding limits and no leases; plans and anonymous take quotas too", () => {
    const config = parse({
      plans: [{ name: "free", key_prefix: "free_", limits: [{ limit: 1000, period: "month" }] }],
      anonymous: { limits: [{ limit: 10, period: "hour" }] },
    });
    const free = config.plans[0] as Plan;
    expect(free).toMatchObject({ limits: [], leaseMs: 0 });
    expect(free.meters?.quotas?.map((q) => q.name)).toEqual(["monthly"]);
    expect(config.anonymous?.meters?.quotas?.map((q) => q.period)).toEqual(["hour"]);
    // A route's limits are shown between the plan's and its quotas.
    const routed = parse({
      limits: [{ limit: 5, period: "week" }],
      routes: [{ name: "search", path: "/search", limits: [{ limit: 1, window: "1s", name: "search" }] }],
    });
    expect(routed.defaultPlan?.routes[0]?.shown.map((l) => l.name)).toEqual(["search", "weekly"]);
  });

  it.each([
    [
      { limits: [{ limit: 1, window: "1d", period: "day" }] },
      "RATE_LIMIT.limits[0]: give either window (a sliding window) or period (a calendar quota), not both",
    ],
    [
      { limits: [{ limit: 1, period: "year" }] },
      'RATE_LIMIT.limits[0].period: expected one of "hour", "day", "week", "month", got "year"',
    ],
    [
      { limits: [{ limit: 1, period: "month", time_zone: "Mars/Olympus_Mons" }] },
      'RATE_LIMIT.limits[0].time_zone: the runtime knows no zone "Mars/Olympus_Mons"; expected an IANA name like "Europe/Berlin"',
    ],
    [
      { limits: [{ limit: 1, period: "month", time_zone: 2 }] },
      'RATE_LIMIT.limits[0].time_zone: expected an IANA name like "Europe/Berlin", got 2',
    ],
    [{ limits: [{ limit: 0, period: "day" }] }, "RATE_LIMIT.limits[0].limit: expected a positive integer, got 0"],
    [{ limits: [{ limit: 1.5, period: "day" }] }, "RATE_LIMIT.limits[0].limit: expected a positive integer, got 1.5"],
    [{ limits: [{ limit: "9", period: "day" }] }, 'RATE_LIMIT.limits[0].limit: expected a positive integer, got "9"'],
    [
      {
        limits: [
          { limit: 9, window: "1s" },
          { limit: 9, period: "day" },
          { limit: 0, window: "1m" },
        ],
      },
      "RATE_LIMIT.limits[2].limit: expected a positive integer, got 0",
    ],
    [
      {
        limits: [
          { limit: 9, period: "day" },
          { limit: 9, period: "day" },
        ],
      },
      'RATE_LIMIT.limits[1].name: "daily" is already used by RATE_LIMIT.limits[0]; give each limit a distinct name',
    ],
    [
      { limits: [{ limit: 1, period: "day", tick: "1s" }] },
      "RATE_LIMIT.limits[0].tick: a calendar quota (period) has no tick",
    ],
    [
      { limits: [{ limit: 1, period: "day", reset: "1st" }] },
      "RATE_LIMIT.limits[0].reset: unknown setting; expected one of limit, period, time_zone, name",
    ],
    [
      { limits: [{ limit: 1, window: "1s", time_zone: "UTC" }] },
      'RATE_LIMIT.limits[0].time_zone: only a calendar quota has one; give period = "hour", "day", "week" or "month" with it',
    ],
    [
      {
        limits: [
          { limit: 1, window: "1d", name: "daily" },
          { limit: 5, period: "day" },
        ],
      },
      'RATE_LIMIT.limits[1].name: "daily" is already used by RATE_LIMIT.limits[0]; give each limit a distinct name',
    ],
    [
      {
        limits: [
          { limit: 5, period: "day" },
          { limit: 1, window: "1 sec" },
        ],
      },
      'RATE_LIMIT.limits[1].window: expected a duration like "250ms", "1s", "1m", "1h" or "1d", or a number of milliseconds, got "1 sec"',
    ],
    [
      {
        limits: [{ limit: 5, period: "day" }],
        routes: [{ name: "a", path: "/a", limits: [{ limit: 1, period: "day" }] }],
      },
      "RATE_LIMIT.routes[0].limits[0].period: calendar quotas are for a plan's limits (a plan's own, the top-level or the anonymous ones), not here",
    ],
    [
      { limits: [{ limit: 5, period: "day" }], ip: { limits: [{ limit: 1, period: "day" }] } },
      "RATE_LIMIT.ip.limits[0].period: calendar quotas are for a plan's limits (a plan's own, the top-level or the anonymous ones), not here",
    ],
    [{ limits: [] }, "RATE_LIMIT.limits: expected at least one limit"],
  ])("%j: %s", (rl, message) => {
    expect(() => parse(rl as Obj)).toThrow(new ConfigError(message));
  });
});
