// The operators' API inside workerd, through the Worker's handle() against the real origin: present only with
// ADMIN_TOKEN, the token check, body checks, every endpoint, its effect on the key's next requests (headers,
// reasons, leases), concurrent traffic, and the telemetry (log lines, Analytics Engine data points via a double).
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { keyId } from "../../src/base/log.ts";
import type { RateLimitResult } from "../../src/client/result.ts";
import type { RateLimiter } from "../../src/object/index.ts";
import { mintKey } from "../../src/pipeline/signed.ts";
import { SUBJECTS } from "../../src/proxy/admin/body.ts";
import {
  arrivalsFor,
  background,
  envWith,
  freshKey,
  handle,
  originUrl,
  problemBody,
  proxy,
  request,
  spyLimiter,
  type WorkerEnv,
} from "./helpers.ts";

beforeEach(() => {
  // Admin actions and denials log JSON lines; tests that check them spy on the same methods.
  vi.spyOn(console, "log").mockImplementation(() => {});
  vi.spyOn(console, "warn").mockImplementation(() => {});
});

afterEach(() => {
  vi.restoreAllMocks();
});

const TOKEN = "s3cret-admin-token";
const RL = {
  limits: [{ limit: 5, window: "1m" }],
  plans: [
    { name: "free", key_prefix: "free_", limits: [{ limit: 3, window: "1m" }] },
    { name: "live", key_prefix: "live_", unlimited: true },
    // Leases of 1 s (32 s / 32): far longer than four object round trips even on a loaded machine,
    // so this isolate always asks for them.
    { name: "fast", key_prefix: "fast_", limits: [{ limit: 1000, window: "32s" }] },
  ],
};

function adminEnv(extra: Partial<WorkerEnv> = {}, rl: unknown = RL): WorkerEnv {
  return envWith(rl, { ADMIN_TOKEN: TOKEN, ...extra });
}

/** A POST to the admin API (token and body as given; body JSON-encoded unless a string). */
function adminRequest(path: string, body: unknown, token: string | null = TOKEN, init: RequestInit = {}): Request {
  const headers = new Headers(init.headers);
  if (token !== null) headers.set("authorization", `Bearer ${token}`);
  headers.set("content-type", "application/json");
  return new Request(`https://limiter.example/__limiter/${path}`, {
    method: "POST",
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...init,
    headers,
  });
}

async function admin(e: WorkerEnv, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await handle(adminRequest(path, body), e);
  expect(res.status, await res.clone().text()).toBe(200);
  expect(res.headers.get("content-type")).toBe("application/json");
  return (await res.json()) as Record<string, unknown>;
}

/** This isolate's lease table for the vars of `e`. */
function leasesOf(e: WorkerEnv) {
  const client = proxy.clientFor(e);
  if (!client) throw new Error("the vars are invalid: no client");
  return client.leases;
}

/** Whether this isolate holds a lease with units left for `key`. */
function holdsLease(e: WorkerEnv, key: string): boolean {
  return (
    leasesOf(e)
      .get(`key:${key}`)
      ?.held.some((h) => h.left > 0) === true
  );
}

/**
 * Sends allowed requests for `key` until this isolate holds a lease with units left (at most 40),
 * then waits for the background work they started, so no lease call is still in flight.
 */
async function untilLeaseHeld(e: WorkerEnv, key: string): Promise<void> {
  const background: Promise<unknown>[] = [];
  for (let i = 0; i < 40 && !holdsLease(e, key); i++) {
    const res = await handle(request(key), e, { waitUntil: (p) => background.push(p) });
    expect(res.status).toBe(200);
  }
  await Promise.all(background);
  expect(holdsLease(e, key)).toBe(true);
}

describe("presence", () => {
  it("without ADMIN_TOKEN the paths are ordinary traffic: limited, counted and proxied", async () => {
    const e = envWith(RL);
    const key = freshKey();
    const res = await handle(request(key, "/__limiter/status", { method: "POST", body: "{}" }), e);
    expect(res.status).toBe(200);
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=4;t=60');
    expect((await arrivalsFor(key)).map((a) => a.url)).toEqual(["/__limiter/status"]);
    expect((await handle(request(null, "/__limiter/"), e)).status).toBe(401); // no API key: the limiter's 401
  });

  it("with ADMIN_TOKEN the page is served without a token: one HTML document, no external assets", async () => {
    const res = await handle(new Request("https://limiter.example/__limiter/"), adminEnv());
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(res.headers.get("content-security-policy")).toContain("default-src 'none'");
    const html = await res.text();
    expect(html).toContain('const BASE = "/__limiter/"');
    expect(html).not.toMatch(/(src|href)=["']?(https?:)?\/\//);
    expect(
      (await handle(new Request("https://limiter.example/__limiter/", { method: "POST" }), adminEnv())).status,
    ).toBe(405);
  });

  it("moves with admin.path; the default path is then ordinary traffic", async () => {
    const e = adminEnv({}, { ...RL, admin: { path: "/ops/limiter/" } });
    const key = freshKey();
    const moved = await handle(
      new Request("https://limiter.example/ops/limiter/status", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ key }),
      }),
      e,
    );
    expect(moved.status).toBe(200);
    expect(((await moved.json()) as { plan: string }).plan).toBe("default");
    expect(await (await handle(new Request("https://limiter.example/ops/limiter/"), e)).text()).toContain(
      'const BASE = "/ops/limiter/"',
    );
    const old = await handle(request(key, "/__limiter/status", { method: "POST", body: "{}" }), e);
    expect(old.status).toBe(200);
    expect(await arrivalsFor(key)).toHaveLength(1);
  });
});

