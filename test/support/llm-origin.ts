// The recording origin's fake language model (test/support/origin.ts, `/__special/llm/<form>`): answers an OpenAI chat
// completions, OpenAI responses or Anthropic messages request as that API does — streamed (SSE, one write per event,
// or each event cut in two writes) when the body asks `stream: true`, else JSON — and records the usage it reported.
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  anthropicEvents,
  anthropicJson,
  type LlmReport,
  OPERATOR_CREDENTIALS,
  openaiChatEvents,
  openaiChatJson,
  openaiResponsesEvents,
} from "./llm.ts";

export type { LlmReport };

/** What the fake model needs from the origin: its rendezvous counters. */
export interface LlmContext {
  readonly reports: LlmReport[];
  /** Resolves once `release/<id>` has been requested. */
  readonly released: (id: string) => Promise<void>;
}

/**
 * `/__special/llm/<form>` with `form` one of `openai-chat`, `openai-responses`, `anthropic`. Query:
 * - `tokens=<n>`: output tokens (words) — default `min(max_tokens, 5)`;
 * - `prompt=<n>`: input tokens — default the body's length in bytes ÷ 4, rounded up;
 * - `split=1`: each event in two writes, cut in its middle;
 * - `gate=<id>`: the last events (the usage) wait for `release/<id>`;
 * - `cut=1`: the connection is dropped before the usage is sent;
 * - `pace=<ms>`: each event written that long after the one before, its time recorded (`sent`; benches only).
 */
export async function llm(
  form: string,
  url: URL,
  req: IncomingMessage,
  res: ServerResponse,
  ctx: LlmContext,
  headers: Record<string, string> = {},
): Promise<void> {
  const at = Date.now();
  const chunks: Buffer[] = [];
  for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
  const raw = Buffer.concat(chunks);
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
  } catch {
    // not JSON: defaults
  }
  const params = url.searchParams;
  const maxTokens =
    typeof body.max_completion_tokens === "number"
      ? body.max_completion_tokens
      : typeof body.max_tokens === "number"
        ? body.max_tokens
        : typeof body.max_output_tokens === "number"
          ? body.max_output_tokens
          : null;
  // `n` choices (chat completions) each write up to the tokens asked: one answer of n times the words here.
  const choices = typeof body.n === "number" ? body.n : 1;
  const tokens = (params.has("tokens") ? Number(params.get("tokens")) : Math.min(maxTokens ?? 5, 5)) * choices;
  const prompt = params.has("prompt") ? Number(params.get("prompt")) : Math.ceil(raw.length / 4);
  const words = Array.from({ length: tokens }, (_, i) => (i === 0 ? "tok" : " tok"));
  const key = typeof req.headers["x-api-key"] === "string" ? req.headers["x-api-key"] : null;
  const keyId = typeof req.headers["x-limiter-key-id"] === "string" ? req.headers["x-limiter-key-id"] : null;
  const stream = body.stream === true;
  const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
  let cancelled = false;
  const sent: number[] = [];
  res.once("close", () => {
    if (!res.writableFinished) cancelled = true;
  });
  let recorded = false;
  const record = (reported: number | null) => {
    if (recorded) return;
    recorded = true;
    ctx.reports.push({ key, keyId, form, reported, maxTokens, at, endedAt: Date.now(), cancelled, sent });
  };

  if (!stream) {
    const text = form === "anthropic" ? anthropicJson({ input: prompt, words }) : openaiChatJson({ prompt, words });
    res.writeHead(200, { "content-type": "application/json", ...headers });
    res.end(text);
    record(prompt + tokens);
    return;
  }
  const events =
    form === "anthropic"
      ? anthropicEvents({ input: prompt, words })
      : form === "openai-responses"
        ? openaiResponsesEvents({ input: prompt, words, status: "completed" })
        : openaiChatEvents({ prompt, words, usage: includeUsage });
  const reports = form !== "openai-chat" || includeUsage;
  // The events from the one that carries the final usage on: what the gate holds back and a cut never sends.
  const tail = form === "anthropic" ? 2 : form === "openai-chat" && includeUsage ? 2 : 1;
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", ...headers });
  res.flushHeaders();
  const split = params.get("split") === "1";
  const pace = params.has("pace") ? Number(params.get("pace")) : 0;
  const send = async (event: string) => {
    if (pace > 0) {
      await new Promise((resolve) => setTimeout(resolve, pace));
      sent.push(Date.now());
    }
    const parts = split ? [event.slice(0, event.length >> 1), event.slice(event.length >> 1)] : [event];
    for (const p of parts)
      await new Promise<void>((resolve, reject) => res.write(p, (e) => (e ? reject(e) : resolve())));
  };
  try {
    for (const e of events.slice(0, events.length - tail)) await send(e);
    const gate = params.get("gate");
    if (gate !== null) {
      // Released, or left by its client: a proxy that cancels closes the connection.
      await Promise.race([ctx.released(gate), new Promise((resolve) => res.once("close", resolve))]);
      if (cancelled) return record(null);
    }
    if (params.get("cut") === "1") {
      record(null);
      res.socket?.destroy();
      return;
    }
    for (const e of events.slice(events.length - tail)) await send(e);
  } catch {
    record(null);
    return; // the client went away
  }
  res.end();
  record(reports ? prompt + tokens : null);
}

