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
import { type LimitSpec, MIN_LEASE_UNITS, RING_SLACK_DIVISOR } from "../core/limits.ts";
import type { Unspent } from "../core/log.ts";

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

/** A lease to ask a key's object for (`units` 0: none). */
export interface LeaseAsk {
  readonly units: number;
  readonly lifetimeMs: number;
}

const NO_ASK: LeaseAsk = { units: 0, lifetimeMs: 0 };

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
   * Expired leases' unused units, given back with the key's next object call here (so its answer
   * counts them), or by {@link LeaseTable.idle} when the key is not seen again.
   */
  expired: HeldLease[];
  /**
   * When this key's lease call went out (local ms), or null: at most one per isolate. A call
   * older than the object deadline counts as gone (its request may have been cancelled).
   */
  inflightSince: number | null;
  /** Requests seen, decayed with a 10 s time constant: about the key's rate per 10 s here. */
  score: number;
  /** Requests seen, decayed with a 100 ms time constant: follows a burst within a few requests. */
  burst: number;
  seenAt: number;
  /** Local time since which the key has been seen here without a quiet spell (its rate is known over this long). */
  firstSeen: number;
  /** Local time before which no lease is asked: the object refused this key, or had none to give. */
  quietUntil: number;
}

/**
 * The time constant of the rate estimate (ms): long enough that a key seen about once a second
 * has a rate here, short enough that a key that went quiet stops asking for much.
 */
const RATE_TAU_MS = 10_000;
/**
 * A gap longer than this many of the key's mean intervals here ends what its rate was watched over. Requests that
 * arrive at random leave a gap of n mean intervals once in e^n: at 4, once in 55 requests, so a steady key at
 * ~1 request a second lost its rate (and its lease size) about every third lease; at 10, once in 22,000.
 */
const QUIET_INTERVALS = 10;
/** The time constant of the burst estimate (ms). */
const BURST_TAU_MS = 100;
/** A key seen fewer times than this per time constant has no rate of its own here: the object sizes its lease. */
const MIN_SCORE = 2;

/**
 * The share of its expected use a lease asks for: a lease that runs out before it expires is
 * replaced in the background and leaves nothing to give back (a give-back writes a row).
 */
const ASK_SHARE = 0.8;

/** The least lead (ms) a refill is asked with, however fast recent calls were. */
const MIN_LEAD_MS = 5;

/** A lease is asked for only when its lifetime is at least this many recent object round trips. */
const RTT_LIFETIMES = 4;

