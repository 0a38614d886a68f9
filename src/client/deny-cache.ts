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
  /** Local time an operator's block ends, when a block is what refuses the key. */
  readonly blockedBy?: number;
  /** The limits the object applied (an operator's override), when not the plan's. */
  readonly applied?: readonly NamedLimit[] | null;
}

import type { NamedLimit } from "../core/decision.ts";

/**
 * A bounded map of blocked keys; expired entries are dropped on read and when full. An entry that
 * stopped answering on read is remembered as lapsed (also bounded) until the key's next answer:
 * the key was at a limit a moment ago, and its next unit is likely contended.
 */
export class DenyCache {
  readonly #entries = new Map<string, Blocked>();
  /** Keys whose entry lapsed on read, with no answer since. */
  readonly #lapsed = new Set<string>();
  /** The most entries (and lapsed keys) it holds. */
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
      if (this.#lapsed.size >= this.max) this.#lapsed.delete(this.#lapsed.values().next().value as string);
      this.#lapsed.add(name);
      return undefined;
    }
    return entry;
  }

  /** Whether the key's entry lapsed (on a read at or after its `until` or `recheckAt`) and no answer came since. */
  lapsed(name: string): boolean {
    return this.#lapsed.has(name);
  }

  set(name: string, entry: Blocked, now: number): void {
    this.#lapsed.delete(name);
    if (!this.#entries.has(name) && this.#entries.size >= this.max) this.#prune(now);
    this.#entries.set(name, entry);
  }

  /** Forgets the key's entry, lapsed or not: an answer left it room. */
  delete(name: string): void {
    this.#entries.delete(name);
    this.#lapsed.delete(name);
  }

  /** Deletes a key's entry and its routes' entries (`<key>\0<route>`): after an operator's change to the key. */
  deleteKey(name: string): void {
    this.delete(name);
    const routes = `${name}\u0000`;
    for (const k of this.#entries.keys()) if (k.startsWith(routes)) this.#entries.delete(k);
    for (const k of this.#lapsed) if (k.startsWith(routes)) this.#lapsed.delete(k);
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
