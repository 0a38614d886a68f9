/**
 * @module Settled costs' settings and reservations (docs/llm.md): a `costs` rule's `reserve` and `settle` as parsed
 * (every error names its field, the JSON-string form gives the same), and a request's reservation read from its
 * header, its JSON body plus the input bound, or a fixed number — every unreadable one a `bad_reservation` naming the
 * field, and the request's own body left intact.
 */

import { describe, expect, it } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import { costFor, costRuleFor } from "../../src/config/lookup.ts";
import { parseConfig } from "../../src/config/parse.ts";
import { MAX_RESERVE_BODY } from "../../src/config/settled.ts";
import { type Config, ConfigError, DEFAULTS, type Reserve } from "../../src/config/types.ts";
import { httpErrorOf } from "../../src/pipeline/http.ts";
import { at, costOfRequest, readBody, reserveFromBody, reserveFromHeader } from "../../src/pipeline/reservation.ts";

const ORIGIN = "https://api.example.com";
const LIMITS = [{ limit: 2000, window: "10s" }];

function parse(costs: unknown[]): Config {
  return parseConfig({ ORIGIN, RATE_LIMIT: { limits: LIMITS, costs } });
}

function configError(costs: unknown[]): ConfigError {
  try {
    parse(costs);
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error("no ConfigError");
}

const CHAT = { method: "POST", path: "/v1/chat/completions" };

describe("a costs rule's reserve and settle", () => {
  it("parses each form of reserve and settle, with defaults", () => {
    const config = parse([
      { ...CHAT, reserve: { json: "max_tokens", input: "bytes" }, settle: "openai" },
      {
        method: "POST",
        path: "/v1/messages",
        reserve: { json: "max_tokens", input: 500, default: 4096 },
        settle: "anthropic",
      },
      {
        path: "/v1/responses",
        reserve: { json: "max.output_tokens", input: 0, max_body: 10 },
        settle: { json: "usage.total_tokens" },
      },
      { path: "/v1/header", reserve: { header: "X-Max-Cost", default: 7 }, settle: { header: "X-Cost" } },
      { path: "/v1/fixed", reserve: 4000, settle: { header: "x-cost" } },
      { path: "/v1/plain", cost: 3 },
    ]);
    expect(config.costs).toEqual([
      {
        method: "POST",
        pathPrefix: "/v1/chat/completions",
        cost: null,
        settled: {
          reserve: {
            from: "json",
            fields: [{ field: "max_tokens", path: ["max_tokens"] }],
            times: [],
            maxTimes: DEFAULTS.reserveMaxTimes,
            input: "bytes",
            default: null,
            maxBody: DEFAULTS.reserveMaxBody,
          },
          settle: { from: "openai" },
        },
      },
      {
        method: "POST",
        pathPrefix: "/v1/messages",
        cost: 4096,
        settled: {
          reserve: {
            from: "json",
            fields: [{ field: "max_tokens", path: ["max_tokens"] }],
            times: [],
            maxTimes: DEFAULTS.reserveMaxTimes,
            input: 500,
            default: 4096,
            maxBody: DEFAULTS.reserveMaxBody,
          },
          settle: { from: "anthropic" },
        },
      },
      {
        method: null,
        pathPrefix: "/v1/responses",
        cost: null,
        settled: {
          reserve: {
            from: "json",
            fields: [{ field: "max.output_tokens", path: ["max", "output_tokens"] }],
            times: [],
            maxTimes: DEFAULTS.reserveMaxTimes,
            input: 0,
            default: null,
            maxBody: 10,
          },
          settle: { from: "json", field: "usage.total_tokens", path: ["usage", "total_tokens"] },
        },
      },
      {
        method: null,
        pathPrefix: "/v1/header",
        cost: 7,
        settled: {
          reserve: { from: "header", header: "x-max-cost", default: 7 },
          settle: { from: "header", header: "x-cost" },
        },
      },
      {
        method: null,
        pathPrefix: "/v1/fixed",
        cost: 4000,
        settled: { reserve: { from: "fixed", units: 4000 }, settle: { from: "header", header: "x-cost" } },
      },
      { method: null, pathPrefix: "/v1/plain", cost: 3 },
    ]);
    expect(DEFAULTS.reserveMaxBody).toBe(1_048_576);
  });

  it("matches settled rules like any rule, first match winning", () => {
    const config = parse([
      { ...CHAT, reserve: 100, settle: "openai" },
      { path: "/v1", cost: 2 },
    ]);
    expect(costRuleFor(config, "POST", "/v1/chat/completions")?.settled?.reserve).toEqual({
      from: "fixed",
      units: 100,
    });
    expect(costRuleFor(config, "GET", "/v1/chat/completions")?.cost).toBe(2);
    expect(costRuleFor(config, "GET", "/other")).toBeNull();
    // Decided without the request: the fixed reservation.
    expect(costFor(config, "POST", "/v1/chat/completions")).toBe(100);
  });

  it("a plain cost is still a whole number ≥ 0, its error saying so", () => {
    expect(configError([{ path: "/v1", cost: -1 }]).message).toBe(
      "RATE_LIMIT.costs[0].cost: expected a whole number ≥ 0 (0 means not limited), got -1",
    );
  });

  it("a reservation only the request can give cannot be charged without it", () => {
    const anyMethod = parse([{ path: "/v1", reserve: { json: "m", input: 0 }, settle: "openai" }]);
    expect(() => costFor(anyMethod, "PUT", "/v1/x")).toThrow(
      'cost: the costs rule for any method "/v1" reserves from the request; decide the request itself, or give a cost',
    );
    const config = parse([{ ...CHAT, reserve: { header: "x-max" }, settle: "openai" }]);
    expect(() => costFor(config, "POST", "/v1/chat/completions")).toThrow(
      /cost: the costs rule for POST "\/v1\/chat\/completions" reserves from the request/,
    );
  });

  const BAD: { what: string; rule: Record<string, unknown>; field: string; says: string }[] = [
    {
      what: "cost beside reserve",
      rule: { ...CHAT, cost: 1, reserve: 5, settle: "openai" },
      field: "costs[0].cost",
      says: "has no cost",
    },
    {
      what: "settle without reserve",
      rule: { ...CHAT, settle: "openai" },
      field: "costs[0].reserve",
      says: "required with settle",
    },
    {
      what: "reserve without settle",
      rule: { ...CHAT, reserve: 5 },
      field: "costs[0].settle",
      says: "required with reserve",
    },
    { what: "reserve 0", rule: { ...CHAT, reserve: 0, settle: "openai" }, field: "costs[0].reserve", says: "got 0" },
    {
      what: "reserve 1.5",
      rule: { ...CHAT, reserve: 1.5, settle: "openai" },
      field: "costs[0].reserve",
      says: "got 1.5",
    },
    {
      what: "reserve a string",
      rule: { ...CHAT, reserve: "max_tokens", settle: "openai" },
      field: "costs[0].reserve",
      says: 'got "max_tokens"',
    },
    {
      what: "reserve null",
      rule: { ...CHAT, reserve: null, settle: "openai" },
      field: "costs[0].reserve",
      says: 'expected a positive whole number, { json = "max_tokens", input = "bytes" } or { header = "…" }, got null',
    },
    {
      what: "reserve an array",
      rule: { ...CHAT, reserve: [1], settle: "openai" },
      field: "costs[0].reserve",
      says: "expected a positive whole number",
    },
    {
      what: "reserve neither json nor header",
      rule: { ...CHAT, reserve: { input: "bytes" }, settle: "openai" },
      field: "costs[0].reserve",
      says: "give one of json",
    },
    {
      what: "reserve both json and header",
      rule: { ...CHAT, reserve: { json: "a", header: "b", input: 0 }, settle: "openai" },
      field: "costs[0].reserve",
      says: "give one of json",
    },
    {
      what: "reserve.json empty",
      rule: { ...CHAT, reserve: { json: "", input: 0 }, settle: "openai" },
      field: "costs[0].reserve.json",
      says: "non-empty string",
    },
    {
      what: "reserve.json a dotted path with an empty name",
      rule: { ...CHAT, reserve: { json: "a..b", input: 0 }, settle: "openai" },
      field: "costs[0].reserve.json",
      says: '"a..b"',
    },
    {
      what: "reserve.input missing",
      rule: { ...CHAT, reserve: { json: "max_tokens" }, settle: "openai" },
      field: "costs[0].reserve.input",
      says: "required with json",
    },
    {
      what: "reserve.input a word",
      rule: { ...CHAT, reserve: { json: "max_tokens", input: "chars" }, settle: "openai" },
      field: "costs[0].reserve.input",
      says: 'expected "bytes" or a whole number ≥ 0, got "chars"',
    },
    {
      what: "reserve.input negative",
      rule: { ...CHAT, reserve: { json: "max_tokens", input: -1 }, settle: "openai" },
      field: "costs[0].reserve.input",
      says: 'expected "bytes" or a whole number ≥ 0, got -1',
    },
    {
      what: "reserve.default 0",
      rule: { ...CHAT, reserve: { json: "m", input: 0, default: 0 }, settle: "openai" },
      field: "costs[0].reserve.default",
      says: "got 0",
    },
    {
      what: "reserve.max_body too large",
      rule: { ...CHAT, reserve: { json: "m", input: 0, max_body: MAX_RESERVE_BODY + 1 }, settle: "openai" },
      field: "costs[0].reserve.max_body",
      says: `expected a number of bytes from 1 to ${MAX_RESERVE_BODY} (32 MiB), got ${MAX_RESERVE_BODY + 1}`,
    },
    {
      what: "reserve.max_body 0",
      rule: { ...CHAT, reserve: { json: "m", input: 0, max_body: 0 }, settle: "openai" },
      field: "costs[0].reserve.max_body",
      says: "got 0",
    },
    {
      what: "reserve unknown field",
      rule: { ...CHAT, reserve: { json: "m", input: 0, maximum: 3 }, settle: "openai" },
      field: "costs[0].reserve.maximum",
      says: "expected one of json, times, max_times, input, default, max_body",
    },
    {
      what: "reserve.input with a header",
      rule: { ...CHAT, reserve: { header: "x-max", input: 0 }, settle: "openai" },
      field: "costs[0].reserve.input",
      says: "expected one of header, default",
    },
    {
      what: "reserve.header not a name",
      rule: { ...CHAT, reserve: { header: "x max" }, settle: "openai" },
      field: "costs[0].reserve.header",
      says: '"x max"',
    },
    {
      what: "settle unknown name",
      rule: { ...CHAT, reserve: 5, settle: "gemini" },
      field: "costs[0].settle",
      says: 'expected "openai", "anthropic", { header = "…" } or { json = "…" }, got "gemini"',
    },
    { what: "settle a number", rule: { ...CHAT, reserve: 5, settle: 3 }, field: "costs[0].settle", says: "got 3" },
    {
      what: "settle neither",
      rule: { ...CHAT, reserve: 5, settle: {} },
      field: "costs[0].settle",
      says: "give one of json",
    },
    {
      what: "settle unknown field",
      rule: { ...CHAT, reserve: 5, settle: { jsonpath: "a" } },
      field: "costs[0].settle.jsonpath",
      says: "expected one of header, json",
    },
    {
      what: "settle.header not a name",
      rule: { ...CHAT, reserve: 5, settle: { header: "a:b" } },
      field: "costs[0].settle.header",
      says: '"a:b"',
    },
    {
      what: "settle.json ends in a dot",
      rule: { ...CHAT, reserve: 5, settle: { json: "usage." } },
      field: "costs[0].settle.json",
      says: '"usage."',
    },
    {
      what: "reserve.json an empty list",
      rule: { ...CHAT, reserve: { json: [], input: 0 }, settle: "openai" },
      field: "costs[0].reserve.json",
      says: "a list of at least one",
    },
    {
      what: "reserve.json listing a field twice",
      rule: { ...CHAT, reserve: { json: ["max_tokens", "max_tokens"], input: 0 }, settle: "openai" },
      field: "costs[0].reserve.json",
      says: '"max_tokens" is listed twice',
    },
    {
      what: "reserve.json listing a bad path",
      rule: { ...CHAT, reserve: { json: ["max_tokens", "a..b"], input: 0 }, settle: "openai" },
      field: "costs[0].reserve.json[1]",
      says: '"a..b"',
    },
    {
      what: "reserve.times not a field",
      rule: { ...CHAT, reserve: { json: "max_tokens", times: 2, input: 0 }, settle: "openai" },
      field: "costs[0].reserve.times",
      says: "got 2",
    },
    {
      what: "reserve.max_times without times",
      rule: { ...CHAT, reserve: { json: "max_tokens", max_times: 4, input: 0 }, settle: "openai" },
      field: "costs[0].reserve.max_times",
      says: "only with times",
    },
    {
      what: "reserve.max_times 0",
      rule: { ...CHAT, reserve: { json: "max_tokens", times: "n", max_times: 0, input: 0 }, settle: "openai" },
      field: "costs[0].reserve.max_times",
      says: "got 0",
    },
    {
      what: "unknown rule field",
      rule: { ...CHAT, reserve: 5, settle: "openai", reservation: 3 },
      field: "costs[0].reservation",
      says: "expected one of method, path, cost, reserve, settle",
    },
  ];

  it.each(BAD)("$what → $field", ({ rule, field, says }) => {
    const e = configError([rule]);
    expect(e.message.startsWith(`RATE_LIMIT.${field}: `), e.message).toBe(true);
    expect(e.message).toContain(says);
    // The JSON-string form (dashboard and --var) gives the same error.
    const fromString = (() => {
      try {
        parseConfig({ ORIGIN, RATE_LIMIT: JSON.stringify({ limits: LIMITS, costs: [rule] }) });
      } catch (x) {
        return (x as Error).message;
      }
      return "";
    })();
    expect(fromString).toBe(e.message);
  });
});

const json = (max: Partial<Reserve & { from: "json" }> = {}): Reserve & { from: "json" } => ({
  from: "json",
  fields: [{ field: "max_tokens", path: ["max_tokens"] }],
  times: [],
  maxTimes: 128,
  input: "bytes",
  default: null,
  maxBody: 1000,
  ...max,
});

const bytes = (value: unknown) => new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value));

