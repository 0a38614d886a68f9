/**
 * @module The isolate's lease table: units a key's object granted ahead of use, spent here while
 * this isolate's clock is inside the lease, and settled with the key's next call (docs/design.md,
 * "Leases"). Bounded like the deny cache.
 *
 * A lease asked at local time `sentAt` with lifetime `L` may be spent while the local clock reads
 * less than `sentAt + L − margin`. The object recorded the units at its own `issuedAt + L`, and
 * `issuedAt` came after `sentAt`, so every use happens before the record whenever the two clocks
 * run at the same rate; the margin absorbs small rate differences. Settlement reports, per lease,
 * the units used since the last report and the offset from `sentAt` of the last of them: the object
 * moves them to `issuedAt` plus that offset, still never earlier than a use.
 */

import type { Lease, LimitStatus, NamedLimit } from "../core/decision.ts";
import { type LimitSpec, leaseMargin, MIN_LEASE_UNITS } from "../core/limits.ts";
import type { Settlement } from "../core/log.ts";

/** The object's answer that came with a lease, as this isolate keeps it. */
export interface HeldLease {
  /** Units still to spend. */
  left: number;
  /** Units spent since the lease was last settled. */
  used: number;
  /** Local time of the last of those uses. */
  lastUseAt: number;
  /** Local time from which the lease may no longer be spent. */
  readonly expiresAt: number;
  /** Where the object recorded it. */
  readonly recordedAt: readonly number[];
  /** The object's clock when it granted the lease. */
  readonly issuedAt: number;
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

/** Settlements of one key's leases, to send to its object on a call of their own. */
export interface KeySettlements {
  /** The key's object name. */
  readonly name: string;
  /** The limits the leases were granted under (the object rebuilds its log for other limits). */
  readonly limits: readonly LimitSpec[];
  readonly settle: readonly Settlement[];
}

/**
 * A lease call out for a key: requests that find no unit here may wait for it while the units it asked
 * for cover them (`spare`), and never past `until`.
 */
export interface LeaseCall {
  /** Lease units asked for and not yet promised to a waiting request. */
  spare: number;
  /** Local time its answer is expected at: a recent round trip after it was sent. */
  readonly dueAt: number;
  /** Local time after which nobody waits for it any more (its answer is late: it may never come). */
  readonly until: number;
  /** Whether its answer came (or it failed). */
  done: boolean;
}

/** The object's latest answer about a key, as this isolate saw it. */
export interface View {
  /** The key's limits right after that decision (every unit leased out counted as used). */
  readonly limits: readonly LimitStatus[];
  /** The object's clock when it decided. */
  readonly decidedAt: number;
  /** Local time the call was sent at (`resetMs` counts down from it). */
  readonly sentAt: number;
  /** The limits it decided against when an operator's override, not the plan, applied. */
  readonly applied: readonly NamedLimit[] | null;
}

/** What the table knows of one key. */
export interface KeyLeases {
  readonly name: string;
  /** The key's limits when it was last seen. */
  limits: readonly LimitSpec[];
  /** Leases being spent, oldest (first to expire) first. */
  readonly held: HeldLease[];
  /** Leases that expired here with units used but not settled, or left unused: settled with the key's next call. */
  expired: HeldLease[];
  /** The key's lease call out, or null: one at a time per isolate. */
  call: LeaseCall | null;
  /** The object's latest answer about the key: with the units held here, what `RateLimit` says. */
  view: View | null;
  /** Requests seen, decayed with a 10 s time constant: about the key's rate per 10 s here. */
  score: number;
  /** Requests seen, decayed with a 100 ms time constant: follows a burst within a few requests. */
  burst: number;
  seenAt: number;
  /** Local time the key was first seen here (its rate is known over this long). */
  readonly firstSeen: number;
  /** Local time before which no lease is asked: the object had none to give. */
  quietUntil: number;
}

/** The time constant of the rate estimate (ms). */
const RATE_TAU_MS = 10_000;
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

/** The least time (ms) a request waits for a lease call out, however fast recent calls were. */
const MIN_WAIT_MS = 5;

/** An isolate settles an idle key's leases on its own once it has not seen the key for this long (ms). */
export const IDLE_RETURN_MS = 1_000;

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
  touch(name: string, limits: readonly LimitSpec[], now: number, out: KeySettlements[]): KeyLeases {
    let e = this.#entries.get(name);
    if (!e) {
      if (this.#entries.size >= this.#max) this.#evictOldest(out);
      e = {
        name,
        limits,
        held: [],
        expired: [],
        call: null,
        view: null,
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
    e.score = e.score * Math.exp(-dt / RATE_TAU_MS) + 1;
    e.burst = e.burst * Math.exp(-dt / BURST_TAU_MS) + 1;
    e.seenAt = now;
    return e;
  }

  /** The entry without counting a request, if any. */
  get(name: string): KeyLeases | undefined {
    return this.#entries.get(name);
  }

  /** Forgets a key's leases (an operator's reset or block); adds their settlement to `out`. */
  drop(name: string, out: KeySettlements[]): void {
    const e = this.#entries.get(name);
    if (!e) return;
    this.#entries.delete(name);
    pushSettlements(out, e, [...e.expired, ...e.held]);
  }

  /** Forgets the key's leases granted under other limits than `applied`; adds their settlement to `out`. */
  dropOthers(name: string, applied: readonly NamedLimit[] | null, out: KeySettlements[]): void {
    const e = this.#entries.get(name);
    if (!e) return;
    const gone: HeldLease[] = [];
    for (const list of [e.held, e.expired]) {
      for (let i = list.length - 1; i >= 0; i--) {
        const h = list[i] as HeldLease;
        if (sameLimits(h.applied, applied)) continue;
        gone.push(h);
        list.splice(i, 1);
      }
    }
    // A lease granted under other limits is recorded in other rings: settled against them, where its units are.
    pushSettlements(out, e, gone);
  }

  /**
   * Spends `cost` from the first lease still valid at `now` that has enough left. Expired leases
   * move to `expired`, to be settled with the key's next call.
   */
  spend(e: KeyLeases, cost: number, now: number): HeldLease | null {
    this.#expire(e, now);
    // `held` is sorted by expiry and the expired ones are gone: every lease left is valid at `now`.
    for (const h of e.held) {
      if (h.left >= cost) {
        h.left -= cost;
        h.used += cost;
        h.lastUseAt = now;
        return h;
      }
    }
    return null;
  }

  /**
   * Puts `units` spent from `h` back into it, when they are not settled yet (a refund): true when done. Back in a
   * lease still valid they may be spent again; in an expired one they are given back with its settlement. A settled
   * unit's record was moved to its use: it stays counted (spent again later, it would be used after its record).
   */
  unspend(e: KeyLeases, h: HeldLease, units: number): boolean {
    if (this.#entries.get(e.name) !== e || h.used < units || !(e.held.includes(h) || e.expired.includes(h))) {
      return false;
    }
    h.used -= units;
    h.left += units;
    return true;
  }

  /** The units of the key's leases valid at `now` under `applied` limits: what this isolate may still grant. */
  holding(e: KeyLeases, now: number, applied: readonly NamedLimit[] | null): number {
    let units = 0;
    for (const h of e.held) if (now < h.expiresAt && sameLimits(h.applied, applied)) units += h.left;
    return units;
  }

  /** Keeps the object's answer about the key when it is the latest decided (answers may arrive out of order). */
  saw(e: KeyLeases, view: View): void {
    if (e.view === null || view.decidedAt >= e.view.decidedAt) e.view = view;
  }

  /**
   * The key's settlements for a call about to go out: every lease with units used since its last
   * settlement, and every expired one (its unused units given back). They count as settled from
   * now on: a call that fails leaves them where the object recorded them, which is later (safe).
   */
  settle(e: KeyLeases, now: number): Settlement[] {
    this.#expire(e, now);
    // Far from every limit nobody needs the capacity a used unit holds until its record: re-dating it would cost
    // rows for nothing. Near a limit (or in a burst that brought the key there) it is what the key itself needs.
    const near = this.#near(e, now);
    const out: Settlement[] = [];
    for (const h of e.expired) if (h.left > 0 || near) out.push(settlement(h, h.left, near));
    e.expired = [];
    if (!near) return out;
    for (const h of e.held) {
      if (h.used === 0) continue;
      out.push(settlement(h, 0));
      h.used = 0;
    }
    return out;
  }

  /**
   * Whether the key is near a limit: as this isolate last saw it (some limit had less than half left, counting the
   * units held here as left), or heading there (at its recent rate here it would use half of some limit a window).
   */
  #near(e: KeyLeases, now: number): boolean {
    const perMs = rate(e, now);
    if (e.limits.some((l) => 2 * perMs * l.windowMs >= l.limit)) return true;
    const view = e.view ?? e.held.at(-1) ?? e.expired.at(-1) ?? null;
    if (view === null) return false;
    const limits = view.applied ?? e.limits;
    const held = this.holding(e, now, view.applied);
    return view.limits.some((l, i) => 2 * (l.remaining + held) < (limits[i]?.limit ?? 0));
  }

  /**
   * Settlements of keys not seen here for {@link IDLE_RETURN_MS}, for calls of their own: an idle
   * isolate frees what the key's other isolates may need. Only where it matters: when the key had
   * less than half of some limit left at the lease's grant. Elsewhere the units simply stay where they
   * are recorded until their record leaves the window (a settlement would cost a call and rows for nothing).
   */
  idle(now: number, out: KeySettlements[]): void {
    for (const e of this.#entries.values()) {
      if (now - e.seenAt < IDLE_RETURN_MS || e.call !== null) continue;
      this.#expire(e, now);
      const near = [...e.expired, ...e.held].filter((h) => (h.used > 0 || now >= h.expiresAt) && nearLimit(e, h));
      e.expired = [];
      if (near.length === 0) continue;
      const settle: Settlement[] = [];
      for (const h of near) {
        settle.push(settlement(h, now >= h.expiresAt ? h.left : 0));
        h.used = 0;
      }
      out.push({ name: e.name, limits: e.limits, settle });
    }
  }

  /**
   * The lease to ask for: about what this isolate would spend at its recent rate for the key
   * ({@link ASK_SHARE} of it), whole units only, at most `maxUnits`, over a lifetime of at most
   * `lifetimeMs` and at most as long as this isolate has watched the key (at least `youngMs`): a
   * rate seen for 20 ms says little about the next 10 s. A lease capped by `maxUnits` asks for the
   * time it takes to spend them. `units` 0 (no lease) when that is under {@link MIN_LEASE_UNITS}.
   * A key without a rate here ({@link fromLog}) asks for `maxUnits` over `lifetimeMs`, for the
   * object to size from the key's own rate.
   */
  want(e: KeyLeases, lifetimeMs: number, maxUnits: number, now: number, youngMs = 0): LeaseAsk {
    if (lifetimeMs <= 0 || now < e.quietUntil) return NO_ASK;
    // A lease arrives a round trip into its lifetime: one that would be mostly over by then is not worth asking.
    if (lifetimeMs < RTT_LIFETIMES * this.#rttMs) return NO_ASK;
    if (this.fromLog(e)) return { units: maxUnits, lifetimeMs };
    const perMs = ASK_SHARE * rate(e, now);
    const life = Math.min(lifetimeMs, Math.max(youngMs, now - e.firstSeen));
    const units = Math.floor(perMs * life);
    if (units < MIN_LEASE_UNITS) return NO_ASK;
    if (units <= maxUnits) return { units, lifetimeMs: life };
    return { units: maxUnits, lifetimeMs: Math.min(life, Math.ceil(maxUnits / perMs)) };
  }

  /** Whether the key has no rate of its own here yet: its lease is sized from the object's log. */
  fromLog(e: KeyLeases): boolean {
    return e.score < MIN_SCORE;
  }

  /** Records how long an object call took (ms): a moving average over recent calls. */
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
    if (e.call !== null || want.units === 0) return false;
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

  /**
   * Marks a lease call for `units` as out for the key at `now`; requests may wait for it (see {@link join}). The
   * returned call is cleared with {@link answered}.
   */
  calling(e: KeyLeases, units: number, now: number): LeaseCall {
    const rtt = Math.max(this.#rttMs, MIN_WAIT_MS);
    const call: LeaseCall = { spare: units, dueAt: now + Math.ceil(rtt), until: now + 2 * rtt, done: false };
    e.call = call;
    return call;
  }

  /**
   * The key's lease call a request of `cost` may wait for: one out, not late, whose spare units cover the
   * request (they are promised to it). Null: the request asks for itself.
   */
  join(e: KeyLeases, cost: number, now: number): LeaseCall | null {
    const call = e.call;
    if (call === null || now >= call.until || call.spare < cost) return null;
    call.spare -= cost;
    return call;
  }

  /** The lease call answered (or failed): done, and no longer the key's call out. */
  answered(e: KeyLeases, call: LeaseCall): void {
    call.done = true;
    if (e.call === call) e.call = null;
  }

  /**
   * Keeps a lease granted for a call sent at `sentAt` (local) and issued at `issuedAt` (the object's clock). `used`:
   * the request's own cost granted with it and recorded in its slot, its first use (at `sentAt`).
   */
  add(
    e: KeyLeases,
    lease: Lease,
    sentAt: number,
    issuedAt: number,
    limits: readonly LimitStatus[],
    applied: readonly NamedLimit[] | null = null,
    used = 0,
  ): HeldLease {
    const expiresAt = sentAt + lease.lifetimeMs - leaseMargin(lease.lifetimeMs);
    const held: HeldLease = {
      left: lease.units,
      used,
      lastUseAt: sentAt,
      expiresAt,
      recordedAt: lease.recordedAt,
      issuedAt,
      sentAt,
      limits,
      applied,
    };
    let i = e.held.length;
    while (i > 0 && (e.held[i - 1] as HeldLease).expiresAt > expiresAt) i--;
    e.held.splice(i, 0, held);
    return held;
  }

  /** Moves the key's leases expired at `now` out of `held`, keeping those with anything to settle in `expired`. */
  #expire(e: KeyLeases, now: number): void {
    while (e.held.length > 0 && now >= (e.held[0] as HeldLease).expiresAt) {
      const gone = e.held.shift() as HeldLease;
      if (gone.left > 0 || gone.used > 0) e.expired.push(gone);
    }
  }

  #evictOldest(out: KeySettlements[]): void {
    for (const [name, e] of this.#entries) {
      if (this.#entries.size < this.#max) break;
      if (e.call !== null) continue;
      this.drop(name, out);
    }
  }
}

/** A lease's settlement: its units used since the last one (unless `redate` is false), and `unused` units given back. */
function settlement(h: HeldLease, unused: number, redate = true): Settlement {
  return {
    recordedAt: h.recordedAt,
    issuedAt: h.issuedAt,
    used: redate ? h.used : 0,
    // Whole milliseconds, rounded up: never earlier than the use.
    lastUseMs: Math.max(0, Math.ceil(h.lastUseAt - h.sentAt)),
    unused,
  };
}

/** Adds the settlement of `leases` (each given up: its unused units back) for the key to `out`, when there is any. */
function pushSettlements(out: KeySettlements[], e: KeyLeases, leases: readonly HeldLease[]): void {
  const settle = leases.filter((h) => h.used > 0 || h.left > 0).map((h) => settlement(h, h.left));
  if (settle.length > 0) out.push({ name: e.name, limits: e.limits, settle });
}

/**
 * The key's recent rate here (requests per ms): the higher of two estimates, so that a burst shows
 * within a few requests. Each leaves out the request just counted (n requests span n − 1 intervals;
 * one request after a quiet spell is no burst). The 10 s estimate is divided by what its decayed count
 * reaches over the time the key has been watched here (at least the burst estimate's 100 ms): the rate
 * since then, unbiased while it ramps up.
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

/** Whether two override limit lists are the same (null: the plan's). */
export function sameLimits(a: readonly NamedLimit[] | null, b: readonly NamedLimit[] | null): boolean {
  if (a === b) return true;
  if (a === null || b === null || a.length !== b.length) return false;
  return a.every((l, i) => {
    const m = b[i] as NamedLimit;
    return l.limit === m.limit && l.windowMs === m.windowMs && l.tickMs === m.tickMs && l.name === m.name;
  });
}
