// One limiter shared by several Workers (docs/configuration.md, "Coming from the Workers rate limiting binding"): a
// library limiter's `LimiterService` (test/e2e/worker/service-entry.ts, built by wrangler) and two consumer Workers
// bound to it with `entrypoint = "LimiterService"`, in one workerd through Miniflare's API. Every call crosses a real
// service binding: the consumers share the key's limit exactly, a result one got is refunded or settled by the other,
// and bad input arrives as the library's errors with nothing counted.
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RateLimitResult } from "../../src/client/result.ts";
import type { ServiceResult } from "../../src/library/limiter.ts";
import type { Settled } from "../../src/pipeline/index.ts";
import { type Bundle, buildBundle } from "../support/workers.ts";

/** A consumer: runs the call its request names on `env.LIMITS` and answers its value, or the error as it arrived. */
const CONSUMER = `export default {
  async fetch(request, env) {
    const { call, args } = await request.json();
    try {
      return Response.json({ value: await env.LIMITS[call](...args) });
    } catch (e) {
      return Response.json({ error: { type: e.constructor.name, name: e.name, message: e.message, code: e.code ?? null } });
    }
  },
};`;

interface Arrived {
  readonly type: string;
  readonly name: string;
  readonly message: string;
  readonly code: string | null;
}

let bundle: Bundle;
let mf: Miniflare;

beforeAll(async () => {
  bundle = await buildBundle("test/e2e/worker/wrangler.service.toml");
  const consumer = (name: string) => ({
    name,
    modules: true,
    script: CONSUMER,
    compatibilityDate: bundle.compatibilityDate,
    serviceBindings: { LIMITS: { name: "limiter", entrypoint: "LimiterService" } },
  });
  mf = new Miniflare(
    convertV4MiniflareOptions({
      handleStructuredLogs: () => {},
      workers: [
        consumer("consumer-a"),
        consumer("consumer-b"),
        {
          name: "limiter",
          modules: true,
          scriptPath: bundle.script,
          modulesRoot: bundle.script.replace(/\/[^/]+$/, ""),
          compatibilityDate: bundle.compatibilityDate,
          durableObjects: { LIMITER: { className: bundle.className, useSQLite: true } },
        },
      ],
    }),
  );
  await mf.ready;
});

afterAll(async () => {
  await mf?.dispose();
  await bundle?.cleanup();
});

/** What consumer `worker` got for `LIMITS[call](...args)`. */
async function via<T>(worker: string, call: string, ...args: unknown[]): Promise<{ value?: T; error?: Arrived }> {
  const w = await mf.getWorker(worker);
  const response = await w.fetch("http://consumer/", { method: "POST", body: JSON.stringify({ call, args }) });
  return (await response.json()) as { value?: T; error?: Arrived };
}

const limit = async (worker: string, options: unknown) => (await via<ServiceResult>(worker, "limit", options)).value;
const remaining = async (key: string) =>
  (await via<RateLimitResult>("consumer-a", "peek", { key })).value?.limits[0]?.remaining;

describe("a LimiterService shared by two Workers", () => {
  it("grants a key's limit exactly once across both, whichever Worker asks", async () => {
    const key = `team_${crypto.randomUUID()}`;
    const successes: boolean[] = [];
    for (let i = 0; i < 4; i++) {
      successes.push((await limit("consumer-a", { key }))?.success ?? false);
      successes.push((await limit("consumer-b", { key }))?.success ?? false);
    }
    expect(successes).toEqual([true, true, true, true, true, false, false, false]);
    // The whole result comes with `success`: the wait is exact and the limit named.
    const refused = await limit("consumer-b", { key });
    expect(refused).toMatchObject({ success: false, allowed: false, plan: "team" });
    expect(refused?.retryAfterMs).toBeGreaterThan(0);
    expect(await remaining(key)).toBe(0);
  });

  it("charges cost (or the platform's delta) in full: a request that does not fit is refused", async () => {
    const key = `team_${crypto.randomUUID()}`;
    expect((await limit("consumer-a", { key, cost: 3 }))?.success).toBe(true);
    expect((await limit("consumer-b", { key, delta: 3 }))?.success).toBe(false);
    expect((await limit("consumer-b", { key, delta: 2 }))?.success).toBe(true);
    expect(await remaining(key)).toBe(0);
  });

  it("refunds and settles a result in the other Worker, once", async () => {
    const key = `team_${crypto.randomUUID()}`;
    const got = await limit("consumer-a", { key, cost: 2 });
    expect(got?.success).toBe(true);
    expect(await remaining(key)).toBe(3);
    expect((await via<boolean>("consumer-b", "refund", got)).value).toBe(true);
    expect((await via<boolean>("consumer-a", "refund", got)).value).toBe(false);
    expect(await remaining(key)).toBe(5);
    // A reservation of 4 that cost 1: 3 units go back.
    const reserved = await limit("consumer-b", { key, cost: 4 });
    expect(await remaining(key)).toBe(1);
    const settled = await via<Settled>("consumer-a", "settle", reserved, 1);
    expect(settled.value).toMatchObject({ settled: true, reserved: 4, actual: 1, returned: 3, debt: 0 });
    expect((await via<Settled>("consumer-b", "settle", reserved, 1)).value?.settled).toBe(false);
    expect(await remaining(key)).toBe(4);
  });

  it("rejects bad input with the library's errors and counts nothing", async () => {
    const key = `team_${crypto.randomUUID()}`;
    const cases: [unknown, Partial<Arrived>][] = [
      [{}, { type: "TypeError", message: "key: expected a non-empty string" }],
      [{ key: "" }, { type: "TypeError", message: "key: expected a non-empty string" }],
      [
        { key, cost: 0 },
        { type: "RangeError", message: "cost: expected a whole number ≥ 1, got 0" },
      ],
      [
        { key, cost: 1.5 },
        { type: "RangeError", message: "cost: expected a whole number ≥ 1, got 1.5" },
      ],
      [{ key, cost: 2, delta: 1 }, { type: "RangeError" }],
      // The runtime carries a LimiterError's name and code, not its class.
      [{ key: `free_${key}` }, { type: "Error", name: "LimiterError", code: "no_plan" }],
    ];
    for (const [options, arrived] of cases) {
      expect((await via("consumer-a", "limit", options)).error, JSON.stringify(options)).toMatchObject(arrived);
    }
    expect((await via("consumer-b", "peek", { key, cost: -1 })).error).toMatchObject({ type: "RangeError" });
    const granted = await limit("consumer-a", { key });
    expect((await via("consumer-b", "settle", granted, 1.5)).error).toMatchObject({ type: "RangeError" });
    const altered = { ...granted, handle: { ...granted?.handle, grants: [{ units: -1 }] } };
    expect((await via("consumer-b", "refund", altered)).error).toMatchObject({ type: "TypeError" });
    // Only the one good call counted.
    expect(await remaining(key)).toBe(4);
  });
});
