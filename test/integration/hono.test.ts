// The hono middleware inside workerd against the real object: what the handler and the client see,
// keys, costs, skip, refund, custom denials, and the app's own Env kept.
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { describe, expect, it, vi } from "vitest";
import { type RateLimitVariables, rateLimit } from "../../src/hono.ts";
import { createLimiter } from "../../src/index.ts";
import { problemOf } from "../support/problem.ts";
import { freshKey } from "./helpers.ts";

type AppEnv = { Bindings: { LIMITER: typeof env.LIMITER; GREETING: string }; Variables: RateLimitVariables };

function app(options: Partial<Parameters<typeof rateLimit<AppEnv>>[0]> = {}) {
  const a = new Hono<AppEnv>();
  a.use("/api/*", rateLimit<AppEnv>({ limits: [{ limit: 2, window: "1m" }], leases: false, ...options }));
  a.get("/api/hello", (c) => c.json({ greeting: c.env.GREETING, limit: c.get("rateLimit") }));
  a.get("/api/fail", (c) => c.text("failed", 500));
  a.get("/api/raw", () => fetch("data:text/plain,raw"));
  a.post("/api/search", (c) => c.text("searched"));
  return a;
}

const bindings = { LIMITER: env.LIMITER, GREETING: "hi" };
const get = (a: Hono<AppEnv>, path: string, key?: string, init: RequestInit = {}) =>
  a.request(path, { ...init, headers: key === undefined ? {} : { "x-api-key": key } }, bindings);

