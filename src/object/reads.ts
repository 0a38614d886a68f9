/**
 * @module What the key's object answers without consuming anything: whether a request would pass (`peek`) and the key
 * as an operator sees it (`status`); and an operator's reset, which answers the status after it.
 */

import { combine, type RouteBudget } from "../core/budgets.ts";
import type { Decision } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { History, KeyLog } from "../core/log.ts";
import { fitOf, withMeters } from "../core/meters.ts";
import type { MeterSpecs } from "../protocol.ts";
import { KEY_BUDGET } from "./budgets.ts";
import type { BlockCause, Override } from "./controls.ts";
import { withOverride } from "./flow.ts";
import type { KeyStores } from "./key.ts";

/** A key as an operator sees it (`status`): nothing consumed, nothing written. */
export interface KeyStatus {
  /** The object's clock (ms). */
  readonly now: number;
  /** The key's state under the limits applied now, as a request of cost 0 would see it. */
  readonly decision: Decision;
  /**
   * Units recorded in each applied limit's window, leased ahead included: `limit − remaining`, or more after a settled
   * cost's debt (`remaining` stops at 0). Missing from an object of 0.3.0 and before.
   */
  readonly used?: readonly number[];
  /** Units counted in each quota's current period (in `decision.quotas`' order); more than its limit after a debt. */
  readonly quotasUsed?: readonly number[];
  /** The block's end (ms), while it lasts. */
  readonly blockedUntil: number | null;
  /** What set the block: an operator, or a penalty for repeated refusals; null while none lasts. */
  readonly blockCause: BlockCause | null;
  /** Refusals counted towards a penalty, still within its span. */
  readonly refusals: number;
  /** Requests holding a concurrency slot now (docs/configuration.md, "Concurrency"). */
  readonly inFlight: number;
  /** The override in force, if any (its limits are the ones `decision` reports). */
  readonly override: Override | null;
  /** Grants over the longest window of the limits applied (`limit` −1 and no counts: a key of quotas alone). */
  readonly history: History & { readonly limit: number };
  /** Whether the key has any stored state at all. */
  readonly stored: boolean;
  /** Each route budget asked about, as a request of that route of cost 0 would see it (its own limits only). */
  readonly routes: readonly { readonly name: string; readonly decision: Decision; readonly used?: readonly number[] }[];
}

/** Whether a request of `cost` would be granted at `now`, under the limits applied now and any block. */
export function peek(
  k: KeyStores,
  now: number,
  limits: readonly LimitSpec[],
  call: { readonly cost: number; readonly route?: RouteBudget | undefined; readonly specs?: MeterSpecs | undefined },
): Decision {
  const { cost } = call;
  const override = k.controls.override(now, false);
  const logs = [k.budgets.log(KEY_BUDGET, override?.limits ?? limits, "read")];
  if (call.route !== undefined) logs.push(k.budgets.log(call.route.name, call.route.limits, "read"));
  const metered = k.meters.forCall(call.specs);
  const until = k.controls.blockedAt(now);
  const decided = combine(logs.map((log) => (until === null ? log.check(now, cost) : log.refuse(now, cost, until))));
  return withOverride(
    metered === null ? decided : withMeters(decided, metered, fitOf(metered, decided.now, cost)),
    override,
  );
}

/**
 * The key at `now` for an operator: its state under the limits applied now, any block and override, and the longest
 * window's grants in `buckets` buckets; each route asked about. A key never seen stays without any stored state.
 */
export function status(
  k: KeyStores,
  now: number,
  limits: readonly LimitSpec[],
  view: { readonly buckets: number; readonly routes: readonly RouteBudget[]; readonly specs: MeterSpecs },
): KeyStatus {
  const override = k.controls.override(now, false);
  const log = k.budgets.log(KEY_BUDGET, override?.limits ?? limits, "read");
  const meters = k.meters.forCall(view.specs);
  const peeked = log.peek(now);
  // Its quotas' states and its balance as a request of cost 0 sees them (nothing written).
  const decision = meters === null ? peeked : withMeters(peeked, meters, { quotas: true, credits: true });
  let longest = 0;
  log.limits.forEach((l, i) => {
    if (l.windowMs > (log.limits[longest] as LimitSpec).windowMs) longest = i;
  });
  const history =
    log.limits.length === 0
      ? { startMs: decision.now, bucketMs: 0, counts: [], ahead: 0, limit: -1 }
      : { ...log.history(longest, decision.now, view.buckets), limit: longest };
  const blockedUntil = k.controls.blockedAt(now);
  return {
    now: decision.now,
    decision: withOverride(decision, override),
    used: usedIn(log, decision.now),
    quotasUsed: meters?.quotas?.quotas.map((q) => q.state()?.used ?? 0) ?? [],
    blockedUntil,
    blockCause: blockedUntil === null ? null : k.controls.blockCause,
    refusals: k.controls.refusals(now),
    inFlight: k.slots.heldAt(now),
    override,
    history,
    stored: !k.db.empty,
    routes: (Array.isArray(view.routes) ? view.routes : []).map((r) => {
      const routeLog = k.budgets.log(r.name, r.limits, "read");
      const peekedRoute = routeLog.peek(now);
      return { name: r.name, decision: peekedRoute, used: usedIn(routeLog, peekedRoute.now) };
    }),
  };
}

/**
 * The units each limit of `log` holds at `now` (the log's clock after a read): its window's slots and those recorded
 * after now, as one bucket of its history.
 */
function usedIn(log: KeyLog, now: number): number[] {
  return log.limits.map((_, i) => {
    const h = log.history(i, now, 1);
    return (h.counts[0] ?? 0) + h.ahead;
  });
}

/**
 * Forgets the key's grants up to `now` (an operator's reset) and the refusals counted towards a penalty. Units recorded
 * later (leased to isolates and not expired, or rounded up to a tick) still count. Blocks and overrides stay.
 */
export function reset(k: KeyStores, now: number, limits: readonly LimitSpec[]): void {
  k.controls.forgetRefusals();
  if (!k.db.empty) k.budgets.forget(k.controls.override(now)?.limits ?? limits);
}
