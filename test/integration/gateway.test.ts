// biome-ignore-all lint/suspicious/noTemplateCurlyInString: the gateway's settings write ${NAME} in plain strings.
// The gateway through the Worker, against the real origin over HTTP (docs/llm.md, "The gateway"): the operator's
// credential from a secret on every forwarded request and the client's key removed from every source, the origin told
// who is calling (copies a client sends dropped), several origins under one key's budget (streams and WebSockets
// through each), a path no origin serves refused before anything is counted, a missing secret a config error naming
// it, and the secret's value never in an answer, a log line, the admin API or the page.
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import { keyId } from "../../src/base/log.ts";
import { envWith, freshKey, handle, openEcho, originUrl, problemBody, request, spyLimiter } from "./helpers.ts";

const SECRET = "sk-operator-0123456789";
const OTHER_SECRET = "sk-other-9876543210";
const TOKEN = "gateway-admin-token";

interface Arrival {
  url: string;
  method: string;
  headers: Record<string, string>;
}

/** The origin's arrivals whose path holds `marker`. */
async function arrivalsWith(marker: string): Promise<Arrival[]> {
  const all = (await (await fetch(`${originUrl}/__arrivals`)).json()) as Arrival[];
  return all.filter((a) => a.url.includes(marker));
}

/** The Worker's env: `RATE_LIMIT` with `rl`, ORIGIN as given (null: none, `origins` alone), the secrets set. */
function gatewayEnv(rl: Record<string, unknown>, origin: string | null = originUrl) {
  const e = envWith({ limits: [{ limit: 3, window: "1m" }], leases: false, ...rl }, {
    OPENAI_KEY: SECRET,
    OTHER_KEY: OTHER_SECRET,
    ADMIN_TOKEN: TOKEN,
  } as never);
  return { ...e, ORIGIN: origin ?? undefined };
}

let logged: MockInstance<typeof console.error>;
beforeEach(() => {
  logged = vi.spyOn(console, "error").mockImplementation(() => {});
  vi.spyOn(console, "warn").mockImplementation(() => {});
  vi.spyOn(console, "log").mockImplementation(() => {});
});
afterEach(() => {
  vi.restoreAllMocks();
});

