// Who is asking: a key and its client address at once (all or nothing across two objects), IPv6 networks and
// IPv4-mapped addresses, a missing address, and browsers (CORS preflights and the headers a listed origin gets) —
// through the proxy against the real objects and origin, and through the hono middleware.
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { cors } from "hono/cors";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type RateLimitVariables, rateLimit } from "../../src/hono.ts";
import { createLimiter } from "../../src/index.ts";
import { createProxy } from "../../src/proxy/app.ts";
import { problemOf } from "../support/problem.ts";
import { arrivalsFor, envWith, freshKey, handle, request } from "./helpers.ts";

afterEach(() => vi.restoreAllMocks());

/** A request with a key from a client address. */
function from(ip: string | null, key: string | null, path = "/", init: RequestInit = {}): Request {
  const r = request(key, path, init);
  if (ip !== null) r.headers.set("cf-connecting-ip", ip);
  return r;
}

/** A fresh documentation address per test, so that address budgets start empty. */
let next = 1;
const freshIp = () => `198.51.100.${next++}`;
const freshNet = () => `2001:db8:${(next++).toString(16)}:ab00`;

describe("ip: every request with a key also fits its client address's limits", () => {
  const rl = {
    limits: [{ limit: 10, window: "1m" }],
    ip: { limits: [{ limit: 3, window: "1m" }] },
    leases: false,
  } as const;

  it("keys sent from one address share the address's budget; another address has its own", async () => {
    const e = envWith(rl);
    const ip = freshIp();
    const [k1, k2] = [freshKey(), freshKey()];
    expect((await handle(from(ip, k1), e)).status).toBe(200);
    expect((await handle(from(ip, k1), e)).status).toBe(200);
    const third = await handle(from(ip, k2), e);
    expect(third.status).toBe(200);
    expect(third.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60, "ip-per-minute";q=3;w=60');
    expect(third.headers.get("RateLimit")).toBe('"per-minute";r=9;t=60, "ip-per-minute";r=0;t=60');
    const refused = await handle(from(ip, freshKey()), e);
    const body = await problemOf(refused, 429);
    expect(body.violated_policies).toEqual(["ip-per-minute"]);
    expect(refused.headers.get("Retry-After")).toMatch(/^\d+$/);
    expect((await handle(from(freshIp(), k2), e)).status).toBe(200);
  });

  it("a request the key refuses is not counted at the address, and one the address refuses not at the key", async () => {
    const e = envWith({ ...rl, limits: [{ limit: 2, window: "1m" }], ip: { limits: [{ limit: 5, window: "1m" }] } });
    const ip = freshIp();
    const k1 = freshKey();
    for (let i = 0; i < 2; i++) expect((await handle(from(ip, k1), e)).status).toBe(200);
    const byKey = await handle(from(ip, k1), e);
    expect((await problemOf(byKey, 429)).violated_policies).toEqual(["per-minute"]);
    // The address granted that request, then gave it back before the answer, which shows it back: 5 − 2 used.
    expect(byKey.headers.get("RateLimit")).toMatch(/^"per-minute";r=0;t=\d+, "ip-per-minute";r=3;t=60$/);
    // The next refusal of the key is answered from the deny cache and shows the address as it is too.
    expect((await handle(from(ip, k1), e)).headers.get("RateLimit")).toMatch(/"ip-per-minute";r=3;/);
    // 2 left after the next grant.
    const other = await handle(from(ip, freshKey()), e);
    expect(other.headers.get("RateLimit")).toMatch(/"ip-per-minute";r=2;/);

    const e2 = envWith({ ...rl, limits: [{ limit: 5, window: "1m" }], ip: { limits: [{ limit: 2, window: "1m" }] } });
    const ip2 = freshIp();
    const k2 = freshKey();
    for (let i = 0; i < 2; i++) expect((await handle(from(ip2, k2), e2)).status).toBe(200);
    const byAddress = await handle(from(ip2, k2), e2);
    expect((await problemOf(byAddress, 429)).violated_policies).toEqual(["ip-per-minute"]);
    expect(byAddress.headers.get("RateLimit")).toMatch(/^"per-minute";r=3;t=60, "ip-per-minute";r=0;t=\d+$/);
    // The key granted it, then gave it back before the 429: 5 − 2 used, 2 left after a grant from elsewhere.
    const elsewhere = await handle(from(freshIp(), k2), e2);
    expect(elsewhere.headers.get("RateLimit")).toMatch(/^"per-minute";r=2;/);
    expect((await arrivalsFor(k2)).length).toBe(3);
  });

  it("logs say which budget refused", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const e = envWith({ ...rl, ip: { limits: [{ limit: 1, window: "1m" }] } });
    const ip = freshIp();
    await handle(from(ip, freshKey()), e);
    await handle(from(ip, freshKey()), e);
    const lines = log.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
    expect(lines.filter((l) => l.event === "denied")).toEqual([
      expect.objectContaining({ reason: "cached_denial", refused_by: "ip", violated: ["ip-per-minute"] }),
    ]);
  });

  it("a give-back that fails: the request is still refused, and the key's grant stays counted until it leaves the window", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    // The key's object answers, but its refund fails.
    const failing = {
      getByName(name: string) {
        const stub = env.LIMITER.getByName(name) as unknown as Record<string, (...a: unknown[]) => unknown>;
        return new Proxy(stub, {
          get: (t, p: string) =>
            p === "refund" ? () => Promise.reject(new Error("refund failed")) : (...a: unknown[]) => t[p]?.(...a),
        });
      },
    } as unknown as typeof env.LIMITER;
    const e = envWith(
      { ...rl, limits: [{ limit: 5, window: "1m" }], ip: { limits: [{ limit: 1, window: "1m" }] } },
      { LIMITER: failing },
    );
    const ip = freshIp();
    const key = freshKey();
    expect((await handle(from(ip, key), e)).status).toBe(200);
    await problemOf(await handle(from(ip, key), e), 429);
    expect(error.mock.calls.map((c) => JSON.parse(String(c[0])).event)).toContain("refund_failed");
    // 5 − 2: the refused request's grant at the key could not be given back; it is counted, never more is granted.
    const next = await handle(from(freshIp(), key), e);
    expect(next.headers.get("RateLimit")).toMatch(/^"per-minute";r=2;/);
  });

  it("IPv6 clients count by their /56; IPv4-mapped and plain IPv4 are one client", async () => {
    const e = envWith({ ...rl, ip: { limits: [{ limit: 2, window: "1m" }] } });
    const net = freshNet();
    expect((await handle(from(`${net.toUpperCase()}::1`, freshKey()), e)).status).toBe(200);
    expect((await handle(from(`${net.replace(/ab00$/, "abff")}:1:2:3:4`, freshKey()), e)).status).toBe(200);
    expect((await handle(from(`${net}::9`, freshKey()), e)).status).toBe(429);
    // The next /56 is another client.
    expect((await handle(from(`${net.replace(/ab00$/, "ac00")}::1`, freshKey()), e)).status).toBe(200);

    const ip = freshIp();
    expect((await handle(from(ip, freshKey()), e)).status).toBe(200);
    expect((await handle(from(`::ffff:${ip}`, freshKey()), e)).status).toBe(200);
    expect((await handle(from(`::FFFF:${ip}`, freshKey()), e)).status).toBe(429);
    expect((await handle(from(`::ffff:${freshIp()}`, freshKey()), e)).status).toBe(200);
  });

  it("ipv6_subnet = 64: two /64s of one /56 are two clients", async () => {
    const e = envWith({ ...rl, ipv6_subnet: 64, ip: { limits: [{ limit: 1, window: "1m" }] } });
    const net = freshNet();
    expect((await handle(from(`${net}::1`, freshKey()), e)).status).toBe(200);
    expect((await handle(from(`${net.replace(/ab00$/, "ab01")}::1`, freshKey()), e)).status).toBe(200);
    expect((await handle(from(`${net}::2`, freshKey()), e)).status).toBe(429);
  });

  it("a missing or malformed CF-Connecting-IP is a 400 naming it, nothing counted or proxied", async () => {
    const e = envWith(rl);
    const key = freshKey();
    for (const ip of [null, "unknown", "300.1.1.1", "2001:db8::1::2"]) {
      const body = await problemOf(await handle(from(ip, key), e), 400);
      expect(body.detail).toMatch(/CF-Connecting-IP/);
    }
    expect(await arrivalsFor(key)).toEqual([]);
    expect((await handle(from(freshIp(), key), e)).headers.get("RateLimit")).toMatch(/^"per-minute";r=9;/);
  });

  it("a plan's own ip replaces the top-level one; ip = false turns it off for trusted keys", async () => {
    const e = envWith({
      ...rl,
      plans: [
        { name: "server", key_prefix: "srv_", limits: [{ limit: 10, window: "1m" }], ip: false },
        {
          name: "team",
          key_prefix: "team_",
          limits: [{ limit: 10, window: "1m" }],
          ip: { limits: [{ limit: 1, window: "1m" }] },
        },
      ],
    });
    const ip = freshIp();
    for (let i = 0; i < 5; i++) expect((await handle(from(ip, freshKey("srv_")), e)).status).toBe(200);
    const server = await handle(from(ip, freshKey("srv_")), e);
    expect(server.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60');
    expect((await handle(from(ip, freshKey("team_")), e)).status).toBe(200);
    expect((await handle(from(ip, freshKey("team_")), e)).status).toBe(429);
    // The team's budget is its own: the default plan's keys still have the top-level one.
    expect((await handle(from(ip, freshKey()), e)).status).toBe(200);
  });

  it("leases work for an address's budget as for a key's (an address behind a busy NAT is a hot key)", async () => {
    const p = createProxy();
    const e = envWith({ limits: [{ limit: 1000, window: "1m" }], ip: { limits: [{ limit: 10_000, window: "1m" }] } });
    const ip = freshIp();
    const key = freshKey();
    const pending: Promise<unknown>[] = [];
    const hooks = { waitUntil: (x: Promise<unknown>) => void pending.push(x) };
    for (let i = 0; i < 40; i++) {
      expect((await p.handle(from(ip, key), e, hooks)).status).toBe(200);
      await Promise.all(pending);
    }
    const held = p.clientFor(e)?.leases.get(`addr:${ip}`)?.held ?? [];
    expect(held.reduce((n, h) => n + h.left, 0)).toBeGreaterThan(0);
  });

  it("limit(env, key, { ip }) applies the address's budget; without ip, the key's alone", async () => {
    const limiter = createLimiter({ name: null, ...rl, ip: { limits: [{ limit: 1, window: "1m" }] } });
    const e = { LIMITER: env.LIMITER };
    const ip = freshIp();
    expect((await limiter.limit(e, freshKey(), { ip })).allowed).toBe(true);
    const refused = await limiter.limit(e, freshKey(), { ip });
    expect(refused).toMatchObject({ allowed: false, refusedBy: "ip", reason: "cached_denial" });
    expect((await limiter.limit(e, freshKey())).allowed).toBe(true);
  });

  it("the hono middleware reads CF-Connecting-IP itself", async () => {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    app.use("*", rateLimit({ ...rl, ip: { limits: [{ limit: 1, window: "1m" }] } }));
    app.get("*", (c) => c.text("ok"));
    const ip = freshIp();
    const call = (key: string) =>
      app.request("/", { headers: { "x-api-key": key, "cf-connecting-ip": ip } }, { LIMITER: env.LIMITER });
    expect((await call(freshKey())).status).toBe(200);
    const refused = await call(freshKey());
    expect((await problemOf(refused, 429)).violated_policies).toEqual(["ip-per-minute"]);
  });
});

