/**
 * @module Settling a key's log (log.ts) after the fact: a lease's used units moved to their last use and its unused
 * ones given back (docs/design.md, "Settled leases"), and units used elsewhere recorded at their use (docs/design.md,
 * "When the object cannot answer"). Never earlier than a use; pure, time passed in.
 */

import { type Limit, leaseMargin } from "./limits.ts";
import type { Settlement, Use } from "./log-types.ts";
import type { Ring, SlotRow } from "./ring.ts";

/** A log's limits and the rings they live in (a `KeyLog`). */
export interface Rings {
  readonly limits: readonly Limit[];
  readonly rings: readonly Ring[];
}

/**
 * Settles one lease in `log` at its clock `t` (see {@link Settlement}, checked, its rings the log's): moves its used
 * units to `issuedAt + lastUseMs` plus the margin, when that is earlier than their record, and takes back its unused
 * units. Never earlier than a use: a settled unit counts in the windows that still hold its use (ring.ts, `record`),
 * and is taken out once its use has left every window of its ring. A use that has left the ring's shortest window,
 * whose record has too, stays where it is recorded: moved, it would count less only in the longer windows, a little
 * earlier, for two rows.
 *
 * @returns the rows to write, in order
 */
export function settleLease(log: Rings, t: number, s: Settlement): SlotRow[] {
  const { used, unused, issuedAt, lastUseMs } = s;
  // One more millisecond for clocks read in whole milliseconds (the use may lie up to 1 ms past its reading).
  const at = issuedAt + lastUseMs + 1 + leaseMargin(lastUseMs);
  const writes: SlotRow[] = [];
  log.rings.forEach((ring, r) => {
    const from = s.recordedAt[r] as number;
    // Used units whose use has left every window of the ring count nowhere any more: taken out, not moved.
    if (used > 0 && at <= t - longestWindow(ring, log)) {
      const row = ring.giveBack(from, used);
      if (row) writes.push(row);
    } else if (used > 0 && Math.max(at, from) > t - shortestWindow(ring, log)) {
      writes.push(...ring.move(from, at, used, t));
    }
    const row = unused > 0 ? ring.giveBack(from, unused) : null;
    if (row) writes.push(row);
  });
  return writes;
}

/**
 * Records units used elsewhere (see {@link Use}, checked) in `log` at its clock `t`: each at `t − ageMs` plus one
 * millisecond and the clock-rate margin ({@link leaseMargin}). A use that has left every window of a ring counts
 * nowhere there and is skipped; one older than a shorter window of it counts in the longer ones only.
 *
 * @returns the rows to write, in order
 */
export function recordUses(log: Rings, t: number, uses: readonly Use[]): SlotRow[] {
  const writes: SlotRow[] = [];
  for (const { ageMs, units } of uses) {
    const at = t - ageMs + 1 + leaseMargin(ageMs);
    for (const ring of log.rings) {
      if (at <= t - longestWindow(ring, log)) continue;
      writes.push(ring.record(at, units, t));
    }
  }
  return writes;
}

/** The shortest window of the limits that live in `ring`. */
function shortestWindow(ring: Ring, log: Rings): number {
  let w = Number.POSITIVE_INFINITY;
  for (const l of log.limits) if (l.tickMs === ring.tickMs) w = Math.min(w, l.windowMs);
  return w;
}

/** The longest window of the limits that live in `ring`: a slot older than it counts nowhere. */
export function longestWindow(ring: Ring, log: Rings): number {
  let w = 0;
  for (const l of log.limits) if (l.tickMs === ring.tickMs) w = Math.max(w, l.windowMs);
  return w;
}
