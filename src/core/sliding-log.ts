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
 *
 * Only `allowed` is stored by `decide`; every other field (and those of `limits[i]` and `write`)
 * is an own enumerable accessor that computes its value from the log when read, so a caller
 * pays only for what it reads. The values are those of the last decision (nothing else changes
 * the log), and spreading or `JSON.stringify` copies them like plain fields. A value assigned
 * to such a field is kept until the next decision.
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

// Per-limit state at offset `i × STRIDE`: HEAD and COUNT in `SlidingLog.idx` (integers), USED,
// WINDOW and CAP in `SlidingLog.state` (doubles); the same offsets index both arrays.
/** Ring index (even) of the limit's oldest slot in its window. */
const HEAD = 0;
/** Slots in the limit's window. */
const COUNT = 1;
/** Cost in the limit's window. */
const USED = 2;
const WINDOW = 3;
const CAP = 4;
const STRIDE = 5;
// After the limits, at `state[end + …]`:
/** The latest time decided at: the log's clock never goes back. */
const CLOCK = 0;
/** Time of the newest slot ever granted (−∞ when none). */
const NEWEST = 1;
/** The smallest limit: a cost above it is never allowed. */
const MIN_CAP = 2;
/** The last decision's cost, negated when it was denied. */
const LAST = 3;
const TAIL = 4;

function throwCost(cost: unknown): never {
  throw new RangeError(`cost: expected a positive integer, got ${describe(cost)}`);
}

function throwNow(now: unknown): never {
  throw new RangeError(`now: expected a finite time in ms, got ${describe(now)}`);
}

/** Hidden key of a decision's (limit status', row's) link to its log. */
const COMPUTED = Symbol("SlidingLog.computed");

/** What a computed field needs: the log, a limit's state offset, and values written to such fields. */
interface Computed {
  readonly log: SlidingLog;
  readonly o: number;
  readonly written: Map<string, unknown>;
  /** The decision (`seq`) the written values belong to. */
  writtenAt: number;
}

interface HasComputed {
  readonly [COMPUTED]: Computed;
}

/**
 * An exact sliding-window log for one key.
 *
 * Memory holds at most `capacity` slots (grown on demand in powers of two); each grant
 * touches one slot and reports it in {@link Decision.write}; a denial changes nothing.
 * Calls are O(1) amortised per limit (heads only move forward); a denial's exact retry time
 * costs O(cost) slots walked at most.
 *
 * `decide` does only what the grant or denial needs: evict, compare, append, and store
 * `allowed`. The rest of the {@link Decision} (`retryAfterMs`, `blockedUntil`, `now`, `cost`,
 * `neverAllowed`, `write` and its fields, each limit's `remaining`, `resetMs`, `exceeded`) is
 * computed when read, from the log's state, which nothing but the next `decide` changes: the
 * values are those of the last decision.
 */
export class SlidingLog {
  /** Storage rows are keyed `0 … capacity − 1`; memory never holds more slots than this. */
  readonly capacity: number;
  /** The limits, with names filled in, in the order given. */
  readonly limits: readonly Required<LimitSpec>[];

  // Plain (TS `private`) fields: V8 ran `#private` fields slower (see BENCHMARKS.md). Every double
  // lives in a Float64Array, so storing one never boxes it.

  /** The slots, interleaved: `ring[2k]` = time, `ring[2k + 1]` = cost; a power-of-two count, indices masked. */
  private ring: Float64Array;
  /** `ring.length − 1`: masks an even ring index into the ring. */
  private mask: number;
  private readonly maxSlots: number;
  /** Per limit `i` at `i × STRIDE`: USED, WINDOW, CAP; then CLOCK, NEWEST, MIN_CAP, LAST at `end`. */
  private readonly state: Float64Array;
  /** Per limit `i` at `i × STRIDE`: HEAD and COUNT (the other three entries are unused). */
  private readonly idx: Int32Array;
  /** `limits.length × STRIDE`. */
  private readonly end: number;
  /** State offset of the longest limit; its window's slots are exactly the ring's slots. */
  private readonly longest: number;
  /** Storage key of the newest slot. */
  private newestKey: number;
  /** Decisions made (mod 2³²): a value written to a computed field holds while this is unchanged. */
  private seq = 0;
  private readonly decision: Decision;
  private readonly row: SlotRow;

