/**
 * @module What an isolate decides alone while a key's object cannot answer (docs/design.md, "When the object cannot
 * answer"): its own exact log of the key — every grant it made or saw made for the key, at its use — decided
 * against each limit scaled by the fallback share, and the grants it made alone, to report to the object when it
 * answers again. Pure: time is passed in.
 */

import type { Decision } from "./decision.ts";
import { describe } from "./duration.ts";
import { type LimitSpec, normalizeLimits } from "./limits.ts";
import { KeyLog, type Use } from "./log.ts";

/** How long a fallback that can grant nothing (a share that leaves a limit under one unit) tells callers to wait. */
export const FALLBACK_NOTHING_RETRY_MS = 1000;

/** One grant made alone, not yet reported: `units` used at `at` (the isolate's clock, rounded up to the grain). */
interface Alone {
  at: number;
  units: number;
}

export class FallbackLog {
  /** The key's log under its limits scaled by the share; null when some limit scales to under one unit. */
  readonly #log: KeyLog | null;
  /** Grants made alone are kept per this many ms (rounded up: later is safe), so they stay a bounded list. */
  readonly #grainMs: number;
  /** How many limits the key has. */
  readonly #count: number;
  /** The longest window: a grant made alone longer ago than this counts nowhere, and is not reported. */
  readonly #longestMs: number;
  /** Grants made alone and not yet recorded by the object, oldest first. */
  #alone: Alone[] = [];
  /**
   * How many of {@link #alone}'s first entries are out in a report (0: none is out). Entries are only appended, and
   * only removed when that report comes back, so the ones out stay the first ones.
   */
  #out = 0;

  /**
   * @param limits the key's limits, as its object is sent them
   * @param share the fallback share (0–1): each limit is scaled to `floor(share × limit)` units, at its own tick
   * @throws RangeError for limits the core rejects, or a share outside 0–1
   */
  constructor(limits: readonly LimitSpec[], share: number) {
    if (typeof share !== "number" || !(share >= 0 && share <= 1))
      throw new RangeError(`share: expected a number from 0 to 1, got ${describe(share)}`);
    const full = normalizeLimits(limits);
    const scaled = full.map((l) => ({ limit: Math.floor(share * l.limit), windowMs: l.windowMs, tickMs: l.tickMs }));
    this.#log = scaled.every((l) => l.limit >= 1) ? new KeyLog(scaled) : null;
    this.#grainMs = Math.min(...full.map((l) => l.tickMs));
    this.#longestMs = Math.max(...full.map((l) => l.windowMs));
    this.#count = full.length;
  }

  /** From this time on nothing in the log counts and nothing is left to report: the log can be dropped. */
  get idleAt(): number {
    // Grants made alone are in the log too, recorded no earlier than their entries here: its idle time covers them.
    return this.#log?.idleAt ?? Number.NEGATIVE_INFINITY;
  }

  /** Whether grants made alone wait to be recorded by the object (a report of them may be out). */
  get pending(): boolean {
    return this.#alone.length > 0;
  }

  /** Whether a report is out: until it comes back ({@link answered}), {@link report} gives none. */
  get reporting(): boolean {
    return this.#out > 0;
  }

