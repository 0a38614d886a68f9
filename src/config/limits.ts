/**
 * @module Parses lists of limits: sliding limits (`limit`, `window`, `tick`, `name`) wherever a limiter takes them,
 * and a plan's list, where calendar quotas (`period`, `time_zone`) sit beside them.
 */

import { PERIODS, type Period } from "../core/calendar.ts";
import { describe, formatDuration } from "../core/duration.ts";
import { type Limit as CoreLimit, normalizeLimits } from "../core/limits.ts";
import {
  array,
  duration,
  nonEmptyString,
  type Obj,
  object,
  oneOf,
  POSITIVE,
  timeZone,
  unknownFields,
  wholeNumber,
} from "./fields.ts";
import { ConfigError, type Limit, type QuotaLimit } from "./types.ts";

/** The fields of a sliding limit. */
const SLIDING_FIELDS = ["limit", "window", "tick", "name"] as const;

/** The fields of a limit in a plan's list, where a calendar quota may sit beside the sliding limits. */
const PLAN_LIMIT_FIELDS = ["limit", "window", "tick", "period", "time_zone", "name"] as const;

/** How {@link parseLimits} names and reads a list's limits. */
export interface LimitsOptions {
  /** A limit's name when it gives none, from its window's (`per-minute`, `per-30s`). */
  readonly defaultName?: (windowName: string) => string;
  /** The fields an unknown one's error lists: a plan's list also takes a quota's. */
  readonly fields?: readonly string[];
}

/**
 * Parses a list of limits as `RATE_LIMIT.limits` takes them (also an operator's per-key override).
 *
 * @throws ConfigError naming `field[i]`
 */
export function parseLimits(value: unknown, field: string, options: LimitsOptions = {}): Limit[] {
  const { defaultName = (w: string) => w, fields = SLIDING_FIELDS } = options;
  // An empty list is refused by the core's check below, with the same message (`normalizeLimits`).
  const list = array(value, field);
  const limits = list.map((item, i): Limit => {
    const f = `${field}[${i}]`;
    const l = object(item, f);
    if (l.period !== undefined || l.time_zone !== undefined) {
      throw new ConfigError(
        `${f}.${l.period !== undefined ? "period" : "time_zone"}: calendar quotas are for a plan's limits (a plan's own, the top-level or the anonymous ones), not here`,
      );
    }
    unknownFields(l, fields, f);
    const limit = wholeNumber(l.limit, `${f}.limit`, POSITIVE);
    if (l.window === undefined) throw new ConfigError(`${f}.window: required, e.g. "1s" or "1m"`);
    const windowMs = duration(l.window, `${f}.window`);
    const name =
      l.name === undefined
        ? defaultName(WINDOW_NAMES[windowMs] ?? `per-${formatDuration(windowMs)}`)
        : limitName(l.name, `${f}.name`);
    const tickMs = l.tick === undefined ? undefined : duration(l.tick, `${f}.tick`);
    if (tickMs !== undefined && tickMs > windowMs) {
      throw new ConfigError(`${f}.tick: at most the window (${formatDuration(windowMs)}), got ${describe(l.tick)}`);
    }
    return { limit, windowMs, tickMs, name } as Limit;
  });
  const seen = new Map<string, number>();
  for (const [i, l] of limits.entries()) {
    const before = seen.get(l.name);
    if (before !== undefined) {
      const named = (list[i] as Obj).name !== undefined;
      throw new ConfigError(
        named
          ? `${field}[${i}].name: ${JSON.stringify(l.name)} is already used by ${field}[${before}]; give each limit a distinct name`
          : `${field}[${i}].window: ${JSON.stringify(formatDuration(l.windowMs))} gives the default name ${JSON.stringify(l.name)}, already used by ${field}[${before}]; give one of them a distinct name`,
      );
    }
    seen.set(l.name, i);
  }
  // The core fills in default ticks and checks that the key's rings fit; its errors name limits[i].
  let ticks: CoreLimit[];
  try {
    ticks = normalizeLimits(limits);
  } catch (e) {
    throw new ConfigError((e as Error).message.replace(/^limits/, field).replace(/\.tickMs:/, ".tick:"));
  }
  return limits.map((l, i) => ({ ...l, tickMs: (ticks[i] as CoreLimit).tickMs }));
}

/**
 * A plan's `limits` (docs/configuration.md, "Quotas and credits"): sliding limits (with `window`) and calendar quotas
 * (with `period`, and `time_zone`), in one list; at least one of either. Names are distinct across both.
 *
 * @throws ConfigError naming `field[i]`
 */
