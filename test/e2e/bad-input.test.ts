// Bad input over real HTTP to `wrangler dev` (workerd): malformed, missing and conflicting keys, huge headers, a
// 100 MB streamed body (workerd's memory measured), unusual methods, and an invalid config (one from a TOML table,
// one from a JSON string var; every field's errors are covered by test/unit/config/ and the integration
// tests). What workerd itself does with bad input before the Worker runs is pinned in workerd-behaviour.test.ts.
import { createHash, randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir, waitForOutput } from "../support/harness.ts";
import type { DigestEcho, Origin } from "../support/origin.ts";
import { type Problem, problemOfParts } from "../support/problem.ts";
import { groupPids, memoryOf } from "../support/proc.ts";
import { type Bundle, buildBundle, startWorkers, type Workers } from "../support/workers.ts";
import { limiterForFile } from "./fixture.ts";
import { type Header, latin1, partsOf, type RawResponse, rawRequest, rawTo, sendRaw } from "./raw-http.ts";

let origin: Origin;
let limiter: Limiter;

// One instance for the file: keys from the header, Bearer and `?api_key`, a limit no test reaches.
const LIMIT = 1000;
const RATE_LIMIT = { limits: [{ limit: LIMIT, window: "1m" }], key: { query: "api_key" } };

limiterForFile({ rateLimit: RATE_LIMIT, statePrefix: "limiter-bad-input-" }, (o, l) => {
  origin = o;
  limiter = l;
});

const key = () => `k_${crypto.randomUUID()}`;
/** A fresh path, so a test can tell which arrivals at the origin are its own. */
const path = () => `/bad-input/${crypto.randomUUID()}`;
const arrivals = (p: string) => origin.arrivals.filter((a) => new URL(a.url, "http://x").pathname === p);
/** One request to the limiter on its own connection, written byte for byte. */
const raw = (method: string, target: string, headers: Header[], body?: Buffer, port = limiter.port) =>
  rawTo(port, method, target, headers, body);

/** Asserts the limiter's own problem+json answer (test/support/problem.ts) and returns it. */
const problemOf = (r: RawResponse, status: number): Problem => problemOfParts(partsOf(r), status);

const MALFORMED =
  "may hold printable ASCII only (no spaces, commas — a repeated header arrives joined by one — or control characters)";