/** The LimiterError `f` throws: its code must be bad_reservation, a 400. */
function badReservation(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(LimiterError);
    expect((e as LimiterError).code).toBe("bad_reservation");
    expect(httpErrorOf(e as LimiterError).status).toBe(400);
    return (e as Error).message;
  }
  throw new Error("nothing thrown");
}

describe("a reservation read from the request", () => {
  it("a JSON field plus the body's length in bytes, or plus a number", () => {
    const body = bytes({ model: "m", max_tokens: 300, messages: [{ role: "user", content: "héllo" }] });
    expect(reserveFromBody(json(), body)).toBe(300 + body.byteLength);
    expect(reserveFromBody(json({ input: 0 }), body)).toBe(300);
    expect(reserveFromBody(json({ input: 1000 }), body)).toBe(1300);
    // A dotted path.
    const nested = bytes({ generation: { max: 42 } });
    expect(
      reserveFromBody(json({ fields: [{ field: "generation.max", path: ["generation", "max"] }], input: 0 }), nested),
    ).toBe(42);
  });

  it("a missing field, body or null takes the default (plus the input), else a 400 naming the field", () => {
    const body = bytes({ model: "m" });
    expect(reserveFromBody(json({ default: 1000 }), body)).toBe(1000 + body.byteLength);
    const nothing = bytes({ max_tokens: null });
    expect(reserveFromBody(json({ default: 1000 }), nothing)).toBe(1000 + nothing.byteLength);
    expect(reserveFromBody(json({ default: 50 }), null)).toBe(50);
    expect(reserveFromBody(json({ default: 50 }), new Uint8Array(0))).toBe(50);
    expect(badReservation(() => reserveFromBody(json(), body))).toBe(
      "request body max_tokens: missing, and this route has no default reservation; send it",
    );
    expect(badReservation(() => reserveFromBody(json(), null))).toContain("request body max_tokens: missing");
    // A path through something that is not an object leads nowhere: missing.
    expect(
      badReservation(() => reserveFromBody(json({ fields: [{ path: ["a", "b"], field: "a.b" }] }), bytes({ a: 5 }))),
    ).toContain("request body a.b: missing");
  });

  it.each([
    ["a fraction", 1.5, "1.5"],
    ["zero", 0, "0"],
    ["negative", -3, "-3"],
    ["a string", "300", '"300"'],
    ["too large", 2 ** 53, String(2 ** 53)],
    ["an object", { n: 1 }, '{"n":1}'],
  ])("a field that is %s: a 400 naming it and quoting it", (_what, value, quoted) => {
    expect(badReservation(() => reserveFromBody(json({ default: 10 }), bytes({ max_tokens: value })))).toBe(
      `request body max_tokens: expected a whole number ≥ 1 for the request's reservation, got ${quoted}`,
    );
  });

  it("fields listed: the first present (not null) is read, the rest ignored; none: the default", () => {
    const either = json({
      fields: [
        { field: "max_completion_tokens", path: ["max_completion_tokens"] },
        { field: "max_tokens", path: ["max_tokens"] },
      ],
      input: 0,
    });
    expect(reserveFromBody(either, bytes({ max_completion_tokens: 300, max_tokens: 50 }))).toBe(300);
    expect(reserveFromBody(either, bytes({ max_tokens: 50 }))).toBe(50);
    expect(reserveFromBody(either, bytes({ max_completion_tokens: null, max_tokens: 50 }))).toBe(50);
    // The first present is read even when it is bad: a later one does not stand in for it.
    expect(badReservation(() => reserveFromBody(either, bytes({ max_completion_tokens: "x", max_tokens: 50 })))).toBe(
      `request body max_completion_tokens: expected a whole number ≥ 1 for the request's reservation, got "x"`,
    );
    expect(badReservation(() => reserveFromBody(either, bytes({ model: "m" })))).toBe(
      "request body max_completion_tokens or max_tokens: missing, and this route has no default reservation; send it",
    );
    expect(reserveFromBody({ ...either, default: 700 }, bytes({ model: "m" }))).toBe(700);
    expect(badReservation(() => reserveFromBody(either, bytes("[")))).toBe(
      "request body: not JSON, so max_completion_tokens or max_tokens cannot be read for the request's reservation; send JSON",
    );
  });

  it("times: the field (or default) times the largest times field present, then the input; over max_times a 400", () => {
    const n = json({ times: [{ field: "n", path: ["n"] }], maxTimes: 8, default: 100 });
    const body = bytes({ max_tokens: 500, n: 8 });
    expect(reserveFromBody(n, body)).toBe(500 * 8 + body.byteLength);
    const one = bytes({ max_tokens: 500 });
    expect(reserveFromBody(n, one)).toBe(500 + one.byteLength);
    const nullN = bytes({ max_tokens: 500, n: null });
    expect(reserveFromBody(n, nullN)).toBe(500 + nullN.byteLength);
    const byDefault = bytes({ n: 3 });
    expect(reserveFromBody(n, byDefault)).toBe(300 + byDefault.byteLength);
    expect(badReservation(() => reserveFromBody(n, bytes({ max_tokens: 500, n: 9 })))).toBe(
      "request body n: at most 8 here (each of the 9 multiplies the request's reservation), got 9; ask for fewer",
    );
    expect(badReservation(() => reserveFromBody(n, bytes({ max_tokens: 500, n: 0 })))).toBe(
      "request body n: expected a whole number ≥ 1 for the request's reservation, got 0",
    );
    expect(badReservation(() => reserveFromBody(n, bytes({ max_tokens: 500, n: 2.5 })))).toContain("got 2.5");
    // Several: the largest present (the legacy completions' best_of, which is at least n and is what is charged).
    const best = json({
      times: [
        { field: "n", path: ["n"] },
        { field: "best_of", path: ["best_of"] },
      ],
      maxTimes: 20,
      input: 0,
    });
    expect(reserveFromBody(best, bytes({ max_tokens: 10, n: 2, best_of: 5 }))).toBe(50);
    expect(reserveFromBody(best, bytes({ max_tokens: 10, n: 4 }))).toBe(40);
    expect(reserveFromBody(best, bytes({ max_tokens: 10, best_of: 21 - 1 }))).toBe(200);
    expect(badReservation(() => reserveFromBody(best, bytes({ max_tokens: 10, n: 1, best_of: 21 })))).toContain(
      "request body best_of: at most 20 here",
    );
  });

  it("a reservation past the largest safe integer (a huge field times n): a 400, never a count the object cannot keep", () => {
    const n = json({ times: [{ field: "n", path: ["n"] }], maxTimes: 128, input: 0 });
    expect(badReservation(() => reserveFromBody(n, bytes({ max_tokens: 2 ** 50, n: 128 })))).toBe(
      "request body max_tokens: the request's reservation (1125899906842624 × n + input) is larger than any limit; ask for less",
    );
    expect(reserveFromBody(n, bytes({ max_tokens: 2 ** 45, n: 128 }))).toBe(2 ** 52);
  });

  it("a body that is not JSON, or not UTF-8: a 400 saying so", () => {
    expect(badReservation(() => reserveFromBody(json({ default: 10 }), bytes("max_tokens=5")))).toContain(
      "request body: not JSON, so max_tokens cannot be read",
    );
    expect(badReservation(() => reserveFromBody(json({ default: 10 }), new Uint8Array([0x7b, 0xff, 0x7d])))).toContain(
      "not JSON",
    );
  });

  it("a header: a whole number ≥ 1, else its default, else a 400 naming it", () => {
    const header = (d: number | null = null): Reserve & { from: "header" } => ({
      from: "header",
      header: "x-max",
      default: d,
    });
    expect(reserveFromHeader(header(), "250")).toBe(250);
    expect(reserveFromHeader(header(), " 250 ")).toBe(250);
    expect(reserveFromHeader(header(9), null)).toBe(9);
    expect(reserveFromHeader(header(9), "")).toBe(9);
    expect(badReservation(() => reserveFromHeader(header(), null))).toBe(
      "header x-max: missing, and this route has no default reservation; send it",
    );
    for (const bad of ["0", "-1", "1.5", "1e3", "abc", "12 34", "99999999999999999999"]) {
      expect(badReservation(() => reserveFromHeader(header(9), bad))).toBe(
        `header x-max: expected a whole number ≥ 1 for the request's reservation, got ${JSON.stringify(bad)}`,
      );
    }
  });

  it("at(): own fields only, array indexes by number", () => {
    expect(at({ a: { b: [1, { c: 3 }] } }, ["a", "b", "1", "c"])).toBe(3);
    expect(at({ a: 1 }, ["toString"])).toBeUndefined();
    expect(at(null, ["a"])).toBeUndefined();
    expect(at({ a: 1 }, [])).toEqual({ a: 1 });
  });
});