describe("the operator's credential, the client's key, the caller's identity", () => {
  it("origin_headers: the secret's value on the forwarded request; the key gone from its header, Authorization and the query", async () => {
    const e = gatewayEnv({
      origin_headers: { authorization: "Bearer ${OPENAI_KEY}", "x-org": "org-1" },
      key: { query: "api_key" },
    });
    const key = freshKey("sk_");
    const marker = crypto.randomUUID();
    const sources: RequestInit[] = [
      { headers: { "x-api-key": key } },
      { headers: { authorization: `Bearer ${key}` } },
      {},
    ];
    for (const [i, init] of sources.entries()) {
      const path = `/v1/${marker}/${i}${i === 2 ? `?api_key=${key}&x=1` : ""}`;
      const res = await handle(new Request(`https://gw.example${path}`, init), e);
      expect(res.status).toBe(200);
    }
    const arrivals = await arrivalsWith(marker);
    expect(arrivals.map((a) => a.url)).toEqual([`/v1/${marker}/0`, `/v1/${marker}/1`, `/v1/${marker}/2?x=1`]);
    const id = await keyId(`key:${key}`);
    for (const a of arrivals) {
      expect(a.headers.authorization).toBe(`Bearer ${SECRET}`);
      expect(a.headers["x-org"]).toBe("org-1");
      expect(a.headers["x-api-key"]).toBeUndefined();
      expect(JSON.stringify(a)).not.toContain(key);
      expect(a.headers["x-limiter-key-id"]).toBe(id);
      expect(a.headers["x-limiter-plan"]).toBe("default");
      expect(a.headers["x-limiter-account"]).toBeUndefined();
    }
  });

  it("copies of the identity fields a client sends are dropped, with a key or without; forward_key = true keeps the key", async () => {
    const e = gatewayEnv({
      origin_headers: { "x-gateway": "${OTHER_KEY}" },
      forward_key: true,
      plans: [{ name: "pro", key_prefix: "pro_", limits: [{ limit: 5, window: "1m" }] }],
    });
    const key = freshKey("pro_");
    const marker = crypto.randomUUID();
    const forged = { "x-limiter-plan": "enterprise", "x-limiter-account": "acme", "x-limiter-key-id": "000000000000" };
    const res = await handle(request(key, `/v1/${marker}`, { headers: forged }), e);
    expect(res.status).toBe(200);
    const [arrival] = await arrivalsWith(marker);
    expect(arrival?.headers["x-api-key"]).toBe(key);
    expect(arrival?.headers["x-gateway"]).toBe(OTHER_SECRET);
    expect(arrival?.headers["x-limiter-plan"]).toBe("pro");
    expect(arrival?.headers["x-limiter-key-id"]).toBe(await keyId(`key:${key}`));
    expect(arrival?.headers["x-limiter-account"]).toBeUndefined();
  });

  it("ORIGIN alone, no headers: the key goes on as before, and the origin is told the key's id and plan", async () => {
    const e = gatewayEnv({});
    const key = freshKey();
    const marker = crypto.randomUUID();
    expect((await handle(request(key, `/v1/${marker}`, { headers: { authorization: "Basic x" } }), e)).status).toBe(
      200,
    );
    const [arrival] = await arrivalsWith(marker);
    expect(arrival?.headers["x-api-key"]).toBe(key);
    expect(arrival?.headers.authorization).toBe("Basic x");
    expect(arrival?.headers["x-limiter-key-id"]).toBe(await keyId(`key:${key}`));
  });

  it("a minted key's account reaches the origin as x-limiter-account", async () => {
    const e = {
      ...gatewayEnv({
        origin_headers: { authorization: "Bearer ${OPENAI_KEY}" },
        plans: [
          {
            name: "team",
            key_prefix: "team_",
            signed: true,
            limits: [{ limit: 5, window: "1m" }],
            account: { limits: [{ limit: 50, window: "1m" }] },
          },
        ],
      }),
      KEY_SECRET: "k".repeat(32),
    };
    const minted = await handle(
      new Request("https://gw.example/__limiter/keys", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ plan: "team", account: "acme-corp" }),
      }),
      e,
    );
    expect(minted.status).toBe(200);
    const { key } = (await minted.json()) as { key: string };
    const marker = crypto.randomUUID();
    expect((await handle(request(key, `/v1/${marker}`), e)).status).toBe(200);
    const [arrival] = await arrivalsWith(marker);
    expect(arrival?.headers["x-limiter-account"]).toBe("acme-corp");
    expect(arrival?.headers["x-limiter-plan"]).toBe("team");
    expect(arrival?.headers["x-api-key"]).toBeUndefined();
  });

  it("a request its costs rule frees still needs a key the limiter accepts where the credential goes with it; nothing counted", async () => {
    const e = gatewayEnv({
      origin_headers: { authorization: "Bearer ${OPENAI_KEY}" },
      costs: [{ path: "/free/", cost: 0 }],
      key: { pattern: "sk_[a-z0-9-]+" },
    });
    const spy = spyLimiter();
    const withSpy = { ...e, LIMITER: spy.namespace };
    const marker = crypto.randomUUID();
    const none = await handle(request(null, `/free/${marker}/none`), withSpy);
    expect(none.status).toBe(401);
    const bad = await handle(request("not-a-key", `/free/${marker}/bad`), withSpy);
    expect(bad.status).toBe(401);
    const key = freshKey("sk_");
    const ok = await handle(request(key, `/free/${marker}/ok`), withSpy);
    expect(ok.status).toBe(200);
    expect(spy.calls).toEqual([]);
    const arrivals = await arrivalsWith(marker);
    expect(arrivals.map((a) => a.url)).toEqual([`/free/${marker}/ok`]);
    expect(arrivals[0]?.headers["x-limiter-key-id"]).toBe(await keyId(`key:${key}`));
    expect(arrivals[0]?.headers.authorization).toBe(`Bearer ${SECRET}`);
  });
});

