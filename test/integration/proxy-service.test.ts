// The proxy Worker's LimiterService (src/proxy/index.ts): its RATE_LIMIT served to other Workers over RPC, reached here
// as they reach it, through the Worker's named entrypoint — the same client and objects as its HTTP requests, bad
// input rejected with the library's errors and nothing counted.
import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { LimiterServiceCalls } from "../../src/index.ts";
import { freshKey, request } from "./helpers.ts";

/** The Worker's `LimiterService` entrypoint, as a service binding to it is typed. */
const service = (exports as unknown as { LimiterService: LimiterServiceCalls }).LimiterService;

describe("the proxy's LimiterService", () => {
  it("serves its RATE_LIMIT's plans: limit() with success, peek() consuming nothing, refund() once", async () => {
    // wrangler.toml: keys starting test_ get 10 a minute.
    const key = freshKey("test_");
    const first = await service.limit({ key, cost: 4 });
    expect(first).toMatchObject({ success: true, allowed: true, plan: "test", cost: 4 });
    expect((await service.peek({ key })).limits[0]).toMatchObject({ limit: 10, remaining: 6 });
    expect(await service.limit({ key, cost: 7 })).toMatchObject({ success: false, reason: "over_limit" });
    expect(await service.refund(first)).toBe(true);
    expect(await service.refund(first)).toBe(false);
    expect(await service.limit({ key, cost: 10 })).toMatchObject({ success: true });
  });

  it("shares the key's objects with the proxy's HTTP requests", async () => {
    const key = freshKey("test_");
    expect(await service.limit({ key, cost: 9 })).toMatchObject({ success: true });
    const response = await exports.default.fetch(request(key));
    expect(response.status).toBe(200);
    expect(response.headers.get("RateLimit")).toBe('"per-minute";r=0;t=60');
    await response.body?.cancel();
    expect(await service.limit({ key })).toMatchObject({ success: false });
    expect((await exports.default.fetch(request(key))).status).toBe(429);
  });

  it("rejects bad input with the library's errors and counts nothing", async () => {
    const key = freshKey("test_");
    const bad: [unknown, RegExp][] = [
      [{}, /key: expected a non-empty string/],
      [{ key, cost: 1.5 }, /cost: expected a whole number/],
      [{ key, cost: 0 }, /cost: expected a whole number/],
    ];
    // (A malformed key's LimiterError takes the same path; left out here because workerd prints an RPC rejection whose
    // stack has left the test pool's wrapper as uncaught: test/support/runtime-traces.ts.)
    for (const [options, message] of bad) {
      const error = await service.limit(options as { key: string }).catch((e: unknown) => e);
      expect(error, JSON.stringify(options)).toBeInstanceOf(Error);
      expect((error as Error).message, JSON.stringify(options)).toMatch(message);
    }
    expect((await service.peek({ key })).limits[0]?.remaining).toBe(10);
  });
});
