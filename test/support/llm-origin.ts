// The recording origin's fake language model (test/support/origin.ts, `/__special/llm/<form>`): answers an OpenAI chat
// completions, OpenAI responses or Anthropic messages request as that API does — streamed (SSE, one write per event,
// or each event cut in two writes) when the body asks `stream: true`, else JSON — and records the usage it reported.
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  anthropicEvents,
  anthropicJson,
  type LlmReport,
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
    typeof body.max_tokens === "number"
      ? body.max_tokens
      : typeof body.max_output_tokens === "number"
        ? body.max_output_tokens
        : null;
  const tokens = params.has("tokens") ? Number(params.get("tokens")) : Math.min(maxTokens ?? 5, 5);
  const prompt = params.has("prompt") ? Number(params.get("prompt")) : Math.ceil(raw.length / 4);
  const words = Array.from({ length: tokens }, (_, i) => (i === 0 ? "tok" : " tok"));
  const key = typeof req.headers["x-api-key"] === "string" ? req.headers["x-api-key"] : null;
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
    ctx.reports.push({ key, form, reported, maxTokens, at, endedAt: Date.now(), cancelled, sent });
  };

  if (!stream) {
    const text = form === "anthropic" ? anthropicJson({ input: prompt, words }) : openaiChatJson({ prompt, words });
    res.writeHead(200, { "content-type": "application/json" });
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
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
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
