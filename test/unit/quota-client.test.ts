// Calendar quotas through the client (docs/configuration.md, "Quotas and credits"), against the in-memory object
// (test/support/store.ts, which decides with the core's takeQuoted as the object does) at one clock the test moves:
// refusals until the next period's start, headers naming the quota, leases cut to the quota and its period, and —
// the property — never one unit over the quota in any period, with leases on, parallel requests and refunds, across
// month ends, a leap day and daylight-saving changes both ways.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { headersOf, type RateLimitResult } from "../../src/client/result.ts";
import { type Period, periodAt } from "../../src/core/calendar.ts";
import { grantOf, setup } from "../support/store.ts";

const HOUR = 3_600_000;

/** `setup()` with its clock started at `start` (the helper starts at its own T0). */
function at(start: number, settings: Record<string, unknown>) {
  const t = setup(settings);
  t.advance(start - t.client.now());
  return t;
}

/** The most units granted (and not refunded) in one period, over the grants' times. */
function mostInPeriod(times: readonly number[], period: Period, zone: string): number {
  const per = new Map<number, number>();
  for (const t of times) {
    const start = periodAt(t, period, zone).start;
    per.set(start, (per.get(start) ?? 0) + 1);
  }
  return Math.max(0, ...per.values());
}

describe("a quota alone", () => {
  it("grants its limit, then refuses until the next period starts, with headers naming it", async () => {
    // 2026-03-28 20:00 UTC: 21:00 in Berlin, 3 hours before midnight — the night the clocks go forward.
    const t = at(Date.UTC(2026, 2, 28, 20), { limits: [{ limit: 3, period: "day", time_zone: "Europe/Berlin" }] });
    for (let i = 0; i < 3; i++) expect((await t.limit()).allowed).toBe(true);
    // The third grant left nothing: the deny cache refuses until the next period, with no call.
    const calls = t.store.count("take");
    const refused = await t.limit();
    expect(t.store.count("take")).toBe(calls);
    const midnight = Date.UTC(2026, 2, 28, 23); // 00:00 CET (+1) on the 29th
    expect(refused).toMatchObject({ allowed: false, reason: "cached_denial", retryAfterMs: midnight - t.client.now() });
    expect(refused.limits).toEqual([
      {
        name: "daily",
        limit: 3,
        windowMs: 24 * HOUR,
        period: "day",
        timeZone: "Europe/Berlin",
        remaining: 0,
        resetMs: midnight - t.client.now(),
        exceeded: true,
      },
    ]);
    const h = headersOf(refused, "draft-11");
    expect(h.get("RateLimit-Policy")).toBe('"daily";q=3');
    expect(h.get("RateLimit")).toBe(`"daily";r=0;t=${Math.ceil((midnight - t.client.now()) / 1000)}`);
    expect(h.get("Retry-After")).toBe(String(Math.ceil((midnight - t.client.now()) / 1000)));
    // Hours later (the deny cache asks the object again now and then), still refused until midnight.
    t.advance(midnight - t.client.now() - 1);
    expect(await t.limit()).toMatchObject({ allowed: false, retryAfterMs: 1 });
    // The next day (23 hours long) starts at midnight: granted again.
    t.advance(1);
    expect((await t.limit()).allowed).toBe(true);
  });

  it("a cost over the quota can never pass; a refund gives units back to the period it was granted in only", async () => {
    const t = at(Date.UTC(2026, 0, 31, 23), { limits: [{ limit: 5, period: "month" }] });
    const big = await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 6 });
    expect(big).toMatchObject({ allowed: false, reason: "too_costly", retryAfterMs: Number.POSITIVE_INFINITY });
    const four = await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 4 });
    expect(four.allowed).toBe(true);
    expect((await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 2 })).allowed).toBe(false);
    expect(await t.client.refund(t.ns, four.handle?.grants[0] as never)).toBe(true);
    expect((await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 5 })).allowed).toBe(true);
    // Given back in February, a January grant counts nowhere: February keeps its own count.
    const late = await t.client.limit({ ns: t.ns, name: "key:b", plan: t.plan, cost: 5 });
    t.advance(HOUR); // February
    expect(await t.client.refund(t.ns, late.handle?.grants[0] as never)).toBe(true);
    expect((await t.client.limit({ ns: t.ns, name: "key:b", plan: t.plan, cost: 5 })).allowed).toBe(true);
    expect((await t.client.limit({ ns: t.ns, name: "key:b", plan: t.plan, cost: 1 })).allowed).toBe(false);
  });

  it("peek() shows the quota's state and consumes nothing", async () => {
    const t = at(Date.UTC(2026, 5, 1), { limits: [{ limit: 2, period: "week", name: "weekly-calls" }] });
    await t.limit();
    const p = await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    expect(p).toMatchObject({ allowed: true, reason: "peek" });
    expect(p.limits[0]).toMatchObject({ name: "weekly-calls", remaining: 1, period: "week", timeZone: "UTC" });
    await t.limit();
    const full = await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    // 2026-06-01 is a Monday: the next week starts on the 8th.
    expect(full).toMatchObject({ allowed: false, retryAfterMs: Date.UTC(2026, 5, 8) - t.client.now() });
  });
});

