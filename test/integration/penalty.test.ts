// Penalties through the proxy and the middleware: a key that keeps hammering after its 429s is blocked for `block`
// from the refusal that completes the count, counting the refusals its isolate answered from the deny cache too (the
// refusal that could complete it goes to the object, carrying them); the penalty is answered from the deny cache while
// it lasts; operators see and lift it.
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { rateLimit } from "../../src/hono.ts";
import { createProxy } from "../../src/proxy/app.ts";
import { problemOf } from "../support/problem.ts";
import { envWith, freshKey, handle, request } from "./helpers.ts";

describe("penalty", () => {
  it("refusals answered here and at the object add up; the block is a 429 with reason penalty, from the cache too", async () => {
    const now = Date.now();
    const proxy = createProxy({ clock: () => now });
    const TOKEN = "penalty-token";
    const e = envWith(
      {
        limits: [{ limit: 1, window: "1m" }],
        leases: false,
        penalty: { after: 4, within: "1m", block: "10m" },
      },
      { ADMIN_TOKEN: TOKEN },
    );
    const key = freshKey();
    const reasons: string[] = [];
    const send = async () => {
      const res = await proxy.handle(request(key), e, { onDecision: (r) => reasons.push(r.reason) });
      return res;
    };
    expect((await send()).status).toBe(200);
    // The grant said nothing is left: the next requests are refused here, from the deny cache.
    for (let i = 0; i < 3; i++) expect((await problemOf(await send(), 429)).reason).toBe("cached_denial");
    expect(reasons).toEqual(["granted", "cached_denial", "cached_denial", "cached_denial"]);
    // The fourth refusal would complete the count: it goes to the object with the three answered here, and with
    // its own refusal they are four. The block starts with it, not with the next call a second later.
    const blocked = await send();
    const body = await problemOf(blocked, 429);
    expect(body).toMatchObject({ reason: "penalty" });
    expect(body.detail).toMatch(/^This API key is blocked for a while after repeated requests over its limit/);
    expect(Number(blocked.headers.get("Retry-After"))).toBeGreaterThan(590);
    // While it lasts the isolate answers it itself.
    expect((await problemOf(await send(), 429)).reason).toBe("penalty");
    expect(reasons.slice(-2)).toEqual(["penalty", "penalty"]);

    const admin = (action: string) =>
      proxy.handle(
        new Request(`https://limiter.example/__limiter/${action}`, {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({ key }),
        }),
        e,
      );
    const status = (await (await admin("status")).json()) as { block: { cause: string } | null };
    expect(status.block?.cause).toBe("penalty");
    expect((await admin("unblock")).status).toBe(200);
    const lifted = (await (await admin("status")).json()) as { block: unknown };
    expect(lifted.block).toBeNull();
  });

  it("the refusal that completes the count starts the block, the deny cache answering one, through the proxy and the middleware", async () => {
    const settings = {
      limits: [{ limit: 3, window: "2s" as const }],
      penalty: { after: 2, within: "1m" as const, block: "6s" as const },
    };
    /** Six requests in a row: each one's status, or a refusal's reason and Retry-After. */
    const six = async (send: () => Promise<Response>) => {
      const out: (string | number)[] = [];
      for (let i = 0; i < 6; i++) {
        const res = await send();
        out.push(res.status === 200 ? 200 : `${(await problemOf(res, 429)).reason} ${res.headers.get("Retry-After")}`);
      }
      return out;
    };
    // Three grants; the first refusal (at the object, or from the deny cache the last grant filled); the second
    // completes the count and gets the block, as does the next.
    const expected = [200, 200, 200, expect.stringMatching(/^(over_limit|cached_denial) 2$/), "penalty 6", "penalty 6"];
    const e = envWith(settings);
    const key = freshKey();
    expect(await six(() => handle(request(key), e))).toEqual(expected);

    const app = new Hono<{ Bindings: { LIMITER: typeof env.LIMITER } }>();
    app.use("/api/*", rateLimit(settings));
    app.get("/api/hello", (c) => c.text("hello"));
    const other = freshKey();
    const get = () => app.request("/api/hello", { headers: { "x-api-key": other } }, { LIMITER: env.LIMITER });
    expect(await six(async () => await get())).toEqual(expected);
  });

  it("refusals sent together: those after the one that completes the count learn of the block, as one at a time", async () => {
    const now = Date.now();
    const proxy = createProxy({ clock: () => now });
    const e = envWith({ limits: [{ limit: 1, window: "1m" }], penalty: { after: 5, within: "1m", block: "10m" } });
    const key = freshKey();
    expect((await proxy.handle(request(key), e)).status).toBe(200);
    // Ten refusals at once: four answered from the deny cache, the fifth completes the count at the object — and the
    // five after it, sent while that call is out, must not be answered from the cache with the window's shorter wait
    // (a client obeying it would come back into the block).
    const answers = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const res = await proxy.handle(request(key), e);
        return `${(await problemOf(res, 429)).reason} ${Number(res.headers.get("Retry-After")) > 590 ? "block" : "window"}`;
      }),
    );
    expect(answers).toEqual([...Array(4).fill("cached_denial window"), ...Array(6).fill("penalty block")]);
  });

  it("a plan with penalty = false is never penalised", async () => {
    let now = Date.now();
    const proxy = createProxy({ clock: () => now });
    const e = envWith({
      limits: [{ limit: 1, window: "1m" }],
      leases: false,
      penalty: { after: 1, within: "1m", block: "10m" },
      plans: [{ name: "srv", key_prefix: "srv_", limits: [{ limit: 1, window: "1m" }], penalty: false }],
    });
    const key = freshKey("srv_");
    await proxy.handle(request(key), e);
    for (let i = 0; i < 3; i++) {
      now += 1_001;
      expect((await problemOf(await proxy.handle(request(key), e), 429)).reason).toBe("over_limit");
    }
  });
});
