// Settled costs inside workerd against the real object (docs/configuration.md, "Settled costs"): the library's
// settle() — unused units back to the windows, credits and usage, once, from a copy in another limiter; debt over the
// limit with its log line; a leased grant settled into its lease; settleWhenEnded() — and the hono middleware's
// c.get("rateLimitCost"): settle() from the handler, report() from a streamed body settled when it ends (also when
// the client cancels it), no report keeping the reservation.
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type RateLimitVariables, rateLimit } from "../../src/hono.ts";
import { createLimiter, type Limiter, type RateLimitResult } from "../../src/index.ts";
import { freshKey, spyLimiter } from "./helpers.ts";

afterEach(() => {
  vi.restoreAllMocks();
});

const perMinute = (limit: number) => ({ limits: [{ limit, window: "1m" as const }] });

/** The key's units left in its first limit, as the object counts them. */
const remaining = async (limiter: Limiter, key: string) => (await limiter.peek(env, key)).limits[0]?.remaining;

/** An execution context whose background work the test awaits. */
function context() {
  const pending: Promise<unknown>[] = [];
  return {
    ctx: { waitUntil: (p: Promise<unknown>) => void pending.push(p), passThroughOnException: () => {}, props: {} },
    done: async () => {
      while (pending.length > 0) await pending.shift();
    },
  };
}

describe("settle()", () => {
  it("gives the unused units back once, from a copy in another limiter; the meters count the settled cost", async () => {
    const settings = {
      ...perMinute(20),
      leases: false as const,
      name: "settle-meters",
      credits: { initial: 100 },
      usage: true as const,
    };
    const limiter = createLimiter(settings);
    const key = freshKey();
    const r = await limiter.limit(env, key, { cost: 12 });
    expect(await remaining(limiter, key)).toBe(8);
    const elsewhere = createLimiter(settings);
    const copy = JSON.parse(JSON.stringify(r)) as RateLimitResult;
    expect(await elsewhere.settle(env, copy, 5)).toEqual({
      settled: true,
      reserved: 12,
      actual: 5,
      returned: 7,
      debt: 0,
    });
    expect(await remaining(limiter, key)).toBe(15);
    expect((await limiter.peek(env, key)).credits?.balance).toBe(95);
    const [day] = await limiter.usage(env, key, { period: "day" });
    expect(day).toMatchObject({ requests: 1, cost: 5 });
    // Once: settled again or refunded, nothing more.
    expect((await limiter.settle(env, r, 0)).settled).toBe(false);
    expect(await limiter.refund(env, r)).toBe(false);
    expect(await remaining(limiter, key)).toBe(15);
    await expect(limiter.settle(env, r, -1)).rejects.toThrow(/^actual: /);
  });

  it("records a cost beyond the reservation as debt at the settle's time, over the limit: the key waits", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const limiter = createLimiter({ ...perMinute(10), leases: false });
    const key = freshKey();
    const r = await limiter.limit(env, key, { cost: 6 });
    expect(await limiter.settle(env, r, 14)).toEqual({ settled: true, reserved: 6, actual: 14, returned: 0, debt: 8 });
    const line = JSON.parse(String(warn.mock.calls.at(-1)?.[0]));
    expect(line).toMatchObject({ event: "settle_debt", reserved: 6, actual: 14, debt: 8 });
    expect(line.key_id).toMatch(/^[0-9a-f]{12}$/);
    // 14 in a window of 10: refused until the reservation's 6 have left it (the debt's 8 then leave room for 2).
    const peeked = await limiter.peek(env, key);
    expect(peeked).toMatchObject({ allowed: false });
    expect(peeked.limits[0]?.remaining).toBe(0);
    expect(peeked.at + peeked.retryAfterMs).toBe(r.at + 60_000);
  });

  it("a leased grant settles into its lease while it lasts: no object call, the unused units spent again", async () => {
    const spy = spyLimiter();
    const e = { LIMITER: spy.namespace };
    const { ctx, done } = context();
    const limiter = createLimiter(perMinute(10_000));
    const key = freshKey();
    let leased: RateLimitResult | null = null;
    for (let i = 0; i < 50 && !leased; i++) {
      const r = await limiter.limit(e, key, { ctx, cost: 4 });
      if (r.reason === "leased") leased = r;
      await done();
    }
    expect(leased).not.toBeNull();
    const held = () =>
      limiter.pipeline.client.leases.get(limiter.identify(key).name)?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    const before = held();
    spy.calls.length = 0;
    expect(await limiter.settle(e, leased as RateLimitResult, 1)).toMatchObject({ settled: true, returned: 3 });
    expect(held()).toBe(before + 3);
    expect(spy.calls).toEqual([]);
  });

  it("settleWhenEnded(): settled to what the body's end reports; null keeps the reservation", async () => {
    const limiter = createLimiter({ ...perMinute(20), leases: false });
    const { ctx, done } = context();
    const key = freshKey();
    const r = await limiter.limit(env, key, { cost: 10 });
    let actual: number | null = null;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        controller.enqueue(new TextEncoder().encode("tokens"));
        actual = 4;
        controller.close();
      },
    });
    const res = limiter.settleWhenEnded(env, r, new Response(body), { ctx, actual: () => actual });
    expect(await res.text()).toBe("tokens");
    await done();
    expect(await remaining(limiter, key)).toBe(16);
    const kept = await limiter.limit(env, key, { cost: 5 });
    await limiter.settleWhenEnded(env, kept, new Response("x"), { ctx, actual: () => null }).text();
    await done();
    expect(await remaining(limiter, key)).toBe(11);
  });
});

