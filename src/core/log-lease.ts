/**
 * @module How large a lease a key's log (log.ts) grants, and for how long (docs/design.md, "Headroom leases"): sized
 * from each limit's headroom and what is leased out already. Policy only: the invariant of "Future-dated grants" does
 * not depend on it. Pure.
 */

import {
  FAR_BELOW_FREE,
  FAR_LEASE_FACTOR,
  FIRST_LEASE_UNITS,
  LEASE_HEADROOM_SHARE,
  type Limit,
  leaseScale,
  MIN_LEASE_UNITS,
  MIN_SPEND_MS,
  NEAR_SPEND_DIVISOR,
} from "./limits.ts";
import type { Place } from "./log-decision.ts";

/** What a lease is sized from: a log's limits, where each lives, and the most units one lease may carry. */
export interface Leasing {
  readonly limits: readonly Limit[];
  readonly places: readonly Place[];
  readonly maxLeaseUnits: number;
}

/** What a caller asked for: `want` units spent over `lifetimeMs` less `leadMs`; `fromLog`, a caller new to the key. */
export interface LeaseWanted {
  readonly want: number;
  readonly lifetimeMs: number;
  readonly leadMs: number;
  readonly fromLog: boolean;
}

/** A lease's units and lifetime (ms); no units: no lease. */
export interface LeaseSized {
  readonly units: number;
  readonly lifetimeMs: number;
}

/** No lease. */
export const NO_LEASE: LeaseSized = { units: 0, lifetimeMs: 0 };

/**
 * The lease a grant of `cost` at `t` may carry (the rings evicted to `t`, the cost fitting). The caller asked for
 * `want` units to spend over `lifetimeMs` less `leadMs` (the round trip before the lease reaches it): at most
 * `want` units, at most the log's `maxLeaseUnits` ({@link FAR_LEASE_FACTOR} times that while the key is
 * {@link FAR_BELOW_FREE far below} every limit), and at most {@link LEASE_HEADROOM_SHARE} of each limit's headroom
 * less what is leased out already. Below far, the spending time and the units with it are scaled down with the
 * least free share ({@link leaseScale}: none under 1/4); fewer units than `want` get a spending time in proportion, so that the caller
 * spends them at the rate it asked at rather than giving them back. `fromLog` (a caller new to the key): none below
 * far; else `want` is only a cap; at most {@link FIRST_LEASE_UNITS}, and at most what the key uses in the spending
 * time at its fastest recent rate over its windows (units ahead of now left out), for the time the key takes to
 * use them.
 * The lifetime is the lead plus the spending time. Fewer than {@link MIN_LEASE_UNITS} units: no lease.
 */
export function leaseFor(log: Leasing, t: number, cost: number, asked: LeaseWanted): LeaseSized {
  const { want, lifetimeMs, leadMs, fromLog } = asked;
  let units = want;
  let free = 1;
  /** The key's fastest recent rate (units per ms) over its limits' windows, units ahead of now left out. */
  let rate = 0;
  /** The longest time the units may be spent over (ms): {@link NEAR_SPEND_DIVISOR}. */
  let most = Number.POSITIVE_INFINITY;
  log.places.forEach((p, i) => {
    const ahead = p.ring.ahead(t);
    const left = p.ring.remaining(p.j) - cost;
    const headroom = left + ahead;
    const limit = log.limits[i] as Limit;
    units = Math.min(units, left, Math.floor(headroom * LEASE_HEADROOM_SHARE) - ahead);
    free = Math.min(free, headroom / limit.limit);
    // A lease spent over a longer time holds more of a limit's window: near a limit, a short part of it.
    if (headroom < FAR_BELOW_FREE * limit.limit) most = Math.min(most, Math.floor(limit.windowMs / NEAR_SPEND_DIVISOR));
    rate = Math.max(rate, (limit.limit - p.ring.remaining(p.j) - ahead) / limit.windowMs);
  });
  const far = free >= FAR_BELOW_FREE;
  // Limits too small for a lease near them (under 16) get none far below them either.
  const perLease = log.maxLeaseUnits;
  units = Math.min(units, far && perLease >= MIN_LEASE_UNITS ? FAR_LEASE_FACTOR * perLease : perLease);
  const lead = Math.min(leadMs, lifetimeMs);
  const scale = leaseScale(free);
  let spend = Math.floor((lifetimeMs - lead) * scale);
  if (fromLog) {
    // A caller new to the key: a few units at most (it may see little of the key's traffic), for about
    // as long as the whole key takes to use them; none near a limit, where units it leaves unused (or takes away
    // when it vanishes) are missing from the key's budget for as long as they are held.
    if (!far) return NO_LEASE;
    units = Math.min(units, FIRST_LEASE_UNITS, Math.floor(rate * spend));
    if (units > 0) spend = Math.min(spend, Math.ceil(units / rate));
  } else {
    // The caller asked for what it spends in the time asked: a shorter time carries fewer units, and fewer units
    // last it less long.
    units = Math.min(units, Math.floor(want * scale));
    spend = Math.floor(((lifetimeMs - lead) * Math.max(0, units)) / want);
  }
  if (spend > most) {
    units = Math.floor((units * most) / spend);
    spend = most;
  }
  // A lease cut to a few units at a burst's rate would be spent over a few milliseconds: it would expire while the
  // requests it is for are still on their way back from the object, refused, and hold its units for nothing. Its
  // spending time is at least MIN_SPEND_MS (within what was asked): units used are settled at their use, and units
  // left go back with the next call.
  spend = Math.max(spend, Math.min(MIN_SPEND_MS, lifetimeMs - lead, most));
  return units < MIN_LEASE_UNITS || spend < 1 ? NO_LEASE : { units, lifetimeMs: lead + spend };
}
