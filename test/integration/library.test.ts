// The library inside workerd against the real object: createLimiter's limit/peek/refund/reset, what its
// results and headers say, two limiters side by side, the injected clock, and its errors.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ConfigError, createLimiter, LimiterError, type RateLimitResult, refusal } from "../../src/index.ts";
import { freshKey, spyLimiter } from "./helpers.ts";

const perMinute = (limit: number) => ({ limits: [{ limit, window: "1m" as const }] });

describe("limit()", () => {
  it("grants up to the limit, then refuses with the exact wait: the first grant's time plus the window", async () => {
    const limiter = createLimiter({ ...perMinute(3), leases: false });
    const key = freshKey();
    const granted: RateLimitResult[] = [];
    for (let i = 0; i < 3; i++) granted.push(await limiter.limit(env, key));
    expect(granted.map((r) => [r.allowed, r.reason, r.limits[0]?.remaining])).toEqual([
      [true, "granted", 2],
      [true, "granted", 1],
      [true, "granted", 0],
    ]);
    // The third grant used the limit up: the object said until when, and the deny cache answers.
    const refused = await limiter.limit(env, key);
    expect(refused).toMatchObject({ allowed: false, reason: "cached_denial", plan: "default", cost: 1 });
    const freeAt = (granted[0] as RateLimitResult).at + 60_000;
    expect(refused.at + refused.retryAfterMs).toBeLessThanOrEqual(freeAt);
    expect(refused.limits).toEqual([
      { name: "per-minute", limit: 3, windowMs: 60_000, remaining: 0, resetMs: refused.retryAfterMs, exceeded: true },
    ]);
    // The object's own answer is exact: the first grant's time plus the window.
    const peeked = await limiter.peek(env, key);
    expect(peeked.at + peeked.retryAfterMs).toBe(freeAt);
    expect(Object.fromEntries(limiter.headers(refused))).toEqual({
      "ratelimit-policy": '"per-minute";q=3;w=60',
      ratelimit: `"per-minute";r=0;t=${Math.ceil(refused.retryAfterMs / 1000)}`,
      "retry-after": String(Math.ceil(refused.retryAfterMs / 1000)),
      "retry-after-ms": String(refused.retryAfterMs),
    });
    // setHeaders puts the same fields straight onto a response's own headers, keeping what it had.
    const response = new Response("no", { status: 429, headers: { "content-type": "text/plain" } });
    limiter.setHeaders(refused, response.headers);
    expect(Object.fromEntries(response.headers)).toEqual({
      ...Object.fromEntries(limiter.headers(refused)),
      "content-type": "text/plain",
    });
    // A fetched response's headers are immutable: the runtime's TypeError comes through.
    const fetched = Response.redirect("https://example.com/", 302);
    expect(() => limiter.setHeaders(refused, fetched.headers)).toThrow(TypeError);
  });

  it("charges cost to every limit; a cost over a limit can never pass", async () => {
    const limiter = createLimiter({
      limits: [
        { limit: 10, window: "1s" },
        { limit: 15, window: "1m" },
      ],
    });
    const key = freshKey();
    expect((await limiter.limit(env, key, { cost: 8 })).limits.map((l) => l.remaining)).toEqual([2, 7]);
    const never = await limiter.limit(env, key, { cost: 11 });
    expect(never).toMatchObject({ allowed: false, reason: "too_costly", retryAfterMs: Number.POSITIVE_INFINITY });
    expect(never.limits.map((l) => l.exceeded)).toEqual([true, false]);
    expect(limiter.headers(never).has("Retry-After")).toBe(false);
    // No wait helps: a client's automatic retry is told not to try.
    expect(limiter.headers(never).get("x-should-retry")).toBe("false");
    await expect(limiter.limit(env, key, { cost: 0 })).rejects.toThrow(RangeError);
  });

  it("plans by key prefix, an unlimited plan asks nothing", async () => {
    const spy = spyLimiter();
    const limiter = createLimiter({
      ...perMinute(100),
      plans: [
        { name: "live", key_prefix: "live_", unlimited: true },
        { name: "test", key_prefix: "test_", limits: [{ limit: 1, window: "1m" }] },
      ],
    });
    const e = { LIMITER: spy.namespace };
    expect(await limiter.limit(e, freshKey("live_"))).toMatchObject({ allowed: true, reason: "unlimited", limits: [] });
    expect(spy.calls).toEqual([]);
    const key = freshKey("test_");
    expect((await limiter.limit(e, key)).plan).toBe("test");
    expect((await limiter.limit(e, key)).allowed).toBe(false);
  });

  it("checks keys by the proxy's rule, and names a missing binding", async () => {
    const limiter = createLimiter({ ...perMinute(10), key: { pattern: "sk_[a-z0-9]+" } });
    const status = async (p: Promise<unknown>) =>
      p.then(
        () => 0,
        (e: unknown) => (e instanceof LimiterError ? e.code : String(e)),
      );
    expect(await status(limiter.limit(env, "sk_a b"))).toBe("malformed_key");
    expect(await status(limiter.limit(env, `sk_${"a".repeat(300)}`))).toBe("malformed_key");
    expect(await status(limiter.limit(env, "pk_abc"))).toBe("invalid_key");
    await expect(limiter.limit({}, "sk_abc")).rejects.toThrow(/^env\.LIMITER: no Durable Object binding/);
    await expect(createLimiter({ ...perMinute(1), binding: "OTHER" }).limit(env, "k")).rejects.toThrow(ConfigError);
  });
});

