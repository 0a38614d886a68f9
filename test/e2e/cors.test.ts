// A browser app on one origin calling an API behind the proxy on another, in a real headless Chromium (Debian's,
// installed by scripts/install-chromium.sh): the CORS preflight passes without a key (the API's own server answers
// it), allowed calls read their RateLimit header, and the 429 is read — status, Retry-After, RateLimit — instead of
// failing as a network error. The proxy runs under wrangler dev, the API and the page on their own local servers.
import { execFileSync } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join, resolve } from "node:path";
import { type Browser, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";

const ROOT = resolve(import.meta.dirname, "../..");

/** Starts a server on a free local port; resolves its base URL. */
async function serve(handler: Parameters<typeof createServer>[1]): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

describe("a browser app calling the API through the proxy from another origin", () => {
  let api: { server: Server; url: string };
  let app: { server: Server; url: string };
  let limiter: Limiter;
  let browser: Browser;
  let state: Awaited<ReturnType<typeof tempDir>>;
  const preflights: string[] = [];

  beforeAll(async () => {
    // The app's origin is known only once its server listens; the API answers CORS for it itself.
    app = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/html" });
      res.end("<!doctype html><title>app</title><p>app</p>");
    });
    api = await serve((req, res) => {
      const cors = { "access-control-allow-origin": app.url, vary: "Origin" };
      if (req.method === "OPTIONS") {
        preflights.push(String(req.headers["access-control-request-headers"]));
        res.writeHead(204, {
          ...cors,
          "access-control-allow-methods": "GET, POST",
          "access-control-allow-headers": "x-api-key",
          "access-control-max-age": "0",
        });
        return res.end();
      }
      res.writeHead(200, { ...cors, "content-type": "application/json" });
      return res.end(JSON.stringify({ ok: true }));
    });
    state = await tempDir("cors-e2e-");
    limiter = await startLimiter({
      origin: api.url,
      persistTo: state.path,
      rateLimit: { limits: [{ limit: 2, window: "1m" }], cors: { origins: [app.url] } },
    });
    const executablePath = execFileSync(join(ROOT, "scripts/install-chromium.sh"), { encoding: "utf8" }).trim();
    browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-gpu"] });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await limiter?.stop();
    for (const s of [api, app]) await new Promise((done) => s?.server.close(done));
    await state?.cleanup();
  });

  it("preflight passes, two calls read RateLimit, the third reads its 429 and Retry-After", async () => {
    const page = await browser.newPage();
    await page.goto(app.url);
    const key = `k_${crypto.randomUUID()}`;
    const results = await page.evaluate(
      async ({ url, key }) => {
        const out: { status: number; retryAfter: string | null; rateLimit: string | null; body: unknown }[] = [];
        for (let i = 0; i < 3; i++) {
          const res = await fetch(`${url}/v1/items`, { headers: { "x-api-key": key } });
          out.push({
            status: res.status,
            retryAfter: res.headers.get("retry-after"),
            rateLimit: res.headers.get("ratelimit"),
            body: await res.json(),
          });
        }
        return out;
      },
      { url: limiter.url, key },
    );
    expect(results.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(results[0]?.rateLimit).toMatch(/^"per-minute";r=1;t=\d+$/);
    expect(results[2]?.retryAfter).toMatch(/^\d+$/);
    expect(results[2]?.body).toMatchObject({ status: 429, violated_policies: ["per-minute"] });
    // The browser sent a preflight (a custom header), which the proxy let through to the API without a key.
    expect(preflights.length).toBeGreaterThanOrEqual(1);
    expect(preflights[0]).toBe("x-api-key");
    await page.close();
  });
});
