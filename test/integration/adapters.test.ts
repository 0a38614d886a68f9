// The three ways in — the proxy, the hono middleware and the library's limit() — run one request pipeline: the same
// decision leaves the same log line and the same Analytics Engine data point whichever adapter made it. Also what
// the pipeline gives each adapter alike: HTTPException for the middleware's 400/401, and limiters named apart.
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { afterEach, describe, expect, it, vi } from "vitest";
import { keyId } from "../../src/base/log.ts";
import type { LimitSpec } from "../../src/core/limits.ts";
import { type RateLimitVariables, rateLimit } from "../../src/hono.ts";
import * as root from "../../src/index.ts";
import { createLimiter } from "../../src/index.ts";
import { background, envWith, freshKey, handle, request } from "./helpers.ts";

const SETTINGS = {
  limits: [{ limit: 2, window: "1m" }],
  routes: [{ name: "search", method: "POST", path: "/v1/search", limits: [{ limit: 1, window: "1m" }] }],
  costs: [{ method: "POST", path: "/v1/search", cost: 1 }],
  leases: false,
} as const;

/** What one request leaves behind: its log lines and data points, with the key's id made generic. */
interface Trace {
  readonly lines: Record<string, unknown>[];
  readonly points: AnalyticsEngineDataPoint[];
}

function recorder() {
  const points: AnalyticsEngineDataPoint[] = [];
  const dataset = { writeDataPoint: (p?: AnalyticsEngineDataPoint) => p && points.push(p) } as AnalyticsEngineDataset;
  const log = vi.spyOn(console, "log").mockImplementation(() => {});
  return {
    dataset,
    /** The lines and points since the last read, with `id` (the key's key_id) replaced by "<id>". */
    read(id: string): Trace {
      const lines = log.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
      log.mockClear();
      const generic = (v: unknown) => JSON.parse(JSON.stringify(v).replaceAll(id, "<id>"));
      return { lines: lines.map(generic), points: points.splice(0).map(generic) };
    },
  };
}

afterEach(() => vi.restoreAllMocks());

describe("one pipeline, three adapters", () => {
  it("the same decisions leave the same log lines and data points through the proxy, the middleware and limit()", async () => {
    const traces: Record<string, Trace[]> = {};

    // The proxy: objects are named key:<key>.
    {
      const rec = recorder();
      const key = freshKey();
      const id = await keyId(`key:${key}`);
      const e = envWith(SETTINGS, { LIMITER_ANALYTICS: rec.dataset });
      const search = () => request(key, "/v1/search", { method: "POST" });
      const runs: Trace[] = [];
      for (const r of [search(), search(), request(key), request(key)]) {
        await handle(r, e);
        runs.push(rec.read(id));
      }
      traces.proxy = runs;
    }

    // The middleware, named null so that its objects are named as the proxy's.
    {
      const rec = recorder();
      const key = freshKey();
      const id = await keyId(`key:${key}`);
      const app = new Hono<{ Variables: RateLimitVariables }>();
      app.use("*", rateLimit({ ...SETTINGS, name: null }));
      app.all("*", (c) => c.text("ok"));
      const bindings = { LIMITER: env.LIMITER, LIMITER_ANALYTICS: rec.dataset };
      const call = (method: string, path: string) =>
        app.request(path, { method, headers: { "x-api-key": key } }, bindings);
      const runs: Trace[] = [];
      for (const [method, path] of [
        ["POST", "/v1/search"],
        ["POST", "/v1/search"],
        ["GET", "/"],
        ["GET", "/"],
      ] as const) {
        await call(method, path);
        runs.push(rec.read(id));
      }
      traces.middleware = runs;
    }

    // limit(), naming the route as the others matched it.
    {
      const rec = recorder();
      const key = freshKey();
      const id = await keyId(`key:${key}`);
      const limiter = createLimiter({ ...SETTINGS, name: null });
      const e = { LIMITER: env.LIMITER, LIMITER_ANALYTICS: rec.dataset };
      const runs: Trace[] = [];
      for (const route of ["search", "search", undefined, undefined]) {
        await limiter.limit(e, key, route ? { route } : {});
        runs.push(rec.read(id));
      }
      traces.library = runs;
    }

    // The decisions: search granted, search refused by its route, granted, refused by the key's limit (both
    // refusals from the deny cache: the grant before each said nothing was left).
    const proxy = traces.proxy as Trace[];
    expect(proxy.map((t) => t.points.map((p) => p.blobs?.[0]))).toEqual([
      ["granted"],
      ["cached_denial"],
      ["granted"],
      ["cached_denial"],
    ]);
    expect(proxy[1]?.lines).toEqual([
      {
        event: "denied",
        reason: "cached_denial",
        plan: "default",
        route: "search",
        key_id: "<id>",
        cost: 1,
        violated: ["search"],
        retry_after_ms: expect.any(Number),
        suppressed: 0,
      },
    ]);
    expect(proxy[0]?.points[0]).toEqual({
      indexes: ["<id>"],
      blobs: ["granted", "default", "allowed", "", "key", "search", ""],
      doubles: [1, 1, 0],
    });
    // The waits differ by the milliseconds between the runs; everything else is the same record.
    const exact = (ts: Trace[]) =>
      JSON.parse(
        JSON.stringify(ts)
          .replace(/"retry_after_ms":\d+/g, '"retry_after_ms":0')
          .replace(/,\d{5}\]/g, ",0]"),
      );
    expect(exact(traces.middleware as Trace[])).toEqual(exact(proxy));
    expect(exact(traces.library as Trace[])).toEqual(exact(proxy));
  });
});

