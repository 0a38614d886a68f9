// Accounts and keys kept elsewhere, inside workerd against the real objects: an account's budget over many keys, all
// or nothing with each key's own and its address's (docs/configuration.md, "Accounts"), through the library and the
// hono middleware; and the verify hook (docs/configuration.md, "Keys kept elsewhere") — its plan and account, one
// lookup per isolate per cache period for a flood of one key, unknown keys refused with no object call, a failing
// hook answered 503.
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type RateLimitVariables, rateLimit } from "../../src/hono.ts";
import { createLimiter, type RateLimitResult, type VerifyAnswer } from "../../src/index.ts";
import { problemOf } from "../support/problem.ts";
import { freshKey, spyLimiter } from "./helpers.ts";

afterEach(() => vi.restoreAllMocks());

const freshAccount = () => `acct-${crypto.randomUUID()}`;
let next = 1;
const freshIp = () => {
  const n = next++;
  return `10.${Math.floor(n / 250)}.${n % 250}.1`;
};
const remaining = (r: RateLimitResult, name: string) => r.limits.find((l) => l.name === name)?.remaining;

/** A team plan: 5 a minute per key, 3 a minute per account; an address budget of 10 a minute. */
const settings = (over: { key?: number; account?: number; ip?: number; leases?: boolean } = {}) => ({
  name: `accounts-${crypto.randomUUID()}`,
  leases: over.leases ?? false,
  plans: [
    {
      name: "team",
      key_prefix: "t_",
      limits: [{ limit: over.key ?? 5, window: "1m" as const }],
      ip: { limits: [{ limit: over.ip ?? 10, window: "1m" as const }] },
      account: { limits: [{ limit: over.account ?? 3, window: "1m" as const }] },
    },
  ],
});

