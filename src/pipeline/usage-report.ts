/**
 * @module What a response reports it cost (docs/llm.md, a `costs` rule's `settle`), read from its body chunk by chunk
 * as it passes, never holding a chunk back: a header, a JSON field, or the usage a language-model API reports — in an
 * SSE stream (`text/event-stream`) at its end, or in a JSON body. Pure: bytes in, a number or a reason out.
 *
 * The forms read, as their APIs document them:
 * - OpenAI chat completions: with `stream_options.include_usage` "an additional chunk will be streamed before the
 *   `data: [DONE]` message. The `usage` field on this chunk shows the token usage statistics for the entire request
 *   … All other chunks will also include a `usage` field, but with a null value" (OpenAI API reference,
 *   ChatCompletionStreamOptions); a JSON completion has the same `usage`. Its cost: `usage.total_tokens`, else
 *   `prompt_tokens + completion_tokens`.
 * - OpenAI responses: a stream "ends with `response.completed`, `response.incomplete`, or `response.failed`" (no
 *   `[DONE]`), whose `response.usage` has `input_tokens`, `output_tokens`, `total_tokens` (OpenAI API reference,
 *   "Responses streaming events"); a JSON response has the same `usage`. Its cost: `total_tokens`, else input + output.
 * - Anthropic messages: `message_start` carries `message.usage` (`input_tokens`, `cache_creation_input_tokens`,
 *   `cache_read_input_tokens`, an interim `output_tokens`); each `message_delta` carries `usage` whose "token counts
 *   … are cumulative" (`output_tokens`, and input counts when present) (Anthropic, "Streaming Messages"); a JSON
 *   message has `usage`. Its cost: "total input tokens in a request is the summation of input_tokens,
 *   cache_creation_input_tokens, and cache_read_input_tokens" (Anthropic API reference, Usage) plus `output_tokens`.
 *   Cached prompt tokens count: the reservation's input bound (`input = "bytes"`) bounds the whole prompt, cached or
 *   not. A stream's cost is reported by its last `message_delta`; `message_start` alone reports nothing final.
 */

import type { Settle } from "../config/types.ts";
import { at } from "./reservation.ts";

/** The largest JSON body, or SSE event, read for its usage (bytes); a larger one is unreadable. */
export const MAX_REPORT_BYTES = 1_048_576;

/** What a response reported at its end: its cost, or why none can be read (the reservation stands). */
export type Report =
  | { readonly actual: number }
  | {
      /**
       * `no_usage`: nothing reported; `unreadable`: a report that is not a whole number ≥ 0, or a body not JSON or too
       * large; `cut_short`, `client_left`: the body ended (the origin cut it, the client went away) before its report.
       */
      readonly none: "no_usage" | "unreadable" | "cut_short" | "client_left";
      readonly detail: string;
    };

/** Reads one response's report as its body passes ({@link usageReader}). */
export interface UsageReader {
  /** Reads one chunk of the body (the chunk itself goes on unchanged, by the caller). */
  push(chunk: Uint8Array): void;
  /** The cost reported so far, final for its form (null: none yet): what a body cut short may still settle to. */
  reported(): number | null;
  /** What the whole body reported, once it has ended. */
  end(): Report;
}

/** The headers a reader looks at. */
export interface HeaderReader {
  get(name: string): string | null;
}

/** A reader of what a response reports under `settle`, for a response with these `headers`. */
export function usageReader(settle: Settle, headers: HeaderReader): UsageReader {
  if (settle.from === "header") return headerReport(settle.header, headers.get(settle.header));
  const events = (headers.get("content-type") ?? "").toLowerCase().includes("text/event-stream");
  const usage = new Usage(settle);
  return events ? new EventReader(usage) : new JsonReader(usage);
}