describe("rateLimit()", () => {
  it("allowed: the handler runs with the decision in c.get('rateLimit'), its response gets the headers", async () => {
    const a = app();
    const key = freshKey();
    const res = await get(a, "/api/hello", key);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { greeting: string; limit: { reason: string; limits: { remaining: number }[] } };
    expect(body.greeting).toBe("hi");
    expect(body.limit.reason).toBe("granted");
    expect(body.limit.limits[0]?.remaining).toBe(1);
    expect(res.headers.get("RateLimit-Policy")).toBe('"per-minute";q=2;w=60');
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=1;t=60');
  });

  it("denied: 429 problem+json with Retry-After, the handler never runs; or the app's own handler", async () => {
    const key = freshKey();
    const a = app();
    for (let i = 0; i < 2; i++) expect((await get(a, "/api/hello", key)).status).toBe(200);
    const res = await get(a, "/api/hello", key);
    const body = await problemOf(res, 429);
    expect(res.headers.get("Retry-After")).toBe(String(body.retry_after));
    const custom = app({ handler: (c, r) => c.json({ wait: r.retryAfterMs > 0 }, 503) });
    await get(custom, "/api/hello", key);
    await get(custom, "/api/hello", key);
    const mine = await get(custom, "/api/hello", key);
    expect(mine.status).toBe(503);
    expect(await mine.json()).toEqual({ wait: true });
  });

  it("keys: by default x-api-key or Bearer; none → 401, malformed → 400; a key function replaces them", async () => {
    const a = app();
    await problemOf(await get(a, "/api/hello"), 401);
    const bad = await problemOf(await get(a, "/api/hello", "a b"), 400);
    expect(bad.title).toBe("Malformed API key");
    // Read from the default sources: the header named, as the proxy names it.
    expect(bad.detail).toMatch(/^the key in x-api-key may hold printable ASCII only/);
    const bearer = await a.request("/api/hello", { headers: { authorization: `Bearer ${freshKey()}` } }, bindings);
    expect(bearer.status).toBe(200);
    const byQuery = app({ key: (c) => c.req.query("user") });
    expect((await byQuery.request(`/api/hello?user=${freshKey()}`, {}, bindings)).status).toBe(200);
    await problemOf(await byQuery.request("/api/hello", {}, bindings), 401);
    // From the app's own key function: where it read it is the app's to know; the detail says it was given.
    const given = await problemOf(await byQuery.request("/api/hello?user=a%20b", {}, bindings), 400);
    expect(given.detail).toMatch(/^the key given may hold printable ASCII only/);
  });

  it("cost: the costs rules by default, or a number or function; 0 is not limited", async () => {
    const key = freshKey();
    const a = app({
      costs: [
        { method: "POST", path: "/api/search", cost: 2 },
        { path: "/api/hello", cost: 0 },
      ],
    });
    const search = await get(a, "/api/search", key, { method: "POST" });
    expect(search.headers.get("RateLimit")).toBe('"per-minute";r=0;t=60');
    const free = await get(a, "/api/hello", key);
    expect(free.status).toBe(200);
    expect(free.headers.has("RateLimit")).toBe(false);
    const fn = app({ cost: (c) => (c.req.method === "POST" ? 2 : 1) });
    expect((await get(fn, "/api/search", freshKey(), { method: "POST" })).headers.get("RateLimit")).toBe(
      '"per-minute";r=0;t=60',
    );
  });

  it("skip: not limited, no headers", async () => {
    const a = app({ skip: (c) => c.req.header("x-internal") === "1" });
    const key = freshKey();
    for (let i = 0; i < 5; i++) {
      const res = await a.request("/api/hello", { headers: { "x-api-key": key, "x-internal": "1" } }, bindings);
      expect(res.status).toBe(200);
      expect(res.headers.has("RateLimit-Policy")).toBe(false);
    }
    expect((await get(a, "/api/hello", key)).status).toBe(200);
  });

  it("refund: a response it picks gives the units back", async () => {
    const a = app({ refund: (c) => c.res.status >= 500 });
    const key = freshKey();
    for (let i = 0; i < 4; i++) expect((await get(a, "/api/fail", key)).status).toBe(500);
    expect((await get(a, "/api/hello", key)).headers.get("RateLimit")).toBe('"per-minute";r=1;t=60');
  });

  it("headers land on a response whose own headers are immutable", async () => {
    const res = await get(app(), "/api/raw", freshKey());
    expect(await res.text()).toBe("raw");
    expect(res.headers.get("RateLimit-Policy")).toBe('"per-minute";q=2;w=60');
  });

  it("a shared limiter serves several routes with one client", async () => {
    const limiter = createLimiter({ limits: [{ limit: 1, window: "1m" }], leases: false });
    const a = new Hono<AppEnv>();
    a.use("/a/*", rateLimit<AppEnv>({ limiter }));
    a.use("/b/*", rateLimit<AppEnv>({ limiter }));
    a.get("/a/x", (c) => c.text("a"));
    a.get("/b/x", (c) => c.text("b"));
    const key = freshKey();
    expect((await get(a, "/a/x", key)).status).toBe(200);
    expect((await get(a, "/b/x", key)).status).toBe(429);
  });

  it("a shared limiter reads its own binding", async () => {
    const limiter = createLimiter({ limits: [{ limit: 1, window: "1m" }], leases: false, binding: "OTHER" });
    const a = new Hono<{ Bindings: { OTHER: typeof env.LIMITER } }>();
    a.use("/x", rateLimit({ limiter }));
    a.get("/x", (c) => c.text("ok"));
    const res = await a.request("/x", { headers: { "x-api-key": freshKey() } }, { OTHER: env.LIMITER });
    expect(res.status).toBe(200);
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=0;t=60');
  });

  it("a refund that fails leaves the handler's response as it was, and is logged by key_id", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const real = env.LIMITER;
    const failing = {
      getByName: (name: string) => {
        const stub = real.getByName(name);
        return {
          take: (...args: Parameters<typeof stub.take>) => stub.take(...args),
          refund: () => Promise.reject(new Error("object gone")),
        };
      },
    } as unknown as typeof env.LIMITER;
    const a = new Hono<AppEnv>();
    a.use("/api/*", rateLimit<AppEnv>({ limits: [{ limit: 5, window: "1m" }], leases: false, refund: () => true }));
    a.get("/api/hello", (c) => c.text("served", 201));
    const key = freshKey();
    const res = await a.request("/api/hello", { headers: { "x-api-key": key } }, { ...bindings, LIMITER: failing });
    expect(res.status).toBe(201);
    expect(await res.text()).toBe("served");
    const lines = error.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
    const failed = lines.find((l) => l.event === "refund_failed");
    expect(failed).toMatchObject({ message: "object gone" });
    expect(failed?.key_id).toMatch(/^[0-9a-f]{12}$/);
    expect(JSON.stringify(lines)).not.toContain(key);
    error.mockRestore();
  });
});

describe("routes", () => {
  it("matches the request's method and normalised path against routes: the route's budget applies too", async () => {
    const a = app({
      limits: [{ limit: 5, window: "1m" }],
      routes: [{ name: "search", method: "POST", path: "/api/search", limits: [{ limit: 1, window: "1m" }] }],
    });
    const key = freshKey();
    const post = (path: string) => get(a, path, key, { method: "POST" });
    const first = await post("/api/search");
    expect(first.status).toBe(200);
    expect(first.headers.get("RateLimit-Policy")).toBe('"per-minute";q=5;w=60, "search";q=1;w=60');
    const refused = await post("/api/%73earch");
    expect(refused.status).toBe(429);
    expect(await problemOf(refused, 429)).toMatchObject({ violated_policies: ["search"], route: "search" });
    expect((await get(a, "/api/hello", key)).headers.get("RateLimit")).toBe('"per-minute";r=3;t=60');
  });

  it("reads the path only when a rule needs it: with a cost given and no routes, an encoded slash is the app's business", async () => {
    const a = app({ cost: 1 });
    const res = await get(a, "/api/a%2Fb", freshKey());
    expect(res.status).toBe(404); // hono's not-found, after the middleware counted it
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=1;t=60');
    const routed = app({ cost: 1, routes: [{ name: "s", path: "/api/s", limits: [{ limit: 1, window: "1m" }] }] });
    expect((await get(routed, "/api/a%2Fb", freshKey())).status).toBe(400);
  });
});