  /** @throws RangeError when a limit is not a positive integer or a window is out of range */
  constructor(limits: readonly LimitSpec[]) {
    this.limits = normalizeLimits(limits);
    const n = this.limits.length;
    this.capacity = capacityFor(this.limits);
    const longest = longestIndex(this.limits);
    if (this.capacity > MAX_CAPACITY) {
      const l = this.limits[longest] as Required<LimitSpec>;
      throw new RangeError(
        `limits: ${l.limit} per ${formatDuration(l.windowMs)} needs up to ${this.capacity} slots per key, more than the ${MAX_CAPACITY} one Durable Object can hold; lower the limit or shorten the window`,
      );
    }
    this.longest = longest * STRIDE;
    this.maxSlots = nextPowerOfTwo(this.capacity);
    const initial = Math.min(this.maxSlots, INITIAL_SLOTS);
    this.ring = new Float64Array(2 * initial);
    this.mask = 2 * initial - 1;
    this.end = n * STRIDE;
    const state = new Float64Array(this.end + TAIL);
    let minCap = Number.POSITIVE_INFINITY;
    for (let i = 0; i < n; i++) {
      const l = this.limits[i] as Required<LimitSpec>;
      state[i * STRIDE + WINDOW] = l.windowMs;
      state[i * STRIDE + CAP] = l.limit;
      if (l.limit < minCap) minCap = l.limit;
    }
    state[this.end + CLOCK] = Number.NEGATIVE_INFINITY;
    state[this.end + NEWEST] = Number.NEGATIVE_INFINITY;
    state[this.end + MIN_CAP] = minCap;
    this.state = state;
    this.idx = new Int32Array(this.end);
    this.newestKey = this.capacity - 1;
    this.row = this.makeRow();
    this.decision = this.makeDecision();
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
    log.load(kept, rewrite ? 0 : first);
    return { log, rewrite };
  }

  private load(rows: readonly SlotRow[], firstKey: number): void {
    this.ensureSlots(rows.length);
    const ring = this.ring;
    let total = 0;
    for (let j = 0; j < rows.length; j++) {
      const row = rows[j] as SlotRow;
      ring[2 * j] = row.ts;
      ring[2 * j + 1] = row.cost;
      total += row.cost;
    }
    const state = this.state;
    const idx = this.idx;
    for (let o = 0; o < this.end; o += STRIDE) {
      idx[o + HEAD] = 0;
      idx[o + COUNT] = rows.length;
      state[o + USED] = total;
    }
    const newest = rows[rows.length - 1];
    if (newest) {
      state[this.end + NEWEST] = newest.ts;
      state[this.end + CLOCK] = newest.ts;
      this.newestKey = (firstKey + rows.length - 1) % this.capacity;
    }
  }

  /** The retained slots, oldest first, with their storage keys: what to write after a rewrite. */
  rows(): SlotRow[] {
    const n = this.idx[this.longest + COUNT] as number;
    const head = this.idx[this.longest + HEAD] as number;
    const out: SlotRow[] = [];
    for (let j = 0; j < n; j++) {
      const p = (head + 2 * j) & this.mask;
      out.push({
        slot: (this.newestKey - (n - 1 - j) + this.capacity * 2) % this.capacity,
        ts: this.ring[p] as number,
        cost: this.ring[p + 1] as number,
      });
    }
    return out;
  }

  /** Time of the newest granted slot, or `-Infinity` before the first grant. */
  get newestTs(): number {
    return this.state[this.end + NEWEST] as number;
  }

  /** From this time on no limit counts any slot: the key's state can be deleted. `-Infinity` when empty. */
  get idleAt(): number {
    return this.newestTs + (this.state[this.longest + WINDOW] as number);
  }

