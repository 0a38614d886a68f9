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

import type { Decision, LimitStatus } from "./decision.ts";
import { describe } from "./duration.ts";
import {
  FAR_BELOW_FREE,
  FAR_LEASE_FACTOR,
  FIRST_LEASE_UNITS,
  LEASE_HEADROOM_SHARE,
  type Limit,
  type LimitSpec,
  leaseMargin,
  leaseScale,
  MIN_LEASE_UNITS,
  MIN_SPEND_MS,
  maxLeaseMs,
  maxLeaseUnits,
  NEAR_SPEND_DIVISOR,
  normalizeLimits,
  ringLayout,
} from "./limits.ts";
import { Ring, roundUp, type SlotRow } from "./ring.ts";

/** A decision and the rows it changed (one per ring for a grant, none for a denial). */
export interface Outcome {
  readonly decision: Decision;
  readonly writes: readonly SlotRow[];
}

/** What {@link KeyLog.take} is asked for. */
export interface Ask {
  /** The request's own cost: a safe integer ≥ 0 (0: only a lease is asked for). */
  readonly cost: number;
  /** Units wanted ahead of use (0: a per-request decision). */
  readonly leaseUnits?: number;
  /** The lease lifetime wanted (ms); the log grants at most {@link maxLeaseMs} of its limits, less near a limit. */
  readonly leaseMs?: number;
  /**
   * The part of `leaseMs` that passes before the lease reaches the caller (its recent round trip to the object, ms;
   * at most `leaseMs`): the rest is the time it spends the units in, which is what the log scales down.
   */
  readonly leaseLeadMs?: number;
  /**
   * The caller has no rate of its own for the key (its first request here): `leaseUnits` is only a
   * cap, and the lease is sized from the key's own recent rate — what its longest window holds,
   * spread over that window, for one lifetime.
   */
  readonly leaseFromLog?: boolean;
  /**
   * The caller's leases of this key, settled before the decision (so that it sees them): used units re-dated to
   * their last use, unused ones given back.
   */
  readonly settle?: readonly Settlement[];
}

/**
 * What a caller reports of one lease it holds (docs/design.md, "Settled leases"): `used` units spent since its
 * last report, the last of them `lastUseMs` after the lease was asked for (on the caller's clock), and `unused`
 * units it gives up. The object moves the used units from the lease's record to `issuedAt + lastUseMs` (plus the
 * clock-rate margin, {@link leaseMargin}) — never earlier than a use, since `issuedAt` came after the ask — and
 * takes the unused ones back.
 */
export interface Settlement {
  /** Where the lease was recorded, one time per ring (as the lease said). */
  readonly recordedAt: readonly number[];
  /** The object's clock when it granted the lease (the decision's `now`). */
  readonly issuedAt: number;
  /** Units spent since the lease was last settled (0: none). */
  readonly used: number;
  /** The last of those uses, in ms after the caller asked for the lease (its own clock). */
  readonly lastUseMs: number;
  /** Units the caller will never spend (0: none). */
  readonly unused: number;
}

/**
 * Units an isolate granted alone while the key's object could not answer (docs/design.md, "When the object cannot
 * answer"): `units` used `ageMs` before the call reporting them was sent (on the caller's clock).
 */
export interface Use {
  readonly ageMs: number;
  readonly units: number;
}

/** Grants over one limit's window, per bucket: what an operator's chart shows. */
export interface History {
  /** The window's start (exclusive, ms): bucket `b` holds slots in `(startMs + b·bucketMs, startMs + (b+1)·bucketMs]`. */
  readonly startMs: number;
  readonly bucketMs: number;
  readonly counts: readonly number[];
  /** Units recorded after `now` (leased ahead, or rounded up to a tick): they count already. */
  readonly ahead: number;
}

/** Result of {@link KeyLog.restore}. */
export interface Restored {
  readonly log: KeyLog;
  /**
   * True when the stored rows do not fit this layout (the limits changed): delete every stored
   * row and write {@link KeyLog.rows} instead. False on a plain restart.
   */
  readonly rewrite: boolean;
}

