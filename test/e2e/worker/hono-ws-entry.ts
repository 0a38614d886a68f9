/**
 * @module Test-only Worker for test/e2e/websocket.test.ts: a hono app whose WebSocket route (an echo, hono's
 * `upgradeWebSocket`) is behind the middleware with `concurrency = 1`, the key read from the `api_key` query
 * parameter (a browser's or Node's WebSocket sends no custom headers).
 */
import { Hono } from "hono";
import { upgradeWebSocket } from "hono/cloudflare-workers";
import type { WSContext } from "hono/ws";
import { type RateLimitVariables, rateLimit } from "../../../src/hono.ts";

export { RateLimiter } from "../../../src/object/index.ts";

const app = new Hono<{ Variables: RateLimitVariables }>();

app.use(
  "/ws",
  rateLimit({ name: "ws", limits: [{ limit: 100, window: "1m" }], concurrency: 1, key: { query: "api_key" } }),
);
app.get(
  "/ws",
  upgradeWebSocket(() => ({
    onMessage: (event: MessageEvent, ws: WSContext) => ws.send(String(event.data)),
  })),
);

export default app;
