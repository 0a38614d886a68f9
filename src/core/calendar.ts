/**
 * @module Calendar periods in a time zone (docs/design.md, "Quotas"): the hour, day, ISO week (from Monday) or month
 * that contains an instant, as the zone's wall clock has it — daylight saving by the zone's own rules, from the
 * runtime's `Intl` (no time-zone data of our own). Pure: time is passed in.
 *
 * A period starts at the first instant whose wall clock shows its start (midnight, the hour, Monday, the 1st) and
 * ends where the next one starts: a day is 23 or 25 hours long when the clocks change; a start the clocks skip (a
 * midnight in a spring-forward gap) is the first instant after the gap; an hour the clocks repeat is two periods, one
 * per occurrence.
 */

import { describe } from "./duration.ts";

/** A calendar period's kind. */
export type Period = "hour" | "day" | "week" | "month";

/** Every kind, in order of length. */
export const PERIODS: readonly Period[] = ["hour", "day", "week", "month"];

/** One period: its first instant and the next period's first instant (ms since the epoch; `start < end`). */
export interface Span {
  readonly start: number;
  readonly end: number;
}

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** A wall-clock reading in a zone. */
interface Wall {
  readonly year: number;
  /** 1–12. */
  readonly month: number;
  readonly day: number;
  readonly hour: number;
  readonly minute: number;
  readonly second: number;
}

/** One formatter per zone: making one costs far more than using it. */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(zone: string): Intl.DateTimeFormat {
  let f = formatters.get(zone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    if (formatters.size >= 1000) formatters.clear();
    formatters.set(zone, f);
  }
  return f;
}

/**
 * Checks an IANA time zone name (`"UTC"`, `"Europe/Berlin"`, …) against the runtime's, and returns it as configured:
 * in the runtime's spelling when that differs only in case (`"utc"` → `"UTC"`), else as written — the runtime's ICU
 * resolves some current names to older ones (`"Asia/Kathmandu"` → `"Asia/Katmandu"`, `"Asia/Kolkata"` →
 * `"Asia/Calcutta"`), which keep the same rules but are not the name an operator gave.
 *
 * @throws RangeError for a zone the runtime does not know
 */
export function checkTimeZone(zone: unknown): string {
  if (typeof zone !== "string" || zone === "") {
    throw new RangeError(`time zone: expected an IANA name like "Europe/Berlin", got ${describe(zone)}`);
  }
  let resolved: string;
  try {
    resolved = formatter(zone).resolvedOptions().timeZone;
  } catch {
    throw new RangeError(
      `time zone: the runtime knows no zone ${JSON.stringify(zone)}; expected an IANA name like "Europe/Berlin"`,
    );
  }
  return resolved.toLowerCase() === zone.toLowerCase() ? resolved : zone;
}

/** The wall clock in `zone` at instant `t` (whole seconds; the zone's offset never has a fraction of one). */
function wallAt(t: number, zone: string): Wall {
  const fields: Record<string, number> = {};
  for (const p of formatter(zone).formatToParts(t)) if (p.type !== "literal") fields[p.type] = Number(p.value);
  return fields as unknown as Wall;
}

/** A wall-clock reading as if it were UTC (ms): what offsets are measured against. */
function asUtc(w: Wall): number {
  return Date.UTC(w.year, w.month - 1, w.day, w.hour, w.minute, w.second);
}

/** The zone's offset from UTC at instant `t` (ms, whole seconds). */
function offsetAt(t: number, zone: string): number {
  const whole = Math.floor(t / 1000) * 1000;
  return asUtc(wallAt(whole, zone)) - whole;
}

/**
 * The first instant whose wall clock reads `local` (a wall-clock reading as if it were UTC, ms) in a zone whose offset
 * from UTC at each instant `offsetAt` gives: of two (the clocks went back over it) the earlier; skipped by the clocks
 * (a spring-forward gap), the end of the gap — the first instant whose wall clock reads later. Assumes at most one
 * change of offset within a day of `local`, as every zone's rules have it.
 */
export function firstInstantShowing(local: number, offsetAt: (t: number) => number): number {
  const before = offsetAt(local - DAY_MS);
  const after = offsetAt(local + DAY_MS);
  let first = Number.POSITIVE_INFINITY;
  for (const u of [local - before, local - after]) {
    if (u < first && u + offsetAt(u) === local) first = u;
  }
  if (first !== Number.POSITIVE_INFINITY) return first;
  // In a gap: the wall clock jumps past `local`; find the jump, between the instant that would show `local` under the
  // offset after it and the one under the offset before it.
  let lo = local - after;
  let hi = local - before;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (mid + offsetAt(mid) >= local) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** {@link firstInstantShowing} in `zone`. */
function instantOf(local: number, zone: string): number {
  return firstInstantShowing(local, (t) => offsetAt(t, zone));
}

/** The wall-clock start (as {@link asUtc}) of the period of kind `period` whose wall clock reads `w`. */
function localStart(w: Wall, period: Exclude<Period, "hour">): number {
  switch (period) {
    case "day":
      return Date.UTC(w.year, w.month - 1, w.day);
    case "week": {
      const day = Date.UTC(w.year, w.month - 1, w.day);
      // getUTCDay: 0 is Sunday; an ISO week starts on Monday.
      return day - ((new Date(day).getUTCDay() + 6) % 7) * DAY_MS;
    }
    case "month":
      return Date.UTC(w.year, w.month - 1, 1);
  }
}

/** The wall-clock start of the period after the one starting at wall-clock `start`. */
function localNext(start: number, period: Exclude<Period, "hour">): number {
  const d = new Date(start);
  switch (period) {
    case "day":
      return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
    case "week":
      return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 7);
    case "month":
      return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  }
}

/**
 * The period of kind `period` in `zone` that contains instant `t`: its first instant and the next one's. An hour is
 * the zone's wall-clock hour at its offset then: a real hour, the repeated one twice (every zone's clocks move by whole
 * hours but Australia/Lord_Howe's, by 30 minutes, where an hour around the change is 30 or 90 minutes long instead).
 *
 * @param zone a zone {@link checkTimeZone} accepted
 * @throws RangeError for an unknown period or a time that is not finite
 */
export function periodAt(t: number, period: Period, zone: string): Span {
  if (!PERIODS.includes(period)) {
    throw new RangeError(`period: expected one of ${PERIODS.map((p) => `"${p}"`).join(", ")}, got ${describe(period)}`);
  }
  if (!Number.isFinite(t)) throw new RangeError(`t: expected a time in ms, got ${describe(t)}`);
  if (period === "hour") {
    const offset = offsetAt(t, zone);
    const start = Math.floor((t + offset) / HOUR_MS) * HOUR_MS - offset;
    return { start, end: start + HOUR_MS };
  }
  const local = localStart(wallAt(t, zone), period);
  return { start: instantOf(local, zone), end: instantOf(localNext(local, period), zone) };
}
