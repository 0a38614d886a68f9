// The gateway in front of two model providers (docs/llm.md), through the Worker against the recording origin's fake
// providers (test/support/llm-origin.ts, `provider`), which accept only the operator's credential: the customer's key
// never reaches them; a chat completion's reservation bounds `n` choices (the case that put 4,005 tokens into a
// 3,000-token window), `max_completion_tokens` read before `max_tokens`, `n` over its ceiling a 400 naming it; the
// providers' own rate-limit fields replaced by the key's; one budget across both providers.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { keyId } from "../../src/base/log.ts";
import { SDK_MAX_WAIT_MS } from "../../src/client/result.ts";
import { gatewaySettings, type LlmReport, OPERATOR_CREDENTIALS } from "../support/llm.ts";
import { envWith, freshKey, handle, originUrl, problemBody } from "./helpers.ts";

const LIMIT = 3000;
const RATE_LIMIT = {
  limits: [{ limit: LIMIT, window: "1m" }],
  leases: false,
  ...gatewaySettings(originUrl, 1000),
};
const env = () =>
  ({
    ...envWith(RATE_LIMIT, {
      OPENAI_API_KEY: OPERATOR_CREDENTIALS.openai,
      ANTHROPIC_API_KEY: OPERATOR_CREDENTIALS.anthropic,
    } as never),
    ORIGIN: undefined,
  }) as ReturnType<typeof envWith>;

beforeEach(() => {
  vi.spyOn(console, "warn").mockImplementation(() => {});
  vi.spyOn(console, "log").mockImplementation(() => {});
});
afterEach(() => {
  vi.restoreAllMocks();
});

