/**
 * @module Generic readers of configuration fields: each checks one value's shape and, when it is
 * wrong, throws a {@link ConfigError} naming the field.
 */

import { describe } from "../core/duration.ts";
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
