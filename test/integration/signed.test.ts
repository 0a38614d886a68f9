// Signed keys through the proxy inside workerd, against the real origin: a minted key works with every feature; each
// bad key is a 401 saying which, with no call to any key's object and nothing forwarded; an address that keeps
// guessing gets 429 and then a penalty from its own budget, answered from the deny cache while it lasts; under
// `optional`, a minted key with a character dropped or added is refused as under `true`, never served unsigned; the
// admin API mints keys (an account only for a plan with account limits); KEY_SECRET missing is a clear 500, logged;
// rotation with KEY_SECRET_PREVIOUS.
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createLimiter } from "../../src/index.ts";
import { mintKey } from "../../src/pipeline/signed.ts";
import { createProxy } from "../../src/proxy/app.ts";
import { problemOf } from "../support/problem.ts";
import { arrivalsFor, envWith, request, spyLimiter, type WorkerEnv } from "./helpers.ts";

const SECRET = "integration-key-secret";
const TOKEN = "signed-admin-token";

beforeEach(() => {
  // Refused keys and admin calls log JSON lines.
  vi.spyOn(console, "log").mockImplementation(() => {});
  vi.spyOn(console, "warn").mockImplementation(() => {});
});
afterEach(() => vi.restoreAllMocks());

/** The real LIMITER namespace, recording `<object name> <method>` for every call on any object. */
function recorded(): { namespace: WorkerEnv["LIMITER"]; calls: string[] } {
  const spy = spyLimiter();
  return { namespace: spy.namespace, calls: spy.byObject };
}

const limits = [{ limit: 100, window: "1m" as const }];
const RL = {
  plans: [
    { name: "pro", key_prefix: "live_", signed: true, limits },
    { name: "team", key_prefix: "team_", signed: true, limits },
    { name: "old", key_prefix: "old_", limits },
  ],
  guesses: { limits: [{ limit: 3, window: "1m" }], penalty: { after: 2, within: "1m", block: "10m" } },
  leases: false,
};

/** A request with `key` from the client address `ip`. */
function from(ip: string, key: string, path = "/"): Request {
  return request(key, path, { headers: { "cf-connecting-ip": ip } });
}

/** A fresh client address (one per test: its guess budget starts empty). */
function freshIp(): string {
  const b = crypto.getRandomValues(new Uint8Array(3));
  return `10.${b[0]}.${b[1]}.${b[2]}`;
}