  /** Slots currently allocated in memory (for measuring). */
  get allocatedSlots(): number {
    return (this.mask + 1) / 2;
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
    // Small, so that V8 inlines it into the caller and a double `now` is never boxed: the work
    // happens in `decideAtClock`, which takes only the (small integer) cost.
    if (!Number.isSafeInteger(cost) || cost < 1) throwCost(cost);
    if (!Number.isFinite(now)) throwNow(now);
    const state = this.state;
    const at = this.end + CLOCK;
    // A denial may have evicted slots at a later time: an earlier `now` must not see the window without them.
    const t = Math.floor(now);
    if (t > (state[at] as number)) state[at] = t;
    return this.decideAtClock(cost);
  }

  /**
   * Decides at the clock: evicts, compares, and when allowed records `cost` at the clock (all
   * limits evicted to it). Reads the time from the state, so its only argument is a small integer.
   * Deliberately one function (too big for V8 to inline anywhere): `decide` then always inlines,
   * and a call to it is always exactly one call here.
   */
  private decideAtClock(cost: number): Decision {
    const state = this.state;
    const idx = this.idx;
    const end = this.end;
    const t = state[end + CLOCK] as number;
    this.seq = (this.seq + 1) | 0;
    let ring = this.ring;
    let allowed = true;
    for (let o = 0; o < end; o += STRIDE) {
      // Evict when the oldest slot is at or before `t − W`.
      if (
        (idx[o + COUNT] as number) > 0 &&
        (ring[idx[o + HEAD] as number] as number) <= t - (state[o + WINDOW] as number)
      ) {
        this.evict(o);
      }
      if ((state[o + USED] as number) + cost > (state[o + CAP] as number)) allowed = false;
    }
    const d = this.decision;
    d.allowed = allowed;
    if (!allowed) {
      state[end + LAST] = -cost;
      return d;
    }
    state[end + LAST] = cost;
    const L = this.longest;
    const count = idx[L + COUNT] as number;
    let mask = this.mask;
    const newest = ((idx[L + HEAD] as number) + 2 * count - 2) & mask;
    if (count > 0 && ring[newest] === t) {
      // A slot at `t` is inside every window at `t`, so every limit already counts it.
      ring[newest + 1] = (ring[newest + 1] as number) + cost;
      for (let o = 0; o < end; o += STRIDE) state[o + USED] = (state[o + USED] as number) + cost;
      return d;
    }
    if (2 * count > mask) {
      this.grow();
      ring = this.ring;
      mask = this.mask;
    }
    const p = ((idx[L + HEAD] as number) + 2 * count) & mask;
    ring[p] = t;
    ring[p + 1] = cost;
    const key = this.newestKey + 1;
    this.newestKey = key === this.capacity ? 0 : key;
    for (let o = 0; o < end; o += STRIDE) {
      const c = idx[o + COUNT] as number;
      if (c === 0) idx[o + HEAD] = p;
      idx[o + COUNT] = c + 1;
      state[o + USED] = (state[o + USED] as number) + cost;
    }
    state[end + NEWEST] = t;
    return d;
  }

  /** Drops from the window of the limit at state offset `o` every slot at or before the clock − W. */
  private evict(o: number): void {
    const state = this.state;
    const idx = this.idx;
    const ring = this.ring;
    const mask = this.mask;
    const cutoff = (state[this.end + CLOCK] as number) - (state[o + WINDOW] as number);
    let head = idx[o + HEAD] as number;
    let count = idx[o + COUNT] as number;
    let used = state[o + USED] as number;
    while (count > 0 && (ring[head] as number) <= cutoff) {
      used -= ring[head + 1] as number;
      head = (head + 2) & mask;
      count--;
    }
    idx[o + HEAD] = head;
    idx[o + COUNT] = count;
    state[o + USED] = count === 0 ? 0 : used;
  }

  /** Doubles the in-memory ring, keeping slots in order from index 0. */
  private grow(): void {
    const size = (this.mask + 1) / 2;
    if (size >= this.maxSlots) {
      throw new Error(`sliding log invariant broken: more than ${this.capacity} slots in the longest window`);
    }
    this.ensureSlots(size * 2);
  }

