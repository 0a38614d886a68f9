/**
 * @module A calendar quota (docs/configuration.md, "Quotas and credits"): at most `limit` units per calendar period in
 * a time zone (src/core/calendar.ts), reset at each period's start; decided with the sliding limits by
 * src/core/meters.ts. Pure: time is passed in.
 *
 * Unlike a sliding window, a period needs no ring: every unit counts in the period it was used in, and nothing of a
 * period that ended counts any more, so its state is the current period's start and its count. That holds only if no
 * unit is ever counted in a later period than its use — a lease must end by its period's end, and a settlement may not
 * move a unit into another period — which {@link Quota.leaseEnd} and {@link Quota.giveBack} keep.
 */

import { checkTimeZone, PERIODS, type Period, periodAt, type Span } from "./calendar.ts";
import { describe } from "./duration.ts";
import { LEASE_HEADROOM_SHARE } from "./limits.ts";

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
   * Counts `cost` units used at `now` when they fit the period, all or nothing; `over`: whether or not they fit (a
   * settle's debt: the period then refuses until it ends).
   *
   * @returns the start of the period they count in (what a refund names), or null when they do not fit
   * @throws RangeError for a cost that is not a whole number ≥ 1
   */
  take(now: number, cost: number, over = false): number | null {
    if (!Number.isSafeInteger(cost) || cost < 1)
      throw new RangeError(`cost: expected a whole number ≥ 1, got ${describe(cost)}`);
    const s = this.#at(now);
    if (this.#used + cost > this.spec.limit && !over) return null;
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

/** What is stored of a quota: its spec, the period its count is for, and the count. */
export interface QuotaRow extends QuotaSpec {
  readonly start: number;
  readonly end: number;
  readonly used: number;
}

/**
 * Where a quota's count is kept: by its period and zone, not its limit (a plan's limit raised mid-month keeps what the
 * month has used).
 */
export function quotaKey(spec: Pick<QuotaSpec, "period" | "zone">): string {
  return `${spec.period}:${spec.zone}`;
}

/** The state of each quota after a decision, in the order given: as {@link LimitStatus} (`resetMs`: to the next start). */
export interface QuotaStatus {
  readonly remaining: number;
  readonly resetMs: number;
  readonly exceeded: boolean;
}

/**
 * A key's calendar quotas decided as one (docs/design.md, "Quotas, credits and usage"): a request fits when its cost
 * fits every quota; a grant counts its cost and its lease's units in each, in the period of its decision. Beside the
 * sliding limits: the caller checks {@link fits} first, caps a lease by {@link leaseRoom}, and takes only what the
 * sliding limits granted.
 */
export class QuotaBook {
  readonly quotas: readonly Quota[];

  /**
   * @param stored the rows kept for the key ({@link rows}): a quota's count carries over from the row of its period
   *   and zone, whatever limit it was counted under
   * @throws RangeError naming the field for a spec that is not a quota
   */
  constructor(specs: readonly QuotaSpec[], stored: readonly QuotaRow[] = []) {
    if (!Array.isArray(specs)) throw new RangeError(`quotas: expected a list of quotas, got ${describe(specs)}`);
    const byKey = new Map<string, QuotaState>();
    for (const r of Array.isArray(stored) ? stored : []) byKey.set(quotaKey(r), { periodStart: r.start, used: r.used });
    this.quotas = specs.map((s, i) => {
      if (typeof s !== "object" || s === null)
        throw new RangeError(`quotas[${i}]: expected a quota, got ${describe(s)}`);
      try {
        const q = new Quota({ limit: s.limit, period: s.period, zone: s.zone }, null);
        return new Quota(q.spec, byKey.get(quotaKey(q.spec)) ?? null);
      } catch (e) {
        throw new RangeError(`quotas[${i}].${(e as Error).message}`);
      }
    });
  }

  /** The book of the quotas stored (their specs from the rows): what refunds and settlements give back to. */
  static stored(rows: readonly QuotaRow[]): QuotaBook {
    return new QuotaBook(rows, rows);
  }

  /** Whether these are the quotas of `specs` (same limit, period and zone, in order): else the book is rebuilt. */
  isFor(specs: readonly QuotaSpec[]): boolean {
    return (
      Array.isArray(specs) &&
      specs.length === this.quotas.length &&
      this.quotas.every((q, i) => {
        const s = specs[i] as QuotaSpec;
        return q.spec.limit === s?.limit && q.spec.period === s.period && q.spec.zone === s.zone;
      })
    );
  }

  /** Whether `cost` fits every quota at `now`. */
  fits(now: number, cost: number): boolean {
    return this.quotas.every((q) => q.remaining(now) >= cost);
  }

  /**
   * What a lease granted with `cost` at `now` may carry: at most half the units every quota has left after `cost`
   * ({@link LEASE_HEADROOM_SHARE}: an isolate that vanishes with it strands no more), spent before the earliest end of
   * their periods (ms, exclusive) — a leased unit counts in the period of its issue, so it must be used in it.
   */
  leaseRoom(now: number, cost: number): { readonly units: number; readonly endsAt: number } {
    let units = Number.POSITIVE_INFINITY;
    let endsAt = Number.POSITIVE_INFINITY;
    for (const q of this.quotas) {
      units = Math.min(units, Math.floor((q.remaining(now) - cost) * LEASE_HEADROOM_SHARE));
      endsAt = Math.min(endsAt, q.leaseEnd(now));
    }
    return { units: Math.max(0, units), endsAt };
  }

  /**
   * Counts `units` granted at `now` in every quota (the caller checked that they fit); `over`: whether or not they fit
   * (a settle's debt, {@link Quota.take}).
   *
   * @returns the rows to write
   * @throws RangeError when they do not fit one (and not `over`): nothing is counted then
   */
  take(now: number, units: number, over = false): QuotaRow[] {
    if (!over && !this.fits(now, units)) throw new RangeError(`units: ${units} do not fit every quota`);
    for (const q of this.quotas) q.take(now, units, over);
    return this.rows();
  }

  /**
   * Gives back `units` counted at `at` (a grant's or a lease's decision, the object's clock) to each quota whose period
   * containing `at` is still the current one at `now`; a period that ended keeps them (they count nowhere now).
   *
   * @returns the rows to write (none when nothing was given back)
   */
  giveBack(now: number, at: number, units: number): QuotaRow[] {
    if (!Number.isSafeInteger(at)) throw new RangeError(`at: expected a time in ms, got ${describe(at)}`);
    let changed = false;
    for (const q of this.quotas) {
      const start = periodAt(at, q.spec.period, q.spec.zone).start;
      if (q.giveBack(now, start, units)) changed = true;
    }
    return changed ? this.rows() : [];
  }

  /** Each quota's state after a decision of `cost` at `now` (`allowed`: whether it was granted). */
  statuses(now: number, cost: number, allowed: boolean): QuotaStatus[] {
    return this.quotas.map((q) => {
      const remaining = q.remaining(now);
      const used = q.state()?.used ?? 0;
      return {
        remaining,
        resetMs: used > 0 ? q.resetAt(now) - now : 0,
        exceeded: !allowed && remaining < cost,
      };
    });
  }

  /**
   * The refusal of `cost` at `now` by the quotas: whether it can never fit (over a quota's limit), when it fits every
   * quota if nothing else is granted (ms; `now` when it fits now) and when a cost of 1 does.
   */
  wait(now: number, cost: number): { readonly never: boolean; readonly fitsAt: number; readonly oneFitsAt: number } {
    let fitsAt = now;
    let oneFitsAt = now;
    let never = false;
    for (const q of this.quotas) {
      const left = q.remaining(now);
      if (cost > q.spec.limit) never = true;
      if (left < cost) fitsAt = Math.max(fitsAt, q.resetAt(now));
      if (left < 1) oneFitsAt = Math.max(oneFitsAt, q.resetAt(now));
    }
    return { never, fitsAt: never ? Number.POSITIVE_INFINITY : fitsAt, oneFitsAt };
  }

  /** When no quota counts anything any more: the end of the last period with units counted (−∞: none). */
  get idleAt(): number {
    let at = Number.NEGATIVE_INFINITY;
    for (const q of this.quotas) {
      const s = q.state();
      if (s !== null && s.used > 0) at = Math.max(at, q.resetAt(s.periodStart));
    }
    return at;
  }

  /** Every quota's row. */
  rows(): QuotaRow[] {
    const out: QuotaRow[] = [];
    for (const q of this.quotas) {
      const s = q.state();
      if (s !== null) out.push({ ...q.spec, start: s.periodStart, end: q.resetAt(s.periodStart), used: s.used });
    }
    return out;
  }
}
