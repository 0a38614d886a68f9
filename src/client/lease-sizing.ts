/**
 * @module How big a lease an isolate asks for, and when: the key's recent rate here, the lease that
 * rate would spend, and when the held leases need a refill (docs/design.md, "Leases"). Pure: the
 * entry's counters, the clock and the recent round trip are passed in.
 */

import { type LimitSpec, MIN_LEASE_UNITS } from "../core/limits.ts";

/** A lease to ask a key's object for (`units` 0: none). */
export interface LeaseAsk {
  readonly units: number;
  readonly lifetimeMs: number;
  /** The part of the lifetime that passes before the lease arrives (the recent round trip): the rest is spent in. */
  readonly leadMs: number;
}

export const NO_ASK: LeaseAsk = { units: 0, lifetimeMs: 0, leadMs: 0 };

/** A key's request counters here: what its rate is estimated from. */
export interface RateCounter {
  /** Requests seen, decayed with a 10 s time constant: about the key's rate per 10 s here. */
  score: number;
  /** Requests seen, decayed with a 100 ms time constant: follows a burst within a few requests. */
  burst: number;
  seenAt: number;
  /** Local time the key was first seen here (its rate is known over this long). */
  readonly firstSeen: number;
}

/** The time constant of the rate estimate (ms). */
const RATE_TAU_MS = 10_000;
/** The time constant of the burst estimate (ms). */
const BURST_TAU_MS = 100;
/** A key seen fewer times than this per time constant has no rate of its own here: the object sizes its lease. */
const MIN_SCORE = 2;

/**
 * A key with no rate here gets a lease only once it has been seen here again within about 5 s (its score at least
 * this: 1 + e^(−5.1 s / 10 s)). At its first request it gets none: the object would size that lease by the whole
 * key's rate, and an isolate that sees one of the key's requests now and then (its other isolates get the rest)
 * would hold the units unused until they expire or it vanishes.
 */
const SEEN_BEFORE_SCORE = 1.6;

/**
 * An isolate sizes a lease only for a key whose rate here would use {@link MIN_LEASE_UNITS} within this long (ms).
 * A slower key's lease would sit mostly unspent for tens of seconds, given back at the key's next call here or
 * stranded when the isolate vanishes, to save a call now and then.
 */
const MIN_SPEND_RATE_MS = 10_000;

/** A rate is trusted over a whole lifetime only once the key has been watched here this long (ms). */
const TRUST_AFTER_MS = 10 * BURST_TAU_MS;

/**
 * The share of its expected use a lease asks for: a lease that runs out before it expires is
 * replaced in the background and leaves nothing to give back (a give-back writes a row).
 */
const ASK_SHARE = 0.8;

/** The least lead (ms) a refill is asked with, however fast recent calls were. */
const MIN_LEAD_MS = 5;

/** A lease is asked for only when its lifetime is at least this many recent object round trips. */
const RTT_LIFETIMES = 4;
/** Deviations of the round trip a lease's lead adds to the mean (see {@link leaseToAsk}). */
const LEAD_DEVIATIONS = 4;

/** Counts one request of the key at `now`. */
export function countRequest(c: RateCounter, now: number): void {
  const dt = Math.max(0, now - c.seenAt);
  c.score = c.score * Math.exp(-dt / RATE_TAU_MS) + 1;
  c.burst = c.burst * Math.exp(-dt / BURST_TAU_MS) + 1;
  c.seenAt = now;
}

/**
 * The key's recent rate here (requests per ms): the higher of two estimates, so that a burst shows
 * within a few requests. Each leaves out the request just counted (n requests span n − 1 intervals;
 * one request after a quiet spell is no burst). The 10 s estimate is divided by what its decayed count
 * reaches over the time the key has been watched here (at least the burst estimate's 100 ms): the rate
 * since then, unbiased while it ramps up.
 */
export function rate(c: RateCounter, now: number): number {
  return Math.max(steadyRate(c, now), burstRate(c));
}

/** The key's rate here over the last ~10 s (requests per ms): see {@link rate}. */
function steadyRate(c: RateCounter, now: number): number {
  const watched = Math.max(now - c.firstSeen, BURST_TAU_MS);
  const reached = 1 - Math.exp(-watched / RATE_TAU_MS);
  return (c.score - 1) / (RATE_TAU_MS * reached);
}

/** The key's rate here over the last ~100 ms (requests per ms): see {@link rate}. */
function burstRate(c: RateCounter): number {
  return (c.burst - 1) / BURST_TAU_MS;
}

/** Whether at its recent rate here the key would use half of some limit within that limit's window. */
export function headingNear(c: RateCounter, limits: readonly LimitSpec[], now: number): boolean {
  return nearAt(rate(c, now), limits);
}

/** Whether `perMs` requests a millisecond would use half of some limit within that limit's window. */
function nearAt(perMs: number, limits: readonly LimitSpec[]): boolean {
  return limits.some((l) => 2 * perMs * l.windowMs >= l.limit);
}