describe("keys", () => {
  it("no key: 401 problem+json with WWW-Authenticate, nothing reaches the origin", async () => {
    const p = path();
    const r = await raw("GET", p, []);
    expect(problemOf(r, 401).detail).toBe("This API needs an API key.");
    expect(r.headers["www-authenticate"]).toBe('Bearer realm="api"');
    expect(arrivals(p)).toHaveLength(0);
  });

  it("an empty x-api-key is a missing key: 401", async () => {
    const p = path();
    expect(problemOf(await raw("GET", p, [["x-api-key", ""]]), 401).title).toBe("Unauthorized");
    expect(arrivals(p)).toHaveLength(0);
  });

  // Defined behaviour (src/pipeline/key.ts strips the spaces and tabs around a key in every source): a key of only those is
  // no key, not a malformed one.
  // On the wire the HTTP parser already strips the surrounding spaces and tabs of a header value.
  it.each([
    ["x-api-key of spaces", [["x-api-key", "   "]], ""],
    ["x-api-key of tabs and spaces", [["x-api-key", latin1("\t \t")]], ""],
    ["Authorization: Bearer followed by spaces only", [["authorization", "Bearer    "]], ""],
    ["?api_key of encoded spaces", [], "?api_key=%20%20"],
  ] as [string, Header[], string][])("a whitespace-only key is a missing key: 401 (%s)", async (_, headers, query) => {
    const p = path();
    expect(problemOf(await raw("GET", p + query, headers), 401).detail).toBe("This API needs an API key.");
    expect(arrivals(p)).toHaveLength(0);
  });

  it("a 10 KB key: workerd passes the header on, the limiter answers 400 (longer than key.max_length 256)", async () => {
    const p = path();
    const long = "a".repeat(10 * 1024);
    const header = problemOf(await raw("GET", p, [["x-api-key", long]]), 400);
    expect(header.title).toBe("Malformed API key");
    expect(header.detail).toBe("the key in x-api-key is longer than 256 characters");
    const bearer = problemOf(await raw("GET", p, [["authorization", `Bearer ${long}`]]), 400);
    expect(bearer.detail).toBe("the key in Authorization: Bearer is longer than 256 characters");
    expect(arrivals(p)).toHaveLength(0);
  });

  it("key length boundary: 256 characters pass, 257 get 400", async () => {
    const p = path();
    const k = key();
    const at = await raw("GET", p, [["x-api-key", k + "b".repeat(256 - k.length)]]);
    expect(at.status).toBe(200);
    expect(problemOf(await raw("GET", p, [["x-api-key", "c".repeat(257)]]), 400).detail).toContain("longer than 256");
    expect(arrivals(p)).toHaveLength(1);
  });

  it.each([
    ["0x01", "\x01"],
    ["ESC", "\x1b"],
    ["DEL", "\x7f"],
    ["a space", " "],
  ])("a key with %s inside reaches the Worker: 400 problem+json", async (_, c) => {
    const p = path();
    const r = await raw("GET", p, [["x-api-key", latin1(`k_ab${c}cd`)]]);
    expect(problemOf(r, 400).detail).toBe(`the key in x-api-key ${MALFORMED}`);
    expect(arrivals(p)).toHaveLength(0);
  });

  it("non-UTF-8 bytes (0xff 0xfe) in x-api-key: read as Latin-1 by workerd, 400 from the limiter", async () => {
    const p = path();
    const r = await raw("GET", p, [["x-api-key", Buffer.from([0x6b, 0x5f, 0xff, 0xfe, 0x6b])]]);
    expect(problemOf(r, 400).detail).toBe(`the key in x-api-key ${MALFORMED}`);
    // Valid UTF-8 outside ASCII is malformed too.
    const utf8 = await raw("GET", p, [["x-api-key", Buffer.from("k_schlüssel", "utf8")]]);
    expect(problemOf(utf8, 400).title).toBe("Malformed API key");
    expect(arrivals(p)).toHaveLength(0);
  });

  it.each([
    ["a no-break space (U+00A0)", "\u00a0"],
    ["an ideographic space (U+3000)", "\u3000"],
    ["a BOM", "\ufeff"],
    ["VT", "\v"],
    ["FF", "\f"],
  ])("a key ending in %s is malformed in every source (400), never counted as the shorter key", async (_, c) => {
    const p = path();
    const k = key();
    const bearer = await raw("GET", p, [["authorization", Buffer.from(`Bearer ${k}${c}`, "utf8")]]);
    expect(problemOf(bearer, 400).title).toBe("Malformed API key");
    const query = await raw("GET", `${p}?api_key=${encodeURIComponent(`${k}${c}`)}`, []);
    expect(problemOf(query, 400).detail).toBe(`the key in ?api_key ${MALFORMED}`);
    const header = await raw("GET", p, [["x-api-key", Buffer.from(`${k}${c}`, "utf8")]]);
    expect(problemOf(header, 400).title).toBe("Malformed API key");
    expect(arrivals(p)).toHaveLength(0);
    // Nothing was counted against the shorter key.
    const clean = await raw("GET", p, [["x-api-key", k]]);
    expect(clean.headers.ratelimit).toBe(`"per-minute";r=${LIMIT - 1};t=60`);
  });

  it("two x-api-key lines with different keys (joined as `a, b`): 400", async () => {
    const p = path();
    const r = await raw("GET", p, [
      ["x-api-key", key()],
      ["x-api-key", key()],
    ]);
    expect(problemOf(r, 400).detail).toBe(`the key in x-api-key ${MALFORMED}`);
    expect(arrivals(p)).toHaveLength(0);
  });

  it("two x-api-key lines with the same key: 400 too (a repeated key header is malformed, docs/configuration.md)", async () => {
    const p = path();
    const k = key();
    const r = await raw("GET", p, [
      ["x-api-key", k],
      ["x-api-key", k],
    ]);
    expect(problemOf(r, 400).detail).toBe(`the key in x-api-key ${MALFORMED}`);
    const bearer = await raw("GET", p, [
      ["authorization", `Bearer ${k}`],
      ["authorization", `Bearer ${k}`],
    ]);
    expect(problemOf(bearer, 400).detail).toBe(`the key in Authorization: Bearer ${MALFORMED}`);
    expect(arrivals(p)).toHaveLength(0);
  });

  // `x-api-key: k` plus an empty `x-api-key:` line arrives as "k, ". Trimmed to "k," it would be a bucket of its own
  // while an origin reading the header as a list sees k: keys may not hold commas, so it is malformed.
  it("a repeated x-api-key whose second line is empty: 400", async () => {
    const p = path();
    const r = await raw("GET", p, [
      ["x-api-key", key()],
      ["x-api-key", ""],
    ]);
    expect(r.status).toBe(400);
  });

  it("x-api-key and a different Bearer key: 400 naming both; the same key in both: accepted", async () => {
    const p = path();
    const [a, b] = [key(), key()];
    const r = await raw("GET", p, [
      ["x-api-key", a],
      ["authorization", `Bearer ${b}`],
    ]);
    expect(problemOf(r, 400).detail).toBe("x-api-key and Authorization: Bearer carry different keys; send one key");
    // The scheme is case-insensitive.
    const lower = await raw("GET", p, [
      ["x-api-key", a],
      ["authorization", `bearer ${b}`],
    ]);
    expect(problemOf(lower, 400).title).toBe("Malformed API key");
    expect(arrivals(p)).toHaveLength(0);

    const same = await raw("GET", p, [
      ["x-api-key", a],
      ["authorization", `Bearer ${a}`],
    ]);
    expect(same.status).toBe(200);
    expect(same.headers.ratelimit).toBe(`"per-minute";r=${LIMIT - 1};t=60`);
    expect(arrivals(p).map((x) => [x.headers["x-api-key"], x.headers.authorization])).toEqual([[a, `Bearer ${a}`]]);
  });

  // docs/configuration.md: "Precedence is header, then Bearer, then query. A request whose sources carry different keys gets 400."
  // All sources must agree, so precedence shows in which source a 400 names first.
  it("precedence header, then Bearer, then query: disagreements name the earlier source first", async () => {
    const p = path();
    const [a, b] = [key(), key()];
    const headerVsQuery = await raw("GET", `${p}?api_key=${b}`, [["x-api-key", a]]);
    expect(problemOf(headerVsQuery, 400).detail).toBe("x-api-key and ?api_key carry different keys; send one key");
    const bearerVsQuery = await raw("GET", `${p}?api_key=${b}`, [["authorization", `Bearer ${a}`]]);
    expect(problemOf(bearerVsQuery, 400).detail).toBe(
      "Authorization: Bearer and ?api_key carry different keys; send one key",
    );
    const twoQueries = await raw("GET", `${p}?api_key=${a}&api_key=${a}`, []);
    expect(problemOf(twoQueries, 400).detail).toBe("the api_key query parameter is given 2 times");
    expect(arrivals(p)).toHaveLength(0);

    const all = await raw("GET", `${p}?api_key=${a}`, [
      ["x-api-key", a],
      ["authorization", `Bearer ${a}`],
    ]);
    expect(all.status).toBe(200);
    const queryOnly = await raw("GET", `${p}?api_key=${a}`, []);
    expect(queryOnly.status).toBe(200);
    // Both counted against the same key.
    expect(queryOnly.headers.ratelimit).toBe(`"per-minute";r=${LIMIT - 2};t=60`);
    expect(arrivals(p)).toHaveLength(2);
  });
});

