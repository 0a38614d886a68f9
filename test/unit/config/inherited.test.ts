/**
 * @module What a plan inherits unless it has its own (src/config/inherited.ts): `penalty`, `concurrency`, `credits`
 * and `usage`.
 */

import { describe, expect, it } from "vitest";
import { parseConfig } from "../../../src/config/parse.ts";
import { ConfigError } from "../../../src/config/types.ts";
import { MINIMUM, type Obj, ORIGIN, parse } from "./support.ts";

describe('penalty (docs/configuration.md, "Penalties")', () => {
  it("parses after, within, block and max_block; plans inherit it, have their own, or turn it off", () => {
    const config = parse({
      ...MINIMUM,
      penalty: { after: 5, within: "1m", block: "10m", max_block: "1d" },
      anonymous: { limits: [{ limit: 1, window: "1s" }] },
      plans: [
        { name: "srv", key_prefix: "srv_", limits: [{ limit: 1, window: "1s" }], penalty: false },
        {
          name: "t",
          key_prefix: "t_",
          limits: [{ limit: 1, window: "1s" }],
          penalty: { after: 2, within: "10s", block: "1m" },
        },
        { name: "live", key_prefix: "live_", unlimited: true },
      ],
    });
    const spec = { after: 5, withinMs: 60_000, blockMs: 600_000, maxBlockMs: 86_400_000 };
    expect(config.defaultPlan?.penalty).toEqual(spec);
    expect(config.anonymous?.penalty).toEqual(spec);
    expect(config.plans.map((p) => p.penalty)).toEqual([
      null,
      { after: 2, withinMs: 10_000, blockMs: 60_000, maxBlockMs: null },
      null,
    ]);
  });

  it.each([
    [{ penalty: false }, "RATE_LIMIT.penalty: leave it out for no penalty (false is for a plan)"],
    [
      { penalty: { after: 0, within: "1m", block: "1m" } },
      "RATE_LIMIT.penalty.after: expected the number of refusals that trigger a block, 1 to 1000, got 0",
    ],
    [{ penalty: { after: 3, block: "1m" } }, 'RATE_LIMIT.penalty.within: required, e.g. "1m"'],
    [{ penalty: { after: 3, within: "1m", block: "1 min" } }, /^RATE_LIMIT\.penalty\.block: expected a duration/],
    [
      { penalty: { after: 3, within: "1m", block: "1h", max_block: "10m" } },
      'RATE_LIMIT.penalty.max_block: at least the block (1h), got "10m"',
    ],
    [
      { penalty: { after: 3, within: "1m", block: "1h", for: "1m" } },
      "RATE_LIMIT.penalty.for: unknown setting; expected one of after, within, block, max_block",
    ],
    [
      {
        plans: [
          { name: "live", key_prefix: "live_", unlimited: true, penalty: { after: 1, within: "1s", block: "1s" } },
        ],
      },
      "RATE_LIMIT.plans[0].penalty: an unlimited plan's keys are never refused; remove penalty or unlimited = true",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ ...MINIMUM, ...rl })).toThrow(message);
  });
});

describe('concurrency (docs/configuration.md, "Concurrency")', () => {
  it("parses concurrency and concurrency_timeout; plans inherit them, have their own, or turn it off", () => {
    const config = parse({
      ...MINIMUM,
      concurrency: 10,
      anonymous: { limits: [{ limit: 1, window: "1s" }] },
      plans: [
        { name: "srv", key_prefix: "srv_", limits: [{ limit: 1, window: "1s" }], concurrency: false },
        { name: "t", key_prefix: "t_", limits: [{ limit: 1, window: "1s" }], concurrency: 2 },
        { name: "slow", key_prefix: "s_", limits: [{ limit: 1, window: "1s" }], concurrency_timeout: "5m" },
        { name: "live", key_prefix: "live_", unlimited: true },
      ],
    });
    expect(config.defaultPlan?.concurrency).toEqual({ limit: 10, timeoutMs: 60_000 });
    expect(config.anonymous?.concurrency).toEqual({ limit: 10, timeoutMs: 60_000 });
    expect(config.plans.map((p) => p.concurrency)).toEqual([
      null,
      { limit: 2, timeoutMs: 60_000 },
      { limit: 10, timeoutMs: 300_000 },
      null,
    ]);
    expect(parse({ ...MINIMUM, concurrency: 1, concurrency_timeout: "1s" }).defaultPlan?.concurrency).toEqual({
      limit: 1,
      timeoutMs: 1_000,
    });
    expect(parse(MINIMUM).defaultPlan?.concurrency).toBeNull();
  });

  it.each([
    [{ concurrency: false }, "RATE_LIMIT.concurrency: leave it out for no concurrency limit (false is for a plan)"],
    [
      { concurrency: 0 },
      "RATE_LIMIT.concurrency: expected the number of a key's requests in flight at once, 1 to 10000, got 0",
    ],
    [{ concurrency: 1.5 }, /^RATE_LIMIT\.concurrency: expected the number/],
    [{ concurrency: "10" }, /^RATE_LIMIT\.concurrency: expected the number/],
    [{ concurrency: 10_001 }, /^RATE_LIMIT\.concurrency: expected the number/],
    [
      { concurrency_timeout: "10s" },
      "RATE_LIMIT.concurrency_timeout: set only with concurrency (the requests in flight at once)",
    ],
    [
      { concurrency: 1, concurrency_timeout: "500ms" },
      'RATE_LIMIT.concurrency_timeout: expected 1s to 1d (how long a vanished request\'s slot stays taken), got "500ms"',
    ],
    [{ concurrency: 1, concurrency_timeout: "2d" }, /^RATE_LIMIT\.concurrency_timeout: expected 1s to 1d/],
    [{ concurrency: 1, concurrency_timeout: "1 min" }, /^RATE_LIMIT\.concurrency_timeout: expected a duration/],
    [
      { plans: [{ name: "live", key_prefix: "live_", unlimited: true, concurrency: 1 }] },
      "RATE_LIMIT.plans[0].concurrency: an unlimited plan's keys never consult the limiter; remove concurrency or unlimited = true",
    ],
    [
      { plans: [{ name: "p", key_prefix: "p_", limits: [{ limit: 1, window: "1s" }], concurrency_timeout: "5s" }] },
      "RATE_LIMIT.plans[0].concurrency_timeout: set only with concurrency (the requests in flight at once)",
    ],
    [
      {
        concurrency: 2,
        plans: [
          {
            name: "p",
            key_prefix: "p_",
            limits: [{ limit: 1, window: "1s" }],
            concurrency: false,
            concurrency_timeout: "5s",
          },
        ],
      },
      "RATE_LIMIT.plans[0].concurrency_timeout: the plan has no concurrency limit (concurrency = false)",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ ...MINIMUM, ...rl })).toThrow(message);
  });
});