describe("the token", () => {
  it.each([
    ["missing", null],
    ["wrong", "s3cret-admin-tokeN"],
    ["a prefix", "s3cret"],
    ["longer", `${TOKEN}x`],
    ["empty", ""],
  ])("%s: 401, and nothing else happens (no object is asked, nothing is proxied)", async (_, token) => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const spy = spyLimiter();
    const e = adminEnv({ LIMITER: spy.namespace });
    const key = freshKey();
    for (const path of ["status", "reset", "block", "nope"]) {
      const res = await handle(adminRequest(path, { key, for: "1h" }, token), e);
      expect(res.status).toBe(401);
      expect(res.headers.get("WWW-Authenticate")).toBe('Bearer realm="limiter-admin"');
      expect((await problemBody(res)).detail).toMatch(/Bearer/);
    }
    expect(spy.calls).toEqual([]);
    expect(await arrivalsFor(key)).toEqual([]);
    const lines = warn.mock.calls.map((c) => String(c[0]));
    expect(lines).toHaveLength(4);
    for (const line of lines) {
      expect(JSON.parse(line)).toMatchObject({ event: "admin_unauthorized" });
      expect(line).not.toContain(key);
      if (token) expect(line).not.toContain(token);
    }
  });

  it("Basic or other schemes are refused too", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const res = await handle(
      adminRequest("status", { key: "k" }, null, { headers: { authorization: `Basic ${btoa(`x:${TOKEN}`)}` } }),
      adminEnv(),
    );
    expect(res.status).toBe(401);
  });
});

describe("bodies", () => {
  it.each([
    ["not JSON", "{key: 1}", 400, /^body: not valid JSON/],
    ["empty", "", 400, /^body: expected a JSON object/],
    ["an array", "[]", 400, /^body: expected a JSON object, got an array/],
    ["no key", "{}", 400, /^key: required/],
    ["a number key", '{"key": 5}', 400, /^key: expected a non-empty string, got 5/],
    ["a key with a space", '{"key": "a b"}', 400, /^key: the key in the body may hold printable ASCII only/],
    ["a key too long", JSON.stringify({ key: "k".repeat(257) }), 400, /^key: the key in the body is longer than 256/],
    [
      "an unknown field",
      '{"key": "k", "keys": 1}',
      400,
      /^keys: unknown field; expected key, ip, anonymous, guess, account, plan$/,
    ],
  ])("%s → 400 problem+json naming what is wrong", async (_, body, status, detail) => {
    const res = await handle(adminRequest("status", body), adminEnv());
    expect(res.status).toBe(status);
    expect((await problemBody(res)).detail).toMatch(detail);
  });

  it("over 8 KiB → 413, declared or streamed without a length", async () => {
    const big = JSON.stringify({ key: "k", pad: "x".repeat(9000) });
    const declared = await handle(adminRequest("status", big), adminEnv());
    expect(declared.status).toBe(413);
    expect((await problemBody(declared)).title).toBe("Content Too Large");
    const chunk = new TextEncoder().encode("x".repeat(1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent++ < 64) c.enqueue(chunk);
        else c.close();
      },
    });
    const streamed = await handle(
      new Request("https://limiter.example/__limiter/status", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
        body: stream,
      }),
      adminEnv(),
    );
    expect(streamed.status).toBe(413);
    expect(sent).toBeLessThan(20); // it stopped reading
  });

  it("unknown endpoints → 404, other methods → 405 with Allow", async () => {
    expect((await handle(adminRequest("stats", { key: "k" }), adminEnv())).status).toBe(404);
    const get = await handle(
      new Request("https://limiter.example/__limiter/status", { headers: { authorization: `Bearer ${TOKEN}` } }),
      adminEnv(),
    );
    expect(get.status).toBe(405);
    expect(get.headers.get("Allow")).toBe("POST");
  });

  it("keys no request could use → 422: no plan, or not matching key.pattern", async () => {
    const noDefault = { plans: [{ name: "free", key_prefix: "free_", limits: [{ limit: 3, window: "1m" }] }] };
    const res = await handle(adminRequest("status", { key: "other" }), adminEnv({}, noDefault));
    expect(res.status).toBe(422);
    expect((await problemBody(res)).detail).toBe(
      "key: This API key matches no plan. Its requests get 401 and it has no state.",
    );
    const patterned = { ...RL, key: { pattern: "k_[a-z0-9-]+" } };
    const off = await handle(adminRequest("status", { key: "K_1" }), adminEnv({}, patterned));
    expect(off.status).toBe(422);
    expect((await problemBody(off)).detail).toBe(
      "key: This API key is not valid. Its requests get 401 and it has no state.",
    );
  });
});