describe("one WebSocket rule for every adapter", () => {
  const minute: LimitSpec[] = [{ limit: 100, windowMs: 60_000, tickMs: 1 }];
  /** Requests holding a slot of `key` now, as its object says (every adapter here names it `key:<key>`). */
  const inFlight = async (key: string) => (await env.LIMITER.getByName(`key:${key}`).status(minute, 1)).inFlight;
  const SETTINGS = { limits: [{ limit: 100, window: "1m" }], concurrency: 1, leases: false } as const;
  /** The library's and the middleware's, named as the proxy names its objects. */
  const SLOT = { ...SETTINGS, name: null };
  const headers = (key: string) => ({ "x-api-key": key, upgrade: "websocket", "sec-websocket-version": "13" });

  /**
   * Starts one request of `method` with `Upgrade: websocket` through `adapter`, its client leaving while it is still
   * unanswered: the slots held while it was in flight, and once the client had left.
   */
  async function leaving(adapter: "proxy" | "middleware" | "library", method: string): Promise<[number, number]> {
    const key = freshKey();
    const client = new AbortController();
    const init = { method, headers: headers(key), signal: client.signal };
    const pending: Promise<unknown>[] = [];
    const ctx = { waitUntil: (p: Promise<unknown>) => void pending.push(p), passThroughOnException() {}, props: {} };
    let finish: () => void = () => {};
    const unanswered = new Promise<void>((r) => {
      finish = r;
    });
    let done: Promise<unknown>;
    if (adapter === "proxy") {
      // The origin never answers `hang`: only the client's leaving ends it.
      const h = background();
      done = handle(request(key, "/__special/hang", init), envWith(SETTINGS), h).then(() => h.settled());
    } else if (adapter === "middleware") {
      const app = new Hono<{ Variables: RateLimitVariables }>();
      app.use("*", rateLimit(SLOT));
      app.all("*", async (c) => {
        await unanswered;
        return c.text("late");
      });
      done = Promise.resolve(app.request("/stream", init, { LIMITER: env.LIMITER }, ctx));
    } else {
      const limiter = createLimiter(SLOT);
      done = limiter.decideRequest(env, new Request("https://api.example/stream", init), { ctx });
      await done;
    }
    await expect.poll(() => inFlight(key)).toBe(1);
    const held = await inFlight(key);
    client.abort(new Error("the client went away"));
    await Promise.all(pending);
    // Polled: the release is on its way once the client has left (or not at all).
    await expect
      .poll(() => inFlight(key), { timeout: 500 })
      .toBe(0)
      .catch(() => {});
    const after = await inFlight(key);
    finish();
    await done;
    return [held, after];
  }

  it("a POST with Upgrade: websocket is an ordinary request everywhere: its slot is freed when the client leaves", async () => {
    // Not a handshake (RFC 6455 §4.1: a GET), so its slot is not its socket's: the proxy, the middleware and
    // decideRequest() all free it at once, as for any request.
    const seen = {
      proxy: await leaving("proxy", "POST"),
      middleware: await leaving("middleware", "POST"),
      library: await leaving("library", "POST"),
    };
    expect(seen).toEqual({ proxy: [1, 0], middleware: [1, 0], library: [1, 0] });
  });

  it("a GET with Upgrade: websocket is a handshake: its slot stays held when the request's signal aborts", async () => {
    // The socket holds it until it closes (test/integration/concurrency.test.ts); only the request is gone here.
    const seen = { middleware: await leaving("middleware", "GET"), library: await leaving("library", "GET") };
    expect(seen).toEqual({ middleware: [1, 1], library: [1, 1] });
  });
});

