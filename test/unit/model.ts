/**
 * @module A brute-force reference for the key log: every record in a plain list per tick, every
 * answer computed from the definition by scanning it, and the real use times kept apart from
 * the records. Slow and obviously right.
 */

import type { Decision, Limit, LimitSpec, Settlement } from "../../src/core/index.ts";
import {
  FIRST_LEASE_UNITS,
  LEASE_HEADROOM_SHARE,
  LEASE_LIMIT_DIVISOR,
  leaseMargin,
  MIN_LEASE_UNITS,
  MIN_SPEND_MS,
  maxLeaseMs,
  normalizeLimits,
  ringLayout,
} from "../../src/core/index.ts";
import type { Grant } from "../support/window.ts";

export type { Grant } from "../support/window.ts";
export { sweepViolation } from "../support/window.ts";

function roundUp(t: number, tick: number): number {
  return Math.ceil(t / tick) * tick;
}

/** Cost of the grants a window `w` counts at time `at`: those with `t > at − w`, future ones included. */
export function countedAt(grants: readonly Grant[], w: number, at: number): number {
  let sum = 0;
  for (const g of grants) if (g.t > at - w) sum += g.cost;
  return sum;
}

export class Model {
  readonly limits: readonly Limit[];
  /** Records per tick, sorted by time. */
  readonly records = new Map<number, Grant[]>();
  clock = Number.NEGATIVE_INFINITY;
  /** The last refusal of a cost that could ever fit; a restart forgets it. */
  refusedAt = Number.NEGATIVE_INFINITY;

  constructor(specs: readonly LimitSpec[]) {
    this.limits = normalizeLimits(specs);
    for (const l of this.limits) this.records.set(l.tickMs, []);
  }