describe("status", () => {
  it("of a key never seen: the plan's limits unused, and no stored state is created", async () => {
    const key = freshKey("free_");
    const s = await admin(adminEnv(), "status", { key });
    expect(s).toMatchObject({
      key_id: await keyId(`key:${key}`),
      plan: "free",
      unlimited: false,
      stored: false,
      limits: [
        {
          name: "per-minute",
          limit: 3,
          window_ms: 60_000,
          tick_ms: 1,
          used: 0,
          remaining: 3,
          reset_ms: 0,
          source: "plan",
        },
      ],
      block: null,
      override: null,
      history: { limit: "per-minute", window_ms: 60_000, bucket_ms: 1000, ahead: 0 },
    });
    expect((s.history as { counts: number[] }).counts).toEqual(new Array(60).fill(0));
    expect(JSON.stringify(s)).not.toContain(key);
    await runInDurableObject(env.LIMITER.getByName(`key:${key}`), (_: RateLimiter, state) => {
      expect(state.storage.sql.exec("SELECT name FROM sqlite_master").toArray()).toEqual([]);
    });
  });

  it("counts what was granted and consumes nothing", async () => {
    const e = adminEnv();
    const key = freshKey("free_");
    for (let i = 0; i < 2; i++) expect((await handle(request(key), e)).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const s = await admin(e, "status", { key });
      expect(s.limits).toMatchObject([{ used: 2, remaining: 1 }]);
      expect((s.history as { counts: number[] }).counts.reduce((a, b) => a + b)).toBe(2);
      expect(s.stored).toBe(true);
    }
    expect((await handle(request(key), e)).status).toBe(200);
    expect((await handle(request(key), e)).status).toBe(429);
    expect(await arrivalsFor(key)).toHaveLength(3);
  });

  it("of a key on an unlimited plan answers without asking any object", async () => {
    const spy = spyLimiter();
    const s = await admin(adminEnv({ LIMITER: spy.namespace }), "status", { key: freshKey("live_") });
    expect(s).toMatchObject({ plan: "live", unlimited: true, limits: [], history: null });
    expect(spy.calls).toEqual([]);
  });
});

describe("reset", () => {
  it("lets a used-up key through again, and logs the action without the key", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const e = adminEnv();
    const key = freshKey("free_");
    for (let i = 0; i < 3; i++) await handle(request(key), e);
    expect((await handle(request(key), e)).status).toBe(429);
    const s = await admin(e, "reset", { key });
    expect(s.limits).toMatchObject([{ used: 0, remaining: 3 }]);
    // This isolate's cached denial went with it: the next request asks the object and passes.
    expect((await handle(request(key), e)).status).toBe(200);
    const lines = log.mock.calls.map((c) => String(c[0]));
    expect(lines.map((l) => JSON.parse(l))).toContainEqual({
      event: "admin",
      action: "reset",
      key_id: await keyId(`key:${key}`),
      plan: "free",
    });
    for (const l of lines) expect(l).not.toContain(key);
  });

  it("on an unlimited plan → 409", async () => {
    const res = await handle(adminRequest("reset", { key: freshKey("live_") }), adminEnv());
    expect(res.status).toBe(409);
    expect((await problemBody(res)).detail).toMatch(/unlimited/);
  });
});

describe("block and unblock", () => {
  it("every request gets 429 blocked with an honest Retry-After until it ends; unblock lifts it", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const decisions: RateLimitResult[] = [];
    const e = adminEnv();
    const key = freshKey();
    expect((await handle(request(key), e)).status).toBe(200);
    const until = Date.now() + 90_000;
    const s = await admin(e, "block", { key, until: new Date(until).toISOString() });
    expect(s.block).toMatchObject({ until: new Date(until).toISOString(), until_ms: until });
    for (let i = 0; i < 3; i++) {
      const res = await handle(request(key), e, { onDecision: (d) => decisions.push(d) });
      expect(res.status).toBe(429);
      const retryAfter = Number(res.headers.get("Retry-After"));
      expect(retryAfter).toBeGreaterThanOrEqual(89);
      expect(retryAfter).toBeLessThanOrEqual(90);
      expect(res.headers.get("RateLimit")).toBe(`"per-minute";r=0;t=${retryAfter}`);
      const body = await problemBody(res);
      expect(body.detail).toMatch(/blocked by an operator/);
      expect(body.violated_policies).toEqual([]);
    }
    // The first asked the object, the next came from the deny cache: both say why.
    expect(decisions.map((d) => d.reason)).toEqual(["blocked", "blocked", "blocked"]);
    // The object's answer: the wait runs exactly to the block's end.
    expect((decisions[0] as RateLimitResult).at + (decisions[0] as RateLimitResult).retryAfterMs).toBe(until);
    expect(await arrivalsFor(key)).toHaveLength(1);

    const lifted = await admin(e, "unblock", { key });
    expect(lifted.block).toBeNull();
    expect((await handle(request(key), e)).status).toBe(200);
  });

  it("takes a duration (for) instead of a time; rejects times in the past, both or neither", async () => {
    const e = adminEnv();
    const key = freshKey();
    const s = await admin(e, "block", { key, for: "10m" });
    expect((s.block as { remaining_ms: number }).remaining_ms).toBeGreaterThan(599_000);
    for (const [body, detail] of [
      [{ key }, /"until" .* or "for" .*: required/],
      [{ key, until: Date.now() - 1 }, /^until: .* is not in the future/],
      [{ key, until: "tomorrow" }, /^until: expected an ISO time/],
      [{ key, until: Date.now() + 1000, for: "1m" }, /give "until" or "for", not both/],
      [{ key, for: "1 sec" }, /^for: /],
    ] as const) {
      const res = await handle(adminRequest("block", body), e);
      expect(res.status).toBe(400);
      expect((await problemBody(res)).detail).toMatch(detail);
    }
  });

  it("drops this isolate's leases for the key: the next request is refused at once", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const e = adminEnv();
    const key = freshKey("fast_");
    const name = `key:${key}`;
    await untilLeaseHeld(e, key);
    await admin(e, "block", { key, for: "1m" });
    expect(leasesOf(e).get(name)).toBeUndefined();
    expect((await handle(request(key), e)).status).toBe(429);
  });

  it("reaches an isolate that holds leases (blocked elsewhere) within one lease lifetime", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const e = adminEnv();
    const key = freshKey("fast_");
    const name = `key:${key}`;
    await untilLeaseHeld(e, key);
    // Another isolate's operator: the object is blocked, this isolate is not told.
    await env.LIMITER.getByName(name).block(Date.now() + 60_000);
    // What this isolate may still spend: the leases it held when the block landed (the plan's
    // lifetime is 1 s); no lease call was in flight, and the object grants no more.
    const held = leasesOf(e).get(name)?.held ?? [];
    const until = Math.max(...held.map((h) => h.expiresAt));
    let refused = false;
    const waitUntil: Promise<unknown>[] = [];
    // Bounded by a generous time only so a broken build ends; the assertions are on the leases' expiry.
    for (const started = Date.now(); !refused && Date.now() - started < 10_000; ) {
      const sentAt = Date.now();
      const res = await handle(request(key), e, { waitUntil: (p) => waitUntil.push(p) });
      if (res.status === 200) expect(sentAt, "granted after the held leases expired").toBeLessThan(until);
      else refused = res.status === 429;
    }
    await Promise.all(waitUntil);
    expect(refused).toBe(true);
    expect(leasesOf(e).get(name)?.held.length ?? 0).toBe(0);
  });

  it("on an unlimited plan → 409", async () => {
    expect((await handle(adminRequest("block", { key: freshKey("live_"), for: "1m" }), adminEnv())).status).toBe(409);
  });
});

