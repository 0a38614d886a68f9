/**
 * @module A settle's debt (docs/design.md, "Settled costs"): the units a request used beyond what it reserved,
 * recorded at the object's clock whatever the limits say — later than their use, never earlier — in the key's windows
 * and its route's, its quotas, its credits (down to 0: a balance is never below it) and its usage. The key's next
 * requests wait the windows out; nothing else is refused for it.
 */

import type { RouteBudget } from "../core/budgets.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { RefundedGrant } from "../protocol.ts";
import { KEY_BUDGET } from "./budgets.ts";
import type { KeyStores } from "./key.ts";

/** Records `grant.debt` units at `now` in the key's budget and its route's (`route`), and in its meters. */
export function recordDebt(
  k: KeyStores,
  now: number,
  call: {
    readonly limits: readonly LimitSpec[];
    readonly grant: RefundedGrant;
    readonly route?: RouteBudget | undefined;
  },
): void {
  const { limits, grant, route } = call;
  const units = grant.debt ?? 0;
  if (units < 1) return;
  const uses = [{ ageMs: 0, units }];
  const own = k.budgets.log(KEY_BUDGET, k.controls.override(now)?.limits ?? limits, "decide");
  k.budgets.write(KEY_BUDGET, own.record(now, uses));
  if (route !== undefined) k.budgets.write(route.name, k.budgets.route(route).record(now, uses));
  const t = Math.max(now, own.clock);
  const meters = k.meters.stored();
  if (meters.quotas !== null) k.meters.write({ quotaRows: meters.quotas.take(t, units, true), credits: null });
  if (meters.credits !== null) {
    const spent = Math.min(units, meters.credits.balance(t));
    if (spent > 0) k.meters.write({ quotaRows: null, credits: meters.credits.take(t, spent) });
  }
  k.usage.charge(t, units);
}