describe("signed keys through the proxy", () => {
  it("each bad key is a 401 with its code, no key's object is called, nothing reaches the origin", async () => {
    const spy = recorded();
    const e = envWith(RL, { KEY_SECRET: SECRET, LIMITER: spy.namespace });
    // The proxy's clock stands still: a key that expires at it is expired.
    const now = Date.now();
    const proxy = createProxy({ clock: () => now });
    const pro = { name: "pro", keyPrefix: "live_" };
    const good = (await mintKey({ KEY_SECRET: SECRET }, pro)).key;
    const team = (await mintKey({ KEY_SECRET: SECRET }, { name: "team", keyPrefix: "team_" })).key;
    const flip = (k: string) => `${k.slice(0, -2)}${k.at(-2) === "A" ? "B" : "A"}${k.at(-1)}`;
    const cases: [string, string][] = [
      [`live_${crypto.randomUUID().replaceAll("-", "")}`, "key_unsigned"],
      [good.slice(0, -3), "key_malformed"],
      [flip(good), "key_signature"],
      [(await mintKey({ KEY_SECRET: "retired-secret" }, pro)).key, "key_secret_retired"],
      [(await mintKey({ KEY_SECRET: SECRET }, pro, { expires: now, now: now - 1 })).key, "key_expired"],
      [`live_${team.slice("team_".length)}`, "key_plan_mismatch"],
      [(await mintKey({ KEY_SECRET: SECRET }, { name: "gone", keyPrefix: "live_" })).key, "key_plan_unknown"],
    ];
    for (const [key, code] of cases) {
      // A new address each, under its guess budget: each answer is the key's refusal.
      const res = await proxy.handle(from(freshIp(), key), e);
      const body = await problemOf(res, 401);
      expect([code, body.code]).toEqual([code, code]);
      expect(body.detail).not.toContain(key.slice(5, 25));
      expect(await arrivalsFor(key)).toEqual([]);
    }
    // Long and non-ASCII keys: malformed (400), refused before any plan is looked at, also counted as guesses.
    expect((await proxy.handle(from(freshIp(), `live_${"a".repeat(300)}`), e)).status).toBe(400);
    const nonAscii = new Request("https://limiter.example/", {
      headers: { "x-api-key": "live_cl\u00e9", "cf-connecting-ip": freshIp() },
    });
    expect((await proxy.handle(nonAscii, e)).status).toBe(400);
    // The only objects called: the guessing addresses', one call each.
    expect(spy.calls.filter((c) => !c.startsWith("guess:"))).toEqual([]);
    expect(spy.calls).toHaveLength(cases.length + 2);
    // The good key passes, at its own object, and reaches the origin.
    const ok = await proxy.handle(from(freshIp(), good), e);
    expect(ok.status).toBe(200);
    expect(await arrivalsFor(good)).toHaveLength(1);
    expect(spy.calls.filter((c) => c.startsWith(`key:${good} `)).length).toBeGreaterThan(0);
  });

  it("an address that keeps guessing gets 429, then its penalty from the deny cache; no key's object is touched", async () => {
    const spy = recorded();
    const e = envWith(RL, { KEY_SECRET: SECRET, LIMITER: spy.namespace });
    const proxy = createProxy();
    const ip = freshIp();
    const forged = () => `live_${crypto.randomUUID().replaceAll("-", "")}.${"A".repeat(43)}`;
    // Three guesses a minute: 401s.
    for (let i = 0; i < 3; i++)
      expect((await problemOf(await proxy.handle(from(ip, forged()), e), 401)).code).toBe("key_malformed");
    // The fourth is over the address's budget; the fifth completes the penalty's count: blocked for 10 minutes.
    expect((await problemOf(await proxy.handle(from(ip, forged()), e), 429)).violated_policies).toEqual([
      "guess-per-minute",
    ]);
    const blocked = await problemOf(await proxy.handle(from(ip, forged()), e), 429);
    expect(blocked.reason).toBe("penalty");
    // The block is the address's (no key was ever valid here): the answer says so.
    expect(blocked.detail).toMatch(/^This client address is blocked for a while/);
    expect(blocked.retry_after).toBeGreaterThan(590);
    const calls = spy.calls.length;
    // While blocked the isolate answers from its deny cache: no object call at all.
    for (let i = 0; i < 5; i++)
      expect((await problemOf(await proxy.handle(from(ip, forged()), e), 429)).reason).toBe("penalty");
    expect(spy.calls).toHaveLength(calls);
    expect(new Set(spy.calls.map((c) => c.split(" ")[0]))).toEqual(new Set([`guess:${ip}`]));
    // Another address is not blocked; a valid key from the blocked one still passes (only refused keys are guesses).
    expect((await proxy.handle(from(freshIp(), forged()), e)).status).toBe(401);
    const good = (await mintKey({ KEY_SECRET: SECRET }, { name: "pro", keyPrefix: "live_" })).key;
    expect((await proxy.handle(from(ip, good), e)).status).toBe(200);
  });

  it("guesses from parallel requests are counted exactly: at most the budget get 401, the rest 429", async () => {
    const e = envWith(RL, { KEY_SECRET: SECRET });
    const proxy = createProxy();
    const ip = freshIp();
    const statuses = await Promise.all(
      Array.from({ length: 8 }, () => proxy.handle(from(ip, `live_${crypto.randomUUID()}.x`), e).then((r) => r.status)),
    );
    expect(statuses.filter((s) => s === 401)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(5);
  });

  it("KEY_SECRET missing: a 500 saying how to set it (deployed, and in .dev.vars locally), logged once, nothing counted", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const spy = recorded();
    const e = envWith(RL, { LIMITER: spy.namespace });
    const proxy = createProxy();
    for (let i = 0; i < 2; i++) {
      const body = await problemOf(await proxy.handle(from(freshIp(), "live_abc.def"), e), 500);
      expect(body.title).toBe("Rate limiter misconfigured");
      expect(body.detail).toMatch(
        /^KEY_SECRET: not set, and plan "pro" has signed keys; set the secret with `wrangler secret put KEY_SECRET` .*, or locally a line KEY_SECRET=.* in \.dev\.vars beside wrangler\.toml, then restart wrangler dev/,
      );
    }
    // Logged as the proxy logs a configuration error: one `config_error` line with the message, not one per request.
    const lines = errors.mock.calls.map(([line]) => JSON.parse(String(line)));
    expect(lines).toEqual([
      { event: "config_error", message: expect.stringMatching(/^KEY_SECRET: not set, .*\.dev\.vars/) },
    ]);
    expect(spy.calls).toEqual([]);
  });

  it("rotation: keys of the previous secret pass while KEY_SECRET_PREVIOUS holds it, and are refused after", async () => {
    const old = (await mintKey({ KEY_SECRET: "first-secret" }, { name: "pro", keyPrefix: "live_" })).key;
    const proxy = createProxy();
    const rotating = envWith(RL, { KEY_SECRET: "second-secret", KEY_SECRET_PREVIOUS: "first-secret" });
    expect((await proxy.handle(from(freshIp(), old), rotating)).status).toBe(200);
    const done = envWith(RL, { KEY_SECRET: "second-secret" });
    expect((await problemOf(await proxy.handle(from(freshIp(), old), done), 401)).code).toBe("key_secret_retired");
  });

  it("an optional plan passes unsigned keys and checks minted ones", async () => {
    const rl = { ...RL, plans: [{ name: "pro", key_prefix: "live_", signed: "optional", limits }] };
    const e = envWith(rl, { KEY_SECRET: SECRET });
    const proxy = createProxy();
    expect((await proxy.handle(from(freshIp(), `live_${crypto.randomUUID()}`), e)).status).toBe(200);
    const minted = (await mintKey({ KEY_SECRET: SECRET }, { name: "pro", keyPrefix: "live_" })).key;
    expect((await proxy.handle(from(freshIp(), minted), e)).status).toBe(200);
    const forged = `${minted.slice(0, -2)}${minted.at(-2) === "A" ? "B" : "A"}${minted.at(-1)}`;
    expect((await problemOf(await proxy.handle(from(freshIp(), forged), e), 401)).code).toBe("key_signature");
  });

  it("an optional plan refuses a minted key with a character dropped or added: 401, a guess, no key's object, nothing forwarded", async () => {
    const rl = { ...RL, plans: [{ name: "pro", key_prefix: "live_", signed: "optional", limits }] };
    const spy = recorded();
    const e = envWith(rl, { KEY_SECRET: SECRET, LIMITER: spy.namespace });
    const proxy = createProxy();
    const minted = (await mintKey({ KEY_SECRET: SECRET }, { name: "pro", keyPrefix: "live_" })).key;
    const dot = minted.lastIndexOf(".");
    const mangled = [
      minted.slice(0, -1), // its signature's last character dropped
      `${minted}A`, // a character added to its signature
      `${minted.slice(0, dot)}${minted.slice(dot + 1)}`, // its `.` dropped
      `live_${minted.slice("live_".length + 1)}`, // its body's first character dropped
      minted.slice(0, dot), // cut before its `.`
    ];
    for (const key of mangled) {
      const ip = freshIp();
      expect([key, (await problemOf(await proxy.handle(from(ip, key), e), 401)).code]).toEqual([key, "key_malformed"]);
      // Counted against its address, as every refused key is.
      expect(spy.calls.filter((c) => c.startsWith(`guess:${ip} `))).toHaveLength(1);
      expect(await arrivalsFor(key)).toEqual([]);
    }
    // No key's object was called, so none was created: only the guessing addresses' objects.
    expect(spy.calls.filter((c) => !c.startsWith("guess:"))).toEqual([]);
    // The key itself, and an unsigned key (not shaped like a minted one), still pass.
    expect((await proxy.handle(from(freshIp(), minted), e)).status).toBe(200);
    expect((await proxy.handle(from(freshIp(), `live_${crypto.randomUUID()}`), e)).status).toBe(200);
  });
});