describe('credits (docs/configuration.md, "Quotas and credits")', () => {
  const parse = (rl: Obj) => parseConfig({ ORIGIN, RATE_LIMIT: rl });

  it("a plan's own credits, the top-level ones inherited, false for none; the meters its calls carry", () => {
    const config = parse({
      limits: [{ limit: 10, window: "1s" }],
      credits: { initial: 100, refill: { amount: 100, period: "month", time_zone: "Europe/Paris" } },
      plans: [
        { name: "own", key_prefix: "own_", limits: [{ limit: 5, window: "1s" }], credits: { initial: 0, status: 429 } },
        { name: "none", key_prefix: "none_", limits: [{ limit: 5, window: "1s" }], credits: false },
        {
          name: "heir",
          key_prefix: "heir_",
          limits: [
            { limit: 5, window: "1s" },
            { limit: 9, period: "day" },
          ],
        },
      ],
    });
    const top = { initial: 100, refill: { amount: 100, period: "month", zone: "Europe/Paris" } };
    expect(config.defaultPlan?.meters).toEqual({ credits: top });
    expect(config.defaultPlan?.creditStatus).toBe(402);
    const [own, none, heir] = config.plans;
    expect(own?.meters).toEqual({ credits: { initial: 0, refill: null } });
    expect(own?.creditStatus).toBe(429);
    expect(none?.meters).toBeUndefined();
    expect(none?.creditStatus).toBeUndefined();
    expect(heir?.meters).toEqual({
      quotas: [{ name: "daily", limit: 9, period: "day", zone: "UTC", windowMs: 86_400_000 }],
      credits: top,
    });
    expect(heir?.creditStatus).toBe(402);
  });

  it.each([
    [
      { credits: { initial: -1 } },
      "RATE_LIMIT.credits.initial: expected a whole number ≥ 0 (each key's first balance), got -1",
    ],
    [
      { credits: { initial: 1.5 } },
      "RATE_LIMIT.credits.initial: expected a whole number ≥ 0 (each key's first balance), got 1.5",
    ],
    [
      { credits: { initial: 1, status: 403 } },
      "RATE_LIMIT.credits.status: expected 402 (Payment Required) or 429, got 403",
    ],
    [
      { credits: { initial: 1, refill: { amount: 0, period: "day" } } },
      "RATE_LIMIT.credits.refill.amount: expected a positive integer, got 0",
    ],
    [
      { credits: { initial: 1, refill: { amount: 5, period: "fortnight" } } },
      'RATE_LIMIT.credits.refill.period: expected one of "hour", "day", "week", "month", got "fortnight"',
    ],
    [
      { credits: { initial: 1, refill: { amount: 5, period: "day", time_zone: "Europe/Atlantis" } } },
      'RATE_LIMIT.credits.refill.time_zone: the runtime knows no zone "Europe/Atlantis"; expected an IANA name like "Europe/Berlin"',
    ],
    [
      { credits: { initial: 1, balance: 5 } },
      "RATE_LIMIT.credits.balance: unknown setting; expected one of initial, refill, status",
    ],
    [{ credits: false }, "RATE_LIMIT.credits: leave it out for no credits (false is for a plan)"],
    [
      { credits: { initial: "5" } },
      'RATE_LIMIT.credits.initial: expected a whole number ≥ 0 (each key\'s first balance), got "5"',
    ],
    [
      { credits: { initial: 1, refill: { amount: 1.5, period: "day" } } },
      "RATE_LIMIT.credits.refill.amount: expected a positive integer, got 1.5",
    ],
    [
      { credits: { initial: 1, refill: { amount: "5", period: "day" } } },
      'RATE_LIMIT.credits.refill.amount: expected a positive integer, got "5"',
    ],
    [
      { credits: { initial: 1, refill: { amount: 5 } } },
      'RATE_LIMIT.credits.refill.period: expected one of "hour", "day", "week", "month", got nothing',
    ],
    [
      { credits: { initial: 1, refill: { amount: 5, period: "day", every: 2 } } },
      "RATE_LIMIT.credits.refill.every: unknown setting; expected one of amount, period, time_zone",
    ],
    [
      { plans: [{ name: "live", key_prefix: "live_", unlimited: true, credits: { initial: 1 } }] },
      "RATE_LIMIT.plans[0].credits: an unlimited plan's keys never consult the limiter; remove credits or unlimited = true",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ limits: [{ limit: 1, window: "1s" }], ...(rl as Obj) })).toThrow(new ConfigError(message));
  });
});

