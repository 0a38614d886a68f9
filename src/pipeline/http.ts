/**
 * @module HTTP at the edge: problem-details errors (RFC 9457) and the answers to a refused request,
 * shared by the proxy and the hono middleware.
 */

import { LimiterError, type LimiterErrorCode } from "../base/errors.ts";
import { type NormalPath, normalizePath, PathError } from "../base/path.ts";
import { seconds } from "../client/headers.ts";
import { headersOf, type RateLimitResult, UNAVAILABLE_RETRY_MS, violated } from "../client/result.ts";
import type { HeaderForm, LimiterConfig } from "../config/types.ts";

/** An error that is an HTTP response: thrown inside the Worker, turned into JSON at the edge. */
export class HttpError extends Error {
  readonly status: number;
  readonly title: string;
  readonly headers: Record<string, string>;
  readonly extra: Record<string, unknown>;

  constructor(
    status: number,
    title: string,
    detail: string,
    options: { headers?: Record<string, string>; extra?: Record<string, unknown> } = {},
  ) {
    super(detail);
    this.status = status;
    this.title = title;
    this.headers = options.headers ?? {};
    this.extra = options.extra ?? {};
  }

  /** An RFC 9457 problem-details response; never a stack trace. */
  toResponse(): Response {
    return problem(this.status, this.title, this.message, this.extra, this.headers);
  }
}

