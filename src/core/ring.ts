/**
 * @module One ring of `(time, cost)` slots shared by the limits with one tick. Pure.
 *
 * Slots are sorted by time, at distinct multiples of the tick, and may lie in the future (leases,
 * rounding up). Each limit keeps its own head (its window's oldest slot) and running sum. Every
 * slot owns a storage key in `0 … capacity − 1`; a key is reused only after its slot has left the
 * ring, so a grant writes one row and an eviction writes none.
 */

/** A storage row: one slot of one ring. `cost` 0 marks a row whose slot is gone. */
export interface SlotRow {
  /** The ring, named by its tick in ms. */
  readonly ring: number;
  /** Storage key within the ring, in `[0, capacity)`. */
  readonly key: number;
  /** The slot's time in integer milliseconds (a multiple of the ring's tick). */
  readonly ts: number;
  /** Units recorded at that time. */
  readonly cost: number;
}

/** A limit as the ring sees it. */
interface Member {
  readonly limit: number;
  readonly windowMs: number;
  /** Absolute index of the oldest slot in this limit's window (`end` when empty). */
  head: number;
  /** Total cost of the slots in this limit's window. */
  used: number;
}

/** Rounds `t` up to a multiple of `tick`. */
export function roundUp(t: number, tick: number): number {
  return Math.ceil(t / tick) * tick;
}

/**
 * A sorted ring of slots. Slots are addressed by absolute index (`start … end − 1`), stored at
 * `index & mask` in arrays that double when full.
 */
export class Ring {
  readonly tickMs: number;
  readonly capacity: number;
  readonly #members: Member[];
  #ts: Float64Array;
  #cost: Float64Array;
  #key: Int32Array;
  #mask: number;
  #start = 0;
  #end = 0;
  /** Storage keys released by slots that left, as a stack (allocated on first release). */
  #free: Int32Array | null = null;
  #freeCount = 0;
  /** Keys from here to `capacity − 1` were never used. */
  #fresh = 0;

  constructor(tickMs: number, capacity: number, limits: readonly { limit: number; windowMs: number }[]) {
    this.tickMs = tickMs;
    this.capacity = capacity;
    this.#members = limits.map((l) => ({ limit: l.limit, windowMs: l.windowMs, head: 0, used: 0 }));
    const size = Math.min(16, nextPowerOfTwo(capacity));
    this.#ts = new Float64Array(size);
    this.#cost = new Float64Array(size);
    this.#key = new Int32Array(size);
    this.#mask = size - 1;
  }

  // ------------------------------------------------------------------ slots

  /** Slots in the ring. */
  get size(): number {
    return this.#end - this.#start;
  }

  /** Slots allocated in memory (for measuring). */
  get allocated(): number {
    return this.#mask + 1;
  }

