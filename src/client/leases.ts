/**
 * @module The isolate's lease table: units a key's object granted ahead of use, spent here while
 * this isolate's clock is inside the lease (DESIGN.md, "Leases"). Bounded like the deny cache.
 *
 * A lease asked at local time `sentAt` with lifetime `L` may be spent while the local clock reads
 * less than `sentAt + L − margin`. The object recorded the units at its own `issuedAt + L`, and
 * `issuedAt` came after `sentAt`, so every use happens before the record whenever the two clocks
 * run at the same rate; the margin absorbs small rate differences.
 */

import type { Lease, LimitStatus, NamedLimit } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";

/** The object's answer that came with a lease, as this isolate keeps it. */
export interface HeldLease {
  /** Units still to spend. */
  left: number;
  /** Local time from which the lease may no longer be spent. */
  readonly expiresAt: number;
  /** Where the object recorded it: handed back with unused units. */
  readonly recordedAt: readonly number[];
  /** Local time the lease was asked at. */
  readonly sentAt: number;
  /** The key's limits as the object saw them right after granting it. */
  readonly limits: readonly LimitStatus[];
  /** The limits it was granted under when an operator's override, not the plan, applied. */
  readonly applied: readonly NamedLimit[] | null;
}

/** Units to give back to a key's object. */
export interface Unused {
  /** The key's object name. */
  readonly name: string;
  /** The limits the lease was granted under (the object rebuilds its log for other limits). */
  readonly limits: readonly LimitSpec[];
  readonly recordedAt: readonly number[];
  readonly units: number;
}

/** What the table knows of one key. */
export interface KeyLeases {
  readonly name: string;
  /** The key's limits when it was last seen. */
  limits: readonly LimitSpec[];
  /** Leases being spent, oldest (first to expire) first. */
  readonly held: HeldLease[];
  /**
   * When this key's lease call went out (local ms), or null: at most one per isolate. A call
   * older than the object deadline counts as gone (its request may have been cancelled).
   */
  inflightSince: number | null;
  /** Requests seen, decayed with a 1 s time constant: about the key's rate per second here. */
  score: number;
  seenAt: number;
  /** Local time before which no lease is asked: the object refused this key, or had none to give. */
  quietUntil: number;
}

/** The time constant of the rate estimate (ms). */
const RATE_TAU_MS = 1_000;
/** A key seen less often than this many times per time constant gets no lease. */
const MIN_SCORE = 2;

/** The least lead (ms) a refill is asked with, however fast recent calls were. */
const MIN_LEAD_MS = 5;

/** A lease is asked for only when its lifetime is at least this many recent object round trips. */
const RTT_LIFETIMES = 4;

/**
 * The fewest units worth a lease. A lease costs a call (a refill) and, when it expires unspent, a
 * second one (the give-back): a one-unit lease saves nothing over asking per request and costs
 * more (the soak measured 1.07 object calls per grant on keys at ~60 requests/s, whose 31 ms
 * leases carried one unit, against 1.01 per request).
 */
export const MIN_LEASE_UNITS = 2;

/** Safety margin subtracted from a lease's lifetime (ms). */
export function leaseMargin(lifetimeMs: number): number {
  return 1 + Math.floor(lifetimeMs / 50);
}

export class LeaseTable {
  readonly #entries = new Map<string, KeyLeases>();
  readonly #max: number;
  #rttMs = 0;

