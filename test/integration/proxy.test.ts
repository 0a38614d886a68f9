// The Worker's proxy against the real Node origin over HTTP (test/support/origin.ts):
// what reaches the origin, what comes back, and what the client sees when the origin fails.
import { env, exports } from "cloudflare:workers";
import { beforeAll, describe, expect, inject, it } from "vitest";
import type { RateLimitResult } from "../../src/client/result.ts";
import { problemOf } from "../support/problem.ts";
import { countingLimiter, handle, type WorkerEnv } from "./helpers.ts";

const originUrl = inject("originUrl");
const originHost = new URL(originUrl).host;

/** The origin's echo of a request (test/support/origin.ts `Arrival`). */
interface Echo {
  method: string;
  url: string;
  headers: Record<string, string | undefined>;
  body: string;
}

/** The origin's echo of `/__special/digest` (test/support/origin.ts `DigestEcho`). */
interface DigestEcho {
  method: string;
  url: string;
  headers: Record<string, string | undefined>;
  bytes: number;
  sha256: string;
}

/** The real config (wrangler.toml limits, `x-api-key`) with ORIGIN under a path prefix. */
const limited: WorkerEnv = { ...env, ORIGIN: `${originUrl}/base` };
/** Every path costs 0: the object is never involved, no key needed. */
const FREE = { limits: [{ limit: 1, window: "1s" }], costs: [{ path: "/", cost: 0 }] };
const free: WorkerEnv = { ...env, ORIGIN: `${originUrl}/base`, RATE_LIMIT: FREE };

function keyed(init: RequestInit = {}): RequestInit {
  const headers = new Headers(init.headers);
  headers.set("x-api-key", crypto.randomUUID());
  return { ...init, headers };
}

function hex(buffer: ArrayBuffer): string {
  return [...new Uint8Array(buffer)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Reads a body to its end or its error: the bytes that arrived, and the error if any. */
async function readAll(body: ReadableStream<Uint8Array>): Promise<{ bytes: Uint8Array; error: unknown }> {
  const parts: Uint8Array[] = [];
  const reader = body.getReader();
  let error: unknown = null;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
    }
  } catch (e) {
    error = e;
  }
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return { bytes, error };
}