  #tsAt(i: number): number {
    return this.#ts[i & this.#mask] as number;
  }

  #costAt(i: number): number {
    return this.#cost[i & this.#mask] as number;
  }

  #keyAt(i: number): number {
    return this.#key[i & this.#mask] as number;
  }

  #row(i: number): SlotRow {
    return { ring: this.tickMs, key: this.#keyAt(i), ts: this.#tsAt(i), cost: this.#costAt(i) };
  }

  /** Time of the newest slot, or −∞ when empty. */
  get newest(): number {
    return this.size === 0 ? Number.NEGATIVE_INFINITY : this.#tsAt(this.#end - 1);
  }

  /** The slots, oldest first, as rows. */
  rows(): SlotRow[] {
    const out: SlotRow[] = [];
    for (let i = this.#start; i < this.#end; i++) out.push(this.#row(i));
    return out;
  }

  /** Loads sorted, distinct-time slots with distinct storage keys below the capacity (the ring must be empty). */
  load(rows: readonly SlotRow[]): void {
    if (rows.length === 0) return;
    const taken = new Set<number>();
    for (const r of rows) {
      this.#append(r.ts, r.cost, r.key);
      taken.add(r.key);
    }
    this.#fresh = this.capacity;
    for (let k = this.capacity - 1; k >= 0; k--) if (!taken.has(k)) this.#releaseKey(k);
  }

  /** A storage key no slot holds. */
  #takeKey(): number {
    const key =
      this.#freeCount > 0
        ? ((this.#free as Int32Array)[--this.#freeCount] as number)
        : this.#fresh < this.capacity
          ? this.#fresh++
          : undefined;
    if (key === undefined) throw new Error(`ring invariant broken: more than ${this.capacity} slots`);
    return key;
  }

  #append(ts: number, cost: number, key: number): void {
    // Loaded rows count in every window until the load's eviction.
    this.#insert(this.#end, { ts, cost, key }, ts);
  }

  /**
   * Puts a slot at absolute index `i`, shifting the newer ones up by one. The ring is evicted to `now`: the slot is in
   * the window of each limit with `ts > now − W` (whose head is then at or before `i`: every slot after it is in that
   * window too), and before the window of the others (whose head, at or after `i`, moves up with the slots it names).
   */
  #insert(i: number, slot: { readonly ts: number; readonly cost: number; readonly key: number }, now: number): void {
    const { ts, cost, key } = slot;
    if (this.size === this.#mask + 1) this.#grow();
    for (let j = this.#end; j > i; j--) {
      const to = j & this.#mask;
      const from = (j - 1) & this.#mask;
      this.#ts[to] = this.#ts[from] as number;
      this.#cost[to] = this.#cost[from] as number;
      this.#key[to] = this.#key[from] as number;
    }
    const p = i & this.#mask;
    this.#ts[p] = ts;
    this.#cost[p] = cost;
    this.#key[p] = key;
    this.#end++;
    for (const m of this.#members) {
      if (ts > now - m.windowMs) m.used += cost;
      else m.head++;
    }
  }

  #grow(): void {
    const size = 2 * (this.#mask + 1);
    const ts = new Float64Array(size);
    const cost = new Float64Array(size);
    const key = new Int32Array(size);
    for (let i = this.#start; i < this.#end; i++) {
      ts[i & (size - 1)] = this.#tsAt(i);
      cost[i & (size - 1)] = this.#costAt(i);
      key[i & (size - 1)] = this.#keyAt(i);
    }
    this.#ts = ts;
    this.#cost = cost;
    this.#key = key;
    this.#mask = size - 1;
  }

  // ------------------------------------------------------------------ limits

  /** Drops from each limit's window the slots at or before `now − W`; frees slots no window holds. */
  evict(now: number): void {
    for (const m of this.#members) {
      const cutoff = now - m.windowMs;
      while (m.head < this.#end && this.#tsAt(m.head) <= cutoff) {
        m.used -= this.#costAt(m.head);
        m.head++;
      }
      if (m.head === this.#end) m.used = 0;
    }
    this.#freeLeft();
  }

  /** Drops every slot at or before `t` from every window (an operator's reset). */
  dropThrough(t: number): void {
    for (const m of this.#members) {
      while (m.head < this.#end && this.#tsAt(m.head) <= t) {
        m.used -= this.#costAt(m.head);
        m.head++;
      }
      if (m.head === this.#end) m.used = 0;
    }
    this.#freeLeft();
  }

  /** Frees the keys of slots that no window holds any more. */
  #freeLeft(): void {
    let start = this.#end;
    for (const m of this.#members) start = Math.min(start, m.head);
    for (; this.#start < start; this.#start++) this.#releaseKey(this.#keyAt(this.#start));
    if (this.size === 0) this.#shrink();
  }

  /** Whether `cost` more fits every limit (evicted to now). */
  fits(cost: number): boolean {
    for (const m of this.#members) if (m.used + cost > m.limit) return false;
    return true;
  }

  /** Cost that may still be granted under the `j`th limit of this ring. */
  remaining(j: number): number {
    const m = this.#members[j] as Member;
    return Math.max(0, m.limit - m.used);
  }

  /** Earliest time ≥ `t` at which `cost` fits the `j`th limit if nothing else is granted (∞: never). */
  freeAt(j: number, t: number, cost: number): number {
    const m = this.#members[j] as Member;
    if (cost > m.limit) return Number.POSITIVE_INFINITY;
    let excess = m.used + cost - m.limit;
    if (excess <= 0) return t;
    // The oldest slots leave first; excess ≤ used, so this ends inside the window.
    for (let i = m.head; ; i++) {
      excess -= this.#costAt(i);
      if (excess <= 0) return Math.max(t, this.#tsAt(i) + m.windowMs);
    }
  }

  /** Milliseconds from `t` until the `j`th limit's `remaining` grows (0 when its window is empty). */
  resetMs(j: number, t: number): number {
    const m = this.#members[j] as Member;
    if (m.head === this.#end) return 0;
    const oldestLeaves = this.#tsAt(m.head) + m.windowMs;
    return Math.max(this.freeAt(j, t, 1), oldestLeaves) - t;
  }

  // ------------------------------------------------------------------ changes

  /**
   * Records `units` at `at` rounded up to the tick, in time order among the slots (a grant at now
   * goes before leases recorded in the future). When the ring has no free slot it adds them to the
   * next later slot instead, or, with none later, moves the newest slot later to `at` and adds them
   * there (later is always safe). Returns the one row to write. The ring must be evicted to `now`
   * and have room (`fits`); `at` may lie before `now` — a use settled after the fact — within the
   * longest window: the units then count in the windows that still hold `at` only.
   */
  record(at: number, units: number, now: number): SlotRow {
    const ts = roundUp(at, this.tickMs);
    let i = this.#end;
    while (i > this.#start && this.#tsAt(i - 1) >= ts) i--;
    if (i < this.#end && (this.#tsAt(i) === ts || this.size >= this.capacity)) {
      const p = i & this.#mask;
      this.#cost[p] = (this.#cost[p] as number) + units;
      // The slot at `i` counts in the windows whose head is at or before it.
      for (const m of this.#members) if (m.head <= i) m.used += units;
      return this.#row(i);
    }
    if (this.size >= this.capacity) {
      // Full, and later than every slot (a lease recorded further ahead than the ring's slack): the newest slot
      // moves later to `ts` and takes the units. Moving a record later is always safe, and it stays the newest.
      const last = this.#end - 1;
      const p = last & this.#mask;
      const before = this.#cost[p] as number;
      this.#ts[p] = ts;
      this.#cost[p] = before + units;
      for (const m of this.#members) {
        if (m.head <= last) m.used += units;
        else if (ts > now - m.windowMs) {
          // A window that held no slot (the newest had left it) holds the moved one now: all of its units count.
          m.head = last;
          m.used += before + units;
        }
      }
      return this.#row(last);
    }
    this.#insert(i, { ts, cost: units, key: this.#takeKey() }, now);
    return this.#row(i);
  }

  /** Units recorded after `t` (leased ahead, or rounded up to the tick): they count in every window already. */
  ahead(t: number): number {
    let sum = 0;
    for (let i = this.#end - 1; i >= this.#start && this.#tsAt(i) > t; i--) sum += this.#costAt(i);
    return sum;
  }

  /**
   * Takes back up to `units` from the slot at `ts` (a lease's record). Returns the row to write,
   * or null when no slot is at `ts` (it has left every window: nothing to give back).
   */
  giveBack(ts: number, units: number): SlotRow | null {
    const i = this.#find(ts);
    if (i === -1) return null;
    const p = i & this.#mask;
    const taken = Math.min(units, this.#cost[p] as number);
    this.#cost[p] = (this.#cost[p] as number) - taken;
    for (const m of this.#members) if (m.head <= i) m.used -= taken;
    const row = this.#row(i);
    if (row.cost === 0) this.#remove(i);
    return row;
  }

  /**
   * Moves up to `units` from the slot at `from` (a lease's record) to `to` rounded up to the tick, when that is
   * earlier: a lease's used units re-dated to their last use. Returns the rows to write, in order (none when no
   * slot is at `from` or `to` is not earlier). The ring must be evicted to `now`, and `to` lie after `now` less its
   * longest window: the units count in the windows that still hold `to` only ({@link record}).
   */
  move(from: number, to: number, units: number, now: number): SlotRow[] {
    const i = this.#find(from);
    const ts = roundUp(to, this.tickMs);
    if (i === -1 || ts >= from) return [];
    const taken = Math.min(units, this.#costAt(i));
    const gone = this.giveBack(from, taken) as SlotRow;
    // With the ring full, `record` adds to the next later slot: the lease's own, unless it was just emptied.
    return [gone, this.record(ts, taken, now)];
  }

  /** Absolute index of the slot at `ts`, or −1. Binary search: slots are sorted. */
  #find(ts: number): number {
    let lo = this.#start;
    let hi = this.#end - 1;
    while (lo <= hi) {
      const mid = lo + ((hi - lo) >> 1);
      const t = this.#tsAt(mid);
      if (t === ts) return mid;
      if (t < ts) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  /** Removes slot `i` (cost 0) by shifting the older slots up by one; its key is free again. */
  #remove(i: number): void {
    const key = this.#keyAt(i);
    for (let j = i; j > this.#start; j--) {
      const to = j & this.#mask;
      const from = (j - 1) & this.#mask;
      this.#ts[to] = this.#ts[from] as number;
      this.#cost[to] = this.#cost[from] as number;
      this.#key[to] = this.#key[from] as number;
    }
    for (const m of this.#members) if (m.head <= i) m.head++;
    this.#start++;
    this.#releaseKey(key);
    if (this.size === 0) this.#shrink();
  }

  /** Puts a key no slot holds any more on the free stack. */
  #releaseKey(key: number): void {
    if (this.#free === null) this.#free = new Int32Array(this.capacity);
    this.#free[this.#freeCount++] = key;
  }

  /**
   * An empty ring holds nothing that counts: every stored row is dead, so keys start again from 0
   * and memory goes back to its initial size (an idle key costs what a new one does).
   */
  #shrink(): void {
    this.#free = null;
    this.#freeCount = 0;
    this.#fresh = 0;
    const size = Math.min(16, nextPowerOfTwo(this.capacity));
    if (this.#mask + 1 > size) {
      this.#ts = new Float64Array(size);
      this.#cost = new Float64Array(size);
      this.#key = new Int32Array(size);
      this.#mask = size - 1;
    }
  }
}

function nextPowerOfTwo(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}