describe("override", () => {
  it("replaces the plan's limits from the key's next decision, in its headers too, until removed", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const e = adminEnv();
    const key = freshKey("free_");
    expect((await handle(request(key), e)).headers.get("RateLimit-Policy")).toBe('"per-minute";q=3;w=60');
    const s = await admin(e, "override", {
      key,
      limits: [
        { limit: 6, window: "1m", name: "vip-minute" },
        { limit: 100, window: "1h" },
      ],
    });
    expect(s.override).toEqual({
      limits: [
        { name: "vip-minute", limit: 6, window_ms: 60_000, tick_ms: 1 },
        { name: "per-hour", limit: 100, window_ms: 3_600_000, tick_ms: 1 },
      ],
      expires: null,
      expires_ms: null,
    });
    expect(s.limits).toMatchObject([
      { name: "vip-minute", used: 1, remaining: 5, source: "override" },
      { name: "per-hour", used: 1, remaining: 99, source: "override" },
    ]);
    const statuses: number[] = [];
    let last: Response | null = null;
    for (let i = 0; i < 6; i++) {
      last = await handle(request(key), e);
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    expect(last?.headers.get("RateLimit-Policy")).toBe('"vip-minute";q=6;w=60, "per-hour";q=100;w=3600');
    expect(((await problemBody(last as Response)) as { violated_policies: string[] }).violated_policies).toEqual([
      "vip-minute",
    ]);

    const removed = await admin(e, "override/delete", { key });
    expect(removed.override).toBeNull();
    const again = await handle(request(key), e);
    expect(again.status).toBe(429); // 6 granted still count against the plan's 3
    expect(again.headers.get("RateLimit-Policy")).toBe('"per-minute";q=3;w=60');
  });

  it("expires on its own (expires or for)", async () => {
    const e = adminEnv();
    const key = freshKey("free_");
    const s = await admin(e, "override", { key, limits: [{ limit: 50, window: "1m" }], for: "300ms" });
    expect((s.override as { expires_ms: number }).expires_ms).toBeGreaterThan(Date.now());
    expect((await handle(request(key), e)).headers.get("RateLimit-Policy")).toBe('"per-minute";q=50;w=60');
    // The object's clock moves past the expiry (no sleeping): its next decision applies the plan again.
    await runInDurableObject(env.LIMITER.getByName(`key:${key}`), (o: RateLimiter) => {
      o.clock = () => Date.now() + 1000;
    });
    expect((await handle(request(key), e)).headers.get("RateLimit-Policy")).toBe('"per-minute";q=3;w=60');
    expect((await admin(e, "status", { key })).override).toBeNull();
  });

  it("validates the limits with the config parser's rules, naming the field", async () => {
    for (const [limits, detail] of [
      [undefined, /^limits: required/],
      [[], /^limits: expected at least one limit/],
      [[{ limit: 5, window: "1 sec" }], /^limits\[0\]\.window: /],
      [[{ limit: -1, window: "1s" }], /^limits\[0\]\.limit: expected a positive integer/],
      [[{ limit: 5, window: "1s", burst: 2 }], /^limits\[0\]\.burst: unknown setting/],
    ] as const) {
      const res = await handle(adminRequest("override", { key: freshKey(), limits }), adminEnv());
      expect(res.status).toBe(400);
      expect((await problemBody(res)).detail).toMatch(detail);
    }
  });
});

