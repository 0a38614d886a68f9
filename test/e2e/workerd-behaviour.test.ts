// What workerd itself does with bad input before (or around) the Worker — not our code. A failure here means
// "workerd changed": read its release notes, then update the assertion and docs/design.md's limitations.
// Pinned for workerd 1.20261102.1 under wrangler 4.156.2 (the exact head-size boundary, bisected once at a single
// value of 507,556 bytes passing and 507,568 not, is not asserted):
// - NUL, a bare CR or LF, or an obs-fold line continuation in a header: `400` text/plain `invalid HTTP header
//   parsed`, the Worker never runs. (Other control characters reach the Worker: bad-input.test.ts.)
// - Header bytes are read as Latin-1: 0xff 0xfe in a header are forwarded to the origin byte for byte.
// - Header size: no per-header limit (a 256 KiB value passes); the whole request head is capped at about 512 KiB,
//   beyond which workerd answers `431` text/plain `message head is too large` itself.
// - Methods: the ones its HTTP parser knows (standard, WebDAV, PURGE, QUERY, SEARCH, and TRACE — workerd does not
//   apply fetch's forbidden-method list) reach the Worker; any other token (`FROBNICATE`, `M-SEARCH`, lower-case
//   `get`) gets `501` text/plain `ERROR: Unrecognized request method.`; `CONNECT` goes to a `connect()` handler the
//   Worker does not export: `500` text/plain `Internal Server Error` and an "Uncaught exception … Handler does not
//   export a connect() function" log line.
import { describe, expect, it } from "vitest";
import { type Limiter, waitForOutput } from "../support/harness.ts";
import type { Origin } from "../support/origin.ts";
import { limiterForFile } from "./fixture.ts";
import { type Header, latin1, rawTo } from "./raw-http.ts";

let origin: Origin;
let limiter: Limiter;

const RATE_LIMIT = { limits: [{ limit: 1000, window: "1m" }] };

// An origin that accepts heads up to 4 MiB, so what workerd lets through arrives intact.
limiterForFile(
  { rateLimit: RATE_LIMIT, statePrefix: "limiter-workerd-", origin: { maxHeaderSize: 4 << 20 } },
  (o, l) => {
    origin = o;
    limiter = l;
  },
);

const key = () => `k_${crypto.randomUUID()}`;
/** A fresh path, so a test can tell which arrivals at the origin are its own. */
const path = () => `/workerd/${crypto.randomUUID()}`;
const arrivals = (p: string) => origin.arrivals.filter((a) => new URL(a.url, "http://x").pathname === p);
/** One request to the limiter on its own connection, written byte for byte. */
const raw = (method: string, target: string, headers: Header[]) => rawTo(limiter.port, method, target, headers);

describe("header bytes", () => {
  it.each([
    ["NUL", "ab\x00cd"],
    ["a bare CR", "ab\rcd"],
    ["a bare LF", "ab\ncd"],
    ["an obs-fold line continuation", "ab\r\n cd"],
  ])("%s in a header: workerd's own 400 text/plain, the Worker never runs", async (_, value) => {
    const p = path();
    const r = await raw("GET", p, [["x-api-key", latin1(value)]]);
    expect(r.status).toBe(400);
    expect(r.headers["content-type"]).toBe("text/plain");
    expect(r.body.toString()).toBe("invalid HTTP header parsed");
    expect(r.headers.ratelimit).toBeUndefined();
    expect(arrivals(p)).toHaveLength(0);
  });

  it("non-UTF-8 bytes in a header are read as Latin-1 and reach the origin byte for byte", async () => {
    const p = path();
    const r = await raw("GET", p, [
      ["x-api-key", key()],
      ["x-other", Buffer.from([0x61, 0xff, 0xfe, 0x62])],
    ]);
    expect(r.status).toBe(200);
    const [arrival] = arrivals(p);
    // Node decodes header bytes as Latin-1, so encoding back gives the bytes on the wire.
    expect(Buffer.from(String(arrival?.headers["x-other"]), "latin1")).toEqual(Buffer.from([0x61, 0xff, 0xfe, 0x62]));
  });
});

describe("head size", () => {
  it("no per-header limit: 100 × 1 KiB headers and a 256 KiB header reach the origin intact", async () => {
    const many: Header[] = Array.from({ length: 100 }, (_, i) => [`x-h${i}`, "h".repeat(1024)]);
    const p1 = path();
    expect((await raw("GET", p1, [["x-api-key", key()], ...many])).status).toBe(200);
    const [first] = arrivals(p1);
    for (const [name, value] of many) expect(first?.headers[name]).toBe(value);

    const p2 = path();
    const value = "h".repeat(256 * 1024);
    expect(
      (
        await raw("GET", p2, [
          ["x-api-key", key()],
          ["x-big", value],
        ])
      ).status,
    ).toBe(200);
    expect(arrivals(p2)[0]?.headers["x-big"]).toBe(value);
  });

  it("a 1 MiB header: workerd's own 431 text/plain, the Worker never runs", async () => {
    const p = path();
    const r = await raw("GET", p, [
      ["x-api-key", key()],
      ["x-big", "h".repeat(1024 * 1024)],
    ]);
    expect(r.status).toBe(431);
    expect(r.headers["content-type"]).toBe("text/plain");
    expect(r.body.toString()).toBe("message head is too large");
    expect(r.headers.ratelimit).toBeUndefined();
    expect(arrivals(p)).toHaveLength(0);
  });
});

describe("methods", () => {
  it("TRACE: workerd lets it through (no forbidden-method list), so the Worker proxies it", async () => {
    const p = path();
    const r = await raw("TRACE", p, [["x-api-key", key()]]);
    expect(r.status).toBe(200);
    expect(arrivals(p).map((a) => a.method)).toEqual(["TRACE"]);
  });

  it.each(["FROBNICATE", "M-SEARCH", "get"])("%s: workerd's own 501 text/plain, the Worker never runs", async (m) => {
    const p = path();
    const r = await raw(m, p, [["x-api-key", key()]]);
    expect(r.statusLine).toBe("HTTP/1.1 501 Not Implemented");
    expect(r.headers["content-type"]).toBe("text/plain");
    expect(r.body.toString()).toBe("ERROR: Unrecognized request method.");
    expect(arrivals(p)).toHaveLength(0);
  });

  it("CONNECT: workerd's own 500 text/plain (the Worker exports no connect() handler), no stack trace", async () => {
    const r = await raw("CONNECT", "127.0.0.1:9", [["x-api-key", key()]]);
    expect(r.statusLine).toBe("HTTP/1.1 500 Internal Server Error");
    expect(r.body.toString()).toBe("Internal Server Error");
    await waitForOutput(limiter, "Handler does not export a connect() function", 15_000);
    expect(limiter.output()).not.toContain("internal_error");
  });
});
