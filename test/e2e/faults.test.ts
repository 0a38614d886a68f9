// Faults over real HTTP: Node clients → wrangler dev (workerd) → the recording Node origin. Each fault is its own
// test and asserts exactly what the client sees: the status, the JSON problem body without a stack trace, and what
// reached the origin. Object faults use the test-only entry test/e2e/worker/fault-entry.ts, whose FaultyLimiter (the
// real RateLimiter) fails on purpose for keys starting with a fault's name and `_`, so the plans below choose it by key.
//
// What workerd does, as these tests pin down:
// - origin refuses the connection / resets it before a response: fetch() rejects ("Network connection lost.") → 502.
// - origin drops the connection after its headers: the client gets the 200 and the headers, then exactly the bytes
//   sent before the drop, then a failed read (workerd closes the client connection without ending the body; chunked
//   or with Content-Length alike). The status cannot change by then.
// - errors thrown by the object cross RPC as an Error with the same name and message, `remote: true`,
//   `durableObjectId`, and every own property of the thrown error (so `overloaded` / `retryable` survive).
//   workerd sets `retryable` on none of them; `ctx.abort()` gives `durableObjectReset: true` (not retryable), which
//   the isolate sends again with the call's id (it may have been applied); an error the object's code threw, not.
import { createHash } from "node:crypto";
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_SENDS } from "../../src/client/policy.ts";
import { type Limiter, startLimiter, tempDir, waitForOutput } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { type Problem, problemOf } from "../support/problem.ts";

const FAULTS_CONFIG = "test/e2e/worker/wrangler.faults.toml";
// Every request in this file but the hanging one must see the origin's headers within origin_timeout; at 300 ms a
// loaded machine (send-to-arrival measured up to ~0.9 s in the soak) could turn a healthy answer into a 504.
const ORIGIN_TIMEOUT_MS = 1500;

/** One plan per object fault; the key prefix picks the fault in FaultyLimiter. */
const faultPlan = (fault: string) => ({
  name: fault,
  key_prefix: `${fault}_`,
  limits: [{ limit: 5, window: "1m", name: fault }],
});
const FAULTS = ["throw", "overload", "retryonce", "retryalways", "retryoverload", "reset"];
const rateLimit = (failureMode: "closed" | "open" | "local") => ({
  limits: [{ limit: 1000, window: "1m" }],
  failure_mode: failureMode,
  origin_timeout: `${ORIGIN_TIMEOUT_MS}ms`,
  plans: FAULTS.map(faultPlan),
});

let origin: Origin;

beforeAll(async () => {
  origin = await startOrigin();
});

afterAll(async () => {
  await origin?.close();
});

const key = (prefix: string) => `${prefix}_${crypto.randomUUID()}`;
const arrivalsFor = (k: string) => origin.arrivals.filter((a) => a.headers["x-api-key"] === k);

/** Starts wrangler dev for one describe block and stops it (and removes its state) afterwards. */
function useLimiter(options: { origin: () => string; rateLimit: unknown; config?: string }): () => Limiter {
  let limiter: Limiter | undefined;
  let state: Awaited<ReturnType<typeof tempDir>> | undefined;
  beforeAll(async () => {
    state = await tempDir("limiter-faults-");
    limiter = await startLimiter({
      origin: options.origin(),
      rateLimit: options.rateLimit,
      persistTo: state.path,
      ...(options.config ? { config: options.config } : {}),
    });
  });
  afterAll(async () => {
    await limiter?.stop();
    await state?.cleanup();
  });
  return () => {
    if (!limiter) throw new Error("limiter not started");
    return limiter;
  };
}

/** The limiter's problem answer (test/support/problem.ts); the test object's name must not leak into it either. */
async function problem(response: Response, status: number): Promise<Problem> {
  const body = await problemOf(response, status);
  expect(JSON.stringify(body)).not.toContain("FaultyLimiter");
  return body;
}