describe("what reaches the origin", () => {
  it("method, path, query, headers and body arrive as sent, under ORIGIN's path prefix", async () => {
    const decisions: RateLimitResult[] = [];
    const path = "/v1/items%3Fx/a%20b/caf%C3%A9;v=1/@:x";
    const query = "?q=1&q=2&s=a%2Bb+c&empty=&flag&u=%E2%9C%93";
    const body = JSON.stringify({ hello: "world", n: 1 });
    const init = keyed({
      method: "POST",
      headers: {
        "content-type": "application/json; charset=utf-8",
        accept: "application/json",
        "x-custom": "one, two",
        authorization: "Basic dXNlcjpwYXNz",
        cookie: "session=abc; theme=dark",
      },
      body,
    });
    const sent = new Headers(init.headers);
    const res = await handle(new Request(`https://w.example:8443${path}${query}`, init), limited, {
      onDecision: (d) => decisions.push(d),
    });
    expect(res.status).toBe(200);
    expect(decisions).toHaveLength(1); // went through the limiter
    expect(res.headers.get("ratelimit-policy")).toBe('"per-second";q=100;w=1, "per-minute";q=1000;w=60');
    const echo = (await res.json()) as Echo;
    expect(echo.method).toBe("POST");
    expect(echo.url).toBe(`/base${path}${query}`);
    expect(echo.body).toBe(body);
    for (const name of ["content-type", "accept", "x-custom", "authorization", "cookie", "x-api-key"]) {
      expect(echo.headers[name], name).toBe(sent.get(name));
    }
    expect(echo.headers["content-length"]).toBe(String(body.length));
    // The origin's own host, not the Worker's; the Worker's host travels as X-Forwarded-Host.
    expect(echo.headers.host).toBe(originHost);
    expect(echo.headers["x-forwarded-host"]).toBe("w.example:8443");
    expect(echo.headers["x-forwarded-proto"]).toBe("https");
  });

  it("a Host header on the incoming request is not forwarded", async () => {
    // Over the wire workerd's fetch derives Host from the URL whatever the headers say; the
    // ORIGIN_SERVICE test below checks that the proxy itself drops it.
    const res = await handle(new Request("http://w.example/h", { headers: { host: "w.example" } }), free);
    const echo = (await res.json()) as Echo;
    expect(echo.headers.host).toBe(originHost);
    expect(echo.headers["x-forwarded-host"]).toBe("w.example");
    expect(echo.headers["x-forwarded-proto"]).toBe("http");
  });

  it("X-Forwarded-For: the client IP (cf-connecting-ip) is appended to any prior list", async () => {
    const cases: [Record<string, string>, string | undefined][] = [
      [{ "cf-connecting-ip": "203.0.113.7" }, "203.0.113.7"],
      [
        { "cf-connecting-ip": "203.0.113.7", "x-forwarded-for": "198.51.100.1, 198.51.100.2" },
        "198.51.100.1, 198.51.100.2, 203.0.113.7",
      ],
      [{ "cf-connecting-ip": "2001:db8::1", "x-forwarded-for": "198.51.100.1" }, "198.51.100.1, 2001:db8::1"],
      // Without a client IP the prior list passes unchanged, and none is invented.
      [{ "x-forwarded-for": "198.51.100.1" }, "198.51.100.1"],
      [{}, undefined],
    ];
    for (const [headers, expected] of cases) {
      const res = await handle(new Request("https://w.example/xff", { headers }), free);
      const echo = (await res.json()) as Echo;
      expect(echo.headers["x-forwarded-for"], JSON.stringify(headers)).toBe(expected);
    }
  });

  const HOP_REQUEST = {
    connection: "x-listed, X-Other",
    "x-listed": "1",
    "x-other": "2",
    "keep-alive": "timeout=5",
    te: "trailers",
    upgrade: "h2c",
    "proxy-authorization": "Basic cHJveHk6c2VjcmV0",
    "proxy-connection": "keep-alive",
    trailer: "x-t",
    "transfer-encoding": "chunked",
    "x-end-to-end": "kept",
  };
  const HOP_NAMES = Object.keys(HOP_REQUEST).filter((n) => n !== "x-end-to-end");

  it("hop-by-hop request headers are dropped before the fetch (seen through ORIGIN_SERVICE)", async () => {
    // workerd's own fetch rewrites Connection, Keep-Alive, TE and Transfer-Encoding on the
    // wire whatever the Worker passes, so the exact set is checked on the Request the proxy
    // hands to its fetcher; the next test checks the ones that would survive the wire. (Left
    // in, `Upgrade: websocket` would even make workerd's fetch send a WebSocket handshake.)
    let seen: Headers | null = null;
    const service = {
      fetch: async (r: Request) => {
        seen = new Headers(r.headers);
        return new Response("ok");
      },
    } as unknown as Fetcher;
    // A POST with a body: Transfer-Encoding on a GET is a body the proxy refuses ("a GET or HEAD with a body").
    const res = await handle(
      new Request("https://w.example/hop", { method: "POST", headers: HOP_REQUEST, body: "x" }),
      {
        ...free,
        ORIGIN_SERVICE: service,
      },
    );
    expect(res.status).toBe(200);
    expect(seen).not.toBeNull();
    const headers = seen as unknown as Headers;
    for (const name of HOP_NAMES) expect(headers.has(name), name).toBe(false);
    expect(headers.get("x-end-to-end")).toBe("kept");
  });

  it("hop-by-hop request headers do not reach the origin over the network", async () => {
    const res = await handle(
      new Request("https://w.example/hop", keyed({ method: "POST", headers: HOP_REQUEST, body: "x" })),
      limited,
    );
    expect(res.status).toBe(200);
    const echo = (await res.json()) as Echo;
    for (const name of ["x-listed", "x-other", "te", "upgrade", "proxy-authorization", "proxy-connection", "trailer"]) {
      expect(echo.headers[name], name).toBeUndefined();
    }
    expect(echo.headers["keep-alive"]).toBeUndefined();
    // Whatever Connection workerd itself sends, it lists none of the client's names.
    expect(echo.headers.connection ?? "").not.toMatch(/x-listed|x-other/i);
    expect(echo.headers["x-end-to-end"]).toBe("kept");
  });

  it("PUT, PATCH, DELETE, OPTIONS, HEAD and WebDAV/extension methods pass through", async () => {
    for (const method of ["PUT", "PATCH", "DELETE"]) {
      const res = await handle(
        new Request("https://w.example/m", keyed({ method, body: `body of ${method}` })),
        limited,
      );
      const echo = (await res.json()) as Echo;
      expect([echo.method, echo.url, echo.body]).toEqual([method, "/base/m", `body of ${method}`]);
    }
    for (const method of ["OPTIONS", "PROPFIND", "PURGE", "REPORT", "QUERY"]) {
      const res = await handle(new Request("https://w.example/m?x=1", keyed({ method })), limited);
      const echo = (await res.json()) as Echo;
      expect([echo.method, echo.url], method).toEqual([method, "/base/m?x=1"]);
    }
    const head = await handle(new Request("https://w.example/m", keyed({ method: "HEAD" })), limited);
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toBe("application/json");
    expect(await head.text()).toBe("");
  });

  it("workerd refuses custom methods outright, so none can reach the Worker", () => {
    // Finding: workerd accepts only the methods it knows (GET…PATCH, WebDAV's, PURGE, QUERY…);
    // a Request with any other method cannot even be constructed, so no Worker can proxy one.
    expect(() => new Request("https://w.example/m", { method: "FROBNICATE" })).toThrow(
      /Invalid HTTP method string: FROBNICATE/,
    );
    // Known methods are upper-cased whatever their spelling ("patch" is not, per the Fetch spec).
    expect(new Request("https://w.example/m", { method: "patch" }).method).toBe("PATCH");
  });
});

