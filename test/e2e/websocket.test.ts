// WebSockets end to end with concurrency (docs/configuration.md, "Concurrency"): a real WebSocket client (Node's)
// through the proxy under wrangler dev to the recording origin's echo socket, and to a hono app's socket behind the
// middleware. Each socket echoes, counts once, and holds its key's one slot until it closes: a second handshake
// meanwhile gets 429 (reason concurrency); after the close a new one opens.
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { problemOfParts } from "../support/problem.ts";

/** Opens a socket; `greeting`: its first message, when the server sends one on open (the origin's echo does). */
async function open(url: string): Promise<{ ws: WebSocket; greeting: Promise<string> }> {
  const ws = new WebSocket(url);
  const greeting = new Promise<string>((resolve) =>
    ws.addEventListener("message", (e) => resolve(String(e.data)), { once: true }),
  );
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener("open", () => resolve(), { once: true });
    ws.addEventListener("error", () => reject(new Error(`could not open ${url}`)), { once: true });
  });
  return { ws, greeting };
}

/** Sends `text` and waits for the echo. */
function echo(ws: WebSocket, text: string): Promise<string> {
  const reply = new Promise<string>((resolve) =>
    ws.addEventListener("message", (e) => resolve(String(e.data)), { once: true }),
  );
  ws.send(text);
  return reply;
}

/** Closes `ws` and waits for the close to complete. */
function close(ws: WebSocket): Promise<void> {
  const done = new Promise<void>((resolve) => ws.addEventListener("close", () => resolve(), { once: true }));
  ws.close(1000, "done");
  return done;
}

/** A WebSocket handshake by hand: its status, and the body of a refusal. */
function handshake(
  url: string,
): Promise<{ status: number; text: string; contentType?: string; cacheControl?: string; rateLimit?: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("base64"),
      },
    });
    req.on("upgrade", (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, text: "", rateLimit: String(res.headers.ratelimit) });
    });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          text: Buffer.concat(chunks).toString("utf8"),
          contentType: res.headers["content-type"],
          cacheControl: res.headers["cache-control"],
        }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

/**
 * Handshakes until one opens (the release after a close lands in the background), at most `tries` times; returns
 * its `RateLimit` header.
 */
async function opensAgain(url: string, tries = 50): Promise<string | undefined> {
  for (let i = 1; i <= tries; i++) {
    const h = await handshake(url);
    if (h.status === 101) return h.rateLimit;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url}: no handshake opened in ${tries} tries`);
}

/** The refusal a handshake got: 429 problem+json, reason concurrency. */
function refusedForConcurrency(r: { status: number; text: string; contentType?: string; cacheControl?: string }): void {
  const problem = problemOfParts({ ...r, contentType: r.contentType, cacheControl: r.cacheControl }, 429);
  expect(problem.reason).toBe("concurrency");
}

describe("a WebSocket through the proxy (wrangler dev, concurrency = 1)", () => {
  let origin: Origin;
  let limiter: Limiter;
  let state: Awaited<ReturnType<typeof tempDir>>;
  beforeAll(async () => {
    origin = await startOrigin();
    state = await tempDir("ws-e2e-");
    limiter = await startLimiter({
      origin: origin.url,
      persistTo: state.path,
      rateLimit: { limits: [{ limit: 100, window: "1m" }], concurrency: 1, key: { query: "api_key" } },
    });
  }, 120_000);
  afterAll(async () => {
    await limiter?.stop();
    await origin?.close();
    await state?.cleanup();
  });

  it("echoes, counts once, holds the key's slot until it closes", async () => {
    const key = `k_${crypto.randomUUID()}`;
    const path = `/v1/stream?api_key=${key}`;
    const { ws, greeting } = await open(`${limiter.url.replace("http", "ws")}${path}`);
    expect(await greeting).toBe(`hello ${path}`);
    expect(await echo(ws, "ping")).toBe("ping");
    refusedForConcurrency(await handshake(`${limiter.url}${path}`));
    expect(await echo(ws, "still open")).toBe("still open");
    await close(ws);
    // Counted once each: the first socket and this one (the refused handshakes were not).
    expect(await opensAgain(`${limiter.url}${path}`)).toBe('"per-minute";r=98;t=60');
    // The first socket reached the origin once; the refused handshake never did.
    const arrivals = origin.arrivals.filter((a) => a.url === path);
    expect(arrivals.length).toBe(2);
  });
});

describe("a WebSocket behind the hono middleware (wrangler dev, concurrency = 1)", () => {
  let app: Limiter;
  let state: Awaited<ReturnType<typeof tempDir>>;
  beforeAll(async () => {
    state = await tempDir("hono-ws-e2e-");
    app = await startLimiter({ persistTo: state.path, config: "test/e2e/worker/wrangler.hono-ws.toml" });
  }, 120_000);
  afterAll(async () => {
    await app?.stop();
    await state?.cleanup();
  });

  it("echoes, holds the key's slot until it closes, and counts once", async () => {
    const key = `k_${crypto.randomUUID()}`;
    const url = `${app.url}/ws?api_key=${key}`;
    const { ws } = await open(url.replace("http", "ws"));
    expect(await echo(ws, "ping")).toBe("ping");
    refusedForConcurrency(await handshake(url));
    await close(ws);
    expect(await opensAgain(url)).toBe('"per-minute";r=98;t=60');
  });
});
