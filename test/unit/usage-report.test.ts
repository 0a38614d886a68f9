/**
 * @module What a response reports it cost (src/pipeline/usage-report.ts): the OpenAI chat completions and responses
 * forms and Anthropic's messages, streamed (SSE) and as JSON, a header and a JSON field — each stream read whole, cut
 * at every byte into two chunks, and byte by byte, always to the same report; what a body cut short or left by its
 * client settles to (src/proxy/settle.ts, reportAt).
 */

import { describe, expect, it } from "vitest";
import type { Settle } from "../../src/config/types.ts";
import { MAX_REPORT_BYTES, type Report, usageReader } from "../../src/pipeline/usage-report.ts";
import { reportAt } from "../../src/proxy/settle.ts";
import { anthropicStream, openaiChatStream, openaiResponsesStream } from "../support/llm.ts";

const SSE = { "content-type": "text/event-stream; charset=utf-8" };
const JSON_TYPE = { "content-type": "application/json" };

const bytes = (text: string) => new TextEncoder().encode(text);

/** The report of `body` pushed as `chunks` (cut at these byte offsets). */
function read(settle: Settle, headers: Record<string, string>, body: Uint8Array, cuts: readonly number[] = []): Report {
  const reader = usageReader(settle, new Headers(headers));
  let from = 0;
  for (const cut of [...cuts, body.byteLength]) {
    reader.push(body.subarray(from, cut));
    from = cut;
  }
  return reader.end();
}

/** The report of `text` read whole, cut into two at every byte, and one byte at a time: all the same. */
function everyWay(settle: Settle, headers: Record<string, string>, text: string): Report {
  const body = bytes(text);
  const whole = read(settle, headers, body);
  for (let i = 0; i <= body.byteLength; i++) expect(read(settle, headers, body, [i]), `cut at ${i}`).toEqual(whole);
  const single = Array.from({ length: body.byteLength }, (_, i) => i);
  expect(read(settle, headers, body, single), "byte by byte").toEqual(whole);
  return whole;
}

describe("the usage of an OpenAI chat completions stream (stream_options.include_usage)", () => {
  const stream = openaiChatStream({ prompt: 9, words: ["Hé", "llo", " wörld"], usage: true });

  it("the final chunk's usage.total_tokens, at every chunk boundary", () => {
    expect(everyWay({ from: "openai" }, SSE, stream)).toEqual({ actual: 9 + 3 });
  });

  it("with CRLF or CR line ends alike", () => {
    expect(everyWay({ from: "openai" }, SSE, stream.replaceAll("\n", "\r\n"))).toEqual({ actual: 12 });
    expect(everyWay({ from: "openai" }, SSE, stream.replaceAll("\n", "\r"))).toEqual({ actual: 12 });
  });

  it("prompt_tokens + completion_tokens without total_tokens", () => {
    const text = 'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":6}}\n\ndata: [DONE]\n\n';
    expect(everyWay({ from: "openai" }, SSE, text)).toEqual({ actual: 10 });
  });

  it("total_tokens null beside the counts: their sum (chat's prompt and completion, the responses API's input and output)", () => {
    const chat = 'data: {"usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":null}}\n\ndata: [DONE]\n\n';
    expect(everyWay({ from: "openai" }, SSE, chat)).toEqual({ actual: 10 });
    const responses = '{"response":{"usage":{"input_tokens":7,"output_tokens":5,"total_tokens":null}}}';
    expect(read({ from: "openai" }, { "content-type": "application/json" }, bytes(responses))).toEqual({ actual: 12 });
  });

  it("no usage without include_usage: none reported, the reservation stands", () => {
    const text = openaiChatStream({ prompt: 9, words: ["a", "b"], usage: false });
    expect(everyWay({ from: "openai" }, SSE, text)).toEqual({
      none: "no_usage",
      detail: "the response reported no usage",
    });
  });

  it("reported() only once the usage chunk has passed", () => {
    const reader = usageReader({ from: "openai" }, new Headers(SSE));
    const [head, tail] = stream.split(
      'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"fake","choices":[],',
    );
    reader.push(bytes(head as string));
    expect(reader.reported()).toBeNull();
    reader.push(bytes(`data: {"choices":[],${tail}`));
    expect(reader.reported()).toBe(12);
  });

  it("a usage that is not a whole number is unreadable", () => {
    const text = 'data: {"choices":[],"usage":{"total_tokens":"12"}}\n\n';
    expect(everyWay({ from: "openai" }, SSE, text)).toEqual({
      none: "unreadable",
      detail: 'usage.total_tokens: "12" is not a whole number ≥ 0',
    });
    expect(read({ from: "openai" }, SSE, bytes('data: {"usage":{"total_tokens":-1}}\n\n'))).toMatchObject({
      none: "unreadable",
    });
    // A good report after a bad one wins.
    expect(read({ from: "openai" }, SSE, bytes(`${text}data: {"usage":{"total_tokens":3}}\n\n`))).toEqual({
      actual: 3,
    });
  });

  it("comments, other fields, multi-line data and a last event without its blank line", () => {
    const text =
      ': keep-alive\n\nevent: x\nid: 7\nretry: 100\ndata: {"choices":[],\ndata: "usage":{"total_tokens":5}}\ndata:[DONE]';
    // Two data lines joined by LF make one JSON value; the third makes it invalid — so read each alone:
    expect(
      read({ from: "openai" }, SSE, bytes(': c\n\ndata: {"choices":[],\ndata: "usage":{"total_tokens":5}}\n\n')),
    ).toEqual({
      actual: 5,
    });
    expect(read({ from: "openai" }, SSE, bytes('data:{"usage":{"total_tokens":6}}'))).toEqual({ actual: 6 });
    expect(read({ from: "openai" }, SSE, bytes(text))).toEqual({
      none: "no_usage",
      detail: "the response reported no usage",
    });
    // "datax:" is another field.
    expect(read({ from: "openai" }, SSE, bytes('datax: {"usage":{"total_tokens":6}}\n\n'))).toMatchObject({
      none: "no_usage",
    });
  });
});