describe("concurrent traffic on the key", () => {
  it("status and reset interleaved with a burst never let more through than the limit allows around them", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const e = adminEnv();
    const key = freshKey("free_");
    const burst = () => Array.from({ length: 12 }, () => handle(request(key), e).then((r) => r.status));
    const first = await Promise.all([...burst(), handle(adminRequest("status", { key }), e).then((r) => r.status)]);
    expect(first.filter((s) => s === 200)).toHaveLength(3 + 1); // three grants, and the status call
    const second = await Promise.all([
      ...burst(),
      handle(adminRequest("reset", { key }), e).then((r) => r.status),
      ...burst(),
    ]);
    const granted = second.filter((s) => s === 200).length - 1; // less the reset's own 200
    expect(granted).toBeLessThanOrEqual(3);
    const status = await admin(e, "status", { key });
    expect((status.limits as { used: number }[])[0]?.used).toBe(granted);
    expect(await arrivalsFor(key)).toHaveLength(3 + granted);
  });
});

describe("telemetry", () => {
  it("writes one data point per decision (not for admin calls), with the key hashed", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const points: AnalyticsEngineDataPoint[] = [];
    const dataset = { writeDataPoint: (p?: AnalyticsEngineDataPoint) => p && points.push(p) };
    const e = adminEnv({ LIMITER_ANALYTICS: dataset as AnalyticsEngineDataset });
    const key = freshKey("free_");
    const id = await keyId(`key:${key}`);
    for (let i = 0; i < 5; i++) await handle(request(key), e);
    await admin(e, "block", { key, for: "1m" });
    await handle(request(key), e);
    expect(points).toHaveLength(6);
    expect(points.map((p) => p.blobs?.[0])).toEqual([
      "granted",
      "granted",
      "granted",
      // The third grant used the limit up, and the object said so: the deny cache answers.
      "cached_denial",
      "cached_denial",
      "blocked",
    ]);
    expect(points[0]).toEqual({
      indexes: [id],
      blobs: ["granted", "free", "allowed", "", "key", "", ""],
      doubles: [1, 1, 0],
    });
    expect(points[3]?.blobs).toEqual(["cached_denial", "free", "denied", "per-minute", "key", "", "key"]);
    expect(points[3]?.doubles?.[2]).toBeGreaterThan(59_000);
    expect(JSON.stringify(points)).not.toContain(key);
  });

  it("logs denials as JSON with the reason and key_id, never the key, at most one a second per key", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const e = adminEnv();
    const key = freshKey("free_");
    for (let i = 0; i < 5; i++) await handle(request(key), e);
    const lines = log.mock.calls.map((c) => String(c[0]));
    const denied = lines.map((l) => JSON.parse(l)).filter((l) => l.event === "denied");
    // Two denials (both from the deny cache), one line: the second came within a second of the first.
    expect(denied).toEqual([
      {
        event: "denied",
        reason: "cached_denial",
        plan: "free",
        key_id: await keyId(`key:${key}`),
        cost: 1,
        violated: ["per-minute"],
        retry_after_ms: expect.any(Number),
        suppressed: 0,
      },
    ]);
    for (const l of lines) expect(l).not.toContain(key);
  });
});

describe("times an operator gives", () => {
  it("beyond 2100 are refused with 400 and nothing is saved; up to it they are kept and readable", async () => {
    const e = adminEnv();
    const key = freshKey();
    for (const [path, body] of [
      ["block", { key, until: "9999-12-31T23:59:59Z" }],
      ["block", { key, until: 9_000_000_000_000_000 }],
      ["block", { key, until: Date.UTC(2100, 0, 1) + 1 }],
      ["override", { key, limits: [{ limit: 9, window: "1m" }], expires: "9999-12-31T23:59:59Z" }],
    ] as const) {
      const res = await handle(adminRequest(path, body), e);
      expect((await problemBody(res)).detail).toMatch(/: at most 2100-01-01T00:00:00\.000Z \(4102444800000 ms\), got /);
      expect(res.status).toBe(400);
    }
    const status = await admin(e, "status", { key });
    expect(status).toMatchObject({ block: null, override: null, stored: false });
    const edge = await admin(e, "block", { key, until: "2100-01-01T00:00:00Z" });
    expect(edge.block).toMatchObject({ until: "2100-01-01T00:00:00.000Z", until_ms: Date.UTC(2100, 0, 1) });
    expect((await handle(request(key), e)).status).toBe(429);
  });

  it("a far-future block stored by an earlier version still reads, and still refuses", async () => {
    const e = adminEnv();
    const key = freshKey();
    await admin(e, "block", { key, for: "1h" });
    // An earlier version saved any safe integer (and toISOString threw on it: every status was 503).
    const stub = env.LIMITER.getByName(`key:${key}`);
    await runInDurableObject(stub, (_: RateLimiter, state) => {
      state.storage.sql.exec("UPDATE meta SET v = ? WHERE k = 'block_until'", String(9_000_000_000_000_000));
    });
    await evictDurableObject(stub);
    const s = await admin(e, "status", { key });
    expect(s.block).toMatchObject({ until: null, until_ms: 9_000_000_000_000_000 });
    const refused = await handle(request(key), e);
    expect(refused.status).toBe(429);
    expect((await problemBody(refused)).detail).toMatch(/blocked by an operator/);
  });
});