describe("accounts: one budget over many keys, all or nothing with the key's and the address's", () => {
  it("two keys of one account share its budget exactly; another account has its own", async () => {
    const limiter = createLimiter(settings({ account: 3 }));
    const account = freshAccount();
    const [k1, k2] = [freshKey("t_"), freshKey("t_")];
    const first = await limiter.limit(env, k1, { account });
    expect(remaining(first, "account-per-minute")).toBe(2);
    expect(Object.fromEntries(limiter.headers(first))).toMatchObject({
      "ratelimit-policy": '"per-minute";q=5;w=60, "account-per-minute";q=3;w=60',
      ratelimit: '"per-minute";r=4;t=60, "account-per-minute";r=2;t=60',
    });
    expect((await limiter.limit(env, k2, { account })).allowed).toBe(true);
    expect((await limiter.limit(env, k1, { account })).allowed).toBe(true);
    const refused = await limiter.limit(env, k2, { account });
    expect(refused).toMatchObject({ allowed: false, refusedBy: "account", handle: null });
    expect(refused.limits.map((l) => [l.name, l.exceeded])).toEqual([
      ["per-minute", false],
      ["account-per-minute", true],
    ]);
    expect(limiter.headers(refused).get("Retry-After")).toMatch(/^\d+$/);
    expect((await limiter.limit(env, k2, { account: freshAccount() })).allowed).toBe(true);
    // Without an account, a key of the plan has its own limits alone.
    expect((await limiter.limit(env, freshKey("t_"))).limits.map((l) => l.name)).toEqual(["per-minute"]);
  });

  it.each([false, true])(
    "parallel requests of many keys of one account never pass its limit (leases %s)",
    async (leases) => {
      const limiter = createLimiter(settings({ account: 7, key: 50, leases }));
      const account = freshAccount();
      const keys = Array.from({ length: 4 }, () => freshKey("t_"));
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => limiter.limit(env, keys[i % 4] as string, { account })),
      );
      const granted = results.filter((r) => r.allowed).length;
      if (leases) expect(granted).toBeLessThanOrEqual(7);
      else expect(granted).toBe(7);
      expect(results.filter((r) => !r.allowed).every((r) => r.refusedBy === "account")).toBe(true);
    },
  );

  it("a key's refusal takes nothing from its account or its address", async () => {
    const limiter = createLimiter(settings({ key: 2, account: 5, ip: 10 }));
    const [account, ip, k1] = [freshAccount(), freshIp(), freshKey("t_")];
    for (let i = 0; i < 2; i++) expect((await limiter.limit(env, k1, { account, ip })).allowed).toBe(true);
    const byKey = await limiter.limit(env, k1, { account, ip });
    expect(byKey).toMatchObject({ allowed: false, refusedBy: "key" });
    // The account and the address granted that request and were given it back: 2 used of each.
    const other = await limiter.limit(env, freshKey("t_"), { account, ip });
    expect([remaining(other, "account-per-minute"), remaining(other, "ip-per-minute")]).toEqual([2, 7]);
  });

  it("an account's refusal takes nothing from the key or its address", async () => {
    const limiter = createLimiter(settings({ key: 5, account: 2, ip: 10 }));
    const [account, ip, k1] = [freshAccount(), freshIp(), freshKey("t_")];
    for (let i = 0; i < 2; i++) expect((await limiter.limit(env, k1, { account, ip })).allowed).toBe(true);
    for (let i = 0; i < 3; i++) {
      expect(await limiter.limit(env, k1, { account, ip })).toMatchObject({ allowed: false, refusedBy: "account" });
    }
    // Three refusals, none counted at the key or the address: 2 of each used.
    const elsewhere = await limiter.limit(env, k1, { account: freshAccount(), ip });
    expect([remaining(elsewhere, "per-minute"), remaining(elsewhere, "ip-per-minute")]).toEqual([2, 7]);
  });

  it("a refund gives back the account's units too; an address's refusal takes nothing from the account", async () => {
    const limiter = createLimiter(settings({ key: 5, account: 3, ip: 1 }));
    const [account, k1] = [freshAccount(), freshKey("t_")];
    const granted = await limiter.limit(env, k1, { account });
    expect(granted.handle?.grants.map((g) => g.name.replace(/^[^/]*\//, ""))).toEqual([
      `key:${k1}`,
      `acct.team:${account}`,
    ]);
    expect(await limiter.refund(env, structuredClone(granted))).toBe(true);
    const after = await limiter.limit(env, k1, { account });
    expect([remaining(after, "per-minute"), remaining(after, "account-per-minute")]).toEqual([4, 2]);
    const ip = freshIp();
    expect((await limiter.limit(env, k1, { account, ip })).allowed).toBe(true);
    expect(await limiter.limit(env, k1, { account, ip })).toMatchObject({ allowed: false, refusedBy: "ip" });
    expect(remaining(await limiter.limit(env, freshKey("t_"), { account }), "account-per-minute")).toBe(0);
  });

  it("an account's refusal frees the concurrency slot the key's grant took", async () => {
    const base = settings({ key: 50, account: 1 });
    const limiter = createLimiter({ ...base, plans: [{ ...(base.plans[0] as object), concurrency: 1 }] } as never);
    const [account, k1] = [freshAccount(), freshKey("t_")];
    const held = await limiter.acquire(env, k1, { account });
    expect(held.allowed).toBe(true);
    expect(await limiter.release(env, held)).toBe(true);
    expect(await limiter.acquire(env, k1, { account })).toMatchObject({ allowed: false, refusedBy: "account" });
    // The key's slot was given back with its grant: another account's request of the key takes it at once.
    const other = await limiter.acquire(env, k1, { account: freshAccount() });
    expect(other).toMatchObject({ allowed: true });
    await limiter.release(env, other);
  });

  it("an account that is not a name: a TypeError, nothing counted", async () => {
    const limiter = createLimiter(settings());
    const spy = spyLimiter();
    await expect(limiter.limit({ LIMITER: spy.namespace }, freshKey("t_"), { account: "a b" })).rejects.toThrow(
      "account: expected an account name of 1 to 128 printable ASCII characters without spaces or commas",
    );
    expect(spy.calls).toEqual([]);
  });
});

/** A store of keys elsewhere (KV, D1…): by key, its plan and account; its lookups counted. */
function store(entries: Record<string, { plan: string; account?: string }>) {
  const lookups: string[] = [];
  return {
    lookups,
    verify: async (key: string) => {
      lookups.push(key);
      return entries[key] ?? null;
    },
  };
}

type AppEnv = { Bindings: { LIMITER: typeof env.LIMITER }; Variables: RateLimitVariables };

