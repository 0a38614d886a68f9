/**
 * @module Limits, their ticks, and how they share rings. Pure: no runtime imports.
 *
 * A limit `(N, W)` is tracked on a ring of slots at multiples of its tick. Limits with the same
 * tick share one ring. Every bound on memory and storage follows from the numbers here.
 */

import { describe, formatDuration, MAX_DURATION_MS } from "./duration.ts";

/** One limit as configured: at most `limit` cost units in every half-open interval of `windowMs` ms. */
export interface LimitSpec {
  /** Positive safe integer: the most cost that may be granted in any window. */
  readonly limit: number;
  /** Window length in whole milliseconds (1 … 366 days). */
  readonly windowMs: number;
  /** Grants are recorded at their time rounded up to a multiple of this (ms); default {@link defaultTickMs}. */
  readonly tickMs?: number;
}

/** A limit with its tick filled in. */
export interface Limit extends LimitSpec {
  readonly tickMs: number;
}

/** The most slots one ring may need: 20 bytes each in memory (time, cost, storage key), one row each in storage. */
export const MAX_RING_SLOTS = 2048;

/**
 * The most slots one key may need over all its rings (default ticks use at most two rings, so
 * only explicit ticks can reach it): at most 80 KiB of slot arrays plus 16 KiB of free storage
 * keys per key, and at most this many rows to read when the object wakes.
 */
export const MAX_KEY_SLOTS = 4096;

/**
 * Slack in each ring for slots recorded ahead of now (ms): a ring holds the tick positions of its
 * longest window plus this, 1/32 of the key's shortest window. Leases may live longer; when the
 * slack is used up a grant joins the next later slot instead of taking a new one (later is safe).
 */
export const RING_SLACK_DIVISOR = 32;

/** The longest lease lifetime any key may get (ms), whatever the configuration says. */
export const MAX_LEASE_MS = 60_000;

/**
 * The units leased out to all isolates together stay at most this fraction of each limit's
 * headroom (what would be left under it with nothing leased): a burst after a quiet spell finds
 * the rest at the object, and units stranded in an isolate that died cost at most this share.
 */
export const LEASE_HEADROOM_SHARE = 1 / 2;

/**
 * One lease carries at most this fraction of the smallest limit: a limit of a few units a window
 * gets no leases (the units of one would hold much of it, up to a lifetime longer than a
 * per-request grant), and an isolate that vanishes with a lease strands at most this share.
 */
export const LEASE_LIMIT_DIVISOR = 8;

/**
 * A key is far below its limits while at least this share of every limit's headroom is free: its
 * leases live the whole lifetime asked and may carry {@link FAR_LEASE_FACTOR} times
 * {@link maxLeaseUnits}.
 */
export const FAR_BELOW_FREE = 3 / 4;

/**
 * Below this share of some limit's headroom free, the object grants no lease: between it and {@link FAR_BELOW_FREE}
 * a lease's spending time and units shrink in proportion to the free share, to nothing here.
 */
export const NO_LEASE_BELOW_FREE = 1 / 4;

/**
 * The share of the spending time (and the units) asked for that a lease gets when `free` is the least share of a
 * limit's headroom free: all of it {@link FAR_BELOW_FREE far below} every limit, none under
 * {@link NO_LEASE_BELOW_FREE}, in proportion between. The object sizes leases by it; an isolate reads from it what a
 * lease call will bring.
 */
export function leaseScale(free: number): number {
  return Math.min(1, Math.max(0, (free - NO_LEASE_BELOW_FREE) / (FAR_BELOW_FREE - NO_LEASE_BELOW_FREE)));
}

/**
 * How many times {@link maxLeaseUnits} a lease may carry while the key is far below every limit:
 * an ordinary key then spends a lease over seconds (a call per ~20 grants instead of ~10), and the
 * headroom share still bounds what all isolates hold together.
 */
export const FAR_LEASE_FACTOR = 2;

/**
 * Below {@link FAR_BELOW_FREE} of a limit free, a lease is spent within this fraction of that limit's window. Units
 * spent over a time `s` and settled at the last use hold their window's capacity up to `s` longer than per-request
 * grants would, and units held unspent are missing elsewhere for as long: near a limit, where the key's other
 * requests need that capacity, `s` stays a small part of the window.
 */
