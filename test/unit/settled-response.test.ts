// The proxy's pass-through of a settled rule's response (src/proxy/settle.ts): chunks go on as they come, the grant is
// settled to what the body reported when it ends, and a body that reports nothing — none at all, cut short, left by its
// client — keeps its reservation with a `reservation_kept` line saying why.
import { afterEach, describe, expect, it, vi } from "vitest";
import type { RateLimitResult } from "../../src/client/result.ts";
import type { Settle } from "../../src/config/types.ts";
import { settledResponse } from "../../src/proxy/settle.ts";

afterEach(() => vi.restoreAllMocks());

const result = { cost: 100, handle: { grants: [{ name: "key:k" }], slot: null } } as unknown as RateLimitResult;
const openai: Settle = { from: "openai" };

/** A settling of `result` under `settle`: what it settled to, and what it waited for. */
function settling(settle: Settle) {
  const settledTo: number[] = [];
  const waited: Promise<unknown>[] = [];
  const s = {
    settle,
    result,
    settleTo: async (actual: number) => settledTo.push(actual),
    bg: { waitUntil: (p: Promise<unknown>) => waited.push(p) },
  };
  // Until no more work is handed to waitUntil (a settle's end hands it its settlement or its log line).
  const done = async () => {
    for (let seen = -1; seen !== waited.length; ) {
      seen = waited.length;
      await Promise.all(waited);
    }
  };
  return { s, settledTo, done };
}

/** The `reservation_kept` lines logged while `run` runs. */
async function keptLines(run: () => Promise<unknown>): Promise<Record<string, unknown>[]> {
  const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
  const log = vi.spyOn(console, "log").mockImplementation(() => {});
  await run();
  return [...warn.mock.calls, ...log.mock.calls]
    .map((c) => JSON.parse(String(c[0])) as Record<string, unknown>)
    .filter((l) => l.event === "reservation_kept");
}

const sse = (...events: string[]) => events.map((e) => `data: ${e}\n\n`).join("");

describe("settledResponse", () => {
  it("passes the body on as it is and settles to the usage it reported, once it has ended", async () => {
    const t = settling(openai);
    const text = sse('{"choices":[]}', '{"choices":[],"usage":{"total_tokens":42}}', "[DONE]");
    const out = settledResponse(new Response(text, { headers: { "content-type": "text/event-stream" } }), t.s);
    expect(await out.text()).toBe(text);
    await t.done();
    expect(t.settledTo).toEqual([42]);
  });

  it("an event stream with the client's signal: passed on by a tee, its copy read for the usage", async () => {
    const t = settling(openai);
    const left = new AbortController();
    const text = sse('{"choices":[]}', '{"choices":[],"usage":{"total_tokens":9}}', "[DONE]");
    const headers = { "content-type": "text/event-stream; charset=utf-8" };
    const out = settledResponse(new Response(text, { headers }), { ...t.s, left: left.signal });
    expect(await out.text()).toBe(text);
    await t.done();
    expect(t.settledTo).toEqual([9]);

    // The client leaves: its signal cancels the origin's request (forward.ts), and so the copy — the reservation stands.
    const u = settling(openai);
    let origin!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        origin = c;
      },
    });
    origin.enqueue(new TextEncoder().encode(sse('{"choices":[]}')));
    const lines = await keptLines(async () => {
      const reader = settledResponse(new Response(body, { headers }), { ...u.s, left: left.signal }).body?.getReader();
      await reader?.read();
      left.abort();
      origin.error(new Error("aborted"));
      await u.done();
    });
    expect(u.settledTo).toEqual([]);
    expect(lines).toMatchObject([{ reason: "client_left" }]);
  });

  it("a response without a body: a header's report settles it; else its reservation is kept as no_usage", async () => {
    const byHeader = settling({ from: "header", header: "x-cost" });
    settledResponse(new Response(null, { status: 204, headers: { "x-cost": "7" } }), byHeader.s);
    await byHeader.done();
    expect(byHeader.settledTo).toEqual([7]);

    const t = settling(openai);
    const lines = await keptLines(async () => {
      settledResponse(new Response(null, { status: 204 }), t.s);
      await t.done();
    });
    expect(t.settledTo).toEqual([]);
    expect(lines).toMatchObject([{ reason: "no_usage", reserved: 100 }]);
  });

  it("a client that leaves before the usage: the origin's body is cancelled and the reservation kept", async () => {
    const t = settling(openai);
    let cancelled = false;
    const origin = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode(sse('{"choices":[]}')));
      },
      cancel() {
        cancelled = true;
      },
    });
    const lines = await keptLines(async () => {
      const reader = settledResponse(new Response(origin), t.s).body?.getReader();
      await reader?.read();
      await reader?.cancel();
      await t.done();
    });
    expect(cancelled).toBe(true);
    expect(t.settledTo).toEqual([]);
    expect(lines).toMatchObject([{ reason: "client_left" }]);
  });
});