/** A JSON problem-details response (RFC 9457). */
export function problem(
  status: number,
  title: string,
  detail: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Response {
  const body = JSON.stringify({ type: "about:blank", title, status, detail, ...extra });
  return new Response(body, {
    status,
    headers: { "content-type": "application/problem+json", "cache-control": "no-store", ...headers },
  });
}

/**
 * The answer to a request the limiter refused: `429` with `Retry-After` (exact, whole seconds) and
 * the rate-limit headers for a limit or a block, `503` with `Retry-After: 1` when the limiter is
 * unavailable and `failure_mode` is closed.
 */
export function refusal(r: RateLimitResult, form: HeaderForm = "draft-11"): Response {
  if (r.reason === "limiter_timeout" || r.reason === "limiter_error") {
    return problem(503, "Service Unavailable", "The rate limiter is unavailable; retry shortly.", {}, UNAVAILABLE);
  }
  const never = !Number.isFinite(r.retryAfterMs);
  const names = violated(r);
  const headers = headersOf(r, form);
  headers.set("content-type", "application/problem+json");
  headers.set("cache-control", "no-store");
  if (r.reason === "credits") return noCredits(r, headers);
  const detail = detailOf(r, names, never);
  const body = {
    type: "about:blank",
    title: "Too Many Requests",
    status: 429,
    detail,
    reason: r.reason,
    violated_policies: names,
    ...(r.route === null ? {} : { route: r.route }),
    retry_after: never ? null : seconds(r.retryAfterMs),
    retry_after_ms: never ? null : r.retryAfterMs,
  };
  return new Response(JSON.stringify(body), { status: 429, headers });
}

/** The wait an answer of the limiter unavailable asks for: 1 s, in both fields (an SDK reads the exact one first). */
const UNAVAILABLE = { "Retry-After": "1", "retry-after-ms": String(UNAVAILABLE_RETRY_MS) } as const;

/** What a block or a penalty holds, by the budget that refused: the key, its client address or its account. */
const SUBJECTS = { key: "This API key", ip: "This client address", account: "This account" } as const;

/** A refusal's `detail`: what refused it, in words, and how long to wait. */
function detailOf(r: RateLimitResult, names: readonly string[], never: boolean): string {
  const wait = `retry after ${seconds(r.retryAfterMs)} s.`;
  const listed = names.join(", ");
  const subject = SUBJECTS[r.refusedBy ?? "key"];
  switch (r.reason) {
    case "blocked":
      return `${subject} is blocked by an operator; ${wait}`;
    case "penalty":
      return `${subject} is blocked for a while after repeated requests over its limit; ${wait}`;
    case "concurrency":
      return `This API key already has as many requests in flight as its concurrency allows; ${wait}`;
    case "limiter_fallback":
      return `The rate limiter is deciding without this key's store, at a share of its limits${names.length > 0 ? ` (${listed} exceeded)` : ""}; ${wait}`;
    default:
      if (never) return `This request costs more than the ${listed} limit allows; it can never pass.`;
      return names.length > 0 ? `Rate limit exceeded (${listed}); ${wait}` : `Rate limit exceeded; ${wait}`;
  }
}

/**
 * The refusal of a request its key's credits cannot cover (docs/configuration.md, "Quotas and credits"): `402`, or
 * `429` where the plan says so; `Retry-After` only when a refill will cover it.
 */
function noCredits(r: RateLimitResult, headers: Headers): Response {
  const status = r.credits?.refuseWith ?? 402;
  const balance = r.credits?.balance ?? null;
  const refill = Number.isFinite(r.retryAfterMs);
  const body = {
    type: "about:blank",
    title: status === 402 ? "Payment Required" : "Too Many Requests",
    status,
    detail: `This API key's credits cannot cover this request (cost ${r.cost}${balance === null ? "" : `, balance ${balance}`}); ${refill ? `they are refilled in ${seconds(r.retryAfterMs)} s, or add credits` : "add credits to continue"}.`,
    reason: r.reason,
    balance,
    cost: r.cost,
    retry_after: refill ? seconds(r.retryAfterMs) : null,
    retry_after_ms: refill ? r.retryAfterMs : null,
  };
  return new Response(JSON.stringify(body), { status, headers });
}

/** Each error code's status and title. */
const PROBLEMS: Record<LimiterErrorCode, readonly [status: number, title: string]> = {
  malformed_key: [400, "Malformed API key"],
  no_client_address: [400, "Bad Request"],
  malformed_path: [400, "Bad Request"],
  bad_reservation: [400, "Bad Request"],
  key_required: [401, "Unauthorized"],
  invalid_key: [401, "Unauthorized"],
  no_plan: [401, "Unauthorized"],
  unknown_key: [401, "Unauthorized"],
  verify_failed: [503, "Service Unavailable"],
  key_unsigned: [401, "Unauthorized"],
  key_malformed: [401, "Unauthorized"],
  key_signature: [401, "Unauthorized"],
  key_secret_retired: [401, "Unauthorized"],
  key_expired: [401, "Unauthorized"],
  key_plan_mismatch: [401, "Unauthorized"],
  key_plan_unknown: [401, "Unauthorized"],
};

/**
 * The HTTP error of a {@link LimiterError}: `400` for a malformed key or a missing client address, `401` for a key
 * needed and missing, not valid, matching no plan or unknown to the `verify` hook, or a signed plan's key refused (its
 * `code` in the body: which check it failed) — with the `WWW-Authenticate` challenge when keys may come as
 * `Authorization: Bearer` (`bearer`) — and `503` with `Retry-After: 1` when the hook failed.
 */
export function httpErrorOf(e: LimiterError, bearer = false): HttpError {
  const [status, title] = PROBLEMS[e.code];
  const headers: Record<string, string> =
    status === 401 && bearer ? { "WWW-Authenticate": 'Bearer realm="api"' } : status === 503 ? UNAVAILABLE : {};
  // A signed key's refusals say which check failed (the others' codes are older than the field).
  const signed = e.code.startsWith("key_") && e.code !== "key_required";
  return new HttpError(status, title, e.message, { headers, ...(signed ? { extra: { code: e.code } } : {}) });
}

/** The error of a key the `verify` hook does not know (it answered null): `401`, nothing counted. */
export function unknownKey(): LimiterError {
  return new LimiterError("unknown_key", "This API key is not known.");
}

/**
 * The error of a key whose `verify` hook failed (threw or rejected): `503` with `Retry-After: 1`, whatever the
 * `failure_mode` — without an answer no plan is known to decide with, and letting the key through would let any
 * forged key through while the store behind the hook is down.
 */
export function verifyFailed(): LimiterError {
  return new LimiterError("verify_failed", "The API key could not be verified now; retry shortly.");
}

/** The problem+json response the proxy sends for a {@link LimiterError} ({@link httpErrorOf}). */
export function problemFor(e: LimiterError, bearer = false): Response {
  return httpErrorOf(e, bearer).toResponse();
}

/**
 * The path of `url` as the runtime serialises a request's (`request.url`): what `new URL(url).pathname` reads,
 * without parsing the rest of it on every request. Anything else is parsed.
 */
export function pathnameOf(url: string): string {
  const scheme = url.indexOf("://");
  const start = scheme === -1 ? -1 : url.indexOf("/", scheme + 3);
  const query = url.indexOf("?", scheme + 3);
  const fragment = url.indexOf("#", scheme + 3);
  // No path, or a query or fragment before it: not a serialised URL of a special scheme.
  if (start === -1 || (query !== -1 && query < start) || (fragment !== -1 && fragment < start)) {
    return new URL(url).pathname;
  }
  const end = Math.min(query === -1 ? url.length : query, fragment === -1 ? url.length : fragment);
  return url.slice(start, end);
}

/**
 * The request's path as rules match it, normalised under the limiter's `paths` settings.
 *
 * @throws LimiterError `malformed_path` for a path the normaliser refuses
 */
export function normalizedPath(pathname: string, config: LimiterConfig): string {
  return normalized(pathname, config).match;
}

/**
 * The request's normalised path under the limiter's `paths` settings: what rules match, and what is forwarded.
 *
 * @throws LimiterError `malformed_path` for a path the normaliser refuses (a `400` at the edge: {@link problemFor})
 */
export function normalized(pathname: string, config: LimiterConfig): NormalPath {
  try {
    return normalizePath(pathname, config.paths.escapedSlashes);
  } catch (e) {
    if (e instanceof PathError) throw new LimiterError("malformed_path", e.message);
    throw e;
  }
}

/**
 * Whether `request` opens a WebSocket: a `GET` whose `Upgrade` field is `websocket` (any case; RFC 6455 §4.1 — the
 * handshake is a `GET`, and `Upgrade` names the one protocol, as workerd reads it). The one check every adapter
 * makes: such a request's concurrency slot is its socket's (held until the socket closes), and the proxy sends it on
 * as a handshake. A request of any other method with that field is an ordinary request (the proxy drops `Upgrade`,
 * a hop-by-hop field, before forwarding it).
 */
export function isWebSocketUpgrade(request: Request): boolean {
  return request.method === "GET" && request.headers.get("upgrade")?.trim().toLowerCase() === "websocket";
}

/**
 * The signal that aborts when the client of `request` goes away: workerd's `request.signal` under the compatibility
 * flag `enable_request_signal` (without it, or outside workerd, a signal that never aborts, or none).
 */
export function clientSignal(request: Request): AbortSignal | null {
  return (request as { signal?: AbortSignal | null }).signal ?? null;
}
