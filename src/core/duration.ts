/**
 * @module Duration strings ("250ms", "1s", "10s", "1m", "1h", "1d") and their
 * conversion to integer milliseconds. Pure: no runtime imports.
 */

/** A unit accepted in a duration string. */
export type DurationUnit = "ms" | "s" | "m" | "h" | "d";

/** A duration as written in config: `"250ms"`, `"1s"`, `"1m"` … or whole milliseconds. */
export type Duration = `${number}${DurationUnit}` | number;

const UNIT_MS: Readonly<Record<DurationUnit, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** The longest window accepted: 366 days (it keeps every timestamp sum exact in a double). */
export const MAX_DURATION_MS = 366 * UNIT_MS.d;

const DURATION_RE = /^(\d+)(ms|s|m|h|d)$/;

/**
 * Parses a duration into whole milliseconds, at least 1 and at most {@link MAX_DURATION_MS}.
 *
 * @param value a string such as `"250ms"`, `"1s"`, `"1m"`, `"1h"`, `"1d"`, or a number of ms
 * @param field where the value came from, used in the error message (e.g. `RATE_LIMIT.limits[0].window`)
 * @throws RangeError naming `field` and the bad value
 */
export function parseDuration(value: unknown, field = "duration"): number {
  let ms: number;
  if (typeof value === "number") {
    ms = value;
  } else if (typeof value === "string") {
    const match = DURATION_RE.exec(value.trim());
    if (!match) {
      throw new RangeError(
        `${field}: expected a duration like "250ms", "1s", "1m", "1h" or "1d", or a number of milliseconds, got ${JSON.stringify(value)}`,
      );
    }
    ms = Number(match[1]) * UNIT_MS[match[2] as DurationUnit];
  } else {
    throw new RangeError(`${field}: expected a duration like "1s" or a number of milliseconds, got ${describe(value)}`);
  }
  if (!Number.isInteger(ms) || ms < 1) {
    throw new RangeError(`${field}: a duration must be a whole number of milliseconds ≥ 1, got ${describe(value)}`);
  }
  if (ms > MAX_DURATION_MS) {
    throw new RangeError(`${field}: a duration must be at most 366d, got ${describe(value)}`);
  }
  return ms;
}

/** Formats milliseconds as the shortest exact duration string (`60000` → `"1m"`). */
export function formatDuration(ms: number): string {
  for (const unit of ["d", "h", "m", "s"] as const) {
    if (ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`;
  }
  return `${ms}ms`;
}

/** A short, safe rendering of any value for an error message. */
export function describe(value: unknown): string {
  if (value === undefined) return "nothing";
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value === null) return String(value);
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}