describe("a secret the configuration names and the Worker lacks", () => {
  it("a config error naming it, logged, nothing forwarded, nothing counted; a value with a line break too", async () => {
    const marker = crypto.randomUUID();
    const spy = spyLimiter();
    const rl = { limits: [{ limit: 3, window: "1m" }], origin_headers: { authorization: "Bearer ${MISSING_KEY}" } };
    const res = await handle(request(freshKey(), `/v1/${marker}`), { ...envWith(rl), LIMITER: spy.namespace });
    const body = await problemBody(res);
    expect(res.status).toBe(500);
    expect(body.detail).toContain(
      "RATE_LIMIT.origin_headers.authorization: the secret MISSING_KEY is not set for this Worker",
    );
    expect(await arrivalsWith(marker)).toEqual([]);
    expect(spy.calls).toEqual([]);
    const lines = logged.mock.calls.map((c) => JSON.parse(String(c[0])) as { event: string; message: string });
    expect(lines).toContainEqual({ event: "config_error", message: expect.stringContaining("MISSING_KEY") });

    const broken = "sk-broken\r\nx-injected: 1";
    const crlf = envWith({ ...rl, origin_headers: { authorization: "Bearer ${BROKEN_KEY}" } }, {
      BROKEN_KEY: broken,
    } as never);
    const res2 = await handle(request(freshKey(), `/v1/${marker}`), crlf);
    expect(res2.status).toBe(500);
    const text = await res2.text();
    expect(text).toContain(
      "RATE_LIMIT.origin_headers.authorization: the secret BROKEN_KEY holds a line break, NUL or a character",
    );
    expect(text).not.toContain("sk-broken");
    expect(JSON.stringify(logged.mock.calls)).not.toContain("sk-broken");
    expect(await arrivalsWith(marker)).toEqual([]);
  });

  it("the secret's value is never in the admin API's answers or the page", async () => {
    const e = gatewayEnv({ origin_headers: { authorization: "Bearer ${OPENAI_KEY}" } });
    const key = freshKey();
    expect((await handle(request(key, "/v1/x"), e)).status).toBe(200);
    const admin = (path: string, init: RequestInit = {}) =>
      handle(
        new Request(`https://gw.example/__limiter/${path}`, {
          ...init,
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...init.headers },
        }),
        e,
      );
    const answers = [
      await admin("status", { method: "POST", body: JSON.stringify({ key }) }),
      await admin("", { method: "GET", headers: { accept: "text/html" } }),
    ];
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(await a.text()).not.toContain(SECRET);
    }
    expect(JSON.stringify(logged.mock.calls)).not.toContain(SECRET);
  });
});