/** `count` headers `x-h<i>` of `size` bytes each. */
const manyHeaders = (count: number, size: number): Header[] =>
  Array.from({ length: count }, (_, i) => [`x-h${i}`, "h".repeat(size)]);

describe("huge headers", () => {
  it.each([
    ["100 headers of 1 KiB", manyHeaders(100, 1024)],
    ["one 64 KiB header", [["x-big", "h".repeat(64 * 1024)]]],
  ] as [string, Header[]][])("%s: workerd lets them through; the limiter answers, never 500", async (_, big) => {
    const p = path();
    // Without a key, and with a malformed one, the limiter's own answers.
    expect(problemOf(await raw("GET", p, big), 401).title).toBe("Unauthorized");
    expect(problemOf(await raw("GET", p, [["x-api-key", "bad key"], ...big]), 400).title).toBe("Malformed API key");
    // With a key: granted and proxied; the recording Node origin refuses a head over 16 KiB with its own 431,
    // passed back unchanged (with the RateLimit headers of the grant), and records nothing.
    const r = await raw("GET", p, [["x-api-key", key()], ...big]);
    expect(r.status).toBe(431);
    expect(r.statusLine).toBe("HTTP/1.1 431 Request Header Fields Too Large");
    expect(r.headers.ratelimit).toBe(`"per-minute";r=${LIMIT - 1};t=60`);
    expect(r.body.length).toBe(0);
    expect(arrivals(p)).toHaveLength(0);
  });
});