/** A cost read from a response header (`name`, value `value`): known before the body, reported whatever it does. */
function headerReport(name: string, value: string | null): UsageReader {
  const text = value?.trim() ?? "";
  const units = /^\d+$/.test(text) ? Number(text) : Number.NaN;
  const report: Report =
    value === null
      ? { none: "no_usage", detail: `no ${name} header` }
      : Number.isSafeInteger(units)
        ? { actual: units }
        : { none: "unreadable", detail: `header ${name}: ${JSON.stringify(value)} is not a whole number` };
  return { push: () => {}, reported: () => ("actual" in report ? report.actual : null), end: () => report };
}

/** A whole number ≥ 0, else null. */
function count(value: unknown): number | null {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? value : null;
}

/** The sum of the counts present among `names` of `o`; null when none is, or one is there but not a count. */
function sum(o: Record<string, unknown>, names: readonly string[]): number | null {
  let total: number | null = null;
  for (const n of names) {
    if (o[n] === undefined || o[n] === null) continue;
    const c = count(o[n]);
    if (c === null) return null;
    total = (total ?? 0) + c;
  }
  return total;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

const ANTHROPIC_INPUT = ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"] as const;

/** The usage a response's JSON values (its body, or each of its events) report under one `settle` form. */
class Usage {
  /** The final cost reported so far. */
  actual: number | null = null;
  /** A report seen that could not be read, when none could. */
  unreadable: string | null = null;
  /** Anthropic's counts so far: the input (with cache tokens) of `message_start`, the cumulative output. */
  #input: number | null = null;
  readonly #settle: Settle;
  /** A cheap test an event's data must pass before it is parsed: most events carry no usage (or `"usage":null`). */
  readonly mentions: RegExp;

  constructor(settle: Settle) {
    this.#settle = settle;
    const last = settle.from === "json" ? (settle.path[settle.path.length - 1] as string) : null;
    this.mentions = last === null ? /"usage"\s*:\s*\{/ : new RegExp(`"${last.replace(/[^\w]/g, "\\$&")}"\\s*:`);
  }

  /** Reads one JSON value: a whole body, or one event's data. */
  read(json: unknown): void {
    const s = this.#settle;
    if (s.from === "json") this.#take(at(json, s.path), s.field);
    else if (!isObject(json)) return;
    else if (s.from === "openai") this.#openai(json);
    else if (s.from === "anthropic") this.#anthropic(json);
  }

  /** Chat completions and JSON responses: `usage`; the responses API's stream: `response.usage`. */
  #openai(json: Record<string, unknown>): void {
    const usage = isObject(json.usage) ? json.usage : isObject(json.response) ? json.response.usage : null;
    if (!isObject(usage)) return;
    const total =
      // `total_tokens: null` beside the counts is no total: their sum is.
      usage.total_tokens !== undefined && usage.total_tokens !== null
        ? (count(usage.total_tokens) ?? usage.total_tokens)
        : (sum(usage, ["prompt_tokens", "completion_tokens"]) ?? sum(usage, ["input_tokens", "output_tokens"]));
    this.#take(total, "usage.total_tokens");
  }

  #anthropic(json: Record<string, unknown>): void {
    if (json.type === "message_start") {
      const usage = isObject(json.message) ? json.message.usage : null;
      if (isObject(usage)) this.#input = sum(usage, ANTHROPIC_INPUT);
      return;
    }
    // A `message_delta` event, or a JSON message: input (when given: cumulative) and output counts.
    if (!isObject(json.usage) || (json.type !== "message_delta" && json.type !== "message")) return;
    const usage = json.usage;
    const input = sum(usage, ANTHROPIC_INPUT) ?? this.#input;
    if (input !== null) this.#input = input;
    if (input === null) {
      this.unreadable ??= "usage: no input_tokens (and no message_start before it)";
      return;
    }
    const output = count(usage.output_tokens);
    this.#take(output === null ? (usage.output_tokens ?? null) : input + output, "usage.output_tokens");
  }

  #take(value: unknown, field: string): void {
    if (value === undefined) return;
    const c = count(value);
    if (c === null) this.unreadable ??= `${field}: ${JSON.stringify(value)} is not a whole number ≥ 0`;
    else this.actual = c;
  }

  report(): Report {
    if (this.actual !== null) return { actual: this.actual };
    if (this.unreadable !== null) return { none: "unreadable", detail: this.unreadable };
    return { none: "no_usage", detail: "the response reported no usage" };
  }
}

