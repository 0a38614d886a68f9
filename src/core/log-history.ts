/**
 * @module What an operator's chart shows of a key's log (log.ts): the units one limit's ring holds per bucket of its
 * window, and those recorded ahead of now. Reads only; pure.
 */

import { describe } from "./duration.ts";
import type { Ring } from "./ring.ts";

/** Grants over one limit's window, per bucket: what an operator's chart shows. */
export interface History {
  /** The window's start (exclusive, ms): bucket `b` holds slots in `(startMs + b·bucketMs, startMs + (b+1)·bucketMs]`. */
  readonly startMs: number;
  readonly bucketMs: number;
  readonly counts: readonly number[];
  /** Units recorded after `now` (leased ahead, or rounded up to a tick): they count already. */
  readonly ahead: number;
}

/**
 * Units recorded in `ring` per bucket of a window of `windowMs` ending at `now`: `buckets` counts of
 * `windowMs / buckets` ms each (oldest first), and `ahead`, the units recorded after `now`
 * (leases and rounding up).
 *
 * @throws RangeError for a count of buckets that is not a positive integer
 */
export function historyOf(ring: Ring, windowMs: number, now: number, buckets: number): History {
  if (!Number.isSafeInteger(buckets) || buckets < 1)
    throw new RangeError(`buckets: expected a positive integer, got ${describe(buckets)}`);
  const t = Math.floor(now);
  const start = t - windowMs;
  const bucketMs = windowMs / buckets;
  const counts = new Array<number>(buckets).fill(0);
  let ahead = 0;
  for (const r of ring.rows()) {
    if (r.ts <= start) continue;
    if (r.ts > t) ahead += r.cost;
    else {
      const b = Math.min(buckets - 1, Math.floor((r.ts - start - 1) / bucketMs));
      counts[b] = (counts[b] as number) + r.cost;
    }
  }
  return { startMs: start, bucketMs, counts, ahead };
}
