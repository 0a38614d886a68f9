/**
 * @module A key's prepaid credits (docs/configuration.md, "Quotas and credits"): a balance that each grant spends by
 * its cost, never below zero, given back by refunds and unused leased units, added to by operators, and optionally
 * refilled at each calendar period's start (src/core/calendar.ts). Pure: time is passed in.
 */

import { checkTimeZone, PERIODS, type Period, periodAt } from "./calendar.ts";
import { describe } from "./duration.ts";

/** The most a balance may hold: what JSON and the runtime carry exactly. */
export const MAX_CREDITS = Number.MAX_SAFE_INTEGER;

/** A plan's credits as configured. */
export interface CreditSpec {
  /** What a key starts with (its first decision). */
  readonly initial: number;
  /** At each start of `period` in `zone`, a balance under `amount` is raised to it (credits bought stay). */
  readonly refill?: { readonly amount: number; readonly period: Period; readonly zone: string } | null;
}

/** What is stored of a key's credits (one row): the balance and the start of the period it was last refilled in. */
export interface CreditState {
  readonly balance: number;
  /** The refill period the balance is for (ms); null without a refill. */
  readonly refilledAt: number | null;
}

/** A whole number of credits ≥ `min` (a safe integer), or a RangeError naming `field`. */
function whole(n: unknown, field: string, min: number): number {
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < min) {
    throw new RangeError(`${field}: expected a whole number ≥ ${min}, got ${describe(n)}`);
  }
  return n;
}

/**
 * Checks a credits spec.
 *
 * @throws RangeError naming the field
 */
export function checkCredits(spec: CreditSpec): CreditSpec {
  if (typeof spec !== "object" || spec === null)
    throw new RangeError(`credits: expected credits, got ${describe(spec)}`);
  whole(spec.initial, "initial", 0);
  const r = spec.refill;
  if (r === undefined || r === null) return { initial: spec.initial, refill: null };
  whole(r.amount, "refill.amount", 1);
  if (!PERIODS.includes(r.period)) {
    throw new RangeError(
      `refill.period: expected one of ${PERIODS.map((p) => `"${p}"`).join(", ")}, got ${describe(r.period)}`,
    );
  }
  let zone: string;
  try {
    zone = checkTimeZone(r.zone);
  } catch (e) {
    throw new RangeError(`refill.${(e as Error).message.replace(/^time zone:/, "time_zone:")}`);
  }
  return { initial: spec.initial, refill: { amount: r.amount, period: r.period, zone } };
}

/** A key's credit balance. */
export class CreditAccount {
  readonly spec: CreditSpec;
  #balance: number;
  #refilledAt: number | null;
  /** The end of the refill period `#refilledAt` starts (ms): until then no refill is due (−∞: not known yet). */
  #refillEnd = Number.NEGATIVE_INFINITY;

  /**
   * @param state what was stored (null: a key new to credits starts with `initial`)
   * @throws RangeError naming the field for a spec that is not one
   */
  constructor(spec: CreditSpec, state: CreditState | null = null) {
    this.spec = checkCredits(spec);
    const stored = state !== null && Number.isSafeInteger(state.balance) && state.balance >= 0;
    this.#balance = stored ? state.balance : this.spec.initial;
    this.#refilledAt = stored && Number.isSafeInteger(state.refilledAt) ? state.refilledAt : null;
  }

  /** The balance at `now`, after the refill of the period containing it (if not yet applied). */
  balance(now: number): number {
    const r = this.spec.refill;
    if (!r || (this.#refilledAt !== null && now >= this.#refilledAt && now < this.#refillEnd)) return this.#balance;
    const { start, end } = periodAt(now, r.period, r.zone);
    if (this.#refilledAt === null) this.#refilledAt = start;
    else if (start > this.#refilledAt) {
      this.#refilledAt = start;
      this.#balance = Math.max(this.#balance, r.amount);
    }
    if (start === this.#refilledAt) this.#refillEnd = end;
    return this.#balance;
  }

  /** Whether `cost` fits the balance at `now`. */
  fits(now: number, cost: number): boolean {
    return this.balance(now) >= cost;
  }

  /** What a lease granted with `cost` at `now` may carry: the balance left after it (no time bound). */
  leaseRoom(now: number, cost: number): { readonly units: number; readonly endsAt: number } {
    return { units: Math.max(0, this.balance(now) - cost), endsAt: Number.POSITIVE_INFINITY };
  }

  /**
   * Spends `units` at `now`.
   *
   * @throws RangeError when they are more than the balance: nothing is spent then
   */
  take(now: number, units: number): CreditState {
    whole(units, "units", 1);
    if (!this.fits(now, units)) throw new RangeError(`units: ${units} are more than the balance`);
    this.#balance -= units;
    return this.state();
  }

  /**
   * Gives back `units` spent at `at` (a refund, a lease's unused units), at `now`; nothing when a refill has come
   * since (it restored the balance already: giving back on top would raise it past the refill's amount).
   *
   * @returns the state to store, or null when nothing was given back
   */
  giveBack(units: number, at: number, now: number): CreditState | null {
    whole(units, "units", 1);
    const r = this.spec.refill;
    this.balance(now);
    if (r && this.#refilledAt !== null && at < this.#refilledAt) return null;
    this.#balance = Math.min(MAX_CREDITS, this.#balance + units);
    return this.state();
  }

  /**
   * Adds `units` bought (an operator's top-up) at `now`.
   *
   * @throws RangeError for anything but a positive whole number, or a balance that would pass {@link MAX_CREDITS}
   */
  add(now: number, units: number): CreditState {
    whole(units, "add", 1);
    const balance = this.balance(now);
    if (balance > MAX_CREDITS - units) {
      throw new RangeError(`add: ${units} would take the balance of ${balance} past ${MAX_CREDITS}, the most it holds`);
    }
    this.#balance = balance + units;
    return this.state();
  }

  /**
   * When a cost of `cost` refused at `now` fits: at the next refill when its amount covers it (nothing else spent
   * meanwhile), else never (only a top-up or a refund helps).
   */
  fitsAt(now: number, cost: number): number {
    if (this.fits(now, cost)) return now;
    const r = this.spec.refill;
    if (!r || r.amount < cost) return Number.POSITIVE_INFINITY;
    return periodAt(now, r.period, r.zone).end;
  }

  /** What to store. */
  state(): CreditState {
    return { balance: this.#balance, refilledAt: this.#refilledAt };
  }
}
