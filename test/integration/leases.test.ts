// Leases through the Worker inside workerd: the real object and a scripted one. What crosses to the
// object (one call per many grants, single flight, returns), what the client sees (headers, statuses),
// and the deadline on object calls.
import { describe, expect, it, vi } from "vitest";
import type { Decision } from "../../src/core/index.ts";
import { createProxy, type ProxyApp } from "../../src/proxy/app.ts";
import { problemOf } from "../support/problem.ts";
import {
  arrivalsFor,
  background,
  countingLimiter,
  decision,
  envWith,
  fakeLimiter,
  freshKey,
  handle,
  proxy,
  request,
} from "./helpers.ts";

const perMinute = (limit: number, extra: object = {}) => ({ limits: [{ limit, window: "1m" }], ...extra });

describe("leases against the real object", () => {
  it("serves many grants of a key driven to its limit from leases, and never more than the limit", async () => {
    const limiter = countingLimiter();
    const e = envWith(perMinute(300), { LIMITER: limiter.namespace });
    const key = freshKey();
    const hooks = background();
    const statuses: number[] = [];
    const reasons: string[] = [];
    for (let i = 0; i < 400; i++) {
      const r = await handle(request(key), e, { ...hooks, onDecision: (d) => reasons.push(d.reason) });
      statuses.push(r.status);
      await r.arrayBuffer();
    }
    await hooks.settled();
    const ok = statuses.filter((s) => s === 200).length;
    expect(ok).toBe(300);
    expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);
    expect(await arrivalsFor(key)).toHaveLength(300);
    // The object saw a fraction of the requests: leases carried many grants, though at most half of
    // the headroom is ever leased out, and less as the key nears its limit.
    expect(reasons.filter((r) => r === "leased").length).toBeGreaterThan(120);
    expect(limiter.calls()).toBeLessThan(200);
  });

  it("with leases off, every request asks the object", async () => {
    const limiter = countingLimiter();
    const e = envWith(perMinute(300, { leases: false }), { LIMITER: limiter.namespace });
    const key = freshKey();
    for (let i = 0; i < 20; i++) expect((await handle(request(key), e)).status).toBe(200);
    expect(limiter.calls()).toBe(20);
  });

  it("keeps RateLimit honest: remaining counts down across leased grants", async () => {
    const e = envWith(perMinute(1000));
    const key = freshKey();
    const hooks = background();
    const remaining: number[] = [];
    for (let i = 0; i < 30; i++) {
      const r = await handle(request(key), e, hooks);
      remaining.push(Number(/r=(\d+)/.exec(r.headers.get("RateLimit") ?? "")?.[1]));
    }
    await hooks.settled();
    // One isolate: what it shows is exactly what the key has left, also while it spends a newer lease that
    // expires before an older one (leases are spent in order of expiry).
    expect(remaining).toEqual(Array.from({ length: 30 }, (_, i) => 1000 - (i + 1)));
  });
});