describe("several origins, one budget", () => {
  const ORIGINS = (marker: string) => [
    { path: "/alpha/", url: `${originUrl}/up-a/${marker}`, headers: { authorization: "Bearer ${OPENAI_KEY}" } },
    { path: "/beta/", url: `${originUrl}/up-b/${marker}/`, headers: { "x-api-key": "${OTHER_KEY}" } },
  ];

  it("the first matching prefix replaced by its origin's path; one key's limit counts its requests to both", async () => {
    const marker = crypto.randomUUID();
    const e = gatewayEnv({ origins: ORIGINS(marker) }, null);
    const key = freshKey();
    const paths = ["/alpha/v1/x?q=1", "/beta/v1/y", "/alpha/v1/z", "/beta/v1/w"];
    const statuses: number[] = [];
    for (const p of paths) statuses.push((await handle(request(key, p), e)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    const arrivals = await arrivalsWith(marker);
    expect(arrivals.map((a) => a.url)).toEqual([
      `/up-a/${marker}/v1/x?q=1`,
      `/up-b/${marker}/v1/y`,
      `/up-a/${marker}/v1/z`,
    ]);
    expect(arrivals.map((a) => [a.headers.authorization, a.headers["x-api-key"]])).toEqual([
      [`Bearer ${SECRET}`, undefined],
      [undefined, OTHER_SECRET],
      [`Bearer ${SECRET}`, undefined],
    ]);
  });

  it("a path no origin serves: 404 before anything is counted or sent; with ORIGIN beside them it goes there", async () => {
    const marker = crypto.randomUUID();
    const spy = spyLimiter();
    const e = { ...gatewayEnv({ origins: ORIGINS(marker) }, null), LIMITER: spy.namespace };
    const key = freshKey();
    const res = await handle(request(key, `/gamma/${marker}`), e);
    const body = await problemBody(res);
    expect(res.status).toBe(404);
    expect(body.detail).toBe("No origin is served at this path; the paths served start with /alpha/, /beta/.");
    // `/alpha` without its slash is not under `/alpha/`.
    expect((await handle(request(key, "/alpha"), e)).status).toBe(404);
    expect(spy.calls).toEqual([]);
    expect(await arrivalsWith(marker)).toEqual([]);

    const withOrigin = gatewayEnv({ origins: ORIGINS(marker) }, `${originUrl}/rest/${marker}`);
    expect((await handle(request(key, "/gamma/x"), withOrigin)).status).toBe(200);
    const [arrival] = await arrivalsWith(marker);
    expect(arrival?.url).toBe(`/rest/${marker}/gamma/x`);
    expect(arrival?.headers["x-api-key"]).toBe(key);
  });

  it("a WebSocket and a streamed response through an origin's prefix, with the operator's header and without the key", async () => {
    const credential = { authorization: "Bearer ${OPENAI_KEY}" };
    const e = gatewayEnv(
      {
        origins: [
          { path: "/ws/", url: originUrl, headers: credential },
          { path: "/files/", url: originUrl, headers: credential },
        ],
      },
      null,
    );
    const key = freshKey();
    const res = await handle(
      request(key, "/ws/v1/stream", { headers: { upgrade: "websocket", "sec-websocket-version": "13" } }),
      e,
    );
    expect(res.status).toBe(101);
    const ws = res.webSocket as WebSocket;
    expect(await openEcho(ws)).toEqual({ greeting: "hello /v1/stream", echo: "ping" });
    ws.close(1000, "done");
    const id = await keyId(`key:${key}`);
    const all = (await (await fetch(`${originUrl}/__arrivals`)).json()) as Arrival[];
    const [handshake] = all.filter((a) => a.headers["x-limiter-key-id"] === id);
    expect(handshake?.url).toBe("/v1/stream");
    expect(handshake?.headers.authorization).toBe(`Bearer ${SECRET}`);
    expect(handshake?.headers["x-api-key"]).toBeUndefined();
    const streamed = await handle(request(key, "/files/__special/digest"), e);
    expect(streamed.status).toBe(200);
    const echo = (await streamed.json()) as { headers: Record<string, string> };
    expect(echo.headers.authorization).toBe(`Bearer ${SECRET}`);
    expect(echo.headers["x-api-key"]).toBeUndefined();
    const bytes = await handle(request(key, "/files/__special/bytes/200000?chunk=16384"), e);
    expect((await bytes.arrayBuffer()).byteLength).toBe(200_000);
  });

  it("a CORS preflight goes on without the operator's credential or the key, and no identity", async () => {
    const marker = crypto.randomUUID();
    const e = gatewayEnv({
      origin_headers: { authorization: "Bearer ${OPENAI_KEY}" },
      cors: { origins: ["https://app.example"] },
    });
    const preflight = new Request(`https://gw.example/v1/${marker}`, {
      method: "OPTIONS",
      headers: {
        origin: "https://app.example",
        "access-control-request-method": "POST",
        "x-api-key": "sk_customer",
        "cf-connecting-ip": "203.0.113.7",
      },
    });
    expect((await handle(preflight, e)).status).toBe(200);
    const [arrival] = await arrivalsWith(marker);
    expect(arrival?.method).toBe("OPTIONS");
    expect(arrival?.headers.authorization).toBeUndefined();
    expect(arrival?.headers["x-api-key"]).toBeUndefined();
    expect(Object.keys(arrival?.headers ?? {}).filter((h) => h.startsWith("x-limiter-"))).toEqual([]);
  });

  it("a redirect back to the origin goes through the gateway's prefix; elsewhere on its host, a 502", async () => {
    const e = gatewayEnv(
      {
        limits: [{ limit: 10, window: "1m" }],
        origins: [{ path: "/r/", url: `${originUrl}/up/`, headers: { authorization: "Bearer ${OPENAI_KEY}" } }],
      },
      null,
    );
    const key = freshKey();
    const to = (location: string) =>
      handle(request(key, `/r/__special/redirect?status=307&location=${encodeURIComponent(location)}`), e);
    const back = await to(`${originUrl}/up/v1/next?x=1`);
    expect(back.status).toBe(307);
    expect(back.headers.get("location")).toBe("https://limiter.example/r/v1/next?x=1");
    const relative = await to("/up/v1/other");
    expect(relative.headers.get("location")).toBe("https://limiter.example/r/v1/other");
    const outside = await to(`${originUrl}/admin/secret`);
    expect(outside.status).toBe(502);
    expect((await problemBody(outside)).detail).toBe("The origin redirected outside the paths this gateway serves.");
    const away = await to("https://files.example/blob");
    expect(away.headers.get("location")).toBe("https://files.example/blob");
  });

  it("a freed request's refused keys count against its address's guesses: past them, 429", async () => {
    const e = gatewayEnv({
      origin_headers: { authorization: "Bearer ${OPENAI_KEY}" },
      costs: [{ path: "/free/", cost: 0 }],
      key: { pattern: "sk_[a-z0-9-]+" },
      guesses: { limits: [{ limit: 2, window: "1m" }] },
    });
    const ip = `198.51.100.${Math.floor(Math.random() * 250) + 1}`;
    const guess = () =>
      handle(request("not-a-key", "/free/x", { headers: { "cf-connecting-ip": ip } }), e).then((r) => r.status);
    expect([await guess(), await guess(), await guess()]).toEqual([401, 401, 429]);
  });
});
