// The official SDKs through the gateway under `wrangler dev` (docs/llm.md, "What SDKs do with a 429"): the `openai`
// and `@anthropic-ai/sdk` packages, pointed at the proxy with a customer's key, in front of the recording origin's
// fake providers (which accept only the operator's credential). Chat completions streamed and JSON, the responses API
// and Anthropic messages streamed and JSON answer, and the key's usage is what the providers reported. At the limit
// the SDK's own retry waits the exact `retry-after-ms` and succeeds; a request that can never pass, or one over a
// wait no SDK makes, is sent once (`x-should-retry: false`).
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { gatewaySettings, OPERATOR_CREDENTIALS } from "../support/llm.ts";
import { type Origin, startOrigin } from "../support/origin.ts";

const TOKEN = "sdk-admin-token";
const WINDOW = "2s";

let origin: Origin;
let limiter: Limiter;
let state: Awaited<ReturnType<typeof tempDir>>;

function rateLimit(originUrl: string) {
  return {
    limits: [{ limit: 1000, window: WINDOW }],
    usage: true,
    leases: false,
    ...gatewaySettings(originUrl, 300),
    // A second window no SDK waits out: 61 s.
    plans: [
      {
        name: "slow",
        key_prefix: "slow_",
        limits: [{ limit: 1000, window: "61s" }],
      },
    ],
  };
}

beforeAll(async () => {
  origin = await startOrigin();
  state = await tempDir("limiter-e2e-sdk-");
  limiter = await startLimiter({
    origin: origin.url,
    rateLimit: rateLimit(origin.url),
    persistTo: state.path,
    vars: {
      OPENAI_API_KEY: OPERATOR_CREDENTIALS.openai,
      ANTHROPIC_API_KEY: OPERATOR_CREDENTIALS.anthropic,
      ADMIN_TOKEN: TOKEN,
    },
  });
});

afterAll(async () => {
  await limiter?.stop();
  await origin?.close();
  await state?.cleanup();
});

/** One attempt the SDK made: its status, the wait it was told (`retry-after-ms`), and when it was sent. */
interface Attempt {
  readonly status: number;
  readonly retryAfterMs: number | null;
  readonly at: number;
}

/** A fetch that records each attempt, as the SDK makes them. */
function recording(): { fetch: typeof fetch; statuses: number[]; attempts: Attempt[] } {
  const statuses: number[] = [];
  const attempts: Attempt[] = [];
  return {
    statuses,
    attempts,
    fetch: async (input, init) => {
      const at = performance.now();
      const res = await fetch(input, init);
      statuses.push(res.status);
      const wait = res.headers.get("retry-after-ms");
      attempts.push({ status: res.status, retryAfterMs: wait === null ? null : Number(wait), at });
      return res;
    },
  };
}

let n = 0;
const freshKey = (prefix = "sk_") => `${prefix}${process.pid}_${Date.now()}_${n++}`;

function openai(key: string, fetcher = recording()) {
  return { client: new OpenAI({ apiKey: key, baseURL: `${limiter.url}/openai/v1`, fetch: fetcher.fetch }), fetcher };
}

function anthropic(key: string, fetcher = recording()) {
  return { client: new Anthropic({ apiKey: key, baseURL: `${limiter.url}/anthropic`, fetch: fetcher.fetch }), fetcher };
}

/** The key's settled cost today, as the admin API's usage tells it. */
async function usageOf(key: string): Promise<{ requests: number; cost: number }> {
  const res = await fetch(`${limiter.url}/__limiter/usage`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ key, period: "day" }),
  });
  const body = (await res.json()) as { periods: { requests: number; cost: number }[] };
  return body.periods.at(-1) ?? { requests: 0, cost: 0 };
}