describe("peek()", () => {
  it("consumes nothing, and says what a request would get", async () => {
    const limiter = createLimiter({ ...perMinute(2), leases: false });
    const key = freshKey();
    for (let i = 0; i < 3; i++) {
      expect(await limiter.peek(env, key)).toMatchObject({ allowed: true, reason: "peek", retryAfterMs: 0 });
    }
    const first = await limiter.limit(env, key);
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(1);
    await limiter.limit(env, key);
    const full = await limiter.peek(env, key);
    expect(full).toMatchObject({ allowed: false, reason: "over_limit" });
    expect(full.at + full.retryAfterMs).toBe(first.at + 60_000);
    expect((await limiter.peek(env, key, { cost: 3 })).reason).toBe("too_costly");
  });
});

describe("refund()", () => {
  it("gives back exactly the grant's units, once; a refusal has nothing to give back", async () => {
    const limiter = createLimiter({ ...perMinute(5), leases: false });
    const key = freshKey();
    const r = await limiter.limit(env, key, { cost: 3 });
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(2);
    expect(await limiter.refund(env, r)).toBe(true);
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(5);
    expect(await limiter.refund(env, r)).toBe(false);
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(5);
    const refused = await limiter.limit(env, key, { cost: 6 });
    expect(await limiter.refund(env, refused)).toBe(false);
  });

  it("works from a copy of the result (structuredClone, a spread, JSON), once whichever copy comes first", async () => {
    const limiter = createLimiter({ ...perMinute(5), leases: false });
    const key = freshKey();
    const r = await limiter.limit(env, key, { cost: 2 });
    expect(structuredClone(r)).toEqual(r);
    expect(await limiter.refund(env, structuredClone(r))).toBe(true);
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(5);
    expect(await limiter.refund(env, { ...r })).toBe(false);
    expect(await limiter.refund(env, r)).toBe(false);
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(5);
    // Kept as JSON (a queue message, KV) and refunded by another limiter — another isolate's client.
    const kept = JSON.stringify(await limiter.limit(env, key, { cost: 3 }));
    const elsewhere = createLimiter({ ...perMinute(5), leases: false });
    expect((await elsewhere.peek(env, key)).limits[0]?.remaining).toBe(2);
    expect(await elsewhere.refund(env, JSON.parse(kept) as RateLimitResult)).toBe(true);
    expect(await limiter.refund(env, JSON.parse(kept) as RateLimitResult)).toBe(false);
    expect((await limiter.peek(env, key)).limits[0]?.remaining).toBe(5);
    // A handle altered is refused, naming the field.
    const altered = await limiter.limit(env, key);
    const grants = altered.handle?.grants.map((g) => ({ ...g, units: -1 })) ?? [];
    await expect(limiter.refund(env, { ...altered, handle: { grants, slot: null } })).rejects.toThrow(
      /handle\.grants\[\]\.units/,
    );
  });

  it("a result carried into a later request is refunded there, by the object, once", async () => {
    const limiter = createLimiter({ ...perMinute(3), leases: false });
    const key = freshKey();
    const carried = structuredClone(await limiter.limit(env, key));
    await limiter.limit(env, key);
    await limiter.limit(env, key);
    expect((await limiter.limit(env, key)).allowed).toBe(false);
    // The next request refunds the first, and is then granted in its place.
    expect(await limiter.refund(env, carried)).toBe(true);
    expect((await limiter.limit(env, key)).allowed).toBe(true);
    expect(await limiter.refund(env, carried)).toBe(false);
    expect((await limiter.limit(env, key)).allowed).toBe(false);
  });

  it("a leased grant goes back to its lease while it lasts: no object call", async () => {
    const spy = spyLimiter();
    const e = { LIMITER: spy.namespace };
    const pending: Promise<unknown>[] = [];
    const ctx = { waitUntil: (p: Promise<unknown>) => void pending.push(p) };
    const limiter = createLimiter(perMinute(10_000));
    const key = freshKey();
    let leased: RateLimitResult | null = null;
    for (let i = 0; i < 50 && !leased; i++) {
      const r = await limiter.limit(e, key, { ctx });
      if (r.reason === "leased") leased = r;
      await Promise.all(pending);
    }
    expect(leased).not.toBeNull();
    const held = () =>
      limiter.pipeline.client.leases.get(limiter.identify(key).name)?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    const before = held();
    spy.calls.length = 0;
    expect(await limiter.refund(e, leased as RateLimitResult)).toBe(true);
    expect(held()).toBe(before + 1);
    expect(spy.calls).toEqual([]);
  });
});