  /** Slots the log holds in memory (for the isolate's bound on its logs). */
  get slots(): number {
    let n = this.#alone.length;
    for (const ring of this.#log?.rings ?? []) n += ring.allocated;
    return n;
  }

  /** A grant of `units` made at `now` with the object's word (by it, or from a lease it gave): counted here too. */
  saw(now: number, units: number): void {
    this.#log?.record(now, [{ ageMs: 0, units }]);
  }

  /**
   * Decides a request of `cost` alone at `now`, against the scaled limits: when they fit it, records it here and
   * keeps it to report. With no log (a share too small for some limit), refuses, to be asked again after
   * {@link FALLBACK_NOTHING_RETRY_MS}.
   */
  take(now: number, cost: number): Decision {
    if (this.#log === null) return nothing(now, cost, this.#count);
    const d = alone(this.#log.take(now, { cost }).decision);
    if (!d.allowed) return d;
    this.#keep(this.reportedAt(d.now), cost);
    return d;
  }

  /** When a grant made alone at `t` (the log's clock, as its decision says) is reported as used: `t` rounded up. */
  reportedAt(t: number): number {
    return Math.ceil(t / this.#grainMs) * this.#grainMs;
  }

  /**
   * A grant made alone at `at` ({@link reportedAt}) used `units` fewer than it reserved (docs/llm.md, "Settled
   * costs"): gives them back from the grants made alone and not yet reported at `at` or before — any unit there
   * was used no later than this grant's own, so what is reported still covers every use, never earlier. Its count
   * here stays (this log only ever counts more). Returns the units given back: fewer when those grants are out in a
   * report or recorded by the object already (their units stay counted there).
   */
  giveBack(at: number, units: number): number {
    let left = units;
    for (let i = this.#alone.length - 1; i >= this.#out && left > 0; i--) {
      const a = this.#alone[i] as Alone;
      if (a.at > at) continue;
      const given = Math.min(a.units, left);
      a.units -= given;
      left -= given;
      if (a.units === 0) this.#alone.splice(i, 1);
    }
    return units - left;
  }

  /**
   * A settled grant's debt (docs/llm.md, "Settled costs"): `units` used beyond its reservation, known at `now` — counted
   * here at `now` whatever the limits say, and reported to the object as used then (never earlier than their use,
   * which ended by `now`).
   */
  owe(now: number, units: number): void {
    this.#log?.record(now, [{ ageMs: 0, units }]);
    this.#keep(this.reportedAt(Math.max(now, this.#log?.clock ?? now)), units);
  }

  /** Keeps `units` granted alone to report as used at `at` (after the entries out in a report, which stay as sent). */
  #keep(at: number, units: number): void {
    // An entry out in a report is not added to: what the object records of it must be what it was sent.
    const last = this.#alone.length > this.#out ? this.#alone.at(-1) : undefined;
    if (last?.at === at) last.units += units;
    else this.#alone.push({ at, units });
  }

  /** Whether a request of `cost` would be granted alone at `now`; records nothing. */
  check(now: number, cost: number): Decision {
    return this.#log === null ? nothing(now, cost, this.#count) : alone(this.#log.check(now, cost));
  }

  /**
   * The grants made alone still in some window at `now`, as uses for a call sent at `now` to report (oldest first);
   * older ones are forgotten, as they count nowhere any more. Null while an earlier report is out: one report at a
   * time, so that each comes back to exactly the grants it carried. A report that is not empty is out until
   * {@link answered}.
   */
  report(now: number): Use[] | null {
    if (this.#out > 0) return null;
    const from = this.#alone.findIndex((a) => a.at > now - this.#longestMs);
    if (from !== 0) this.#alone = from === -1 ? [] : this.#alone.slice(from);
    this.#out = this.#alone.length;
    return this.#alone.map((a) => ({ ageMs: Math.max(0, now - a.at), units: a.units }));
  }

  /**
   * The call carrying the report out came back: `recorded`, its grants are forgotten here (not their counting); else
   * they wait for the next report. Grants made alone since stay to be reported.
   */
  answered(recorded: boolean): void {
    if (recorded) this.#alone = this.#alone.slice(this.#out);
    this.#out = 0;
  }
}

/**
 * A decision made alone: a cost over a scaled limit but within the key's own is refused for a while (it passes once
 * the object answers again), not for ever.
 */
function alone(d: Decision): Decision {
  return d.neverAllowed ? { ...d, neverAllowed: false, retryAfterMs: FALLBACK_NOTHING_RETRY_MS } : d;
}

/** A refusal by a fallback that can grant nothing. */
function nothing(now: number, cost: number, count: number): Decision {
  const t = Math.floor(now);
  const wait = { remaining: 0, resetMs: FALLBACK_NOTHING_RETRY_MS, exceeded: true };
  return {
    allowed: false,
    neverAllowed: false,
    cost,
    now: t,
    retryAfterMs: FALLBACK_NOTHING_RETRY_MS,
    blockedUntil: t + FALLBACK_NOTHING_RETRY_MS,
    limits: Array.from({ length: count }, () => wait),
    lease: null,
  };
}
