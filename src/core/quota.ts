/**
 * @module A calendar quota (issue 41, not yet wired to limits): at most `limit` units per calendar period in a time
 * zone (src/core/calendar.ts), reset at each period's start. Pure: time is passed in.
 *
 * Unlike a sliding window, a period needs no ring: every unit counts in the period it was used in, and nothing of a
 * period that ended counts any more, so its state is the current period's start and its count. That holds only if no
 * unit is ever counted in a later period than its use — a lease must end by its period's end, and a settlement may not
 * move a unit into another period — which {@link Quota.leaseEnd} and {@link Quota.giveBack} keep.
 */

import { checkTimeZone, PERIODS, type Period, periodAt, type Span } from "./calendar.ts";
import { describe } from "./duration.ts";

/** A quota as configured: `limit` units per `period` in `zone` (an IANA name). */
export interface QuotaSpec {
  readonly limit: number;
  readonly period: Period;
  readonly zone: string;
}

/** What a quota keeps (one stored row): the start of the period its count is for, and the count. */
export interface QuotaState {
  readonly periodStart: number;
  readonly used: number;
}

export class Quota {
  readonly spec: QuotaSpec;
  /** The period the count is for. */
  #span: Span | null = null;
  #used = 0;

  /**
   * @param state what was stored, if anything: its count holds while its period is current
   * @throws RangeError naming the field: a limit that is not a positive safe integer, an unknown period or zone
   */
  constructor(spec: QuotaSpec, state: QuotaState | null = null) {
    if (!Number.isSafeInteger(spec.limit) || spec.limit < 1) {
      throw new RangeError(`limit: expected a positive integer, got ${describe(spec.limit)}`);
    }
    if (!PERIODS.includes(spec.period)) {
      throw new RangeError(
        `period: expected one of ${PERIODS.map((p) => `"${p}"`).join(", ")}, got ${describe(spec.period)}`,
      );
    }
    this.spec = { ...spec, zone: checkTimeZone(spec.zone) };
    if (
      state !== null &&
      Number.isSafeInteger(state.periodStart) &&
      Number.isSafeInteger(state.used) &&
      state.used >= 0
    ) {
      this.#span = periodAt(state.periodStart, spec.period, this.spec.zone);
      // A stored start that is not its period's start (the zone's rules changed since) starts afresh.
      if (this.#span.start !== state.periodStart) this.#span = null;
      else this.#used = state.used;
    }
  }

  /** The period containing `now`; a new one starts with nothing counted. */
  #at(now: number): Span {
    if (!Number.isFinite(now)) throw new RangeError(`now: expected a time in ms, got ${describe(now)}`);
    const s = this.#span;
    if (s !== null && now >= s.start && now < s.end) return s;
    const next = periodAt(now, this.spec.period, this.spec.zone);
    // Time only moves forward here: a `now` before the current period (a clock read early) keeps it.
    if (s !== null && next.start < s.start) return s;
    this.#span = next;
    this.#used = 0;
    return next;
  }

  /** Units that may still be granted in the period containing `now`. */
  remaining(now: number): number {
    this.#at(now);
    return Math.max(0, this.spec.limit - this.#used);
  }

  /** When the period containing `now` ends: the next one's start, when a refused request may pass (ms). */
  resetAt(now: number): number {
    return this.#at(now).end;
  }

  /**
   * Counts `cost` units used at `now` when they fit the period, all or nothing.
   *
   * @returns the start of the period they count in (what a refund names), or null when they do not fit
   * @throws RangeError for a cost that is not a whole number ≥ 1
   */
  take(now: number, cost: number): number | null {
    if (!Number.isSafeInteger(cost) || cost < 1)
      throw new RangeError(`cost: expected a whole number ≥ 1, got ${describe(cost)}`);
    const s = this.#at(now);
    if (this.#used + cost > this.spec.limit) return null;
    this.#used += cost;
    return s.start;
  }

  /**
   * Gives back `units` counted in the period that started at `periodStart`, while it is the period containing `now`;
   * after it has ended they count nowhere any more (and must not be taken from the next period).
   *
   * @returns whether anything was given back
   */
  giveBack(now: number, periodStart: number, units: number): boolean {
    if (!Number.isSafeInteger(units) || units < 1)
      throw new RangeError(`units: expected a positive integer, got ${describe(units)}`);
    if (this.#at(now).start !== periodStart || this.#used === 0) return false;
    this.#used -= Math.min(units, this.#used);
    return true;
  }

  /** The latest a lease granted at `now` may be spent until (exclusive): its period's end — a unit never crosses it. */
  leaseEnd(now: number): number {
    return this.#at(now).end;
  }

  /** What to store. */
  state(): QuotaState | null {
    return this.#span === null ? null : { periodStart: this.#span.start, used: this.#used };
  }
}
