/**
 * @module What a key's object counts beside its sliding limits (docs/design.md, "Calendar quotas"): calendar quotas
 * (src/core/quota.ts) and prepaid credits (src/core/credits.ts), decided with the limits all or nothing. Pure: time
 * is passed in.
 */

import { combine, type TakenTogether, takeTogether } from "./budgets.ts";
import type { CreditAccount, CreditState } from "./credits.ts";
import type { Decision } from "./decision.ts";
import type { Ask, KeyLog, Settlement } from "./log.ts";
import type { QuotaBook, QuotaRow } from "./quota.ts";

/** A key's meters: its quotas and its credits (null: none). */
export interface Meters {
  readonly quotas: QuotaBook | null;
  readonly credits: CreditAccount | null;
}

/** Whether a request's cost fits each kind of meter. */
export interface MeterFit {
  readonly quotas: boolean;
  readonly credits: boolean;
}

/** Whether `cost` fits every meter at `now`. */
export function fitOf(meters: Meters, now: number, cost: number): MeterFit {
  return { quotas: meters.quotas?.fits(now, cost) ?? true, credits: meters.credits?.fits(now, cost) ?? true };
}

/**
 * The decision `d` of the sliding limits (granted, or what they would say) with the meters after it: refused when a
 * meter did not `fit` its cost (nothing was recorded), waiting until every quota fits it and the credits do (at
 * their next refill, or never: only a top-up helps), and no request of cost 1 passing before each used-up quota's next
 * period. Credits never hold a request back in a deny cache: a top-up must count at once.
 */
export function withMeters(d: Decision, meters: Meters, fit: MeterFit): Decision {
  const { now, cost } = d;
  const { quotas, credits } = meters;
  const allowed = d.allowed && fit.quotas && fit.credits;
  const wait = quotas?.wait(now, cost) ?? { never: false, fitsAt: now, oneFitsAt: now };
  const out: { -readonly [K in keyof Decision]: Decision[K] } = {
    ...d,
    allowed,
    blockedUntil: Math.max(d.blockedUntil, wait.oneFitsAt),
  };
  if (quotas) out.quotas = quotas.statuses(now, cost, allowed);
  if (credits) out.credits = { balance: credits.balance(now), exceeded: !fit.credits };
  if (allowed) return out;
  out.neverAllowed = d.neverAllowed || wait.never;
  const fitsAt = Math.max(wait.fitsAt, credits?.fitsAt(now, cost) ?? now);
  out.retryAfterMs = out.neverAllowed ? Number.POSITIVE_INFINITY : Math.max(d.retryAfterMs, fitsAt - now);
  out.lease = null;
  delete out.recordedAt;
  return out;
}

/**
 * `ask` with its lease cut to what the meters have room for at `now` (their `leaseRoom`): the units they have left
 * after the cost, spent before a quota's period ends. The caller's lifetime runs from before it asked, so its last
 * use comes before `now + lifetime`, which stays before the end.
 */
export function leaseWithin<A extends Ask>(
  ask: A,
  room: { readonly units: number; readonly endsAt: number },
  now: number,
): A {
  if (!ask.leaseUnits) return ask;
  const leaseMs = Math.max(0, Math.min(ask.leaseMs ?? 0, room.endsAt - now - 1));
  const leaseUnits = Math.min(ask.leaseUnits, room.units);
  if (leaseUnits < 1 || leaseMs < 1) return { ...ask, leaseUnits: 0, leaseMs: 0, leaseLeadMs: 0 };
  return { ...ask, leaseUnits, leaseMs, leaseLeadMs: Math.min(ask.leaseLeadMs ?? 0, leaseMs) };
}

/** The rows a decision changed in the meters: the quotas' (null: unchanged) and the credits' (null: unchanged). */
export interface MeterWrites {
  readonly quotaRows: readonly QuotaRow[] | null;
  readonly credits: CreditState | null;
}

/**
 * Gives the unused units of settled leases back to the meters: to the quotas of the period of their issue (while it
 * lasts), to the credits unless a refill has come since. Settlements that are not whole numbers are skipped (the key's
 * log refuses them first: {@link takeMetered}).
 */
