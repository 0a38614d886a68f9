// The Worker end to end against the real Node origin over HTTP: docs/http.md's table, keys, plans,
// route costs, shadow mode, config errors, failure modes and the deny cache.
import { exports } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MAX_SENDS } from "../../src/client/policy.ts";
import type { RateLimitResult } from "../../src/client/result.ts";
import { problemOf } from "../support/problem.ts";
import {
  arrivalsFor,
  countingLimiter,
  decision,
  envWith,
  fakeLimiter,
  freshKey,
  handle,
  objectError,
  originUrl,
  request,
} from "./helpers.ts";

afterEach(() => {
  vi.restoreAllMocks();
});

const oneLimit = (limit: number, window = "1m") => ({ limits: [{ limit, window }] });

describe("the HTTP table (wrangler.toml's config, through the deployed entry point)", () => {
  it("allowed: the origin's response plus RateLimit-Policy and RateLimit", async () => {
    const key = freshKey();
    const response = await exports.default.fetch(request(key, "/v1/items?page=2"));
    expect(response.status).toBe(200);
    expect(response.headers.get("RateLimit-Policy")).toBe('"per-second";q=100;w=1, "per-minute";q=1000;w=60');
    expect(response.headers.get("RateLimit")).toBe('"per-second";r=99;t=1, "per-minute";r=999;t=60');
    const echo = (await response.json()) as { method: string; url: string };
    expect(echo).toMatchObject({ method: "GET", url: "/v1/items?page=2" });
    expect(await arrivalsFor(key)).toHaveLength(1);
  });

  it("over a limit: 429, problem JSON, Retry-After in whole seconds, headers; the origin never sees it", async () => {
    const key = freshKey("test_");
    for (let i = 0; i < 10; i++) expect((await exports.default.fetch(request(key))).status).toBe(200);
    const response = await exports.default.fetch(request(key));
    expect(response.status).toBe(429);
    const retryAfter = Number(response.headers.get("Retry-After"));
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(response.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60');
    expect(response.headers.get("RateLimit")).toBe(`"per-minute";r=0;t=${retryAfter}`);
    const body = await problemOf(response, 429);
    expect(body).toMatchObject({
      type: "about:blank",
      title: "Too Many Requests",
      status: 429,
      violated_policies: ["per-minute"],
      retry_after: retryAfter,
    });
    expect(Math.ceil((body.retry_after_ms as number) / 1000)).toBe(retryAfter);
    expect(await arrivalsFor(key)).toHaveLength(10);
  });

  it("no key: 401 with problem JSON and WWW-Authenticate", async () => {
    const response = await exports.default.fetch(request(null));
    expect(response.status).toBe(401);
    expect(response.headers.get("WWW-Authenticate")).toBe('Bearer realm="api"');
    expect(await problemOf(response, 401)).toMatchObject({ status: 401, title: "Unauthorized" });
  });

  it.each([
    ["too long", "k".repeat(257)],
    ["a space", "abc def"],
    ["a tab", "abc\tdef"],
    ["a control character", "abc\u0001def"],
    ["non-ASCII (sent as UTF-8 bytes)", "clé"],
    ["a repeated header", "a, b"],
    ["a repeated header with an empty line (trimmed to a trailing comma)", "abc, "],
    ["a comma", "abc,def"],
  ])("malformed key (%s): 400 with problem JSON", async (_, key) => {
    const r = new Request("https://limiter.example/", { headers: [["x-api-key", key]] });
    const response = await exports.default.fetch(r);
    expect(response.status).toBe(400);
    expect(await problemOf(response, 400)).toMatchObject({ status: 400, title: "Malformed API key" });
  });

  it("a key of exactly max_length is accepted", async () => {
    const key = `k_${"x".repeat(254)}`;
    expect((await exports.default.fetch(request(key))).status).toBe(200);
  });
});

describe("key sources", () => {
  const config = { ...oneLimit(5), key: { header: "x-key", bearer: true, query: "api_key" } };

  it("reads the header, a Bearer token or the query parameter as the same key", async () => {
    const key = freshKey();
    const e = envWith(config);
    const viaHeader = await handle(new Request("https://l.example/", { headers: { "x-key": key } }), e);
    const viaBearer = await handle(
      new Request("https://l.example/", { headers: { authorization: `Bearer ${key}` } }),
      e,
    );
    const viaQuery = await handle(new Request(`https://l.example/?api_key=${key}`), e);
    const both = await handle(
      new Request("https://l.example/", { headers: { "x-key": key, authorization: `bearer ${key}` } }),
      e,
    );
    expect([viaHeader, viaBearer, viaQuery, both].map((r) => r.headers.get("RateLimit"))).toEqual([
      '"per-minute";r=4;t=60',
      '"per-minute";r=3;t=60',
      '"per-minute";r=2;t=60',
      '"per-minute";r=1;t=60',
    ]);
  });

  it("two sources with different keys: 400, never a guess", async () => {
    const response = await handle(
      new Request("https://l.example/?api_key=b", { headers: { "x-key": "a" } }),
      envWith(config),
    );
    expect(response.status).toBe(400);
    expect((await problemOf(response, 400)).detail).toBe("x-key and ?api_key carry different keys; send one key");
  });

  it("key.pattern: keys that do not match the whole pattern get 401 and never reach an object", async () => {
    const limiter = countingLimiter();
    const e = envWith({ ...oneLimit(5), key: { pattern: "live_[0-9a-f]{8}" } }, { LIMITER: limiter.namespace });
    expect((await handle(request("live_0123abcd"), e)).status).toBe(200);
    expect(limiter.calls()).toBe(1);
    for (const bad of ["live_0123abcd0", "xlive_0123abcd", "live_0123ABCD", "random-flood-key"]) {
      const response = await handle(request(bad), e);
      expect(response.status).toBe(401);
      expect((await problemOf(response, 401)).detail).toBe("This API key is not valid.");
    }
    expect(limiter.calls()).toBe(1);
  });

  it("ignores sources that are switched off", async () => {
    const e = envWith({ ...oneLimit(5), key: { header: false, bearer: false, query: "api_key" } });
    const response = await handle(new Request("https://l.example/", { headers: { "x-api-key": freshKey() } }), e);
    expect(response.status).toBe(401);
    expect(response.headers.get("WWW-Authenticate")).toBeNull();
  });
});

describe("plans", () => {
  const config = {
    ...oneLimit(3),
    plans: [
      { name: "test", key_prefix: "test_", limits: [{ limit: 1, window: "1m" }] },
      { name: "live", key_prefix: "live_", unlimited: true },
    ],
  };

  it("chooses the limits by key prefix, and the default for other keys", async () => {
    const e = envWith(config);
    const test = await handle(request(freshKey("test_")), e);
    expect(test.headers.get("RateLimit-Policy")).toBe('"per-minute";q=1;w=60');
    const other = await handle(request(freshKey("other_")), e);
    expect(other.headers.get("RateLimit-Policy")).toBe('"per-minute";q=3;w=60');
  });

  it("unlimited keys are proxied without touching an object and carry no headers", async () => {
    const limiter = countingLimiter();
    const e = envWith(config, { LIMITER: limiter.namespace });
    const key = freshKey("live_");
    for (let i = 0; i < 5; i++) {
      const response = await handle(request(key), e);
      expect(response.status).toBe(200);
      expect(response.headers.get("RateLimit")).toBeNull();
    }
    expect(limiter.calls()).toBe(0);
    expect(await arrivalsFor(key)).toHaveLength(5);
  });

  it("without default limits, a key matching no plan gets 401", async () => {
    const e = envWith({ plans: config.plans });
    const response = await handle(request(freshKey("other_")), e);
    expect(response.status).toBe(401);
    expect((await problemOf(response, 401)).detail).toBe("This API key matches no plan.");
  });

  it("requests without a key use the anonymous plan, one bucket per client IP", async () => {
    const e = envWith({ ...config, anonymous: oneLimit(2) });
    const ip = `192.0.2.${Math.floor(Math.random() * 250) + 1}`;
    const from = (address: string) =>
      handle(new Request("https://l.example/", { headers: { "cf-connecting-ip": address } }), e);
    expect((await from(ip)).status).toBe(200);
    expect((await from(ip)).status).toBe(200);
    expect((await from(ip)).status).toBe(429);
    expect((await from(`2001:db8::${crypto.randomUUID().slice(0, 4)}`)).status).toBe(200);
  });
});

describe("route cost", () => {
  const config = {
    ...oneLimit(10),
    costs: [
      { path: "/health", cost: 0 },
      { method: "POST", path: "/v1/search", cost: 4 },
      { path: "/v1/export", cost: 11 },
    ],
  };

  it("weighs requests by method and path prefix", async () => {
    const e = envWith(config);
    const key = freshKey();
    const search = () => handle(request(key, "/v1/search/deep", { method: "POST", body: "{}" }), e);
    expect((await search()).headers.get("RateLimit")).toBe('"per-minute";r=6;t=60');
    // GET is not the POST rule: cost 1.
    expect((await handle(request(key, "/v1/search"), e)).headers.get("RateLimit")).toBe('"per-minute";r=5;t=60');
    expect((await search()).status).toBe(200);
    const refused = await search();
    expect(refused.status).toBe(429);
    expect(refused.headers.get("RateLimit")).toMatch(/^"per-minute";r=1;t=\d+$/);
    expect((await handle(request(key, "/v1/other"), e)).status).toBe(200);
  });

  it("cost 0 is not limited: no object, no headers, no key needed", async () => {
    const limiter = countingLimiter();
    const response = await handle(request(null, "/health/ready"), envWith(config, { LIMITER: limiter.namespace }));
    expect(response.status).toBe(200);
    expect(response.headers.get("RateLimit-Policy")).toBeNull();
    expect(limiter.calls()).toBe(0);
  });

  it("a cost above a limit can never pass: 429 without Retry-After, without an object call", async () => {
    const limiter = countingLimiter();
    const response = await handle(request(freshKey(), "/v1/export"), envWith(config, { LIMITER: limiter.namespace }));
    expect(response.status).toBe(429);
    expect(response.headers.get("Retry-After")).toBeNull();
    expect(await problemOf(response, 429)).toMatchObject({ violated_policies: ["per-minute"], retry_after: null });
    expect(limiter.calls()).toBe(0);
  });
});

describe("shadow mode", () => {
  it("decides, logs and adds headers, but never rejects: the reason is shadow, the key only its key_id", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const e = envWith({ ...oneLimit(2), shadow: true });
    const key = freshKey();
    const responses = [];
    const results: RateLimitResult[] = [];
    for (let i = 0; i < 4; i++) responses.push(await handle(request(key), e, { onDecision: (r) => results.push(r) }));
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(responses[3]?.headers.get("RateLimit")).toMatch(/^"per-minute";r=0;t=\d+$/);
    expect(responses[3]?.headers.has("Retry-After")).toBe(false);
    expect(await arrivalsFor(key)).toHaveLength(4);
    // Served, and said why: the limits refused the last two.
    expect(results.map((r) => [r.allowed, r.reason])).toEqual([
      [true, "granted"],
      [true, "granted"],
      [true, "shadow"],
      [true, "shadow"],
    ]);
    expect(results[3]?.limits[0]?.exceeded).toBe(true);
    // One line per key and second, like denials; the key appears only as its key_id.
    const lines = log.mock.calls.map((c) => JSON.parse(String(c[0]))).filter((l) => l.event === "shadow_deny");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ reason: "shadow", plan: "default", cost: 1, violated: ["per-minute"] });
    expect(lines[0].key_id).toMatch(/^[0-9a-f]{12}$/);
    expect(JSON.stringify(log.mock.calls)).not.toContain(key);
  });
});

