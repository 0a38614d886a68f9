// Settled costs through the proxy (docs/llm.md) against the recording origin's fake language model
// (test/support/llm-origin.ts): a request is granted for its reservation (max_tokens + its body's bytes), its streamed
// answer reaches the client event by event while the origin is still writing, and the grant is settled to the usage
// the origin reported — in the key's window, its usage and its credits. Bad reservations are 400s that count nothing;
// an answer without usage, cut short, or left by its client keeps its reservation (logged), and a client that leaves
// cancels the origin's request. 40 concurrent streams on 2,000 tokens / 10 s: no window over by settled cost.
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import { keyId } from "../../src/base/log.ts";
import { anthropicStream, type LlmReport, openaiChatStream } from "../support/llm.ts";
import { background, envWith, freshKey, handle, originUrl, problemBody, request, spyLimiter } from "./helpers.ts";

const TOKEN = "llm-admin-token";
const CREDITS = 1_000_000;
const CONFIG = {
  limits: [{ limit: 2000, window: "10s" }],
  usage: true,
  credits: { initial: CREDITS },
  costs: [
    {
      method: "POST",
      path: "/__special/llm/openai-chat",
      reserve: { json: "max_tokens", input: "bytes" },
      settle: "openai",
    },
    {
      method: "POST",
      path: "/__special/llm/openai-responses",
      reserve: { json: "max_output_tokens", input: "bytes", default: 500 },
      settle: "openai",
    },
    {
      method: "POST",
      path: "/__special/llm/anthropic",
      reserve: { json: "max_tokens", input: "bytes", max_body: 4096 },
      settle: "anthropic",
    },
  ],
};
const env = () => envWith(CONFIG, { ADMIN_TOKEN: TOKEN });

const MESSAGES = [{ role: "user", content: "Say something short." }];

/** A model request of `form` (its JSON `body`), with the fake model's `query`. */
function ask(key: string, form: string, body: Record<string, unknown>, query = ""): { req: Request; text: string } {
  const text = JSON.stringify(body);
  const req = request(key, `/__special/llm/${form}${query}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: text,
  });
  return { req, text };
}

/** What the fake model reported for `key`'s requests. */
async function reports(key: string): Promise<LlmReport[]> {
  return (await (await fetch(`${originUrl}/__special/llm-reports?key=${key}`)).json()) as LlmReport[];
}

/** The operators' view of `key`: its window's used units, its credits, its usage today. */
async function state(key: string): Promise<{ used: number; balance: number; cost: number; requests: number }> {
  const admin = (path: string, body: unknown) =>
    handle(
      new Request(`https://limiter.example/__limiter/${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }),
      env(),
    );
  const status = (await (await admin("status", { key })).json()) as {
    limits: { used: number }[];
    credits: { balance: number };
  };
  const usage = (await (await admin("usage", { key, period: "day" })).json()) as {
    periods: { requests: number; cost: number }[];
  };
  const day = usage.periods.at(-1) ?? { requests: 0, cost: 0 };
  return {
    used: status.limits[0]?.used ?? -1,
    balance: status.credits.balance,
    cost: day.cost,
    requests: day.requests,
  };
}

/** Reads `reader` until the text so far contains `until` (or to its end, without one). */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, until?: string): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    text += decoder.decode(value, { stream: true });
    if (until !== undefined && text.includes(until)) return text;
  }
}

let warn: MockInstance<typeof console.warn>;
beforeEach(() => {
  warn = vi.spyOn(console, "warn").mockImplementation(() => {});
  vi.spyOn(console, "log").mockImplementation(() => {});
});
afterEach(() => {
  vi.restoreAllMocks();
});

/** The `reservation_kept` lines logged so far. */
const kept = () =>
  warn.mock.calls
    .map((c) => JSON.parse(String(c[0])) as Record<string, unknown>)
    .filter((l) => l.event === "reservation_kept");