/** The FaultyLimiter's `take` calls for one key, as logged by the object. */
function takeCalls(limiter: Limiter, k: string): { fault: string | null; call: number }[] {
  return jsonLines(limiter).filter((l) => l.event === "faulty_take" && l.object === `key:${k}`) as {
    fault: string | null;
    call: number;
  }[];
}

/** The Worker's and the object's JSON log lines so far. */
function jsonLines(limiter: Limiter): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = [];
  for (const line of limiter.output().split("\n")) {
    // console.error lines arrive wrapped in wrangler's coloured "✘ [ERROR]" prefix and suffix.
    const at = line.indexOf('{"event":');
    if (at < 0) continue;
    try {
      lines.push(JSON.parse(line.slice(at, line.lastIndexOf("}") + 1)) as Record<string, unknown>);
    } catch {
      // not one of ours
    }
  }
  return lines;
}

/**
 * Waits until everything logged before now has reached `output()`: sends a request on a fresh key of the default
 * plan (the real take, logged by the FaultyLimiter) and waits for its log line. workerd writes its logs in order.
 */
async function settleLogs(limiter: Limiter): Promise<void> {
  const sentinel = key("sentinel");
  const r = await fetch(`${limiter.url}/sentinel`, { headers: { "x-api-key": sentinel } });
  await r.arrayBuffer();
  await waitForOutput(limiter, `"object":"key:${sentinel}"`);
}

/** Reads a body to the end (or its failure): bytes received, their SHA-256, and the error if the read failed. */
async function readBody(
  response: Response,
  onChunk?: (received: number) => Promise<void>,
): Promise<{ bytes: number; sha256: string; error: unknown }> {
  const hash = createHash("sha256");
  let bytes = 0;
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      bytes += value.length;
      hash.update(value);
      await onChunk?.(bytes);
    }
  } catch (error) {
    return { bytes, sha256: hash.digest("hex"), error };
  }
  return { bytes, sha256: hash.digest("hex"), error: null };
}