export function giveBackUnused(meters: Meters, now: number, settle: readonly Settlement[]): MeterWrites {
  let quotaRows: QuotaRow[] | null = null;
  let credits: CreditState | null = null;
  for (const s of Array.isArray(settle) ? settle : []) {
    if (!Number.isSafeInteger(s?.unused) || s.unused < 1 || !Number.isSafeInteger(s.issuedAt)) continue;
    const given = meters.quotas?.giveBack(now, s.issuedAt, s.unused) ?? [];
    if (given.length > 0) quotaRows = given;
    credits = meters.credits?.giveBack(s.unused, s.issuedAt, now) ?? credits;
  }
  return { quotaRows, credits };
}

/** What {@link takeMetered} decided: the logs' rows (in the order of the logs) and the meters'. */
export type TakenMetered = TakenTogether & MeterWrites;

/** The later of two writes of the same meters (the second's where it changed anything). */
function then(a: MeterWrites, b: Partial<MeterWrites>): MeterWrites {
  return { quotaRows: b.quotaRows ?? a.quotaRows, credits: b.credits ?? a.credits };
}

/**
 * Decides `ask` against the logs (the key's; with a route's, per request) and the key's meters, all or nothing
 * (docs/design.md, "Calendar quotas"): the unused units of leases settled with it go back to the meters first; a cost
 * a meter refuses records nothing (the settlements still apply to the key's log); a lease is cut to the units every
 * meter has left and to the end of the quotas' period; a grant counts its cost and its lease's units in every meter,
 * at the decision's time.
 *
 * @param now the caller's clock; the decision's is the latest of it and the logs' (they never go back)
 */
export function takeMetered(logs: readonly KeyLog[], meters: Meters, now: number, ask: Ask): TakenMetered {
  const [log, routed] = logs as [KeyLog, KeyLog | undefined];
  const t = Math.max(now, ...logs.map((l) => l.clock));
  // The key's log settles first (it refuses a settlement that is not one before the meters change), then the meters.
  const settled = (ask.settle ?? []).flatMap((s) => log.settle(t, s));
  const given = giveBackUnused(meters, t, ask.settle ?? []);
  const settleOnly = (): TakenTogether["writes"] => [settled];
  const fit = fitOf(meters, t, ask.cost);
  if (!fit.quotas || !fit.credits) {
    const writes = settleOnly();
    const checked = combine(logs.map((l) => l.check(t, ask.cost)));
    return { decision: withMeters(checked, meters, fit), writes, ...given };
  }
  const rooms = [meters.quotas?.leaseRoom(t, ask.cost), meters.credits?.leaseRoom(t, ask.cost)];
  let room = { units: Number.POSITIVE_INFINITY, endsAt: Number.POSITIVE_INFINITY };
  for (const r of rooms)
    if (r) room = { units: Math.min(room.units, r.units), endsAt: Math.min(room.endsAt, r.endsAt) };
  const asked = leaseWithin({ ...ask, settle: [] }, room, t);
  if (asked.cost === 0 && !asked.leaseUnits) {
    // A lease alone, and no room for one.
    return { decision: withMeters(log.peek(t), meters, fit), writes: settleOnly(), ...given };
  }
  let taken: TakenTogether;
  if (routed === undefined) {
    const out = log.take(t, asked);
    taken = { decision: out.decision, writes: [out.writes] };
  } else taken = takeTogether(logs, t, asked.cost);
  const { decision } = taken;
  const [own = [], ...others] = taken.writes;
  const writes = settled.length > 0 ? [[...settled, ...own], ...others] : taken.writes;
  const units = decision.allowed ? decision.cost + (decision.lease?.units ?? 0) : 0;
  // A lease asked alone and not granted (the limits near) takes nothing.
  if (units === 0) return { decision: withMeters(decision, meters, fit), writes, ...given };
  const spent = then(given, {
    quotaRows: meters.quotas?.take(decision.now, units) ?? null,
    credits: meters.credits?.take(decision.now, units) ?? null,
  });
  return { decision: withMeters(decision, meters, fit), writes, ...spent };
}