describe("the usage of an OpenAI responses stream", () => {
  it("response.completed's response.usage.total_tokens, at every chunk boundary", () => {
    const text = openaiResponsesStream({ input: 36, words: ["One", " two"], status: "completed" });
    expect(everyWay({ from: "openai" }, SSE, text)).toEqual({ actual: 38 });
  });

  it("response.incomplete reports usage too", () => {
    const text = openaiResponsesStream({ input: 5, words: ["a", "b", "c"], status: "incomplete" });
    expect(everyWay({ from: "openai" }, SSE, text)).toEqual({ actual: 8 });
  });
});

describe("the usage of an Anthropic messages stream", () => {
  it("message_start's input (with cache tokens) plus message_delta's cumulative output_tokens", () => {
    const text = anthropicStream({ input: 25, cacheRead: 10, cacheCreation: 3, words: ["Hi", " there", "!"] });
    expect(everyWay({ from: "anthropic" }, SSE, text)).toEqual({ actual: 25 + 10 + 3 + 3 });
  });

  it("several message_delta events: the last one's cumulative count, not their sum", () => {
    const text = anthropicStream({ input: 10, words: ["a", "b"], deltas: [1, 2] });
    expect(everyWay({ from: "anthropic" }, SSE, text)).toEqual({ actual: 12 });
  });

  it("a message_delta with input counts: they replace message_start's", () => {
    const text = `${anthropicStream({ input: 10, words: ["a"], deltas: [] })}event: message_delta\ndata: {"type":"message_delta","delta":{},"usage":{"input_tokens":40,"output_tokens":5}}\n\n`;
    expect(everyWay({ from: "anthropic" }, SSE, text)).toEqual({ actual: 45 });
  });

  it("message_start alone reports nothing final", () => {
    const reader = usageReader({ from: "anthropic" }, new Headers(SSE));
    const text = anthropicStream({ input: 25, words: ["Hi"] });
    const start = text.indexOf("event: message_delta");
    reader.push(bytes(text.slice(0, start)));
    expect(reader.reported()).toBeNull();
    reader.push(bytes(text.slice(start)));
    expect(reader.reported()).toBe(26);
    expect(read({ from: "anthropic" }, SSE, bytes(text.slice(0, start)))).toMatchObject({ none: "no_usage" });
  });

  it("a message_delta without any input count is unreadable", () => {
    const text = 'data: {"type":"message_delta","delta":{},"usage":{"output_tokens":5}}\n\n';
    expect(read({ from: "anthropic" }, SSE, bytes(text))).toMatchObject({ none: "unreadable" });
  });
});