describe("origin faults", () => {
  describe("the origin refuses connections (ORIGIN is a closed port)", () => {
    const limiter = useLimiter({
      origin: () => origin.closedUrl,
      rateLimit: { limits: [{ limit: 5, window: "1m" }] },
    });

    it("502 with a JSON problem body, no stack trace; the request was granted and counts", async () => {
      const k = key("refused");
      const first = await fetch(`${limiter().url}/v1/x`, { headers: { "x-api-key": k } });
      const body = await problem(first, 502);
      expect(body).toMatchObject({ title: "Bad Gateway" });
      expect(String(body.detail)).toMatch(/^The origin could not be reached: .+\.$/);
      expect(first.headers.get("RateLimit-Policy")).toBe('"per-minute";q=5;w=60');
      expect(first.headers.get("RateLimit")).toBe('"per-minute";r=4;t=60');
      const second = await fetch(`${limiter().url}/v1/x`, { headers: { "x-api-key": k } });
      await problem(second, 502);
      expect(second.headers.get("RateLimit")).toBe('"per-minute";r=3;t=60');
      console.info("refused:", body.detail);
    });
  });

  describe("the origin misbehaves (ORIGIN is the recording origin)", () => {
    const limiter = useLimiter({ origin: () => origin.url, rateLimit: rateLimit("closed"), config: FAULTS_CONFIG });

    it("resets the connection before any response: 502, JSON, no stack trace", async () => {
      const r = await fetch(`${limiter().url}/__special/reset`, { headers: { "x-api-key": key("reset-conn") } });
      const body = await problem(r, 502);
      expect(body.detail).toBe("The origin could not be reached: Network connection lost.");
      expect(r.headers.get("RateLimit")).toBe('"per-minute";r=999;t=60');
    });

    it.each([
      ["chunked", "after=100000", null],
      ["with Content-Length", "after=100000&length=1", "200000"],
    ])(
      "drops the connection mid-response (%s): the client gets the 200 and headers, then exactly the bytes sent, then a read error",
      async (_, query, contentLength) => {
        const k = key("drop");
        const r = await fetch(`${limiter().url}/__special/drop?${query}`, { headers: { "x-api-key": k } });
        expect(r.status).toBe(200);
        expect(r.headers.get("content-type")).toBe("application/octet-stream");
        expect(r.headers.get("content-length")).toBe(contentLength);
        expect(r.headers.get("RateLimit")).toBe('"per-minute";r=999;t=60');
        const read = await readBody(r);
        expect(read.bytes).toBe(100_000);
        expect(read.sha256).toBe(createHash("sha256").update(Buffer.alloc(100_000, 0x61)).digest("hex"));
        // undici: TypeError("terminated") caused by UND_ERR_SOCKET "other side closed".
        expect(read.error).toBeInstanceOf(TypeError);
        expect((read.error as Error).message).toBe("terminated");
        expect((read.error as { cause?: { code?: string } }).cause?.code).toBe("UND_ERR_SOCKET");

        // The same over node:http: the response is aborted, not ended, and marked incomplete.
        const raw = await new Promise<{ status?: number; bytes: number; complete: boolean; error: string }>((ok) => {
          const req = httpRequest(
            `${limiter().url}/__special/drop?${query}`,
            { headers: { "x-api-key": k } },
            (res) => {
              let bytes = 0;
              res.on("data", (c: Buffer) => {
                bytes += c.length;
              });
              res.on("end", () => ok({ status: res.statusCode, bytes, complete: res.complete, error: "" }));
              res.on("error", (e: NodeJS.ErrnoException) =>
                ok({ status: res.statusCode, bytes, complete: res.complete, error: `${e.message} ${e.code}` }),
              );
            },
          );
          req.on("error", (e) => ok({ bytes: 0, complete: false, error: `request: ${e.message}` }));
          req.end();
        });
        expect(raw).toEqual({ status: 200, bytes: 100_000, complete: false, error: "aborted ECONNRESET" });
      },
    );

    it("hangs past origin_timeout: 504, JSON, no stack trace", async () => {
      const r = await fetch(`${limiter().url}/__special/hang`, { headers: { "x-api-key": key("hang") } });
      const body = await problem(r, 504);
      expect(body).toMatchObject({
        title: "Gateway Timeout",
        detail: `The origin sent no response within ${ORIGIN_TIMEOUT_MS} ms.`,
      });
      expect(r.headers.get("RateLimit")).toBe('"per-minute";r=999;t=60');
    });

    it.each([500, 502, 503, 504])("answers %i: passed through with its body and headers", async (code) => {
      const r = await fetch(`${limiter().url}/__special/status/${code}`, { headers: { "x-api-key": key("5xx") } });
      expect(r.status).toBe(code);
      expect(r.headers.get("x-origin-status")).toBe(String(code));
      expect(r.headers.get("content-type")).toBe("text/plain");
      expect(r.headers.get("RateLimit")).toBe('"per-minute";r=999;t=60');
      expect(await r.text()).toBe(`origin says ${code}`);
    });

    it("a 5 MiB body the origin pauses in the middle of (longer than origin_timeout) arrives complete", async () => {
      const half = 2.5 * 1024 * 1024;
      const id = crypto.randomUUID();
      const r = await fetch(`${limiter().url}/__special/gated/${id}?first=${half}`, {
        headers: { "x-api-key": key("gated") },
      });
      expect(r.status).toBe(200);
      let released = false;
      const read = await readBody(r, async (received) => {
        if (released || received < half) return;
        // The origin sends nothing more until released: the first half streamed through on its own.
        expect(received).toBe(half);
        released = true;
        await new Promise((ok) => setTimeout(ok, ORIGIN_TIMEOUT_MS + 200)); // the fault: a pause > origin_timeout
        const release = await fetch(`${origin.url}/__special/release/${id}`);
        expect(release.status).toBe(204);
      });
      expect(read.error).toBeNull();
      expect(read.bytes).toBe(2 * half);
      const expected = createHash("sha256")
        .update(Buffer.alloc(half, 0x61))
        .update(Buffer.alloc(half, 0x7a))
        .digest("hex");
      expect(read.sha256).toBe(expected);
    });

    it("a 5 MB body sent in 16 KiB chunks and read slowly by the client arrives complete (the origin's sha256)", async () => {
      const total = 5_000_000;
      const r = await fetch(`${limiter().url}/__special/bytes/${total}?chunk=16384&seed=7`, {
        headers: { "x-api-key": key("bytes") },
      });
      expect(r.status).toBe(200);
      expect(r.headers.get("x-bytes")).toBe(String(total));
      let reads = 0;
      const read = await readBody(r, async () => {
        reads += 1;
        await new Promise((ok) => setTimeout(ok, 3)); // a slow client: the stream backs up towards the origin
      });
      expect(read.error).toBeNull();
      expect(read.bytes).toBe(total);
      expect(read.sha256).toBe(r.headers.get("x-sha256"));
      console.info("slow reader:", reads, "reads");
    });
  });
});