/** A JSON body, kept (up to {@link MAX_REPORT_BYTES}) until it ends. */
class JsonReader implements UsageReader {
  readonly #usage: Usage;
  readonly #chunks: Uint8Array[] = [];
  #length = 0;

  constructor(usage: Usage) {
    this.#usage = usage;
  }

  push(chunk: Uint8Array): void {
    this.#length += chunk.byteLength;
    if (this.#length <= MAX_REPORT_BYTES) this.#chunks.push(chunk.slice());
    else this.#chunks.length = 0;
  }

  reported(): number | null {
    return null;
  }

  end(): Report {
    if (this.#length > MAX_REPORT_BYTES) {
      return { none: "unreadable", detail: `a body over ${MAX_REPORT_BYTES} bytes is not read for its usage` };
    }
    const body = new Uint8Array(this.#length);
    let offset = 0;
    for (const c of this.#chunks) {
      body.set(c, offset);
      offset += c.byteLength;
    }
    try {
      this.#usage.read(JSON.parse(new TextDecoder().decode(body)));
    } catch {
      return { none: "unreadable", detail: "the body is not JSON" };
    }
    return this.#usage.report();
  }
}

/**
 * An SSE stream (WHATWG HTML, "Server-sent events": lines end in CRLF, LF or CR; `data:` lines joined by LF; a blank
 * line ends an event), each event's data read as JSON when it may hold a report. A line split across chunks, or a
 * character split across them, is joined first.
 */
class EventReader implements UsageReader {
  readonly #usage: Usage;
  readonly #decoder = new TextDecoder();
  /** The line read so far (no end of line yet). */
  #line = "";
  /** The event's data lines so far, joined by LF; null: none. */
  #data: string | null = null;
  /** A CR ended the last chunk: an LF starting the next one belongs to it. */
  #cr = false;

  constructor(usage: Usage) {
    this.#usage = usage;
  }

  push(chunk: Uint8Array): void {
    this.#text(this.#decoder.decode(chunk, { stream: true }));
  }

  reported(): number | null {
    return this.#usage.actual;
  }

  end(): Report {
    this.#text(this.#decoder.decode());
    // A last event without its blank line: read it too, if whole (its JSON parses).
    if (this.#line !== "") this.#field(this.#line);
    this.#dispatch();
    return this.#usage.report();
  }

  #text(text: string): void {
    let start = 0;
    if (this.#cr && text.startsWith("\n")) start = 1;
    this.#cr = false;
    for (let i = start; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      const line = this.#line + text.slice(start, i);
      this.#line = "";
      if (c === 13) {
        if (i + 1 === text.length) this.#cr = true;
        else if (text.charCodeAt(i + 1) === 10) i++;
      }
      start = i + 1;
      if (line === "") this.#dispatch();
      else this.#field(line);
    }
    if (start < text.length) this.#line += text.slice(start);
    // A line that never ends is not an event: drop what goes past the bound.
    if (this.#line.length > MAX_REPORT_BYTES) this.#line = "";
  }

  /** One line of an event: only `data` matters here. */
  #field(line: string): void {
    if (!line.startsWith("data")) return;
    const colon = line.indexOf(":");
    if (colon !== 4 && !(colon === -1 && line.length === 4)) return;
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    this.#data = this.#data === null ? value : `${this.#data}\n${value}`;
    if (this.#data.length > MAX_REPORT_BYTES) this.#data = "";
  }

  #dispatch(): void {
    const data = this.#data;
    this.#data = null;
    if (data === null || !this.#usage.mentions.test(data)) return;
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      return;
    }
    this.#usage.read(json);
  }
}