describe("bodies stream both ways", () => {
  const MB20 = 20 * 1024 * 1024;
  const CHUNK = 64 * 1024;

  it("a 20 MB request body streams to the origin intact, before the client has sent all of it", async () => {
    const id = crypto.randomUUID();
    const digest = new crypto.DigestStream("SHA-256");
    const writer = digest.getWriter();
    let produced = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (produced === CHUNK) {
          // Hold the rest back until the origin has received the first chunk: a proxy that
          // buffered the body before sending would deadlock here (and the test time out).
          const seen = await fetch(`${originUrl}/__special/progress/${id}?atLeast=${CHUNK}`);
          expect(seen.status).toBe(200);
          await seen.body?.cancel();
        }
        if (produced >= MB20) {
          controller.close();
          return;
        }
        const chunk = crypto.getRandomValues(new Uint8Array(CHUNK));
        await writer.write(chunk.slice());
        produced += chunk.length;
        controller.enqueue(chunk);
      },
    });
    const res = await handle(
      new Request(`https://w.example/upload/__special/digest?id=${id}`, keyed({ method: "POST", body })),
      limited,
    );
    expect(res.status).toBe(200);
    await writer.close();
    const echo = (await res.json()) as DigestEcho;
    expect(echo.method).toBe("POST");
    expect(echo.url).toBe(`/base/upload/__special/digest?id=${id}`);
    expect(echo.bytes).toBe(MB20);
    expect(echo.sha256).toBe(hex(await digest.digest));
  });

  it("a 20 MB response streams back intact through the real Worker (exports.default.fetch)", async () => {
    const res = await exports.default.fetch(new Request(`https://w.example/__special/bytes/${MB20}?seed=7`, keyed()));
    expect(res.status).toBe(200);
    expect(res.headers.get("ratelimit")).not.toBeNull();
    const digest = new crypto.DigestStream("SHA-256");
    let bytes = 0;
    await res.body
      ?.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            bytes += chunk.length;
            controller.enqueue(chunk);
          },
        }),
      )
      .pipeTo(digest);
    expect(bytes).toBe(MB20);
    expect(String(bytes)).toBe(res.headers.get("x-bytes"));
    expect(hex(await digest.digest)).toBe(res.headers.get("x-sha256"));
  });

  it("a response with Content-Length streams back with its length", async () => {
    const n = 3 * 1024 * 1024 + 17;
    const res = await handle(new Request(`https://w.example/__special/bytes/${n}?length=1`, keyed()), limited);
    expect(res.headers.get("content-length")).toBe(String(n));
    const { bytes, error } = await readAll(res.body as ReadableStream<Uint8Array>);
    expect(error).toBeNull();
    expect(bytes.length).toBe(n);
    expect(hex(await crypto.subtle.digest("SHA-256", bytes))).toBe(res.headers.get("x-sha256"));
  });

  it("the response body reaches the client before the origin has finished it", async () => {
    const id = crypto.randomUUID();
    const res = await handle(new Request(`https://w.example/__special/gated/${id}?first=1000`, keyed()), limited);
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    // The origin sends 1000 × "a" and then waits for the release: a proxy that buffered the
    // response would never hand these bytes over (and the test would time out).
    let first = "";
    while (first.length < 1000) {
      const { done, value } = await reader.read();
      expect(done).toBe(false);
      first += new TextDecoder().decode(value);
    }
    expect(first).toBe("a".repeat(1000));
    const release = await fetch(`${originUrl}/__special/release/${id}`, { method: "POST" });
    expect(release.status).toBe(204);
    let rest = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    expect(rest).toBe("z".repeat(1000));
  });
});

