// The key's object fails, hangs and recovers under the Worker inside workerd (the real object behind a binding that
// can be made to fail or hang), with failure_mode = "local": requests are decided alone without waiting on an object
// known down, proxied to the real origin with their headers, and what was granted alone is recorded by the object
// when it answers again. And `jurisdiction`: the limiter's objects, and the admin API's, in the jurisdiction named.
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { MAX_SENDS } from "../../src/client/policy.ts";
import { ConfigError, createLimiter, type RateLimitResult } from "../../src/index.ts";
import { createProxy } from "../../src/proxy/app.ts";
import type { LlmReport } from "../support/llm.ts";
import {
  arrivalsFor,
  background,
  envWith,
  freshKey,
  handle,
  originUrl,
  request,
  spyLimiter,
  type WorkerEnv,
} from "./helpers.ts";

type Mode = "up" | "fail" | "hang";

/** The real LIMITER namespace behind a switch: up (forwarded), failing every call, or hanging every call. */
function flakyLimiter(): { namespace: WorkerEnv["LIMITER"]; set: (m: Mode) => void; calls: string[] } {
  let mode: Mode = "up";
  const { namespace, calls } = spyLimiter(() => {
    if (mode === "fail") return Promise.reject(new Error("Durable Object is overloaded."));
    if (mode === "hang") return new Promise(() => {});
    return undefined;
  });
  return {
    namespace,
    set: (m) => {
      mode = m;
    },
    calls,
  };
}

