/**
 * @module What an admin call asks: its JSON body (read up to {@link MAX_BODY_BYTES}), its fields checked (unknown
 * ones refused), times in it, and whose budget it is about — each mistake a `400` (or `422`) naming the field.
 */

import { clientOf } from "../../base/address.ts";
import { LimiterError } from "../../base/errors.ts";
import { checkAccount } from "../../config/accounts.ts";
import type { AddressBudget, Config, Plan } from "../../config/types.ts";
import { describe, parseDuration } from "../../core/duration.ts";
import { MAX_TIME_MS } from "../../object/index.ts";
import { HttpError } from "../../pipeline/http.ts";
import { checkKey, type Identity, identify, objectName } from "../../pipeline/key.ts";
import { iso } from "./status.ts";

/** The largest request body the admin API reads (bytes); larger ones get `413`. */
export const MAX_BODY_BYTES = 8192;

/** The JSON object in the body, read up to {@link MAX_BODY_BYTES}. */
export async function readBody(request: Request): Promise<Record<string, unknown>> {
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (request.body) {
    const reader = request.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > MAX_BODY_BYTES) {
        await reader.cancel();
        throw tooLarge();
      }
      chunks.push(value);
    }
  }
  if (size === 0) throw bad('body: expected a JSON object such as {"key": "live_abc"}, got nothing');
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes));
  } catch (e) {
    throw bad(`body: not valid JSON (${(e as Error).message.split("\n")[0]})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw bad(`body: expected a JSON object, got ${describe(value)}`);
  }
  return value as Record<string, unknown>;
}

export function unknownFields(body: Record<string, unknown>, known: readonly string[]): void {
  for (const k of Object.keys(body)) {
    if (!known.includes(k)) throw bad(`${k}: unknown field; expected ${known.join(", ")}`);
  }
}

/** The fields that name whose budget a call is about: exactly one of them. */
export const SUBJECTS = ["key", "ip", "anonymous", "guess", "account"] as const;

/**
 * The budget a call is about, named as requests name it: a key's (`{"key"}`), a client address's `ip` budget
 * (`{"ip"}`, with `"plan"` for a plan's own), its `anonymous` budget (`{"anonymous"}`) or its `guesses` budget
 * (`{"guess"}`: the keys refused from it), or an account's (`{"account"}`, with `"plan"` naming the plan whose
 * `account` limits count it; optional when one plan has them).
 */
export function subjectOf(body: Record<string, unknown>, config: Config): Identity {
  const given = SUBJECTS.filter((f) => body[f] !== undefined);
  if (given.length !== 1) {
    throw bad(
      given.length === 0
        ? 'key: required, e.g. {"key": "live_abc"} (or {"ip": "192.0.2.1"}, {"anonymous": "192.0.2.1"}, {"guess": "192.0.2.1"}, {"account": "acme"})'
        : `${given.join(", ")}: give one of ${SUBJECTS.join(", ")}`,
    );
  }
  const field = given[0] as (typeof SUBJECTS)[number];
  if (body.plan !== undefined && field !== "ip" && field !== "account") {
    throw bad("plan: only with ip (a plan's own ip budget) or account (the plan whose account limits count it)");
  }
  if (field === "key") return identified(body.key, config);
  if (field === "account") return accountOf(body.account, body.plan, config);
  const value = body[field];
  const client = typeof value === "string" ? clientOf(value, config.ipv6Subnet) : null;
  if (client === null) throw bad(`${field}: expected an IPv4 or IPv6 address, got ${describe(value)}`);
  if (field === "anonymous") {
    if (!config.anonymous)
      throw unprocessable("anonymous: RATE_LIMIT.anonymous is not set; no address has such a budget.");
    return { name: objectName("ip", client), plan: config.anonymous };
  }
  if (field === "guess") {
    if (!config.guesses) {
      throw unprocessable(
        "guess: RATE_LIMIT.guesses is not set (nor on by default: no plan is signed); no address has such a budget.",
      );
    }
    return { name: objectName(config.guesses.kind, client), plan: config.guesses.plan };
  }
  const budget = addressBudget(body.plan, config);
  return { name: objectName(budget.kind, client), plan: budget.plan };
}

/** The `ip` budget of the plan named `plan` (its own, or the top-level one), or the top-level one without a plan. */
function addressBudget(plan: unknown, config: Config): AddressBudget {
  if (plan === undefined) {
    if (!config.ip) {
      // An address refused for its keys is held by its guess budget, not this one: say where to look.
      const guess = config.guesses ? ' Keys refused from an address count in its guess budget: {"guess": "…"}.' : "";
      throw unprocessable(`ip: RATE_LIMIT.ip is not set; no address has such a budget.${guess}`);
    }
    return config.ip;
  }
  const found = config.plans.find((p) => p.name === plan) ?? (plan === "default" ? config.defaultPlan : null);
  if (!found) throw bad(`plan: no plan named ${describe(plan)}`);
  if (!found.ip) throw unprocessable(`plan: plan ${JSON.stringify(found.name)} has no ip budget.`);
  return found.ip;
}

/**
 * The budget of the account named `account` under the `account` limits of the plan named `plan` (objects
 * `acct.<plan>:<account>`, as requests name them); without `plan`, of the one plan that has account limits.
 */
function accountOf(account: unknown, plan: unknown, config: Config): Identity {
  let name: string;
  try {
    name = checkAccount(account, "account");
  } catch (e) {
    if (e instanceof TypeError) throw bad(e.message);
    throw e;
  }
  const found = plan === undefined ? onlyCounted(config) : config.plans.find((p) => p.name === plan);
  if (!found) throw bad(`plan: no plan named ${describe(plan)}`);
  const budget = found.account;
  if (!budget) throw unprocessable(`plan: plan ${JSON.stringify(found.name)} has no account limits.`);
  return { name: objectName(budget.kind, name), plan: budget.plan };
}

/** The one plan with account limits, for an `account` given without `plan`. */
function onlyCounted(config: Config): Plan {
  const counted = config.plans.filter((p) => p.account);
  const [only] = counted;
  if (!only) throw unprocessable("account: no plan has account limits; no account has a budget.");
  if (counted.length > 1) {
    const names = counted.map((p) => p.name).join(", ");
    throw bad(`plan: required with account, as several plans have account limits (${names})`);
  }
  return only;
}

/** A `422`: a call well formed, but about a budget this configuration does not have. */
export function unprocessable(detail: string): HttpError {
  return new HttpError(422, "Unprocessable Content", detail);
}

/**
 * The body's key, checked as the Worker checks keys (with messages for operators), and its
 * object's name and plan, found as a request's are.
 */
function identified(value: unknown, config: Config): Identity {
  if (value === undefined) throw bad('key: required, e.g. {"key": "live_abc"}');
  if (typeof value !== "string" || value === "") throw bad(`key: expected a non-empty string, got ${describe(value)}`);
  try {
    checkKey(value, "the key in the body", config.key.maxLength);
    return identify(config, value, null);
  } catch (e) {
    if (!(e instanceof LimiterError)) throw e;
    // A malformed key (400), or one the Worker refuses with 401 (no plan, not key.pattern): no request can use it.
    if (e.code === "malformed_key") throw bad(`key: ${e.message}`);
    throw unprocessable(`key: ${e.message} Its requests get 401 and it has no state.`);
  }
}

/**
 * `body[field]` (an ISO time or ms since the epoch) or `body.for` (a duration from now) as ms;
 * null when neither is given. It must lie in the future.
 */
export function when(body: Record<string, unknown>, field: string, verb: string, now: number): number | null {
  const at = body[field];
  const span = body.for;
  if (at !== undefined && span !== undefined) throw bad(`give "${field}" or "for", not both`);
  let ms: number;
  if (span !== undefined) {
    try {
      ms = now + parseDuration(span, "for");
    } catch (e) {
      throw bad((e as Error).message);
    }
  } else if (at === undefined) {
    return null;
  } else if (typeof at === "number") {
    if (!Number.isSafeInteger(at)) throw bad(`${field}: expected whole ms since the epoch, got ${describe(at)}`);
    ms = at;
  } else if (typeof at === "string" && /^\d{4}-\d\d-\d\dT/.test(at) && !Number.isNaN(Date.parse(at))) {
    ms = Date.parse(at);
  } else {
    throw bad(`${field}: expected an ISO time like "2030-01-01T00:00:00Z" or ms since the epoch, got ${describe(at)}`);
  }
  if (!(ms <= MAX_TIME_MS)) {
    throw bad(`${field}: at most ${iso(MAX_TIME_MS)} (${MAX_TIME_MS} ms), got ${describe(at ?? span)}`);
  }
  if (ms <= now) throw bad(`${field}: ${iso(ms)} is not in the future; nothing to ${verb}`);
  return ms;
}

/**
 * An ISO 8601 date (`2026-11-01`, its midnight UTC) or date and time (`2026-11-01T00:00:00Z`; seconds, fractions and
 * the offset optional, a time without an offset read as UTC). `Date.parse` alone also takes `"Nov 1 2026"` and other
 * spellings the docs never promised.
 */
const ISO_8601 = /^\d{4}-\d\d-\d\d(?:T\d\d:\d\d(?::\d\d(?:\.\d{1,9})?)?(?:Z|[+-]\d\d:\d\d)?)?$/;

/** `value` as ms when it is an ISO 8601 date or time ({@link ISO_8601}) naming a real day (not February 30), else NaN. */
function isoTime(value: string): number {
  if (!ISO_8601.test(value)) return Number.NaN;
  const [y = 0, m = 0, d = 0] = value.slice(0, 10).split("-").map(Number);
  if (new Date(Date.UTC(y, m - 1, d)).getUTCDate() !== d) return Number.NaN;
  return Date.parse(/T[^Z+-]*$/.test(value) ? `${value}Z` : value);
}

/** A time in a body: ms since the epoch, or an ISO 8601 date or time ({@link isoTime}); `fallback` when missing; else `400`. */
export function instant(value: unknown, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  const t = typeof value === "number" ? value : typeof value === "string" ? isoTime(value) : Number.NaN;
  if (!Number.isSafeInteger(t) || t < 0 || t > MAX_TIME_MS) {
    throw bad(
      `"${field}": expected an ISO 8601 time like "2026-11-01T00:00:00Z" (or a date, "2026-11-01") or ms since the epoch, got ${JSON.stringify(value) ?? "nothing"}`,
    );
  }
  return t;
}

export function bad(detail: string): HttpError {
  return new HttpError(400, "Bad Request", detail);
}

function tooLarge(): HttpError {
  return new HttpError(413, "Content Too Large", `The admin API reads bodies of at most ${MAX_BODY_BYTES} bytes.`);
}

export function notAllowed(allow: string): HttpError {
  return new HttpError(405, "Method Not Allowed", `Use ${allow}.`, { headers: { Allow: allow } });
}
