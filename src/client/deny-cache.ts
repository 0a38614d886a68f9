/**
 * @module The isolate's deny cache: "no request of this key can pass before T". Only time
 * frees capacity, so until T the object would refuse every request of the key; answering
 * `429` here never changes a decision and keeps floods off the object.
 */

/** What the Worker remembers of a key that is blocked. */
export interface Blocked {
  /** Local clock (ms): before it, no request of cost 1 can pass. */
  readonly until: number;
  /** Per limit: local time from which a cost of 1 fits it again (0: it is not what blocks). */
  readonly freeAt: readonly number[];
  /** Exact local retry times already learnt for other costs while blocked. */
  readonly retryAt: Map<number, number>;
  /**
   * Local time from which the object is asked again even though `until` is later: an operator's
   * reset, unblock or override can free the key before `until`, and every isolate sees it then.
   */
  readonly recheckAt?: number;
  /** Local time a block ends, when a block is what refuses the key. */
  readonly blockedBy?: number;
  /** `"penalty"` when that block is a penalty for repeated refusals, not an operator's. */
  readonly cause?: "penalty";
  /** The limits the object applied (an operator's override), when not the plan's. */
  readonly applied?: readonly NamedLimit[] | null;
}

import type { NamedLimit } from "../core/decision.ts";

/** A bounded map of blocked keys; expired entries are dropped on read and when full. */
export class DenyCache {
  readonly #entries = new Map<string, Blocked>();
  /** The most entries it holds. */
  readonly max: number;

  constructor(max = 10_000) {
    this.max = max;
  }

  /** The entry for `name` while it still blocks at `now`, else undefined. */
  get(name: string, now: number): Blocked | undefined {
    const entry = this.#entries.get(name);
    if (!entry) return undefined;
    if (now >= entry.until || (entry.recheckAt !== undefined && now >= entry.recheckAt)) {
      this.#entries.delete(name);
      return undefined;
    }
    return entry;
  }

  set(name: string, entry: Blocked, now: number): void {
    if (!this.#entries.has(name) && this.#entries.size >= this.max) this.#prune(now);
    this.#entries.set(name, entry);
  }

  /** Forgets the key's entry: an answer left it room. */
  delete(name: string): void {
    this.#entries.delete(name);
  }

  /** Deletes a key's entry and its routes' entries (`<key>\0<route>`): after an operator's change to the key. */
  deleteKey(name: string): void {
    this.delete(name);
    const routes = `${name}\u0000`;
    for (const k of this.#entries.keys()) if (k.startsWith(routes)) this.#entries.delete(k);
  }

  get size(): number {
    return this.#entries.size;
  }

  /** Drops expired entries, then the oldest inserted ones until there is room. */
  #prune(now: number): void {
    for (const [k, v] of this.#entries) if (now >= v.until) this.#entries.delete(k);
    for (const k of this.#entries.keys()) {
      if (this.#entries.size < this.max) break;
      this.#entries.delete(k);
    }
  }
}
