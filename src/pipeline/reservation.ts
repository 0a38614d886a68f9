/**
 * @module A request's cost by the `costs` rules, read from the request where a rule says so (docs/llm.md): a settled
 * rule's reservation — a fixed number, a header, or a field of the JSON body plus a bound for the input. The body is
 * read from a copy (`request.clone()`), at most `reserve.max_body` bytes of it, so the request goes on with its body
 * intact. A reservation that cannot be read is a `LimiterError` `bad_reservation` (a `400` naming the field), thrown
 * before anything is counted.
 */

import { LimiterError } from "../base/errors.ts";
import { costRuleFor } from "../config/lookup.ts";
import type { LimiterConfig, Reserve } from "../config/types.ts";

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
  return readBody(request, reserve.maxBody, reserve.field).then((body) => reserveFromBody(reserve, body));
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
 * A reservation read from a request body (`null`: none): its JSON field at `reserve.path` plus `reserve.input` (the
 * body's length in bytes, or that number).
 */
export function reserveFromBody(reserve: Reserve & { from: "json" }, body: Uint8Array | null): number {
  const field = `request body ${reserve.field}`;
  const bytes = body?.byteLength ?? 0;
  const input = reserve.input === "bytes" ? bytes : reserve.input;
  if (bytes === 0) return fallback(reserve.default, field) + input;
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(body as Uint8Array));
  } catch {
    throw bad(`request body: not JSON, so ${reserve.field} cannot be read for the request's reservation; send JSON`);
  }
  const value = at(json, reserve.path);
  if (value === undefined || value === null) return fallback(reserve.default, field) + input;
  return whole(typeof value === "number" ? value : Number.NaN, field, JSON.stringify(value)) + input;
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
