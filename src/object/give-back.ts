/**
 * @module What the key's object takes back or records after the fact: a refunded grant (once per id, to its windows and
 * its meters), leases settled outside a decision, and the grants an isolate made alone while the object could not
 * answer. Each over the key's stores; each returns what it wrote.
 */

import type { RouteBudget } from "../core/budgets.ts";
import type { LimitSpec } from "../core/limits.ts";
import { checkUses, type Settlement } from "../core/log.ts";
import { giveBackUnused } from "../core/meters.ts";
import type { AloneReport, RefundedGrant } from "../protocol.ts";
import { checkRoute, KEY_BUDGET } from "./budgets.ts";
import type { KeyStores } from "./key.ts";
import { checkId } from "./once.ts";

/**
 * How long after a grant a refund gives its units back to the key's quotas, credits and usage (ms): a day. Its id is
 * kept as long, so a refund sent again gives nothing back twice.
 */
export const METER_REFUND_MS = 86_400_000;

/** Checks a refunded grant's fields (an id of 1 to 128 characters, times, a positive count) and its route's name. */
function checkGrant(grant: RefundedGrant, route: RouteBudget | undefined): void {
  const { id, recordedAt, units } = grant ?? ({} as Partial<RefundedGrant>);
  checkId(id, "a grant");
  if (!Array.isArray(recordedAt) || !recordedAt.every((t) => Number.isSafeInteger(t)))
    throw new RangeError("recordedAt: expected the times the grant was recorded at, in ms");
  if (!Number.isSafeInteger(units) || (units as number) < 1) throw new RangeError("units: expected a positive integer");
  if (route !== undefined) checkRoute(route);
}

/**
 * Gives back a grant at `now`, once per id; false (nothing given back) for an id given back before, a key with no
 * state, or one whose logs are kept under other limits than the grant was recorded under (a plan changed, an override
 * came or went): its units count until they leave the window, as any grant's do.
 */
export function refund(
  k: KeyStores,
  now: number,
  call: {
    readonly limits: readonly LimitSpec[];
    readonly grant: RefundedGrant;
    readonly route?: RouteBudget | undefined;
  },
): boolean {
  const { limits, grant, route } = call;
  checkGrant(grant, route);
  const { id, recordedAt, units } = grant;
  if (k.db.empty || k.once.seen("refund", id)) return false;
  if (grant.quotasOnly === true) return refundQuotas(k, now, grant);
  const own = k.budgets.log(KEY_BUDGET, k.controls.override(now)?.limits ?? limits, "refund");
  const routed = route === undefined ? null : k.budgets.log(route.name, route.limits, "refund");
  const rings = (own?.rings.length ?? 0) + (routed?.rings.length ?? 0);
  if (own === null || (route !== undefined && routed === null) || recordedAt.length !== rings) return false;
  const split = own.rings.length;
  k.budgets.write(KEY_BUDGET, own.giveBack(recordedAt.slice(0, split), units));
  if (route !== undefined && routed !== null)
    k.budgets.write(route.name, routed.giveBack(recordedAt.slice(split), units));
  const metered = refundMeters(k, now, grant.at, units);
  // Kept until the grant's record has left every window it counts in, and for a grant the key's meters counted, as
  // long as they take refunds of it (the idle alarm forgets it after): a refund sent again finds it.
  let longest = metered ? METER_REFUND_MS : 0;
  for (const l of [...own.limits, ...(routed?.limits ?? [])]) longest = Math.max(longest, l.windowMs);
  k.once.remember("refund", id, Math.max(now, ...recordedAt) + longest);
  return true;
}

/**
 * A settled leased grant's refund (`quotasOnly`): its units back to the quotas of the period of `at` (the lease's
 * grant), once per id, within {@link METER_REFUND_MS}; its windows keep their record (at its use, as any grant's).
 * False when the key keeps no quotas or the refund is too late.
 */
function refundQuotas(k: KeyStores, now: number, grant: RefundedGrant): boolean {
  const { id, at, units } = grant;
  const quotas = k.meters.stored().quotas;
  if (quotas === null || at === undefined || !Number.isSafeInteger(at) || now - at > METER_REFUND_MS) return false;
  k.meters.write({ quotaRows: quotas.giveBack(now, at, units), credits: null });
  k.once.remember("refund", id, now + METER_REFUND_MS);
  return true;
}

/**
 * Gives a refunded grant's units back to the key's meters: its quotas (the period of `at`, while it lasts), its credits
 * (unless a refill has come since), and its usage (the day of `at`) — only within {@link METER_REFUND_MS} of `at`.
 * Returns whether the grant was one the meters counted.
 */
function refundMeters(k: KeyStores, now: number, at: number | undefined, units: number): boolean {
  if (at === undefined || !Number.isSafeInteger(at) || now - at > METER_REFUND_MS) return false;
  const meters = k.meters.stored();
  if (meters.quotas !== null) k.meters.write({ quotaRows: meters.quotas.giveBack(now, at, units), credits: null });
  if (meters.credits !== null) k.meters.write({ quotaRows: null, credits: meters.credits.giveBack(units, at, now) });
  const usage = k.usage.refund(at, units);
  return meters.quotas !== null || meters.credits !== null || usage;
}

/**
 * Settles leases a caller holds of the key outside a decision (docs/design.md, "Settled leases"): used units re-dated
 * to their last use, unused units taken back (from the meters too). Leases recorded under other limits stay where they
 * are and expire. Returns the rows written.
 */
export function settle(
  k: KeyStores,
  now: number,
  limits: readonly LimitSpec[],
  settled: readonly Settlement[],
): number {
  if (!Array.isArray(settled)) throw new RangeError("settle: expected a list of lease settlements");
  const log = k.budgets.log(KEY_BUDGET, k.controls.override(now)?.limits ?? limits, "decide");
  k.meters.write(giveBackUnused(k.meters.stored(), Math.max(now, log.clock), settled));
  let written = 0;
  for (const s of settled) {
    const rows = log.settle(now, s);
    k.budgets.write(KEY_BUDGET, rows);
    written += rows.length;
  }
  return written;
}

/**
 * Records the grants a caller made alone while the object could not answer (`failure_mode = "local"`), never earlier
 * than their use, whatever the limits say (they passed). An empty report (the isolates' probe) touches nothing.
 * Returns the rows written.
 *
 * @throws RangeError for a report that is not one (uses of whole ms ≥ 0 and whole units ≥ 1, routes by name)
 */
export function recordAlone(
  k: KeyStores,
  now: number,
  limits: readonly LimitSpec[],
  report: AloneReport | undefined,
): number {
  if (report === undefined) return 0;
  if (typeof report !== "object" || report === null || !Array.isArray(report.uses) || !Array.isArray(report.routes))
    throw new RangeError("alone: expected a report of uses and routes");
  if (report.uses.length === 0 && report.routes.length === 0) return 0;
  for (const r of report.routes) {
    if (typeof r !== "object" || r === null || typeof r.budget !== "object" || r.budget === null)
      throw new RangeError("alone.routes[]: expected a route's budget and its uses");
    checkUses(r.uses);
  }
  checkUses(report.uses);
  const rows = k.budgets.log(KEY_BUDGET, k.controls.override(now)?.limits ?? limits, "decide").record(now, report.uses);
  k.budgets.write(KEY_BUDGET, rows);
  let written = rows.length;
  for (const r of report.routes) {
    const routed = k.budgets.route(r.budget).record(now, r.uses);
    k.budgets.write(r.budget.name, routed);
    written += routed.length;
  }
  return written;
}
