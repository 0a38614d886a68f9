/**
 * @module The one decision value: from the client to the caller, the headers, the logs and
 * Analytics Engine — and how a decision's outcome becomes it under the limiter's settings.
 */

import type { Limit, LimiterConfig, Plan, Route } from "../config/types.ts";
import { type HeaderState, seconds, setRateLimitHeaders } from "./headers.ts";

/** Why a request was let through or refused; in logs and analytics. */
export type Reason =
  /** The key's object granted it. */
  | "granted"
  /** Spent from units this isolate holds on lease (no object call). */
  | "leased"
  /** A limit refused it. */
  | "over_limit"
  /** The key's requests in flight filled its `concurrency`: refused at once, nothing recorded. */
  | "concurrency"
  /** An operator blocked the key. */
  | "blocked"
  /** The key is blocked for a while after repeated refusals (`penalty`). */
  | "penalty"
  /** Refused from the deny cache: the object said no request can pass before a known time. */
  | "cached_denial"
  /** Its cost exceeds a limit: it can never pass. */
  | "too_costly"
  /** The key's object did not answer within `object_timeout`. */
  | "limiter_timeout"
  /** The call to the key's object failed. */
  | "limiter_error"
  /** Shadow mode let through a request the limits refuse. */
  | "shadow"
  /** The key's plan is unlimited: nothing was asked. */
  | "unlimited"
  /** `peek()`: the key's state; nothing consumed. */
  | "peek";

/** One limit's state after a decision. */
export interface LimitResult {
  /** The limit's name, as in `RateLimit-Policy` (`per-second`, or the name configured). */
  readonly name: string;
  /** Cost units allowed in any window. */
  readonly limit: number;
  /** The window (ms). */
  readonly windowMs: number;
  /** Units that could still be granted now; null when not known (a cached denial knows only the limits that refuse). */
  readonly remaining: number | null;
  /** Milliseconds until `remaining` next grows (0: nothing in the window); null when not known. */
  readonly resetMs: number | null;
  /** True when this limit refused the request. */
  readonly exceeded: boolean;
}

/** The decision on one request: what the caller acts on, and what headers, logs and analytics show. */
export interface RateLimitResult {
  /**
   * Whether to serve the request: the limits fit it, or shadow mode lets it through (`reason`
   * `"shadow"`), or the limiter is unavailable and `failure_mode` is `"open"`.
   */
  readonly allowed: boolean;
  readonly reason: Reason;
  /** The plan that applied (`"default"`, `"anonymous"`, or a plan's name). */
  readonly plan: string;
  /** The route whose budget applied as well (docs/configuration.md, "Per-route budgets"), or null. */
  readonly route: string | null;
  /**
   * Which budget refused it: `"key"` (the key's limits or its route's; the `anonymous` limits for a
   * request without a key), `"ip"` (its client address's `ip` limits), null when it was allowed.
   */
  readonly refusedBy: "key" | "ip" | null;
  /** The units the request asked for. */
  readonly cost: number;
  /**
   * When refused: the exact wait (ms) before this request would be granted if nothing else were,
   * `Infinity` when it never can; 1000 when the limiter is unavailable. In shadow mode the wait
   * the limits would have imposed. 0 otherwise.
   */
  readonly retryAfterMs: number;
  /** Per limit applied (an operator's override, else the plan's), in order, then the route's limits. */
  readonly limits: readonly LimitResult[];
  /** When it was decided (ms since the epoch): the object's clock when the object decided, else this isolate's. */
  readonly at: number;
  /** `RateLimit-Policy` and `RateLimit` in the configured form, plus `Retry-After` when refused: copy them onto the response. */
  readonly headers: Headers;
}

/** The names of the limits that refused a request. */
export function violated(r: Pick<RateLimitResult, "limits">): string[] {
  return r.limits.filter((l) => l.exceeded).map((l) => l.name);
}

/** The wait a caller is told when the limiter is unavailable (ms): `Retry-After: 1`. */
export const UNAVAILABLE_RETRY_MS = 1000;

