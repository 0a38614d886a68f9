// Accounts (docs/configuration.md, "Accounts"): a plan's `account` limits as parsed (every error names its field), an
// account's name as checked, and one request decided over its key's, address's and account's budgets all or nothing
// (src/pipeline/all-or-nothing.ts) against a fake of the budgets' objects: every grant given back when any refuses.
import { describe, expect, it } from "vitest";
import type { LimiterNamespace, LimitRequest } from "../../src/client/index.ts";
import type { RateLimitResult } from "../../src/client/result.ts";
import { checkAccount } from "../../src/config/accounts.ts";
import { parseConfig, parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig, Plan } from "../../src/config/types.ts";
import { type Decider, decideAll, type ExtraBudget } from "../../src/pipeline/all-or-nothing.ts";

const ORIGIN = "https://api.example.com";
const team = (over: Record<string, unknown> = {}) => ({
  name: "team",
  key_prefix: "t_",
  limits: [{ limit: 10, window: "1m" }],
  account: {
    limits: [
      { limit: 100, window: "1m" },
      { limit: 1000, window: "1h" },
    ],
  },
  ...over,
});
const parse = (rl: Record<string, unknown>) => parseConfig({ ORIGIN, RATE_LIMIT: rl });
const error = (rl: Record<string, unknown>) => {
  try {
    parse(rl);
  } catch (e) {
    return (e as Error).message;
  }
  return null;
};

describe("a plan's account limits", () => {
  it("are parsed into a budget per plan (objects acct.<plan>:<account>), named account-per-…; other plans have none", () => {
    const config = parse({ plans: [team(), { name: "free", key_prefix: "f_", limits: [{ limit: 1, window: "1s" }] }] });
    const [t, f] = config.plans as [Plan, Plan];
    expect(t.account?.kind).toBe("acct.team");
    expect(t.account?.plan).toMatchObject({ name: "account", keyPrefix: "", routes: [], ip: null });
    expect(t.account?.plan.limits?.map((l) => [l.name, l.limit, l.windowMs])).toEqual([
      ["account-per-minute", 100, 60_000],
      ["account-per-hour", 1000, 3_600_000],
    ]);
    // Leases as for any budget: at most the longest window and the lease lifetime.
    expect(t.account?.plan.leaseMs).toBe(30_000);
    expect(f.account).toBeUndefined();
    const noLeases = parseLimiterConfig({ plans: [team()], leases: false }, "createLimiter");
    expect(noLeases.plans[0]?.account?.plan.leaseMs).toBe(0);
  });

  it("are accepted by the library and as a JSON string var", () => {
    const lib = parseLimiterConfig({ plans: [team()] }, "createLimiter");
    expect(lib.plans[0]?.account?.kind).toBe("acct.team");
    const fromString = parseConfig({ ORIGIN, RATE_LIMIT: JSON.stringify({ plans: [team()] }) });
    expect(fromString.plans[0]?.account?.plan.limits?.length).toBe(2);
  });

  it.each([
    [{ account: { limits: [] } }, "RATE_LIMIT.plans[0].account.limits: expected at least one limit"],
    [{ account: [] }, "RATE_LIMIT.plans[0].account: expected a table/object, got an array"],
    [
      { account: { limits: [{ limit: 1, window: "1s" }], keys: 2 } },
      "RATE_LIMIT.plans[0].account.keys: unknown setting; expected one of limits",
    ],
    [
      { account: { limits: [{ limit: 0, window: "1s" }] } },
      "RATE_LIMIT.plans[0].account.limits[0].limit: expected a positive integer, got 0",
    ],
    [
      { account: { limits: [{ limit: 5, period: "day" }] } },
      "RATE_LIMIT.plans[0].account.limits[0].period: calendar quotas are for a plan's limits (a plan's own, the top-level or the anonymous ones), not here",
    ],
    [
      { account: { limits: [{ limit: 5, window: "1m", name: "per-minute" }] } },
      'RATE_LIMIT.plans[0].account.limits[0].name: "per-minute" is also a limit of plan "team", its routes or its ip; the headers show them together, so give the account\'s limit another name',
    ],
    [
      {
        ip: { limits: [{ limit: 5, window: "1m", name: "shared" }] },
        account: { limits: [{ limit: 5, window: "1m", name: "shared" }] },
      },
      'RATE_LIMIT.plans[0].account.limits[0].name: "shared" is also a limit of plan "team", its routes or its ip; the headers show them together, so give the account\'s limit another name',
    ],
    [
      {
        routes: [{ name: "s", path: "/s", limits: [{ limit: 5, window: "1m", name: "search" }] }],
        account: { limits: [{ limit: 5, window: "1m", name: "search" }] },
      },
      'RATE_LIMIT.plans[0].account.limits[0].name: "search" is also a limit of plan "team", its routes or its ip; the headers show them together, so give the account\'s limit another name',
    ],
    [
      {
        limits: [{ limit: 5, period: "month", name: "monthly" }],
        account: { limits: [{ limit: 5, window: "1m", name: "monthly" }] },
      },
      'RATE_LIMIT.plans[0].account.limits[0].name: "monthly" is also a limit of plan "team", its routes or its ip; the headers show them together, so give the account\'s limit another name',
    ],
    [
      { limits: undefined, unlimited: true },
      "RATE_LIMIT.plans[0].account: an unlimited plan's keys never consult the limiter; remove account or unlimited",
    ],
  ])("%j: %s", (over, message) => {
    expect(error({ plans: [team(over)] })).toBe(message);
  });

  it("is a plan's setting: the top level has none", () => {
    expect(error({ limits: [{ limit: 1, window: "1s" }], account: { limits: [{ limit: 1, window: "1s" }] } })).toMatch(
      /^RATE_LIMIT\.account: unknown setting/,
    );
  });
});