/** Resident memory of `pid` in bytes (0 once it has gone). */
const rss = (pid: number) => memoryOf(pid).rss * 1024;
const MiB = 1024 * 1024;

describe("a 100 MB request body", () => {
  it("streams through to the origin intact while workerd's memory stays flat (peak RSS growth < 50 MiB)", async () => {
    const k = key();
    const digest = `${limiter.url}/__special/digest`;
    // Warm up: the key's object and the proxy path exist before the baseline.
    const warm = await fetch(digest, { method: "POST", headers: { "x-api-key": k }, body: "warm" });
    expect(((await warm.json()) as DigestEcho).bytes).toBe(4);

    const pids = groupPids(limiter.pgid, "workerd");
    expect(pids.length).toBeGreaterThan(0);
    const before = pids.map(rss);
    const samples: number[][] = [];
    const timer = setInterval(() => samples.push(pids.map(rss)), 100);

    const TOTAL = 100 * 1000 * 1000;
    const CHUNK = 64 * 1024;
    const hash = createHash("sha256");
    let sent = 0;
    async function* body() {
      while (sent < TOTAL) {
        const chunk = randomBytes(Math.min(CHUNK, TOTAL - sent));
        hash.update(chunk);
        sent += chunk.length;
        yield chunk;
      }
    }
    const started = Date.now();
    let echo: DigestEcho;
    let status: number;
    try {
      const r = await fetch(digest, {
        method: "POST",
        headers: { "x-api-key": k, "content-type": "application/octet-stream" },
        body: ReadableStream.from(body()),
        duplex: "half",
      });
      status = r.status;
      echo = (await r.json()) as DigestEcho;
    } finally {
      clearInterval(timer);
    }
    samples.push(pids.map(rss));
    const elapsed = Date.now() - started;

    expect(status).toBe(200);
    expect(sent).toBe(TOTAL);
    expect(echo.bytes).toBe(TOTAL);
    expect(echo.sha256).toBe(hash.digest("hex"));
    // Streamed, not buffered into a Content-Length.
    expect(echo.headers["transfer-encoding"]).toBe("chunked");
    expect(echo.headers["content-length"]).toBeUndefined();

    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const peak = pids.map((_, i) => Math.max(before[i] ?? 0, ...samples.map((s) => s[i] ?? 0)));
    const growth = Math.max(...samples.map(sum)) - sum(before);
    console.info(
      "100 MB upload",
      JSON.stringify({
        ms: elapsed,
        samples: samples.length,
        workerdBeforeMiB: before.map((b) => +(b / MiB).toFixed(1)),
        workerdPeakMiB: peak.map((b) => +(b / MiB).toFixed(1)),
        peakGrowthMiB: +(growth / MiB).toFixed(1),
      }),
    );
    expect(growth).toBeLessThan(50 * MiB);
  });
});

