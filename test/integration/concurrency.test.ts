// Concurrency through the proxy and the middleware (docs/configuration.md, "Concurrency"): at most N of a key's
// requests at the origin at once; the next is refused at once (429, reason concurrency, Retry-After 1) and never
// reaches the origin; a slot is held until the response body has been streamed to the end, the client cancelled
// it, or the origin failed; a WebSocket holds its slot until it closes. Generated request sequences check that the
// origin never sees more than N of a key's requests at once, and that a request is refused only when N are held.
import { env } from "cloudflare:workers";
import fc from "fast-check";
import { Hono } from "hono";
import { upgradeWebSocket } from "hono/cloudflare-workers";
import { describe, expect, it } from "vitest";
import type { LimitSpec } from "../../src/core/limits.ts";
import { type RateLimitVariables, rateLimit } from "../../src/hono.ts";
import { createLimiter } from "../../src/index.ts";
import { problemOf } from "../support/problem.ts";
import {
  arrivalsFor,
  background,
  envWith,
  freshKey,
  handle,
  nextMessage,
  openEcho,
  originUrl,
  request,
} from "./helpers.ts";

const minute: LimitSpec[] = [{ limit: 100, windowMs: 60_000, tickMs: 1 }];
/** Requests holding a slot now, as the object says: the proxy's key's (`key:<key>`), or an object by its name. */
const inFlight = async (key: string) =>
  (await env.LIMITER.getByName(key.includes(":") ? key : `key:${key}`).status(minute, 1)).inFlight;

const config = (n: number, extra: object = {}) => ({
  limits: [{ limit: 100, window: "1m" }],
  concurrency: n,
  ...extra,
});

/** Reads `n` bytes of a streamed body (the origin's first part), leaving the rest unread. */
async function readSome(reader: ReadableStreamDefaultReader<Uint8Array>, n: number): Promise<void> {
  let got = 0;
  while (got < n) {
    const { done, value } = await reader.read();
    if (done) throw new Error("the body ended early");
    got += value.length;
  }
}

/** Reads a body to its end. */
async function drain(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
  for (;;) if ((await reader.read()).done) return;
}