describe("refund and header forms in the proxy", () => {
  it("responses with a status in refund.status give their request's units back; others are counted", async () => {
    const e = envWith({ ...oneLimit(2), leases: false, refund: { status: [503] } });
    const key = freshKey();
    for (let i = 0; i < 4; i++) {
      const res = await handle(request(key, "/__special/status/503"), e);
      expect(res.status).toBe(503);
      expect(res.headers.get("RateLimit")).toMatch(/^"per-minute";r=1;/); // counted when sent, refunded after
    }
    expect((await handle(request(key, "/__special/status/500"), e)).status).toBe(500);
    expect((await handle(request(key), e)).status).toBe(200);
    expect((await handle(request(key), e)).status).toBe(429);
  });

  it("headers = draft-6 and legacy replace the draft-11 fields", async () => {
    const key = freshKey();
    const six = await handle(request(key), envWith({ ...oneLimit(5), headers: "draft-6" }));
    expect(six.headers.get("RateLimit-Policy")).toBe("5;w=60");
    expect(six.headers.get("RateLimit-Remaining")).toBe("4");
    expect(six.headers.has("RateLimit")).toBe(false);
    const legacy = await handle(request(freshKey()), envWith({ ...oneLimit(5), headers: "legacy" }));
    expect(legacy.headers.get("X-RateLimit-Limit")).toBe("5");
    expect(legacy.headers.has("RateLimit-Policy")).toBe(false);
  });
});