/** Where limit `i` lives: ring and member index within it. */
interface Place {
  readonly ring: Ring;
  readonly j: number;
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
    const t = Math.floor(now);
    const byRing = new Map<number, SlotRow[]>();
    // A ring whose every row was given back (cost 0) is stored, and empty: not a new tick to seed.
    const stored = new Set<number>();
    for (const r of rows) {
      if (!Number.isSafeInteger(r.ts) || !Number.isSafeInteger(r.cost) || r.cost < 0) continue;
      stored.add(r.ring);
      if (r.cost === 0) continue;
      const list = byRing.get(r.ring);
      if (list) list.push(r);
      else byRing.set(r.ring, [r]);
    }
    const current = new Set(log.rings.map((r) => r.tickMs));
    // Rows of a ring that no longer exists must go (a rewrite deletes them).
    let rewrite = [...byRing.keys()].some((tick) => !current.has(tick));
    for (const ring of log.rings) {
      const own = stored.has(ring.tickMs) ? (byRing.get(ring.tickMs) ?? []) : undefined;
      const window = longestWindow(ring, log);
      let slots: SlotRow[];
      if (own) {
        slots = own.filter((r) => r.ts > t - window).sort((a, b) => a.ts - b.ts);
      } else {
        // A new tick (no stored ring has it): every ring records every grant, so seed it from the
        // stored ring that holds the most units (the most history), rounded up to the new tick
        // (later is safe).
        let seed: SlotRow[] = [];
        for (const list of byRing.values()) if (total(list) > total(seed)) seed = list;
        slots = seed
          .filter((r) => r.ts > t - window)
          .map((r) => ({ ...r, ts: roundUp(r.ts, ring.tickMs) }))
          .sort((a, b) => a.ts - b.ts);
      }
      const fitted = toLayout(slots, ring);
      // Seeded rows, and rows that had to be merged or renumbered, are not stored as they are now.
      if (own ? fitted !== slots : fitted.length > 0) rewrite = true;
      ring.load(fitted);
      ring.evict(t);
    }
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
    if (!Number.isSafeInteger(cost) || cost < 0)
      throw new RangeError(`cost: expected a whole number ≥ 0, got ${describe(cost)}`);
    if (!Number.isSafeInteger(leaseUnits) || leaseUnits < 0) {
      throw new RangeError(`leaseUnits: expected a whole number ≥ 0, got ${describe(leaseUnits)}`);
    }
    if (!Number.isSafeInteger(leaseMs) || leaseMs < 0) {
      throw new RangeError(`leaseMs: expected whole milliseconds ≥ 0, got ${describe(leaseMs)}`);
    }
    if (!Number.isSafeInteger(leaseLeadMs) || leaseLeadMs < 0 || leaseLeadMs > leaseMs) {
      throw new RangeError(`leaseLeadMs: expected whole milliseconds from 0 to leaseMs, got ${describe(leaseLeadMs)}`);
    }
    if (cost === 0 && leaseUnits === 0) throw new RangeError("cost: 0 asks for nothing; ask for a cost or lease units");
    if (!Array.isArray(settle)) throw new RangeError("settle: expected a list of lease settlements");
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
      return { decision: this.#decision(t, cost, { allowed: false }), writes: given };
    }

