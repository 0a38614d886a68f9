/**
 * @module Exact usage per key (docs/configuration.md, "Usage"): requests granted and their cost per calendar day in a
 * time zone, refunds subtracted, kept for a retention; months summed from days. What an API business bills on. Pure:
 * time is passed in; the key's object stores one row per day (src/object/index.ts).
 */

import { checkTimeZone, periodAt } from "./calendar.ts";
import { describe } from "./duration.ts";

/** The most days usage may be kept. */
export const MAX_USAGE_DAYS = 3660;

/** How a plan's usage is kept: days in `zone`, for `keepDays` days. */
export interface UsageSpec {
  readonly zone: string;
  readonly keepDays: number;
}

/** One day's usage as stored: the day's first instant in the zone (ms), its requests and their cost. */
export interface UsageRow {
  readonly day: number;
  readonly requests: number;
  readonly cost: number;
}

/** Usage summed over one period. */
export interface UsagePeriod {
  /** The period's first instant (ms). */
  readonly start: number;
  /** The next period's first instant (ms). */
  readonly end: number;
  readonly requests: number;
  readonly cost: number;
}

/**
 * Checks a usage spec.
 *
 * @throws RangeError naming the field
 */
export function checkUsage(spec: UsageSpec): UsageSpec {
  if (typeof spec !== "object" || spec === null) throw new RangeError(`usage: expected usage, got ${describe(spec)}`);
  const { keepDays } = spec;
  if (!Number.isSafeInteger(keepDays) || keepDays < 1 || keepDays > MAX_USAGE_DAYS) {
    throw new RangeError(`keepDays: expected whole days from 1 to ${MAX_USAGE_DAYS}, got ${describe(keepDays)}`);
  }
  return { zone: checkTimeZone(spec.zone), keepDays };
}

/** The day a grant at `t` counts in: its first instant in the spec's zone. */
export function usageDay(spec: UsageSpec, t: number): number {
  return periodAt(t, "day", spec.zone).start;
}

/** The first day still kept at `now`: days starting before it are dropped (their usage is past retention). */
export function keptFrom(spec: UsageSpec, now: number): number {
  return usageDay(spec, now - spec.keepDays * 86_400_000);
}

/**
 * The usage of `rows` (days, any order) per `period` — `"day"`, or `"month"` in the spec's zone — for periods that
 * overlap `[from, to)`, oldest first; periods without use are left out.
 *
 * @throws RangeError for a period that is neither, or a range that is not one
 */
export function usageBy(
  spec: UsageSpec,
  rows: readonly UsageRow[],
  range: { readonly period: "day" | "month"; readonly from: number; readonly to: number },
): UsagePeriod[] {
  const { period, from, to } = range;
  if (period !== "day" && period !== "month") {
    throw new RangeError(`period: expected "day" or "month", got ${describe(period)}`);
  }
  if (!Number.isFinite(from) || !Number.isFinite(to) || from > to) {
    throw new RangeError(`from, to: expected a range of times in ms, got ${describe(from)} to ${describe(to)}`);
  }
  const sums = new Map<number, { start: number; end: number; requests: number; cost: number }>();
  for (const r of rows) {
    const span = periodAt(r.day, period, spec.zone);
    if (span.end <= from || span.start >= to) continue;
    const sum = sums.get(span.start);
    if (sum) {
      sum.requests += r.requests;
      sum.cost += r.cost;
    } else sums.set(span.start, { start: span.start, end: span.end, requests: r.requests, cost: r.cost });
  }
  return [...sums.values()].sort((a, b) => a.start - b.start);
}

/** Usage periods as CSV (`start,end,requests,cost`, times in ISO 8601 UTC), with a header line. */
export function usageCsv(periods: readonly UsagePeriod[]): string {
  const iso = (t: number) => new Date(t).toISOString();
  return `start,end,requests,cost\n${periods.map((p) => `${iso(p.start)},${iso(p.end)},${p.requests},${p.cost}\n`).join("")}`;
}