/** The providers' own rate-limit fields, as they send them: the operator's account, millions of tokens. */
const ACCOUNT_FIELDS: Record<"openai" | "anthropic", Record<string, string>> = {
  openai: {
    "x-ratelimit-limit-requests": "10000",
    "x-ratelimit-limit-tokens": "30000000",
    "x-ratelimit-remaining-requests": "9999",
    "x-ratelimit-remaining-tokens": "29999000",
    "x-ratelimit-reset-requests": "6ms",
    "x-ratelimit-reset-tokens": "2ms",
  },
  anthropic: {
    "anthropic-ratelimit-requests-limit": "4000",
    "anthropic-ratelimit-requests-remaining": "3999",
    "anthropic-ratelimit-tokens-limit": "2000000",
    "anthropic-ratelimit-tokens-remaining": "1999000",
    "anthropic-ratelimit-input-tokens-limit": "2000000",
    "anthropic-ratelimit-output-tokens-limit": "400000",
  },
};

/**
 * `/__special/provider/<openai|anthropic>/v1/…`: a model provider at its real paths — OpenAI's `v1/chat/completions`
 * and `v1/responses`, Anthropic's `v1/messages` — accepting only the operator's credential
 * ({@link OPERATOR_CREDENTIALS}: `Authorization: Bearer …`, Anthropic's `x-api-key`), answering with its own
 * account's rate-limit fields; anything else a `401` or `404` as the provider words it.
 */
export async function provider(
  rest: string,
  url: URL,
  req: IncomingMessage,
  res: ServerResponse,
  ctx: LlmContext,
): Promise<void> {
  const name = rest.startsWith("openai/") ? "openai" : rest.startsWith("anthropic/") ? "anthropic" : null;
  const path = name === null ? rest : rest.slice(name.length + 1);
  const form =
    name === "openai" && path === "v1/chat/completions"
      ? "openai-chat"
      : name === "openai" && path === "v1/responses"
        ? "openai-responses"
        : name === "anthropic" && path === "v1/messages"
          ? "anthropic"
          : null;
  const fail = (status: number, message: string) => {
    req.resume();
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { type: status === 401 ? "authentication_error" : "not_found", message } }));
  };
  if (name === null || form === null) return fail(404, `no such path: ${rest}`);
  const given = name === "openai" ? req.headers.authorization : req.headers["x-api-key"];
  const expected = name === "openai" ? `Bearer ${OPERATOR_CREDENTIALS.openai}` : OPERATOR_CREDENTIALS.anthropic;
  if (given !== expected) return fail(401, "invalid credential");
  return llm(form, url, req, res, ctx, ACCOUNT_FIELDS[name]);
}