describe("the middleware's own refusals", () => {
  it("are HTTPExceptions carrying the problem+json, so app.onError can restyle them", async () => {
    const app = new Hono();
    app.use("*", rateLimit({ limits: [{ limit: 1, window: "1m" }] }));
    app.get("*", (c) => c.text("ok"));
    const seen: number[] = [];
    const messages: string[] = [];
    app.onError(async (err, c) => {
      const { HTTPException } = await import("hono/http-exception");
      if (!(err instanceof HTTPException)) throw err;
      seen.push(err.status);
      messages.push(err.message);
      const problem = (await err.getResponse().json()) as { title: string };
      return c.json({ error: problem.title }, err.status);
    });
    const bindings = { LIMITER: env.LIMITER };
    const none = await app.request("/", {}, bindings);
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({ error: "Unauthorized" });
    const bad = await app.request("/", { headers: { "x-api-key": "a b" } }, bindings);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ error: "Malformed API key" });
    expect(seen).toEqual([401, 400]);
    expect(messages[0]).toBe("This API needs an API key.");
    expect(messages[1]).toMatch(/^the key in x-api-key may hold printable ASCII only/);
  });

  it("without onError, hono answers with the exception's problem+json as before", async () => {
    const app = new Hono();
    app.use("*", rateLimit({ limits: [{ limit: 1, window: "1m" }] }));
    app.get("*", (c) => c.text("ok"));
    const res = await app.request("/", {}, { LIMITER: env.LIMITER });
    expect(res.status).toBe(401);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toMatchObject({ status: 401, title: "Unauthorized" });
  });
});

describe("limiters are independent by default", () => {
  const e = { LIMITER: env.LIMITER };

  it("two limiters with different settings on one binding never share a key's log", async () => {
    const login = createLimiter({ limits: [{ limit: 2, window: "1m" }] });
    const api = createLimiter({ limits: [{ limit: 3, window: "1m" }] });
    const user = freshKey();
    expect(login.name).toMatch(/^s-[0-9a-f]{12}$/);
    expect(api.name).not.toBe(login.name);
    for (let i = 0; i < 2; i++) expect((await login.limit(e, user)).allowed).toBe(true);
    expect((await login.limit(e, user)).allowed).toBe(false);
    const left = [];
    for (let i = 0; i < 3; i++) left.push((await api.limit(e, user)).limits[0]?.remaining);
    expect(left).toEqual([2, 1, 0]);
  });

  it("the same name shares on purpose; the same settings share; null names objects as the proxy does", async () => {
    const a = createLimiter({ name: "shared", limits: [{ limit: 2, window: "1m" }] });
    const b = createLimiter({ name: "shared", limits: [{ limit: 5, window: "1m" }] });
    const user = freshKey();
    await a.limit(e, user);
    await a.limit(e, user);
    // b's limit is 5, but the two grants of a are in the same log.
    expect((await b.limit(e, user)).limits[0]?.remaining).toBe(2);
    expect(a.identify(user).name).toBe(`shared/key:${user}`);

    const same = [1, 2].map(() => createLimiter({ limits: [{ limit: 4, window: "1m" }] }));
    expect(same[0]?.name).toBe(same[1]?.name);
    // Header names, lease sizes and failure modes do not change what a grant means: same name.
    expect(createLimiter({ limits: [{ limit: 4, window: "1m", name: "x" }], leases: false }).name).toBe(same[0]?.name);

    const proxyNamed = createLimiter({
      name: null,
      limits: [{ limit: 2, window: "1m" }],
      anonymous: { limits: [{ limit: 1, window: "1m" }] },
    });
    expect(proxyNamed.identify(user).name).toBe(`key:${user}`);
    expect(proxyNamed.identify(null, "192.0.2.1").name).toBe("ip:192.0.2.1");
  });

  it("prefix is the old spelling of name; a bad name is a ConfigError naming the field", () => {
    expect(createLimiter({ prefix: "login", limits: [{ limit: 2, window: "1m" }] }).name).toBe("login");
    expect(() => createLimiter({ name: "a/b", limits: [{ limit: 2, window: "1m" }] })).toThrow(
      /^createLimiter\.name: expected 1 to 64 letters, digits/,
    );
    expect(() => createLimiter({ name: "a", prefix: "b", limits: [{ limit: 2, window: "1m" }] })).toThrow(
      /^createLimiter\.prefix: give name only/,
    );
  });
});

describe("the package's root entry", () => {
  it("exports what users need and no internal helpers", () => {
    expect(Object.keys(root).sort()).toEqual(
      [
        "ConfigError",
        "LimiterError",
        "RateLimiter",
        "createLimiter",
        "headersOf",
        "mintKey",
        "problemFor",
        "refusal",
        "violated",
      ].sort(),
    );
  });
});