describe("concurrency through the proxy (a real, slow, streaming origin)", () => {
  it("N slow requests pass; the next is refused at once and never reaches the origin; the end of one frees a slot", async () => {
    const e = envWith(config(2));
    const key = freshKey();
    const gates = [crypto.randomUUID(), crypto.randomUUID()];
    const open = await Promise.all(
      gates.map(async (g) => {
        const h = background();
        const res = await handle(request(key, `/__special/gated/${g}?first=100`), e, h);
        expect(res.status).toBe(200);
        const reader = (res.body as ReadableStream<Uint8Array>).getReader();
        await readSome(reader, 100);
        return { reader, h, g };
      }),
    );
    expect(await inFlight(key)).toBe(2);
    const refused = await handle(request(key, "/third"), e);
    const problem = await problemOf(refused, 429);
    expect(problem.reason).toBe("concurrency");
    expect(refused.headers.get("Retry-After")).toBe("1");
    // Not counted in the rate limits: two used of 100.
    expect(refused.headers.get("RateLimit")).toBe('"per-minute";r=98;t=60');
    expect((await arrivalsFor(key)).map((a) => a.url)).not.toContain("/third");
    // The first body is streamed to its end: its slot is freed; the second still holds one.
    const [first, second] = open as [(typeof open)[0], (typeof open)[0]];
    await fetch(`${originUrl}/__special/release/${first.g}`);
    await drain(first.reader);
    await first.h.settled();
    expect(await inFlight(key)).toBe(1);
    const next = await handle(request(key, "/next"), e);
    expect(next.status).toBe(200);
    await next.text();
    await fetch(`${originUrl}/__special/release/${second.g}`);
    await drain(second.reader);
    await second.h.settled();
    expect(await inFlight(key)).toBe(0);
  });

  it("a client that goes away mid-body frees its slot", async () => {
    const e = envWith(config(1));
    const key = freshKey();
    const h = background();
    const g = crypto.randomUUID();
    const res = await handle(request(key, `/__special/gated/${g}?first=100`), e, h);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await readSome(reader, 100);
    expect((await problemOf(await handle(request(key), e), 429)).reason).toBe("concurrency");
    await reader.cancel("gone");
    await h.settled();
    expect(await inFlight(key)).toBe(0);
    expect((await handle(request(key), e)).status).toBe(200);
    await fetch(`${originUrl}/__special/release/${g}`);
  });

  it("a client that goes away before the origin answers: the origin request ends with it (499), the slots freed at once", async () => {
    const e = envWith(config(2, { concurrency_timeout: "3s" }));
    const key = freshKey();
    const h = background();
    const clients = [new AbortController(), new AbortController()];
    const decided: string[] = [];
    // The origin never answers these two (`hang`): only the clients' leaving ends them.
    const pending = clients.map((c) =>
      handle(request(key, "/__special/hang", { signal: c.signal }), e, {
        ...h,
        onDecision: (r) => decided.push(r.reason),
      }),
    );
    while (decided.length < 2 || (await inFlight(key)) < 2) await new Promise((r) => setTimeout(r, 5));
    expect((await problemOf(await handle(request(key), e), 429)).reason).toBe("concurrency");
    for (const c of clients) c.abort(new Error("the client went away"));
    // The proxy's own answers, which no client reads: the origin's request was cancelled with them.
    expect((await Promise.all(pending)).map((r) => r.status)).toEqual([499, 499]);
    await h.settled();
    expect(await inFlight(key)).toBe(0);
    expect((await handle(request(key), e)).status).toBe(200);
  });

  it("an origin that fails (unreachable, or dropping the body) frees the slot", async () => {
    const e = envWith(config(1));
    const key = freshKey();
    const h1 = background();
    const dropped = await handle(request(key, "/__special/drop?after=1000&length=1"), e, h1);
    await expect(dropped.arrayBuffer()).rejects.toThrow();
    await h1.settled();
    expect(await inFlight(key)).toBe(0);
    const closed = (await (await fetch(`${originUrl}/__special/closed-port`)).json()) as { url: string };
    const h2 = background();
    const unreachable = await handle(request(key), envWith(config(1), { ORIGIN: closed.url }), h2);
    expect(unreachable.status).toBe(502);
    await unreachable.text();
    await h2.settled();
    expect(await inFlight(key)).toBe(0);
  });

  it("with leases on and a plan's own concurrency; shadow mode reports a full key and lets it through", async () => {
    const e = envWith({
      limits: [{ limit: 100, window: "1m" }],
      plans: [{ name: "gpu", key_prefix: "gpu_", limits: [{ limit: 100, window: "1m" }], concurrency: 1 }],
    });
    const key = freshKey("gpu_");
    const g = crypto.randomUUID();
    const res = await handle(request(key, `/__special/gated/${g}?first=10`), e);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await readSome(reader, 10);
    expect((await problemOf(await handle(request(key), e), 429)).reason).toBe("concurrency");
    // Keys of the default plan have no concurrency limit.
    const other = freshKey();
    const h = background();
    const shadow = envWith(config(1, { shadow: true }));
    expect((await handle(request(other), e)).status).toBe(200);
    const held = await handle(request(key, "/shadow"), shadow, h);
    expect(held.status).toBe(200);
    await held.text();
    await fetch(`${originUrl}/__special/release/${g}`);
    await drain(reader);
  });
});

