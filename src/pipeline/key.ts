/**
 * @module What a key is, and how a request's key and plan are found: header, then
 * `Authorization: Bearer`, then the query parameter, as configured. Two sources that disagree are
 * an error, never a guess. The proxy, the hono middleware and `limit()` use the same rule.
 */

import { LimiterError } from "../base/errors.ts";
import { planForKey } from "../config/lookup.ts";
import { KEY_CHARS, type KeySource, type LimiterConfig, type Plan } from "../config/types.ts";

/** `Authorization: Bearer <token>`; group 1 is the token (also the admin API's). */
export const BEARER = /^Bearer[ \t]+(.*)$/i;
export { KEY_CHARS } from "../config/types.ts";

/**
 * The request's API key, or null when it carries none.
 *
 * @throws LimiterError `malformed_key` when a key is malformed (too long, control or non-ASCII characters,
 * several values) or when two sources carry different keys
 */
export function readKey(request: Request, source: KeySource): string | null {
  const found: [where: string, key: string][] = [];
  const add = (where: string, value: string | null | undefined) => {
    const key = value === null || value === undefined ? "" : stripSpace(value);
    if (key !== "") found.push([where, key]);
  };
  if (source.header) add(source.header, request.headers.get(source.header));
  if (source.bearer) add("Authorization: Bearer", BEARER.exec(request.headers.get("authorization") ?? "")?.[1]);
  if (source.query) {
    const values = new URL(request.url).searchParams.getAll(source.query);
    if (values.length > 1) throw badKey(`the ${source.query} query parameter is given ${values.length} times`);
    add(`?${source.query}`, values[0]);
  }
  const first = found[0];
  if (!first) return null;
  for (const [where, key] of found) checkKey(key, `the key in ${where}`, source.maxLength);
  const other = found.find(([, key]) => key !== first[1]);
  if (other) throw badKey(`${first[0]} and ${other[0]} carry different keys; send one key`);
  return first[1];
}

/**
 * Checks that `key` is a key: at most `maxLength` characters of printable ASCII without spaces
 * or commas.
 *
 * @param what the key as its error names it: where it was read (`the key in x-api-key`), or `the key given`
 * @throws LimiterError `malformed_key` naming `what`
 */
export function checkKey(key: string, what: string, maxLength: number): void {
  if (key.length > maxLength) throw badKey(`${what} is longer than ${maxLength} characters`);
  if (!KEY_CHARS.test(key)) {
    throw badKey(
      `${what} may hold printable ASCII only (no spaces, commas — a repeated header arrives joined by one — or control characters)`,
    );
  }
}

/** The object name and plan of a request whose key is `key` (null: no key, limited per client IP when `anonymous` is set). */
export interface Identity {
  /** The key's object name: `key:<key>`, or `ip:<address>` for a request without a key; `<scope>/` before it in a named limiter. */
  readonly name: string;
  readonly plan: Plan;
  /**
   * The account the key belongs to (a customer with several keys; docs/configuration.md, "Accounts"): a minted key's
   * ("Signed keys"), the `verify` hook's, or the caller's; null or missing: none known.
   */
  readonly account?: string | null;
}

/**
 * The name of the Durable Object that holds the log of `id`: `key:<key>`; for a client address
 * (docs/configuration.md, "Client addresses") `ip:<client>` (the `anonymous` limits),
 * `addr:<client>` (the `ip` limits; `addr.<plan>:<client>` for a plan's own), `preflight:<client>`;
 * `<scope>/` before it in a limiter named `scope`.
 * The one place object names are made: requests, the library and the admin API all reach a key's
 * object through it.
 */
export function objectName(kind: string, id: string, scope: string | null = null): string {
  return scope === null ? `${kind}:${id}` : `${scope}/${kind}:${id}`;
}

/**
 * The object name and plan for `key`, a key already read and checked (null: the request has none;
 * then `client`, its address as `clientOf` (address.ts) counts it, names its object when `anonymous` is
 * configured). `scope` names a limiter's objects apart from other limiters' ({@link objectName}).
 *
 * @throws LimiterError `key_required`, `invalid_key` (not `key.pattern`) or `no_plan`; `no_client_address` for a
 *   request without a key whose client address is missing or malformed (`anonymous`)
 */
export function identify(
  config: LimiterConfig,
  key: string | null,
  client: string | null,
  scope: string | null = null,
): Identity {
  if (key === null) {
    if (!config.anonymous) throw new LimiterError("key_required", "This API needs an API key.");
    if (client === null) throw noClientAddress();
    return { name: objectName("ip", client, scope), plan: config.anonymous };
  }
  if (config.key.pattern && !config.key.pattern.test(key))
    throw new LimiterError("invalid_key", "This API key is not valid.");
  const plan = planForKey(config, key);
  if (!plan) throw new LimiterError("no_plan", "This API key matches no plan.");
  return { name: objectName("key", key, scope), plan };
}

/**
 * The name a limiter gets from its settings: `s-` and 12 hex digits of a hash of what its grants
 * mean — each plan's key prefix, limits and routes (not their header names, and not how keys are
 * read, failures handled or leases sized). Not its calendar quotas either: a quota's count carries over a change of
 * its limit (a plan upgraded mid-month keeps what the month has used), which a new name would lose.
 */
export function settingsName(config: LimiterConfig): string {
  const limits = (ls: readonly { limit: number; windowMs: number; tickMs: number }[] | null) =>
    ls?.map((l) => [l.limit, l.windowMs, l.tickMs]) ?? null;
  const plan = (p: Plan | null) =>
    p && [p.name, p.keyPrefix, limits(p.limits), p.routes.map((r) => [r.name, limits(r.limits)])];
  const text = JSON.stringify([plan(config.defaultPlan), plan(config.anonymous), config.plans.map(plan)]);
  return `s-${hash48(text)}`;
}

/** A 48-bit FNV-1a hash of `text`'s UTF-16 code units, as 12 hex digits (a name, not a secret). */
function hash48(text: string): string {
  let h = 0xcbf29ce484222325n;
  for (let i = 0; i < text.length; i++) {
    h ^= BigInt(text.charCodeAt(i));
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return (h >> 16n).toString(16).padStart(12, "0");
}

/**
 * `value` without the spaces and tabs around it (HTTP's optional whitespace), and nothing else:
 * `String.prototype.trim` would also strip Unicode spaces, a BOM, VT and FF, and count `k\u00a0` as
 * `k` while the origin receives the longer key.
 */
function stripSpace(value: string): string {
  return value.replace(/^[ \t]+|[ \t]+$/g, "");
}

/**
 * The error of a request whose client address is needed (the `anonymous` or `ip` limits) and missing or
 * malformed: never one bucket shared by every bad value. Cloudflare always sends `CF-Connecting-IP`; it can be
 * missing locally or behind another proxy.
 */
export function noClientAddress(): LimiterError {
  return new LimiterError(
    "no_client_address",
    "The client address (CF-Connecting-IP) is missing or not an IP address, and this API limits requests per address.",
  );
}

function badKey(detail: string): LimiterError {
  return new LimiterError("malformed_key", detail);
}
