// WebSockets through the proxy, against the real origin's echo socket: an upgrade is proxied as one (the origin's
// 101 with its socket, the frames relayed both ways), decided and counted like any request of its key, and a refused
// upgrade gets the usual 429 without reaching the origin. (Upgrade stays a hop-by-hop field for everything else:
// test/integration/proxy.test.ts.)
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { upgradeWebSocket } from "hono/cloudflare-workers";
import { describe, expect, it } from "vitest";
import { type RateLimitVariables, rateLimit } from "../../src/hono.ts";
import { problemOf } from "../support/problem.ts";
import { arrivalsFor, envWith, freshKey, handle, nextMessage, openEcho, request } from "./helpers.ts";

const upgrade = (key: string, path = "/v1/stream") =>
  request(key, path, { headers: { upgrade: "websocket", "sec-websocket-version": "13" } });

describe("WebSockets through the proxy", () => {
  it("an upgrade reaches the origin as one: 101 with its socket and the RateLimit headers; frames go both ways", async () => {
    const e = envWith({ limits: [{ limit: 5, window: "1m" }], leases: false });
    const key = freshKey();
    const res = await handle(upgrade(key), e);
    expect(res.status).toBe(101);
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=4;t=60');
    const ws = res.webSocket as WebSocket;
    expect(ws).not.toBeNull();
    expect(await openEcho(ws)).toEqual({ greeting: "hello /v1/stream", echo: "ping" });
    ws.close(1000, "done");
    const arrivals = await arrivalsFor(key);
    expect(arrivals).toHaveLength(1);
    expect(arrivals[0]?.url).toBe("/v1/stream");
  });

  it("an upgrade counts like any request of its key; a refused one is a 429 and never reaches the origin", async () => {
    const e = envWith({ limits: [{ limit: 1, window: "1m" }], leases: false });
    const key = freshKey();
    const first = await handle(upgrade(key), e);
    expect(first.status).toBe(101);
    (first.webSocket as WebSocket).accept();
    (first.webSocket as WebSocket).close(1000, "done");
    const refused = await handle(upgrade(key), e);
    expect((await problemOf(refused, 429)).violated_policies).toEqual(["per-minute"]);
    expect(await arrivalsFor(key)).toHaveLength(1);
  });
});

describe("WebSockets behind the hono middleware", () => {
  it("an upgrade is decided and counted like any request; its 101 keeps its socket and gets the RateLimit headers", async () => {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    app.use("/ws", rateLimit({ limits: [{ limit: 1, window: "1m" }], leases: false }));
    app.get(
      "/ws",
      upgradeWebSocket(() => ({
        onMessage: (event, ws) => ws.send(`echo ${String(event.data)}`),
      })),
    );
    const key = freshKey();
    const open = () =>
      app.request("/ws", { headers: { upgrade: "websocket", "x-api-key": key } }, { LIMITER: env.LIMITER });
    const res = await open();
    expect(res.status).toBe(101);
    expect(res.headers.get("RateLimit")).toBe('"per-minute";r=0;t=60');
    const ws = res.webSocket as WebSocket;
    ws.accept();
    const echo = nextMessage(ws);
    ws.send("ping");
    expect(await echo).toBe("echo ping");
    ws.close(1000, "done");
    expect((await problemOf(await open(), 429)).violated_policies).toEqual(["per-minute"]);
  });
});
