/**
 * @module What an isolate reports about its leases (docs/design.md, "Settled leases"): per lease,
 * the units used since its last report and the offset of the last use from the lease's `sentAt`
 * (the object moves them from `issuedAt + L` to `issuedAt +` that offset), and the unused units of
 * leases given up. Used units are re-dated near a limit, and on every call that decides a request (the isolate
 * had no unit for it: the capacity they hold may be what that request needs). Far from every limit, on a
 * background refill, nobody needs the capacity they hold until their record, and re-dating would cost rows for
 * nothing.
 */

import type { LimitSpec } from "../core/limits.ts";
import { MAX_USE_GROUPS } from "../core/limits.ts";
import type { Settlement } from "../core/log.ts";
import { expire, type HeldLease, type KeyLeases, mergeGroups, unitsHeld } from "./held.ts";
import { headingNear } from "./lease-sizing.ts";

/** Settlements of one key's leases, to send to its object on a call of their own. */
export interface KeySettlements {
  /** The key's object name. */
  readonly name: string;
  /** The limits the leases were granted under (the object rebuilds its log for other limits). */
  readonly limits: readonly LimitSpec[];
  readonly settle: readonly Settlement[];
}

/** The groups of uses a lease is re-dated in by a call that decides a request far from every limit. */
export const FAR_USE_GROUPS = 2;

/** An isolate settles an idle key's leases on its own once it has not seen the key for this long (ms). */
export const IDLE_RETURN_MS = 1_000;

/**
 * The key's settlements for a call about to go out: every lease with units used since its last
 * settlement (near a limit, or when the call decides a request: `deciding`), and every expired one (its unused
 * units given back). They count as settled from now on: the call carries an id, and one not answered sends them again
 * with it until an answer comes (unanswered.ts); until then they stay where the object recorded them, which is later
 * (safe).
 */
export function settleForCall(e: KeyLeases, now: number, deciding = false): Settlement[] {
  expire(e, now);
  const nearNow = nearLimitNow(e, now);
  const near = deciding || nearNow;
  const out: Settlement[] = [];
  // Far from every limit a deciding call re-dates in fewer groups: each costs a row, and nobody is short of the
  // capacity a unit holds until its group's last use.
  const groups = nearNow ? MAX_USE_GROUPS : FAR_USE_GROUPS;
  // An expired lease is given up with this call: its uses are re-dated now or never (left at its record, ahead of
  // now, they would count in the windows of a burst after a quiet spell).
  for (const h of e.expired) out.push(...settlements(h, h.left, true, groups));
  e.expired = [];
  if (!near) return out;
  for (const h of e.held) out.push(...settlements(h, 0, true, groups));
  return out;
}

/**
 * The settlements of a key not seen here for {@link IDLE_RETURN_MS}, for a call of its own (null:
 * nothing worth a call): an idle isolate frees what the key's other isolates may need — only where it
 * matters, when the key had less than half of some limit left at the lease's grant.
 */
export function settleIdle(e: KeyLeases, now: number): KeySettlements | null {
  expire(e, now);
  const near = [...e.expired, ...e.held].filter((h) => nearAtGrant(e, h));
  // Far from every limit, an expired lease's unused units wait for the key's own next call, which gives them back
  // (`RateLimit` counts them as coming back); only ones with nothing to give back go.
  e.expired = e.expired.filter((h) => !near.includes(h) && h.left > 0);
  // A lease still valid (in `held`: `expire` moved the others) keeps its units; its uses are settled.
  const settle = near.flatMap((h) => settlements(h, e.held.includes(h) ? 0 : h.left));
  return settle.length > 0 ? { name: e.name, limits: e.limits, settle } : null;
}

/** The settlement of `leases`, each given up (its unused units back); null when there is nothing to settle. */
export function giveUp(e: KeyLeases, leases: readonly HeldLease[]): KeySettlements | null {
  const settle = leases.flatMap((h) => settlements(h, h.left));
  // Given back: none of them may be spent any more (a request still holding the entry would spend uncounted units).
  for (const h of leases) h.left = 0;
  return settle.length > 0 ? { name: e.name, limits: e.limits, settle } : null;
}

/**
 * A lease's settlements: its units used since the last one (unless `redate` is false), in at most `groups` groups
 * (held.ts, `spendFrom`), each at its own last use — and `unused` units given back; none when there is nothing to
 * report. The lease counts as settled (when `redate`).
 */
function settlements(h: HeldLease, unused: number, redate = true, groups = MAX_USE_GROUPS): Settlement[] {
  if (redate) mergeGroups(h, groups);
  // Whole milliseconds, rounded up: never earlier than the use.
  const at = (lastUseAt: number) => Math.max(0, Math.ceil(lastUseAt - h.sentAt));
  const base = { recordedAt: h.recordedAt, issuedAt: h.issuedAt };
  const out: Settlement[] = [];
  if (redate) {
    for (const g of h.earlier ?? []) {
      if (g.used > 0) out.push({ ...base, used: g.used, lastUseMs: at(g.lastUseAt), unused: 0 });
    }
  }
  const used = redate ? h.used : 0;
  if (used > 0 || unused > 0) out.push({ ...base, used, lastUseMs: at(h.lastUseAt), unused });
  if (redate) {
    h.used = 0;
    h.earlier = [];
    h.settledGrants = h.grants;
  }
  return out;
}

/**
 * Whether the key is near a limit: as this isolate last saw it (some limit had less than half left, counting the
 * units held here as left), or heading there (at its recent rate here it would use half of some limit a window).
 */
function nearLimitNow(e: KeyLeases, now: number): boolean {
  if (headingNear(e, e.view?.applied ?? e.limits, now)) return true;
  const view = e.view ?? e.held.at(-1) ?? e.expired.at(-1) ?? null;
  if (view === null) return false;
  const limits = view.applied ?? e.limits;
  const held = unitsHeld(e, now, view.applied);
  return view.limits.some((l, i) => 2 * (l.remaining + held) < (limits[i]?.limit ?? 0));
}

/** Whether the key had less than half of some limit left when the lease was granted. */
function nearAtGrant(e: KeyLeases, h: HeldLease): boolean {
  const limits = h.applied ?? e.limits;
  return h.limits.some((l, i) => 2 * (l.remaining + h.left) < (limits[i]?.limit ?? 0));
}