describe("the usage of a JSON body", () => {
  const body = (value: unknown) => JSON.stringify(value, null, 2);

  it("OpenAI chat completion and responses: usage.total_tokens", () => {
    const chat = body({
      object: "chat.completion",
      choices: [],
      usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
    });
    expect(everyWay({ from: "openai" }, JSON_TYPE, chat)).toEqual({ actual: 7 });
    const responses = body({ object: "response", usage: { input_tokens: 3, output_tokens: 5, total_tokens: 8 } });
    expect(everyWay({ from: "openai" }, JSON_TYPE, responses)).toEqual({ actual: 8 });
    expect(read({ from: "openai" }, {}, bytes(body({ usage: { input_tokens: 3, output_tokens: 5 } })))).toEqual({
      actual: 8,
    });
  });

  it("Anthropic message: input (with cache tokens) + output", () => {
    const msg = body({ type: "message", usage: { input_tokens: 10, cache_read_input_tokens: 5, output_tokens: 7 } });
    expect(everyWay({ from: "anthropic" }, JSON_TYPE, msg)).toEqual({ actual: 22 });
  });

  it("a JSON field by its dotted path, in a body or in each event of a stream (the last wins)", () => {
    const settle: Settle = { from: "json", field: "meta.cost", path: ["meta", "cost"] };
    expect(everyWay(settle, JSON_TYPE, body({ meta: { cost: 41 } }))).toEqual({ actual: 41 });
    expect(
      everyWay(settle, SSE, 'data: {"meta":{"cost":1}}\n\ndata: {"meta":{"cost":2}}\n\ndata: {"x":1}\n\n'),
    ).toEqual({
      actual: 2,
    });
    // Spaces around the colon, as a pretty-printing origin writes it.
    expect(everyWay(settle, SSE, 'data: {"meta": {"cost" : 3}}\n\n')).toEqual({ actual: 3 });
    expect(read(settle, JSON_TYPE, bytes(body({ meta: {} })))).toMatchObject({ none: "no_usage" });
    expect(read(settle, JSON_TYPE, bytes(body({ meta: { cost: 1.5 } })))).toEqual({
      none: "unreadable",
      detail: "meta.cost: 1.5 is not a whole number ≥ 0",
    });
  });

  it("not JSON, or larger than the bound: unreadable", () => {
    expect(read({ from: "openai" }, JSON_TYPE, bytes("<html>"))).toEqual({
      none: "unreadable",
      detail: "the body is not JSON",
    });
    const big = bytes(`{"usage":{"total_tokens":1},"pad":"${"x".repeat(MAX_REPORT_BYTES)}"}`);
    expect(read({ from: "openai" }, JSON_TYPE, big, [10, 1000])).toMatchObject({ none: "unreadable" });
    expect(read({ from: "openai" }, JSON_TYPE, new Uint8Array(0))).toMatchObject({ none: "unreadable" });
  });
});

describe("a cost in a response header", () => {
  const settle: Settle = { from: "header", header: "x-cost" };
  it("known before the body, whatever the body", () => {
    const reader = usageReader(settle, new Headers({ "x-cost": " 17 " }));
    expect(reader.reported()).toBe(17);
    reader.push(bytes("anything"));
    expect(reader.end()).toEqual({ actual: 17 });
  });
  it("missing or not a whole number: none", () => {
    expect(usageReader(settle, new Headers()).end()).toEqual({ none: "no_usage", detail: "no x-cost header" });
    expect(usageReader(settle, new Headers({ "x-cost": "1.5" })).end()).toEqual({
      none: "unreadable",
      detail: 'header x-cost: "1.5" is not a whole number',
    });
  });
});

describe("what a body settles to by how it ended (reportAt)", () => {
  const whole = (): Report => ({ actual: 9 });
  it("read to its end: the whole body's report", () => {
    expect(reportAt("complete", whole, null)).toEqual({ actual: 9 });
  });
  it("cut short or left by its client: the usage already reported, else none", () => {
    expect(reportAt("cut_short", whole, 4)).toEqual({ actual: 4 });
    expect(reportAt("client_left", whole, 0)).toEqual({ actual: 0 });
    expect(reportAt("cut_short", whole, null)).toMatchObject({ none: "cut_short" });
    expect(reportAt("client_left", whole, null)).toMatchObject({ none: "client_left" });
  });
});
