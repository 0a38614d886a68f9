// Per-route budgets through the proxy, the real object and the real origin (docs/configuration.md, "Per-route budgets"): a request
// of a route must fit the key's limits and the route's; headers and denials name the route's policies; refunds and
// plans. (Several isolates under overload: sweep.test.ts.)
import { describe, expect, it } from "vitest";
import { arrivalsFor, envWith, freshKey, handle, problemBody, request } from "./helpers.ts";

const CONFIG = {
  limits: [{ limit: 20, window: "1m" }],
  routes: [
    { name: "search", method: "POST", path: "/v1/search", limits: [{ limit: 3, window: "1m" }] },
    { name: "export", path: "/v1/export/", limits: [{ limit: 1, window: "1h" }] },
  ],
  plans: [
    {
      name: "test",
      key_prefix: "test_",
      limits: [{ limit: 10, window: "1m" }],
      routes: [{ name: "search", method: "POST", path: "/v1/search", limits: [{ limit: 1, window: "1m" }] }],
    },
  ],
};

const search = (key: string, path = "/v1/search") => request(key, path, { method: "POST", body: "{}" });

describe("a route's budget", () => {
  it("refuses a route past its own budget while the key's other requests go on, and names it", async () => {
    const e = envWith(CONFIG);
    const key = freshKey();
    for (let i = 0; i < 3; i++) expect((await handle(search(key), e)).status).toBe(200);
    const first = await handle(search(key), e);
    expect(first.headers.get("RateLimit-Policy")).toBe('"per-minute";q=20;w=60, "search";q=3;w=60');
    expect(first.status).toBe(429);
    const body = await problemBody(first);
    expect(body).toMatchObject({ violated_policies: ["search"], route: "search" });
    expect(Number(first.headers.get("Retry-After"))).toBeGreaterThan(55);
    // Answered from the deny cache (the third grant left the route at 0): it shows the budget that refuses.
    expect(first.headers.get("RateLimit")).toMatch(/^"search";r=0;t=\d+$/);
    // The refusal is cached for the route only: the key's other requests still reach the origin.
    const other = await handle(request(key, "/v1/items"), e);
    expect(other.status).toBe(200);
    expect(other.headers.get("RateLimit")).toMatch(/^"per-minute";r=16;t=\d+$/);
    expect(other.headers.get("RateLimit-Policy")).toBe('"per-minute";q=20;w=60');
    // GET is not the POST route: it uses the key's budget alone.
    expect((await handle(request(key, "/v1/search"), e)).status).toBe(200);
    expect((await arrivalsFor(key)).map((a) => `${a.method} ${a.url}`)).toEqual([
      "POST /v1/search",
      "POST /v1/search",
      "POST /v1/search",
      "GET /v1/items",
      "GET /v1/search",
    ]);
  });

  it("counts a route's request in the key's budget too: the key's limit refuses it when the route has room", async () => {
    const e = envWith(CONFIG);
    const key = freshKey();
    for (let i = 0; i < 20; i++) await handle(request(key, "/v1/items"), e);
    const refused = await handle(search(key), e);
    expect(refused.status).toBe(429);
    expect(await problemBody(refused)).toMatchObject({ violated_policies: ["per-minute"], route: "search" });
    expect(refused.headers.get("RateLimit")).toMatch(/^"per-minute";r=0;t=\d+, "search";r=3$/);
  });

  it("matches the normalised path, and a plan's own routes replace the top-level ones", async () => {
    const e = envWith(CONFIG);
    const key = freshKey();
    expect((await handle(request(key, "/v1/export/a"), e)).status).toBe(200);
    // The same route, written otherwise (RFC 3986): it must not escape the budget.
    for (const path of ["/v1/%65xport/b", "/v1/x/../export/c", "/V1/export/d".toLowerCase()]) {
      expect((await handle(request(key, path), e)).status, path).toBe(429);
    }
    const tester = freshKey("test_");
    expect((await handle(search(tester), e)).status).toBe(200);
    const refused = await handle(search(tester), e);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60, "search";q=1;w=60');
    // The test plan has no export route: its keys' exports use the key's budget alone.
    expect((await handle(request(tester, "/v1/export/a"), e)).headers.get("RateLimit-Policy")).toBe(
      '"per-minute";q=10;w=60',
    );
  });

  it("gives a refunded route request back to both budgets", async () => {
    const e = envWith({ ...CONFIG, refund: { status: [500] } });
    const key = freshKey();
    for (let i = 0; i < 3; i++) {
      const r = await handle(search(key, "/v1/search/__special/status/500"), e);
      expect(r.status).toBe(500);
    }
    const r = await handle(search(key), e);
    expect(r.status).toBe(200);
    expect(r.headers.get("RateLimit")).toMatch(/^"per-minute";r=19;t=\d+, "search";r=2;t=\d+$/);
  });
});