describe("rules match the path the origin will see", () => {
  const costs = {
    limits: [{ limit: 10, window: "1m" }],
    costs: [
      { path: "/health", cost: 0 },
      { method: "POST", path: "/v1/expensive", cost: 5 },
    ],
  };

  it("no spelling of a costly route rides the free /health rule, with or without a key", async () => {
    const e = envWith(costs);
    const probe = crypto.randomUUID();
    for (const path of ["/health%2F..%2Fv1/expensive", "/health/..;/v1/expensive", "/health%5C..%5Cv1/expensive"]) {
      const res = await handle(request(null, `${path}?probe=${probe}`, { method: "POST" }), e);
      expect(res.status, path).toBe(400);
    }
    // Resolved by the URL parser before the Worker sees it: /v1/expensive, which needs a key.
    expect((await handle(request(null, `/health/../v1/expensive?probe=${probe}`, { method: "POST" }), e)).status).toBe(
      401,
    );
    const all = (await (await fetch(`${originUrl}/__arrivals`)).json()) as { url: string }[];
    expect(all.filter((a) => a.url.includes(probe))).toEqual([]);
  });

  it("an equivalent spelling is charged as the route it names, and reaches the origin as that route", async () => {
    const e = envWith(costs);
    const key = freshKey();
    const res = await handle(request(key, "/%76%31/expensive", { method: "POST" }), e);
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=5;t=60');
    expect((await arrivalsFor(key)).map((a) => a.url)).toEqual(["/v1/expensive"]);
  });

  it("paths.escaped_slashes = unescape decodes them and matches what they name", async () => {
    const e = envWith({ ...costs, paths: { escaped_slashes: "unescape" } });
    const key = freshKey();
    const res = await handle(request(key, "/health%2F..%2Fv1/expensive", { method: "POST" }), e);
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=5;t=60');
    expect((await arrivalsFor(key)).map((a) => a.url)).toEqual(["/v1/expensive"]);
  });
});

