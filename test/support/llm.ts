// A fake language model's answers, as OpenAI's and Anthropic's APIs send them: SSE events one string each (the origin
// writes them one at a time, or cut mid-event), and JSON bodies. One token per word; the usage each reports is exact:
// prompt/input tokens as given, plus one output token per word. Shared by the unit tests, the recording origin
// (test/support/origin.ts) and the benches.

/** One answer the fake model gave: whose (`x-api-key`), and the usage it reported (null: none). */
export interface LlmReport {
  readonly key: string | null;
  /** The `x-limiter-key-id` the proxy told the origin (the gateway), or null. */
  readonly keyId: string | null;
  readonly form: string;
  /** The total tokens its usage reported; null when it reported none (no include_usage, or cut before it). */
  readonly reported: number | null;
  /** The reservation's fields the request carried. */
  readonly maxTokens: number | null;
  /** Date.now() when the request arrived, and when its answer ended. */
  readonly at: number;
  readonly endedAt: number;
  /** The client (the proxy) closed the connection before the answer was written in full. */
  readonly cancelled: boolean;
  /** With `pace`: Date.now() as each event was written, in order. */
  readonly sent: readonly number[];
}

/** One SSE event: an optional `event:` line, one `data:` line, a blank line. */
function sse(data: unknown, event?: string): string {
  return `${event === undefined ? "" : `event: ${event}\n`}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`;
}

export interface ChatOptions {
  readonly prompt: number;
  readonly words: readonly string[];
  /** `stream_options.include_usage`: a last chunk with the usage, and `usage: null` on the others. */
  readonly usage: boolean;
}

/** A chat completion streamed (`chat.completion.chunk`s, then `[DONE]`), one event per string. */
export function openaiChatEvents(o: ChatOptions): string[] {
  const base = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "fake" };
  const nullUsage = o.usage ? { usage: null } : {};
  const chunk = (delta: object, finish: string | null) =>
    sse({ ...base, choices: [{ index: 0, delta, finish_reason: finish }], ...nullUsage });
  const events = [chunk({ role: "assistant", content: "" }, null)];
  for (const w of o.words) events.push(chunk({ content: w }, null));
  events.push(chunk({}, "stop"));
  if (o.usage) {
    const completion = o.words.length;
    const usage = { prompt_tokens: o.prompt, completion_tokens: completion, total_tokens: o.prompt + completion };
    events.push(sse({ ...base, choices: [], usage }));
  }
  events.push(sse("[DONE]"));
  return events;
}

export const openaiChatStream = (o: ChatOptions): string => openaiChatEvents(o).join("");

/** A chat completion as JSON. */
export function openaiChatJson(o: { prompt: number; words: readonly string[] }): string {
  const completion = o.words.length;
  return JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1,
    model: "fake",
    choices: [{ index: 0, message: { role: "assistant", content: o.words.join("") }, finish_reason: "stop" }],
    usage: { prompt_tokens: o.prompt, completion_tokens: completion, total_tokens: o.prompt + completion },
  });
}

/** A response of the responses API streamed: `response.created`, text deltas, then `response.<status>` (no `[DONE]`). */
export function openaiResponsesEvents(o: {
  input: number;
  words: readonly string[];
  status: "completed" | "incomplete";
}): string[] {
  const response = { id: "resp_1", object: "response", model: "fake", status: "in_progress", usage: null };
  let seq = 0;
  const events = [sse({ type: "response.created", sequence_number: seq++, response }, "response.created")];
  for (const w of o.words) {
    const delta = {
      type: "response.output_text.delta",
      sequence_number: seq++,
      item_id: "msg_1",
      output_index: 0,
      content_index: 0,
      delta: w,
    };
    events.push(sse(delta, delta.type));
  }
  const output = o.words.length;
  const usage = {
    input_tokens: o.input,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: o.input + output,
  };
  const type = `response.${o.status}`;
  events.push(sse({ type, sequence_number: seq, response: { ...response, status: o.status, usage } }, type));
  return events;
}

export const openaiResponsesStream = (o: Parameters<typeof openaiResponsesEvents>[0]): string =>
  openaiResponsesEvents(o).join("");