  private ensureSlots(needed: number): void {
    const size = (this.mask + 1) / 2;
    if (needed <= size) return;
    const next = Math.min(this.maxSlots, nextPowerOfTwo(needed));
    const ring = new Float64Array(2 * next);
    const idx = this.idx;
    const base = idx[this.longest + HEAD] as number;
    const count = idx[this.longest + COUNT] as number;
    for (let j = 0; j < count; j++) {
      const p = (base + 2 * j) & this.mask;
      ring[2 * j] = this.ring[p] as number;
      ring[2 * j + 1] = this.ring[p + 1] as number;
    }
    // Every limit's slots are the newest `count` of the ring.
    for (let o = 0; o < this.end; o += STRIDE) idx[o + HEAD] = 2 * (count - (idx[o + COUNT] as number));
    this.ring = ring;
    this.mask = 2 * next - 1;
  }

  // ------------------------------------------------------------ computed on read

  /** The last decision's time. */
  private get clock(): number {
    return this.state[this.end + CLOCK] as number;
  }

  /** Earliest time ≥ `t` at which `cost` fits every limit if nothing else is granted (∞ if never). */
  private freeAt(t: number, cost: number): number {
    let at = t;
    for (let o = 0; o < this.end; o += STRIDE) {
      const free = this.limitFreeAt(o, t, cost);
      if (free > at) at = free;
    }
    return at;
  }

  /** Earliest time ≥ `t` at which `cost` fits the limit at state offset `o` (evicted to `t`) if nothing else is granted. */
  private limitFreeAt(o: number, t: number, cost: number): number {
    const state = this.state;
    const idx = this.idx;
    const cap = state[o + CAP] as number;
    if (cost > cap) return Number.POSITIVE_INFINITY;
    let excess = (state[o + USED] as number) + cost - cap;
    if (excess <= 0) return t;
    // Expire the oldest slots until enough cost has left the window; excess ≤ used, so this ends.
    let p = idx[o + HEAD] as number;
    for (;;) {
      excess -= this.ring[p + 1] as number;
      if (excess <= 0) return (this.ring[p] as number) + (state[o + WINDOW] as number);
      p = (p + 2) & this.mask;
    }
  }

  /** The last decision's cost. */
  private cost(): number {
    return Math.abs(this.state[this.end + LAST] as number);
  }

  /** The last decision's cost when it was denied, 0 when it was granted. */
  private denied(): number {
    return Math.max(0, -(this.state[this.end + LAST] as number));
  }

  private neverAllowed(): boolean {
    return this.cost() > (this.state[this.end + MIN_CAP] as number);
  }

  private retryAfterMs(): number {
    const denied = this.denied();
    if (denied === 0) return 0;
    if (denied > (this.state[this.end + MIN_CAP] as number)) return Number.POSITIVE_INFINITY;
    const t = this.clock;
    return this.freeAt(t, denied) - t;
  }

  private blockedUntil(): number {
    const t = this.clock;
    let blocked = t;
    for (let o = 0; o < this.end; o += STRIDE) {
      if ((this.idx[o + COUNT] as number) === 0) continue;
      const free = this.limitFreeAt(o, t, 1);
      if (free > blocked) blocked = free;
    }
    return blocked;
  }

  private remaining(o: number): number {
    return Math.max(0, (this.state[o + CAP] as number) - (this.state[o + USED] as number));
  }

  private resetMs(o: number): number {
    const state = this.state;
    const idx = this.idx;
    if ((idx[o + COUNT] as number) === 0) return 0;
    const t = this.clock;
    // `remaining` next grows when the oldest slot leaves, or, over the limit, once a cost of 1 fits.
    const free = this.limitFreeAt(o, t, 1);
    const oldestLeaves = (this.ring[idx[o + HEAD] as number] as number) + (state[o + WINDOW] as number);
    return Math.max(free, oldestLeaves) - t;
  }