describe("a quota beside sliding limits, leases on", () => {
  const limits = [
    { limit: 100_000, window: "1h" },
    { limit: 40, period: "hour" },
  ];

  it("leases are cut to what the quota has left and end before the period does", async () => {
    const t = at(Date.UTC(2026, 6, 1, 10, 59, 50), { limits });
    const granted: number[] = [];
    const send = async () => {
      const r = await t.limit();
      if (r.allowed) granted.push(r.at);
      await t.settle();
    };
    // A request a second for the last 10 s of the hour (leases are granted: the quota has room), then a flood.
    for (let i = 0; i < 10; i++, t.advance(1_000)) await send();
    for (let i = 0; i < 200; i++, t.advance(50)) await send();
    const eleven = Date.UTC(2026, 6, 1, 11);
    expect(granted.filter((at) => at < eleven)).toHaveLength(10);
    // Units leased before 11:00 are not spent after it: the new hour grants its 40, not one more.
    expect(granted.filter((at) => at >= eleven)).toHaveLength(40);
    const leased = t.store.calls.filter((c) => c.method === "take" && c.ask?.leaseUnits);
    expect(leased.length).toBeGreaterThan(0);
    for (const c of leased) {
      expect(c.ask?.quotas).toEqual([{ name: "hourly", limit: 40, period: "hour", zone: "UTC", windowMs: HOUR }]);
    }
    expect(t.store.count("take")).toBeLessThan(210);
  });

  it("units a lease leaves unused go back to the period with the next call, so a busy key gets all of it", async () => {
    const t = at(Date.UTC(2026, 6, 1, 10), { limits });
    let granted = 0;
    // Bursts of requests 200 ms apart, each followed by a minute's pause: a lease is left unspent at each pause, and
    // expires.
    for (let burst = 0; burst < 30; burst++, t.advance(60_000)) {
      for (let i = 0; i < 10; i++, t.advance(200)) {
        if ((await t.limit()).allowed) granted++;
        await t.settle();
      }
    }
    // All within one hour (30 × 62 s): the quota in full, not a unit lost to leases left unspent.
    expect(t.client.now()).toBeLessThan(Date.UTC(2026, 6, 1, 11));
    expect(granted).toBe(40);
    expect(t.store.calls.some((c) => c.ask?.settle?.some((x) => x.unused > 0))).toBe(true);
  });
});

describe("refunds of leased grants (issue 53.2)", () => {
  const limits = [
    { limit: 1000, window: "1s" },
    { limit: 50, period: "hour" },
  ];

  it("refunded in parallel after their leases' uses were settled: their quota units come back, none lost", async () => {
    const t = at(Date.UTC(2026, 6, 1, 10), { limits });
    const used = () => t.store.meters.get("key:a")?.quotas?.rows()[0]?.used ?? 0;
    const burst = async (n: number) => {
      const rs = await Promise.all(Array.from({ length: n }, () => t.limit()));
      await t.settle();
      return rs.filter((r) => r.allowed);
    };
    // 40 at once, served; then 20 at once, of which the quota grants the 10 it has left, all answered 500 by the origin.
    let kept = (await burst(40)).length;
    expect(kept).toBe(40);
    t.advance(5);
    const failed = await burst(20);
    expect(failed).toHaveLength(10);
    expect(used()).toBe(50);
    // The refunds arrive after the calls that refilled the leases settled their uses (most of them).
    const refunded = await Promise.all(failed.map((r) => t.client.refund(t.ns, grantOf(r))));
    expect(refunded).toEqual(new Array(10).fill(true));
    expect(t.store.count("refund")).toBeGreaterThan(0); // settled ones: their quota units, at the object
    // Every unit a refund gave back is served again: the hour's 50 are served and counted once, none lost.
    for (let i = 0; i < 60; i++, t.advance(5)) kept += (await burst(1)).length;
    expect(kept).toBe(50);
    expect(used()).toBe(50);
    // And a second refund of the same grant gives nothing back.
    expect(await t.client.refund(t.ns, grantOf(failed[0] as RateLimitResult))).toBe(false);
  });
});