export interface AnthropicOptions {
  readonly input: number;
  readonly cacheRead?: number;
  readonly cacheCreation?: number;
  readonly words: readonly string[];
  /** Cumulative output counts of `message_delta` events before the last (which reports every word). */
  readonly deltas?: readonly number[];
}

/** A message streamed: `message_start`, a text block, `message_delta` (cumulative usage), `message_stop`. */
export function anthropicEvents(o: AnthropicOptions): string[] {
  const usage = {
    input_tokens: o.input,
    cache_creation_input_tokens: o.cacheCreation ?? 0,
    cache_read_input_tokens: o.cacheRead ?? 0,
    output_tokens: 1,
  };
  const message = {
    id: "msg_1",
    type: "message",
    role: "assistant",
    content: [],
    model: "fake",
    stop_reason: null,
    stop_sequence: null,
    usage,
  };
  const events = [
    sse({ type: "message_start", message }, "message_start"),
    sse({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }, "content_block_start"),
    sse({ type: "ping" }, "ping"),
  ];
  for (const w of o.words) {
    events.push(
      sse({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: w } }, "content_block_delta"),
    );
  }
  events.push(sse({ type: "content_block_stop", index: 0 }, "content_block_stop"));
  for (const d of o.deltas ?? []) {
    events.push(
      sse(
        { type: "message_delta", delta: { stop_reason: null, stop_sequence: null }, usage: { output_tokens: d } },
        "message_delta",
      ),
    );
  }
  const last = {
    type: "message_delta",
    delta: { stop_reason: "end_turn", stop_sequence: null },
    usage: { output_tokens: o.words.length },
  };
  events.push(sse(last, "message_delta"));
  events.push(sse({ type: "message_stop" }, "message_stop"));
  return events;
}

export const anthropicStream = (o: AnthropicOptions): string => anthropicEvents(o).join("");

/** A message as JSON. */
export function anthropicJson(o: { input: number; words: readonly string[] }): string {
  return JSON.stringify({
    id: "msg_1",
    type: "message",
    role: "assistant",
    content: [{ type: "text", text: o.words.join("") }],
    model: "fake",
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: o.input, output_tokens: o.words.length },
  });
}

/** The operator's credentials the fake providers accept (`provider/<name>/…`): what a gateway test puts as secrets. */
export const OPERATOR_CREDENTIALS = { openai: "sk-operator-openai-test", anthropic: "sk-ant-operator-test" } as const;

/**
 * The gateway's settings in front of the recording origin's fake providers at `originUrl` (docs/llm.md, "The
 * gateway"): OpenAI and Anthropic by path prefix, each with the operator's credential from a secret
 * (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`: {@link OPERATOR_CREDENTIALS}), and their rules — chat completions by
 * `max_completion_tokens` or `max_tokens` times `n` (at most 8), the responses API, Anthropic messages — a request
 * without the field reserved `defaultReservation`.
 */
export function gatewaySettings(originUrl: string, defaultReservation: number) {
  return {
    origins: [
      {
        path: "/openai/",
        url: `${originUrl}/__special/provider/openai/`,
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the gateway's settings write ${NAME} in plain strings.
        headers: { authorization: "Bearer ${OPENAI_API_KEY}" },
      },
      {
        path: "/anthropic/",
        url: `${originUrl}/__special/provider/anthropic/`,
        // biome-ignore lint/suspicious/noTemplateCurlyInString: as above.
        headers: { "x-api-key": "${ANTHROPIC_API_KEY}" },
      },
    ],
    costs: [
      {
        method: "POST",
        path: "/openai/v1/chat/completions",
        reserve: {
          json: ["max_completion_tokens", "max_tokens"],
          times: "n",
          max_times: 8,
          input: "bytes",
          default: defaultReservation,
        },
        settle: "openai",
      },
      {
        method: "POST",
        path: "/openai/v1/responses",
        reserve: { json: "max_output_tokens", input: "bytes", default: defaultReservation },
        settle: "openai",
      },
      {
        method: "POST",
        path: "/anthropic/v1/messages",
        reserve: { json: "max_tokens", input: "bytes" },
        settle: "anthropic",
      },
    ],
  };
}
