/**
 * @module Generic readers of configuration fields: each checks one value's shape and, when it is
 * wrong, throws a {@link ConfigError} naming the field. The parsers list their fields with these
 * readers (a whole number in a range, one of a set, a time zone, a setting a plan inherits) rather
 * than spelling the checks again.
 */

import { checkTimeZone } from "../core/calendar.ts";
import { describe, parseDuration } from "../core/duration.ts";
import { ConfigError } from "./types.ts";

/** A table as TOML or JSON gives it. */
export type Obj = Record<string, unknown>;

export function fromJsonString(value: unknown, field: string): unknown {
  if (typeof value !== "string") return value;
  try {
    return JSON.parse(value);
  } catch (e) {
    throw new ConfigError(`${field}: given as a string but it is not valid JSON (${(e as Error).message})`);
  }
}

export function object(value: unknown, field: string): Obj {
  if (value === undefined) throw new ConfigError(`${field}: required`);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ConfigError(`${field}: expected a table/object, got ${describe(value)}`);
  }
  return value as Obj;
}

export function array(value: unknown, field: string): unknown[] {
  if (value === undefined) throw new ConfigError(`${field}: required`);
  if (!Array.isArray(value)) throw new ConfigError(`${field}: expected an array, got ${describe(value)}`);
  // Dense copy: a hole is an item that is missing, never one skipped by map().
  return Array.from(value);
}

export function optionalArray(value: unknown, field: string): unknown[] {
  return value === undefined ? [] : array(value, field);
}

export function nonEmptyString(value: unknown, field: string): string {
  if (value === undefined) throw new ConfigError(`${field}: required`);
  if (typeof value !== "string" || value.length === 0) {
    throw new ConfigError(`${field}: expected a non-empty string, got ${describe(value)}`);
  }
  return value;
}

export function optionalBoolean(value: unknown, field: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== "boolean") throw new ConfigError(`${field}: expected true or false, got ${describe(value)}`);
  return value;
}

export function unknownFields(obj: Obj, known: readonly string[], field: string): void {
  for (const k of Object.keys(obj)) {
    if (!known.includes(k)) {
      throw new ConfigError(`${field}.${k}: unknown setting; expected one of ${known.join(", ")}`);
    }
  }
}

/** Turns a core RangeError (already naming the field) into a ConfigError. */
export function wrap<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }
}

/** A whole number's bounds, as {@link wholeNumber} reads it. */
export interface Range {
  readonly min: number;
  /** The largest allowed; the largest safe integer when missing. */
  readonly max?: number;
  /** What the error says is expected, e.g. `"a positive integer"`. */
  readonly expected: string;
  /** The value when the field is missing; without one, a missing field is an error like any other bad value. */
  readonly fallback?: number;
}

/** A count of one or more: a limit, an amount, a lease's units. */
export const POSITIVE: Range = { min: 1, expected: "a positive integer" };

/** A whole number within `range`, else a ConfigError: `field: expected <range.expected>, got …`. */
export function wholeNumber(value: unknown, field: string, range: Range): number {
  if (value === undefined && range.fallback !== undefined) return range.fallback;
  const max = range.max ?? Number.MAX_SAFE_INTEGER;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < range.min || value > max) {
    throw new ConfigError(`${field}: expected ${range.expected}, got ${describe(value)}`);
  }
  return value;
}

/** A set of allowed values, as {@link oneOf} reads it. */
export interface Choice<T> {
  readonly choices: readonly T[];
  /** What the error says is expected; by default `one of "a", "b"` (each value as JSON). */
  readonly expected?: string;
  /** The value when the field is missing; without one, a missing field is an error like any other bad value. */
  readonly fallback?: T;
}

/** One of `choice.choices`, else a ConfigError: `field: expected one of "a", "b", got …`. */
export function oneOf<T>(value: unknown, field: string, choice: Choice<T>): T {
  if (value === undefined && choice.fallback !== undefined) return choice.fallback;
  if ((choice.choices as readonly unknown[]).includes(value)) return value as T;
  const expected = choice.expected ?? `one of ${choice.choices.map((c) => JSON.stringify(c)).join(", ")}`;
  throw new ConfigError(`${field}: expected ${expected}, got ${describe(value)}`);
}

/** An IANA time zone (`"UTC"` when missing), as the runtime names it. */
export function timeZone(value: unknown, field: string): string {
  if (value === undefined) return "UTC";
  try {
    return checkTimeZone(value);
  } catch (e) {
    throw new ConfigError(`${field}: ${(e as Error).message.replace(/^time zone: /, "")}`);
  }
}

/** A duration like `"1s"` or `"5m"` (ms). */
export function duration(value: unknown, field: string): number {
  return wrap(() => parseDuration(value, field));
}

/** The longest timer `setTimeout` keeps: longer delays overflow and fire at once. */
export const MAX_TIMER_MS = 2_147_483_647;

/** A timeout: a duration `setTimeout` can keep (`fallback` when missing). */
export function timeout(value: unknown, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  const ms = duration(value, field);
  if (ms > MAX_TIMER_MS) {
    throw new ConfigError(
      `${field}: at most ${MAX_TIMER_MS} ms (about 24.8 days; longer timers fire at once), got ${describe(value)}`,
    );
  }
  return ms;
}

/** Fails on `false` in the limiter's own `key`: it turns off an inherited setting, so it is for a plan. */
export function notFalse(t: Obj, key: string, root: string, none: string): void {
  if (t[key] === false) throw new ConfigError(`${root}.${key}: leave it out for ${none} (false is for a plan)`);
}

/**
 * A setting the limiter gives every plan unless a plan has its own (`penalty`, `credits`, …), as
 * {@link topLevel} and {@link ownOrInherited} read it.
 */
export interface Inheritable<T> {
  /** Its name in the table, e.g. `"penalty"`. */
  readonly key: string;
  /** What leaving it out gives, e.g. `"no penalty"`: the top-level `false` error says it. */
  readonly none: string;
  /** Why an unlimited plan has none, e.g. `"are never refused"`: said of the plan's keys. */
  readonly unlimited: string;
  readonly parse: (value: unknown, field: string) => T;
}

/** The limiter's own setting (null when missing); `false` there is an error: it is for a plan. */
export function topLevel<T>(t: Obj, root: string, s: Inheritable<T>): T | null {
  notFalse(t, s.key, root, s.none);
  const value = t[s.key];
  return value === undefined ? null : s.parse(value, `${root}.${s.key}`);
}

/**
 * A plan's setting: its own, else `inherited` when it gives none, null for `false`. An unlimited plan has none: its
 * own is an error there.
 */
export function ownOrInherited<T>(
  plan: Obj,
  field: string,
  s: Inheritable<T>,
  from: { readonly inherited: T | null; readonly unlimited: boolean },
): T | null {
  const own = plan[s.key];
  if (from.unlimited && own !== undefined && own !== false) {
    throw new ConfigError(
      `${field}.${s.key}: an unlimited plan's keys ${s.unlimited}; remove ${s.key} or unlimited = true`,
    );
  }
  if (from.unlimited || own === false) return null;
  return own === undefined ? from.inherited : s.parse(own, `${field}.${s.key}`);
}
