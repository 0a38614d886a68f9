/**
 * @module The exact log of one key: its limits, their rings, and the decision. Pure: time is
 * passed in.
 *
 * Window semantics (integer ms): at time `now` a unit recorded at `t` counts toward a limit of
 * window `W` iff `t > now − W` — including units recorded in the future. A unit is never recorded
 * earlier than it can be used (per-request grants at `now` rounded up to the tick, leases at
 * `now + lifetime` rounded up, and on a ring with no free slot at the next later slot's time),
 * and every decision is evaluated at the real, monotone `now`. Then no window of real use times
 * ever holds more than `N` (docs/design.md, "Future-dated grants").
 */

import type { Decision } from "./decision.ts";
import { describe } from "./duration.ts";
import { type Limit, type LimitSpec, maxLeaseMs, maxLeaseUnits, normalizeLimits, ringLayout } from "./limits.ts";
import { decisionAt, freeAt, type Layout, type Place } from "./log-decision.ts";
import { type History, historyOf } from "./log-history.ts";
import { type Leasing, leaseFor, NO_LEASE } from "./log-lease.ts";
import { loadRows } from "./log-restore.ts";
import { longestWindow, recordUses, settleLease } from "./log-settle.ts";
import {
  type Ask,
  checkAsk,
  checkSettlement,
  checkUses,
  type Outcome,
  type Settlement,
  type Use,
} from "./log-types.ts";
import { Ring, type SlotRow } from "./ring.ts";

export type { History } from "./log-history.ts";
export { type Ask, checkUses, type Outcome, type Settlement, type Use } from "./log-types.ts";

/** Result of {@link KeyLog.restore}. */
export interface Restored {
  readonly log: KeyLog;
  /**
   * True when the stored rows do not fit this layout (the limits changed): delete every stored
   * row and write {@link KeyLog.rows} instead. False on a plain restart.
   */
  readonly rewrite: boolean;
}

export class KeyLog {
  /** The limits, with ticks filled in, in the order given. */
  readonly limits: readonly Limit[];
  readonly rings: readonly Ring[];
  /** The longest lease lifetime these limits allow. */
  readonly maxLeaseMs: number;
  /** The most units one lease may carry under these limits. */
  readonly maxLeaseUnits: number;
  readonly #places: readonly Place[];
  /** What a decision (log-decision.ts) and a lease (log-lease.ts) are made from. */
  readonly #layout: Layout & Leasing;
  readonly #minLimit: number;
  readonly #shortestWindow: number;
  /** The latest time decided at: decisions never go back in time. */
  #clock = Number.NEGATIVE_INFINITY;
  /** The last time a request that could ever fit was refused: no leases for a shortest window after it. */
  #refusedAt = Number.NEGATIVE_INFINITY;

  /**
   * @param specs the key's sliding limits; none for a key limited by calendar quotas alone (src/core/quota.ts): its
   *   log then grants every cost, records nothing and leases nothing
   * @throws RangeError naming the bad field
   */
  constructor(specs: readonly LimitSpec[]) {
    this.limits = Array.isArray(specs) && specs.length === 0 ? [] : normalizeLimits(specs);
    this.maxLeaseMs = maxLeaseMs(this.limits);
    this.maxLeaseUnits = maxLeaseUnits(this.limits);
    const places: Place[] = [];
    this.rings = ringLayout(this.limits).map((layout) => {
      const ring = new Ring(
        layout.tickMs,
        layout.capacity,
        layout.limits.map((i) => this.limits[i] as Limit),
      );
      layout.limits.forEach((i, j) => {
        places[i] = { ring, j };
      });
      return ring;
    });
    this.#places = places;
    this.#minLimit = Math.min(...this.limits.map((l) => l.limit));
    this.#layout = { limits: this.limits, places, minLimit: this.#minLimit, maxLeaseUnits: this.maxLeaseUnits };
    this.#shortestWindow = Math.min(...this.limits.map((l) => l.windowMs));
  }

  /**
   * Rebuilds a log from stored rows (any order) at time `now`. With the same limits it behaves
   * exactly as before the restart. With changed limits it keeps what still matters: a ring whose
   * tick changed is seeded from an old ring's rows rounded up to the new tick (later is safe), and
   * a ring that shrank keeps its newest slots.
   */
  static restore(limits: readonly LimitSpec[], rows: Iterable<SlotRow>, now: number): Restored {
    const log = new KeyLog(limits);
    const rewrite = loadRows(log, rows, now);
    return { log, rewrite };
  }