describe("the admin token outside the admin path", () => {
  /** Everything the origin has seen, as text: the token must be in none of it. */
  const origin = async () => JSON.stringify(await (await fetch(`${originUrl}/__arrivals`)).json());

  it.each([
    ["Authorization: Bearer", "/v1/anything", { authorization: `Bearer ${TOKEN}` }],
    ["x-api-key", "/v1/anything", { "x-api-key": TOKEN }],
    ["x-api-key among others", "/v1/anything", { "x-api-key": `k_other, ${TOKEN}` }],
    ["a header of its own", "/v1/anything", { "x-admin": ` ${TOKEN} ` }],
    ["a cookie", "/v1/anything", { cookie: `theme=dark; admin=${TOKEN}` }],
    ["Authorization of another scheme", "/v1/anything", { authorization: `Token ${TOKEN}` }],
    ["?token=", `/v1/anything?token=${TOKEN}`, {}],
    ["?api_key=, encoded", `/v1/anything?x=1&api_key=${encodeURIComponent(TOKEN)}`, {}],
    ["Authorization: Bearer, near the admin path", "/__LIMITER/status", { authorization: `Bearer ${TOKEN}` }],
    ["x-api-key, near the admin path", "/__limiter", { "x-api-key": TOKEN }],
  ] as const)("carried in %s: 403, never proxied, never counted", async (_, path, headers) => {
    const e = adminEnv();
    const probe = crypto.randomUUID();
    const key = freshKey();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const res = await handle(
      new Request(`https://limiter.example${path}`, {
        method: "POST",
        headers: { "x-api-key": key, ...headers, "x-probe": probe },
        body: "{}",
      }),
      e,
    );
    const body = await problemBody(res);
    expect(res.status).toBe(403);
    expect(body.detail).toBe(
      "This request carries the admin token, so it is never proxied; the admin API lives under /__limiter/.",
    );
    const seen = await origin();
    expect(seen).not.toContain(probe);
    expect(seen).not.toContain(TOKEN);
    // Not counted against the key it also carried.
    expect((await handle(request(key), e)).headers.get("RateLimit")).toBe('"per-minute";r=4;t=60');
    const lines = warn.mock.calls.map((c) => String(c[0]));
    expect(lines.filter((l) => l.includes('"admin_token_elsewhere"'))).toHaveLength(1);
    for (const l of lines) expect(l).not.toContain(TOKEN);
  });

  it("a value that is only close to the token is ordinary traffic: limited and proxied", async () => {
    const e = adminEnv();
    for (const near of [`${TOKEN}x`, TOKEN.slice(0, -1), TOKEN.toUpperCase(), `x${TOKEN}`]) {
      const res = await handle(request(freshKey(), `/v1/near?token=${encodeURIComponent(near)}`), e);
      expect(res.status, near).toBe(200);
      expect((await res.json()) as { url: string }).toMatchObject({ url: expect.stringContaining("/v1/near?token=") });
    }
  });

  it.each(["/%5F%5Flimiter/status", "//__limiter/status", "/__limiter;/status"])(
    "%s is the admin path once normalised: the admin API answers it, with or without the token",
    async (path) => {
      const post = (headers: Record<string, string>) =>
        handle(new Request(`https://limiter.example${path}`, { method: "POST", headers, body: "{}" }), adminEnv());
      expect((await problemBody(await post({ authorization: `Bearer ${TOKEN}` }))).detail).toMatch(/^key: required/);
      expect((await post({ "x-api-key": freshKey() })).status).toBe(401);
    },
  );

  it("without the token a near-miss of the admin path is ordinary traffic: limited and proxied", async () => {
    const key = freshKey();
    for (const path of ["/__LIMITER/status", "/__limiter"]) {
      const res = await handle(request(key, path, { method: "POST", body: "{}" }), adminEnv());
      expect(res.status, path).toBe(200);
    }
    expect(await arrivalsFor(key)).toHaveLength(2);
  });
});

describe("routes", () => {
  it("status shows the plan's routes with what is used of each; reset forgets them too", async () => {
    const e = adminEnv(
      {},
      { ...RL, routes: [{ name: "search", path: "/v1/search", limits: [{ limit: 2, window: "1m" }] }] },
    );
    const key = freshKey();
    await handle(request(key, "/v1/search"), e);
    const status = await admin(e, "status", { key });
    expect(status.routes).toEqual([
      {
        name: "search",
        method: null,
        path: "/v1/search",
        limits: [
          {
            name: "search",
            limit: 2,
            window_ms: 60_000,
            tick_ms: 1,
            used: 1,
            remaining: 1,
            reset_ms: expect.any(Number),
            source: "route",
          },
        ],
      },
    ]);
    expect((status.limits as { used: number }[])[0]?.used).toBe(1);
    const reset = await admin(e, "reset", { key });
    expect((reset.routes as { limits: { used: number }[] }[])[0]?.limits[0]?.used).toBe(0);
    expect(await admin(e, "status", { key: freshKey("live_") })).not.toHaveProperty("routes");
  });
});

