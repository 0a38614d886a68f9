/**
 * @module The one decision value: from the client to the caller, the headers, the logs and
 * Analytics Engine — and how a decision's outcome becomes it under the limiter's settings.
 */

import type { HeaderForm, LimiterConfig, Plan, Route, ShownLimit } from "../config/types.ts";
import type { RouteBudget } from "../core/budgets.ts";
import type { Period } from "../core/calendar.ts";
import type { LimitSpec } from "../core/limits.ts";
import { type HeaderSink, type HeaderState, seconds, setRateLimitHeaders } from "./headers.ts";

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
  /** The key's credits cannot cover its cost (docs/configuration.md, "Quotas and credits"): nothing was spent. */
  | "credits"
  /** Its cost exceeds a limit: it can never pass. */
  | "too_costly"
  /** The key's object did not answer within `object_timeout`. */
  | "limiter_timeout"
  /** The call to the key's object failed. */
  | "limiter_error"
  /**
   * The key's object could not answer (or is known down) and `failure_mode` is `"local"`: this isolate decided alone,
   * from its own log of the key at `fallback_share` of each limit; `allowed` says how.
   */
  | "limiter_fallback"
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
  /** The window (ms); for a calendar quota, its period's nominal length (an hour, 24 h, 7 days, 30 days). */
  readonly windowMs: number;
  /** A calendar quota's period (docs/configuration.md, "Quotas and credits"); missing for a sliding limit. */
  readonly period?: Period;
  /** A calendar quota's time zone (IANA); missing for a sliding limit. */
  readonly timeZone?: string;
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
   * request without a key), `"ip"` (its client address's `ip` limits, or its `guesses` budget), `"account"` (its
   * account's limits), null when it was allowed.
   */
  readonly refusedBy: "key" | "ip" | "account" | null;
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
  /**
   * What it takes to give the request's units back or free its concurrency slot (`refund()`, `release()`): plain
   * data, so a copy works as well as the result itself — `structuredClone`, a spread, a queue message, KV. Null when
   * there is nothing to give back or free (a refusal, a peek, an unlimited plan).
   */
  readonly handle: Handle | null;
  /**
   * For a plan with credits: the key's balance after the decision (null where not known: decided from a lease, the
   * deny cache, or without the object), and the status a refusal for want of credits is answered with.
   */
  readonly credits?: { readonly balance: number | null; readonly refuseWith: 402 | 429 };
}

/** A grant's units and slot, as data (see {@link RateLimitResult.handle}). */
export interface Handle {
  /** Where the request's units were recorded: the key's budget, and its address's and account's when they decided it too. */
  readonly grants: readonly GrantRecord[];
  /** The concurrency slot the request holds (docs/configuration.md, "Concurrency"), or null. */
  readonly slot: SlotRecord | null;
}

/** Where one budget recorded a grant's units. A refund gives them back once, by `id`. */
export interface GrantRecord {
  /** Unique: a second refund of the same grant gives back nothing. */
  readonly id: string;
  /** The budget's object name. */
  readonly name: string;
  /** The limits the request was sent with (the object applies an operator's override itself). */
  readonly limits: readonly LimitSpec[];
  readonly recordedAt: readonly number[];
  readonly units: number;
  /** The route budget it was also recorded in. */
  readonly route?: RouteBudget;
  /** For a key with calendar quotas: when its object granted it (its clock, ms), so its units go back to that period. */
  readonly at?: number;
  /**
   * Spent from a lease of the isolate that granted it: the lease's id. It is refunded to that lease, in that isolate,
   * while its use is not settled; later, there, its units go back to the key's quotas only (its record was moved to its
   * use and stays counted in its windows); elsewhere it stays counted.
   */
  readonly lease?: string;
  /**
   * Decided alone by the isolate that granted it (`failure_mode = "local"`, reason `limiter_fallback`): when its use
   * is reported to the key's object, in the key's budget and then its route's (that isolate's clock, ms). Its units
   * are at no object until then (`recordedAt` is empty): a refund gives nothing back; a settle gives back its unused
   * units there while they are not yet reported, and its debt goes with the report.
   */
  readonly alone?: readonly number[];
}

/** A concurrency slot a granted request holds at its key's object. */
export interface SlotRecord {
  readonly name: string;
  readonly id: string;
}

/**
 * Checks that `g` is shaped as a handle's grant: a result's handle is passed back as it was given (kept, cloned,
 * serialised); one altered may give back units other requests used.
 *
 * @throws TypeError naming the first field that is not
 */
export function checkGrant(g: GrantRecord): void {
  const fields: [string, boolean][] = [
    ["grant", typeof g === "object" && g !== null],
    ["id", typeof g?.id === "string" && g.id.length > 0 && g.id.length <= 128],
    ["name", typeof g?.name === "string" && g.name.length > 0],
    ["limits", Array.isArray(g?.limits)],
    ["recordedAt", Array.isArray(g?.recordedAt) && g.recordedAt.every((t) => Number.isSafeInteger(t))],
    ["units", Number.isSafeInteger(g?.units) && g.units > 0],
    ["lease", g?.lease === undefined || typeof g.lease === "string"],
    ["at", g?.at === undefined || Number.isSafeInteger(g.at)],
    ["alone", g?.alone === undefined || (Array.isArray(g.alone) && g.alone.every((t) => Number.isSafeInteger(t)))],
  ];
  const bad = fields.find(([, ok]) => !ok);
  if (bad) throw new TypeError(`refund: handle.grants[].${bad[0]} is not as the limiter gave it`);
}

