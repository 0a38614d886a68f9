// The decision value: what shadow mode and the failure mode make of an outcome, its limits and headers; and one
// result made of several budgets' (a key's, its client address's and its account's).
import { describe, expect, it } from "vitest";
import { allOf } from "../../src/client/joined.ts";
import {
  checkGrant,
  type GrantRecord,
  givenBack,
  type Handle,
  headersOf,
  joinHandles,
  type Outcome,
  type RateLimitResult,
  resultOf,
  SDK_MAX_WAIT_MS,
  setHeadersOf,
  UNAVAILABLE_RETRY_MS,
  worthRetrying,
} from "../../src/client/result.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig, Plan } from "../../src/config/types.ts";

const config = (s: Record<string, unknown> = {}) =>
  parseLimiterConfig({ limits: [{ limit: 10, window: "1m" }], ...s }, "t") as LimiterConfig;
const plan = (c: LimiterConfig) => c.defaultPlan as Plan;
const AT = 1_800_000_000_000;
/** A key's result joined with its address's. */
const both = (key: RateLimitResult, address: RateLimitResult) => allOf(key, [{ by: "ip", result: address }]);

describe("resultOf", () => {
  it("a grant: its limits with their state, the headers, no wait; unknown states and exceeded flags default", () => {
    const c = config();
    const r = resultOf(c, {
      plan: plan(c),
      shown: plan(c).limits ?? [],
      cost: 1,
      reason: "granted",
      fits: true,
      states: [{ remaining: 7, resetMs: 1500 }],
      at: AT,
    });
    expect(r).toMatchObject({ allowed: true, reason: "granted", plan: "default", route: null, refusedBy: null });
    expect(r.limits).toEqual([
      { name: "per-minute", limit: 10, windowMs: 60_000, remaining: 7, resetMs: 1500, exceeded: false },
    ]);
    expect(r.retryAfterMs).toBe(0);
    expect(Object.fromEntries(headersOf(r, "draft-11"))).toEqual({
      "ratelimit-policy": '"per-minute";q=10;w=60',
      ratelimit: '"per-minute";r=7;t=2',
    });
    // Straight onto a response's headers: the same fields, replacing old ones, the rest kept.
    const onto = new Headers({ RateLimit: "old", "x-keep": "1" });
    setHeadersOf(r, "draft-11", onto);
    expect(Object.fromEntries(onto)).toEqual({ ...Object.fromEntries(headersOf(r, "draft-11")), "x-keep": "1" });
    const unknown = resultOf(c, {
      plan: plan(c),
      shown: plan(c).limits ?? [],
      cost: 1,
      reason: "leased",
      fits: true,
      at: AT,
    });
    expect(unknown.limits[0]).toMatchObject({ remaining: null, resetMs: null, exceeded: false });
  });

  it("a refusal: Retry-After in whole seconds, refused by the key; shadow mode lets it through with the wait", () => {
    const c = config();
    const outcome = {
      plan: plan(c),
      shown: plan(c).limits ?? [],
      cost: 1,
      reason: "over_limit" as const,
      fits: false,
      states: [{ remaining: 0, resetMs: 1200 }],
      exceeded: [true],
      retryAfterMs: 1200,
      at: AT,
    };
    const r = resultOf(c, outcome);
    expect(r).toMatchObject({ allowed: false, refusedBy: "key", retryAfterMs: 1200 });
    expect(headersOf(r, "draft-11").get("Retry-After")).toBe("2");
    const shadow = resultOf(config({ shadow: true }), outcome);
    expect(shadow).toMatchObject({ allowed: true, reason: "shadow", refusedBy: null, retryAfterMs: 1200 });
    expect(headersOf(shadow, "draft-11").get("Retry-After")).toBeNull();
  });

  it("limiter unavailable: the failure mode decides, no rate-limit fields; closed waits a second", () => {
    for (const reason of ["limiter_timeout", "limiter_error"] as const) {
      const closed = resultOf(config(), {
        plan: plan(config()),
        shown: plan(config()).limits ?? [],
        cost: 1,
        reason,
        fits: false,
        at: AT,
      });
      expect(closed).toMatchObject({ allowed: false, reason, retryAfterMs: UNAVAILABLE_RETRY_MS });
      expect(Object.fromEntries(headersOf(closed, "draft-11"))).toEqual({
        "retry-after": "1",
        "retry-after-ms": "1000",
      });
      const c = config({ failure_mode: "open" });
      const open = resultOf(c, { plan: plan(c), shown: plan(c).limits ?? [], cost: 1, reason, fits: false, at: AT });
      expect(open).toMatchObject({ allowed: true, reason, retryAfterMs: 0 });
      expect([...headersOf(open, "draft-11")]).toEqual([]);
    }
  });

  it("names the route it was decided with", () => {
    const c = config({ routes: [{ name: "search", limits: [{ limit: 1, window: "1s" }] }] });
    const route = plan(c).routes[0] ?? null;
    const r = resultOf(c, {
      plan: plan(c),
      shown: route?.shown ?? [],
      cost: 1,
      reason: "granted",
      fits: true,
      at: AT,
      route,
    });
    expect(r.route).toBe("search");
  });
});