describe("settled costs through the proxy", () => {
  it("streams an OpenAI answer event by event while the origin writes, then settles to its reported usage", async () => {
    const key = freshKey();
    const gate = crypto.randomUUID();
    const body = {
      model: "fake",
      max_tokens: 100,
      stream: true,
      stream_options: { include_usage: true },
      messages: MESSAGES,
    };
    const { req, text } = ask(key, "openai-chat", body, `?tokens=7&gate=${gate}`);
    const h = background();
    const res = await handle(req, env(), h);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    // Granted for its reservation: max_tokens + the body's bytes.
    const reserved = 100 + text.length;
    expect(res.headers.get("RateLimit")).toBe(`"per-10s";r=${2000 - reserved};t=10`);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    // The origin holds the usage back until released: what arrives before came through unbuffered.
    const head = await readUntil(reader, '"finish_reason":"stop"');
    expect(head).not.toContain('"total_tokens"');
    await fetch(`${originUrl}/__special/release/${gate}`);
    const all = head + (await readUntil(reader));
    const prompt = Math.ceil(text.length / 4);
    expect(all).toBe(openaiChatStream({ prompt, words: Array(7).fill(" tok").with(0, "tok"), usage: true }));
    await h.settled();
    const [report] = await reports(key);
    expect(report?.reported).toBe(prompt + 7);
    expect(await state(key)).toEqual({
      used: prompt + 7,
      balance: CREDITS - (prompt + 7),
      cost: prompt + 7,
      requests: 1,
    });
    expect(kept()).toEqual([]);
  });

  it("settles an Anthropic stream written with every event cut in two, and a JSON answer", async () => {
    const key = freshKey();
    const h = background();
    const a = ask(
      key,
      "anthropic",
      { model: "fake", max_tokens: 50, stream: true, messages: MESSAGES },
      "?tokens=4&split=1",
    );
    const streamed = await handle(a.req, env(), h);
    const prompt = Math.ceil(a.text.length / 4);
    expect(await streamed.text()).toBe(anthropicStream({ input: prompt, words: Array(4).fill(" tok").with(0, "tok") }));
    const j = ask(key, "openai-chat", { model: "fake", max_tokens: 30, messages: MESSAGES }, "?tokens=3");
    const json = await handle(j.req, env(), h);
    expect(((await json.json()) as { usage: { total_tokens: number } }).usage.total_tokens).toBe(
      Math.ceil(j.text.length / 4) + 3,
    );
    await h.settled();
    const total = (await reports(key)).reduce((s, r) => s + (r.reported ?? 0), 0);
    expect(total).toBe(prompt + 4 + Math.ceil(j.text.length / 4) + 3);
    expect(await state(key)).toEqual({ used: total, balance: CREDITS - total, cost: total, requests: 2 });
  });

  it("an answer that reports no usage, or is cut short, keeps its reservation, logged with the reason and key_id", async () => {
    const key = freshKey();
    const h = background();
    const noUsage = ask(key, "openai-chat", { max_tokens: 40, stream: true, messages: MESSAGES }, "?tokens=2");
    expect((await (await handle(noUsage.req, env(), h)).text()).endsWith("data: [DONE]\n\n")).toBe(true);
    const cut = ask(key, "anthropic", { max_tokens: 60, stream: true, messages: MESSAGES }, "?tokens=2&cut=1");
    const res = await handle(cut.req, env(), h);
    await expect(res.text()).rejects.toThrow();
    await h.settled();
    const reserved = 40 + noUsage.text.length + 60 + cut.text.length;
    expect(await state(key)).toMatchObject({ used: reserved, balance: CREDITS - reserved, cost: reserved });
    const id = await keyId(`key:${key}`);
    expect(kept()).toEqual([
      expect.objectContaining({ key_id: id, reason: "no_usage", reserved: 40 + noUsage.text.length }),
      expect.objectContaining({ key_id: id, reason: "cut_short", reserved: 60 + cut.text.length }),
    ]);
  });

  it("a client that leaves mid-stream cancels the origin's request; the reservation stands", async () => {
    const key = freshKey();
    const gate = crypto.randomUUID();
    const h = background();
    const body = JSON.stringify({ max_tokens: 80, stream: true, messages: MESSAGES });
    // workerd's request.signal aborts when the client goes away (enable_request_signal): as a client leaving does.
    const client = new AbortController();
    const req = request(key, `/__special/llm/anthropic?tokens=3&gate=${gate}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
      signal: client.signal,
    });
    const res = await handle(req, env(), h);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await readUntil(reader, "content_block_stop");
    // Leaves while a read is waiting on the origin (as workerd's own reads of a body always are).
    const waiting = reader.read().catch(() => null);
    client.abort(new Error("the client went away"));
    await waiting;
    await reader.cancel().catch(() => {});
    // The origin sees its connection closed while it still holds the usage back.
    let seen: LlmReport[] = [];
    while (seen.length === 0) seen = await reports(key);
    expect(seen[0]).toMatchObject({ cancelled: true, reported: null });
    await h.settled();
    expect(await state(key)).toMatchObject({ used: 80 + body.length, cost: 80 + body.length });
    expect(kept()).toEqual([expect.objectContaining({ reason: "client_left", key_id: await keyId(`key:${key}`) })]);
  });

  it("a client that leaves once the usage has passed: settled to it (whether or not the body had ended)", async () => {
    const key = freshKey();
    const h = background();
    const client = new AbortController();
    const body = JSON.stringify({ max_tokens: 90, stream: true, stream_options: { include_usage: true } });
    const req = request(key, "/__special/llm/openai-chat?tokens=4&prompt=6", {
      method: "POST",
      body,
      signal: client.signal,
    });
    const res = await handle(req, env(), h);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await readUntil(reader, '"total_tokens"');
    client.abort(new Error("the client went away"));
    await reader.cancel();
    await h.settled();
    expect(await state(key)).toMatchObject({ used: 10, cost: 10 });
    expect(kept()).toEqual([]);
  });

  const BAD: { what: string; form: string; body: string; detail: string }[] = [
    {
      what: "max_tokens not a whole number",
      form: "openai-chat",
      body: JSON.stringify({ max_tokens: 1.5 }),
      detail: "request body max_tokens: expected a whole number ≥ 1 for the request's reservation, got 1.5",
    },
    {
      what: "max_tokens a string",
      form: "openai-chat",
      body: JSON.stringify({ max_tokens: "lots" }),
      detail: 'request body max_tokens: expected a whole number ≥ 1 for the request\'s reservation, got "lots"',
    },
    {
      what: "max_tokens missing and no default",
      form: "openai-chat",
      body: JSON.stringify({ messages: MESSAGES }),
      detail: "request body max_tokens: missing, and this route has no default reservation; send it",
    },
    {
      what: "a body that is not JSON",
      form: "openai-chat",
      body: "max_tokens=5",
      detail: "request body: not JSON, so max_tokens cannot be read for the request's reservation; send JSON",
    },
    {
      what: "a body larger than max_body",
      form: "anthropic",
      body: JSON.stringify({ max_tokens: 5, pad: "x".repeat(5000) }),
      detail: "request body: larger than the 4096 bytes read for the request's reservation (max_tokens)",
    },
  ];

  it.each(BAD)(
    "$what: 400 naming the field, nothing counted, no object call, nothing sent on",
    async ({ form, body, detail }) => {
      const key = freshKey();
      const spy = spyLimiter();
      const res = await handle(
        request(key, `/__special/llm/${form}`, {
          method: "POST",
          body,
          headers: { "content-type": "application/json" },
        }),
        envWith(CONFIG, { LIMITER: spy.namespace }),
      );
      expect(res.status).toBe(400);
      expect((await problemBody(res)).detail).toContain(detail);
      expect(spy.calls).toEqual([]);
      expect(await reports(key)).toEqual([]);
    },
  );

  it("a missing field takes the rule's default", async () => {
    const key = freshKey();
    const h = background();
    const { req, text } = ask(
      key,
      "openai-responses",
      { model: "fake", input: "hi", stream: true },
      "?tokens=2&prompt=9",
    );
    const res = await handle(req, env(), h);
    expect(res.headers.get("RateLimit")).toBe(`"per-10s";r=${2000 - 500 - text.length};t=10`);
    await res.text();
    await h.settled();
    expect(await state(key)).toMatchObject({ used: 11, cost: 11 });
  });
});

describe("40 concurrent streams on 2,000 tokens / 10 s", () => {
  it("no window over 2,000 by settled cost; usage and credits are what the origin reported", async () => {
    const key = freshKey();
    const h = background();
    const body = {
      model: "fake",
      max_tokens: 150,
      stream: true,
      stream_options: { include_usage: true },
      messages: MESSAGES,
    };
    const reserved = 150 + JSON.stringify(body).length;
    const granted: number[] = [];
    const started = Date.now();
    // Waves of 40 at once: each wave's grants settle before the next, giving back what they did not use.
    for (;;) {
      const wave = await Promise.all(
        Array.from({ length: 40 }, async () => {
          const res = await handle(ask(key, "openai-chat", body, "?tokens=20&split=1").req, env(), h);
          const status = res.status;
          await res.arrayBuffer();
          return status;
        }),
      );
      await h.settled();
      expect(wave.every((s) => s === 200 || s === 429)).toBe(true);
      const n = wave.filter((s) => s === 200).length;
      if (n === 0) break;
      granted.push(n);
    }
    // The first wave: as many reservations as fit (more if a stream settled before the wave's last was decided).
    expect(granted[0]).toBeGreaterThanOrEqual(Math.floor(2000 / reserved));
    // Settling gave back what was not used: later waves were granted too.
    expect(granted.length).toBeGreaterThan(1);
    const all = await reports(key);
    expect(all).toHaveLength(granted.reduce((a, b) => a + b, 0));
    // By settled cost, at the origin's arrival times: no window of 10 s (less the longest send-to-arrival time)
    // holds more than 2,000.
    const jitter = Math.max(...all.map((r) => r.at - started));
    const shrunk = 10_000 - Math.min(jitter, 10_000);
    const sorted = [...all].sort((a, b) => a.at - b.at);
    let max = 0;
    for (const r of sorted) {
      const sum = sorted.filter((q) => q.at <= r.at && q.at > r.at - shrunk).reduce((s, q) => s + (q.reported ?? 0), 0);
      max = Math.max(max, sum);
    }
    expect(max).toBeLessThanOrEqual(2000);
    const total = all.reduce((s, r) => s + (r.reported as number), 0);
    const now = await state(key);
    expect(now).toMatchObject({ cost: total, requests: all.length, balance: CREDITS - total });
    // The window holds the settled costs (when the waves took less than its 10 s, all of them).
    if (Date.now() - started < 10_000) expect(now.used).toBe(total);
  });
});