describe("a quota counts exactly the grants not refunded (property, issue 53)", () => {
  const step = fc.oneof(
    fc.record({ kind: fc.constant("burst" as const), n: fc.integer({ min: 1, max: 12 }), fail: fc.boolean() }),
    fc.record({ kind: fc.constant("wait" as const), ms: fc.integer({ min: 0, max: 2_000 }) }),
    fc.constant({ kind: "down" as const }),
    fc.constant({ kind: "up" as const }),
    // The failed requests' refunds, sent now: some after calls that settled their leases' uses.
    fc.constant({ kind: "refund" as const }),
  );

  /**
   * One run: bursts sent at once (those the origin fails are refunded by a later step), pauses, outages. A call that
   * fails while carrying a lease's settlement loses it — the object may have applied it, so it is never sent twice — and
   * its unused units stay counted for the period: with outages the count is at least what was kept, without them exact.
   */
  async function run(n: number, steps: readonly (typeof step extends fc.Arbitrary<infer S> ? S : never)[]) {
    // Inside one hour, with time to spare: the quota's period never ends during a run.
    const t = at(Date.UTC(2026, 6, 1, 10), {
      failure_mode: "local",
      limits: [
        { limit: 1000, window: "1s" },
        { limit: n, period: "hour" },
      ],
    });
    const used = () => t.store.meters.get("k")?.quotas?.rows()[0]?.used ?? 0;
    const limit = () => t.client.limit({ ns: t.ns, name: "k", plan: t.plan, cost: 1, bg: t.bg });
    let kept = 0;
    let failed: RateLimitResult[] = [];
    // Each failed request refunded in this isolate, whatever happened to its lease since; a refund the object could not
    // take (it was down) leaves the grant counted: served, as far as it knows.
    const refundFailed = async () => {
      const back = await Promise.all(failed.map((r) => t.client.refund(t.ns, grantOf(r))));
      // While the object answers, a refund made in the isolate that granted it always gives the grant back.
      if (t.store.fail === null) expect(back).toEqual(back.map(() => true));
      kept += back.filter((x) => !x).length;
      failed = [];
      await t.settle();
    };
    for (const s of steps) {
      if (s.kind === "wait") t.advance(s.ms);
      else if (s.kind === "down") {
        t.store.fail = {};
        t.store.failures = Number.MAX_SAFE_INTEGER;
      } else if (s.kind === "up") t.store.fail = null;
      else if (s.kind === "refund") await refundFailed();
      else {
        const granted = (await Promise.all(Array.from({ length: s.n }, limit))).filter((r) => r.allowed);
        await t.settle();
        if (s.fail) failed.push(...granted);
        else kept += granted.length;
      }
      expect(used()).toBeLessThanOrEqual(n);
    }
    // The object answers again, the last refunds go, every lease expires, and calls settle them.
    t.store.fail = null;
    await refundFailed();
    for (let i = 0; i < 2; i++) {
      t.advance(60_000);
      if ((await limit()).allowed) kept += 1;
      await t.settle();
    }
    return { used: used(), kept };
  }

  it("parallel requests and refunds of every kind of grant: once leases are settled, the quota counts what was kept", async () => {
    const calm = step.filter((s) => s.kind !== "down");
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 5, max: 60 }),
        fc.array(calm, { minLength: 1, maxLength: 30 }),
        async (n, steps) => {
          const { used, kept } = await run(n, steps);
          expect(used).toBe(kept);
        },
      ),
      { numRuns: 40 },
    );
  });

  it("with outages and recoveries: never fewer counted than kept, never over the quota", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 5, max: 60 }),
        fc.array(step, { minLength: 1, maxLength: 30 }),
        async (n, steps) => {
          const { used, kept } = await run(n, steps);
          expect(used).toBeGreaterThanOrEqual(kept);
          expect(used).toBeLessThanOrEqual(n);
        },
      ),
      { numRuns: 30 },
    );
  });
});

