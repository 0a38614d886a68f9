/**
 * @module What an isolate holds of a key: the leases its object granted ahead of use, its latest
 * answer about the key, and the counters its leases are sized from (the lease table's entries).
 */

import type { LimitStatus, NamedLimit } from "../core/decision.ts";
import { type LimitSpec, leaseScale, MAX_USE_GROUPS } from "../core/limits.ts";
import type { CallSlot, SettlingCall } from "./lease-calls.ts";
import type { RateCounter } from "./lease-sizing.ts";

/** Units of a lease spent and not yet settled, and the local time of the last of them. */
export interface UseGroup {
  used: number;
  lastUseAt: number;
}

/** The object's answer that came with a lease, as this isolate keeps it. */
export interface HeldLease {
  /** Unique: names the lease in the handles of the grants spent from it (a refund finds it by this). */
  readonly id: string;
  /** Grants spent from it so far: each one's id is the lease's and this count. */
  grants: number;
  /** The count of grants whose uses a settlement has re-dated: those are refunded by nobody (their record moved). */
  settledGrants?: number;
  /** Ids of its grants refunded to it (each is refunded once). */
  refunded?: Set<string>;
  /** Units still to spend. */
  left: number;
  /** Units spent since the lease was last settled. */
  used: number;
  /** Local time of the last of those uses. */
  lastUseAt: number;
  /**
   * Groups of units spent before the ones in `used`, not yet settled, oldest first (at most
   * {@link MAX_USE_GROUPS} − 1): each settled apart, at its own last use, not at the later uses' (a unit used before
   * a quiet spell would otherwise count as used at the burst after it).
   */
  earlier?: UseGroup[];
  /** Local time from which the lease may no longer be spent. */
  readonly expiresAt: number;
  /** Where the object recorded it. */
  readonly recordedAt: readonly number[];
  /** The object's clock when it granted the lease. */
  readonly issuedAt: number;
  /** Local time the lease was asked at. */
  readonly sentAt: number;
  /** The key's limits as the object saw them right after granting it. */
  readonly limits: readonly LimitStatus[];
  /** The limits it was granted under when an operator's override, not the plan, applied. */
  readonly applied: readonly NamedLimit[] | null;
}

/** The object's latest answer about a key, as this isolate saw it. */
export interface View {
  /** The key's limits right after that decision (every unit leased out counted as used). */
  readonly limits: readonly LimitStatus[];
  /** The object's clock when it decided. */
  readonly decidedAt: number;
  /** Local time the call was sent at (`resetMs` counts down from it). */
  readonly sentAt: number;
  /** The limits it decided against when an operator's override, not the plan, applied. */
  readonly applied: readonly NamedLimit[] | null;
}

/** What the lease table knows of one key. */
export interface KeyLeases extends RateCounter, CallSlot {
  readonly name: string;
  /** The key's limits when it was last seen. */
  limits: readonly LimitSpec[];
  /** Leases being spent, oldest (first to expire) first. */
  readonly held: HeldLease[];
  /** Leases that expired here with units used but not settled, or left unused: settled with the key's next call. */
  expired: HeldLease[];
  /** The object's latest answer about the key: with the units held here, what `RateLimit` says. */
  view: View | null;
  /** Local time before which no lease is asked: the object had none to give. */
  quietUntil: number;
  /** Unused units given back by calls still out: counted as free in `RateLimit` until their answer. */
  givingBack: number;
  /** The key's latest call carrying settlements (lease-calls.ts, {@link SettlingCall}); none yet when missing. */
  settling?: SettlingCall;
}

/** Whether two operators' override lists are the same limits (null: none, the plan's apply). */
export function sameOverride(a: readonly NamedLimit[] | null, b: readonly NamedLimit[] | null): boolean {
  if (a === b) return true;
  if (a === null || b === null || a.length !== b.length) return false;
  return a.every((l, i) => {
    const m = b[i] as NamedLimit;
    return l.limit === m.limit && l.windowMs === m.windowMs && l.tickMs === m.tickMs && l.name === m.name;
  });
}

/** The units of the key's leases valid at `now` under `applied` limits: what this isolate may still grant. */
export function unitsHeld(e: KeyLeases, now: number, applied: readonly NamedLimit[] | null): number {
  let units = 0;
  for (const h of e.held) if (now < h.expiresAt && sameOverride(h.applied, applied)) units += h.left;
  return units;
}

