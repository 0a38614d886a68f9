/**
 * @module One result for a request decided by several budgets at once — its key's, and its client address's and its
 * account's where they apply (docs/design.md, "Several identifiers"): allowed only when every one allowed it.
 */

import { joinHandles, type RateLimitResult } from "./result.ts";

/** A budget's decision beside the key's: which budget (`refusedBy` names it), and what it decided. */
export interface BudgetResult {
  readonly by: "ip" | "account";
  readonly result: RateLimitResult;
}

/**
 * One result for a request decided by its key's budget and `others`: allowed when every budget allowed it; the
 * limits of all (the key's, its route's, then each other budget's in order); when refused, the first refusing
 * budget's reason and the longest wait of those that refused. Granted, its handle holds every grant and the key's
 * slot.
 */
export function allOf(key: RateLimitResult, others: readonly BudgetResult[]): RateLimitResult {
  const all: readonly { readonly by: "key" | "ip" | "account"; readonly result: RateLimitResult }[] = [
    { by: "key", result: key },
    ...others,
  ];
  const results = all.map((b) => b.result);
  const allowed = results.every((r) => r.allowed);
  const first = all.find((b) => !b.result.allowed) ??
    all.find((b) => b.result.reason === "shadow") ?? { by: "key", result: key };
  const unavailable = results.find((r) => r.reason === "limiter_timeout" || r.reason === "limiter_error");
  // Shadow mode reports the wait the limits would have imposed, as for one budget.
  const waiting = results.filter((r) => !r.allowed || r.reason === "shadow");
  const wait = waiting.length > 0 ? Math.max(...waiting.map((r) => r.retryAfterMs)) : 0;
  return {
    allowed,
    // An unavailable budget's reason keeps the headers out (nothing is known), as for one budget.
    reason: allowed && unavailable ? unavailable.reason : first.result.reason,
    plan: key.plan,
    route: key.route,
    refusedBy: allowed ? null : first.by,
    cost: key.cost,
    retryAfterMs: wait,
    limits: results.flatMap((r) => r.limits),
    at: key.at,
    handle: allowed ? results.reduce((h: RateLimitResult["handle"], r) => joinHandles(h, r.handle), null) : null,
  };
}