describe("configuration errors", () => {
  const bad: [field: string, rateLimit: unknown, origin?: unknown][] = [
    ["ORIGIN", oneLimit(1), "not a url"],
    ["ORIGIN", oneLimit(1), undefined],
    ["RATE_LIMIT", undefined],
    ["RATE_LIMIT", "{not json"],
    ["RATE_LIMIT.limits", {}],
    ["RATE_LIMIT.limits[0].limit", { limits: [{ limit: 0, window: "1s" }] }],
    ["RATE_LIMIT.limits[0].window", { limits: [{ limit: 1, window: "1 sec" }] }],
    ["RATE_LIMIT.plans[0].key_prefix", { plans: [{ name: "p", limits: [{ limit: 1, window: "1s" }] }] }],
    ["RATE_LIMIT.anonymous.limits", { ...oneLimit(1), anonymous: {} }],
    ["RATE_LIMIT.costs[0].cost", { ...oneLimit(1), costs: [{ path: "/", cost: -1 }] }],
    ["RATE_LIMIT.key.max_length", { ...oneLimit(1), key: { max_length: 0 } }],
    ["RATE_LIMIT.failure_mode", { ...oneLimit(1), failure_mode: "sometimes" }],
    ["RATE_LIMIT.shadow", { ...oneLimit(1), shadow: "yes" }],
    ["RATE_LIMIT.origin_timeout", { ...oneLimit(1), origin_timeout: "soon" }],
    ["RATE_LIMIT.limit", { limit: 1 }],
  ];

  it.each(bad)("%s: every request gets 500 naming the field; logged once; nothing proxied", async (field, rl, ...o) => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const e = envWith(rl, o.length > 0 ? { ORIGIN: o[0] } : {});
    const key = freshKey();
    for (let i = 0; i < 2; i++) {
      const response = await handle(request(key), e);
      expect(response.status).toBe(500);
      const body = await problemOf(response, 500);
      expect(body.title).toBe("Rate limiter misconfigured");
      expect(String(body.detail).startsWith(`${field}:`) || String(body.detail).startsWith(`${field} `)).toBe(true);
    }
    expect(error).toHaveBeenCalledTimes(1);
    expect(await arrivalsFor(key)).toEqual([]);
  });

  it("accepts every var as a JSON string", async () => {
    const e = envWith(JSON.stringify(oneLimit(7)), { ORIGIN: JSON.stringify(envWith(null).ORIGIN) });
    const response = await handle(request(freshKey()), e);
    expect(response.status).toBe(200);
    expect(response.headers.get("RateLimit-Policy")).toBe('"per-minute";q=7;w=60');
  });
});