describe("concurrency behind the hono middleware", () => {
  it("the slot is held until the handler's streamed body ends; the next request is refused meanwhile", async () => {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    const limiter = createLimiter({ limits: [{ limit: 100, window: "1m" }], concurrency: 1, name: "mw" });
    app.use("*", rateLimit({ limiter }));
    let stream: ReadableStreamDefaultController<Uint8Array> | null = null;
    app.get(
      "/stream",
      () =>
        new Response(
          new ReadableStream({
            start: (c) => {
              stream = c;
            },
          }),
        ),
    );
    app.get("/fast", (c) => c.text("ok"));
    app.get("/boom", () => {
      throw new Error("boom");
    });
    const key = freshKey();
    const pending: Promise<unknown>[] = [];
    const ctx = { waitUntil: (p: Promise<unknown>) => void pending.push(p), passThroughOnException() {}, props: {} };
    const get = (path: string) => app.request(path, { headers: { "x-api-key": key } }, { LIMITER: env.LIMITER }, ctx);
    const streaming = await get("/stream");
    expect(streaming.status).toBe(200);
    const refused = await get("/fast");
    expect((await problemOf(refused, 429)).reason).toBe("concurrency");
    (stream as unknown as ReadableStreamDefaultController<Uint8Array>).enqueue(new TextEncoder().encode("done"));
    (stream as unknown as ReadableStreamDefaultController<Uint8Array>).close();
    expect(await streaming.text()).toBe("done");
    await Promise.all(pending);
    const fast = await get("/fast");
    expect(await fast.text()).toBe("ok");
    await Promise.all(pending);
    // A handler that throws frees its slot too.
    const boom = await get("/boom");
    expect(boom.status).toBe(500);
    await boom.text();
    await Promise.all(pending);
    expect((await get("/fast")).status).toBe(200);
  });

  it("a client that goes away while the handler still works frees its slot at once", async () => {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    app.use("*", rateLimit({ limits: [{ limit: 100, window: "1m" }], concurrency: 1, name: "mw-gone" }));
    let finish: () => void = () => {};
    const started = new Promise<void>((ready) => {
      app.get("/slow", async (c) => {
        ready();
        await new Promise<void>((r) => {
          finish = r;
        });
        return c.text("late");
      });
    });
    app.get("/fast", (c) => c.text("ok"));
    const key = freshKey();
    const pending: Promise<unknown>[] = [];
    const ctx = { waitUntil: (p: Promise<unknown>) => void pending.push(p), passThroughOnException() {}, props: {} };
    const client = new AbortController();
    const get = (path: string, signal?: AbortSignal) =>
      app.request(path, { headers: { "x-api-key": key }, signal }, { LIMITER: env.LIMITER }, ctx);
    const slow = get("/slow", client.signal);
    await started;
    expect((await problemOf(await get("/fast"), 429)).reason).toBe("concurrency");
    client.abort();
    await Promise.all(pending);
    expect(await inFlight(`mw-gone/key:${key}`)).toBe(0);
    expect(await (await get("/fast")).text()).toBe("ok");
    finish();
    await (await slow).text();
  });

  it("a WebSocket holds its slot until it closes", async () => {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    app.use("/ws", rateLimit({ limits: [{ limit: 100, window: "1m" }], concurrency: 1, name: "mw-ws" }));
    app.get(
      "/ws",
      upgradeWebSocket(() => ({ onMessage: (event, ws) => ws.send(`echo ${String(event.data)}`) })),
    );
    const key = freshKey();
    const pending: Promise<unknown>[] = [];
    const ctx = { waitUntil: (p: Promise<unknown>) => void pending.push(p), passThroughOnException() {}, props: {} };
    const open = () =>
      app.request("/ws", { headers: { upgrade: "websocket", "x-api-key": key } }, { LIMITER: env.LIMITER }, ctx);
    const res = await open();
    expect(res.status).toBe(101);
    const ws = res.webSocket as WebSocket;
    ws.accept();
    const echo = nextMessage(ws);
    ws.send("ping");
    expect(await echo).toBe("echo ping");
    expect((await problemOf(await open(), 429)).reason).toBe("concurrency");
    await closed(ws);
    await Promise.all(pending);
    const again = await open();
    expect(again.status).toBe(101);
    await closed(again.webSocket as WebSocket, true);
  });
});

describe("WebSockets through the proxy with concurrency", () => {
  it("an open socket holds its slot, relayed both ways, until it closes; it counts once", async () => {
    const e = envWith(config(1));
    const key = freshKey();
    const h = background();
    const upgrade = () =>
      request(key, "/v1/stream", { headers: { upgrade: "websocket", "sec-websocket-version": "13" } });
    const res = await handle(upgrade(), e, h);
    expect(res.status).toBe(101);
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=99;t=60');
    const ws = res.webSocket as WebSocket;
    expect(await openEcho(ws)).toEqual({ greeting: "hello /v1/stream", echo: "ping" });
    expect(await inFlight(key)).toBe(1);
    expect((await problemOf(await handle(upgrade(), e), 429)).reason).toBe("concurrency");
    await closed(ws);
    await h.settled();
    expect(await inFlight(key)).toBe(0);
    expect(await arrivalsFor(key)).toHaveLength(1);
  });
});

