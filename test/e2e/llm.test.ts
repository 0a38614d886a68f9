// Settled costs under `wrangler dev` (docs/llm.md) in front of the recording origin's fake language model
// (test/support/llm-origin.ts): 40 concurrent OpenAI streams (usage at the end, every event written in two pieces) on a
// key of 2,000 tokens / 10 s — none over by settled cost at the origin's arrival times, usage equal to the tokens the
// origin reported, credits equal to those bought less them; Anthropic streams settled the same; a bad reservation a
// 400 that reaches nothing; a client that resets its connection mid-stream cancels the origin's request, its
// reservation kept (`client_left`) — `wrangler dev` passes a streamed response's client leaving on (its reset and a clean
// close in workerd direct: test/e2e/llm-client-left.test.ts).
import { request as httpRequest, type IncomingMessage } from "node:http";
import { describe, expect, it } from "vitest";
import type { Limiter } from "../support/harness.ts";
import type { LlmReport } from "../support/llm.ts";
import type { Origin } from "../support/origin.ts";
import { limiterForFile } from "./fixture.ts";

const TOKEN = "e2e-llm-token-0123456789";
const CREDITS = 100_000;
const RATE_LIMIT = {
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
      path: "/__special/llm/anthropic",
      reserve: { json: "max_tokens", input: "bytes" },
      settle: "anthropic",
    },
  ],
};

let origin: Origin;
let limiter: Limiter;
limiterForFile({ statePrefix: "limiter-e2e-llm-", rateLimit: RATE_LIMIT, vars: { ADMIN_TOKEN: TOKEN } }, (o, l) => {
  origin = o;
  limiter = l;
});

const admin = async (path: string, body: unknown) =>
  (await (
    await fetch(`${limiter.url}/__limiter/${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    })
  ).json()) as Record<string, unknown>;

/** The key's usage today and its credits, once they show `cost` (settlement runs after each body has ended). */
async function billedOnce(key: string, cost: number): Promise<{ cost: number; requests: number; balance: number }> {
  for (;;) {
    const usage = (await admin("usage", { key, period: "day" })) as { periods: { cost: number; requests: number }[] };
    const day = usage.periods.at(-1) ?? { cost: 0, requests: 0 };
    if (day.cost === cost) {
      const status = (await admin("status", { key })) as { credits: { balance: number } };
      return { cost: day.cost, requests: day.requests, balance: status.credits.balance };
    }
  }
}

const post = (key: string, path: string, body: unknown) =>
  fetch(`${limiter.url}${path}`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

describe("settled costs under wrangler dev", () => {
  it("40 concurrent streams on 2,000 tokens / 10 s: never over by settled cost; usage and credits as reported", async () => {
    const key = `llm_${crypto.randomUUID()}`;
    const body = { model: "fake", max_tokens: 120, stream: true, stream_options: { include_usage: true } };
    const reserved = 120 + JSON.stringify(body).length;
    const sent = Date.now();
    const statuses = await Promise.all(
      Array.from({ length: 40 }, async () => {
        const res = await post(key, "/__special/llm/openai-chat?tokens=25&split=1", body);
        const text = await res.text();
        if (res.status === 200) expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
        return res.status;
      }),
    );
    expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
    const granted = statuses.filter((s) => s === 200).length;
    // As many as their reservations fit, and more if streams settled (giving back) before the last was decided.
    expect(granted).toBeGreaterThanOrEqual(Math.floor(2000 / reserved));
    const served = origin.reports.filter((r) => r.key === key);
    expect(served).toHaveLength(granted);
    // By settled cost at the origin's arrival times, allowing the longest send-to-arrival time.
    const jitter = Math.max(...served.map((r) => r.at - sent));
    const sorted = [...served].sort((a, b) => a.at - b.at);
    const max = Math.max(
      ...sorted.map((r) =>
        sorted
          .filter((q) => q.at <= r.at && q.at > r.at - (10_000 - jitter))
          .reduce((s, q) => s + (q.reported ?? 0), 0),
      ),
    );
    expect(max).toBeLessThanOrEqual(2000);
    const total = served.reduce((s, r) => s + (r.reported as number), 0);
    expect(await billedOnce(key, total)).toEqual({ cost: total, requests: granted, balance: CREDITS - total });
  });

  it("an Anthropic stream settles to input + output tokens", async () => {
    const key = `llm_${crypto.randomUUID()}`;
    const res = await post(key, "/__special/llm/anthropic?tokens=6&prompt=30&split=1", {
      max_tokens: 64,
      stream: true,
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("event: message_stop");
    expect(await billedOnce(key, 36)).toEqual({ cost: 36, requests: 1, balance: CREDITS - 36 });
  });

  it("a client that resets its connection mid-stream: the origin's request is cancelled, the reservation kept", async () => {
    const key = `llm_${crypto.randomUUID()}`;
    const body = JSON.stringify({ max_tokens: 1000, stream: true, stream_options: { include_usage: true } });
    // A stream of 4,000 events 10 ms apart (40 s), the usage last.
    const req = httpRequest(`${limiter.url}/__special/llm/openai-chat?tokens=4000&pace=10`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json" },
      agent: false,
    });
    req.on("error", () => {});
    req.end(body);
    const res = await new Promise<IncomingMessage>((ok, fail) => {
      req.once("response", ok);
      req.once("error", fail);
    });
    expect(res.statusCode).toBe(200);
    res.on("error", () => {});
    await new Promise<void>((ok) => res.once("data", () => ok()));
    req.socket?.resetAndDestroy();
    // The origin's record comes when its connection closes: long before its stream could have ended.
    let report: LlmReport | undefined;
    while (report === undefined) {
      report = origin.reports.find((r) => r.key === key);
      if (report === undefined) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(report).toMatchObject({ cancelled: true, reported: null });
    const kept = () =>
      limiter.output().match(/\{"event":"reservation_kept"[^\n]*?"reason":"client_left"[^}]*\}/g) ?? [];
    while (kept().length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(kept().length).toBeGreaterThan(0);
  });

  it("a reservation that is not a whole number: 400 naming the field, nothing sent on", async () => {
    const key = `llm_${crypto.randomUUID()}`;
    const res = await post(key, "/__special/llm/openai-chat", { max_tokens: "many", stream: true });
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(((await res.json()) as { detail: string }).detail).toContain(
      "request body max_tokens: expected a whole number",
    );
    expect(origin.reports.filter((r) => r.key === key)).toEqual([]);
  });
});