describe("object faults", () => {
  describe('failure_mode = "closed"', () => {
    const limiter = useLimiter({ origin: () => origin.url, rateLimit: rateLimit("closed"), config: FAULTS_CONFIG });

    /** One request on a fresh key of the plan `fault`; the response, the object's take calls and new log lines. */
    async function hit(fault: string) {
      const k = key(fault);
      const before = jsonLines(limiter()).length;
      const r = await fetch(`${limiter().url}/v1/x`, { headers: { "x-api-key": k } });
      await settleLogs(limiter());
      const logs = jsonLines(limiter()).slice(before);
      return {
        k,
        r,
        calls: takeCalls(limiter(), k),
        unavailable: logs.filter((l) => l.event === "limiter_unavailable"),
      };
    }

    async function expect503(r: Response) {
      await problem(r, 503);
      expect(r.headers.get("Retry-After")).toBe("1");
      expect(r.headers.get("RateLimit")).toBeNull();
    }

    it.each([
      ["the object throws", "throw", false, "FaultyLimiter: take threw"],
      [
        "the object is overloaded (an `overloaded` error, which survives RPC)",
        "overload",
        true,
        "FaultyLimiter: overloaded",
      ],
    ] as const)(
      "%s: 503 + Retry-After: 1, nothing proxied, logged, not sent again (nothing was applied)",
      async (_, fault, overloaded, message) => {
        const { k, r, calls, unavailable } = await hit(fault);
        await expect503(r);
        expect(arrivalsFor(k)).toEqual([]);
        expect(calls).toHaveLength(1);
        expect(unavailable).toEqual([
          { event: "limiter_unavailable", reason: "limiter_error", failure_mode: "closed", overloaded, message },
        ]);
      },
    );

    it("the runtime resets the object every time (ctx.abort → durableObjectReset): sent MAX_SENDS times with its id, each from a fresh stub, then 503", async () => {
      const { k, r, calls, unavailable } = await hit("reset");
      await expect503(r);
      expect(arrivalsFor(k)).toEqual([]);
      // It may have been applied: sent again (src/client/policy.ts, `callOnce`).
      expect(calls).toHaveLength(MAX_SENDS);
      expect(unavailable).toEqual([
        {
          event: "limiter_unavailable",
          reason: "limiter_error",
          failure_mode: "closed",
          overloaded: false,
          message: "FaultyLimiter: reset",
        },
      ]);
    });

    it("retry once: a `retryable` error is retried with a fresh stub and the retry's grant is proxied", async () => {
      const { k, r, calls, unavailable } = await hit("retryonce");
      expect(r.status).toBe(200);
      expect(await r.json()).toMatchObject({ url: "/v1/x" });
      expect(r.headers.get("RateLimit")).toBe('"retryonce";r=4;t=60');
      expect(arrivalsFor(k)).toHaveLength(1);
      expect(calls.map((c) => c.call)).toEqual([1, 2]);
      expect(unavailable).toEqual([]);
    });

    it("a `retryable` error every time: MAX_SENDS calls, then 503", async () => {
      const { k, r, calls, unavailable } = await hit("retryalways");
      await expect503(r);
      expect(arrivalsFor(k)).toEqual([]);
      expect(calls).toHaveLength(MAX_SENDS);
      expect(unavailable).toHaveLength(1);
    });

    it("no retry when the `retryable` error is also `overloaded`: one call, 503", async () => {
      const { k, r, calls, unavailable } = await hit("retryoverload");
      await expect503(r);
      expect(arrivalsFor(k)).toEqual([]);
      expect(calls).toHaveLength(1);
      expect(unavailable).toMatchObject([{ overloaded: true }]);
    });
  });

  describe('failure_mode = "open"', () => {
    const limiter = useLimiter({ origin: () => origin.url, rateLimit: rateLimit("open"), config: FAULTS_CONFIG });

    it.each([
      ["throws", "throw", false, 1],
      ["is overloaded", "overload", true, 1],
      ["is reset", "reset", false, MAX_SENDS],
    ])(
      "the object %s: proxied unlimited (no RateLimit headers) and limiter_unavailable logged",
      async (_, fault, overloaded, sends) => {
        const k = key(fault);
        const before = jsonLines(limiter()).length;
        const r = await fetch(`${limiter().url}/v1/open?q=1`, {
          method: "POST",
          headers: { "x-api-key": k },
          body: "hi",
        });
        expect(r.status).toBe(200);
        expect(r.headers.get("RateLimit")).toBeNull();
        expect(r.headers.get("RateLimit-Policy")).toBeNull();
        expect(await r.json()).toMatchObject({ method: "POST", url: "/v1/open?q=1", body: "hi" });
        expect(arrivalsFor(k)).toHaveLength(1);
        await settleLogs(limiter());
        expect(limiter().output()).toContain("limiter_unavailable");
        expect(jsonLines(limiter()).slice(before)).toContainEqual(
          expect.objectContaining({ event: "limiter_unavailable", failure_mode: "open", overloaded }),
        );
        expect(takeCalls(limiter(), k)).toHaveLength(sends);
      },
    );
  });

  describe('failure_mode = "local"', () => {
    const limiter = useLimiter({ origin: () => origin.url, rateLimit: rateLimit("local"), config: FAULTS_CONFIG });

    it("the object throws: the isolate decides alone — exactly the limit proxied with its headers, then 429 limiter_fallback; one call, then none while it is known down", async () => {
      const k = key("throw");
      const before = jsonLines(limiter()).length;
      const responses: Response[] = [];
      for (let i = 0; i < 7; i++)
        responses.push(await fetch(`${limiter().url}/v1/local?i=${i}`, { headers: { "x-api-key": k } }));
      expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);
      expect(responses[0]?.headers.get("RateLimit")).toBe('"throw";r=4;t=60');
      const refused = await problem(responses[5] as Response, 429);
      expect(refused).toMatchObject({ reason: "limiter_fallback" });
      expect((responses[5] as Response).headers.get("Retry-After")).toMatch(/^(59|60)$/);
      for (const r of responses.slice(0, 5)) await r.arrayBuffer();
      expect(arrivalsFor(k).map((a) => a.url)).toEqual([0, 1, 2, 3, 4].map((i) => `/v1/local?i=${i}`));
      await settleLogs(limiter());
      // The first request's call failed; the object is known down for a second: no further call.
      expect(takeCalls(limiter(), k)).toHaveLength(1);
      const logs = jsonLines(limiter()).slice(before);
      expect(logs).toContainEqual(expect.objectContaining({ event: "limiter_down", failure_mode: "local" }));
      expect(logs.filter((l) => l.event === "limiter_unavailable")).toHaveLength(1);
    });
  });
});