describe("reset()", () => {
  it("forgets the key's grants", async () => {
    const limiter = createLimiter({ ...perMinute(3), leases: false });
    const key = freshKey();
    for (let i = 0; i < 3; i++) await limiter.limit(env, key);
    expect((await limiter.limit(env, key)).allowed).toBe(false);
    await limiter.reset(env, key);
    expect((await limiter.limit(env, key)).allowed).toBe(true);
  });
});

describe("two limiters", () => {
  it("with their own prefixes keep their own logs, deny caches and leases for the same key", async () => {
    const a = createLimiter({ ...perMinute(1), leases: false });
    const b = createLimiter({ ...perMinute(1), leases: false, prefix: "b" });
    const key = freshKey();
    expect((await a.limit(env, key)).allowed).toBe(true);
    expect((await a.limit(env, key)).allowed).toBe(false);
    expect(a.pipeline.client.denyCache.size).toBe(1);
    expect(b.pipeline.client.denyCache.size).toBe(0);
    expect((await b.limit(env, key)).allowed).toBe(true);
    expect(b.identify(key).name).toBe(`b/key:${key}`);
    expect(() => createLimiter({ ...perMinute(1), prefix: "a b" })).toThrow(/^createLimiter\.prefix: /);
  });
});

describe("the injected clock", () => {
  it("times the deny cache: cached denials until the recheck, then the object again", async () => {
    let now = Date.now();
    const spy = spyLimiter();
    const e = { LIMITER: spy.namespace };
    const limiter = createLimiter({ ...perMinute(1), leases: false, clock: () => now });
    const key = freshKey();
    // The grant uses the limit up: the object says so, and the deny cache answers from then on.
    expect((await limiter.limit(e, key)).reason).toBe("granted");
    const asked = spy.calls.length;
    for (let i = 0; i < 5; i++) expect((await limiter.limit(e, key)).reason).toBe("cached_denial");
    expect(spy.calls.length).toBe(asked);
    now += 1000; // DENY_RECHECK_MS
    expect((await limiter.limit(e, key)).reason).toBe("over_limit");
    expect(spy.calls.length).toBe(asked + 1);
  });
});