  /** Every slot of every ring, oldest first per ring: what to write after a rewrite. */
  rows(): SlotRow[] {
    return this.rings.flatMap((r) => r.rows());
  }

  /** From this time on no limit counts any slot: the key's state can be deleted. −∞ when empty. */
  get idleAt(): number {
    let at = Number.NEGATIVE_INFINITY;
    for (const ring of this.rings) at = Math.max(at, ring.newest + longestWindow(ring, this));
    return at;
  }

  /** The log's clock: the latest time it decided at. */
  get clock(): number {
    return this.#clock;
  }

  /**
   * Decides a request of `ask.cost` at `now` and, when every limit allows it, records it —
   * together with up to `ask.leaseUnits` more units leased ahead for up to `ask.leaseMs`, sized by
   * how far the key is from each limit (docs/design.md, "Leases"): the units leased out to all
   * callers together stay within {@link LEASE_HEADROOM_SHARE} of every limit's headroom, and a
   * lease lives its full lifetime only while the key is {@link FAR_BELOW_FREE far below} every limit, and is
   * spent over a shorter time with fewer units below that.
   * Near a limit leases shrink to nothing, and none are granted for a shortest window after a
   * refusal: then this is the per-request path.
   *
   * @param now integer milliseconds (fractions are floored; a time before the clock counts as the clock)
   * @throws RangeError for a cost, lease or `now` out of range
   */
  take(now: number, ask: Ask): Outcome {
    const { cost, leaseUnits = 0, leaseMs = 0, leaseLeadMs = 0, settle = NOTHING } = ask;
    checkAsk(ask);
    const t = this.#advance(now);
    // Settled first, so that the decision and the limits it reports see them.
    let given: readonly SlotRow[] = NOTHING;
    for (const s of settle) {
      const rows = this.settle(t, s);
      if (rows.length > 0) given = [...given, ...rows];
    }
    const allowed = this.rings.every((r) => r.fits(cost));
    if (!allowed) {
      if (cost <= this.#minLimit) this.#refusedAt = t;
      return { decision: decisionAt(this.#layout, t, cost, { allowed: false }), writes: given };
    }

    // A key refused within its shortest window is at its limit: leases there would hold units
    // others are waiting for, so it gets the per-request path until the pressure is gone.
    const { units: extra, lifetimeMs: lifetime } =
      leaseUnits > 0 && leaseMs > 0 && t - this.#refusedAt >= this.#shortestWindow
        ? leaseFor(this.#layout, t, cost, {
            want: leaseUnits,
            lifetimeMs: Math.min(leaseMs, this.maxLeaseMs),
            leadMs: leaseLeadMs,
            fromLog: ask.leaseFromLog === true,
          })
        : NO_LEASE;
    const units = cost + extra;
    if (units === 0) return { decision: decisionAt(this.#layout, t, cost, { allowed: true }), writes: given };
    const at = extra > 0 ? t + lifetime : t;
    const recorded = this.rings.map((r) => r.record(at, units, t));
    const writes = given.length > 0 ? [...given, ...recorded] : recorded;
    const recordedAt = recorded.map((w) => w.ts);
    const lease = extra > 0 ? { units: extra, lifetimeMs: lifetime, recordedAt } : null;
    return {
      decision: decisionAt(this.#layout, t, cost, {
        allowed: true,
        lease,
        recordedAt: cost > 0 ? recordedAt : undefined,
      }),
      writes,
    };
  }

  /**
   * Settles one lease at `now` (see {@link Settlement}): moves its used units to `issuedAt + lastUseMs` plus the
   * margin, when that is earlier than their record, and takes back its unused units. Never earlier than a use;
   * a settled unit counts in the windows that still hold its use, and is taken out once its use has left every
   * window (log-settle.ts). A lease recorded under other limits (other rings) is not here: its units stay where they
   * are and expire.
   *
   * @returns the rows to write, in order
   * @throws RangeError for counts or times out of range
   */
  settle(now: number, s: Settlement): SlotRow[] {
    if (!Array.isArray(s?.recordedAt) || s.recordedAt.length !== this.rings.length) return [];
    checkSettlement(s);
    const t = this.#advance(now);
    return settleLease(this, t, s);
  }

  /**
   * Records units used elsewhere (see {@link Use}) at `now`: each at `now − ageMs` plus one millisecond and the
   * clock-rate margin ({@link leaseMargin}) — never earlier than its use, since the call reporting it was sent after
   * the use and reached this log after that. Recorded whatever the limits say (those units passed): the key then
   * waits until they leave its windows. A use that has left every window of a ring counts nowhere there and is
   * skipped; one older than a shorter window of a ring counts in its longer ones only.
   *
   * @returns the rows to write, in order
   * @throws RangeError for a list that is not of uses (whole ms ≥ 0, whole units ≥ 1)
   */
  record(now: number, uses: readonly Use[]): SlotRow[] {
    checkUses(uses);
    const t = this.#advance(now);
    return recordUses(this, t, uses);
  }

  /**
   * Gives back `units` of a lease that will not be used (`recordedAt` as the lease said). Slots
   * that have left every window are skipped: those units count nowhere any more.
   *
   * @returns the rows to write (cost 0: the slot is gone)
   */
  giveBack(recordedAt: readonly number[], units: number): SlotRow[] {
    if (!Number.isSafeInteger(units) || units < 1)
      throw new RangeError(`units: expected a positive integer, got ${describe(units)}`);
    if (!Array.isArray(recordedAt) || recordedAt.length !== this.rings.length) {
      throw new RangeError(`recordedAt: expected ${this.rings.length} times, one per ring`);
    }
    const writes: SlotRow[] = [];
    this.rings.forEach((ring, r) => {
      const row = ring.giveBack(recordedAt[r] as number, units);
      if (row) writes.push(row);
    });
    return writes;
  }

  /** The key's state at `now` without recording anything (as a denial of cost 0 would see it). */
  peek(now: number): Decision {
    const t = this.#advance(now);
    return decisionAt(this.#layout, t, 0, { allowed: true });
  }

  /**
   * Whether a request of `cost` would be granted at `now`, recording nothing: the decision
   * {@link take} would make, without its lease and its write.
   *
   * @throws RangeError for a cost that is not a whole number ≥ 1
   */
  check(now: number, cost: number): Decision {
    if (!Number.isSafeInteger(cost) || cost < 1) {
      throw new RangeError(`cost: expected a whole number ≥ 1, got ${describe(cost)}`);
    }
    const t = this.#advance(now);
    return decisionAt(this.#layout, t, cost, { allowed: this.rings.every((r) => r.fits(cost)) });
  }

  /**
   * Refuses a request of `cost` at `now` because an operator blocked the key until `until`:
   * records nothing. Nothing remains under any limit before `until`, and the wait is exact: the
   * later of `until` and the time the cost fits every limit.
   */
  refuse(now: number, cost: number, until: number): Decision {
    const t = this.#advance(now);
    const end = Math.max(t, Math.floor(until));
    const free = cost > this.#minLimit ? Number.POSITIVE_INFINITY : Math.max(end, freeAt(this.#places, t, cost));
    const open = decisionAt(this.#layout, t, 0, { allowed: true });
    return {
      ...open,
      allowed: false,
      neverAllowed: cost > this.#minLimit,
      cost,
      retryAfterMs: free - t,
      blockedUntil: Math.max(open.blockedUntil, end),
      limits: open.limits.map((l) => ({ remaining: 0, resetMs: Math.max(l.resetMs, end - t), exceeded: false })),
      blockedBy: end,
    };
  }

  /**
   * Units recorded under limit `i` per bucket of its window ending at `now` (log-history.ts, {@link historyOf}). Reads
   * only.
   */
  history(i: number, now: number, buckets: number): History {
    const limit = this.limits[i];
    if (!limit) throw new RangeError(`limit: expected an index below ${this.limits.length}, got ${describe(i)}`);
    return historyOf((this.#places[i] as Place).ring, limit.windowMs, now, buckets);
  }

  /**
   * Forgets every slot at or before `now` (an operator's reset). Slots after `now` stay: they
   * hold units leased to callers that may still spend them. The caller deletes the same rows
   * from storage (`ts ≤` the returned time).
   *
   * @returns the clock the slots were forgotten through
   */
  forget(now: number): number {
    const t = this.#advance(now);
    for (const r of this.rings) r.dropThrough(t);
    return t;
  }

  /** Moves the clock to `now` (never back) and evicts every ring to it. */
  #advance(now: number): number {
    if (!Number.isFinite(now)) throw new RangeError(`now: expected a finite time in ms, got ${describe(now)}`);
    const t = Math.max(Math.floor(now), this.#clock);
    this.#clock = t;
    for (const r of this.rings) r.evict(t);
    return t;
  }
}

/** No returns, no rows: shared, never written to (a call allocates nothing for what it does not have). */
const NOTHING: readonly never[] = Object.freeze([]);