export const NEAR_SPEND_DIVISOR = 8;

/**
 * The clock-rate margin on a lease (ms): an isolate stops spending it this long before `sentAt + lifetimeMs`, and a
 * settled unit is recorded this long after `issuedAt + lastUseMs`. It covers the isolate's and the object's clocks
 * running at rates up to 2 % apart (their offsets never matter).
 */
export function leaseMargin(ms: number): number {
  return 1 + Math.floor(ms / 50);
}

/** The most units one lease may carry under these limits near a limit: 1/8 of the smallest, floored. */
export function maxLeaseUnits(limits: readonly LimitSpec[]): number {
  let smallest = Number.POSITIVE_INFINITY;
  for (const l of limits) smallest = Math.min(smallest, l.limit);
  return Math.floor(smallest / LEASE_LIMIT_DIVISOR);
}

/**
 * The most units a first lease carries: one asked by an isolate new to the key, which may see
 * little of its traffic (sized by the object from the key's recent rate).
 */
export const FIRST_LEASE_UNITS = 4;

/**
 * The least time a lease's units may be spent over (ms), however few units and however fast the key's requests
 * come: a few milliseconds is less than an isolate under a burst takes to hand them out (docs/design.md, "What real
 * clients do").
 */
export const MIN_SPEND_MS = 50;

/**
 * A lease's uses since its last settlement are reported in at most this many groups, each settled at its own last
 * use (src/client/held.ts, `spendFrom`): uses in different milliseconds start groups of their own, and past this many
 * the two neighbouring groups whose merging dates the fewest unit-milliseconds later are merged. Near a limit a lease
 * carries a few units, so its uses are each dated at their own time; a pause before a burst stays apart.
 */
export const MAX_USE_GROUPS = 4;

/**
 * The fewest units worth a lease. A lease costs a call and a row: one unit saves nothing over
 * asking per request.
 */
export const MIN_LEASE_UNITS = 2;

/** The longest lease lifetime the limits allow (ms): the longest window, at most {@link MAX_LEASE_MS}. */
export function maxLeaseMs(limits: readonly LimitSpec[]): number {
  let longest = 0;
  for (const l of limits) longest = Math.max(longest, l.windowMs);
  return Math.min(longest, MAX_LEASE_MS);
}

/** The ring slack of these limits (ms): {@link RING_SLACK_DIVISOR}. */
export function ringSlackMs(limits: readonly LimitSpec[]): number {
  let shortest = Number.POSITIVE_INFINITY;
  for (const l of limits) shortest = Math.min(shortest, l.windowMs);
  return Math.floor(shortest / RING_SLACK_DIVISOR);
}

/**
 * Distinct multiples of `tickMs` a ring gives a window of `windowMs`: the slots in
 * `(now − W, now + slack + tick)`, at most `⌊(W + slack) / tick⌋ + 2` of them.
 */
function tickSlots(windowMs: number, slackMs: number, tickMs: number): number {
  return Math.floor((windowMs + slackMs) / tickMs) + 2;
}

/**
 * Default ticks for the limits that have none, so that every configuration fits: a limit that fits
 * {@link MAX_RING_SLOTS} slots at `1ms` gets `1ms` (exact); the others share one coarser tick, the
 * smallest whole number of ms that fits the longest of them. Defaults thus use at most two rings.
 */
function defaultTicks(specs: readonly LimitSpec[]): number[] {
  const slack = ringSlackMs(specs);
  const fine = specs.map((l) => Math.min(l.limit, tickSlots(l.windowMs, slack, 1)) <= MAX_RING_SLOTS);
  let coarse = 1;
  specs.forEach((l, i) => {
    if (!fine[i]) coarse = Math.max(coarse, Math.ceil((l.windowMs + slack) / (MAX_RING_SLOTS - 2)));
  });
  return specs.map((_, i) => (fine[i] ? 1 : coarse));
}

/** The default tick of a key with this one limit: `1ms` where it fits, else about 1/2000 of the window. */
export function defaultTickMs(limit: number, windowMs: number): number {
  return defaultTicks([{ limit, windowMs }])[0] as number;
}