  #used(l: Limit, at: number): number {
    return countedAt(this.records.get(l.tickMs) as Grant[], l.windowMs, at);
  }

  /** Times at which a count can change after `t`: each record's leaving time per window. */
  #candidates(t: number): number[] {
    const times = new Set<number>([t]);
    for (const l of this.limits) {
      for (const g of this.records.get(l.tickMs) as Grant[]) if (g.t + l.windowMs > t) times.add(g.t + l.windowMs);
    }
    return [...times].sort((a, b) => a - b);
  }

  /** The slots of a tick's ring: its records that some window of that tick still holds at `t`. */
  #slots(tick: number, t: number): number {
    const w = Math.max(...this.limits.filter((l) => l.tickMs === tick).map((l) => l.windowMs));
    return (this.records.get(tick) as Grant[]).filter((g) => g.t > t - w).length;
  }

  #capacity(tick: number): number {
    return (ringLayout(this.limits).find((r) => r.tickMs === tick) as { capacity: number }).capacity;
  }

  #fitsAt(t: number, cost: number, which: readonly Limit[]): number {
    if (which.some((l) => cost > l.limit)) return Number.POSITIVE_INFINITY;
    for (const at of this.#candidates(t)) {
      if (which.every((l) => this.#used(l, at) + cost <= l.limit)) return at;
    }
    throw new Error("model: no time found");
  }

  /** A restart: the records survive, the clock starts again at `now`. */
  restart(now: number): void {
    this.clock = Math.floor(now);
    this.refusedAt = Number.NEGATIVE_INFINITY;
  }

  take(
    now: number,
    cost: number,
    leaseUnits = 0,
    leaseMs = 0,
    fromLog = false,
    settle: readonly Settlement[] = [],
    leadMs = 0,
  ): Decision {
    const t = Math.max(Math.floor(now), this.clock);
    this.clock = t;
    for (const s of settle) this.settle(t, s);
    const fits = this.limits.map((l) => this.#used(l, t) + cost <= l.limit);
    const allowed = fits.every(Boolean);
    const shortest = Math.min(...this.limits.map((l) => l.windowMs));
    if (!allowed && this.limits.every((l) => cost <= l.limit)) this.refusedAt = t;
    let lease: Decision["lease"] = null;
    if (allowed) {
      let extra = 0;
      let lifetime = 0;
      if (leaseUnits > 0 && leaseMs > 0 && t - this.refusedAt >= shortest) {
        // The policy from its definition: the units ahead of now, per limit, are what is leased out.
        const L = Math.min(leaseMs, maxLeaseMs(this.limits));
        extra = leaseUnits;
        let free = 1;
        let rate = 0;
        /** Below 3/4 of a limit free, a lease is spent within 1/8 of its window. */
        let most = Number.POSITIVE_INFINITY;
        for (const l of this.limits) {
          const left = Math.max(0, l.limit - this.#used(l, t)) - cost;
          const ahead = countedAt(this.records.get(l.tickMs) as Grant[], 0, t);
          const headroom = left + ahead;
          extra = Math.min(extra, left, Math.floor(headroom * LEASE_HEADROOM_SHARE) - ahead);
          free = Math.min(free, headroom / l.limit);
          if (headroom / l.limit < 0.75) most = Math.min(most, Math.floor(l.windowMs / 8));
          // The key's rate over this window: what it used before now.
          rate = Math.max(rate, (this.#used(l, t) - ahead) / l.windowMs);
        }
        // One lease: 1/8 of the smallest limit, twice that while at least 3/4 of every limit is free.
        const perLease = Math.floor(Math.min(...this.limits.map((l) => l.limit)) / LEASE_LIMIT_DIVISOR);
        extra = Math.min(extra, free >= 0.75 && perLease >= MIN_LEASE_UNITS ? 2 * perLease : perLease);
        // The caller spends the lease over the lifetime less the lead; below 3/4 free that time and the units
        // shrink together with the free share, and fewer units than asked last it proportionally less long.
        const lead = Math.min(leadMs, L);
        const scale = free >= 0.75 ? 1 : Math.max(0, 2 * free - 0.5);
        let spend = Math.floor((L - lead) * scale);
        if (fromLog) {
          // A first lease only far below every limit.
          extra = free >= 0.75 ? Math.min(extra, FIRST_LEASE_UNITS, Math.floor(rate * spend)) : 0;
          if (extra > 0) spend = Math.min(spend, Math.ceil(extra / rate));
        } else {
          extra = Math.min(extra, Math.floor(leaseUnits * scale));
          spend = Math.floor(((L - lead) * Math.max(0, extra)) / leaseUnits);
        }
        if (spend > most) [extra, spend] = [Math.floor((extra * most) / spend), most];
        // At least MIN_SPEND_MS to spend the units in, within what was asked and the near-limit cap.
        spend = Math.max(spend, Math.min(MIN_SPEND_MS, L - lead, most));
        lifetime = lead + spend;
        if (extra < MIN_LEASE_UNITS || spend < 1) [extra, lifetime] = [0, 0];
      }
      const units = cost + extra;
      if (units > 0) {
        const at = extra > 0 ? t + lifetime : t;
        const recordedAt: number[] = [];
        for (const [tick, list] of this.records) recordedAt.push(this.#record(tick, list, t, at, units));
        if (extra > 0) lease = { units: extra, lifetimeMs: lifetime, recordedAt };
        if (cost > 0) return { ...this.#decision(t, cost, allowed, lease), recordedAt };
      }
    }
    return this.#decision(t, cost, allowed, lease);
  }

  /** Records `units` at `at` rounded up to the tick; returns where they went. */
  #record(tick: number, list: Grant[], t: number, at: number, units: number): number {
    const want = roundUp(at, tick);
    const same = list.find((g) => g.t === want);
    // A ring with no free slot adds the units to the next later slot, or with none later moves its newest slot later
    // to take them (later is safe).
    const full = this.#slots(tick, t) >= this.#capacity(tick);
    const later = full ? list.find((g) => g.t > want) : undefined;
    const into = same ?? later;
    const newest = list.at(-1);
    if (into) into.cost += units;
    else if (full && newest) {
      newest.t = want;
      newest.cost += units;
    } else {
      list.push({ t: want, cost: units });
      list.sort((a, b) => a.t - b.t);
    }
    return into?.t ?? want;
  }

  /**
   * Settles a lease from the definition: its used units move from the record to the last use's offset after
   * `issuedAt` (plus a millisecond and the margin), kept inside the ring's shortest window, when that is earlier;
   * its unused units are taken back.
   */
  settle(now: number, s: Settlement): void {
    if (s.recordedAt.length !== this.records.size) return;
    const t = Math.max(Math.floor(now), this.clock);
    this.clock = t;
    const at = s.issuedAt + s.lastUseMs + 1 + leaseMargin(s.lastUseMs);
    [...this.records].forEach(([tick, list], r) => {
      const from = s.recordedAt[r] as number;
      const shortest = Math.min(...this.limits.filter((l) => l.tickMs === tick).map((l) => l.windowMs));
      const to = roundUp(Math.max(at, t - shortest + 1), tick);
      const g = list.find((x) => x.t === from);
      if (g && s.used > 0 && to < from) {
        const moved = Math.min(s.used, g.cost);
        g.cost -= moved;
        if (g.cost === 0) list.splice(list.indexOf(g), 1);
        this.#record(tick, list, t, to, moved);
      }
      const left = list.find((x) => x.t === from);
      if (left && s.unused > 0) {
        left.cost -= Math.min(s.unused, left.cost);
        if (left.cost === 0) list.splice(list.indexOf(left), 1);
      }
    });
  }

  /** What {@link take} would decide for `cost` at `now`, recording nothing (the clock moves, as the core's `check`). */
  check(now: number, cost: number): Decision {
    const t = Math.max(Math.floor(now), this.clock);
    this.clock = t;
    const allowed = this.limits.every((l) => this.#used(l, t) + cost <= l.limit);
    return this.#decision(t, cost, allowed, null);
  }

  giveBack(recordedAt: readonly number[], units: number): void {
    [...this.records.values()].forEach((list, r) => {
      const i = list.findIndex((g) => g.t === recordedAt[r]);
      if (i === -1) return;
      const g = list[i] as Grant;
      g.cost -= Math.min(units, g.cost);
      if (g.cost === 0) list.splice(i, 1);
    });
  }

  /** The records with `ts ≤ now` are forgotten. */
  forget(now: number): void {
    this.clock = Math.max(Math.floor(now), this.clock);
    for (const [tick, list] of this.records) {
      this.records.set(
        tick,
        list.filter((g) => g.t > this.clock),
      );
    }
  }

  #decision(t: number, cost: number, allowed: boolean, lease: Decision["lease"]): Decision {
    const limits = this.limits.map((l) => {
      const used = this.#used(l, t);
      const remaining = Math.max(0, l.limit - used);
      let resetMs = 0;
      if (used > 0) {
        const at = this.#candidates(t).find((c) => c > t && Math.max(0, l.limit - this.#used(l, c)) > remaining);
        if (at === undefined) throw new Error("model: remaining never grows");
        resetMs = at - t;
      }
      return { remaining, resetMs, exceeded: !allowed && remaining < cost };
    });
    const neverAllowed = this.limits.some((l) => cost > l.limit);
    return {
      allowed,
      neverAllowed,
      cost,
      now: t,
      retryAfterMs: allowed ? 0 : this.#fitsAt(t, cost, this.limits) - t,
      blockedUntil: this.#fitsAt(
        t,
        1,
        this.limits.filter((l) => this.#used(l, t) > 0),
      ),
      limits,
      lease,
    };
  }
}