describe('failure_mode = "local" under a binding that fails, hangs and recovers', () => {
  it("the library: decides alone, calls nothing known down, and the object records the grants made alone", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    vi.spyOn(console, "log").mockImplementation(() => {});
    const flaky = flakyLimiter();
    let now = Date.now();
    const limiter = createLimiter({
      limits: [{ limit: 6, window: "1h" }],
      leases: false,
      failure_mode: "local",
      object_timeout: "100ms",
      binding: "FLAKY",
      clock: () => now,
    });
    const e = { FLAKY: flaky.namespace };
    const key = freshKey();
    const bg = background();
    const limit = () => limiter.limit(e, key, { ctx: bg });
    expect((await limit()).reason).toBe("granted");
    expect((await limit()).reason).toBe("granted");

    flaky.set("fail");
    const alone = [await limit(), await limit(), await limit()];
    expect(alone.map((r) => [r.allowed, r.reason])).toEqual([
      [true, "limiter_fallback"],
      [true, "limiter_fallback"],
      [true, "limiter_fallback"],
    ]);
    expect(Object.fromEntries(limiter.headers(alone[2] as RateLimitResult))).toMatchObject({
      ratelimit: '"per-hour";r=1;t=3600',
    });
    // One failed call (sent MAX_SENDS times, with its id); the rest were decided without one.
    const failed = Array<string>(MAX_SENDS).fill("take");
    expect(flaky.calls).toEqual(["take", "take", ...failed]);

    // Due a probe, which hangs: the request does not wait for it; the probe fails at its deadline, in the background.
    flaky.set("hang");
    now += 1000;
    expect((await limit()).reason).toBe("limiter_fallback");
    expect(flaky.calls).toEqual(["take", "take", ...failed, "recover"]);
    await bg.settled();
    // Full, alone: 2 granted by the object + 4 alone.
    expect(await limit()).toMatchObject({ allowed: false, reason: "limiter_fallback" });

    // Back up: the next probe (2 s after the failed one) carries the four grants made alone; the object records them.
    flaky.set("up");
    now += 2000;
    await limit();
    await bg.settled();
    // Then the failed take's id is claimed (a settle with it, answered: the take may have been applied).
    expect(flaky.calls.slice(MAX_SENDS + 3)).toEqual(["recover", "settle"]);
    const peeked = await limiter.peek(e, key);
    expect(peeked).toMatchObject({ reason: "over_limit", allowed: false });
    expect(peeked.limits[0]?.remaining).toBe(0);
    expect((await limit()).reason).toBe("over_limit");
  });

  it("the proxy: proxied alone with its headers, refused alone with 429 reason limiter_fallback, nothing over", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    vi.spyOn(console, "log").mockImplementation(() => {});
    const flaky = flakyLimiter();
    const points: AnalyticsEngineDataPoint[] = [];
    const e = envWith(
      { limits: [{ limit: 4, window: "1h" }], leases: false, failure_mode: "local", object_timeout: "100ms" },
      {
        LIMITER: flaky.namespace,
        LIMITER_ANALYTICS: { writeDataPoint: (p) => void points.push(p ?? {}) } as AnalyticsEngineDataset,
      },
    );
    const key = freshKey();
    expect((await handle(request(key, "/a"), e)).status).toBe(200);
    flaky.set("hang");
    const statuses: number[] = [];
    let last: Response | null = null;
    for (let i = 0; i < 5; i++) {
      last = await handle(request(key, `/b${i}`), e);
      statuses.push(last.status);
      if (i < 4) await last.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    const body = (await last?.json()) as { reason: string; retry_after: number };
    expect(body.reason).toBe("limiter_fallback");
    expect(last?.headers.get("RateLimit")).toMatch(/^"per-hour";r=0;t=\d+$/);
    // Only the first hanging call waited (its deadline); the others made none.
    expect(flaky.calls).toEqual(["take", "take"]);
    // One data point per decision: the reason and allowed/denied of each.
    expect(points.map((p) => [p.blobs?.[0], p.blobs?.[2]])).toEqual([
      ["granted", "allowed"],
      ...Array.from({ length: 3 }, () => ["limiter_fallback", "allowed"]),
      ...Array.from({ length: 2 }, () => ["limiter_fallback", "denied"]),
    ]);
    expect((await arrivalsFor(key)).map((a) => a.url)).toEqual(["/a", "/b0", "/b1", "/b2"]);
  });

  it("settled costs decided alone: four streams reserving 104 and reporting 900 leave 3,600 in the window once the object answers", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    vi.spyOn(console, "log").mockImplementation(() => {});
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const flaky = flakyLimiter();
    let now = Date.now();
    const proxy = createProxy({ clock: () => now });
    const token = "alone-settle-token";
    const path = "/__special/llm/openai-chat";
    const e = envWith(
      {
        limits: [{ limit: 10_000, window: "1h" }],
        leases: false,
        failure_mode: "local",
        object_timeout: "100ms",
        costs: [{ method: "POST", path, reserve: { json: "max_tokens", input: 0 }, settle: "openai" }],
      },
      { LIMITER: flaky.namespace, ADMIN_TOKEN: token },
    );
    const key = freshKey();
    const bg = background();
    const body = JSON.stringify({ stream: true, stream_options: { include_usage: true }, max_tokens: 104 });
    flaky.set("fail");
    for (let i = 0; i < 4; i++) {
      const init = { method: "POST", headers: { "content-type": "application/json" }, body };
      const res = await proxy.handle(request(key, `${path}?tokens=900&prompt=0`, init), e, bg);
      expect(res.status).toBe(200);
      await res.text();
    }
    await bg.settled();
    const reported = (await (await fetch(`${originUrl}/__special/llm-reports?key=${key}`)).json()) as LlmReport[];
    expect(reported.map((r) => r.reported)).toEqual([900, 900, 900, 900]);
    // The first request's call failed (sent MAX_SENDS times, with its id); the other three were decided without one.
    const failed = Array<string>(MAX_SENDS).fill("take");
    expect(flaky.calls).toEqual(failed);
    // Back up: the request due a probe (itself decided alone) sends the grants made alone, their debt with them.
    flaky.set("up");
    now += 1000;
    expect((await proxy.handle(request(key, "/after"), e, bg)).status).toBe(200);
    await bg.settled();
    expect(flaky.calls).toEqual([...failed, "recover", "settle"]);
    const status = await proxy.handle(
      new Request("https://limiter.example/__limiter/status", {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ key }),
      }),
      e,
    );
    const { limits } = (await status.json()) as { limits: { used: number }[] };
    expect(limits[0]?.used).toBe(4 * 900);
    // Nothing was kept: every reservation settled to what its stream reported.
    expect(warn.mock.calls.map((c) => String(c[0])).filter((l) => l.includes("reservation_kept"))).toEqual([]);
  });

  it("closed: after one failed call, 503 at once without another while the object is known down", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const flaky = flakyLimiter();
    const e = envWith(
      { limits: [{ limit: 4, window: "1h" }], leases: false, object_timeout: "100ms" },
      { LIMITER: flaky.namespace },
    );
    flaky.set("fail");
    const key = freshKey();
    for (let i = 0; i < 5; i++) expect((await handle(request(key), e)).status).toBe(503);
    expect(flaky.calls).toEqual(Array(MAX_SENDS).fill("take"));
    expect(await arrivalsFor(key)).toEqual([]);
  });
});