    // A key refused within its shortest window is at its limit: leases there would hold units
    // others are waiting for, so it gets the per-request path until the pressure is gone.
    const { units: extra, lifetimeMs: lifetime } =
      leaseUnits > 0 && leaseMs > 0 && t - this.#refusedAt >= this.#shortestWindow
        ? this.#leaseFor(t, cost, {
            want: leaseUnits,
            lifetimeMs: Math.min(leaseMs, this.maxLeaseMs),
            leadMs: leaseLeadMs,
            fromLog: ask.leaseFromLog === true,
          })
        : NO_LEASE;
    const units = cost + extra;
    if (units === 0) return { decision: this.#decision(t, cost, { allowed: true }), writes: given };
    const at = extra > 0 ? t + lifetime : t;
    const recorded = this.rings.map((r) => r.record(at, units));
    const writes = given.length > 0 ? [...given, ...recorded] : recorded;
    const recordedAt = recorded.map((w) => w.ts);
    const lease = extra > 0 ? { units: extra, lifetimeMs: lifetime, recordedAt } : null;
    return {
      decision: this.#decision(t, cost, { allowed: true, lease, recordedAt: cost > 0 ? recordedAt : undefined }),
      writes,
    };
  }

  /**
   * Settles one lease at `now` (see {@link Settlement}): moves its used units to `issuedAt + lastUseMs` plus the
   * margin, when that is earlier than their record, and takes back its unused units. Never earlier than a use;
   * a settled unit's record is kept inside every window of its ring (a unit whose use has left a shorter window of
   * it already counts there for at most a millisecond more), and taken out once its use has left every window. A lease recorded under other limits (other rings) is not here:
   * its units stay where they are and expire.
   *
   * @returns the rows to write, in order
   * @throws RangeError for counts or times out of range
   */
  settle(now: number, s: Settlement): SlotRow[] {
    if (!Array.isArray(s?.recordedAt) || s.recordedAt.length !== this.rings.length) return [];
    const { used, unused, issuedAt, lastUseMs } = s;
    for (const [field, n] of [
      ["used", used],
      ["unused", unused],
      ["lastUseMs", lastUseMs],
    ] as const) {
      if (!Number.isSafeInteger(n) || n < 0)
        throw new RangeError(`${field}: expected a whole number ≥ 0, got ${describe(n)}`);
    }
    if (!Number.isSafeInteger(issuedAt))
      throw new RangeError(`issuedAt: expected a time in ms, got ${describe(issuedAt)}`);
    const t = this.#advance(now);
    // One more millisecond for clocks read in whole milliseconds (the use may lie up to 1 ms past its reading).
    const at = issuedAt + lastUseMs + 1 + leaseMargin(lastUseMs);
    const writes: SlotRow[] = [];
    this.rings.forEach((ring, r) => {
      const from = s.recordedAt[r] as number;
      // Used units whose use has left every window of the ring count nowhere any more: taken out, not moved (moved
      // to the oldest time inside the shortest window, they would count there for a millisecond more).
      if (used > 0 && at <= t - longestWindow(ring, this)) {
        const row = ring.giveBack(from, used);
        if (row) writes.push(row);
      } else if (used > 0) writes.push(...ring.move(from, Math.max(at, t - shortestWindow(ring, this) + 1), used));
      const row = unused > 0 ? ring.giveBack(from, unused) : null;
      if (row) writes.push(row);
    });
    return writes;
  }

  /**
   * Records units used elsewhere (see {@link Use}) at `now`: each at `now − ageMs` plus one millisecond and the
   * clock-rate margin ({@link leaseMargin}) — never earlier than its use, since the call reporting it was sent after
   * the use and reached this log after that. Recorded whatever the limits say (those units passed): the key then
   * waits until they leave its windows. A use that has left every window of a ring counts nowhere there and is
   * skipped; one older than the ring's shortest window is recorded inside it (later: safe).
   *
   * @returns the rows to write, in order
   * @throws RangeError for a list that is not of uses (whole ms ≥ 0, whole units ≥ 1)
   */
  record(now: number, uses: readonly Use[]): SlotRow[] {
    checkUses(uses);
    const t = this.#advance(now);
    const writes: SlotRow[] = [];
    for (const { ageMs, units } of uses) {
      const at = t - ageMs + 1 + leaseMargin(ageMs);
      for (const ring of this.rings) {
        if (at <= t - longestWindow(ring, this)) continue;
        writes.push(ring.record(Math.max(at, t - shortestWindow(ring, this) + 1), units));
      }
    }
    return writes;
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
    return this.#decision(t, 0, { allowed: true });
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
    return this.#decision(t, cost, { allowed: this.rings.every((r) => r.fits(cost)) });
  }

  /**
   * Refuses a request of `cost` at `now` because an operator blocked the key until `until`:
   * records nothing. Nothing remains under any limit before `until`, and the wait is exact: the
   * later of `until` and the time the cost fits every limit.
   */
  refuse(now: number, cost: number, until: number): Decision {
    const t = this.#advance(now);
    const end = Math.max(t, Math.floor(until));
    const free = cost > this.#minLimit ? Number.POSITIVE_INFINITY : Math.max(end, this.#freeAt(t, cost));
    const open = this.#decision(t, 0, { allowed: true });
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
   * Units recorded under limit `i` per bucket of its window ending at `now`: `buckets` counts of
   * `windowMs / buckets` ms each (oldest first), and `ahead`, the units recorded after `now`
   * (leases and rounding up). Reads only.
   */
  history(i: number, now: number, buckets: number): History {
    const limit = this.limits[i];
    if (!limit) throw new RangeError(`limit: expected an index below ${this.limits.length}, got ${describe(i)}`);
    if (!Number.isSafeInteger(buckets) || buckets < 1)
      throw new RangeError(`buckets: expected a positive integer, got ${describe(buckets)}`);
    const t = Math.floor(now);
    const start = t - limit.windowMs;
    const bucketMs = limit.windowMs / buckets;
    const counts = new Array<number>(buckets).fill(0);
    let ahead = 0;
    const ring = (this.#places[i] as Place).ring;
    for (const r of ring.rows()) {
      if (r.ts <= start) continue;
      if (r.ts > t) ahead += r.cost;
      else {
        const b = Math.min(buckets - 1, Math.floor((r.ts - start - 1) / bucketMs));
        counts[b] = (counts[b] as number) + r.cost;
      }
    }
    return { startMs: start, bucketMs, counts, ahead };
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

  /**
   * The lease a grant of `cost` at `t` may carry (the rings evicted to `t`, the cost fitting). The caller asked for
   * `want` units to spend over `lifetimeMs` less `leadMs` (the round trip before the lease reaches it): at most
   * `want` units, at most {@link maxLeaseUnits} ({@link FAR_LEASE_FACTOR} times that while the key is
   * {@link FAR_BELOW_FREE far below} every limit), and at most {@link LEASE_HEADROOM_SHARE} of each limit's headroom
   * less what is leased out already. Below far, the spending time and the units with it are scaled down with the
   * least free share ({@link leaseScale}: none under 1/4); fewer units than `want` get a spending time in proportion, so that the caller
   * spends them at the rate it asked at rather than giving them back. `fromLog` (a caller new to the key): none below
   * far; else `want` is only a cap; at most {@link FIRST_LEASE_UNITS}, and at most what the key uses in the spending
   * time at its fastest recent rate over its windows (units ahead of now left out), for the time the key takes to
   * use them.
   * The lifetime is the lead plus the spending time. Fewer than {@link MIN_LEASE_UNITS} units: no lease.
   */
  #leaseFor(
    t: number,
    cost: number,
    asked: { want: number; lifetimeMs: number; leadMs: number; fromLog: boolean },
  ): { units: number; lifetimeMs: number } {
    const { want, lifetimeMs, leadMs, fromLog } = asked;
    let units = want;
    let free = 1;
    /** The key's fastest recent rate (units per ms) over its limits' windows, units ahead of now left out. */
    let rate = 0;
    /** The longest time the units may be spent over (ms): {@link NEAR_SPEND_DIVISOR}. */
    let most = Number.POSITIVE_INFINITY;
    this.#places.forEach((p, i) => {
      const ahead = p.ring.ahead(t);
      const left = p.ring.remaining(p.j) - cost;
      const headroom = left + ahead;
      const limit = this.limits[i] as Limit;
      units = Math.min(units, left, Math.floor(headroom * LEASE_HEADROOM_SHARE) - ahead);
      free = Math.min(free, headroom / limit.limit);
      // A lease spent over a longer time holds more of a limit's window: near a limit, a short part of it.
      if (headroom < FAR_BELOW_FREE * limit.limit)
        most = Math.min(most, Math.floor(limit.windowMs / NEAR_SPEND_DIVISOR));
      rate = Math.max(rate, (limit.limit - p.ring.remaining(p.j) - ahead) / limit.windowMs);
    });
    const far = free >= FAR_BELOW_FREE;
    // Limits too small for a lease near them (under 16) get none far below them either.
    const perLease = this.maxLeaseUnits;
    units = Math.min(units, far && perLease >= MIN_LEASE_UNITS ? FAR_LEASE_FACTOR * perLease : perLease);
    const lead = Math.min(leadMs, lifetimeMs);
    const scale = leaseScale(free);
    let spend = Math.floor((lifetimeMs - lead) * scale);
    if (fromLog) {
      // A caller new to the key: a few units at most (it may see little of the key's traffic), for about
      // as long as the whole key takes to use them; none near a limit, where units it leaves unused (or takes away
      // when it vanishes) are missing from the key's budget for as long as they are held.
      if (!far) return NO_LEASE;
      units = Math.min(units, FIRST_LEASE_UNITS, Math.floor(rate * spend));
      if (units > 0) spend = Math.min(spend, Math.ceil(units / rate));
    } else {
      // The caller asked for what it spends in the time asked: a shorter time carries fewer units, and fewer units
      // last it less long.
      units = Math.min(units, Math.floor(want * scale));
      spend = Math.floor(((lifetimeMs - lead) * Math.max(0, units)) / want);
    }
    if (spend > most) {
      units = Math.floor((units * most) / spend);
      spend = most;
    }
    // A lease cut to a few units at a burst's rate would be spent over a few milliseconds: it would expire while the
    // requests it is for are still on their way back from the object, refused, and hold its units for nothing. Its
    // spending time is at least MIN_SPEND_MS (within what was asked): units used are settled at their use, and units
    // left go back with the next call.
    spend = Math.max(spend, Math.min(MIN_SPEND_MS, lifetimeMs - lead, most));
    return units < MIN_LEASE_UNITS || spend < 1 ? NO_LEASE : { units, lifetimeMs: lead + spend };
  }

  /** Moves the clock to `now` (never back) and evicts every ring to it. */
  #advance(now: number): number {
    if (!Number.isFinite(now)) throw new RangeError(`now: expected a finite time in ms, got ${describe(now)}`);
    const t = Math.max(Math.floor(now), this.#clock);
    this.#clock = t;
    for (const r of this.rings) r.evict(t);
    return t;
  }

  /** Earliest time ≥ `t` at which `cost` fits every limit if nothing else is granted (∞ if never). */
  #freeAt(t: number, cost: number): number {
    let at = t;
    for (const p of this.#places) at = Math.max(at, p.ring.freeAt(p.j, t, cost));
    return at;
  }

  /** The decision at `t`; `recordedAt`, where a granted cost was recorded (left out when undefined). */
  #decision(
    t: number,
    cost: number,
    outcome: { allowed: boolean; lease?: Decision["lease"]; recordedAt?: readonly number[] | undefined },
  ): Decision {
    const { allowed, lease = null, recordedAt } = outcome;
    const limits: LimitStatus[] = this.#places.map((p) => ({
      remaining: p.ring.remaining(p.j),
      resetMs: p.ring.resetMs(p.j, t),
      exceeded: !allowed && p.ring.remaining(p.j) < cost,
    }));
    const neverAllowed = cost > this.#minLimit;
    let blockedUntil = t;
    for (const p of this.#places) blockedUntil = Math.max(blockedUntil, p.ring.freeAt(p.j, t, 1));
    const decision: { -readonly [K in keyof Decision]: Decision[K] } = {
      allowed,
      neverAllowed,
      cost,
      now: t,
      retryAfterMs: allowed ? 0 : neverAllowed ? Number.POSITIVE_INFINITY : this.#freeAt(t, cost) - t,
      blockedUntil,
      limits,
      lease,
    };
    if (recordedAt !== undefined) decision.recordedAt = recordedAt;
    return decision;
  }
}

