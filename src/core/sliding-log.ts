/**
 * @module The exact sliding-log limiter: one run-length ring of `(timestamp, cost)` slots per
 * key, shared by every limit `(N, W)` of the key, each limit keeping its own head and running
 * sum. Pure: time is passed in, nothing is imported from the runtime.
 *
 * Window semantics (integer milliseconds): at time `now` a grant at `t` counts toward a limit
 * with window `W` iff `t > now - W`.
 */

import { describe, formatDuration, MAX_DURATION_MS } from "./duration.ts";

/** One limit: at most `limit` cost units in every half-open interval of `windowMs` ms. */
export interface LimitSpec {
  /** Positive integer: the most cost that may be granted in any window. */
  readonly limit: number;
  /** Window length in whole milliseconds (1 … 366 days). */
  readonly windowMs: number;
  /** Policy name used in headers; defaults to `"<limit>/<window>"`, e.g. `"100/1s"`. */
  readonly name?: string;
}

/** The state of one limit after a decision. */
export interface LimitStatus {
  /** Policy name, e.g. `"per-second"`. */
  readonly name: string;
  /** The limit's `N`. */
  readonly limit: number;
  /** The limit's `W` in milliseconds. */
  readonly windowMs: number;
  /** Cost units that could still be granted right now (after this decision); never negative. */
  remaining: number;
  /**
   * Milliseconds until `remaining` next grows: when the oldest slot leaves the window or, while
   * the limit is used up, when a cost of 1 fits again. 0 when nothing is in the window.
   */
  resetMs: number;
  /** True when this limit alone would refuse this request. */
  exceeded: boolean;
}

/** A storage row: the slot a grant touched. Rows are keyed by `slot` (0 … capacity − 1). */
export interface SlotRow {
  /** Storage key, in `[0, capacity)`; a grant overwrites at most one row. */
  slot: number;
  /** The slot's time in integer milliseconds. */
  ts: number;
  /** Total cost granted in that millisecond. */
  cost: number;
}

/**
 * The outcome of {@link SlidingLog.decide}. The log reuses one instance for every call
 * (no allocation per call): copy what you keep before the next call.
 */
export interface Decision {
  /** Whether the request was granted (and recorded). */
  allowed: boolean;
  /** True when the cost exceeds some limit's `N`: it can never pass; `retryAfterMs` is `Infinity`. */
  neverAllowed: boolean;
  /** The cost asked for. */
  cost: number;
  /**
   * The time the decision was made at: `now`, floored, and never earlier than any earlier
   * decision's (after a restore: than the newest stored slot).
   */
  now: number;
  /** One entry per limit, in the order the limits were given. */
  readonly limits: readonly LimitStatus[];
  /**
   * 0 when allowed. Otherwise the exact wait: this request would be granted at
   * `now + retryAfterMs` if nothing else were granted meanwhile, and not a millisecond earlier.
   */
  retryAfterMs: number;
  /**
   * Absolute time (ms): no request of cost 1 can be granted before it. Equal to `now` when
   * one could be granted now. Only time frees capacity, so a cache may deny until then.
   */
  blockedUntil: number;
  /** When allowed: the one row to persist (upsert by `slot`). `null` when denied. */
  write: SlotRow | null;
}

/** Result of {@link SlidingLog.restore}. */
export interface Restored {
  log: SlidingLog;
  /**
   * True when the stored rows do not fit this log's layout (the limits changed its capacity):
   * delete every stored row and write {@link SlidingLog.rows} instead.
   */
  rewrite: boolean;
}

const INITIAL_SLOTS = 16;

/** Checks a limit set and returns it with names filled in. @throws RangeError naming the bad field */
export function normalizeLimits(limits: readonly LimitSpec[]): Required<LimitSpec>[] {
  if (!Array.isArray(limits) || limits.length === 0) {
    throw new RangeError("limits: expected at least one limit");
  }
  return limits.map((spec, i) => {
    const { limit, windowMs } = spec;
    if (!Number.isSafeInteger(limit) || limit < 1) {
      throw new RangeError(`limits[${i}].limit: expected a positive integer, got ${describe(limit)}`);
    }
    if (!Number.isSafeInteger(windowMs) || windowMs < 1 || windowMs > MAX_DURATION_MS) {
      throw new RangeError(
        `limits[${i}].windowMs: expected whole milliseconds from 1 to ${MAX_DURATION_MS}, got ${describe(windowMs)}`,
      );
    }
    return { limit, windowMs, name: spec.name ?? `${limit}/${formatDuration(windowMs)}` };
  });
}