describe("the request's body read for its reservation", () => {
  const post = (body: string | ReadableStream<Uint8Array> | null, headers: Record<string, string> = {}) =>
    new Request("https://limiter.example/v1/chat/completions", {
      method: "POST",
      body,
      headers,
      duplex: "half",
    } as RequestInit);

  it("reads it from a copy: the request keeps its body", async () => {
    const request = post(JSON.stringify({ max_tokens: 5 }));
    const body = await readBody(request, 100, "max_tokens");
    expect(new TextDecoder().decode(body as Uint8Array)).toBe('{"max_tokens":5}');
    expect(await request.text()).toBe('{"max_tokens":5}');
  });

  it("a streamed body of many chunks, read to its end", async () => {
    const parts = ['{"max_tokens":', "12", ',"x":"', "é".repeat(10), '"}'];
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (const p of parts) c.enqueue(new TextEncoder().encode(p));
        c.close();
      },
    });
    const request = post(stream);
    const body = await readBody(request, 1000, "max_tokens");
    expect(reserveFromBody(json(), body)).toBe(12 + parts.join("").length + 10);
    expect(await request.text()).toBe(parts.join(""));
  });

  it("a body longer than the bound: a 400, declared or streamed", async () => {
    await expect(readBody(post("x".repeat(101)), 100, "max_tokens")).rejects.toThrow(
      "request body: larger than the 100 bytes read for the request's reservation (max_tokens)",
    );
    const endless = new ReadableStream<Uint8Array>({
      pull(c) {
        c.enqueue(new Uint8Array(64));
      },
    });
    await expect(readBody(post(endless), 100, "max_tokens")).rejects.toMatchObject({ code: "bad_reservation" });
    // Exactly the bound is read.
    expect((await readBody(post("x".repeat(100)), 100, "m"))?.byteLength).toBe(100);
  });

  it("none: null", async () => {
    expect(await readBody(new Request("https://limiter.example/", { method: "POST" }), 100, "m")).toBeNull();
  });

  it("costOfRequest: 1 without rules or a match, a rule's cost, a settled rule's reservation", async () => {
    const config = parse([
      { ...CHAT, reserve: { json: "max_tokens", input: "bytes" }, settle: "openai" },
      { method: "POST", path: "/v1/h", reserve: { header: "x-max" }, settle: "openai" },
      { method: "POST", path: "/v1/f", reserve: 77, settle: "openai" },
      { path: "/v1/c", cost: 4 },
    ]);
    const to = (path: string, body: string | null, headers: Record<string, string> = {}) =>
      costOfRequest(
        config,
        new Request(`https://limiter.example${path}`, { method: "POST", body, headers }),
        () => path,
      );
    expect(to("/other", null)).toBe(1);
    expect(to("/v1/c", null)).toBe(4);
    expect(to("/v1/f", null)).toBe(77);
    expect(to("/v1/h", null, { "x-max": "31" })).toBe(31);
    const body = JSON.stringify({ max_tokens: 10 });
    expect(await to("/v1/chat/completions", body)).toBe(10 + body.length);
    expect(costOfRequest(parse([]), new Request("https://limiter.example/"), () => "/")).toBe(1);
    // The path is read (and a malformed one refused) whether or not a rule needs it.
    const malformed = () => {
      throw new LimiterError("malformed_path", "bad path");
    };
    expect(() => costOfRequest(parse([]), new Request("https://limiter.example/"), malformed)).toThrow("bad path");
  });
});
