/**
 * @module Parses a `costs` rule's `reserve` and `settle` (docs/llm.md): a cost known only after the response. The
 * request is granted for its reservation — a fixed number, a header, or a JSON field of its body plus a bound for its
 * input — and settled to what the response reports: OpenAI's or Anthropic's usage, a header, or a JSON field.
 */

import { describe } from "../core/duration.ts";
import { nonEmptyString, type Obj, object, oneOf, POSITIVE, unknownFields, wholeNumber } from "./fields.ts";
import { ConfigError, DEFAULTS, type JsonField, type Reserve, type Settle, type SettledCost } from "./types.ts";

/** The most a reservation may read of a request body (`reserve.max_body`): 32 MiB. */
export const MAX_RESERVE_BODY = 33_554_432;

/** An HTTP field name (RFC 9110 §5.1: a token). */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** A dotted path into JSON: names (or array indexes) joined by `.`, none empty. */
const DOTTED = /^[^.\s]+(\.[^.\s]+)*$/;

/** The forms `settle` takes by name. */
const NAMED = ["openai", "anthropic"] as const;

/**
 * A rule's `reserve` and `settle`, both required once either is given, and what a request decided without being read
 * is charged: the fixed reservation, else the `default`, else null.
 */
export function parseSettled(c: Obj, field: string): { cost: number | null; settled: SettledCost } {
  if (c.cost !== undefined) {
    throw new ConfigError(
      `${field}.cost: a rule with reserve and settle has no cost (it is reserved from the request and settled from the response); remove cost`,
    );
  }
  if (c.reserve === undefined) {
    throw new ConfigError(
      `${field}.reserve: required with settle (the most a request may cost: a number, { json = "max_tokens", input = "bytes" } or { header = "…" })`,
    );
  }
  if (c.settle === undefined) {
    throw new ConfigError(
      `${field}.settle: required with reserve ("openai", "anthropic", { header = "…" } or { json = "usage.total_tokens" })`,
    );
  }
  const reserve = parseReserve(c.reserve, `${field}.reserve`);
  const settle = parseSettle(c.settle, `${field}.settle`);
  const cost = reserve.from === "fixed" ? reserve.units : reserve.default;
  return { cost, settled: { reserve, settle } };
}

/**
 * `reserve`: a positive whole number, `{ header, default? }` or `{ json, times?, max_times?, input, default?,
 * max_body? }` (`json` and `times` a field or a list of fields).
 */
export function parseReserve(value: unknown, field: string): Reserve {
  if (typeof value === "number") return { from: "fixed", units: wholeNumber(value, field, POSITIVE) };
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ConfigError(
      `${field}: expected a positive whole number, { json = "max_tokens", input = "bytes" } or { header = "…" }, got ${describe(value)}`,
    );
  }
  const r = value as Obj;
  if ((r.json === undefined) === (r.header === undefined)) {
    throw new ConfigError(
      `${field}: give one of json (a field of the request's JSON body) or header (a request header)`,
    );
  }
  const fallback = r.default === undefined ? null : wholeNumber(r.default, `${field}.default`, POSITIVE);
  if (r.header !== undefined) {
    unknownFields(r, ["header", "default"], field);
    return { from: "header", header: headerName(r.header, `${field}.header`), default: fallback };
  }
  unknownFields(r, ["json", "times", "max_times", "input", "default", "max_body"], field);
  const fields = dottedList(r.json, `${field}.json`);
  const times = r.times === undefined ? [] : dottedList(r.times, `${field}.times`);
  if (r.max_times !== undefined && times.length === 0) {
    throw new ConfigError(`${field}.max_times: only with times (the field that multiplies the reservation, "n")`);
  }
  const maxTimes = wholeNumber(r.max_times, `${field}.max_times`, {
    ...POSITIVE,
    fallback: DEFAULTS.reserveMaxTimes,
  });
  if (r.input === undefined) {
    throw new ConfigError(
      `${field}.input: required with json: what the request's input may add, "bytes" (the body's length in bytes) or a whole number (0 when the field bounds the whole cost)`,
    );
  }
  const input =
    typeof r.input === "number"
      ? wholeNumber(r.input, `${field}.input`, { min: 0, expected: '"bytes" or a whole number ≥ 0' })
      : oneOf(r.input, `${field}.input`, { choices: ["bytes"] as const, expected: '"bytes" or a whole number ≥ 0' });
  const maxBody = wholeNumber(r.max_body, `${field}.max_body`, {
    min: 1,
    max: MAX_RESERVE_BODY,
    expected: `a number of bytes from 1 to ${MAX_RESERVE_BODY} (32 MiB)`,
    fallback: DEFAULTS.reserveMaxBody,
  });
  return { from: "json", fields, times, maxTimes, input, default: fallback, maxBody };
}

/** `settle`: `"openai"`, `"anthropic"`, `{ header }` or `{ json }`. */
export function parseSettle(value: unknown, field: string): Settle {
  if (typeof value === "string") {
    return {
      from: oneOf(value, field, {
        choices: NAMED,
        expected: '"openai", "anthropic", { header = "…" } or { json = "…" }',
      }),
    };
  }
  const s = object(value, field);
  unknownFields(s, ["header", "json"], field);
  if ((s.json === undefined) === (s.header === undefined)) {
    throw new ConfigError(`${field}: give one of json (a field of the response's JSON) or header (a response header)`);
  }
  if (s.header !== undefined) return { from: "header", header: headerName(s.header, `${field}.header`) };
  return { from: "json", ...dotted(s.json, `${field}.json`) };
}

/** A header's name, lower-cased. */
function headerName(value: unknown, field: string): string {
  const name = nonEmptyString(value, field);
  if (!TOKEN.test(name))
    throw new ConfigError(`${field}: expected a header name such as "x-max-cost", got ${JSON.stringify(name)}`);
  return name.toLowerCase();
}

/** One dotted path, or a list of them (`["max_completion_tokens", "max_tokens"]`), in order. */
function dottedList(value: unknown, field: string): JsonField[] {
  if (!Array.isArray(value)) return [dotted(value, field)];
  if (value.length === 0) throw new ConfigError(`${field}: expected a field name, or a list of at least one`);
  const list = Array.from(value, (v, i) => dotted(v, `${field}[${i}]`));
  const twice = list.find((f, i) => list.findIndex((g) => g.field === f.field) !== i);
  if (twice) throw new ConfigError(`${field}: ${JSON.stringify(twice.field)} is listed twice`);
  return list;
}

/** A dotted path into JSON (`"usage.total_tokens"`), as written and split. */
function dotted(value: unknown, field: string): JsonField {
  const name = nonEmptyString(value, field);
  if (!DOTTED.test(name)) {
    throw new ConfigError(
      `${field}: expected a field name or a dotted path such as "usage.total_tokens", got ${JSON.stringify(name)}`,
    );
  }
  return { field: name, path: name.split(".") };
}