describe("browsers: CORS preflights and the headers a listed origin gets", () => {
  const APP = "https://app.example";
  const rl = {
    limits: [{ limit: 1, window: "1m" }],
    leases: false,
    cors: { origins: [APP], preflight_limits: [{ limit: 2, window: "1m" }] },
  };
  const preflight = (ip: string, origin = APP) =>
    from(ip, null, "/v1/items", {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "x-api-key" },
    });

  it("a preflight reaches the origin without a key and is not counted against any key; preflights have their own budget", async () => {
    const e = envWith(rl);
    const ip = freshIp();
    for (let i = 0; i < 2; i++) expect((await handle(preflight(ip), e)).status).toBe(200);
    const third = await handle(preflight(ip), e);
    await problemOf(third, 429);
    expect(third.headers.get("Access-Control-Allow-Origin")).toBe(APP);
    // Without cors set, preflights pass too (within the default 60 a minute per address).
    expect((await handle(preflight(freshIp()), envWith({ limits: [{ limit: 1, window: "1m" }] }))).status).toBe(200);
    // A key's budget is untouched: its one request still passes.
    expect((await handle(from(ip, freshKey(), "/", { headers: { origin: APP } }), e)).status).toBe(200);
  });

  it("the limiter's own answers to a listed origin allow it and expose the rate-limit fields; the origin's get the fields exposed", async () => {
    const e = envWith(rl);
    const key = freshKey();
    const ok = await handle(from(freshIp(), key, "/", { headers: { origin: APP } }), e);
    expect(ok.status).toBe(200);
    expect(ok.headers.get("Access-Control-Expose-Headers")).toBe(
      "RateLimit, RateLimit-Policy, Retry-After, retry-after-ms, x-should-retry",
    );
    expect(ok.headers.get("Access-Control-Allow-Origin")).toBeNull(); // the origin's to say
    const refused = await handle(from(freshIp(), key, "/", { headers: { origin: APP } }), e);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("Access-Control-Allow-Origin")).toBe(APP);
    expect(refused.headers.get("Vary")).toBe("Origin");
    expect(refused.headers.get("Access-Control-Expose-Headers")).toMatch(/Retry-After/);
    const noKey = await handle(from(freshIp(), null, "/", { headers: { origin: APP } }), e);
    expect(noKey.status).toBe(401);
    expect(noKey.headers.get("Access-Control-Allow-Origin")).toBe(APP);
  });

  it("an origin not listed gets nothing added; origins = '*' allows any", async () => {
    const e = envWith(rl);
    const other = await handle(from(freshIp(), null, "/", { headers: { origin: "https://evil.example" } }), e);
    expect(other.status).toBe(401);
    expect(other.headers.get("Access-Control-Allow-Origin")).toBeNull();
    expect(other.headers.get("Access-Control-Expose-Headers")).toBeNull();
    const any = await handle(
      from(freshIp(), null, "/", { headers: { origin: "https://any.example" } }),
      envWith({ ...rl, cors: { origins: "*" } }),
    );
    expect(any.headers.get("Access-Control-Allow-Origin")).toBe("*");
    expect(any.headers.get("Vary")).toBeNull();
  });

  it("the hono middleware: hono's cors() placed before it answers preflights and marks its 429s", async () => {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    app.use("*", cors({ origin: APP, exposeHeaders: ["RateLimit", "RateLimit-Policy", "Retry-After"] }));
    app.use("*", rateLimit({ limits: [{ limit: 1, window: "1m" }] }));
    app.get("*", (c) => c.text("ok"));
    const bindings = { LIMITER: env.LIMITER };
    const pre = await app.request(
      "/",
      { method: "OPTIONS", headers: { origin: APP, "access-control-request-method": "GET" } },
      bindings,
    );
    expect(pre.status).toBe(204);
    const key = freshKey();
    const get = () => app.request("/", { headers: { origin: APP, "x-api-key": key } }, bindings);
    expect((await get()).status).toBe(200);
    const refused = await get();
    expect(refused.status).toBe(429);
    expect(refused.headers.get("Access-Control-Allow-Origin")).toBe(APP);
    expect(refused.headers.get("Access-Control-Expose-Headers")).toMatch(/Retry-After/);
  });
});