describe("minting through the admin API", () => {
  const FULL = {
    plans: [
      {
        name: "pro",
        key_prefix: "live_",
        signed: true,
        limits: [
          { limit: 5, window: "1m" },
          { limit: 1000, period: "month", name: "monthly" },
        ],
        routes: [{ name: "search", path: "/search", limits: [{ limit: 2, window: "1m" }] }],
        credits: { initial: 10 },
        usage: true,
        account: { limits: [{ limit: 1000, window: "1m" }] },
      },
      { name: "free", key_prefix: "free_", limits },
    ],
    leases: false,
  };
  const admin = (path: string, body: unknown, e: WorkerEnv, token = TOKEN) =>
    createProxy().handle(
      new Request(`https://limiter.example/__limiter/${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }),
      e,
    );

  it("mints a key that works with routes, quotas, credits, usage and overrides unchanged", async () => {
    const e = envWith(FULL, { KEY_SECRET: SECRET, ADMIN_TOKEN: TOKEN });
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const res = await admin("keys", { plan: "pro", account: "acme", expires }, e);
    expect(res.status).toBe(200);
    const minted = (await res.json()) as { key: string; plan: string; account: string; expires: string };
    expect(minted).toMatchObject({ plan: "pro", account: "acme", expires });
    expect(minted.key).toMatch(/^live_/);
    const { key } = minted;
    const proxy = createProxy();
    const ip = freshIp();
    const first = await proxy.handle(from(ip, key), e);
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit-policy")).toContain("monthly");
    // The route's own budget: two searches, then 429 naming the route.
    for (let i = 0; i < 2; i++) expect((await proxy.handle(from(ip, key, "/search"), e)).status).toBe(200);
    const route = await problemOf(await proxy.handle(from(ip, key, "/search"), e), 429);
    expect(route.route).toBe("search");
    // Status: the key's windows, its quota, its credits (10 - 3 spent).
    const status = (await (await admin("status", { key }, e)).json()) as Record<string, unknown>;
    expect(status).toMatchObject({ plan: "pro", stored: true, credits: { balance: 7 } });
    expect(status.quotas).toMatchObject([{ name: "monthly", used: 3 }]);
    expect((await admin("credits", { key, add: 5 }, e)).status).toBe(200);
    const usage = (await (await admin("usage", { key, period: "day" }, e)).json()) as {
      periods: { requests: number }[];
    };
    expect(usage.periods.at(-1)?.requests).toBe(3);
    // An override raises its limit; a reset empties its windows.
    expect((await admin("override", { key, limits: [{ limit: 50, window: "1m" }] }, e)).status).toBe(200);
    expect((await admin("reset", { key }, e)).status).toBe(200);
    expect((await proxy.handle(from(ip, key), e)).headers.get("ratelimit")).toMatch(/r=49/);
    expect(await arrivalsFor(key)).toHaveLength(4);
  });

  it("refuses bad input naming the field, a plan not signed, and answers 500 without KEY_SECRET", async () => {
    const e = envWith(FULL, { KEY_SECRET: SECRET, ADMIN_TOKEN: TOKEN });
    const cases: [unknown, RegExp][] = [
      [{}, /^plan: required/],
      [{ plan: "gold" }, /^plan: no plan named "gold"; signed plans: "pro"/],
      [{ plan: "free" }, /^plan: plan "free" is not signed/],
      [{ plan: "pro", account: "a b" }, /^account: /],
      [{ plan: "pro", account: 7 }, /^account: expected a string/],
      [{ plan: "pro", expires: "tomorrow" }, /^expires: expected an ISO time/],
      [{ plan: "pro", expires: Date.now() - 1 }, /^expires: .* is not in the future/],
      [{ plan: "pro", key: "live_x" }, /^key: unknown field/],
    ];
    for (const [body, detail] of cases) {
      const res = await admin("keys", body, e);
      expect([JSON.stringify(body), (await problemOf(res, 400)).detail]).toEqual([
        JSON.stringify(body),
        expect.stringMatching(detail),
      ]);
    }
    expect((await admin("keys", { plan: "pro" }, e, "wrong")).status).toBe(401);
    // An account for a plan without account limits would never be counted: 422 naming it, and no key.
    const basic = envWith(
      { plans: [{ name: "basic", key_prefix: "basic_", signed: true, limits }], leases: false },
      { KEY_SECRET: SECRET, ADMIN_TOKEN: TOKEN },
    );
    const uncounted = await problemOf(await admin("keys", { plan: "basic", account: "acme" }, basic), 422);
    expect(uncounted.detail).toMatch(/^account: plan "basic" has no account limits, .* or mint without an account$/);
    expect(uncounted).not.toHaveProperty("key");
    expect((await admin("keys", { plan: "basic" }, basic)).status).toBe(200);
    const noSecret = await admin("keys", { plan: "pro" }, envWith(FULL, { ADMIN_TOKEN: TOKEN }));
    expect((await problemOf(noSecret, 500)).detail).toMatch(/KEY_SECRET: not set/);
    // "for": a duration from now.
    const soon = (await (await admin("keys", { plan: "pro", for: "1h" }, e)).json()) as { expires: string };
    expect(Date.parse(soon.expires)).toBeGreaterThan(Date.now() + 3_500_000);
  });

  it("the page shows the mint form with the signed plans", async () => {
    const e = envWith(FULL, { KEY_SECRET: SECRET, ADMIN_TOKEN: TOKEN });
    const html = await (await createProxy().handle(new Request("https://limiter.example/__limiter/"), e)).text();
    expect(html).toContain('const SIGNED = ["pro"];');
    expect(html).toContain(">Reset windows</button>");
    expect(html).not.toContain("__MINT");
  });
});

describe("the library", () => {
  it("mints for a signed plan, limits with the key, and counts the account in the identity", async () => {
    const limiter = createLimiter({
      name: "signed-lib",
      plans: [
        { name: "pro", key_prefix: "live_", signed: true, limits, account: { limits } },
        { name: "basic", key_prefix: "basic_", signed: true, limits },
      ],
      leases: false,
    });
    const e = { ...(env as object), KEY_SECRET: SECRET };
    const { key, account } = await limiter.mintKey(e, "pro", { account: "acme" });
    expect(account).toBe("acme");
    expect((await limiter.limit(e, key)).allowed).toBe(true);
    const decided = await limiter.pipeline.decide(e, (env as unknown as WorkerEnv).LIMITER, { key, cost: 1 });
    expect(decided?.identity).toMatchObject({ name: `signed-lib/key:${key}`, account: "acme" });
    await expect(limiter.limit(e, `${key.slice(0, -1)}`)).rejects.toMatchObject({ code: "key_malformed" });
    await expect(limiter.mintKey(e, "nope")).rejects.toThrow(/^plan: /);
    await expect(limiter.mintKey(e, "basic", { account: "acme" })).rejects.toThrow(
      /^account: plan "basic" has no account limits/,
    );
  });

  it("peek, reset, credit and usage refuse a forged key as limit() does, and call no object for it", async () => {
    const spy = recorded();
    const limiter = createLimiter({
      name: "signed-lib-reads",
      plans: [{ name: "pro", key_prefix: "live_", signed: true, limits, credits: { initial: 5 }, usage: true }],
    });
    const e = { ...(env as object), LIMITER: spy.namespace, KEY_SECRET: SECRET };
    const { key } = await limiter.mintKey(e, "pro");
    const forged = `${key.slice(0, -2)}${key.at(-2) === "A" ? "B" : "A"}${key.at(-1)}`;
    const refused = { code: "key_signature" };
    await expect(limiter.peek(e, forged)).rejects.toMatchObject(refused);
    await expect(limiter.reset(e, forged)).rejects.toMatchObject(refused);
    await expect(limiter.credit(e, forged, 10)).rejects.toMatchObject(refused);
    await expect(limiter.usage(e, forged, { period: "day" })).rejects.toMatchObject(refused);
    expect(spy.calls).toEqual([]);
    // The minted key itself reads as before.
    expect((await limiter.peek(e, key)).allowed).toBe(true);
    expect(spy.calls.length).toBeGreaterThan(0);
  });
});
