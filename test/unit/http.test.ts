// The edge's own answers: problem details, the refusal of a decision (429, or 503 when the limiter is
// unavailable), the 401 challenge, and where a request's path is read from.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import type { LimitResult, RateLimitResult } from "../../src/client/result.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig } from "../../src/config/types.ts";
import {
  clientSignal,
  HttpError,
  httpErrorOf,
  isWebSocketUpgrade,
  normalizedPath,
  pathnameOf,
  problem,
  problemFor,
  refusal,
  unknownKey,
  verifyFailed,
} from "../../src/pipeline/http.ts";

const limit = (over: Partial<LimitResult> = {}): LimitResult => ({
  name: "per-minute",
  limit: 10,
  windowMs: 60_000,
  remaining: 0,
  resetMs: 1500,
  exceeded: true,
  ...over,
});

function result(over: Partial<RateLimitResult> = {}): RateLimitResult {
  return {
    allowed: false,
    reason: "over_limit",
    plan: "default",
    route: null,
    refusedBy: "key",
    cost: 1,
    retryAfterMs: 1500,
    limits: [limit(), limit({ name: "per-second", exceeded: false })],
    at: 1_000,
    handle: null,
    ...over,
  };
}

async function body(res: Response): Promise<Record<string, unknown>> {
  return (await res.json()) as Record<string, unknown>;
}

describe("problem / HttpError", () => {
  it("is RFC 9457 JSON, never cached, with the extra fields and headers given", async () => {
    const res = problem(418, "Teapot", "short and stout", { spout: 1 }, { "x-a": "b" });
    expect(res.status).toBe(418);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("x-a")).toBe("b");
    expect(await body(res)).toEqual({
      type: "about:blank",
      title: "Teapot",
      status: 418,
      detail: "short and stout",
      spout: 1,
    });
    const e = new HttpError(400, "Bad Request", "no", { headers: { Allow: "POST" }, extra: { field: "key" } });
    const r = e.toResponse();
    expect([r.status, r.headers.get("allow")]).toEqual([400, "POST"]);
    expect(await body(r)).toMatchObject({ title: "Bad Request", detail: "no", field: "key" });
    expect(new HttpError(401, "U", "d").toResponse().headers.has("allow")).toBe(false);
  });
});