/** What a decision came to, before the limiter's settings (shadow mode, failure mode, header form) shape it. */
export interface Outcome {
  readonly plan: Plan;
  /** The limits shown, in order: the plan's (or an operator's override), then the route's. */
  readonly shown: readonly Limit[];
  readonly cost: number;
  readonly reason: Reason;
  /** Whether the limits fit the request. */
  readonly fits: boolean;
  /** Per limit shown, its state after the decision (null or missing: not known). */
  readonly states?: readonly (HeaderState | null)[];
  /** Per limit shown, whether it refused the request (missing: none did). */
  readonly exceeded?: readonly boolean[];
  /** The exact wait when refused (ms; default 0). */
  readonly retryAfterMs?: number;
  /** When it was decided (ms since the epoch). */
  readonly at: number;
  readonly route?: Route | null;
}

/**
 * The result value of an outcome: its limits and headers, and what shadow mode (a refusal let
 * through) and the failure mode (an unavailable limiter) make of it.
 */
export function resultOf(
  settings: Pick<LimiterConfig, "failureMode" | "shadow" | "headers">,
  o: Outcome,
): RateLimitResult {
  const { shown, states = [], exceeded = [] } = o;
  let allowed = o.fits;
  let reason = o.reason;
  let wait = o.retryAfterMs ?? 0;
  const unavailable = reason === "limiter_timeout" || reason === "limiter_error";
  if (unavailable) {
    allowed = settings.failureMode === "open";
    wait = allowed ? 0 : UNAVAILABLE_RETRY_MS;
  } else if (!o.fits && settings.shadow) {
    allowed = true;
    reason = "shadow";
  }
  const limits = shown.map(
    (l, i): LimitResult => ({
      name: l.name,
      limit: l.limit,
      windowMs: l.windowMs,
      remaining: states[i]?.remaining ?? null,
      resetMs: states[i]?.resetMs ?? null,
      exceeded: exceeded[i] ?? false,
    }),
  );
  const headers = new Headers();
  if (!unavailable) setRateLimitHeaders(headers, settings.headers, shown, states, o.at);
  if (!allowed && Number.isFinite(wait)) headers.set("Retry-After", String(seconds(wait)));
  return {
    allowed,
    reason,
    plan: o.plan.name,
    route: o.route?.name ?? null,
    refusedBy: allowed ? null : "key",
    cost: o.cost,
    retryAfterMs: wait,
    limits,
    at: o.at,
    headers,
  };
}

/**
 * One result for a request decided by two budgets, its key's and its client address's: allowed
 * when both allowed it; the limits of both (the key's, its route's, then the address's) in its
 * headers; when refused, the refusing budget's reason and the longest wait of those that refused.
 */
export function bothOf(
  key: RateLimitResult,
  address: RateLimitResult,
  settings: Pick<LimiterConfig, "headers">,
): RateLimitResult {
  const allowed = key.allowed && address.allowed;
  const refusing = [key, address].filter((r) => !r.allowed);
  const first = refusing[0] ?? (address.reason === "shadow" ? address : key);
  const limits = [...key.limits, ...address.limits];
  const unavailable = [key, address].some((r) => r.reason === "limiter_timeout" || r.reason === "limiter_error");
  // Shadow mode reports the wait the limits would have imposed, as for one budget.
  const waiting = [key, address].filter((r) => !r.allowed || r.reason === "shadow");
  const wait = waiting.length > 0 ? Math.max(...waiting.map((r) => r.retryAfterMs)) : 0;
  const headers = new Headers();
  if (!unavailable) {
    const states = limits.map((l) =>
      l.remaining === null || l.resetMs === null ? null : { remaining: l.remaining, resetMs: l.resetMs },
    );
    setRateLimitHeaders(headers, settings.headers, limits, states, key.at);
  }
  if (!allowed && Number.isFinite(wait)) headers.set("Retry-After", String(seconds(wait)));
  return {
    allowed,
    reason: first.reason,
    plan: key.plan,
    route: key.route,
    refusedBy: allowed ? null : first === key ? "key" : "ip",
    cost: key.cost,
    retryAfterMs: wait,
    limits,
    at: key.at,
    headers,
  };
}