/**
 * The unused units of the key's leases expired at `now` under `applied` limits, not yet given back: the key's next call
 * gives them back before its decision, so with the units held they are what that call finds (`RateLimit`'s `r`).
 */
export function unitsReturning(e: KeyLeases, now: number, applied: readonly NamedLimit[] | null): number {
  let units = 0;
  for (const h of e.expired) if (sameOverride(h.applied, applied)) units += h.left;
  for (const h of e.held) if (now >= h.expiresAt && sameOverride(h.applied, applied)) units += h.left;
  return units;
}

/** Moves the key's leases expired at `now` out of `held`, keeping those with anything to settle in `expired`. */
export function expire(e: KeyLeases, now: number): void {
  while (e.held.length > 0 && now >= (e.held[0] as HeldLease).expiresAt) {
    const gone = e.held.shift() as HeldLease;
    if (gone.left > 0 || unsettled(gone) > 0) e.expired.push(gone);
  }
}

/**
 * The share of a lease ask the key's object is expected to grant, by its own rule ({@link leaseScale}) applied to
 * its latest answer about the key (units held here counted as free). No lease is asked for at 0, and a request waits
 * for a lease call only for the units expected to come. A wrong guess costs a round trip, never a unit. Each call
 * refreshes the answer.
 */
export function leaseShare(e: KeyLeases, now: number): number {
  const view = e.view;
  if (view === null) return 1;
  const limits = view.applied ?? e.limits;
  // Units held here, and unused ones on their way back to the object, are free as far as the object will know.
  const held = unitsHeld(e, now, view.applied) + unitsReturning(e, now, view.applied) + e.givingBack;
  let free = 1;
  view.limits.forEach((l, i) => {
    const limit = limits[i]?.limit ?? 0;
    if (limit > 0) free = Math.min(free, (l.remaining + held) / limit);
  });
  return leaseScale(free);
}

/** The units spent from `h` and not yet settled: in its latest group of uses, and before it. */
export function unsettled(h: HeldLease): number {
  let units = h.used;
  for (const g of h.earlier ?? []) units += g.used;
  return units;
}

/**
 * Counts `cost` units spent from `h` at `now`. A use in a later millisecond than the last starts a new group; past
 * {@link MAX_USE_GROUPS} groups the two neighbours whose merging costs least are merged (the earlier one's units then
 * dated at the later one's last use, which is safe: later), so a pause keeps the uses before it apart.
 */
export function spendFrom(h: HeldLease, cost: number, now: number): void {
  if (h.used > 0 && now > h.lastUseAt) {
    const earlier = h.earlier ?? [];
    earlier.push({ used: h.used, lastUseAt: h.lastUseAt });
    h.earlier = earlier;
    h.used = 0;
    if (earlier.length >= MAX_USE_GROUPS) h.used = mergeCheapest(earlier, now);
  }
  h.left -= cost;
  h.used += cost;
  h.lastUseAt = now;
}

/** Merges `h`'s groups of uses, the cheapest neighbours first, until at most `groups` are left (the latest counted). */
export function mergeGroups(h: HeldLease, groups: number): void {
  const earlier = h.earlier ?? [];
  while (earlier.length > 0 && earlier.length >= groups) h.used += mergeCheapest(earlier, h.lastUseAt);
}

/**
 * Merges the neighbouring pair of `groups` (followed by a latest group used at `latest`) whose merging dates the fewest
 * unit-milliseconds later: the earlier group's units times the gap to the later one's last use. Returns the units
 * merged into the latest group (0 when the pair was inside `groups`).
 */
function mergeCheapest(groups: UseGroup[], latest: number): number {
  let best = groups.length - 1;
  let bestCost = (groups[best] as UseGroup).used * (latest - (groups[best] as UseGroup).lastUseAt);
  for (let i = 0; i < groups.length - 1; i++) {
    const a = groups[i] as UseGroup;
    const cost = a.used * ((groups[i + 1] as UseGroup).lastUseAt - a.lastUseAt);
    if (cost < bestCost) [best, bestCost] = [i, cost];
  }
  const gone = groups.splice(best, 1)[0] as UseGroup;
  const next = groups[best];
  if (!next) return gone.used;
  next.used += gone.used;
  return 0;
}