/** An origin (ORIGIN_SERVICE) whose responses stream until the test ends them, counting the requests open at once. */
function heldOrigin() {
  const open: ReadableStreamDefaultController<Uint8Array>[] = [];
  let now = 0;
  let most = 0;
  const closeOne = (c: ReadableStreamDefaultController<Uint8Array>) => {
    const i = open.indexOf(c);
    if (i >= 0) {
      open.splice(i, 1);
      now--;
    }
  };
  const service = {
    fetch: async () => {
      let ctl: ReadableStreamDefaultController<Uint8Array> | null = null;
      const body = new ReadableStream<Uint8Array>({
        start: (c) => {
          ctl = c;
        },
        cancel: () => closeOne(ctl as unknown as ReadableStreamDefaultController<Uint8Array>),
      });
      open.push(ctl as unknown as ReadableStreamDefaultController<Uint8Array>);
      most = Math.max(most, ++now);
      return new Response(body);
    },
  } as unknown as Fetcher;
  return {
    service,
    /** The controller of the latest response. */
    last: () => open[open.length - 1] as ReadableStreamDefaultController<Uint8Array>,
    /** Ends a response: its body to the end, or failed. */
    end(c: ReadableStreamDefaultController<Uint8Array>, fail: boolean) {
      closeOne(c);
      if (fail) c.error(new Error("the origin failed"));
      else {
        c.enqueue(new Uint8Array([1]));
        c.close();
      }
    },
    most: () => most,
  };
}

describe("generated request sequences", () => {
  it("1,000 sequences through the proxy or the middleware: never more than N of a key's requests at the origin, refused only when N are held", async () => {
    const op = fc.record({ op: fc.constantFrom("start", "start", "finish", "abort", "fail"), i: fc.nat(7) });
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("proxy", "middleware"),
        fc.integer({ min: 1, max: 3 }),
        fc.array(op, { minLength: 1, maxLength: 10 }),
        async (adapter, n, ops) => {
          const origin = heldOrigin();
          const key = freshKey();
          const send = sender(adapter, n, origin.service, key);
          const open: {
            reader: ReadableStreamDefaultReader<Uint8Array>;
            h: ReturnType<typeof background>;
            at: ReadableStreamDefaultController<Uint8Array>;
          }[] = [];
          const end = async (r: (typeof open)[number], how: string) => {
            if (how === "abort") await r.reader.cancel("gone");
            else {
              origin.end(r.at, how === "fail");
              await drain(r.reader).catch(() => {});
            }
            await r.h.settled();
          };
          for (const o of ops) {
            if (o.op === "start") {
              const h = background();
              const res = await send(h);
              if (res.status === 429) {
                expect((await problemOf(res, 429)).reason).toBe("concurrency");
                expect(open.length).toBe(n);
                continue;
              }
              expect(res.status).toBe(200);
              open.push({ reader: (res.body as ReadableStream<Uint8Array>).getReader(), h, at: origin.last() });
            } else if (open.length > 0) {
              await end(open.splice(o.i % open.length, 1)[0] as (typeof open)[number], o.op);
            }
            expect(origin.most()).toBeLessThanOrEqual(n);
          }
          for (const r of open.splice(0)) await end(r, "finish");
          expect(await inFlight(adapter === "proxy" ? `key:${key}` : `seq/key:${key}`)).toBe(0);
        },
      ),
      { numRuns: 1000 },
    );
  }, 300_000);
});

/**
 * Sends one request of `key` through the proxy (ORIGIN_SERVICE: `service`) or through a hono app whose handler
 * returns `service`'s response behind the middleware, both with `concurrency = n`; the release lands in `h`.
 */
function sender(adapter: string, n: number, service: Fetcher, key: string) {
  if (adapter === "proxy") {
    const e = envWith(config(n), { ORIGIN_SERVICE: service });
    return (h: ReturnType<typeof background>) => handle(request(key, "/job"), e, h);
  }
  const app = new Hono<{ Variables: RateLimitVariables }>();
  app.use("*", rateLimit({ name: "seq", limits: [{ limit: 100, window: "1m" }], concurrency: n }));
  app.get("/job", () => service.fetch("https://origin.example/job"));
  return (h: ReturnType<typeof background>) =>
    app.request(
      "/job",
      { headers: { "x-api-key": key } },
      { LIMITER: env.LIMITER },
      { waitUntil: h.waitUntil, passThroughOnException() {}, props: {} },
    );
}

/** Closes `ws` and waits for the other side's close (unless `accept`: accept it first). */
function closed(ws: WebSocket, accept = false): Promise<void> {
  if (accept) ws.accept();
  const done = new Promise<void>((resolve) => ws.addEventListener("close", () => resolve(), { once: true }));
  ws.close(1000, "done");
  return done;
}