describe("the admin API: an address's budgets as well as a key's", () => {
  const TOKEN = "s3cret-admin-token";
  const rl = {
    limits: [{ limit: 10, window: "1m" }],
    ip: { limits: [{ limit: 2, window: "1m" }] },
    anonymous: { limits: [{ limit: 1, window: "1m" }] },
    plans: [
      {
        name: "team",
        key_prefix: "team_",
        limits: [{ limit: 10, window: "1m" }],
        ip: { limits: [{ limit: 1, window: "1m" }] },
      },
    ],
    leases: false,
  };
  const e = () => envWith(rl, { ADMIN_TOKEN: TOKEN });
  const admin = (env: ReturnType<typeof e>, action: string, body: unknown) =>
    handle(
      new Request(`https://limiter.example/__limiter/${action}`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }),
      env,
    );

  it("status, reset and block accept {ip} (the address's ip budget, or a plan's own) and {anonymous}", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const env = e();
    const ip = freshIp();
    await handle(from(ip, freshKey()), env);
    await handle(from(ip, freshKey()), env);
    expect((await handle(from(ip, freshKey()), env)).status).toBe(429);
    const status = (await (await admin(env, "status", { ip })).json()) as {
      plan: string;
      limits: { remaining: number }[];
    };
    expect(status.plan).toBe("ip");
    expect(status.limits[0]?.remaining).toBe(0);
    // The mapped spelling names the same client.
    expect((await admin(env, "reset", { ip: `::ffff:${ip}` })).status).toBe(200);
    expect((await handle(from(ip, freshKey()), env)).status).toBe(200);

    // A plan's own ip budget.
    await handle(from(ip, freshKey("team_")), env);
    const team = (await (await admin(env, "status", { ip, plan: "team" })).json()) as {
      limits: { remaining: number }[];
    };
    expect(team.limits[0]?.remaining).toBe(0);

    // The anonymous budget of an address, blocked by an operator.
    expect((await admin(env, "block", { anonymous: ip, for: "1m" })).status).toBe(200);
    const blocked = await handle(from(ip, null), env);
    expect((await problemOf(blocked, 429)).detail).toMatch(/blocked/);
  });

  it("exactly one of key, ip, anonymous, guess and account; a bad address or a budget that does not exist is named", async () => {
    const env = e();
    expect((await problemOf(await admin(env, "status", {}), 400)).detail).toMatch(/^key: required/);
    expect((await problemOf(await admin(env, "status", { key: "k", ip: "192.0.2.1" }), 400)).detail).toBe(
      "key, ip: give one of key, ip, anonymous, guess, account",
    );
    expect((await problemOf(await admin(env, "status", { ip: "nope" }), 400)).detail).toBe(
      'ip: expected an IPv4 or IPv6 address, got "nope"',
    );
    expect((await problemOf(await admin(env, "status", { key: "k", plan: "team" }), 400)).detail).toMatch(
      /^plan: only with ip/,
    );
    const noIp = envWith({ limits: [{ limit: 1, window: "1m" }] }, { ADMIN_TOKEN: TOKEN });
    expect((await problemOf(await admin(noIp, "status", { ip: "192.0.2.1" }), 422)).detail).toMatch(
      /RATE_LIMIT\.ip is not set/,
    );
  });
});