describe("an address's guess budget and an account's budget", () => {
  const SECRET = "admin-test-key-secret";
  const GUESSING = {
    plans: [
      {
        name: "pro",
        key_prefix: "live_",
        signed: true,
        limits: [{ limit: 100, window: "1m" }],
        account: { limits: [{ limit: 3, window: "1m" }] },
      },
    ],
    guesses: { limits: [{ limit: 3, window: "1m" }], penalty: { after: 2, within: "1m", block: "10m" } },
    leases: false,
  };
  const guessEnv = (rl: unknown = GUESSING) => adminEnv({ KEY_SECRET: SECRET }, rl);
  const PRO = { name: "pro", keyPrefix: "live_" };
  const from = (ip: string, key: string) => request(key, "/", { headers: { "cf-connecting-ip": ip } });
  const freshIp = () => {
    const b = crypto.getRandomValues(new Uint8Array(3));
    return `10.${b[0]}.${b[1]}.${b[2]}`;
  };
  const forged = () => `live_${crypto.randomUUID().replaceAll("-", "")}.${"A".repeat(43)}`;
  /** A customer's own key with its signature's last character changed: what a mistyped paste sends. */
  const mistyped = async () => {
    const { key } = await mintKey({ KEY_SECRET: SECRET }, PRO);
    return `${key.slice(0, -1)}${key.endsWith("A") ? "B" : "A"}`;
  };
  type Limits = { name: string; used: number; remaining: number }[];

  it("an address blocked for guessing: the operator sees the penalty, unblocks and resets it, and the customer there gets its 401 code again", async () => {
    const e = guessEnv();
    const ip = freshIp();
    // Three forged keys are 401s; the fourth is over the address's guess budget, the fifth completes its penalty.
    for (let i = 0; i < 3; i++) expect((await handle(from(ip, forged()), e)).status).toBe(401);
    expect((await problemBody(await handle(from(ip, forged()), e))).violated_policies).toEqual(["guess-per-minute"]);
    expect((await problemBody(await handle(from(ip, forged()), e))).reason).toBe("penalty");
    // A legitimate customer behind the same address, with a mistyped key: the address's penalty, not its 401.
    const customer = await mistyped();
    const penalised = await handle(from(ip, customer), e);
    expect([penalised.status, (await problemBody(penalised)).reason]).toEqual([429, "penalty"]);

    // {"ip"} is the address's ip budget, not configured here: the answer points at {"guess"}.
    const wrong = await handle(adminRequest("unblock", { ip }), e);
    expect(wrong.status).toBe(422);
    expect((await problemBody(wrong)).detail).toMatch(/RATE_LIMIT\.ip is not set.*\{"guess": "…"\}/);

    const status = await admin(e, "status", { guess: ip });
    expect(status).toMatchObject({ key_id: await keyId(`guess:${ip}`), plan: "guess", stored: true });
    expect(status.block).toMatchObject({ cause: "penalty" });
    expect((status.limits as Limits).map((l) => [l.name, l.used, l.remaining])).toEqual([["guess-per-minute", 3, 0]]);
    // The operator's call names the address by key_id only.
    const logged = vi.spyOn(console, "log").mockImplementation(() => {});
    const unblocked = await admin(e, "unblock", { guess: ip });
    expect(unblocked.block).toBeNull();
    const line = logged.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>).at(-1);
    expect(line).toMatchObject({ event: "admin", action: "unblock", key_id: status.key_id, plan: "guess" });
    expect(JSON.stringify(logged.mock.calls)).not.toContain(ip);
    // Unblocked, the address's window still holds its three guesses: a refused key is over the budget, not a penalty.
    const over = await problemBody(await handle(from(ip, customer), e));
    expect([over.reason, over.violated_policies]).toEqual(["over_limit", ["guess-per-minute"]]);
    // Reset empties the window (and the refusal just counted): the customer's mistyped key gets its own 401 code.
    const reset = await admin(e, "reset", { guess: ip });
    expect([(reset.limits as Limits)[0]?.used, reset.refusals]).toEqual([0, 0]);
    const fixed = await handle(from(ip, customer), e);
    expect([fixed.status, (await problemBody(fixed)).code]).toEqual([401, "key_signature"]);
    // And the operator can block an address's guesses outright, as any budget.
    await admin(e, "block", { guess: ip, for: "1h" });
    expect((await problemBody(await handle(from(ip, customer), e))).reason).toBe("blocked");
  });

  it("an account's budget: status counts every key of the account, reset and block apply to all of them", async () => {
    const e = guessEnv();
    const account = `acme-${crypto.randomUUID()}`;
    const keys = await Promise.all([0, 1].map(() => mintKey({ KEY_SECRET: SECRET }, PRO, { account })));
    const ip = freshIp();
    expect((await handle(from(ip, keys[0]?.key ?? ""), e)).status).toBe(200);
    expect((await handle(from(ip, keys[1]?.key ?? ""), e)).status).toBe(200);
    expect((await handle(from(ip, keys[0]?.key ?? ""), e)).status).toBe(200);
    const refused = await problemBody(await handle(from(ip, keys[1]?.key ?? ""), e));
    expect(refused.violated_policies).toEqual(["account-per-minute"]);

    // "plan" may be left out: one plan has account limits.
    const status = await admin(e, "status", { account });
    expect((await admin(e, "status", { account, plan: "pro" })).key_id).toBe(status.key_id);
    expect(status).toMatchObject({ key_id: await keyId(`acct.pro:${account}`), plan: "account", block: null });
    expect((status.limits as Limits).map((l) => [l.name, l.used, l.remaining])).toEqual([["account-per-minute", 3, 0]]);
    expect(((await admin(e, "reset", { account })).limits as Limits)[0]?.used).toBe(0);
    expect((await handle(from(ip, keys[1]?.key ?? ""), e)).status).toBe(200);
    await admin(e, "block", { account, for: "1h" });
    const blocked = await problemBody(await handle(from(ip, keys[0]?.key ?? ""), e));
    expect([blocked.reason, blocked.detail]).toEqual(["blocked", expect.stringMatching(/^This account is blocked/)]);
    expect((await admin(e, "unblock", { account })).block).toBeNull();
    expect((await handle(from(ip, keys[0]?.key ?? ""), e)).status).toBe(200);
  });

  it("the page offers every subject the API takes, and sends the one chosen with its plan", async () => {
    const html = await (await handle(new Request("https://limiter.example/__limiter/"), adminEnv())).text();
    const select = html.slice(html.indexOf('<select name="subject">'), html.indexOf("</select>"));
    expect([...select.matchAll(/<option value="(\w+)"/g)].map((m) => m[1])).toEqual([...SUBJECTS]);
    expect(html).toContain('<input name="plan"');
    expect(html).toContain("const s = { [kind]: form.elements.key.value.trim() };");
  });

  it("a guess or account budget that is not configured, a bad account or plan: each named", async () => {
    const e = guessEnv();
    const problem = async (body: unknown, status: number) => {
      const res = await handle(adminRequest("status", body), e);
      expect(res.status, JSON.stringify(body)).toBe(status);
      return (await problemBody(res)).detail;
    };
    expect(await problem({ guess: "nope" }, 400)).toBe('guess: expected an IPv4 or IPv6 address, got "nope"');
    expect(await problem({ guess: "192.0.2.1", plan: "pro" }, 400)).toMatch(/^plan: only with ip .* or account/);
    expect(await problem({ guess: "192.0.2.1", account: "acme" }, 400)).toBe(
      "guess, account: give one of key, ip, anonymous, guess, account",
    );
    expect(await problem({ account: "two words" }, 400)).toMatch(/^account: expected an account name/);
    expect(await problem({ account: "acme", plan: "gone" }, 400)).toBe('plan: no plan named "gone"');
    const two = {
      ...GUESSING,
      plans: [
        ...GUESSING.plans,
        {
          name: "team",
          key_prefix: "team_",
          limits: [{ limit: 5, window: "1m" }],
          account: { limits: [{ limit: 9, window: "1m" }] },
        },
        { name: "solo", key_prefix: "solo_", limits: [{ limit: 5, window: "1m" }] },
      ],
    };
    const several = await handle(adminRequest("status", { account: "acme" }), guessEnv(two));
    expect((await problemBody(several)).detail).toBe(
      "plan: required with account, as several plans have account limits (pro, team)",
    );
    const team = await handle(adminRequest("status", { account: "acme", plan: "team" }), guessEnv(two));
    expect(((await team.json()) as { limits: Limits }).limits[0]?.name).toBe("account-per-minute");
    const solo = await handle(adminRequest("status", { account: "acme", plan: "solo" }), guessEnv(two));
    expect([solo.status, (await problemBody(solo)).detail]).toEqual([422, 'plan: plan "solo" has no account limits.']);
    // Without a signed plan and without `guesses`, no address has a guess budget, and without account limits no account.
    const plain = adminEnv();
    const none = await handle(adminRequest("status", { guess: "192.0.2.1" }), plain);
    expect([none.status, (await problemBody(none)).detail]).toEqual([
      422,
      expect.stringMatching(/^guess: RATE_LIMIT\.guesses is not set/),
    ]);
    const noAccount = await handle(adminRequest("status", { account: "acme" }), plain);
    expect([noAccount.status, (await problemBody(noAccount)).detail]).toEqual([
      422,
      expect.stringMatching(/^account: no plan has account limits/),
    ]);
  });
});

