// A client that leaves a settled stream (docs/llm.md) over a real TCP connection, against the product's bundle in
// workerd with a direct socket (test/support/workers.ts): no `wrangler dev` in between (test/e2e/llm.test.ts has the
// reset under `wrangler dev`, which passes a streamed response's client leaving on as well). The client resets its
// connection (an RST) or closes its socket (Node's fetch aborted: a FIN) while the fake model is still streaming:
// workerd cancels the response's body at its next write to the closed connection (it does not abort
// `request.signal` once the response has been returned), the proxy cancels the origin's body with it (the origin sees
// its connection close long before the stream's end), and the reservation is kept with a `reservation_kept` line,
// `reason` `client_left`. Before src/proxy/settle.ts piped the client's branch, the origin streamed all 40 s and the
// grant was settled as complete.
import { request as httpRequest, type IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../support/harness.ts";
import type { LlmReport } from "../support/llm.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { buildBundle, startWorkers, type Workers } from "../support/workers.ts";

const PATH = "/__special/llm/openai-chat";
/** A stream far longer than the test: 4,000 events 10 ms apart (40 s), the usage last. */
const LONG = `${PATH}?tokens=4000&pace=10`;
const RESERVED = 5000;
const RATE_LIMIT = {
  limits: [{ limit: 100_000, window: "1m" }],
  leases: false,
  costs: [{ method: "POST", path: PATH, reserve: { json: "max_tokens", input: 0 }, settle: "openai" }],
};
const BODY = JSON.stringify({ stream: true, stream_options: { include_usage: true }, max_tokens: RESERVED });

let origin: Origin;
let workers: Workers;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  origin = await startOrigin();
  const bundle = await buildBundle("wrangler.toml");
  cleanups.push(bundle.cleanup);
  const state = await tempDir("limiter-llm-client-left-");
  cleanups.push(state.cleanup);
  workers = await startWorkers({ bundle, count: 1, origin: origin.url, rateLimit: RATE_LIMIT, persistTo: state.path });
  cleanups.push(() => workers.stop());
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
  await origin?.close();
});

const url = () => workers.urls[0] as string;

/** Polls `probe` every 50 ms until it gives a value, for at most `ms`; null when it never did. */
async function within<T>(ms: number, probe: () => T | null | undefined): Promise<T | null> {
  const end = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== null && v !== undefined) return v;
    if (Date.now() >= end) return null;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The origin's record of `key`'s stream, once it has ended (or null after `ms`). */
const reportOf = (key: string, ms: number): Promise<LlmReport | null> =>
  within(ms, () => origin.reports.find((r) => r.key === key));

/** The Workers' `reservation_kept` lines so far. */
function kept(): Record<string, unknown>[] {
  return workers
    .output()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.event === "reservation_kept");
}

/** Opens `key`'s stream with node:http and reads at least `n` bytes of its body; the request and its response. */
async function streamOpen(
  key: string,
  n: number,
): Promise<{ req: ReturnType<typeof httpRequest>; res: IncomingMessage }> {
  const req = httpRequest(`${url()}${LONG}`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json" },
    agent: false,
  });
  req.on("error", () => {});
  req.end(BODY);
  const res = await new Promise<IncomingMessage>((ok, fail) => {
    req.once("response", ok);
    req.once("error", fail);
  });
  expect(res.statusCode).toBe(200);
  res.on("error", () => {});
  await new Promise<void>((ok) => {
    let read = 0;
    const onData = (c: Buffer) => {
      read += c.length;
      if (read < n) return;
      res.off("data", onData);
      res.pause();
      ok();
    };
    res.on("data", onData);
  });
  return { req, res };
}

describe("a client that leaves a settled stream over TCP (workerd, direct socket)", () => {
  it("a reset (RST) mid-stream: the origin's request is cancelled and the reservation kept, logged client_left", async () => {
    const key = `rst_${crypto.randomUUID()}`;
    const { req } = await streamOpen(key, 200);
    req.socket?.resetAndDestroy();
    // The origin's record comes when its connection closes: long before its 40 s stream could have ended.
    const report = await reportOf(key, 20_000);
    expect(report).toMatchObject({ key, cancelled: true, reported: null });
    const line = await within(5000, () => kept().find((l) => l.reason === "client_left" && l.reserved === RESERVED));
    expect(line).toMatchObject({ event: "reservation_kept", reason: "client_left", reserved: RESERVED });
  });

  it("a clean close (Node's fetch aborted: a FIN) mid-stream: the same, at workerd's next write", async () => {
    const before = kept().length;
    const key = `fin_${crypto.randomUUID()}`;
    const controller = new AbortController();
    const r = await fetch(`${url()}${LONG}`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json" },
      body: BODY,
      signal: controller.signal,
    });
    expect(r.status).toBe(200);
    const reader = (r.body as ReadableStream<Uint8Array>).getReader();
    let read = 0;
    while (read < 200) {
      const chunk = await reader.read();
      if (chunk.done) break;
      read += chunk.value.length;
    }
    expect(read).toBeGreaterThanOrEqual(200);
    controller.abort();
    const report = await reportOf(key, 20_000);
    expect(report).toMatchObject({ key, cancelled: true, reported: null });
    const line = await within(5000, () =>
      kept()
        .slice(before)
        .find((l) => l.reason === "client_left"),
    );
    expect(line).toMatchObject({ event: "reservation_kept", reason: "client_left", reserved: RESERVED });
  });
});
