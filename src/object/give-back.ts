/**
 * @module What the key's object takes back or records after the fact: a refunded or settled grant (once per id, to its
 * windows and its meters; a settle's debt in debt.ts), leases settled outside a decision, and the grants an isolate
 * made alone while the object could not answer. Each over the key's stores; each returns what it wrote.
 */

import type { RouteBudget } from "../core/budgets.ts";
import type { LimitSpec } from "../core/limits.ts";
import { checkUses, type Settlement } from "../core/log.ts";
import { giveBackUnused } from "../core/meters.ts";
import type { AloneReport, RefundedGrant } from "../protocol.ts";
import { checkRoute, KEY_BUDGET } from "./budgets.ts";
import { recordDebt } from "./debt.ts";
import type { KeyStores } from "./key.ts";
import { checkId } from "./once.ts";

/**
 * How long after a grant a refund gives its units back to the key's quotas, credits and usage (ms): a day. Its id is
 * kept as long, so a refund sent again gives nothing back twice.
 */
export const METER_REFUND_MS = 86_400_000;

/**
 * Checks a refunded grant's fields (an id of 1 to 128 characters, times, a positive count — 0 or more for a settle —
 * and a debt of 0 or more) and its route's name.
 */
function checkGrant(grant: RefundedGrant, route: RouteBudget | undefined): void {
  const { id, recordedAt, units, debt = 0 } = grant ?? ({} as Partial<RefundedGrant>);
  checkId(id, "a grant");
  if (!Array.isArray(recordedAt) || !recordedAt.every((t) => Number.isSafeInteger(t)))
    throw new RangeError("recordedAt: expected the times the grant was recorded at, in ms");
  const least = grant.settle === true ? 0 : 1;
  if (!Number.isSafeInteger(units) || (units as number) < least)
    throw new RangeError(`units: expected a whole number ≥ ${least}`);
  if (!Number.isSafeInteger(debt) || debt < 0) throw new RangeError("debt: expected a whole number ≥ 0");
  if (route !== undefined) checkRoute(route);
}

/** A refund's or a settle's call: the limits the grant was sent with, the grant, its route. */
interface GiveBackCall {
  readonly limits: readonly LimitSpec[];
  readonly grant: RefundedGrant;
  readonly route?: RouteBudget | undefined;
}

/**
 * Gives back a grant at `now`, once per id — the whole of it (a refund) or its unused `units` (a settle, which also
 * records a `debt`: debt.ts); false (nothing done) for an id given back or settled before, a key with no state (but
 * a settle's debt is recorded even then), or one whose logs are kept under other limits than the grant was recorded under (a plan changed, an override came or went):
 * its units count until they leave the window, as any grant's do.
 */
export function refund(k: KeyStores, now: number, call: GiveBackCall): boolean {
  const { grant, route } = call;
  checkGrant(grant, route);
  if (k.once.seen("refund", grant.id)) return false;
  const indebted = grant.settle === true && (grant.debt ?? 0) > 0;
  if (k.db.empty) return indebted && debtAlone(k, now, call);
  const forgetAt = grant.quotasOnly === true ? refundQuotas(k, now, grant) : giveBack(k, now, call);
  if (forgetAt !== null) {
    if (indebted) recordDebt(k, now, call);
    k.once.remember("refund", grant.id, forgetAt);
    return true;
  }
  // Nothing to give back where the grant was recorded (its limits changed since): a debt is recorded all the same.
  return indebted && debtAlone(k, now, call);
}

/**
 * A settle's debt where nothing can be given back — a key with no state (the idle alarm deleted it: the grant has
 * left every window), or logs kept under other limits since the grant — recorded all the same (a debt uses nothing
 * of the grant's record), its id kept while the debt counts. True.
 */
function debtAlone(k: KeyStores, now: number, call: GiveBackCall): true {
  recordDebt(k, now, call);
  const longest = Math.max(
    0,
    ...call.limits.map((l) => l.windowMs),
    ...(call.route?.limits ?? []).map((l) => l.windowMs),
  );
  k.once.remember("refund", call.grant.id, now + longest + 1);
  return true;
}

/**
 * Gives a grant's `units` back to its windows and meters: when to forget its id, or null when its logs are kept under
 * other limits.
 */
function giveBack(k: KeyStores, now: number, call: GiveBackCall): number | null {
  const { limits, grant, route } = call;
  const { recordedAt, units } = grant;
  const own = k.budgets.log(KEY_BUDGET, k.controls.override(now)?.limits ?? limits, "refund");
  const routed = route === undefined ? null : k.budgets.log(route.name, route.limits, "refund");
  const rings = (own?.rings.length ?? 0) + (routed?.rings.length ?? 0);
  if (own === null || (route !== undefined && routed === null) || recordedAt.length !== rings) return null;
  const split = own.rings.length;
  let metered = false;
  if (units > 0) {
    k.budgets.write(KEY_BUDGET, own.giveBack(recordedAt.slice(0, split), units));
    if (route !== undefined && routed !== null)
      k.budgets.write(route.name, routed.giveBack(recordedAt.slice(split), units));
    metered = refundMeters(k, now, grant);
  }
  // Kept until the grant's record has left every window it counts in, and for a grant the key's meters counted, as
  // long as they take refunds of it (the idle alarm forgets it after): a refund sent again finds it.
  let longest = metered ? METER_REFUND_MS : 0;
  for (const l of [...own.limits, ...(routed?.limits ?? [])]) longest = Math.max(longest, l.windowMs);
  return Math.max(now, ...recordedAt) + longest;
}

/**
 * A settled leased grant's refund (`quotasOnly`): its units back to the quotas of the period of `at` (the lease's
 * grant), once per id, within {@link METER_REFUND_MS}; its windows keep their record (at its use, as any grant's).
 * When to forget its id; null (for a refund, not a settle) when the key keeps no quotas or the refund is too late.
 */
function refundQuotas(k: KeyStores, now: number, grant: RefundedGrant): number | null {
  const { at, units } = grant;
  const quotas = k.meters.stored().quotas;
  const inTime = quotas !== null && at !== undefined && Number.isSafeInteger(at) && now - at <= METER_REFUND_MS;
  if (inTime && units > 0) k.meters.write({ quotaRows: quotas.giveBack(now, at, units), credits: null });
  return inTime || grant.settle === true ? now + METER_REFUND_MS : null;
}

/**
 * Gives a refunded grant's units back to the key's meters: its quotas (the period of `at`, while it lasts), its credits
 * (unless a refill has come since), and its usage (the day of `at`; a settle's request still counts) — only within
 * {@link METER_REFUND_MS} of `at`. Returns whether the grant was one the meters counted.
 */
function refundMeters(k: KeyStores, now: number, grant: RefundedGrant): boolean {
  const { at, units } = grant;
  if (at === undefined || !Number.isSafeInteger(at) || now - at > METER_REFUND_MS) return false;
  const meters = k.meters.stored();
  if (meters.quotas !== null) k.meters.write({ quotaRows: meters.quotas.giveBack(now, at, units), credits: null });
  if (meters.credits !== null) k.meters.write({ quotaRows: null, credits: meters.credits.giveBack(units, at, now) });
  const usage = k.usage.refund(at, units, grant.settle === true ? 0 : 1);
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