/** The limits that share one ring: those with the same tick. */
export interface RingLayout {
  readonly tickMs: number;
  /** Indices into the key's limits, in order. */
  readonly limits: readonly number[];
  /** Storage keys `0 … capacity − 1`; the ring never holds more slots than this. */
  readonly capacity: number;
}

/**
 * Groups limits by tick (first appearance order) and sizes each ring: `min(N, tick slots)` of its
 * longest window (the smallest `N` among limits sharing that window). Every slot but a returned
 * lease's costs ≥ 1, and every slot is at a distinct multiple of the tick (more slots ahead of now
 * than the slack gives join a later one: {@link Ring.record}).
 */
export function ringLayout(limits: readonly Limit[]): RingLayout[] {
  const slack = ringSlackMs(limits);
  const byTick = new Map<number, number[]>();
  limits.forEach((l, i) => {
    const group = byTick.get(l.tickMs);
    if (group) group.push(i);
    else byTick.set(l.tickMs, [i]);
  });
  return [...byTick].map(([tickMs, members]) => {
    let w = 0;
    let n = Number.POSITIVE_INFINITY;
    for (const i of members) {
      const l = limits[i] as Limit;
      if (l.windowMs > w) [w, n] = [l.windowMs, l.limit];
      else if (l.windowMs === w) n = Math.min(n, l.limit);
    }
    return { tickMs, limits: members, capacity: Math.min(n, tickSlots(w, slack, tickMs)) };
  });
}

/**
 * Checks limits and fills in default ticks.
 *
 * @throws RangeError naming the bad field (`limits[i].limit`, `.windowMs`, `.tickMs`, or `limits`
 *   when the key would need more than {@link MAX_KEY_SLOTS} slots)
 */
export function normalizeLimits(specs: readonly LimitSpec[]): Limit[] {
  if (!Array.isArray(specs) || specs.length === 0) {
    throw new RangeError("limits: expected at least one limit");
  }
  specs.forEach((spec, i) => {
    if (typeof spec !== "object" || spec === null)
      throw new RangeError(`limits[${i}]: expected a limit, got ${describe(spec)}`);
    const { limit, windowMs } = spec;
    if (!Number.isSafeInteger(limit) || limit < 1) {
      throw new RangeError(`limits[${i}].limit: expected a positive integer, got ${describe(limit)}`);
    }
    if (!Number.isSafeInteger(windowMs) || windowMs < 1 || windowMs > MAX_DURATION_MS) {
      throw new RangeError(
        `limits[${i}].windowMs: expected whole milliseconds from 1 to ${MAX_DURATION_MS}, got ${describe(windowMs)}`,
      );
    }
    const { tickMs } = spec;
    if (tickMs !== undefined && (!Number.isSafeInteger(tickMs) || tickMs < 1 || tickMs > windowMs)) {
      throw new RangeError(
        `limits[${i}].tickMs: expected whole milliseconds from 1 to the window (${windowMs}), got ${describe(tickMs)}`,
      );
    }
  });
  const defaults = defaultTicks(specs);
  const limits = specs.map(
    (l, i): Limit => ({ limit: l.limit, windowMs: l.windowMs, tickMs: l.tickMs ?? (defaults[i] as number) }),
  );
  const rings = ringLayout(limits);
  for (const r of rings) {
    if (r.capacity > MAX_RING_SLOTS) {
      const i = r.limits.reduce((a, b) => ((limits[b] as Limit).windowMs > (limits[a] as Limit).windowMs ? b : a));
      const l = limits[i] as Limit;
      const slack = ringSlackMs(limits);
      const fits = Math.ceil((l.windowMs + slack) / (MAX_RING_SLOTS - 2));
      throw new RangeError(
        `limits[${i}].tickMs: ${l.limit} per ${formatDuration(l.windowMs)} at a tick of ${formatDuration(l.tickMs)} needs up to ${r.capacity} slots per key, more than ${MAX_RING_SLOTS}; use a tick of at least ${formatDuration(fits)}`,
      );
    }
  }
  const total = rings.reduce((sum, r) => sum + r.capacity, 0);
  if (total > MAX_KEY_SLOTS) {
    throw new RangeError(
      `limits: ${rings.length} different ticks need ${total} slots per key, more than ${MAX_KEY_SLOTS}; give limits the same tick so they share a ring, or coarser ticks`,
    );
  }
  return limits;
}