describe("settings", () => {
  it("are validated when the limiter is created, errors naming the field", () => {
    expect(() => createLimiter({ limits: [{ limit: 0, window: "1m" }] })).toThrow(
      /^createLimiter\.limits\[0\]\.limit: expected a positive integer, got 0$/,
    );
    expect(() => createLimiter({})).toThrow(/^createLimiter\.limits: required/);
    expect(() => createLimiter({ ...perMinute(1), origin_timeout: "1s" } as never)).toThrow(
      /^createLimiter\.origin_timeout: only the proxy reads this setting/,
    );
    expect(() => createLimiter({ ...perMinute(1), headers: "draft-5" as never })).toThrow(/^createLimiter\.headers: /);
    // A misspelt setting's error lists the limiter's own options too.
    expect(() => createLimiter({ ...perMinute(1), nmae: "api" } as never)).toThrow(
      /^createLimiter\.nmae: unknown setting; expected one of limits, .*, usage, guesses, name, binding, clock, verify, verifyCache$/,
    );
  });

  it("headers: the legacy form and none", async () => {
    const legacy = createLimiter({ ...perMinute(2), headers: "legacy", leases: false });
    const r = await legacy.limit(env, freshKey());
    expect(Object.fromEntries(legacy.headers(r))).toEqual({
      "x-ratelimit-limit": "2",
      "x-ratelimit-remaining": "1",
      "x-ratelimit-reset": String(Math.ceil((r.at + 60_000) / 1000)),
    });
    const none = createLimiter({ ...perMinute(2), headers: "none", leases: false });
    expect([...none.headers(await none.limit(env, freshKey()))]).toEqual([]);
  });
});

describe("decideRequest() and whenEnded(): an HTTP request as the proxy reads it", () => {
  it("reads the key, cost and path as configured; null for a request that costs nothing; errors with a code", async () => {
    const limiter = createLimiter({
      ...perMinute(5),
      costs: [
        { path: "/health", cost: 0 },
        { path: "/export", cost: 3 },
      ],
      leases: false,
    });
    const key = freshKey();
    const req = (path: string, headers: Record<string, string> = { "x-api-key": key }) =>
      new Request(`https://api.example${path}`, { headers });
    expect(await limiter.decideRequest(env, req("/health"))).toBeNull();
    const r = await limiter.decideRequest(env, req("/export"));
    expect(r).toMatchObject({ allowed: true, cost: 3, limits: [{ remaining: 2 }] });
    expect((await limiter.decideRequest(env, req("/x"), { key: () => key, cost: 2 }))?.limits[0]?.remaining).toBe(0);
    const code = (p: Promise<unknown>) => p.then(String, (e: unknown) => (e instanceof LimiterError ? e.code : e));
    expect(await code(limiter.decideRequest(env, req("/x", {})))).toBe("key_required");
    expect(await code(limiter.decideRequest(env, req("/a%2Fb")))).toBe("malformed_path");
    // Without costs rules or routes the path decides nothing, and is checked all the same.
    const plain = createLimiter({ ...perMinute(5), leases: false });
    expect(await code(plain.decideRequest(env, req("/a%2Fb")))).toBe("malformed_path");
    expect((await plain.decideRequest(env, req("/a/b?c=%2F", { "x-api-key": freshKey() })))?.allowed).toBe(true);
  });

  it("whenEnded releases a slot when the response has been read; a client that leaves releases it at once", async () => {
    const limiter = createLimiter({ ...perMinute(60), concurrency: 1, leases: false });
    const key = freshKey();
    const req = (signal?: AbortSignal) =>
      new Request("https://api.example/x", { headers: { "x-api-key": key }, ...(signal ? { signal } : {}) });
    const first = (await limiter.decideRequest(env, req())) as RateLimitResult;
    expect(first.handle?.slot).not.toBeNull();
    expect((await limiter.decideRequest(env, req()))?.reason).toBe("concurrency");
    const response = limiter.whenEnded(env, first, new Response("body"));
    expect(await response.text()).toBe("body");
    // The release is on its way once the body is read; a request after it finds the slot free (and gives it back).
    const freeSlot = async () => {
      const r = await limiter.decideRequest(env, req());
      if (r?.allowed) await limiter.release(env, r);
      return r?.reason;
    };
    await expect.poll(freeSlot).toBe("granted");
    const gone = new AbortController();
    const second = (await limiter.decideRequest(env, req(gone.signal))) as RateLimitResult;
    expect(second.allowed).toBe(true);
    expect(await freeSlot()).toBe("concurrency");
    gone.abort();
    await expect.poll(freeSlot).toBe("granted");
  });
});