/** `handle` with `b`'s grants after `a`'s, and `a`'s slot (the key's: an address budget holds none). */
export function joinHandles(a: Handle | null, b: Handle | null): Handle | null {
  if (a === null) return b;
  if (b === null) return a;
  return { grants: [...a.grants, ...b.grants], slot: a.slot ?? b.slot };
}

/**
 * The response headers of a decision in `form`: `RateLimit-Policy` and `RateLimit` (none while the limiter is
 * unavailable: nothing is known); when refused, `Retry-After` and `retry-after-ms` with a finite wait, and
 * `x-should-retry: false` when no wait a client's automatic retry makes can help ({@link worthRetrying}).
 */
export function headersOf(r: RateLimitResult, form: HeaderForm): Headers {
  const headers = new Headers();
  setHeadersOf(r, form, headers);
  return headers;
}

/** Sets the fields {@link headersOf} returns on `headers` (a response's own, say: no `Headers` made and copied). */
export function setHeadersOf(r: RateLimitResult, form: HeaderForm, headers: HeaderSink): void {
  if (r.reason !== "limiter_timeout" && r.reason !== "limiter_error") {
    const states = r.limits.map((l) =>
      l.remaining === null || l.resetMs === null ? null : { remaining: l.remaining, resetMs: l.resetMs },
    );
    setRateLimitHeaders(headers, form, { limits: r.limits, states, at: r.at });
  }
  if (r.allowed) return;
  if (Number.isFinite(r.retryAfterMs)) {
    headers.set("Retry-After", String(seconds(r.retryAfterMs)));
    headers.set("retry-after-ms", String(r.retryAfterMs));
  }
  if (!worthRetrying(r)) headers.set("x-should-retry", "false");
}

/**
 * The longest wait a client's automatic retry is told to make (ms): `openai` takes a wait only up to 60 s (past it,
 * its own backoff retries too early); `@anthropic-ai/sdk` takes any, and would hold its caller that long.
 */
export const SDK_MAX_WAIT_MS = 60_000;

/**
 * Whether a client's automatic retry of a refusal is worth making (docs/http.md, "Retries"): not for a cost over a
 * limit or credits no refill covers (no wait helps), a block or a penalty (the key is held until it ends), or a wait
 * longer than {@link SDK_MAX_WAIT_MS}.
 */
export function worthRetrying(r: Pick<RateLimitResult, "reason" | "retryAfterMs">): boolean {
  if (r.reason === "blocked" || r.reason === "penalty") return false;
  return r.retryAfterMs <= SDK_MAX_WAIT_MS;
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
  /** The limits shown, in order: the plan's (or an operator's override), then the route's, then the plan's quotas. */
  readonly shown: readonly ShownLimit[];
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
  /** What a refund or a release needs (granted only). */
  readonly handle?: Handle | null;
  /** The key's credit balance after the decision, where known. */
  readonly credits?: number | undefined;
}

/**
 * The result value of an outcome: its limits and headers, and what shadow mode (a refusal let
 * through) and the failure mode (an unavailable limiter) make of it.
 */
export function resultOf(settings: Pick<LimiterConfig, "failureMode" | "shadow">, o: Outcome): RateLimitResult {
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
  const limits = shown.map((l, i): LimitResult => {
    const out: LimitResult = {
      name: l.name,
      limit: l.limit,
      windowMs: l.windowMs,
      remaining: states[i]?.remaining ?? null,
      resetMs: states[i]?.resetMs ?? null,
      exceeded: exceeded[i] ?? false,
    };
    return l.period === undefined ? out : { ...out, period: l.period, timeZone: l.zone as string };
  });
  const out: RateLimitResult = {
    allowed,
    reason,
    plan: o.plan.name,
    route: o.route?.name ?? null,
    refusedBy: allowed ? null : "key",
    cost: o.cost,
    retryAfterMs: wait,
    limits,
    at: o.at,
    handle: o.handle ?? null,
  };
  const status = o.plan.creditStatus;
  return status ? { ...out, credits: { balance: o.credits ?? null, refuseWith: status } } : out;
}

/**
 * `result` once its grant has been given back: each limit's `remaining` up by its cost (at most the limit; nothing
 * left in the window then: `resetMs` 0). A limit not known stays so.
 */
export function givenBack(result: RateLimitResult): RateLimitResult {
  const limits = result.limits.map((l) => {
    if (l.remaining === null) return l;
    const remaining = Math.min(l.limit, l.remaining + result.cost);
    return { ...l, remaining, resetMs: remaining === l.limit ? 0 : l.resetMs };
  });
  return { ...result, limits };
}