describe("methods", () => {
  it.each(["PUT", "PATCH", "DELETE", "OPTIONS", "QUERY", "PROPFIND"])(
    "%s with a body is limited and proxied as sent",
    async (method) => {
      const p = path();
      const r = await fetch(`${limiter.url}${p}?q=1`, {
        method,
        headers: { "x-api-key": key() },
        body: `body of ${method}`,
      });
      await r.arrayBuffer();
      expect(r.status).toBe(200);
      expect(r.headers.get("ratelimit")).toBe(`"per-minute";r=${LIMIT - 1};t=60`);
      expect(arrivals(p).map((a) => [a.method, a.url, a.body])).toEqual([[method, `${p}?q=1`, `body of ${method}`]]);
    },
  );

  it("HEAD: limited and proxied, no body", async () => {
    const p = path();
    const r = await fetch(`${limiter.url}${p}`, { method: "HEAD", headers: { "x-api-key": key() } });
    expect(r.status).toBe(200);
    expect(r.headers.get("ratelimit")).toBe(`"per-minute";r=${LIMIT - 1};t=60`);
    expect((await r.arrayBuffer()).byteLength).toBe(0);
    expect(arrivals(p).map((a) => a.method)).toEqual(["HEAD"]);
  });
});

describe("GET and HEAD with a body", () => {
  it.each([
    ["GET with Content-Length", "GET", [["content-length", "3"]], "abc"],
    ["HEAD with Content-Length", "HEAD", [["content-length", "3"]], "abc"],
  ] as [string, string, Header[], string][])(
    "%s: 400 before anything is counted, nothing reaches the origin",
    async (_, method, headers, body) => {
      const p = path();
      const k = key();
      const r = await raw(method, p, [["x-api-key", k], ...headers], Buffer.from(body));
      if (method === "GET") {
        expect(problemOf(r, 400).detail).toBe("A GET request cannot carry a body; send it without one.");
      } else {
        expect(r.status).toBe(400);
      }
      expect(arrivals(p)).toHaveLength(0);
      const clean = await raw("GET", p, [["x-api-key", k]]);
      expect(clean.headers.ratelimit).toBe(`"per-minute";r=${LIMIT - 1};t=60`);
    },
  );

  // A chunked body, written byte for byte on the socket (rawTo adds Content-Length only for a body it is given).
  const chunked = (port: number, method: string, p: string, k: string, body = "3\r\nabc\r\n0\r\n\r\n") =>
    sendRaw(
      port,
      Buffer.concat([
        rawRequest(method, p, [
          ["host", `127.0.0.1:${port}`],
          ["connection", "close"],
          ["x-api-key", k],
          ["transfer-encoding", "chunked"],
        ]),
        Buffer.from(body, "latin1"),
      ]),
    );

  describe("with Transfer-Encoding: chunked, straight to workerd (no dev proxy)", () => {
    let bundle: Bundle;
    let direct: Workers;
    let state: Awaited<ReturnType<typeof tempDir>>;
    beforeAll(async () => {
      bundle = await buildBundle("wrangler.toml");
      state = await tempDir("limiter-bad-input-direct-");
      direct = await startWorkers({
        bundle,
        count: 1,
        origin: origin.url,
        rateLimit: RATE_LIMIT,
        persistTo: state.path,
      });
    });
    afterAll(async () => {
      await direct?.stop();
      await state?.cleanup();
      await bundle?.cleanup();
    });

    // workerd gives the Worker the stream and the Transfer-Encoding header: the proxy refuses it on either.
    it.each([
      ["GET", "3\r\nabc\r\n0\r\n\r\n"],
      ["HEAD", "3\r\nabc\r\n0\r\n\r\n"],
      ["GET", "0\r\n\r\n"],
    ])(
      "%s with a chunked body (%j): 400 before anything is counted, nothing reaches the origin",
      async (method, body) => {
        const port = Number(new URL(direct.urls[0] as string).port);
        const p = path();
        const k = key();
        const r = await chunked(port, method, p, k, body);
        if (method === "GET") {
          expect(problemOf(r, 400).detail).toBe("A GET request cannot carry a body; send it without one.");
        } else {
          expect(r.status).toBe(400);
        }
        expect(arrivals(p)).toHaveLength(0);
        const clean = await raw("GET", p, [["x-api-key", k]], undefined, port);
        expect(clean.headers.ratelimit).toBe(`"per-minute";r=${LIMIT - 1};t=60`);
      },
    );
  });

  // Pinned, not chosen: wrangler dev's own proxy in front of workerd drops a GET's chunked body and its
  // Transfer-Encoding before the Worker runs (a GET with Content-Length keeps both), so there the Worker sees a GET
  // without a body and cannot refuse it (docs/http.md). A failure here means wrangler dev changed.
  it("under wrangler dev a chunked GET reaches the Worker as a GET without a body: limited and proxied without it", async () => {
    const p = path();
    const r = await chunked(limiter.port, "GET", p, key());
    expect(r.status).toBe(200);
    expect(arrivals(p).map((a) => [a.method, a.body, a.headers["transfer-encoding"]])).toEqual([
      ["GET", "", undefined],
    ]);
  });

  it("GET with Content-Length: 0 is a GET without a body: limited and proxied", async () => {
    const p = path();
    const r = await raw("GET", p, [
      ["x-api-key", key()],
      ["content-length", "0"],
    ]);
    expect(r.status).toBe(200);
    expect(arrivals(p).map((a) => [a.method, a.body])).toEqual([["GET", ""]]);
  });
});