describe("status after a settled cost's debt", () => {
  it("counts every unit recorded in the window: used over the limit, nothing remaining, in limits and quotas", async () => {
    const rl = {
      limits: [
        { limit: 3000, window: "1m" },
        { limit: 5000, period: "day" },
      ],
      leases: false,
      costs: [
        {
          method: "POST",
          path: "/__special/llm/anthropic",
          reserve: { json: "max_tokens", input: 0 },
          settle: "anthropic",
        },
      ],
    };
    const e = adminEnv({}, rl);
    const key = freshKey();
    const h = background();
    // A reservation of 2,000; the answer reports 4,005 (a prompt of 4,000 and 5 tokens): 2,005 of debt.
    const asked = request(key, "/__special/llm/anthropic?tokens=5&prompt=4000", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ max_tokens: 2000 }),
    });
    const res = await handle(asked, e, h);
    expect(res.status, await res.clone().text()).toBe(200);
    await res.arrayBuffer();
    await h.settled();
    const status = await admin(e, "status", { key });
    const [minute] = status.limits as { used: number; remaining: number }[];
    const [day] = status.quotas as { used: number; remaining: number }[];
    expect([minute?.used, minute?.remaining]).toEqual([4005, 0]);
    expect([day?.used, day?.remaining]).toEqual([4005, 995]);
    // The chart holds the same units: those in the window so far, and those recorded ahead of now.
    const history = status.history as { counts: number[]; ahead: number };
    expect(history.counts.reduce((a, b) => a + b, history.ahead)).toBe(4005);
  });
});