/**
 * Slots a ring needs for these limits: `min(N, W + 1)` of the longest window (the smallest `N`
 * among limits sharing it). Every slot costs ≥ 1 and holds a distinct millisecond, so the
 * longest window never holds more.
 */
export function capacityFor(limits: readonly LimitSpec[]): number {
  const longest = longestIndex(limits);
  const spec = limits[longest] as LimitSpec;
  return Math.min(spec.limit, spec.windowMs + 1);
}

/**
 * The most slots one key may need (16 bytes each in memory: 64 MiB), so that one Durable
 * Object (128 MB) always fits its log. A larger limit cannot be tracked exactly per millisecond.
 */
export const MAX_CAPACITY = 4_194_304;

function longestIndex(limits: readonly LimitSpec[]): number {
  let best = 0;
  for (let i = 1; i < limits.length; i++) {
    const a = limits[i] as LimitSpec;
    const b = limits[best] as LimitSpec;
    if (a.windowMs > b.windowMs || (a.windowMs === b.windowMs && a.limit < b.limit)) best = i;
  }
  return best;
}

function nextPowerOfTwo(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/**
 * An exact sliding-window log for one key.
 *
 * Memory holds at most `capacity` slots (grown on demand in powers of two); each grant
 * touches one slot and reports it in {@link Decision.write}; a denial changes nothing.
 * Calls are O(1) amortised per limit (heads only move forward); a denial's exact retry time
 * costs O(cost) slots walked at most.
 */
export class SlidingLog {
  /** Storage rows are keyed `0 … capacity − 1`; memory never holds more slots than this. */
  readonly capacity: number;
  /** The limits, with names filled in, in the order given. */
  readonly limits: readonly Required<LimitSpec>[];

  // Ring storage in memory: a power-of-two array, indices masked.
  #ts: Float64Array;
  #cost: Float64Array;
  #mask: number;
  #maxSlots: number;
  // Per limit: physical index of its oldest slot in window, slot count, cost sum.
  readonly #head: Int32Array;
  readonly #count: Int32Array;
  readonly #used: Float64Array;
  readonly #windows: Float64Array;
  readonly #caps: Float64Array;
  /** Index of the longest limit; its window's slots are exactly the ring's slots. */
  readonly #longest: number;
  /** Time of the newest slot ever granted (−∞ when none). */
  #newestTs = Number.NEGATIVE_INFINITY;
  /**
   * The latest time decided at: the log's clock never goes back. A denial may have evicted
   * slots at a later `now`, so an earlier `now` must not see the window without them.
   */
  #clock = Number.NEGATIVE_INFINITY;
  /** Storage key of the newest slot. */
  #newestKey: number;
  readonly #decision: Decision;
  readonly #row: SlotRow = { slot: 0, ts: 0, cost: 0 };

  /** @throws RangeError when a limit is not a positive integer or a window is out of range */
  constructor(limits: readonly LimitSpec[]) {
    this.limits = normalizeLimits(limits);
    const n = this.limits.length;
    this.capacity = capacityFor(this.limits);
    if (this.capacity > MAX_CAPACITY) {
      const l = this.limits[longestIndex(this.limits)] as Required<LimitSpec>;
      throw new RangeError(
        `limits: ${l.limit} per ${formatDuration(l.windowMs)} needs up to ${this.capacity} slots per key, more than the ${MAX_CAPACITY} one Durable Object can hold; lower the limit or shorten the window`,
      );
    }
    this.#longest = longestIndex(this.limits);
    this.#maxSlots = nextPowerOfTwo(this.capacity);
    const initial = Math.min(this.#maxSlots, INITIAL_SLOTS);
    this.#ts = new Float64Array(initial);
    this.#cost = new Float64Array(initial);
    this.#mask = initial - 1;
    this.#head = new Int32Array(n);
    this.#count = new Int32Array(n);
    this.#used = new Float64Array(n);
    this.#windows = Float64Array.from(this.limits, (l) => l.windowMs);
    this.#caps = Float64Array.from(this.limits, (l) => l.limit);
    this.#newestKey = this.capacity - 1;
    this.#decision = {
      allowed: false,
      neverAllowed: false,
      cost: 0,
      now: 0,
      limits: this.limits.map((l) => ({
        name: l.name,
        limit: l.limit,
        windowMs: l.windowMs,
        remaining: l.limit,
        resetMs: 0,
        exceeded: false,
      })),
      retryAfterMs: 0,
      blockedUntil: 0,
      write: null,
    };
  }

  /**
   * Rebuilds a log from stored rows (any order). Keeps the newest `capacity` slots: with the
   * same limits the log behaves exactly as before; with changed limits it keeps the history
   * that still matters.
   */
  static restore(limits: readonly LimitSpec[], rows: Iterable<Readonly<SlotRow>>): Restored {
    const log = new SlidingLog(limits);
    const all: SlotRow[] = [];
    for (const r of rows) {
      if (Number.isSafeInteger(r.ts) && Number.isSafeInteger(r.cost) && r.cost > 0) {
        all.push({ slot: r.slot, ts: r.ts, cost: r.cost });
      }
    }
    all.sort((a, b) => a.ts - b.ts);
    const kept = all.length > log.capacity ? all.slice(all.length - log.capacity) : all;
    const cap = log.capacity;
    const first = kept[0]?.slot ?? 0;
    let rewrite = kept.length < all.length;
    for (let j = 0; j < kept.length && !rewrite; j++) {
      const row = kept[j] as SlotRow;
      if (row.slot !== (first + j) % cap || (j > 0 && row.ts === (kept[j - 1] as SlotRow).ts)) rewrite = true;
    }
    log.#load(kept, rewrite ? 0 : first);
    return { log, rewrite };
  }

  #load(rows: readonly SlotRow[], firstKey: number): void {
    this.#ensureSlots(rows.length);
    let total = 0;
    for (let j = 0; j < rows.length; j++) {
      const row = rows[j] as SlotRow;
      this.#ts[j] = row.ts;
      this.#cost[j] = row.cost;
      total += row.cost;
    }
    this.#head.fill(0);
    this.#count.fill(rows.length);
    this.#used.fill(total);
    const newest = rows[rows.length - 1];
    if (newest) {
      this.#newestTs = newest.ts;
      this.#clock = newest.ts;
      this.#newestKey = (firstKey + rows.length - 1) % this.capacity;
    }
  }

  /** The retained slots, oldest first, with their storage keys: what to write after a rewrite. */
  rows(): SlotRow[] {
    const n = this.#count[this.#longest] as number;
    const out: SlotRow[] = [];
    for (let j = 0; j < n; j++) {
      const p = ((this.#head[this.#longest] as number) + j) & this.#mask;
      out.push({
        slot: (this.#newestKey - (n - 1 - j) + this.capacity * 2) % this.capacity,
        ts: this.#ts[p] as number,
        cost: this.#cost[p] as number,
      });
    }
    return out;
  }

  /** Time of the newest granted slot, or `-Infinity` before the first grant. */
  get newestTs(): number {
    return this.#newestTs;
  }

  /** From this time on no limit counts any slot: the key's state can be deleted. `-Infinity` when empty. */
  get idleAt(): number {
    return this.#newestTs + (this.#windows[this.#longest] as number);
  }

  /** Slots currently allocated in memory (for measuring). */
  get allocatedSlots(): number {
    return this.#mask + 1;
  }

  /**
   * Decides one request of `cost` at time `now` and, when every limit allows it, records it.
   *
   * @param now integer milliseconds (fractions are floored; a time earlier than the log's clock counts as the clock)
   * @param cost a positive integer
   * @returns the log's reused {@link Decision}: valid until the next call
   * @throws RangeError for a cost that is not a positive safe integer or a `now` that is not finite
   */
  decide(now: number, cost = 1): Decision {
    if (!Number.isSafeInteger(cost) || cost < 1) {
      throw new RangeError(`cost: expected a positive integer, got ${describe(cost)}`);
    }
    if (!Number.isFinite(now)) throw new RangeError(`now: expected a finite time in ms, got ${describe(now)}`);
    let t = Math.floor(now);
    if (t < this.#clock) t = this.#clock;
    this.#clock = t;

    const d = this.#decision;
    const n = this.#head.length;
    let allowed = true;
    let never = false;
    for (let i = 0; i < n; i++) {
      this.#evict(i, t);
      const status = d.limits[i] as LimitStatus;
      const cap = this.#caps[i] as number;
      status.exceeded = (this.#used[i] as number) + cost > cap;
      if (status.exceeded) {
        allowed = false;
        if (cost > cap) never = true;
      }
    }

    d.allowed = allowed;
    d.neverAllowed = never;
    d.cost = cost;
    d.now = t;
    if (allowed) {
      d.write = this.#append(t, cost);
      d.retryAfterMs = 0;
    } else {
      d.write = null;
      d.retryAfterMs = never ? Number.POSITIVE_INFINITY : this.#freeAt(t, cost) - t;
    }
    let blockedUntil = t;
    for (let i = 0; i < n; i++) {
      const status = d.limits[i] as LimitStatus;
      status.remaining = Math.max(0, (this.#caps[i] as number) - (this.#used[i] as number));
      if ((this.#count[i] as number) === 0) {
        status.resetMs = 0;
        continue;
      }
      // `remaining` next grows when the oldest slot leaves, or, over the limit, once a cost of 1 fits.
      const free = this.#limitFreeAt(i, t, 1);
      if (free > blockedUntil) blockedUntil = free;
      const oldestLeaves = (this.#ts[this.#head[i] as number] as number) + (this.#windows[i] as number);
      status.resetMs = Math.max(free, oldestLeaves) - t;
    }
    d.blockedUntil = blockedUntil;
    return d;
  }

  /** Drops from limit `i`'s window every slot at or before `t − W`. */
  #evict(i: number, t: number): void {
    const cutoff = t - (this.#windows[i] as number);
    let head = this.#head[i] as number;
    let count = this.#count[i] as number;
    let used = this.#used[i] as number;
    while (count > 0 && (this.#ts[head] as number) <= cutoff) {
      used -= this.#cost[head] as number;
      head = (head + 1) & this.#mask;
      count--;
    }
    this.#head[i] = head;
    this.#count[i] = count;
    this.#used[i] = count === 0 ? 0 : used;
  }

  /** Records `cost` at `t` (all limits already evicted to `t`) and returns the row it touched. */
  #append(t: number, cost: number): SlotRow {
    const L = this.#longest;
    const row = this.#row;
    let count = this.#count[L] as number;
    const newest = ((this.#head[L] as number) + count - 1) & this.#mask;
    if (count > 0 && this.#ts[newest] === t) {
      this.#cost[newest] = (this.#cost[newest] as number) + cost;
      row.cost = this.#cost[newest] as number;
      // A slot at `t` is inside every window at `t`, so every limit already counts it.
      for (let i = 0; i < this.#head.length; i++) this.#used[i] = (this.#used[i] as number) + cost;
    } else {
      if (count === this.#mask + 1) {
        this.#grow();
        count = this.#count[L] as number;
      }
      const p = ((this.#head[L] as number) + count) & this.#mask;
      this.#ts[p] = t;
      this.#cost[p] = cost;
      this.#newestKey = (this.#newestKey + 1) % this.capacity;
      for (let i = 0; i < this.#head.length; i++) {
        if (this.#count[i] === 0) this.#head[i] = p;
        this.#count[i] = (this.#count[i] as number) + 1;
        this.#used[i] = (this.#used[i] as number) + cost;
      }
      this.#newestTs = t;
      row.cost = cost;
    }
    row.slot = this.#newestKey;
    row.ts = t;
    return row;
  }

  /** Doubles the in-memory ring, keeping slots in order from index 0. */
  #grow(): void {
    const size = this.#mask + 1;
    if (size >= this.#maxSlots) {
      throw new Error(`sliding log invariant broken: more than ${this.capacity} slots in the longest window`);
    }
    this.#ensureSlots(size * 2);
  }

  #ensureSlots(needed: number): void {
    const size = this.#mask + 1;
    if (needed <= size) return;
    const next = Math.min(this.#maxSlots, nextPowerOfTwo(needed));
    const ts = new Float64Array(next);
    const cost = new Float64Array(next);
    const base = this.#head[this.#longest] as number;
    const count = this.#count[this.#longest] as number;
    for (let j = 0; j < count; j++) {
      const p = (base + j) & this.#mask;
      ts[j] = this.#ts[p] as number;
      cost[j] = this.#cost[p] as number;
    }
    for (let i = 0; i < this.#head.length; i++) {
      // Every limit's slots are the newest `count[i]` of the ring.
      this.#head[i] = count - (this.#count[i] as number);
    }
    this.#ts = ts;
    this.#cost = cost;
    this.#mask = next - 1;
  }

  /** Earliest time ≥ `t` at which `cost` fits every limit if nothing else is granted (∞ if never). */
  #freeAt(t: number, cost: number): number {
    let at = t;
    for (let i = 0; i < this.#head.length; i++) {
      const free = this.#limitFreeAt(i, t, cost);
      if (free > at) at = free;
    }
    return at;
  }

  /** Earliest time ≥ `t` at which `cost` fits limit `i` (evicted to `t`) if nothing else is granted. */
  #limitFreeAt(i: number, t: number, cost: number): number {
    const cap = this.#caps[i] as number;
    if (cost > cap) return Number.POSITIVE_INFINITY;
    let excess = (this.#used[i] as number) + cost - cap;
    if (excess <= 0) return t;
    // Expire the oldest slots until enough cost has left the window; excess ≤ used, so this ends.
    let p = this.#head[i] as number;
    for (;;) {
      excess -= this.#cost[p] as number;
      if (excess <= 0) return (this.#ts[p] as number) + (this.#windows[i] as number);
      p = (p + 1) & this.#mask;
    }
  }
}