describe("allOf (a key and its address)", () => {
  const c = config({ ip: { limits: [{ limit: 3, window: "1m" }] } });
  const key = (over: Partial<Outcome> = {}) =>
    resultOf(c, {
      plan: plan(c),
      shown: plan(c).limits ?? [],
      cost: 1,
      reason: "granted",
      fits: true,
      states: [{ remaining: 9, resetMs: 60_000 }],
      at: AT,
      ...over,
    });
  const address = (fits: boolean, retryAfterMs = 0) =>
    resultOf(c, {
      plan: c.ip?.plan as Plan,
      shown: c.ip?.plan.limits ?? [],
      cost: 1,
      reason: fits ? "granted" : "over_limit",
      fits,
      states: [{ remaining: fits ? 2 : 0, resetMs: 60_000 }],
      exceeded: [!fits],
      retryAfterMs,
      at: AT,
    });

  it("allowed by both: both budgets' limits in the headers, the key's plan", () => {
    const r = both(key(), address(true));
    expect(r).toMatchObject({ allowed: true, reason: "granted", plan: "default", refusedBy: null, retryAfterMs: 0 });
    expect(r.limits.map((l) => l.name)).toEqual(["per-minute", "ip-per-minute"]);
    expect(headersOf(r, "draft-11").get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60, "ip-per-minute";q=3;w=60');
    expect(headersOf(r, "draft-11").get("RateLimit")).toBe('"per-minute";r=9;t=60, "ip-per-minute";r=2;t=60');
    expect(headersOf(r, "draft-11").get("Retry-After")).toBeNull();
  });

  it("refused by the address: its reason, its wait, refusedBy ip", () => {
    const r = both(key(), address(false, 4500));
    expect(r).toMatchObject({ allowed: false, reason: "over_limit", refusedBy: "ip", retryAfterMs: 4500 });
    expect(headersOf(r, "draft-11").get("Retry-After")).toBe("5");
  });

  it("refused by both: the key's reason and the longer wait", () => {
    const refusedKey = key({ reason: "over_limit", fits: false, retryAfterMs: 2000, exceeded: [true] });
    const r = both(refusedKey, address(false, 9000));
    expect(r).toMatchObject({ allowed: false, reason: "over_limit", refusedBy: "key", retryAfterMs: 9000 });
  });

  it("shadow mode: allowed, reason shadow, the wait the limits would impose; unknown states left out of RateLimit", () => {
    const shadowed = config({ ip: { limits: [{ limit: 3, window: "1m" }] }, shadow: true });
    const over = resultOf(shadowed, {
      plan: shadowed.ip?.plan as Plan,
      shown: shadowed.ip?.plan.limits ?? [],
      cost: 1,
      reason: "over_limit",
      fits: false,
      states: [null],
      exceeded: [true],
      retryAfterMs: 3000,
      at: AT,
    });
    const r = both(key(), over);
    expect(r).toMatchObject({ allowed: true, reason: "shadow", refusedBy: null, retryAfterMs: 3000 });
    expect(headersOf(r, "draft-11").get("RateLimit")).toBe('"per-minute";r=9;t=60');
    expect(headersOf(r, "draft-11").get("Retry-After")).toBeNull();
  });

  it("allowed by both, one unavailable and failing open: that budget's reason, no rate-limit fields", () => {
    const open = config({ ip: { limits: [{ limit: 3, window: "1m" }] }, failure_mode: "open" });
    for (const reason of ["limiter_timeout", "limiter_error"] as const) {
      const down = resultOf(open, { plan: open.ip?.plan as Plan, shown: [], cost: 1, reason, fits: false, at: AT });
      const r = both(key(), down);
      expect(r).toMatchObject({ allowed: true, reason, refusedBy: null, retryAfterMs: 0 });
      expect([...headersOf(r, "draft-11")]).toEqual([]);
    }
  });

  it("granted by both: one handle with both grants and the key's slot; refused: none", () => {
    const grant = (name: string): GrantRecord => ({ id: name, name, limits: [], recordedAt: [AT], units: 1 });
    const slot = { name: "key:k", id: "s1" };
    const k = key({ handle: { grants: [grant("key:k")], slot } });
    const a = { ...address(true), handle: { grants: [grant("ip:a")], slot: null } };
    expect(both(k, a).handle).toEqual({ grants: [grant("key:k"), grant("ip:a")], slot });
    expect(both(k, address(false, 1000)).handle).toBeNull();
    expect(both(key(), address(true)).handle).toBeNull();
  });

  it("one budget unavailable: no rate-limit fields", () => {
    const down = key({ reason: "limiter_timeout", fits: false });
    const r = both(down, address(true));
    expect(r).toMatchObject({ allowed: false, reason: "limiter_timeout", refusedBy: "key" });
    expect(Object.fromEntries(headersOf(r, "draft-11"))).toEqual({ "retry-after": "1", "retry-after-ms": "1000" });
    const addressDown = resultOf(c, {
      plan: c.ip?.plan as Plan,
      shown: [],
      cost: 1,
      reason: "limiter_error",
      fits: false,
      at: AT,
    });
    expect(Object.fromEntries(headersOf(both(key(), addressDown), "draft-11"))).toEqual({
      "retry-after": "1",
      "retry-after-ms": "1000",
    });
  });
});

describe("handles", () => {
  const grant: GrantRecord = { id: "g", name: "key:k", limits: [], recordedAt: [AT], units: 2 };

  it("checkGrant: a handle's grant passes; each field not as given names itself", () => {
    expect(() => checkGrant(grant)).not.toThrow();
    expect(() => checkGrant({ ...grant, lease: "l.1" })).not.toThrow();
    expect(() => checkGrant({ ...grant, alone: [AT, AT] })).not.toThrow();
    expect(() => checkGrant({ ...grant, id: "x".repeat(128) })).not.toThrow();
    const bad: [string, unknown][] = [
      ["grant", null],
      ["grant", "g"],
      ["id", { ...grant, id: "" }],
      ["id", { ...grant, id: "x".repeat(129) }],
      ["id", { ...grant, id: 7 }],
      ["name", { ...grant, name: "" }],
      ["name", { ...grant, name: 1 }],
      ["limits", { ...grant, limits: "[]" }],
      ["recordedAt", { ...grant, recordedAt: AT }],
      ["recordedAt", { ...grant, recordedAt: [AT, 1.5] }],
      ["units", { ...grant, units: 0 }],
      ["units", { ...grant, units: 1.5 }],
      ["units", { ...grant, units: "2" }],
      ["lease", { ...grant, lease: 1 }],
      ["alone", { ...grant, alone: AT }],
      ["alone", { ...grant, alone: [AT, 1.5] }],
    ];
    for (const [field, g] of bad) {
      expect(() => checkGrant(g as GrantRecord), field).toThrow(
        new TypeError(`refund: handle.grants[].${field} is not as the limiter gave it`),
      );
    }
  });

  it("joinHandles: either alone as it is; both: the grants in order, the first slot", () => {
    const a: Handle = { grants: [grant], slot: { name: "key:k", id: "s" } };
    const b: Handle = { grants: [{ ...grant, id: "h" }], slot: null };
    expect(joinHandles(null, null)).toBeNull();
    expect(joinHandles(a, null)).toBe(a);
    expect(joinHandles(null, b)).toBe(b);
    expect(joinHandles(a, b)).toEqual({ grants: [grant, { ...grant, id: "h" }], slot: a.slot });
    expect(joinHandles(b, a)).toEqual({ grants: [{ ...grant, id: "h" }, grant], slot: a.slot });
  });

  it("headersOf: a limit whose state is not known is left out of RateLimit; an endless wait has no Retry-After", () => {
    const c = config({
      limits: [
        { limit: 10, window: "1m" },
        { limit: 2, window: "1s" },
      ],
    });
    const r = resultOf(c, {
      plan: plan(c),
      shown: plan(c).limits ?? [],
      cost: 1,
      reason: "cached_denial",
      fits: false,
      states: [null, { remaining: 0, resetMs: 1000 }],
      exceeded: [false, true],
      retryAfterMs: 1000,
      at: AT,
    });
    expect(headersOf(r, "draft-11").get("RateLimit")).toBe('"per-second";r=0;t=1');
    expect(headersOf(r, "draft-11").get("Retry-After")).toBe("1");
    const half = { ...r, limits: r.limits.map((l) => ({ ...l, remaining: 5, resetMs: null })) };
    expect(headersOf(half, "draft-11").get("RateLimit")).toBeNull();
    const never = { ...r, retryAfterMs: Number.POSITIVE_INFINITY };
    expect(headersOf(never, "draft-11").has("Retry-After")).toBe(false);
  });

  it("headersOf a refusal: retry-after-ms exact beside Retry-After rounded up; x-should-retry false only where no SDK wait helps", () => {
    const c = config({ limits: [{ limit: 2, window: "2m" }] });
    const refused = (reason: RateLimitResult["reason"], retryAfterMs: number) =>
      resultOf(c, {
        plan: plan(c),
        shown: plan(c).limits ?? [],
        cost: 1,
        reason,
        fits: false,
        states: [{ remaining: 0, resetMs: retryAfterMs }],
        exceeded: [true],
        retryAfterMs,
        at: AT,
      });
    const fields = (r: RateLimitResult) => {
      const h = headersOf(r, "draft-11");
      return [h.get("Retry-After"), h.get("retry-after-ms"), h.get("x-should-retry")];
    };
    expect(fields(refused("over_limit", 1))).toEqual(["1", "1", null]);
    expect(fields(refused("over_limit", 1001))).toEqual(["2", "1001", null]);
    // The longest wait the providers' SDKs make, and a millisecond past it.
    expect(fields(refused("over_limit", 60_000))).toEqual(["60", "60000", null]);
    expect(fields(refused("over_limit", 60_001))).toEqual(["61", "60001", "false"]);
    expect(fields(refused("over_limit", Number.POSITIVE_INFINITY))).toEqual([null, null, "false"]);
    expect(fields(refused("blocked", 500))).toEqual(["1", "500", "false"]);
    expect(fields(refused("penalty", 500))).toEqual(["1", "500", "false"]);
    expect(fields(refused("concurrency", 1000))).toEqual(["1", "1000", null]);
    // A grant carries none of them.
    const granted = resultOf(c, {
      plan: plan(c),
      shown: plan(c).limits ?? [],
      cost: 1,
      reason: "granted",
      fits: true,
      at: AT,
    });
    expect(fields(granted)).toEqual([null, null, null]);
  });

  it("worthRetrying: the SDKs' longest wait is the bound; blocks and penalties never", () => {
    expect(worthRetrying({ reason: "over_limit", retryAfterMs: SDK_MAX_WAIT_MS })).toBe(true);
    expect(worthRetrying({ reason: "over_limit", retryAfterMs: SDK_MAX_WAIT_MS + 1 })).toBe(false);
    expect(worthRetrying({ reason: "limiter_timeout", retryAfterMs: 1000 })).toBe(true);
    expect(worthRetrying({ reason: "blocked", retryAfterMs: 0 })).toBe(false);
    expect(worthRetrying({ reason: "penalty", retryAfterMs: 0 })).toBe(false);
    expect(SDK_MAX_WAIT_MS).toBe(60_000);
  });
});

describe("allOf (a key, its address and its account)", () => {
  const c = config({
    plans: [
      {
        name: "team",
        key_prefix: "t_",
        limits: [{ limit: 10, window: "1m" }],
        ip: { limits: [{ limit: 5, window: "1m" }] },
        account: { limits: [{ limit: 20, window: "1m" }] },
      },
    ],
  });
  const team = c.plans[0] as Plan;
  const grant = (name: string): GrantRecord => ({ id: name, name, limits: [], recordedAt: [AT], units: 1 });
  const of = (p: Plan, fits: boolean, retryAfterMs = 0, name = "x") =>
    resultOf(c, {
      plan: p,
      shown: p.limits ?? [],
      cost: 1,
      reason: fits ? "granted" : "over_limit",
      fits,
      states: [{ remaining: fits ? 1 : 0, resetMs: 60_000 }],
      exceeded: [!fits],
      retryAfterMs,
      at: AT,
      handle: fits ? { grants: [grant(name)], slot: null } : null,
    });
  const ip = (team.ip as { plan: Plan }).plan;
  const account = (team.account as { plan: Plan }).plan;

  it("allowed by all three: every budget's limits in order, every grant in one handle, the key's plan", () => {
    const r = allOf(of(team, true, 0, "key:t_1"), [
      { by: "ip", result: of(ip, true, 0, "addr.team:a") },
      { by: "account", result: of(account, true, 0, "acct.team:acme") },
    ]);
    expect(r).toMatchObject({ allowed: true, plan: "team", refusedBy: null, retryAfterMs: 0 });
    expect(r.limits.map((l) => l.name)).toEqual(["per-minute", "ip-per-minute", "account-per-minute"]);
    expect(headersOf(r, "draft-11").get("RateLimit-Policy")).toBe(
      '"per-minute";q=10;w=60, "ip-per-minute";q=5;w=60, "account-per-minute";q=20;w=60',
    );
    expect(r.handle?.grants.map((g) => g.name)).toEqual(["key:t_1", "addr.team:a", "acct.team:acme"]);
  });

  it("refused by the account alone: refusedBy account, its wait, no handle", () => {
    const r = allOf(of(team, true), [
      { by: "ip", result: of(ip, true) },
      { by: "account", result: of(account, false, 7000) },
    ]);
    expect(r).toMatchObject({ allowed: false, reason: "over_limit", refusedBy: "account", retryAfterMs: 7000 });
    expect(r.handle).toBeNull();
    expect(r.limits.map((l) => l.exceeded)).toEqual([false, false, true]);
  });

  it("refused by the address and the account: the first refusing budget named, the longest wait", () => {
    const r = allOf(of(team, true), [
      { by: "ip", result: of(ip, false, 2000) },
      { by: "account", result: of(account, false, 9000) },
    ]);
    expect(r).toMatchObject({ allowed: false, refusedBy: "ip", retryAfterMs: 9000 });
  });

  it("a key and its account alone (no address budget): the account's refusal named", () => {
    const r = allOf(of(team, true), [{ by: "account", result: of(account, false, 1000) }]);
    expect(r).toMatchObject({ allowed: false, refusedBy: "account", retryAfterMs: 1000 });
    expect(r.limits.map((l) => l.name)).toEqual(["per-minute", "account-per-minute"]);
  });
});

describe("givenBack", () => {
  const c = config({
    limits: [
      { limit: 10, window: "1m" },
      { limit: 3, window: "1s" },
    ],
  });
  const granted = (states: ({ remaining: number; resetMs: number } | null)[], cost = 2) =>
    resultOf(c, {
      plan: plan(c),
      shown: plan(c).limits ?? [],
      cost,
      reason: "granted",
      fits: true,
      states,
      at: AT,
    });

  it("shows each limit as it is once the grant's cost is back: up by the cost, at most the limit, then nothing to reset", () => {
    const r = givenBack(
      granted([
        { remaining: 5, resetMs: 30_000 },
        { remaining: 1, resetMs: 900 },
      ]),
    );
    expect(r.limits.map((l) => [l.remaining, l.resetMs])).toEqual([
      [7, 30_000],
      [3, 0],
    ]);
    expect(r).toMatchObject({ allowed: true, cost: 2, reason: "granted" });
  });

  it("keeps a limit whose state is not known as it is", () => {
    const r = givenBack(granted([null, { remaining: 2, resetMs: 500 }], 1));
    expect(r.limits.map((l) => [l.remaining, l.resetMs])).toEqual([
      [null, null],
      [3, 0],
    ]);
  });
});
