/**
 * @module Concurrency slots (docs/configuration.md, "Concurrency"): at most `limit` of a key's requests in flight
 * at once. A slot is taken for one request, by its id, and held until it is released, or until it lapses
 * `timeoutMs` after it was taken or last renewed (its holder vanished). Pure: time passed in.
 */

/** A plan's `concurrency` as the key's object is sent it. */
export interface ConcurrencySpec {
  /** Requests in flight at once (≥ 1). */
  readonly limit: number;
  /** How long a slot lasts without a renewal (ms): a vanished holder's slot is free again after this. */
  readonly timeoutMs: number;
}

/** The most requests `concurrency` may let be in flight at once per key. */
export const MAX_CONCURRENCY = 10_000;
/** The shortest and longest `concurrency_timeout` (ms): 1 s, 1 day. */
export const MIN_SLOT_TIMEOUT_MS = 1_000;
export const MAX_SLOT_TIMEOUT_MS = 86_400_000;

/**
 * Checks a slot's timeout as it arrives over RPC.
 *
 * @throws RangeError naming `field`
 */
export function checkSlotTimeout(ms: unknown, field = "timeoutMs"): void {
  if (typeof ms !== "number" || !Number.isSafeInteger(ms) || ms < MIN_SLOT_TIMEOUT_MS || ms > MAX_SLOT_TIMEOUT_MS) {
    throw new RangeError(`${field}: expected ${MIN_SLOT_TIMEOUT_MS} to ${MAX_SLOT_TIMEOUT_MS} ms, got ${String(ms)}`);
  }
}

/**
 * Checks a request's slot ask as it arrives over RPC: an id of 1 to 64 characters, a limit from 1 to
 * {@link MAX_CONCURRENCY}, a timeout.
 *
 * @throws RangeError naming the bad field
 */
export function checkSlotAsk(slot: {
  readonly id: unknown;
  readonly limit: unknown;
  readonly timeoutMs: unknown;
}): void {
  if (typeof slot.id !== "string" || slot.id.length === 0 || slot.id.length > 64) {
    throw new RangeError("slot.id: expected a request id of 1 to 64 characters");
  }
  const n = slot.limit;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 1 || n > MAX_CONCURRENCY) {
    throw new RangeError(`slot.limit: expected 1 to ${MAX_CONCURRENCY}, got ${String(n)}`);
  }
  checkSlotTimeout(slot.timeoutMs, "slot.timeoutMs");
}

/** What {@link Slots.take} came to. */
export type Taken =
  /** The slot is held until `expiresAt` (ms); `fresh`: it was not held before (a retried take finds it held). */
  | { readonly held: true; readonly expiresAt: number; readonly fresh: boolean }
  /** `limit` slots are held by other requests. */
  | { readonly held: false };

/** The slots of one key, by request id, each with the time it lapses (ms). */
export class Slots {
  readonly #held = new Map<string, number>();

  /** Slots from storage (`[id, expiresAt]`). */
  constructor(rows: Iterable<readonly [string, number]> = []) {
    for (const [id, expiresAt] of rows) this.#held.set(id, expiresAt);
  }

  /** Slots held, lapsed ones included until {@link lapse} drops them. */
  get size(): number {
    return this.#held.size;
  }

  /** When the last slot lapses (ms); -Infinity when none is held. */
  get lastExpiry(): number {
    let at = Number.NEGATIVE_INFINITY;
    for (const t of this.#held.values()) at = Math.max(at, t);
    return at;
  }

  /** Drops the slots lapsed by `now` and returns their ids. */
  lapse(now: number): string[] {
    const gone: string[] = [];
    for (const [id, t] of this.#held) if (t <= now) gone.push(id);
    for (const id of gone) this.#held.delete(id);
    return gone;
  }

  /** Slots held at `now` (lapsed ones not counted). */
  heldAt(now: number): number {
    let n = 0;
    for (const t of this.#held.values()) if (t > now) n++;
    return n;
  }

  /**
   * Whether a slot for `id` could be had at `now` without taking it: it is held already (a retry), or fewer than
   * `spec.limit` are held.
   */
  fits(now: number, id: string, spec: ConcurrencySpec): boolean {
    return this.#holds(id, now) || this.heldAt(now) < spec.limit;
  }

  /**
   * Takes a slot for `id` until `now + spec.timeoutMs`, when fewer than `spec.limit` are held (lapsed ones are
   * dropped first). Taking a slot `id` holds renews it: a retried call takes no second slot.
   */
  take(now: number, id: string, spec: ConcurrencySpec): Taken {
    if (!this.fits(now, id, spec)) return { held: false };
    const fresh = !this.#holds(id, now);
    const expiresAt = now + spec.timeoutMs;
    this.#held.set(id, expiresAt);
    return { held: true, expiresAt, fresh };
  }

  /**
   * Moves the lapse of `id`'s slot to `now + timeoutMs`. Returns the new time, or null when `id` holds no slot
   * (released, lapsed, or never taken): a lapsed slot is not taken again by a renewal.
   */
  renew(now: number, id: string, timeoutMs: number): number | null {
    const t = this.#held.get(id);
    if (t === undefined || t <= now) return null;
    const expiresAt = now + timeoutMs;
    this.#held.set(id, expiresAt);
    return expiresAt;
  }

  /** Whether `id` holds a slot that has not lapsed by `now`. */
  #holds(id: string, now: number): boolean {
    return (this.#held.get(id) ?? Number.NEGATIVE_INFINITY) > now;
  }

  /** Frees `id`'s slot; false when it held none. */
  release(id: string): boolean {
    return this.#held.delete(id);
  }

  /** Frees every slot (an operator's reset leaves slots alone; the idle alarm uses this). */
  clear(): void {
    this.#held.clear();
  }
}