/** An isolate gives back an idle key's expired units on its own once it has not seen the key for this long (ms). */
export const IDLE_RETURN_MS = 1_000;

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
      e = {
        name,
        limits,
        held: [],
        expired: [],
        inflightSince: null,
        score: 0,
        burst: 0,
        seenAt: now,
        firstSeen: now,
        quietUntil: 0,
      };
      this.#entries.set(name, e);
    }
    e.limits = limits;
    const dt = Math.max(0, now - e.seenAt);
    // A gap of several mean intervals is a quiet spell: what comes next is a new rate, watched from now.
    // The old rate says nothing of the new one: forgotten, so the key's next lease is sized from its log again.
    if (dt * e.score > QUIET_INTERVALS * RATE_TAU_MS) {
      e.firstSeen = now;
      e.score = 0;
    }
    e.score = e.score * Math.exp(-dt / RATE_TAU_MS) + 1;
    e.burst = e.burst * Math.exp(-dt / BURST_TAU_MS) + 1;
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
    for (const h of [...e.expired, ...e.held]) if (h.left > 0) unused.push(unusedOf(e, h));
    this.#entries.delete(name);
  }

  /** Forgets the key's leases granted under other limits than `applied`; returns their unused units. */
  dropOthers(name: string, applied: readonly NamedLimit[] | null, unused: Unused[]): void {
    const e = this.#entries.get(name);
    if (!e) return;
    for (const list of [e.held, e.expired]) {
      for (let i = list.length - 1; i >= 0; i--) {
        const h = list[i] as HeldLease;
        if (sameLimits(h.applied, applied)) continue;
        if (h.left > 0) unused.push(unusedOf(e, h));
        list.splice(i, 1);
      }
    }
  }

  /**
   * Spends `cost` from the first lease still valid at `now` that has enough left. Expired leases
   * are dropped; their unused units wait in `expired` for the key's next call.
   */
  spend(e: KeyLeases, cost: number, now: number): HeldLease | null {
    this.#expire(e, now);
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
   * What this isolate holds for the key at `now` under `applied` limits: the units of its valid leases,
   * and the lease granted last (whose limits are the object's latest view).
   */
  holding(
    e: KeyLeases,
    now: number,
    applied: readonly NamedLimit[] | null,
  ): { latest: HeldLease | null; units: number } {
    let latest: HeldLease | null = null;
    let units = 0;
    for (const h of e.held) {
      if (now >= h.expiresAt || !sameLimits(h.applied, applied)) continue;
      units += h.left;
      if (latest === null || h.sentAt > latest.sentAt) latest = h;
    }
    return { latest, units };
  }

  /**
   * Takes the key's expired units, to give back with its next object call. A lease granted under
   * other limits than the object applies then has its units skipped there: they expire.
   */
  takeReturns(e: KeyLeases): Unspent[] {
    if (e.expired.length === 0) return [];
    const out = e.expired.map((h) => ({ recordedAt: h.recordedAt, units: h.left }));
    e.expired = [];
    return out;
  }

  /**
   * Expired units of keys not seen here for {@link IDLE_RETURN_MS}, to give back on their own
   * call: an idle isolate returns what the key's other isolates may need. Only where they matter:
   * when the key had less than half of some limit left at the lease's grant. Elsewhere they simply
   * expire (their record leaves the window; a give-back would cost a call and a row for nothing).
   */
  idle(now: number, unused: Unused[]): void {
    for (const e of this.#entries.values()) {
      if (now - e.seenAt < IDLE_RETURN_MS || e.inflightSince !== null) continue;
      this.#expire(e, now);
      if (e.expired.length === 0) continue;
      for (const h of e.expired) if (nearLimit(e, h)) unused.push(unusedOf(e, h));
      e.expired = [];
    }
  }

  /**
   * The lease to ask for: about what this isolate would spend at its recent rate for the key
   * ({@link ASK_SHARE} of it), whole units only, at most `maxUnits`, over a lifetime of at most
   * `lifetimeMs` and at most as long as this isolate has watched the key (at least `youngMs`): a
   * rate seen for 20 ms says little about the next 10 s, and a leased unit counts until its record
   * leaves the window. At most 1/32 of the window of each limit the key heads for (this isolate
   * alone would take half of it per window at that rate). A lease capped by `maxUnits` asks for the time it takes to spend them.
   * `units` 0 (no lease) when that is under {@link MIN_LEASE_UNITS} (the lease would cost more
   * calls than it saves). A key without a rate here (`fromLog`) asks for `maxUnits` over
   * `lifetimeMs`, for the object to size from the key's own rate.
   */
  want(e: KeyLeases, lifetimeMs: number, maxUnits: number, now: number, youngMs = 0): LeaseAsk {
    if (lifetimeMs <= 0 || now < e.quietUntil) return NO_ASK;
    // A lease arrives a round trip into its lifetime: one that would be mostly over by then is
    // not worth its units (they count until their record leaves the window, used or not).
    if (lifetimeMs < RTT_LIFETIMES * this.#rttMs) return NO_ASK;
    if (this.fromLog(e)) return { units: maxUnits, lifetimeMs };
    const recent = rate(e, now);
    const perMs = ASK_SHARE * recent;
    // A key this isolate alone would take half of some limit per window from at its recent rate heads for that
    // limit: its leases live no longer than 1/32 of that limit's window (units used at once but recorded a lifetime
    // later would hold capacity the key is about to need).
    let life = Math.min(lifetimeMs, Math.max(youngMs, now - e.firstSeen));
    for (const l of e.limits) {
      if (2 * recent * l.windowMs >= l.limit) life = Math.min(life, Math.floor(l.windowMs / RING_SLACK_DIVISOR));
    }
    const units = Math.floor(perMs * life);
    if (units < MIN_LEASE_UNITS) return NO_ASK;
    if (units <= maxUnits) return { units, lifetimeMs: life };
    return { units: maxUnits, lifetimeMs: Math.min(life, Math.ceil(maxUnits / perMs)) };
  }

  /** Whether the key has no rate of its own here yet: its lease is sized from the object's log. */
  fromLog(e: KeyLeases): boolean {
    return e.score < MIN_SCORE;
  }

  /** Records how long an object call took (ms), for {@link LeaseTable.want}: a moving average over recent calls. */
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
  needsRefill(e: KeyLeases, now: number, want: LeaseAsk): boolean {
    if (e.inflightSince !== null || want.units === 0) return false;
    const lead = 2 * Math.max(this.#rttMs, MIN_LEAD_MS);
    let left = 0;
    let until = now;
    for (const h of e.held) {
      if (now >= h.expiresAt) continue;
      left += h.left;
      until = Math.max(until, h.expiresAt);
    }
    return left <= Math.ceil(rate(e, now) * lead) || until - now <= lead;
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

  /** Moves the key's leases expired at `now` out of `held`, keeping those with units left in `expired`. */
  #expire(e: KeyLeases, now: number): void {
    while (e.held.length > 0 && now >= (e.held[0] as HeldLease).expiresAt) {
      const gone = e.held.shift() as HeldLease;
      if (gone.left > 0) e.expired.push(gone);
    }
  }

  #evictOldest(unused: Unused[]): void {
    for (const [name, e] of this.#entries) {
      if (this.#entries.size < this.#max) break;
      if (e.inflightSince !== null) continue;
      this.drop(name, unused);
    }
  }
}

/**
 * The key's recent rate here (requests per ms): the higher of two estimates, so that a burst shows
 * within a few requests (and its leases live about as long as it takes to spend them). Each leaves
 * out the request just counted (n requests span n − 1 intervals; one request after a quiet spell is
 * no burst). The 10 s estimate is divided by what its decayed count reaches over the time the key
 * has been watched here (at least the burst estimate's 100 ms): the rate since then, unbiased while
 * it ramps up (a key seen steadily for 12 s would otherwise read at 70 % of its rate).
 */
function rate(e: KeyLeases, now: number): number {
  const watched = Math.max(now - e.firstSeen, BURST_TAU_MS);
  const reached = 1 - Math.exp(-watched / RATE_TAU_MS);
  return Math.max((e.score - 1) / (RATE_TAU_MS * reached), (e.burst - 1) / BURST_TAU_MS);
}

/** Whether the key had less than half of some limit left when the lease was granted. */
function nearLimit(e: KeyLeases, h: HeldLease): boolean {
  const limits = h.applied ?? e.limits;
  return h.limits.some((l, i) => 2 * (l.remaining + h.left) < (limits[i]?.limit ?? 0));
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