describe("failure modes (the object throws)", () => {
  it("closed (default): 503 with Retry-After 1, nothing proxied, logged", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const limiter = fakeLimiter(() => Promise.reject(objectError({})));
    const key = freshKey();
    const response = await handle(request(key), envWith(oneLimit(5), { LIMITER: limiter.namespace }));
    expect(response.status).toBe(503);
    expect(response.headers.get("Retry-After")).toBe("1");
    expect(await problemOf(response, 503)).toMatchObject({ status: 503 });
    expect(await arrivalsFor(key)).toEqual([]);
    // Sent again with its id after each failure that may have been applied (src/client/policy.ts, `callOnce`).
    expect(limiter.calls()).toBe(MAX_SENDS);
    const lines = error.mock.calls.map((c) => JSON.parse(String(c[0])) as { event: string });
    expect(lines.find((l) => l.event === "limiter_unavailable")).toMatchObject({ failure_mode: "closed" });
  });

  it("open: proxied without limit headers, and logged", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const limiter = fakeLimiter(() => Promise.reject(objectError({ overloaded: true })));
    const key = freshKey();
    const e = envWith({ ...oneLimit(5), failure_mode: "open" }, { LIMITER: limiter.namespace });
    const response = await handle(request(key), e);
    expect(response.status).toBe(200);
    expect(response.headers.get("RateLimit")).toBeNull();
    expect(await arrivalsFor(key)).toHaveLength(1);
    expect(JSON.parse(String(error.mock.calls[0]?.[0]))).toMatchObject({
      event: "limiter_unavailable",
      failure_mode: "open",
      overloaded: true,
    });
  });

  it.each([
    ["retryable", { retryable: true }, 2, 200],
    ["an object reset", { durableObjectReset: true }, 2, 200],
    ["unmarked", { retryable: false }, 2, 200],
    ["retryable but overloaded", { retryable: true, overloaded: true }, 1, 503],
    ["the object's own (remote)", { remote: true }, 1, 503],
  ])(
    "sends the call again, with its id, when the failure is %s and may have been applied",
    async (_, flags, calls, status) => {
      vi.spyOn(console, "error").mockImplementation(() => {});
      const ok = decision({ allowed: true, limits: [{ remaining: 4, resetMs: 60_000, exceeded: false }] });
      const limiter = fakeLimiter((call) => (call === 1 ? Promise.reject(objectError(flags)) : Promise.resolve(ok)));
      const response = await handle(request(freshKey()), envWith(oneLimit(5), { LIMITER: limiter.namespace }));
      expect(response.status).toBe(status);
      expect(limiter.calls()).toBe(calls);
    },
  );

  it("a call whose every send fails ends in the failure mode", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const limiter = fakeLimiter(() => Promise.reject(objectError({ retryable: true })));
    const response = await handle(request(freshKey()), envWith(oneLimit(5), { LIMITER: limiter.namespace }));
    expect(response.status).toBe(503);
    expect(limiter.calls()).toBe(MAX_SENDS);
  });
});