  constructor(max = 10_000) {
    this.#max = max;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The key's entry, counting this request in its rate (created when missing; the oldest entry makes room). */
  touch(name: string, limits: readonly LimitSpec[], now: number, unused: Unused[]): KeyLeases {
    let e = this.#entries.get(name);
    if (!e) {
      if (this.#entries.size >= this.#max) this.#evictOldest(unused);
      e = { name, limits, held: [], inflightSince: null, score: 0, seenAt: now, quietUntil: 0 };
      this.#entries.set(name, e);
    }
    e.limits = limits;
    const dt = Math.max(0, now - e.seenAt);
    e.score = e.score * Math.exp(-dt / RATE_TAU_MS) + 1;
    e.seenAt = now;
    return e;
  }

  /** The entry without counting a request, if any. */
  get(name: string): KeyLeases | undefined {
    return this.#entries.get(name);
  }

  /** Forgets a key's leases (an operator's reset or block); returns their unused units. */
  drop(name: string, unused: Unused[]): void {
    const e = this.#entries.get(name);
    if (!e) return;
    for (const h of e.held) if (h.left > 0) unused.push(unusedOf(e, h));
    this.#entries.delete(name);
  }

  /** Forgets the key's leases granted under other limits than `applied`; returns their unused units. */
  dropOthers(name: string, applied: readonly NamedLimit[] | null, unused: Unused[]): void {
    const e = this.#entries.get(name);
    if (!e) return;
    for (let i = e.held.length - 1; i >= 0; i--) {
      const h = e.held[i] as HeldLease;
      if (sameLimits(h.applied, applied)) continue;
      if (h.left > 0) unused.push(unusedOf(e, h));
      e.held.splice(i, 1);
    }
  }

  /**
   * Spends `cost` from the first lease still valid at `now` that has enough left. Expired leases
   * are dropped and their unused units added to `unused`, to be given back.
   */
  spend(e: KeyLeases, cost: number, now: number, unused: Unused[]): HeldLease | null {
    while (e.held.length > 0 && now >= (e.held[0] as HeldLease).expiresAt) {
      const gone = e.held.shift() as HeldLease;
      if (gone.left > 0) unused.push(unusedOf(e, gone));
    }
    // `held` is sorted by expiry and the expired ones are gone: every lease left is valid at `now`.
    for (const h of e.held) {
      if (h.left >= cost) {
        h.left -= cost;
        return h;
      }
    }
    return null;
  }

  /**
   * Units to ask for: what this isolate would use in one lifetime at its recent rate for the key,
   * whole units only, at most `maxUnits`. 0 (no lease) when that is under {@link MIN_LEASE_UNITS}
   * (the lease would cost more calls than it saves) or the key is seen rarely here.
   */
  want(e: KeyLeases, lifetimeMs: number, maxUnits: number, now: number): number {
    if (e.score < MIN_SCORE || lifetimeMs <= 0 || now < e.quietUntil) return 0;
    // A lease arrives a round trip into its lifetime: one that would be mostly over by then is
    // not worth its units (they count until their record leaves the window, used or not).
    if (lifetimeMs < RTT_LIFETIMES * this.#rttMs) return 0;
    const units = Math.floor((e.score * lifetimeMs) / RATE_TAU_MS);
    return units < MIN_LEASE_UNITS ? 0 : Math.min(maxUnits, units);
  }

  /** Records how long an object call took (ms), for {@link want}: a moving average over recent calls. */
  observeRtt(ms: number): void {
    this.#rttMs = this.#rttMs === 0 ? ms : this.#rttMs + (ms - this.#rttMs) / 8;
  }

  /** The recent object round trip from this isolate (ms). */
  get rttMs(): number {
    return this.#rttMs;
  }

  /**
   * Whether to ask for the next lease now: the held ones would run out (in units at the key's
   * recent rate, or in time) within two round trips — just in time for the next to arrive, and
   * late enough that little of the held ones is left to give back.
   */
  needsRefill(e: KeyLeases, now: number, want: number): boolean {
    if (e.inflightSince !== null || want === 0) return false;
    const lead = 2 * Math.max(this.#rttMs, MIN_LEAD_MS);
    let left = 0;
    let until = now;
    for (const h of e.held) {
      if (now >= h.expiresAt) continue;
      left += h.left;
      until = Math.max(until, h.expiresAt);
    }
    return left <= Math.ceil((e.score * lead) / RATE_TAU_MS) || until - now <= lead;
  }

  /** Keeps a lease granted for a call sent at `sentAt`. */
  add(
    e: KeyLeases,
    lease: Lease,
    sentAt: number,
    limits: readonly LimitStatus[],
    applied: readonly NamedLimit[] | null = null,
  ): void {
    const expiresAt = sentAt + lease.lifetimeMs - leaseMargin(lease.lifetimeMs);
    const held: HeldLease = { left: lease.units, expiresAt, recordedAt: lease.recordedAt, sentAt, limits, applied };
    let i = e.held.length;
    while (i > 0 && (e.held[i - 1] as HeldLease).expiresAt > expiresAt) i--;
    e.held.splice(i, 0, held);
  }

  #evictOldest(unused: Unused[]): void {
    for (const [name, e] of this.#entries) {
      if (this.#entries.size < this.#max) break;
      if (e.inflightSince !== null) continue;
      this.drop(name, unused);
    }
  }
}

function unusedOf(e: KeyLeases, h: HeldLease): Unused {
  return { name: e.name, limits: e.limits, recordedAt: h.recordedAt, units: h.left };
}

/** Whether two override limit lists are the same (null: the plan's). */
export function sameLimits(a: readonly NamedLimit[] | null, b: readonly NamedLimit[] | null): boolean {
  if (a === b) return true;
  if (a === null || b === null || a.length !== b.length) return false;
  return a.every((l, i) => {
    const m = b[i] as NamedLimit;
    return l.limit === m.limit && l.windowMs === m.windowMs && l.tickMs === m.tickMs && l.name === m.name;
  });
}