export function parsePlanLimits(value: unknown, field: string): { limits: Limit[]; quotas: QuotaLimit[] } {
  const list = array(value, field);
  list.forEach((item, i) => {
    const l = item as Obj | null;
    if (typeof l === "object" && l !== null && !("period" in l) && "time_zone" in l) {
      throw new ConfigError(
        `${field}[${i}].time_zone: only a calendar quota has one; give period = "hour", "day", "week" or "month" with it`,
      );
    }
  });
  const sliding: number[] = [];
  const quotas: { at: number; quota: QuotaLimit }[] = [];
  list.forEach((item, i) => {
    if (typeof item === "object" && item !== null && "period" in item) {
      quotas.push({ at: i, quota: parseQuota(item, `${field}[${i}]`) });
    } else sliding.push(i);
  });
  const options = { fields: PLAN_LIMIT_FIELDS };
  if (quotas.length === 0) return { limits: parseLimits(value, field, options), quotas: [] };
  // The sliding limits alone, their errors naming their places in the whole list.
  const limits =
    sliding.length === 0
      ? []
      : renamed(
          () =>
            parseLimits(
              sliding.map((i) => list[i]),
              field,
              options,
            ),
          (j) => `${field}[${sliding[j]}]`,
        );
  const seen = new Map<string, number>(limits.map((l, j) => [l.name, sliding[j] as number]));
  for (const { at, quota } of quotas) {
    const before = seen.get(quota.name);
    if (before !== undefined) {
      throw new ConfigError(
        `${field}[${at}].name: ${JSON.stringify(quota.name)} is already used by ${field}[${before}]; give each limit a distinct name`,
      );
    }
    seen.set(quota.name, at);
  }
  return { limits, quotas: quotas.map((q) => q.quota) };
}

/** Runs `parse`, its errors' `field[j]` renamed by `place(j)`. */
function renamed<T>(parse: () => T, place: (j: number) => string): T {
  try {
    return parse();
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    throw new ConfigError(e.message.replace(/^[^[]*\[(\d+)\]/, (_, j: string) => place(Number(j))));
  }
}

/** One calendar quota: `{ limit, period, time_zone?, name? }`. */
function parseQuota(item: unknown, f: string): QuotaLimit {
  const q = object(item, f);
  if (q.window !== undefined) {
    throw new ConfigError(`${f}: give either window (a sliding window) or period (a calendar quota), not both`);
  }
  if (q.tick !== undefined) throw new ConfigError(`${f}.tick: a calendar quota (period) has no tick`);
  unknownFields(q, ["limit", "period", "time_zone", "name"], f);
  const limit = wholeNumber(q.limit, `${f}.limit`, POSITIVE);
  const { period, zone } = periodAndZone(q, f);
  const name = q.name === undefined ? PERIOD_NAMES[period] : limitName(q.name, `${f}.name`);
  return { name, limit, period, zone, windowMs: PERIOD_MS[period] };
}

/** A calendar `period` and its `time_zone` (default `"UTC"`), as a quota and a credits refill take them. */
export function periodAndZone(t: Obj, f: string): { period: Period; zone: string } {
  const period = oneOf(t.period, `${f}.period`, { choices: PERIODS });
  return { period, zone: timeZone(t.time_zone, `${f}.time_zone`) };
}

/** A limit's `name`: it goes into RateLimit-Policy as a structured-field string, so printable ASCII only. */
function limitName(value: unknown, field: string): string {
  const name = nonEmptyString(value, field);
  if (!/^[\x20-\x7e]+$/.test(name)) {
    throw new ConfigError(
      `${field}: use printable ASCII only (it is sent in the RateLimit-Policy header), got ${JSON.stringify(name)}`,
    );
  }
  return name;
}

/** A sliding limit's default name, by window (ms); other windows are named `per-<window>`. */
const WINDOW_NAMES: Readonly<Record<number, string>> = {
  1000: "per-second",
  60000: "per-minute",
  3600000: "per-hour",
  86400000: "per-day",
};

/** A calendar quota's default name (its `RateLimit-Policy` name), by period. */
const PERIOD_NAMES: Readonly<Record<Period, string>> = {
  hour: "hourly",
  day: "daily",
  week: "weekly",
  month: "monthly",
};

/** A calendar period's nominal length (ms): what a result's `windowMs` says of a quota. */
const PERIOD_MS: Readonly<Record<Period, number>> = {
  hour: 3_600_000,
  day: 86_400_000,
  week: 604_800_000,
  month: 2_592_000_000,
};