/** Whether the key has no rate of its own here yet: its lease is sized from the object's log. */
export function sizedByObject(c: RateCounter): boolean {
  return c.score < MIN_SCORE;
}

/** What {@link leaseToAsk} reads besides the key's counters. */
export interface AskBounds {
  /** The plan's lease lifetime (ms); 0: no leases. */
  readonly lifetimeMs: number;
  /** `leases.max_units`. */
  readonly maxUnits: number;
  /** The least lifetime asked however briefly the key was watched (ms): the ring's slack. */
  readonly youngMs: number;
  /** The recent object round trip from this isolate (ms). */
  readonly rttMs: number;
  /** The mean deviation of recent round trips from `rttMs` (ms); 0 when absent. */
  readonly rttDevMs?: number;
  /**
   * The limits the key is far below as this isolate last saw it (the object would grant a whole lease), those the
   * object decided against; null (or absent) when it is not. Unless the key's rate here heads near one of them, the rate is
   * trusted over the whole lifetime (docs/design.md, "Young keys").
   */
  readonly farBelow?: readonly LimitSpec[] | null;
}

/**
 * The lease to ask for (docs/design.md, "Leases" and "Young keys").
 *
 * - Its units: {@link ASK_SHARE} of what this isolate would spend at its recent rate for the key, whole units only,
 *   at most `maxUnits`. A lease capped by `maxUnits` asks for the time it takes to spend them.
 * - Its spending time: at most `lifetimeMs` less the round trip it takes to arrive (`leadMs`). Unless the rate is
 *   trusted, also at most as long as this isolate has watched the key (at least `youngMs`): near a limit, or in a
 *   burst, a rate seen for 20 ms says little about the next 10 s, and units held unused are missing elsewhere.
 * - Trusted: the key is far below every limit (`farBelow`) and not heading near one at its rate here, has been
 *   watched here for {@link TRUST_AFTER_MS}, and its 10 s estimate is at least its 100 ms one (no burst). The object bounds what all isolates hold to a share of the
 *   headroom, and used units are settled at their use, so such a lease may live long.
 * - Its lifetime: `leadMs` plus the spending time.
 * - None (`units` 0) under {@link MIN_LEASE_UNITS}, or for a key too slow for {@link MIN_SPEND_RATE_MS}.
 * - A key without a rate here ({@link sizedByObject}) asks for `maxUnits` over `lifetimeMs`, for the object to size
 *   from the key's own rate; at its first request here ({@link SEEN_BEFORE_SCORE}) it asks for none.
 */
export function leaseToAsk(c: RateCounter, now: number, b: AskBounds): LeaseAsk {
  const { lifetimeMs, maxUnits } = b;
  if (lifetimeMs <= 0) return NO_ASK;
  // A lease arrives a round trip into its lifetime: one that would be mostly over by then is not worth asking.
  if (lifetimeMs < RTT_LIFETIMES * b.rttMs) return NO_ASK;
  // The lease's answer is on its way for up to a round trip and four deviations (as TCP's retransmission timeout, RFC
  // 6298): a lease led by the mean alone arrives with none of its spending time left half the time the object is slow,
  // its units counted at the object for nothing until the next call gives them back.
  const leadMs = Math.ceil(b.rttMs + LEAD_DEVIATIONS * (b.rttDevMs ?? 0));
  if (sizedByObject(c)) return c.score < SEEN_BEFORE_SCORE ? NO_ASK : { units: maxUnits, lifetimeMs, leadMs };
  const steady = steadyRate(c, now);
  const burst = burstRate(c);
  const here = Math.max(steady, burst);
  if (here * MIN_SPEND_RATE_MS < MIN_LEASE_UNITS) return NO_ASK;
  const perMs = ASK_SHARE * here;
  const watched = now - c.firstSeen;
  const trusted = Boolean(b.farBelow && watched >= TRUST_AFTER_MS && steady >= burst && !nearAt(here, b.farBelow));
  const life = trusted ? lifetimeMs - leadMs : Math.min(lifetimeMs - leadMs, Math.max(b.youngMs, watched));
  const units = Math.floor(perMs * life);
  if (units < MIN_LEASE_UNITS) return NO_ASK;
  if (units <= maxUnits) return { units, lifetimeMs: leadMs + life, leadMs };
  return { units: maxUnits, lifetimeMs: leadMs + Math.min(life, Math.ceil(maxUnits / perMs)), leadMs };
}

/**
 * Whether to ask for the next lease now: the held ones (`left` units, valid until `until`) would run
 * out — in units at the key's recent rate, or in time — within two round trips: just in time for the
 * next to arrive, and late enough that little of the held ones is left to give back.
 */
export function refillDue(c: RateCounter, now: number, held: { left: number; until: number }, rttMs: number): boolean {
  const lead = 2 * Math.max(rttMs, MIN_LEAD_MS);
  return held.left <= Math.ceil(rate(c, now) * lead) || held.until - now <= lead;
}