// wrangler dev takes vars at start, so each invalid config is an instance of its own (~2 s). Two representatives of
// the two ways config reaches the Worker; every field's errors are unit-tested (test/unit/config/) and run
// through the Worker by the integration tests ("configuration errors").
describe("invalid config, end to end", () => {
  const ROOT = resolve(import.meta.dirname, "../..");
  const cases = [
    {
      what: "a JSON string var (`--var`, as dashboards deliver it)",
      field: "RATE_LIMIT.limits[1].window",
      rateLimit: {
        limits: [
          { limit: 10, window: "1s" },
          { limit: 100, window: "1 min" },
        ],
      } as unknown,
      toml: "",
    },
    {
      what: "a TOML table in wrangler.toml",
      field: "RATE_LIMIT.key.pattern",
      rateLimit: undefined,
      toml: '[vars.RATE_LIMIT]\nlimits = [ { limit = 10, window = "1s" } ]\nkey = { pattern = "(live_" }\n',
    },
  ];

  it.each(cases)("$what: every request gets 500 problem+json naming $field; logged once", async (bad) => {
    const dir = await tempDir("limiter-bad-config-");
    let config: string | undefined;
    if (bad.toml) {
      // The project's wrangler.toml with its [vars.RATE_LIMIT] table replaced by the bad one.
      config = join(dir.path, "wrangler.toml");
      const project = await readFile(join(ROOT, "wrangler.toml"), "utf8");
      const main = JSON.stringify(join(ROOT, "src/proxy/index.ts"));
      const toml = project.replace(/^main = .*$/m, `main = ${main}`).replace(/\[vars\.RATE_LIMIT\][\s\S]*$/, bad.toml);
      await writeFile(config, toml);
    }
    const misconfigured = await startLimiter({
      origin: origin.url,
      rateLimit: bad.rateLimit,
      persistTo: join(dir.path, "state"),
      ...(config ? { config } : {}),
    });
    try {
      const { port } = misconfigured;
      const p = path();
      const k = key();
      const responses = [
        await raw("GET", p, [], undefined, port),
        await raw("GET", p, [["x-api-key", k]], undefined, port),
        await raw("POST", `${p}?api_key=${k}`, [["authorization", `Bearer ${k}`]], Buffer.from("{}"), port),
        await raw("OPTIONS", p, [], undefined, port),
      ];
      const details = responses.map((r) => {
        const body = problemOf(r, 500);
        expect(body.title).toBe("Rate limiter misconfigured");
        return body.detail;
      });
      const detail = details[0] ?? "";
      expect(detail.startsWith(`${bad.field}: `)).toBe(true);
      expect(new Set(details)).toEqual(new Set([detail]));
      expect(arrivals(p)).toHaveLength(0);

      // Logged once: by the harness's readiness probe, the first request. Worker logs reach wrangler's output
      // asynchronously, so wait for the line and for the last request's log line before counting.
      await waitForOutput(misconfigured, '"event":"config_error"', 15_000);
      await waitForOutput(misconfigured, "OPTIONS /bad-input/", 15_000);
      const logged = misconfigured.output().match(/\{"event":"config_error","message":"(?:[^"\\]|\\.)*"\}/g) ?? [];
      expect(logged).toHaveLength(1);
      expect((JSON.parse(logged[0] ?? "{}") as { message: string }).message).toBe(detail);
    } finally {
      await misconfigured.stop();
      await dir.cleanup();
    }
  });
});