describe("never over a quota in any period (property)", () => {
  /**
   * Instants near which boundaries matter — a leap day, month and year ends, daylight-saving changes both ways; each
   * run starts up to a minute before the end of the period containing one (so leases are out when it passes).
   */
  const near: { at: number; zone: string }[] = [
    { at: Date.UTC(2028, 1, 28, 23, 30), zone: "UTC" }, // the day before the leap day 2028-02-29
    { at: Date.UTC(2026, 2, 8, 6, 30), zone: "America/New_York" }, // clocks forward at 07:00 UTC
    { at: Date.UTC(2026, 10, 1, 5, 30), zone: "America/New_York" }, // clocks back at 06:00 UTC
    { at: Date.UTC(2026, 9, 25, 0, 30), zone: "Europe/Berlin" }, // clocks back at 01:00 UTC
    { at: Date.UTC(2026, 11, 31, 12), zone: "Asia/Kolkata" }, // a year's end at +5:30
    { at: Date.UTC(2026, 3, 5, 14, 40), zone: "Australia/Lord_Howe" }, // back by 30 minutes at 15:00 UTC
  ];
  const step = fc.oneof(
    fc.record({
      kind: fc.constant("burst" as const),
      n: fc.integer({ min: 1, max: 6 }),
      cost: fc.integer({ min: 1, max: 3 }),
    }),
    fc.record({
      kind: fc.constant("wait" as const),
      ms: fc.oneof(
        { weight: 8, arbitrary: fc.integer({ min: 0, max: 3_000 }) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 * HOUR }) },
      ),
    }),
    fc.record({ kind: fc.constant("refund" as const), pick: fc.nat() }),
    // A client in a loop: one request at a time, `gap` apart (the isolate learns its rate and leases).
    fc.record({
      kind: fc.constant("loop" as const),
      n: fc.integer({ min: 1, max: 40 }),
      gap: fc.integer({ min: 1, max: 2_000 }),
    }),
  );

  it("quota-only and beside sliding limits, leases on and off, parallel requests, refunds", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...near),
        fc.constantFrom<Period>("hour", "day", "week", "month"),
        fc.integer({ min: 0, max: 60_000 }),
        fc.integer({ min: 1, max: 30 }),
        fc.boolean(),
        fc.boolean(),
        fc.array(step, { minLength: 1, maxLength: 60 }),
        async ({ at: near, zone }, period, before, limit, sliding, leases, steps) => {
          const quota = { limit, period, time_zone: zone };
          const t = at(periodAt(near, period, zone).end - before, {
            limits: sliding ? [{ limit: 10_000, window: "10m" }, quota] : [quota],
            leases,
          });
          const kept: { at: number; units: number; r: RateLimitResult }[] = [];
          for (const s of steps) {
            if (s.kind === "wait") t.advance(s.ms);
            else if (s.kind === "loop") {
              for (let i = 0; i < s.n; i++, t.advance(s.gap)) {
                const r = await t.client.limit({ ns: t.ns, name: "k", plan: t.plan, cost: 1, bg: t.bg });
                expect(r.reason).not.toMatch(/^limiter_/);
                if (r.allowed) kept.push({ at: r.at, units: 1, r });
                await t.settle();
              }
            } else if (s.kind === "burst") {
              const cost = s.cost;
              const out = await Promise.all(
                Array.from({ length: s.n }, () =>
                  t.client.limit({ ns: t.ns, name: "k", plan: t.plan, cost, bg: t.bg }),
                ),
              );
              for (const r of out) {
                expect(r.reason).not.toMatch(/^limiter_/);
                if (r.allowed) kept.push({ at: r.at, units: cost, r });
              }
            } else if (kept.length > 0) {
              const i = s.pick % kept.length;
              const g = kept[i] as (typeof kept)[number];
              if (await t.client.refund(t.ns, g.r.handle?.grants[0] as never)) {
                // Given back in the period it was granted in: it counts nowhere. In a later one: still counted there.
                if (periodAt(t.client.now(), period, zone).start === periodAt(g.at, period, zone).start)
                  kept.splice(i, 1);
              }
            }
            await t.settle();
          }
          const units = kept.flatMap((g) => Array.from({ length: g.units }, () => g.at));
          expect(mostInPeriod(units, period, zone)).toBeLessThanOrEqual(limit);
        },
      ),
      { numRuns: 400 },
    );
  });
});