describe("the verify hook through the hono middleware", () => {
  const app = (verify: (key: string, env: AppEnv["Bindings"]) => Promise<VerifyAnswer>, clock?: () => number) => {
    const a = new Hono<AppEnv>();
    a.use(
      "/api/*",
      rateLimit<AppEnv>({
        ...settings({ key: 5, account: 3 }),
        plans: [
          ...settings({ key: 5, account: 3 }).plans,
          { name: "free", key_prefix: "f_", limits: [{ limit: 1, window: "1m" }] },
        ],
        verify,
        verifyCache: { hit: "5m", miss: "30s" },
        ...(clock ? { clock } : {}),
      }),
    );
    a.get("/api/hello", (c) => c.json({ plan: c.get("rateLimit").plan }));
    return a;
  };
  const get = (a: Hono<AppEnv>, key: string, bindings: AppEnv["Bindings"] = { LIMITER: env.LIMITER }) =>
    a.request("/api/hello", { headers: { "x-api-key": key, "cf-connecting-ip": freshIp() } }, bindings);

  it("the hook's plan (not the prefix's) and its account decide; the headers show the account's policy", async () => {
    const account = freshAccount();
    const [k1, k2] = [`f_${crypto.randomUUID()}`, `f_${crypto.randomUUID()}`];
    const s = store({ [k1]: { plan: "team", account }, [k2]: { plan: "team", account } });
    const a = app(s.verify);
    const res = await get(a, k1);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ plan: "team" });
    expect(res.headers.get("RateLimit-Policy")).toBe(
      '"per-minute";q=5;w=60, "ip-per-minute";q=10;w=60, "account-per-minute";q=3;w=60',
    );
    expect(res.headers.get("RateLimit")).toBe(
      '"per-minute";r=4;t=60, "ip-per-minute";r=9;t=60, "account-per-minute";r=2;t=60',
    );
    expect((await get(a, k2)).status).toBe(200);
    expect((await get(a, k1)).status).toBe(200);
    const refused = await get(a, k2);
    const body = await problemOf(refused, 429);
    expect(body.violated_policies).toEqual(["account-per-minute"]);
    expect(s.lookups.sort()).toEqual([k1, k2].sort());
  });

  it("a flood of one unknown key: 401 unknown_key for each, one lookup per cache period, no object called", async () => {
    let now = Date.now();
    const s = store({});
    const a = app(s.verify, () => now);
    const spy = spyLimiter();
    const forged = `t_${crypto.randomUUID()}`;
    const flood = await Promise.all(Array.from({ length: 50 }, () => get(a, forged, { LIMITER: spy.namespace })));
    for (const res of flood) {
      const body = await problemOf(res, 401);
      expect(body.detail).toBe("This API key is not known.");
      expect(body.detail).not.toContain(forged);
    }
    expect(s.lookups).toEqual([forged]);
    expect(spy.calls).toEqual([]);
    // Within the miss period the answer stands; after it the store is asked again, once.
    now += 29_999;
    await problemOf(await get(a, forged, { LIMITER: spy.namespace }), 401);
    expect(s.lookups).toHaveLength(1);
    now += 1;
    await Promise.all(Array.from({ length: 20 }, () => get(a, forged, { LIMITER: spy.namespace })));
    expect(s.lookups).toEqual([forged, forged]);
    expect(spy.calls).toEqual([]);
  });

  it("a known key is looked up once per hit period however many requests it sends at once", async () => {
    let now = Date.now();
    const key = `t_${crypto.randomUUID()}`;
    const s = store({ [key]: { plan: "team" } });
    const a = app(s.verify, () => now);
    const burst = await Promise.all(Array.from({ length: 8 }, () => get(a, key)));
    expect(burst.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    expect(s.lookups).toEqual([key]);
    now += 300_000;
    await get(a, key);
    expect(s.lookups).toEqual([key, key]);
  });

  it("a hook that names a plan the limiter does not have: a ConfigError the app sees (500), no object called", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const a = app(async () => "platinum");
    const spy = spyLimiter();
    const res = await get(a, `t_${crypto.randomUUID()}`, { LIMITER: spy.namespace });
    expect(res.status).toBe(500);
    expect(String(error.mock.calls[0]?.[0])).toContain(
      'verify: the hook answered the plan "platinum", which this limiter does not have (its plans: "team", "free")',
    );
    expect(spy.calls).toEqual([]);
  });

  it("a hook that throws: 503 with Retry-After: 1 and no object called; the next request asks again", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    let down = true;
    const key = `t_${crypto.randomUUID()}`;
    const a = app(async () => {
      if (down) throw new Error("D1 unavailable");
      return "team";
    });
    const spy = spyLimiter();
    const res = await get(a, key, { LIMITER: spy.namespace });
    const body = await problemOf(res, 503);
    expect(body.detail).toBe("The API key could not be verified now; retry shortly.");
    expect(res.headers.get("Retry-After")).toBe("1");
    expect(spy.calls).toEqual([]);
    expect(JSON.parse(String(error.mock.calls[0]?.[0]))).toMatchObject({
      event: "verify_failed",
      message: "D1 unavailable",
    });
    down = false;
    expect((await get(a, key)).status).toBe(200);
  });
});