describe("what comes back from the origin", () => {
  it("redirects are passed back, not followed: status, Location (unrewritten) and body", async () => {
    for (const status of [301, 302, 303, 307, 308]) {
      for (const location of ["/elsewhere?x=1", `${originUrl}/moved`, "https://other.example/path"]) {
        const url = `https://w.example/r/__special/redirect?status=${status}&location=${encodeURIComponent(location)}`;
        const res = await handle(new Request(url, keyed({ method: "POST", body: "x" })), limited);
        expect(res.status, `${status} ${location}`).toBe(status);
        expect(res.headers.get("location")).toBe(location);
        expect(await res.text()).toBe("redirecting");
        expect(res.headers.get("ratelimit")).not.toBeNull();
      }
    }
  });

  it("origin 5xx responses pass through with their body and headers, not turned into 502", async () => {
    for (const status of [500, 502, 503, 504]) {
      const res = await handle(new Request(`https://w.example/__special/status/${status}`, keyed()), limited);
      expect(res.status).toBe(status);
      expect(res.headers.get("content-type")).toBe("text/plain");
      expect(res.headers.get("x-origin-status")).toBe(String(status));
      expect(res.headers.get("ratelimit")).not.toBeNull();
      expect(await res.text()).toBe(`origin says ${status}`);
    }
  });

  it("hop-by-hop response headers are dropped; end-to-end ones, and every Set-Cookie, kept", async () => {
    // Control: workerd's fetch does expose the origin's hop-by-hop headers to JavaScript, so
    // their absence below is the proxy's doing.
    const direct = await fetch(`${originUrl}/__special/hop`);
    await direct.body?.cancel();
    expect(direct.headers.get("connection")).toBe("x-foo, x-bar");
    expect(direct.headers.get("keep-alive")).toBe("timeout=5");
    expect(direct.headers.get("x-foo")).toBe("1");
    expect(direct.headers.get("transfer-encoding")).toBe("chunked");

    const res = await handle(new Request("https://w.example/__special/hop", keyed()), limited);
    expect(res.status).toBe(200);
    for (const name of [
      "connection",
      "keep-alive",
      "x-foo",
      "x-bar",
      "proxy-authenticate",
      "trailer",
      "transfer-encoding",
    ]) {
      expect(res.headers.has(name), name).toBe(false);
    }
    expect(res.headers.get("x-kept")).toBe("yes");
    expect(res.headers.getSetCookie()).toEqual(["a=1; Path=/", "b=2; Path=/"]);
    expect(await res.json()).toEqual({ hop: true });
  });
});

