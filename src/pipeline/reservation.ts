/**
 * @module A request's cost by the `costs` rules, read from the request where a rule says so (docs/llm.md): a settled
 * rule's reservation — a fixed number, a header, or a field of the JSON body plus a bound for the input. The body is
 * read from a copy (`request.clone()`), at most `reserve.max_body` bytes of it, so the request goes on with its body
 * intact. A reservation that cannot be read is a `LimiterError` `bad_reservation` (a `400` naming the field), thrown
 * before anything is counted.
 */

import { LimiterError } from "../base/errors.ts";
import { costRuleFor } from "../config/lookup.ts";
import type { JsonField, LimiterConfig, Reserve } from "../config/types.ts";

/**
 * The units `request` is decided for: its first matching `costs` rule's cost, a settled rule's reservation read from
 * the request, else 1. Synchronous unless the request's body must be read.
 *
 * @throws LimiterError `bad_reservation` when a settled rule's reservation cannot be read from the request; whatever
 *   `path` throws (a malformed path), whether or not a rule needs it
 */
export function costOfRequest(config: LimiterConfig, request: Request, path: () => string): number | Promise<number> {
  // The path is normalised (and a malformed one refused) whether or not a rule reads it.
  const normal = path();
  if (config.costs.length === 0) return 1;
  const rule = costRuleFor(config, request.method, normal);
  if (rule === null) return 1;
  if (!rule.settled) return rule.cost ?? 1;
  const reserve = rule.settled.reserve;
  if (reserve.from === "fixed") return reserve.units;
  if (reserve.from === "header") return reserveFromHeader(reserve, request.headers.get(reserve.header));
  return readBody(request, reserve.maxBody, fieldsNamed(reserve)).then((body) => reserveFromBody(reserve, body));
}

/** A reservation read from a header's value (null: missing). */
export function reserveFromHeader(reserve: Reserve & { from: "header" }, value: string | null): number {
  const field = `header ${reserve.header}`;
  if (value === null || value.trim() === "") return fallback(reserve.default, field);
  const text = value.trim();
  const units = /^\d+$/.test(text) ? Number(text) : Number.NaN;
  return whole(units, field, JSON.stringify(value));
}

/**
 * A reservation read from a request body (`null`: none): the first of its JSON fields present (else the rule's
 * `default`), times the largest of its `times` fields present (else 1), plus `reserve.input` (the body's length in
 * bytes, or that number).
 *
 * @throws LimiterError `bad_reservation` for a body that is not JSON, a field that is not a whole number ≥ 1, none
 *   present and no default, or a `times` over the rule's `max_times`
 */
export function reserveFromBody(reserve: Reserve & { from: "json" }, body: Uint8Array | null): number {
  const bytes = body?.byteLength ?? 0;
  const input = reserve.input === "bytes" ? bytes : reserve.input;
  const named = `request body ${fieldsNamed(reserve)}`;
  if (bytes === 0) return fallback(reserve.default, named) + input;
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(body as Uint8Array));
  } catch {
    throw bad(
      `request body: not JSON, so ${fieldsNamed(reserve)} cannot be read for the request's reservation; send JSON`,
    );
  }
  const each = firstPresent(json, reserve.fields);
  const units = each === null ? fallback(reserve.default, named) : wholeAt(each.value, each.field.field);
  const total = units * timesOf(json, reserve) + input;
  // A field near the largest safe integer, times n, plus the input: a 400, never a count the object cannot keep.
  if (!Number.isSafeInteger(total)) {
    throw bad(`${named}: the request's reservation (${units} × n + input) is larger than any limit; ask for less`);
  }
  return total;
}

/** A JSON reservation's fields as its messages name them: `max_completion_tokens or max_tokens`. */
function fieldsNamed(reserve: Reserve & { from: "json" }): string {
  return reserve.fields.map((f) => f.field).join(" or ");
}

/** The largest of the rule's `times` fields present in `json` (1: none is), at most its `max_times`. */
function timesOf(json: unknown, reserve: Reserve & { from: "json" }): number {
  let times = 1;
  for (const f of reserve.times) {
    const value = at(json, f.path);
    if (value === undefined || value === null) continue;
    const n = wholeAt(value, f.field);
    if (n > reserve.maxTimes) {
      throw bad(
        `request body ${f.field}: at most ${reserve.maxTimes} here (each of the ${n} multiplies the request's reservation), got ${n}; ask for fewer`,
      );
    }
    times = Math.max(times, n);
  }
  return times;
}

/** The first of `fields` present (not null) in `json`, and its value; null when none is. */
function firstPresent(json: unknown, fields: readonly JsonField[]): { field: JsonField; value: unknown } | null {
  for (const field of fields) {
    const value = at(json, field.path);
    if (value !== undefined && value !== null) return { field, value };
  }
  return null;
}

/** A JSON value read as a reservation's number: a whole number ≥ 1, else a `400` naming the body's field. */
function wholeAt(value: unknown, field: string): number {
  return whole(typeof value === "number" ? value : Number.NaN, `request body ${field}`, JSON.stringify(value));
}

/** The value at a dotted path of parsed JSON; undefined where the path leads nowhere. */
export function at(json: unknown, path: readonly string[]): unknown {
  let value = json;
  for (const name of path) {
    if (typeof value !== "object" || value === null || !Object.hasOwn(value, name)) return undefined;
    value = (value as Record<string, unknown>)[name];
  }
  return value;
}

/**
 * At most `max` bytes of `request`'s body, read from a copy of it (the request keeps its own); null when it has none.
 *
 * @throws LimiterError `bad_reservation` when the body is longer than `max`
 */
export async function readBody(request: Request, max: number, field: string): Promise<Uint8Array | null> {
  const tooLarge = () =>
    bad(
      `request body: larger than the ${max} bytes read for the request's reservation (${field}); send a smaller body, or raise reserve.max_body`,
    );
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > max) throw tooLarge();
  if (request.body === null) return null;
  const reader = (request.clone().body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.byteLength;
    if (length > max) {
      // Not awaited: a branch of a tee settles its cancel only once the other branch (the request's own) is cancelled.
      reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  const body = new Uint8Array(length);
  let offset = 0;
  for (const c of chunks) {
    body.set(c, offset);
    offset += c.byteLength;
  }
  return body;
}

/** A reservation read as a number: a whole number ≥ 1, else a `400` naming `field`. */
function whole(units: number, field: string, got: string): number {
  if (!Number.isSafeInteger(units) || units < 1) {
    throw bad(`${field}: expected a whole number ≥ 1 for the request's reservation, got ${got}`);
  }
  return units;
}

/** The reservation of a request without the field: the rule's `default`, else a `400` naming the field. */
function fallback(units: number | null, field: string): number {
  if (units === null) throw bad(`${field}: missing, and this route has no default reservation; send it`);
  return units;
}

function bad(message: string): LimiterError {
  return new LimiterError("bad_reservation", message);
}