/**
 * Checks a list of {@link Use}s: whole milliseconds ≥ 0 and whole units ≥ 1 each.
 *
 * @throws RangeError naming the first bad field
 */
export function checkUses(uses: readonly Use[]): void {
  if (!Array.isArray(uses)) throw new RangeError("uses: expected a list of uses");
  for (const u of uses) {
    if (!Number.isSafeInteger(u?.ageMs) || u.ageMs < 0)
      throw new RangeError(`uses[].ageMs: expected whole milliseconds ≥ 0, got ${describe(u?.ageMs)}`);
    if (!Number.isSafeInteger(u.units) || u.units < 1)
      throw new RangeError(`uses[].units: expected a positive integer, got ${describe(u.units)}`);
  }
}

const NO_LEASE = { units: 0, lifetimeMs: 0 } as const;

/** No returns, no rows: shared, never written to (a call allocates nothing for what it does not have). */
const NOTHING: readonly never[] = Object.freeze([]);

function shortestWindow(ring: Ring, log: KeyLog): number {
  let w = Number.POSITIVE_INFINITY;
  for (const l of log.limits) if (l.tickMs === ring.tickMs) w = Math.min(w, l.windowMs);
  return w;
}

function longestWindow(ring: Ring, log: KeyLog): number {
  let w = 0;
  for (const l of log.limits) if (l.tickMs === ring.tickMs) w = Math.max(w, l.windowMs);
  return w;
}