describe("when the origin fails", () => {
  let closedUrl = "";
  beforeAll(async () => {
    const res = await fetch(`${originUrl}/__special/closed-port`);
    closedUrl = ((await res.json()) as { url: string }).url;
  });

  it("unreachable origin (closed port): 502 problem+json, no stack, RateLimit headers (quota was spent)", async () => {
    const decisions: RateLimitResult[] = [];
    const res = await handle(
      new Request("https://w.example/x", keyed({ method: "POST", body: "payload" })),
      { ...env, ORIGIN: closedUrl },
      { onDecision: (d) => decisions.push(d) },
    );
    expect(decisions.map((d) => d.allowed)).toEqual([true]);
    expect(res.headers.get("ratelimit-policy")).toBe('"per-second";q=100;w=1, "per-minute";q=1000;w=60');
    expect(res.headers.get("ratelimit")).toMatch(/^"per-second";r=99;t=1, "per-minute";r=999;t=60$/);
    const body = await problemOf(res, 502);
    expect(body.title).toBe("Bad Gateway");
    // workerd reports a refused connection (it logs "Connection refused (os error 111)") to
    // JavaScript as "Network connection lost."; the detail carries it with one period (it
    // used to come out as "lost..").
    expect(body.detail).toBe("The origin could not be reached: Network connection lost.");
  });

  it("unreachable origin on a cost-0 route: 502, and no RateLimit headers (no plan applied)", async () => {
    const res = await handle(new Request("https://w.example/x"), { ...free, ORIGIN: closedUrl });
    expect(res.headers.has("ratelimit")).toBe(false);
    expect(res.headers.has("ratelimit-policy")).toBe(false);
    await problemOf(res, 502);
  });

  it("origin closing the connection before any response: 502", async () => {
    const res = await handle(new Request("https://w.example/__special/reset", keyed()), limited);
    expect((await problemOf(res, 502)).title).toBe("Bad Gateway");
  });

  it("hanging origin with origin_timeout 200ms: 504 problem+json, with RateLimit headers", async () => {
    const cfg: WorkerEnv = {
      ...env,
      ORIGIN: originUrl,
      RATE_LIMIT: { limits: [{ limit: 5, window: "1m" }], origin_timeout: "200ms" },
    };
    const res = await handle(new Request("https://w.example/__special/hang", keyed()), cfg);
    expect(res.headers.get("ratelimit")).toBe('"per-minute";r=4;t=60');
    expect(await problemOf(res, 504)).toMatchObject({
      title: "Gateway Timeout",
      status: 504,
      detail: "The origin sent no response within 200 ms.",
    });
  });

  // Finding (workerd 1.20261102.1): once the origin's status and headers have arrived, the
  // Worker has already returned its Response, so a connection dropped mid-body cannot become a
  // 502. The client gets the origin's 200 and headers, every byte sent before the drop, and
  // then its read rejects with `Error: Network connection lost.` — with or without a declared
  // Content-Length, and the same through the real Worker's HTTP path as through handle().
  // (workerd also logs "disconnected: HTTP body: error reading a body from connection".)
  for (const length of [false, true]) {
    it(`origin dropping mid-response (${length ? "Content-Length" : "chunked"}): 200, then a body read error`, async () => {
      const url = `https://w.example/__special/drop?after=5000${length ? "&length=1" : ""}`;
      for (const via of ["handle", "exports.default.fetch"]) {
        const req = new Request(url, keyed());
        const res = via === "handle" ? await handle(req, limited) : await exports.default.fetch(req);
        expect(res.status, via).toBe(200);
        expect(res.headers.get("ratelimit"), via).not.toBeNull();
        if (length) expect(res.headers.get("content-length"), via).toBe("10000");
        const { bytes, error } = await readAll(res.body as ReadableStream<Uint8Array>);
        expect(bytes.length, via).toBe(5000);
        expect(new TextDecoder().decode(bytes), via).toBe("a".repeat(5000));
        expect(error, via).toBeInstanceOf(Error);
        expect((error as Error).message, via).toBe("Network connection lost.");
      }
    });
  }
});

