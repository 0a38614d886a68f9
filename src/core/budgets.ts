/**
 * @module Several budgets of one key decided as one (docs/configuration.md, "Per-route budgets"): the key's own
 * log and a route's log. A request must fit every budget; it is recorded in all of them or in
 * none. Each log keeps its own rings and its own exactness; together they are exact too: a
 * budget that fits a cost at `t` still fits it later unless something is granted meanwhile, so
 * the request fits all of them from the latest of their times, and not a millisecond earlier.
 */

import type { Decision } from "./decision.ts";
import type { LimitSpec } from "./limits.ts";
import type { KeyLog } from "./log.ts";
import type { SlotRow } from "./ring.ts";

/** A route's budget as a request of that route carries it to the key's object: the route's name and limits. */
export interface RouteBudget {
  readonly name: string;
  readonly limits: readonly LimitSpec[];
}

/** What {@link takeTogether} decided, and the rows each log wrote (in the order of the logs). */
export interface TakenTogether {
  readonly decision: Decision;
  readonly writes: readonly (readonly SlotRow[])[];
}

/**
 * Decides one request of `cost` (≥ 1) against every log at `now`, per request (no lease):
 * records it in all of them when it fits all, else in none. A log that refuses it remembers the
 * refusal as {@link KeyLog.take} does (no leases near a limit).
 *
 * @throws RangeError for a cost that is not a whole number ≥ 1
 */
export function takeTogether(logs: readonly KeyLog[], now: number, cost: number): TakenTogether {
  const checks = logs.map((log) => log.check(now, cost));
  if (checks.every((d) => d.allowed)) {
    const outs = logs.map((log) => log.take(now, { cost }));
    return { decision: combine(outs.map((o) => o.decision)), writes: outs.map((o) => o.writes) };
  }
  const refused = logs.map((log, i) =>
    (checks[i] as Decision).allowed ? (checks[i] as Decision) : log.take(now, { cost }).decision,
  );
  return { decision: combine(refused), writes: logs.map(() => []) };
}

/**
 * One decision from the decisions of several budgets on the same request: allowed when every one
 * allowed it, their limits in order, the latest of their clocks, and the wait until the request
 * fits all of them (`Infinity` when one can never fit it). The first decision's operator fields
 * (`blockedBy`, `limitsOverride`) carry over: operators act on the key's own budget.
 */
export function combine(decisions: readonly Decision[]): Decision {
  const [first, ...rest] = decisions;
  if (!first) throw new RangeError("decisions: expected at least one");
  if (rest.length === 0) return first;
  const now = Math.max(...decisions.map((d) => d.now));
  const allowed = decisions.every((d) => d.allowed);
  const neverAllowed = decisions.some((d) => d.neverAllowed);
  const fitsAt = Math.max(...decisions.map((d) => d.now + d.retryAfterMs));
  const recorded = decisions.map((d) => d.recordedAt);
  const out: Decision = {
    ...first,
    allowed,
    neverAllowed,
    now,
    retryAfterMs: allowed ? 0 : neverAllowed ? Number.POSITIVE_INFINITY : Math.max(0, fitsAt - now),
    blockedUntil: Math.max(...decisions.map((d) => d.blockedUntil)),
    limits: decisions.flatMap((d) => d.limits),
    lease: null,
  };
  if (recorded.every((r) => r !== undefined)) return { ...out, recordedAt: recorded.flat() };
  const { recordedAt: _, ...without } = out;
  return without;
}