function total(rows: readonly SlotRow[]): number {
  let sum = 0;
  for (const r of rows) sum += r.cost;
  return sum;
}

/**
 * Rows as the ring can hold them: distinct times (merged), distinct keys below the capacity, at
 * most `capacity` slots (the newest). Returns `slots` itself when it already fits.
 */
function toLayout(slots: readonly SlotRow[], ring: Ring): SlotRow[] {
  const keys = new Set<number>();
  let ok = slots.length <= ring.capacity;
  for (let i = 0; ok && i < slots.length; i++) {
    const r = slots[i] as SlotRow;
    const prev = slots[i - 1];
    if (
      r.key < 0 ||
      r.key >= ring.capacity ||
      keys.has(r.key) ||
      r.ts % ring.tickMs !== 0 ||
      (prev && prev.ts === r.ts)
    ) {
      ok = false;
    }
    keys.add(r.key);
  }
  if (ok) return slots as SlotRow[];
  const merged: SlotRow[] = [];
  for (const r of slots) {
    const ts = roundUp(r.ts, ring.tickMs);
    const last = merged.at(-1);
    if (last && last.ts === ts) merged[merged.length - 1] = { ...last, cost: last.cost + r.cost };
    else merged.push({ ring: ring.tickMs, key: 0, ts, cost: r.cost });
  }
  return merged.slice(-ring.capacity).map((r, k) => ({ ...r, key: k }));
}