describe("checkAccount", () => {
  it("takes 1 to 128 printable ASCII characters without spaces or commas", () => {
    for (const ok of ["a", "acme-corp", "org_123", "x".repeat(128), "A!~#"])
      expect(checkAccount(ok, "account")).toBe(ok);
  });

  it.each(["", "x".repeat(129), "a b", "a,b", "é", "a\n", 7, null, undefined, {}].map((v) => [v]))(
    "refuses %j with a TypeError naming the field, never the value",
    (bad) => {
      const message =
        "account: expected an account name of 1 to 128 printable ASCII characters without spaces or commas";
      expect(() => checkAccount(bad, "account")).toThrow(new TypeError(message));
    },
  );
});

describe("decideAll: a key's budget with its address's and its account's, all or nothing", () => {
  const config = parseLimiterConfig(
    { plans: [team({ ip: { limits: [{ limit: 5, window: "1m" }] } })] },
    "t",
  ) as LimiterConfig;
  const plan = config.plans[0] as Plan;
  const ns = {} as LimiterNamespace;
  const extras: ExtraBudget[] = [
    { by: "ip", name: "addr.team:192.0.2.1", plan: (plan.ip as { plan: Plan }).plan },
    { by: "account", name: "acct.team:acme", plan: (plan.account as { plan: Plan }).plan },
  ];
  /** A fake of the budgets' objects: each name grants or refuses as told, and every refund and release is noted. */
  const budgets = (refusing: readonly string[]) => {
    const refunded: string[] = [];
    const released: string[] = [];
    const asked: string[] = [];
    const decider: Decider = {
      limit: async (r: LimitRequest) => {
        asked.push(r.name);
        const allowed = !refusing.includes(r.name);
        const grants = allowed ? [{ id: r.name, name: r.name, limits: [], recordedAt: [1], units: r.cost }] : [];
        return {
          allowed,
          reason: allowed ? "granted" : "over_limit",
          plan: r.plan.name,
          route: null,
          refusedBy: allowed ? null : "key",
          cost: r.cost,
          retryAfterMs: allowed ? 0 : 1000,
          limits: [],
          at: 1,
          handle: allowed ? { grants, slot: r.name === "key:t_1" ? { name: r.name, id: "s" } : null } : null,
        } satisfies RateLimitResult;
      },
      refund: async (_, r) => {
        refunded.push(...(r.handle?.grants.map((g) => g.name) ?? []));
        return true;
      },
      release: async (_, r) => {
        if (r.handle?.slot) released.push(r.handle.slot.name);
        return r.handle?.slot !== undefined;
      },
    };
    return { decider, refunded, released, asked };
  };
  const request: LimitRequest = { ns, name: "key:t_1", plan, cost: 2 };

  it("granted by all three: one handle with every grant, nothing given back", async () => {
    const b = budgets([]);
    const r = await decideAll(b.decider, request, extras);
    expect(r).toMatchObject({ allowed: true, refusedBy: null });
    expect(r.handle?.grants.map((g) => [g.name, g.units])).toEqual([
      ["key:t_1", 2],
      ["addr.team:192.0.2.1", 2],
      ["acct.team:acme", 2],
    ]);
    expect(b.asked).toEqual(["key:t_1", "addr.team:192.0.2.1", "acct.team:acme"]);
    expect([b.refunded, b.released]).toEqual([[], []]);
  });

  it.each([
    [["key:t_1"], "key", ["addr.team:192.0.2.1", "acct.team:acme"]],
    [["acct.team:acme"], "account", ["key:t_1", "addr.team:192.0.2.1"]],
    [["addr.team:192.0.2.1"], "ip", ["key:t_1", "acct.team:acme"]],
    [["addr.team:192.0.2.1", "acct.team:acme"], "ip", ["key:t_1"]],
  ])("refused by %j: refusedBy %s, every other grant given back (%j)", async (refusing, by, back) => {
    const b = budgets(refusing);
    const r = await decideAll(b.decider, request, extras);
    expect(r).toMatchObject({ allowed: false, refusedBy: by, handle: null });
    expect(b.refunded.sort()).toEqual([...back].sort());
    // The key's slot is freed whenever the key granted.
    expect(b.released).toEqual(refusing.includes("key:t_1") ? [] : ["key:t_1"]);
  });

  it("refused by all: nothing to give back", async () => {
    const b = budgets(["key:t_1", "addr.team:192.0.2.1", "acct.team:acme"]);
    expect((await decideAll(b.decider, request, extras)).allowed).toBe(false);
    expect([b.refunded, b.released]).toEqual([[], []]);
  });
});