/**
 * The real LIMITER namespace with jurisdictions emulated (local workerd has none): `jurisdiction(j)` is a namespace
 * whose objects are the real ones named `<j>|<name>`, so a test sees which jurisdiction each call went to.
 */
function jurisdictionLimiter(): { namespace: WorkerEnv["LIMITER"]; asked: string[] } {
  const real = (env as unknown as WorkerEnv).LIMITER;
  const asked: string[] = [];
  const namespace = {
    getByName: (name: string) => real.getByName(name),
    jurisdiction: (j: string) => {
      asked.push(j);
      return { getByName: (name: string) => real.getByName(`${j}|${name}`) };
    },
  } as unknown as WorkerEnv["LIMITER"];
  return { namespace, asked };
}

const HOUR = [{ limit: 3, windowMs: 3_600_000 }];

describe("jurisdiction", () => {
  it("the proxy and the admin API reach the key's objects in the jurisdiction named, and no others", async () => {
    const real = (env as unknown as WorkerEnv).LIMITER;
    const placed = jurisdictionLimiter();
    const rl = { limits: [{ limit: 3, window: "1h" }], leases: false, jurisdiction: "eu" };
    const e = envWith(rl, { ADMIN_TOKEN: "t0ken-for-tests", LIMITER: placed.namespace });
    const key = freshKey();
    for (let i = 0; i < 2; i++) expect((await handle(request(key), e)).status).toBe(200);
    const status = await handle(
      new Request("https://limiter.example/__limiter/status", {
        method: "POST",
        headers: { authorization: "Bearer t0ken-for-tests", "content-type": "application/json" },
        body: JSON.stringify({ key }),
      }),
      e,
    );
    expect(status.status).toBe(200);
    const state = (await status.json()) as { limits: { remaining: number }[] };
    expect(state.limits[0]?.remaining).toBe(1);
    expect(new Set(placed.asked)).toEqual(new Set(["eu"]));
    expect((await real.getByName(`eu|key:${key}`).peek(HOUR, 1)).limits[0]?.remaining).toBe(1);
    // The object outside the jurisdiction never saw the key.
    expect((await real.getByName(`key:${key}`).peek(HOUR, 1)).limits[0]?.remaining).toBe(3);
  });

  it("the library: createLimiter's jurisdiction places its objects there", async () => {
    const real = (env as unknown as WorkerEnv).LIMITER;
    const placed = jurisdictionLimiter();
    const limiter = createLimiter({ limits: [{ limit: 3, window: "1h" }], leases: false, jurisdiction: "fedramp" });
    const key = freshKey();
    expect((await limiter.limit({ LIMITER: placed.namespace }, key)).reason).toBe("granted");
    const name = `${limiter.name}/key:${key}`;
    expect((await real.getByName(`fedramp|${name}`).peek(HOUR, 1)).limits[0]?.remaining).toBe(2);
    expect((await real.getByName(name).peek(HOUR, 1)).limits[0]?.remaining).toBe(3);
  });

  it("local workerd has no jurisdictions: a clear settings error, never a silent fallback outside it", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const key = freshKey();
    const rl = { limits: [{ limit: 3, window: "1h" }], jurisdiction: "eu" };
    const response = await handle(request(key), envWith(rl));
    expect(response.status).toBe(500);
    expect((await response.json()) as { detail: string }).toMatchObject({
      title: "Rate limiter misconfigured",
      detail: expect.stringMatching(
        /^jurisdiction: the runtime refused "eu" for env\.LIMITER \(Jurisdiction restrictions are not implemented in workerd\.\); local workerd/,
      ),
    });
    expect(error).toHaveBeenCalled();
    expect(await arrivalsFor(key)).toEqual([]);
    const limiter = createLimiter({ limits: [{ limit: 3, window: "1h" }], jurisdiction: "us" });
    await expect(limiter.limit(env, key)).rejects.toThrow(ConfigError);
  });
});