  private exceeded(o: number): boolean {
    const denied = this.denied();
    return denied > 0 && (this.state[o + USED] as number) + denied > (this.state[o + CAP] as number);
  }

  /** Ring index of the newest slot (the last one evicted when the window is empty). */
  private newestIndex(): number {
    const count = this.idx[this.longest + COUNT] as number;
    return ((this.idx[this.longest + HEAD] as number) + 2 * count - 2) & this.mask;
  }

  /**
   * A field computed on read: an own, enumerable accessor (so `{ ...d }` and `JSON.stringify`
   * copy it like the data field it stands for) whose functions are shared by every log, so that
   * V8 keeps one fast map for all decisions. A value written to it holds until the next decision.
   */
  private static computed<T>(key: string, compute: (log: SlidingLog, o: number) => T): PropertyDescriptor {
    return {
      enumerable: true,
      configurable: true,
      get(this: HasComputed): T {
        const c = this[COMPUTED];
        return c.writtenAt === c.log.seq && c.written.has(key) ? (c.written.get(key) as T) : compute(c.log, c.o);
      },
      set(this: HasComputed, value: T): void {
        const c = this[COMPUTED];
        if (c.writtenAt !== c.log.seq) {
          c.written.clear();
          c.writtenAt = c.log.seq;
        }
        c.written.set(key, value);
      },
    };
  }

  private static readonly ROW_FIELDS: PropertyDescriptorMap = {
    slot: SlidingLog.computed("slot", (log) => log.newestKey),
    ts: SlidingLog.computed("ts", (log) => log.newestTs),
    cost: SlidingLog.computed("cost", (log) => log.ring[log.newestIndex() + 1] as number),
  };

  private static readonly STATUS_FIELDS: PropertyDescriptorMap = {
    remaining: SlidingLog.computed("remaining", (log, o) => log.remaining(o)),
    resetMs: SlidingLog.computed("resetMs", (log, o) => log.resetMs(o)),
    exceeded: SlidingLog.computed("exceeded", (log, o) => log.exceeded(o)),
  };

  private static readonly DECISION_FIELDS: PropertyDescriptorMap = {
    neverAllowed: SlidingLog.computed("neverAllowed", (log) => log.neverAllowed()),
    cost: SlidingLog.computed("cost", (log) => log.cost()),
    now: SlidingLog.computed("now", (log) => log.clock),
    limits: { value: null, writable: true, enumerable: true, configurable: true },
    retryAfterMs: SlidingLog.computed("retryAfterMs", (log) => log.retryAfterMs()),
    blockedUntil: SlidingLog.computed("blockedUntil", (log) => log.blockedUntil()),
    write: SlidingLog.computed("write", (log) => ((log.state[log.end + LAST] as number) > 0 ? log.row : null)),
  };

  /** Gives `target` its hidden link to this log (at state offset `o`) and the computed `fields`. */
  private withComputed<T extends object>(target: T, o: number, fields: PropertyDescriptorMap): T {
    const link: Computed = { log: this, o, written: new Map(), writtenAt: Number.NaN };
    Object.defineProperty(target, COMPUTED, { value: link });
    return Object.defineProperties(target, fields);
  }

  private makeRow(): SlotRow {
    return this.withComputed({}, 0, SlidingLog.ROW_FIELDS) as SlotRow;
  }

  private makeStatus(l: Required<LimitSpec>, o: number): LimitStatus {
    const status = { name: l.name, limit: l.limit, windowMs: l.windowMs };
    return this.withComputed(status, o, SlidingLog.STATUS_FIELDS) as LimitStatus;
  }

  private makeDecision(): Decision {
    // Only `allowed` is stored by `decide`; the other fields are computed, in the order of `Decision`.
    const d = this.withComputed({ allowed: false }, 0, SlidingLog.DECISION_FIELDS);
    const limits = this.limits.map((l, i) => this.makeStatus(l, i * STRIDE));
    Object.defineProperty(d, "limits", { value: limits });
    return d as Partial<Decision> as Decision;
  }
}