describe("the deny cache", () => {
  it("answers a blocked key locally, and only with what the object itself would answer", async () => {
    const limiter = countingLimiter();
    const rl = { limits: [{ limit: 3, window: "1m" }], costs: [{ path: "/heavy", cost: 2 }] };
    const e = envWith(rl, { LIMITER: limiter.namespace });
    const key = freshKey();
    for (let i = 0; i < 3; i++) expect((await handle(request(key), e)).status).toBe(200);
    // The third grant used the limit up, so the object already said "blocked until T".
    const calls = limiter.calls();
    expect(calls).toBe(3);

    // Cost 1 is answered from the cache, no object call, with the object's headers and retry time.
    const cached = await handle(request(key), e);
    expect(cached.status).toBe(429);
    expect(limiter.calls()).toBe(calls);
    expect(cached.headers.get("RateLimit-Policy")).toBe('"per-minute";q=3;w=60');
    const retryAfter = Number(cached.headers.get("Retry-After"));
    expect(cached.headers.get("RateLimit")).toBe(`"per-minute";r=0;t=${retryAfter}`);
    expect((await problemOf(cached, 429)).violated_policies).toEqual(["per-minute"]);

    // A cost of 2 has not been asked yet: the object decides it once, then the cache knows it too.
    expect((await handle(request(key, "/heavy"), e)).status).toBe(429);
    expect(limiter.calls()).toBe(calls + 1);
    expect((await handle(request(key, "/heavy"), e)).status).toBe(429);
    expect(limiter.calls()).toBe(calls + 1);

    // The object agrees with every answer the cache gave: asked now (later than the cache was), it refuses.
    const direct = await envWith(rl)
      .LIMITER.getByName(`key:${key}`)
      .take([{ limit: 3, windowMs: 60_000, tickMs: 1 }], { cost: 1 });
    expect(direct.allowed).toBe(false);
    expect(await arrivalsFor(key)).toHaveLength(3);
  });

  it("is not used in shadow mode", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const limiter = countingLimiter();
    const e = envWith({ ...oneLimit(1), shadow: true }, { LIMITER: limiter.namespace });
    const key = freshKey();
    for (let i = 0; i < 3; i++) expect((await handle(request(key), e)).status).toBe(200);
    expect(limiter.calls()).toBe(3);
  });
});