/** Waits until `key`'s usage has counted `requests` settled requests (settlement ends after the response). */
async function settledUsage(key: string, requests: number): Promise<{ requests: number; cost: number }> {
  for (let tries = 0; tries < 500; tries++) {
    const u = await usageOf(key);
    if (u.requests >= requests && u.cost > 0) {
      // One more read: a settlement still on its way would change it.
      const again = await usageOf(key);
      if (again.cost === u.cost) return u;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${key}: ${requests} requests never settled`);
}

const MESSAGES = [{ role: "user" as const, content: "Say something short." }];

describe("the official SDKs through the gateway", () => {
  it("OpenAI chat completions, JSON and streamed, and the responses API: answered, the key's usage what was reported", async () => {
    const key = freshKey();
    const { client, fetcher } = openai(key);
    const json = await client.chat.completions.create({ model: "m", max_tokens: 50, messages: MESSAGES });
    expect(json.choices[0]?.message.content).toBeTruthy();
    const stream = await client.chat.completions.create({
      model: "m",
      max_completion_tokens: 50,
      messages: MESSAGES,
      stream: true,
      stream_options: { include_usage: true },
    });
    let streamedUsage = 0;
    for await (const chunk of stream) if (chunk.usage) streamedUsage = chunk.usage.total_tokens;
    const responses = await client.responses.create({ model: "m", input: "hi", max_output_tokens: 40 });
    expect(fetcher.statuses).toEqual([200, 200, 200]);
    const reported = (json.usage?.total_tokens ?? 0) + streamedUsage + (responses.usage?.total_tokens ?? 0);
    expect(streamedUsage).toBeGreaterThan(0);
    expect(await settledUsage(key, 3)).toMatchObject({ requests: 3, cost: reported });
  });

  it("Anthropic messages, JSON and streamed: answered, the key's usage what was reported", async () => {
    const key = freshKey();
    const { client, fetcher } = anthropic(key);
    const message = await client.messages.create({ model: "m", max_tokens: 60, messages: MESSAGES });
    const stream = client.messages.stream({ model: "m", max_tokens: 60, messages: MESSAGES });
    const final = await stream.finalMessage();
    expect(fetcher.statuses).toEqual([200, 200]);
    const reported =
      message.usage.input_tokens + message.usage.output_tokens + final.usage.input_tokens + final.usage.output_tokens;
    expect(await settledUsage(key, 2)).toMatchObject({ requests: 2, cost: reported });
  });

  it("at the limit: the SDK's own retry waits retry-after-ms and succeeds", async () => {
    const key = freshKey();
    const { client, fetcher } = openai(key);
    // Each answer writes 400 tokens: two fit in 1,000 a window, the third waits for the first to leave it.
    const ask = () =>
      client.chat.completions.create(
        { model: "m", max_tokens: 400, messages: MESSAGES },
        { query: { tokens: "400" }, maxRetries: 3 },
      );
    await ask();
    await ask();
    await settledUsage(key, 2);
    const third = await ask();
    expect(third.usage?.completion_tokens).toBe(400);
    // Refused once, then granted by the SDK's own retry, sent no sooner than the exact wait the refusal told it: the
    // SDK waited retry-after-ms (its own backoff, 0.5 s at first, would have come too early and been refused again).
    expect(fetcher.statuses).toEqual([200, 200, 429, 200]);
    const [refused, retried] = fetcher.attempts.slice(2) as [Attempt, Attempt];
    expect(refused.retryAfterMs).toBeGreaterThan(0);
    expect(retried.at - refused.at).toBeGreaterThanOrEqual(refused.retryAfterMs as number);
  });

  it("a request that can never pass is sent once, the SDK told not to retry; so is one whose wait no SDK makes", async () => {
    const { client, fetcher } = openai(freshKey());
    const never = client.chat.completions.create(
      { model: "m", max_tokens: 500, n: 8, messages: MESSAGES },
      { maxRetries: 3 },
    );
    await expect(never).rejects.toMatchObject({ status: 429 });
    expect(fetcher.statuses).toEqual([429]);

    const slow = anthropic(freshKey("slow_"));
    await slow.client.messages.create(
      { model: "m", max_tokens: 900, messages: MESSAGES },
      { query: { tokens: "900" } },
    );
    const late = slow.client.messages.create({ model: "m", max_tokens: 500, messages: MESSAGES }, { maxRetries: 3 });
    await expect(late).rejects.toMatchObject({ status: 429 });
    expect(slow.fetcher.statuses).toEqual([200, 429]);
  });
});