describe('usage (docs/configuration.md, "Usage")', () => {
  const parse = (rl: Obj) => parseConfig({ ORIGIN, RATE_LIMIT: rl });

  it("true, or keep and time_zone; inherited, false for none; a plan keeping usage gets no leases", () => {
    const config = parse({
      limits: [{ limit: 100, window: "1m" }],
      usage: true,
      plans: [
        {
          name: "eu",
          key_prefix: "eu_",
          limits: [{ limit: 100, window: "1m" }],
          usage: { keep: "90d", time_zone: "Europe/Berlin" },
        },
        { name: "off", key_prefix: "off_", limits: [{ limit: 100, window: "1m" }], usage: false },
      ],
    });
    expect(config.defaultPlan).toMatchObject({ leaseMs: 0 });
    expect(config.defaultPlan?.meters).toEqual({ usage: { zone: "UTC", keepDays: 400 } });
    expect(config.plans[0]).toMatchObject({ meters: { usage: { zone: "Europe/Berlin", keepDays: 90 } }, leaseMs: 0 });
    expect(config.plans[1]?.meters).toBeUndefined();
    expect(config.plans[1]?.leaseMs).toBe(30_000);
    // The bounds of keep, and a plan with usage false keeps no meters.
    for (const [keep, days] of [
      ["1d", 1],
      ["3660d", 3660],
      ["12d", 12],
    ] as const) {
      expect(
        parse({ limits: [{ limit: 1, window: "1s" }], usage: { keep } }).defaultPlan?.meters?.usage?.keepDays,
      ).toBe(days);
    }
    expect(config.plans[1]?.meters).toBeUndefined();
    // An unlimited plan's keys count nothing, whatever the top level keeps.
    const unlimited = parse({
      limits: [{ limit: 1, window: "1s" }],
      usage: true,
      credits: { initial: 1 },
      plans: [{ name: "u", key_prefix: "u_", unlimited: true }],
    });
    expect(unlimited.plans[0]).toMatchObject({ limits: null });
    expect(unlimited.plans[0]?.meters).toBeUndefined();
    expect(unlimited.plans[0]?.creditStatus).toBeUndefined();
  });

  it.each([
    [{ usage: "yes" }, 'RATE_LIMIT.usage: expected true or { keep = "400d", time_zone = "UTC" }, got "yes"'],
    [{ usage: { keep: "1y" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "1y"'],
    [{ usage: { keep: "3661d" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "3661d"'],
    [{ usage: { keep: "0d" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "0d"'],
    [
      { usage: { time_zone: "Moon/Base" } },
      'RATE_LIMIT.usage.time_zone: the runtime knows no zone "Moon/Base"; expected an IANA name like "Europe/Berlin"',
    ],
    [{ usage: { retention: "400d" } }, "RATE_LIMIT.usage.retention: unknown setting; expected one of keep, time_zone"],
    [{ usage: false }, "RATE_LIMIT.usage: leave it out for no usage (false is for a plan)"],
    [{ usage: { keep: 400 } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got 400'],
    [{ usage: { keep: "40d " } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "40d "'],
    [{ usage: { keep: " 40d" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got " 40d"'],
    [{ usage: null }, 'RATE_LIMIT.usage: expected true or { keep = "400d", time_zone = "UTC" }, got null'],
    [{ usage: ["400d"] }, 'RATE_LIMIT.usage: expected true or { keep = "400d", time_zone = "UTC" }, got an array'],
    [
      { plans: [{ name: "live", key_prefix: "live_", unlimited: true, usage: true }] },
      "RATE_LIMIT.plans[0].usage: an unlimited plan's keys never consult the limiter, so nothing would be counted; remove usage or unlimited = true",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ limits: [{ limit: 1, window: "1s" }], ...(rl as Obj) })).toThrow(new ConfigError(message));
  });
});
