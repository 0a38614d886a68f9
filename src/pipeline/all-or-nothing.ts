/**
 * @module A request that must fit several budgets at once (docs/design.md, "Several identifiers"): its key's, and its
 * client address's (`ip`) and its account's (`account`) where they apply. Every budget's object is asked at once; when
 * any refuses, every grant the others made is given back before the answer, so the refused request ends counted in
 * none of them.
 */

import type { LimiterNamespace, LimitRequest } from "../client/index.ts";
import { allOf, type BudgetResult } from "../client/joined.ts";
import { givenBack, type RateLimitResult } from "../client/result.ts";
import type { Plan } from "../config/types.ts";

/** A budget a request must fit beside its key's: which one, its object's name, and its limits as a plan. */
export interface ExtraBudget {
  readonly by: BudgetResult["by"];
  readonly name: string;
  readonly plan: Plan;
}

/** What deciding over several budgets needs of a pipeline: one budget's decision, a refund and a release. */
export interface Decider {
  limit(request: LimitRequest): Promise<RateLimitResult>;
  /** Gives back what a result granted (never rejects for a budget's object that does not answer: it logs). */
  refund(ns: LimiterNamespace, result: RateLimitResult): Promise<boolean>;
  /** Frees the concurrency slot a result holds. */
  release(ns: LimiterNamespace, result: RateLimitResult): Promise<boolean>;
}

/**
 * Decides `request` against its key's budget and every one of `extras` at once. A grant by some with a refusal by
 * another is given back before the answer (a leased grant to its lease, at once; else a call), and the key's slot
 * freed. A give-back that fails leaves that grant counted until it leaves the window: capacity held, never more
 * granted.
 */
export async function decideAll(
  by: Decider,
  request: LimitRequest,
  extras: readonly ExtraBudget[],
): Promise<RateLimitResult> {
  const { ns, cost, bg } = request;
  const results = await Promise.all([
    by.limit(request),
    ...extras.map((b) => by.limit({ ns, name: b.name, plan: b.plan, cost, ...(bg ? { bg } : {}) })),
  ]);
  let shown: readonly RateLimitResult[] = results;
  if (results.some((r) => !r.allowed) && results.some((r) => r.allowed)) {
    const [back] = await Promise.all([
      Promise.all(results.map((r) => r.allowed && by.refund(ns, r))),
      by.release(ns, results[0] as RateLimitResult),
    ]);
    // What the refusal shows of a budget that granted is what it has once the grant is back (docs/http.md, `r`).
    shown = results.map((r, i) => (back[i] === true ? givenBack(r) : r));
  }
  const [byKey, ...others] = shown as [RateLimitResult, ...RateLimitResult[]];
  return allOf(
    byKey,
    others.map((result, i) => ({ by: (extras[i] as ExtraBudget).by, result })),
  );
}