describe("routes", () => {
  it("limit(…, { route }) checks the route's budget with the key's; peek and reset see both; an unknown name throws", async () => {
    const limiter = createLimiter({
      limits: [{ limit: 10, window: "1m" }],
      routes: [{ name: "search", limits: [{ limit: 2, window: "1m" }] }],
      plans: [{ name: "small", key_prefix: "s_", limits: [{ limit: 5, window: "1m" }], routes: [] }],
      leases: false,
    });
    const key = freshKey();
    const first = await limiter.limit(env, key, { route: "search" });
    expect(first).toMatchObject({ allowed: true, route: "search" });
    expect(first.limits.map((l) => [l.name, l.remaining])).toEqual([
      ["per-minute", 9],
      ["search", 1],
    ]);
    await limiter.limit(env, key, { route: "search" });
    const refused = await limiter.limit(env, key, { route: "search" });
    expect(refused).toMatchObject({ allowed: false, route: "search" });
    expect(refused.limits.filter((l) => l.exceeded).map((l) => l.name)).toEqual(["search"]);
    expect((await limiter.limit(env, key)).limits.map((l) => l.remaining)).toEqual([7]);
    expect((await limiter.peek(env, key, { route: "search" })).allowed).toBe(false);
    await limiter.reset(env, key);
    expect(await limiter.peek(env, key, { route: "search" })).toMatchObject({ allowed: true, reason: "peek" });
    // A plan without the route: the key's limits alone; a name no plan has: an error, not a silent pass.
    const small = await limiter.limit(env, freshKey("s_"), { route: "search" });
    expect(small).toMatchObject({ allowed: true, route: null });
    await expect(limiter.limit(env, key, { route: "serach" })).rejects.toThrow(
      'route: no plan has a route named "serach"',
    );
  });
});

describe('acquire() (docs/configuration.md, "Concurrency")', () => {
  it("the docs' example: two renders at once, the third refused at once; release() in a finally frees a slot", async () => {
    // As in the docs, with render() a job the test finishes.
    const limiter = createLimiter({ name: "render", limits: [{ limit: 60, window: "1m" }], concurrency: 2 });
    // The renders under way, by URL (a and b may start in either order).
    const jobs = new Map<string, () => void>();
    const render = (request: Request) => new Promise<string>((done) => jobs.set(request.url, () => done("rendered")));
    const pending: Promise<unknown>[] = [];
    const ctx = { waitUntil: (p: Promise<unknown>) => void pending.push(p) };
    const key = freshKey();
    async function fetch(request: Request): Promise<Response> {
      const slot = await limiter.acquire(env, key, { ctx });
      if (!slot.allowed) return refusal(slot);
      try {
        return new Response(await render(request));
      } finally {
        await limiter.release(env, slot);
      }
    }
    const a = fetch(new Request("https://w.example/a"));
    const b = fetch(new Request("https://w.example/b"));
    while (jobs.size < 2) await new Promise((r) => setTimeout(r, 1));
    const refused = await fetch(new Request("https://w.example/c"));
    expect(refused.status).toBe(429);
    expect(refused.headers.get("Retry-After")).toBe("1");
    expect((await refused.json()) as object).toMatchObject({ reason: "concurrency" });
    jobs.get("https://w.example/a")?.();
    expect(await (await a).text()).toBe("rendered");
    const c = fetch(new Request("https://w.example/c"));
    while (jobs.size < 3) await new Promise((r) => setTimeout(r, 1));
    jobs.get("https://w.example/b")?.();
    jobs.get("https://w.example/c")?.();
    expect([await (await b).text(), await (await c).text()]).toEqual(["rendered", "rendered"]);
  });

  it("limit() takes no slot; for a plan without concurrency release() does nothing; a slot releases once", async () => {
    const limiter = createLimiter({
      ...perMinute(60),
      concurrency: 1,
      plans: [{ name: "free", key_prefix: "free_", limits: [{ limit: 60, window: "1m" }], concurrency: false }],
    });
    const key = freshKey();
    const slot = await limiter.acquire(env, key);
    expect(slot.allowed).toBe(true);
    expect((await limiter.limit(env, key)).allowed).toBe(true);
    expect((await limiter.acquire(env, key)).reason).toBe("concurrency");
    expect(await limiter.release(env, slot)).toBe(true);
    expect(await limiter.release(env, slot)).toBe(false);
    const other = await limiter.acquire(env, freshKey("free_"));
    expect(other.allowed).toBe(true);
    expect(await limiter.release(env, other)).toBe(false);
  });
});