describe("leases against a scripted object", () => {
  /** A key this isolate has seen often enough to lease for (its rate estimate is warm). */
  async function warm(e: ReturnType<typeof envWith>, key: string, through: ProxyApp = proxy, n = 20): Promise<void> {
    for (let i = 0; i < n; i++) await through.handle(request(key), e);
    // The scripted object granted no lease while warming up, so the isolate stopped asking for a
    // while (leases.ts, quietUntil); these tests start from a key that asks.
    const entry = through.clientFor(e)?.leases.get(`key:${key}`);
    if (entry) entry.quietUntil = 0;
  }

  it("asks one lease for many concurrent requests: they wait for the call in flight, which asked enough for them", async () => {
    let release: (d: Decision) => void = () => {};
    const limiter = fakeLimiter((call, ask) => {
      if (call <= 20) return Promise.resolve(decision({ allowed: true }));
      if (ask.leaseUnits === 0) return Promise.resolve(decision({ allowed: true }));
      return new Promise<Decision>((resolve) => {
        release = resolve;
      });
    });
    const e = envWith(perMinute(100_000), { LIMITER: limiter.namespace });
    const key = freshKey();
    // A stopped clock: the requests wait for the call in flight however long the test takes to answer it.
    const time = clocked();
    await warm(e, key, time);
    expect(limiter.calls()).toBe(20);
    // The requests wait on their own timers: until the answer is due (a round trip of 1 s after the call went
    // out), and no longer than two round trips. The answer comes well before it is due.
    time.clientFor(e)?.leases.observeRtt(1000);
    const burst = Array.from({ length: 30 }, () => time.handle(request(key), e));
    await vi.waitFor(() => expect(limiter.calls()).toBe(21));
    const now = time.now();
    release(
      decision({
        allowed: true,
        now,
        lease: { units: 100, lifetimeMs: 1000, recordedAt: [now + 1000] },
        limits: [{ remaining: 99_000, resetMs: 60_000, exceeded: false }],
      }),
    );
    const statuses = await Promise.all(burst.map(async (p) => (await p).status));
    expect(statuses).toEqual(Array(30).fill(200));
    // One call for the whole burst; any later one is a background refill (cost 0), none a request's own.
    expect(limiter.asks.slice(20).filter((a) => a.cost > 0)).toHaveLength(1);
    expect(limiter.asks[20]?.leaseUnits).toBeGreaterThan(0);
  });

  /** A proxy whose clock the test moves: the leases' lifetimes run on it, not on the machine's. */
  function clocked(start = Date.now()): ProxyApp & { advance(ms: number): void; now(): number } {
    let now = start;
    return { ...createProxy({ clock: () => now }), advance: (ms) => (now += ms), now: () => now };
  }

  it("gives back exactly what an expired lease did not use, once", async () => {
    const time = clocked();
    const limiter = fakeLimiter((call) => {
      const now = time.now();
      const lease = call === 21 ? { units: 50, lifetimeMs: 1000, recordedAt: [now + 1000] } : null;
      return Promise.resolve(decision({ allowed: true, now, lease }));
    });
    const e = envWith(perMinute(100_000), { LIMITER: limiter.namespace });
    const key = freshKey();
    await warm(e, key, time);
    const hooks = background();
    expect((await time.handle(request(key), e, hooks)).status).toBe(200); // call 21: the request and the lease
    for (let i = 0; i < 3; i++) expect((await time.handle(request(key), e, hooks)).status).toBe(200); // 3 leased
    expect(limiter.calls()).toBe(21);
    // Past the lease's lifetime: the next request finds it expired and gives back the 47 left, once.
    time.advance(1000);
    expect((await time.handle(request(key), e, hooks)).status).toBe(200);
    expect((await time.handle(request(key), e, hooks)).status).toBe(200);
    await hooks.settled();
    expect(limiter.returns).toEqual([{ recordedAt: [expect.any(Number)], units: 47 }]);
  });

  it("never spends a lease past its lifetime, even when units are left", async () => {
    const time = clocked();
    const limiter = fakeLimiter((call) => {
      const now = time.now();
      const lease = call === 21 ? { units: 1000, lifetimeMs: 1000, recordedAt: [now + 1000] } : null;
      return Promise.resolve(decision({ allowed: call <= 21, now, lease, blockedUntil: now }));
    });
    const e = envWith(perMinute(100_000), { LIMITER: limiter.namespace });
    const key = freshKey();
    await warm(e, key, time);
    const reasons: string[] = [];
    const hooks = { onDecision: (r: { reason: string }) => reasons.push(r.reason) };
    expect((await time.handle(request(key), e, hooks)).status).toBe(200);
    // Inside the lifetime less its margin (1 + 1000/50 ms): spent from the lease.
    time.advance(1000 - 22);
    expect((await time.handle(request(key), e, hooks)).status).toBe(200);
    // Once the lease has expired (the object refuses from now on), the request must ask the object: refused.
    time.advance(1);
    expect((await time.handle(request(key), e, hooks)).status).toBe(429);
    expect(reasons).toEqual(["granted", "leased", "over_limit"]);
  });
});

describe("the deadline on object calls", () => {
  const hang = () => new Promise<Decision>(() => {});

  it("closed: a slow object gets the request a 503 after object_timeout", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const limiter = fakeLimiter(hang);
    const reasons: string[] = [];
    const key = freshKey();
    const e = envWith(perMinute(5, { object_timeout: "50ms" }), { LIMITER: limiter.namespace });
    const response = await handle(request(key), e, { onDecision: (d) => reasons.push(d.reason) });
    expect(response.status).toBe(503);
    expect((await problemOf(response, 503)).title).toBe("Service Unavailable");
    expect(reasons).toEqual(["limiter_timeout"]);
    expect(await arrivalsFor(key)).toEqual([]);
    expect(JSON.parse(String(error.mock.calls[0]?.[0]))).toMatchObject({
      event: "limiter_unavailable",
      reason: "limiter_timeout",
    });
  });

  it("open: a slow object lets the request through after object_timeout", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const limiter = fakeLimiter(hang);
    const key = freshKey();
    const e = envWith(perMinute(5, { object_timeout: "50ms", failure_mode: "open" }), { LIMITER: limiter.namespace });
    expect((await handle(request(key), e)).status).toBe(200);
    expect(await arrivalsFor(key)).toHaveLength(1);
  });
});