describe("refusal", () => {
  it("for want of credits: 402 (or the plan's 429) with the balance and the cost; a wait only when a refill covers it", async () => {
    const never = result({
      reason: "credits",
      cost: 3,
      retryAfterMs: Number.POSITIVE_INFINITY,
      credits: { balance: 1, refuseWith: 402 },
    });
    const res = refusal(never, "draft-11");
    expect(res.status).toBe(402);
    expect(res.headers.get("Retry-After")).toBeNull();
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60, "per-second";q=10;w=60');
    expect(await body(res)).toEqual({
      type: "about:blank",
      title: "Payment Required",
      status: 402,
      detail: "This API key's credits cannot cover this request (cost 3, balance 1); add credits to continue.",
      reason: "credits",
      balance: 1,
      cost: 3,
      retry_after: null,
      retry_after_ms: null,
    });
    const refill = result({ reason: "credits", retryAfterMs: 90_500, credits: { balance: null, refuseWith: 429 } });
    const r = refusal(refill, "draft-11");
    expect(r.status).toBe(429);
    expect(r.headers.get("Retry-After")).toBe("91");
    expect(await body(r)).toEqual({
      type: "about:blank",
      title: "Too Many Requests",
      status: 429,
      detail: "This API key's credits cannot cover this request (cost 1); they are refilled in 91 s, or add credits.",
      reason: "credits",
      balance: null,
      cost: 1,
      retry_after: 91,
      retry_after_ms: 90_500,
    });
    // A result without its plan's credits (built by hand) is refused as 402.
    expect(refusal(result({ reason: "credits" })).status).toBe(402);
  });

  it("over a limit: 429 with the decision's headers, the refusing limits and the exact wait", async () => {
    const res = refusal(result(), "draft-11");
    expect(res.status).toBe(429);
    expect(res.headers.get("Retry-After")).toBe("2");
    expect(res.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60, "per-second";q=10;w=60');
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(await body(res)).toEqual({
      type: "about:blank",
      title: "Too Many Requests",
      status: 429,
      detail: "Rate limit exceeded (per-minute); retry after 2 s.",
      reason: "over_limit",
      violated_policies: ["per-minute"],
      retry_after: 2,
      retry_after_ms: 1500,
    });
  });

  it("a refusal made alone (failure_mode local) says so, naming the limits that refused it, if any", async () => {
    const alone = await body(refusal(result({ reason: "limiter_fallback", retryAfterMs: 1500 }), "draft-11"));
    expect(alone.detail).toBe(
      "The rate limiter is deciding without this key's store, at a share of its limits (per-minute exceeded); retry after 2 s.",
    );
    expect(alone).toMatchObject({ status: 429, reason: "limiter_fallback", retry_after: 2 });
    const slots = await body(
      refusal(result({ reason: "limiter_fallback", retryAfterMs: 1000, limits: [limit({ exceeded: false })] })),
    );
    expect(slots.detail).toBe(
      "The rate limiter is deciding without this key's store, at a share of its limits; retry after 1 s.",
    );
  });

  it("too costly: never, no wait in the body", async () => {
    const b = await body(refusal(result({ reason: "too_costly", retryAfterMs: Number.POSITIVE_INFINITY }), "draft-11"));
    expect(b).toMatchObject({
      detail: "This request costs more than the per-minute limit allows; it can never pass.",
      retry_after: null,
      retry_after_ms: null,
    });
  });

  it("blocked: says an operator blocked the key, until when", async () => {
    const b = await body(
      refusal(result({ reason: "blocked", retryAfterMs: 90_001, limits: [limit({ exceeded: false })] }), "draft-11"),
    );
    expect(b).toMatchObject({
      detail: "This API key is blocked by an operator; retry after 91 s.",
      violated_policies: [],
      retry_after: 91,
    });
  });

  it("penalty: says the key is blocked for a while after repeated refusals, until when", async () => {
    const b = await body(
      refusal(result({ reason: "penalty", retryAfterMs: 600_000, limits: [limit({ exceeded: false })] }), "draft-11"),
    );
    expect(b).toMatchObject({
      detail: "This API key is blocked for a while after repeated requests over its limit; retry after 600 s.",
      reason: "penalty",
      retry_after: 600,
    });
  });

  it("a block or a penalty names what the refusing budget holds: the key, its client address or its account", async () => {
    const detail = async (reason: "blocked" | "penalty", refusedBy: "key" | "ip" | "account") =>
      (
        await body(
          refusal(
            result({ reason, refusedBy, retryAfterMs: 60_000, limits: [limit({ exceeded: false })] }),
            "draft-11",
          ),
        )
      ).detail;
    expect(await detail("penalty", "ip")).toBe(
      "This client address is blocked for a while after repeated requests over its limit; retry after 60 s.",
    );
    expect(await detail("penalty", "account")).toBe(
      "This account is blocked for a while after repeated requests over its limit; retry after 60 s.",
    );
    expect(await detail("blocked", "ip")).toBe("This client address is blocked by an operator; retry after 60 s.");
    expect(await detail("blocked", "key")).toBe("This API key is blocked by an operator; retry after 60 s.");
  });

  it.each([
    ["over_limit", 1500, "Rate limit exceeded (per-minute); retry after 2 s."],
    ["cached_denial", 1500, "Rate limit exceeded (per-minute); retry after 2 s."],
    [
      "too_costly",
      Number.POSITIVE_INFINITY,
      "This request costs more than the per-minute limit allows; it can never pass.",
    ],
    ["blocked", 90_001, "This API key is blocked by an operator; retry after 91 s."],
    [
      "penalty",
      600_000,
      "This API key is blocked for a while after repeated requests over its limit; retry after 600 s.",
    ],
    [
      "concurrency",
      1000,
      "This API key already has as many requests in flight as its concurrency allows; retry after 1 s.",
    ],
    [
      "limiter_fallback",
      1500,
      "The rate limiter is deciding without this key's store, at a share of its limits (per-minute exceeded); retry after 2 s.",
    ],
    [
      "credits",
      90_500,
      "This API key's credits cannot cover this request (cost 1); they are refilled in 91 s, or add credits.",
    ],
    ["limiter_timeout", 1000, "The rate limiter is unavailable; retry shortly."],
    ["limiter_error", 1000, "The rate limiter is unavailable; retry shortly."],
  ] as const)(
    "the %s refusal's detail says what refused it and how long to wait",
    async (reason, retryAfterMs, detail) => {
      // A concurrency refusal fits its limits (no limit is exceeded): its words must not depend on one being listed.
      const fits = reason === "concurrency" || reason === "blocked" || reason === "penalty";
      const r = result({ reason, retryAfterMs, ...(fits ? { limits: [limit({ exceeded: false })] } : {}) });
      expect((await body(refusal(r))).detail).toBe(detail);
    },
  );

  it("a refusal that names no limit says so without empty parentheses", async () => {
    const r = result({ reason: "over_limit", retryAfterMs: 1500, limits: [limit({ exceeded: false })] });
    expect((await body(refusal(r))).detail).toBe("Rate limit exceeded; retry after 2 s.");
  });

  it("in the default form (draft-11) unless told; a route's refusal names the route", async () => {
    const res = refusal(result({ route: "search" }));
    expect(res.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60, "per-second";q=10;w=60');
    expect(refusal(result(), "draft-6").headers.get("RateLimit-Limit")).toBe("10");
    expect(await body(res)).toMatchObject({ route: "search" });
    expect(await body(refusal(result()))).not.toHaveProperty("route");
  });

  it("the limiter unavailable (failing closed): 503 with Retry-After: 1", async () => {
    for (const reason of ["limiter_timeout", "limiter_error"] as const) {
      const res = refusal(result({ reason }), "draft-11");
      expect(res.status).toBe(503);
      expect((await body(refusal(result({ reason })))).title).toBe("Service Unavailable");
      expect(res.headers.get("Retry-After")).toBe("1");
      expect(res.headers.has("RateLimit-Policy")).toBe(false);
      expect((await body(res)).detail).toBe("The rate limiter is unavailable; retry shortly.");
    }
  });
});

describe("normalizedPath", () => {
  const config = parseLimiterConfig({ limits: [{ limit: 1, window: "1s" }] }, "t") as LimiterConfig;

  it("is the path as rules match it; a path the normaliser refuses is a LimiterError malformed_path", () => {
    expect(normalizedPath("/%61pi/x", config)).toBe("/api/x");
    let caught: unknown;
    try {
      normalizedPath("/a%2Fb", config);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(LimiterError);
    expect((caught as LimiterError).code).toBe("malformed_path");
    expect(httpErrorOf(caught as LimiterError).status).toBe(400);
  });
});

describe("httpErrorOf / problemFor", () => {
  it("each code's status and title; a Bearer challenge only on a 401 and only when Bearer keys are read", async () => {
    const of = (code: LimiterError["code"], bearer: boolean) => {
      const e = httpErrorOf(new LimiterError(code, "why"), bearer);
      return [e.status, e.title, e.message, e.headers["WWW-Authenticate"] ?? null];
    };
    expect(of("malformed_key", true)).toEqual([400, "Malformed API key", "why", null]);
    expect(of("no_client_address", true)).toEqual([400, "Bad Request", "why", null]);
    for (const code of ["key_required", "invalid_key", "no_plan", "unknown_key"] as const) {
      expect(of(code, true)).toEqual([401, "Unauthorized", "why", 'Bearer realm="api"']);
      expect(of(code, false)).toEqual([401, "Unauthorized", "why", null]);
    }
    const res = problemFor(new LimiterError("no_plan", "This API key matches no plan."));
    expect([res.status, res.headers.get("content-type")]).toEqual([401, "application/problem+json"]);
    // No challenge unless asked for: the default is a limiter that reads no Bearer keys.
    expect(res.headers.has("WWW-Authenticate")).toBe(false);
    expect(httpErrorOf(new LimiterError("key_required", "k")).headers).toEqual({});
    expect(problemFor(new LimiterError("key_required", "k"), true).headers.get("WWW-Authenticate")).toBe(
      'Bearer realm="api"',
    );
    expect(await res.json()).toEqual({
      type: "about:blank",
      title: "Unauthorized",
      status: 401,
      detail: "This API key matches no plan.",
    });
  });
});

describe("the verify hook's problems", () => {
  it("unknown_key: 401 that names no key; verify_failed: 503 with Retry-After: 1 and no challenge", async () => {
    const unknown = unknownKey();
    expect([unknown.code, unknown.message]).toEqual(["unknown_key", "This API key is not known."]);
    const failed = verifyFailed();
    expect([failed.code, failed.message]).toEqual([
      "verify_failed",
      "The API key could not be verified now; retry shortly.",
    ]);
    const res = problemFor(failed, true);
    expect([res.status, res.headers.get("Retry-After"), res.headers.has("WWW-Authenticate")]).toEqual([
      503,
      "1",
      false,
    ]);
    expect(await res.json()).toEqual({
      type: "about:blank",
      title: "Service Unavailable",
      status: 503,
      detail: "The API key could not be verified now; retry shortly.",
    });
    expect(httpErrorOf(unknown, false).headers).toEqual({});
  });
});

describe("clientSignal", () => {
  it("is the request's own signal (workerd aborts it when the client goes away), or null without one", () => {
    const client = new AbortController();
    const request = new Request("https://api.example/x", { signal: client.signal });
    const signal = clientSignal(request);
    expect(signal?.aborted).toBe(false);
    client.abort();
    expect(signal?.aborted).toBe(true);
    expect(clientSignal({} as Request)).toBeNull();
  });
});

describe("isWebSocketUpgrade", () => {
  const req = (method: string, upgrade?: string) =>
    new Request("https://api.example/ws", { method, headers: upgrade === undefined ? {} : { upgrade } });

  it("is a GET whose Upgrade field is websocket, in any case; any other method or protocol is an ordinary request", () => {
    expect(isWebSocketUpgrade(req("GET", "websocket"))).toBe(true);
    expect(isWebSocketUpgrade(req("GET", "WebSocket"))).toBe(true);
    expect(isWebSocketUpgrade(req("GET", " websocket "))).toBe(true);
    for (const method of ["POST", "PUT", "HEAD", "OPTIONS"])
      expect(isWebSocketUpgrade(req(method, "websocket"))).toBe(false);
    expect(isWebSocketUpgrade(req("GET"))).toBe(false);
    expect(isWebSocketUpgrade(req("GET", "h2c"))).toBe(false);
    expect(isWebSocketUpgrade(req("GET", "websocket2"))).toBe(false);
  });
});

describe("pathnameOf", () => {
  /** `pathnameOf(url)`, and how many URLs it parsed on the way (none is the point of it). */
  function counted(url: string): { path: string; parsed: number } {
    const Real = globalThis.URL;
    let parsed = 0;
    globalThis.URL = class extends Real {
      constructor(...args: ConstructorParameters<typeof URL>) {
        super(...args);
        parsed++;
      }
    };
    try {
      return { path: pathnameOf(url), parsed };
    } finally {
      globalThis.URL = Real;
    }
  }

  it("reads what new URL(url).pathname reads from any request's url, without parsing it", () => {
    fc.assert(
      fc.property(fc.webUrl({ withQueryParameters: true, withFragments: true }), (u) => {
        const url = new Request(u).url;
        expect(counted(url)).toEqual({ path: new URL(url).pathname, parsed: 0 });
      }),
      { numRuns: 500 },
    );
  });

  it("cuts the path at its query or fragment, and parses what no runtime serialises", () => {
    expect(pathnameOf("https://user:pw@example.com:8443/a/b%2Fc?x=/y#z")).toBe("/a/b%2Fc");
    expect(pathnameOf("http://h/a#b?c")).toBe("/a");
    expect(pathnameOf("http://h/?q#f")).toBe("/");
    // Not serialised by a runtime, so parsed: a query or fragment before any "/", no path at all, no "://".
    expect(counted("http://h?x=/y")).toEqual({ path: "/", parsed: 1 });
    expect(counted("http://h#/y")).toEqual({ path: "/", parsed: 1 });
    expect(counted("http://h")).toEqual({ path: "/", parsed: 1 });
    expect(counted("mailto:a@b/c")).toEqual({ path: "a@b/c", parsed: 1 });
  });
});