/** A JSON POST of `body` with `key` as the OpenAI SDK sends it (`Authorization: Bearer`). */
function post(key: string, path: string, body: Record<string, unknown>): Request {
  return new Request(`https://gw.example${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** What the fake providers reported for the key whose id is `id`. */
async function reportsOf(key: string): Promise<LlmReport[]> {
  const id = await keyId(`key:${key}`);
  const all = (await (await fetch(`${originUrl}/__special/llm-reports`)).json()) as LlmReport[];
  return all.filter((r) => r.keyId === id);
}

const MESSAGES = [{ role: "user", content: "hi" }];

describe("chat completions' n and max_completion_tokens", () => {
  it("n multiplies the reservation: n = 8 of 500 can never pass a 3,000 window, n = 4 passes and settles to its usage", async () => {
    const key = freshKey("sk_");
    const never = await handle(
      post(key, "/openai/v1/chat/completions", { model: "m", max_tokens: 500, n: 8, messages: MESSAGES }),
      env(),
    );
    const refusal = await problemBody(never);
    expect(never.status).toBe(429);
    expect(refusal.reason).toBe("too_costly");
    expect(never.headers.get("x-should-retry")).toBe("false");
    expect(never.headers.get("Retry-After")).toBeNull();
    // Its provider-format fields say what the key has.
    expect(never.headers.get("x-ratelimit-limit-tokens")).toBe(String(LIMIT));

    const body = { model: "m", max_tokens: 500, n: 4, messages: MESSAGES };
    const ok = await handle(post(key, "/openai/v1/chat/completions?tokens=500", body), env());
    expect(ok.status).toBe(200);
    const answer = (await ok.json()) as { usage: { total_tokens: number } };
    const reservation = 500 * 4 + JSON.stringify(body).length;
    // The provider wrote n × max_tokens: the whole of what was reserved for it but the input's bound.
    expect(answer.usage.total_tokens).toBeGreaterThan(2000);
    expect(answer.usage.total_tokens).toBeLessThanOrEqual(reservation);
    const [report] = await reportsOf(key);
    expect(report?.reported).toBe(answer.usage.total_tokens);
    expect(report?.key).toBeNull();
    // What is left is what the settled usage left: another n = 2 of 500 does not fit.
    const next = await handle(post(key, "/openai/v1/chat/completions", { ...body, n: 2 }), env());
    expect(next.status).toBe(429);
    const wait = Number(next.headers.get("retry-after-ms"));
    expect(wait).toBeGreaterThan(0);
    // The grant's record, rounded up to the window's tick (tens of ms for a minute), leaves it a minute later: a request
    // within a tick of the grant waits just over 60 s, past what an SDK should wait (SDK_MAX_WAIT_MS), and is told so.
    expect(next.headers.get("x-should-retry")).toBe(wait > SDK_MAX_WAIT_MS ? "false" : null);
  });

  it("n over max_times: a 400 naming it, nothing counted, nothing sent", async () => {
    const key = freshKey("sk_");
    const res = await handle(
      post(key, "/openai/v1/chat/completions", { model: "m", max_tokens: 10, n: 9, messages: MESSAGES }),
      env(),
    );
    expect(res.status).toBe(400);
    expect((await problemBody(res)).detail).toBe(
      "request body n: at most 8 here (each of the 9 multiplies the request's reservation), got 9; ask for fewer",
    );
    expect(await reportsOf(key)).toEqual([]);
    const small = { model: "m", max_tokens: 10, messages: MESSAGES };
    const after = await handle(post(key, "/openai/v1/chat/completions", small), env());
    expect(after.status).toBe(200);
    // The first grant of the key: the 400 counted nothing.
    expect(after.headers.get("x-ratelimit-remaining-tokens")).toBe(String(LIMIT - 10 - JSON.stringify(small).length));
  });

  it("max_completion_tokens is read before max_tokens; without either the default stands in (and fits the limits)", async () => {
    const key = freshKey("sk_");
    const newer = { model: "m", max_completion_tokens: 100, messages: MESSAGES };
    const res = await handle(post(key, "/openai/v1/chat/completions", newer), env());
    expect(res.status).toBe(200);
    // Granted for 100 + the body's bytes: what remains says so (before the settlement gives back).
    const remaining = LIMIT - 100 - JSON.stringify(newer).length;
    expect(res.headers.get("RateLimit")).toMatch(new RegExp(`^"per-minute";r=${remaining};t=6[01]$`));
    const bare = { model: "m", messages: MESSAGES };
    const res2 = await handle(post(freshKey("sk_"), "/openai/v1/chat/completions", bare), env());
    expect(res2.status).toBe(200);
  });
});

describe("the providers' own rate-limit fields", () => {
  it("OpenAI's x-ratelimit-* (the operator's account) replaced by the key's tightest limit, streamed or not", async () => {
    const key = freshKey("sk_");
    const json = await handle(
      post(key, "/openai/v1/responses", { model: "m", max_output_tokens: 50, input: "hi" }),
      env(),
    );
    expect(json.status).toBe(200);
    const fields = Object.fromEntries([...json.headers].filter(([n]) => n.startsWith("x-ratelimit-")));
    const remaining = Number(fields["x-ratelimit-remaining-tokens"]);
    expect(Object.keys(fields).sort()).toEqual([
      "x-ratelimit-limit-tokens",
      "x-ratelimit-remaining-tokens",
      "x-ratelimit-reset-tokens",
    ]);
    expect(fields["x-ratelimit-limit-tokens"]).toBe(String(LIMIT));
    // The window's length, as OpenAI writes a wait (the grant's own time may be a millisecond past the decision's).
    expect(fields["x-ratelimit-reset-tokens"]).toMatch(/^(59\.9\d*s|1m0(\.\d+)?s)$/);
    expect(remaining).toBeLessThan(LIMIT - 50);
    await json.text();
  });

  it("Anthropic's anthropic-ratelimit-* replaced; the same key's budget counts both providers", async () => {
    const key = freshKey("sk_");
    const openai = await handle(
      post(key, "/openai/v1/chat/completions", { model: "m", max_tokens: 2000, messages: MESSAGES }),
      env(),
    );
    expect(openai.status).toBe(200);
    const used = Number(((await openai.json()) as { usage: { total_tokens: number } }).usage.total_tokens);
    const bodyOf = (max: number) => JSON.stringify({ model: "m", max_tokens: max, messages: MESSAGES });
    const ask = (max: number) =>
      new Request("https://gw.example/anthropic/v1/messages", {
        method: "POST",
        headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
        body: bodyOf(max),
      });
    // One token more than what OpenAI's usage left (less still, while its settlement has not given back yet).
    const over = LIMIT - used - bodyOf(1000).length + 1;
    const refused = await handle(ask(over), env());
    expect(refused.status).toBe(429);
    expect(refused.headers.get("anthropic-ratelimit-tokens-limit")).toBe(String(LIMIT));
    const anthropic = await handle(ask(100), env());
    expect(anthropic.status).toBe(200);
    const fields = Object.fromEntries([...anthropic.headers].filter(([n]) => n.startsWith("anthropic-ratelimit-")));
    expect(Object.keys(fields).sort()).toEqual([
      "anthropic-ratelimit-tokens-limit",
      "anthropic-ratelimit-tokens-remaining",
      "anthropic-ratelimit-tokens-reset",
    ]);
    expect(fields["anthropic-ratelimit-tokens-reset"]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(used).toBeGreaterThan(0);
    await anthropic.text();
    const reports = await reportsOf(key);
    expect(reports.map((r) => r.form)).toEqual(["openai-chat", "anthropic"]);
    // The origin saw the operator's credential (Anthropic's in x-api-key), never the customer's key.
    expect(reports.map((r) => r.key)).toEqual([null, OPERATOR_CREDENTIALS.anthropic]);
  });
});