type AppEnv = { Bindings: { LIMITER: typeof env.LIMITER }; Variables: RateLimitVariables };

describe("the hono middleware: c.get('rateLimitCost')", () => {
  const bindings = { LIMITER: env.LIMITER };

  function app(reportCost: boolean) {
    const limiter = createLimiter({ ...perMinute(30), leases: false });
    const a = new Hono<AppEnv>();
    a.use("/llm/*", rateLimit<AppEnv>({ limiter, cost: (c) => Number(c.req.query("reserve") ?? 1), reportCost }));
    // Settled by the handler once it knows.
    a.post("/llm/now", async (c) => c.json(await c.get("rateLimitCost").settle(Number(c.req.query("actual")))));
    // Streamed: the usage is known at the stream's end.
    a.post("/llm/stream", (c) => {
      const cost = c.get("rateLimitCost");
      const actual = c.req.query("actual");
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          controller.enqueue(new TextEncoder().encode(`data: chunk ${sent}\n\n`));
          if (++sent < 3) return;
          if (actual !== undefined) cost.report(Number(actual));
          controller.close();
        },
      });
      return c.body(body, 200, { "content-type": "text/event-stream" });
    });
    a.post("/llm/partial", (c) => {
      const cost = c.get("rateLimitCost");
      cost.report(2); // what the first chunk used
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          controller.enqueue(new TextEncoder().encode(`data: chunk ${sent++}\n\n`));
          if (sent > 1) cost.report(2 + sent);
        },
      });
      return c.body(body);
    });
    a.post("/llm/misuse", (c) => {
      try {
        c.get("rateLimitCost").report(1);
        return c.text("reported");
      } catch (e) {
        return c.text(String(e), 500);
      }
    });
    return { a, limiter };
  }

  const post = (a: Hono<AppEnv>, path: string, key: string, ctx: ReturnType<typeof context>["ctx"]) =>
    a.request(path, { method: "POST", headers: { "x-api-key": key } }, bindings, ctx);

  it("the handler settles through it: the unused units back, the result answered", async () => {
    const { a, limiter } = app(false);
    const { ctx } = context();
    const key = freshKey();
    const res = await post(a, "/llm/now?reserve=20&actual=6", key, ctx);
    expect(await res.json()).toEqual({ settled: true, reserved: 20, actual: 6, returned: 14, debt: 0 });
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=10;t=60'); // as decided, before the settle
    expect(await remaining(limiter, key)).toBe(24);
    // report() needs reportCost: a TypeError saying so.
    const misuse = await post(a, "/llm/misuse", key, ctx);
    expect(misuse.status).toBe(500);
    expect(await misuse.text()).toMatch(/^TypeError: report\(\): set reportCost: true/);
  });

  it("a streamed response is settled to what the handler reported when its body ended; none: the reservation stands", async () => {
    const { a, limiter } = app(true);
    const { ctx, done } = context();
    const key = freshKey();
    const res = await post(a, "/llm/stream?reserve=20&actual=7", key, ctx);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    // Not settled before the body has ended.
    expect(await remaining(limiter, key)).toBe(10);
    expect(await res.text()).toBe("data: chunk 0\n\ndata: chunk 1\n\ndata: chunk 2\n\n");
    await done();
    expect(await remaining(limiter, key)).toBe(23);
    // No report: the reservation stands.
    const unreported = await post(a, "/llm/stream?reserve=5", key, ctx);
    await unreported.text();
    await done();
    expect(await remaining(limiter, key)).toBe(18);
  });

  it("a client that cancels mid-stream: settled to the last report before it went", async () => {
    const { a, limiter } = app(true);
    const { ctx, done } = context();
    const key = freshKey();
    const res = await post(a, "/llm/partial?reserve=20", key, ctx);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await reader.read();
    await reader.cancel();
    await done();
    // Reported 2, then 4 with the second chunk (and maybe 5 with a third pulled ahead): never the reservation's 20.
    const left = (await remaining(limiter, key)) as number;
    expect(30 - left).toBeGreaterThanOrEqual(4);
    expect(30 - left).toBeLessThanOrEqual(6);
  });
});
