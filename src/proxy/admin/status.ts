/**
 * @module What the admin API answers (docs/operating.md): a key's status — its limits, block, override, quotas,
 * credits, routes and history — as JSON, and the times in it.
 */

import type { Limit, Plan } from "../../config/types.ts";
import type { LimitStatus, NamedLimit } from "../../core/decision.ts";
import type { KeyStatus, Override } from "../../object/index.ts";

/** The status of a key as the API returns it (docs/operating.md). */
export function statusJson(
  id: string,
  plan: Plan,
  planLimits: readonly Limit[],
  s: KeyStatus,
): Record<string, unknown> {
  const applied = s.override?.limits ?? planLimits;
  const { meters } = plan;
  const longest = applied[s.history.limit];
  return {
    key_id: id,
    plan: plan.name,
    unlimited: false,
    stored: s.stored,
    now: iso(s.now),
    now_ms: s.now,
    limits: applied.map((l, i) =>
      limitState(l, { st: s.decision.limits[i], used: s.used?.[i] }, s.override ? "override" : "plan"),
    ),
    block:
      s.blockedUntil === null
        ? null
        : {
            until: iso(s.blockedUntil),
            until_ms: s.blockedUntil,
            remaining_ms: s.blockedUntil - s.now,
            // What set it: an operator, or a penalty for repeated refusals (an object of 0.2 says neither).
            cause: s.blockCause ?? "operator",
          },
    // Refusals counted towards the plan's penalty, still within its span.
    refusals: s.refusals ?? 0,
    // Requests holding a concurrency slot now (an object of 0.2 holds none).
    in_flight: s.inFlight ?? 0,
    override: s.override === null ? null : overrideJson(s.override),
    quotas: quotasJson(plan, s),
    credits: meters?.credits ? { balance: s.decision.credits?.balance ?? meters.credits.initial } : null,
    usage: meters?.usage ? { time_zone: meters.usage.zone, keep_days: meters.usage.keepDays } : null,
    routes: plan.routes.map((r) => {
      const found = s.routes?.find((x) => x.name === r.name);
      return {
        name: r.name,
        method: r.method,
        path: r.pathPrefix,
        limits: r.limits.map((l, i) =>
          limitState(l, { st: found?.decision.limits[i], used: found?.used?.[i] }, "route"),
        ),
      };
    }),
    history: {
      limit: longest?.name ?? null,
      window_ms: longest?.windowMs ?? 0,
      start_ms: s.history.startMs,
      bucket_ms: s.history.bucketMs,
      counts: s.history.counts,
      ahead: s.history.ahead,
    },
  };
}

/** A key's calendar quotas in its status: each one's settings, and what is used and left of it in this period. */
function quotasJson(plan: Plan, s: KeyStatus): Record<string, unknown>[] {
  return (plan.meters?.quotas ?? []).map((q, i) => {
    const st = s.decision.quotas?.[i];
    const remaining = st?.remaining ?? q.limit;
    const resetsAt = st && st.resetMs > 0 ? s.now + st.resetMs : null;
    return {
      name: q.name,
      limit: q.limit,
      period: q.period,
      time_zone: q.zone,
      used: s.quotasUsed?.[i] ?? q.limit - remaining,
      remaining,
      resets_at: resetsAt === null ? null : iso(resetsAt),
      resets_at_ms: resetsAt,
    };
  });
}

/**
 * One limit of a key's status: its settings, and what is used and left of it now. `used` is every unit its window
 * holds, as the object counted it (over the limit after a settled cost's debt); an older object's status has only
 * `remaining`, which stops at 0.
 */
function limitState(
  l: Limit | NamedLimit,
  now: { readonly st: LimitStatus | undefined; readonly used: number | undefined },
  source: string,
): Record<string, unknown> {
  const remaining = now.st?.remaining ?? l.limit;
  return {
    ...limitJson(l),
    used: now.used ?? Math.max(0, l.limit - remaining),
    remaining,
    reset_ms: now.st?.resetMs ?? 0,
    source,
  };
}

function overrideJson(o: Override): Record<string, unknown> {
  return {
    limits: o.limits.map(limitJson),
    expires: o.expiresAt === null ? null : iso(o.expiresAt),
    expires_ms: o.expiresAt,
  };
}

export function limitJson(l: {
  name: string;
  limit: number;
  windowMs: number;
  tickMs: number;
}): Record<string, unknown> {
  return { name: l.name, limit: l.limit, window_ms: l.windowMs, tick_ms: l.tickMs };
}

/** An ISO time for a time in ms; null beyond what `Date` holds (a time stored by an earlier version). */
export function iso(ms: number): string | null {
  return Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : null;
}

/** A JSON answer, never cached. */
export function json(body: unknown): Response {
  return new Response(JSON.stringify(body), {
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });
}