describe("ORIGIN_SERVICE", () => {
  it("receives the request (URL under ORIGIN, method, headers, body) instead of the network", async () => {
    const seen: { url: string; method: string; headers: Headers; body: string; redirect: string }[] = [];
    const service = {
      fetch: async (r: Request) => {
        seen.push({
          url: r.url,
          method: r.method,
          headers: new Headers(r.headers),
          body: await r.text(),
          redirect: r.redirect,
        });
        return new Response("from the service", { status: 201, headers: { "x-from": "service" } });
      },
    } as unknown as Fetcher;
    const marker = crypto.randomUUID();
    const init = keyed({
      method: "PUT",
      headers: {
        host: "w.example",
        "cf-connecting-ip": "203.0.113.9",
        "x-custom": "yes",
        "content-type": "text/plain",
      },
      body: "sent to the service",
    });
    const res = await handle(new Request(`https://w.example/svc/${marker}?a=1&b=2`, init), {
      ...limited,
      ORIGIN_SERVICE: service,
    });
    expect(res.status).toBe(201);
    expect(res.headers.get("x-from")).toBe("service");
    expect(res.headers.get("ratelimit")).not.toBeNull();
    expect(await res.text()).toBe("from the service");
    expect(seen).toHaveLength(1);
    const r = seen[0];
    expect(r?.url).toBe(`${originUrl}/base/svc/${marker}?a=1&b=2`);
    expect(r?.method).toBe("PUT");
    expect(r?.body).toBe("sent to the service");
    expect(r?.redirect).toBe("manual");
    expect(r?.headers.get("x-custom")).toBe("yes");
    expect(r?.headers.has("host")).toBe(false);
    expect(r?.headers.get("x-api-key")).toBe(new Headers(init.headers).get("x-api-key"));
    expect(r?.headers.get("x-forwarded-for")).toBe("203.0.113.9");
    expect(r?.headers.get("x-forwarded-host")).toBe("w.example");
    expect(r?.headers.get("x-forwarded-proto")).toBe("https");
    // Nothing went over the network to the origin.
    const arrivals = (await (await fetch(`${originUrl}/__arrivals`)).json()) as Echo[];
    expect(arrivals.some((a) => a.url.includes(marker))).toBe(false);
  });

  it("a service that throws: 502 with the first line of its message only", async () => {
    const service = {
      fetch: async () => {
        throw new Error("boom\n    at secret (/srv/app.js:1:1)");
      },
    } as unknown as Fetcher;
    const res = await handle(new Request("https://w.example/x"), { ...free, ORIGIN_SERVICE: service });
    expect((await problemOf(res, 502)).detail).toBe("The origin could not be reached: boom.");
  });

  it("a service that ignores the abort signal still times out: 504", async () => {
    const service = { fetch: () => new Promise<Response>(() => {}) } as unknown as Fetcher;
    const res = await handle(new Request("https://w.example/x"), {
      ...free,
      RATE_LIMIT: { ...FREE, origin_timeout: "200ms" },
      ORIGIN_SERVICE: service,
    });
    expect((await problemOf(res, 504)).title).toBe("Gateway Timeout");
  });
});

describe("the path the origin receives", () => {
  it("is the normalised path the rules matched: unreserved escapes decoded, dot segments and empty ones gone", async () => {
    const res = await handle(new Request("https://w.example//%76%31/./x/../items/%7e%61?q=%2F", keyed()), limited);
    expect(res.status).toBe(200);
    expect(((await res.json()) as Echo).url).toBe("/base/v1/items/~a?q=%2F");
  });

  it("an encoded slash or a dot segment with parameters: 400 before anything is counted", async () => {
    for (const path of ["/health%2F..%2Fv1/x", "/v1%5Cx", "/health/..;/v1/x"]) {
      const res = await handle(new Request(`https://w.example${path}`, keyed()), limited);
      expect((await problemOf(res, 400)).title, path).toBe("Bad Request");
      expect(res.headers.has("RateLimit"), path).toBe(false);
    }
  });
});

describe("a GET or HEAD with a body", () => {
  // workerd hands the Worker a chunked GET's body and its Transfer-Encoding (test/e2e/bad-input.test.ts, "GET and HEAD
  // with a body"); the framing alone is enough to refuse it, whatever stream the runtime gives.
  it("Transfer-Encoding on a GET or HEAD: 400 before anything is counted, with or without a body stream", async () => {
    const counting = countingLimiter();
    const e = { ...limited, LIMITER: counting.namespace };
    for (const method of ["GET", "HEAD"]) {
      for (const te of ["chunked", "gzip, chunked"]) {
        const request = new Request(
          "https://w.example/v1/items",
          keyed({ method, headers: { "transfer-encoding": te } }),
        );
        expect(request.body).toBeNull();
        const res = await handle(request, e);
        expect(res.status, `${method} ${te}`).toBe(400);
        if (method === "GET") {
          expect((await problemOf(res, 400)).detail).toBe("A GET request cannot carry a body; send it without one.");
        }
        expect(res.headers.has("RateLimit")).toBe(false);
      }
    }
    expect(counting.calls()).toBe(0);
    // A GET without one is counted and proxied.
    expect((await handle(new Request("https://w.example/v1/items", keyed()), e)).status).toBe(200);
    expect(counting.calls()).toBe(1);
  });
});
