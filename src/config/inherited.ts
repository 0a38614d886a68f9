/**
 * @module Parses what a plan inherits from the limiter unless it has its own: `penalty`, `concurrency`, `credits` and
 * `usage` (docs/configuration.md, "Penalties", "Concurrency", "Quotas and credits", "Usage").
 */

import type { Period } from "../core/calendar.ts";
import { checkCredits } from "../core/credits.ts";
import { describe, formatDuration } from "../core/duration.ts";
import type { PenaltySpec } from "../core/penalty.ts";
import { type ConcurrencySpec, MAX_CONCURRENCY, MAX_SLOT_TIMEOUT_MS, MIN_SLOT_TIMEOUT_MS } from "../core/slots.ts";
import { checkUsage, MAX_USAGE_DAYS, type UsageSpec } from "../core/usage.ts";
import {
  duration,
  type Inheritable,
  notFalse,
  type Obj,
  object,
  oneOf,
  POSITIVE,
  timeZone,
  unknownFields,
  wholeNumber,
} from "./fields.ts";
import { periodAndZone } from "./limits.ts";
import { ConfigError, type CreditsSetting, DEFAULTS } from "./types.ts";

/** What plans inherit from the limiter unless they say otherwise (null: none). */
export interface Inherited {
  readonly penalty: PenaltySpec | null;
  readonly concurrency: ConcurrencySpec | null;
  readonly credits: CreditsSetting | null;
  readonly usage: UsageSpec | null;
}

/** `penalty`: blocks for repeat offenders. */
export const PENALTY: Inheritable<PenaltySpec> = {
  key: "penalty",
  none: "no penalty",
  unlimited: "are never refused",
  parse: parsePenalty,
};

/** `credits`: prepaid units each key spends. */
export const CREDITS: Inheritable<CreditsSetting> = {
  key: "credits",
  none: "no credits",
  unlimited: "never consult the limiter",
  parse: parseCredits,
};

/** `usage`: exact requests and cost per key and day. */
export const USAGE: Inheritable<UsageSpec> = {
  key: "usage",
  none: "no usage",
  unlimited: "never consult the limiter, so nothing would be counted",
  parse: parseUsage,
};

/**
 * `penalty = { after, within, block, max_block? }`: a key refused `after` times within `within` is blocked for
 * `block`; with `max_block`, each block within `within` of the last one's end doubles, up to `max_block`.
 */
function parsePenalty(value: unknown, field: string): PenaltySpec {
  const t = object(value, field);
  unknownFields(t, ["after", "within", "block", "max_block"], field);
  const after = wholeNumber(t.after, `${field}.after`, {
    min: 1,
    max: 1000,
    expected: "the number of refusals that trigger a block, 1 to 1000",
  });
  const required = (k: string) => {
    if (t[k] === undefined) throw new ConfigError(`${field}.${k}: required, e.g. "1m"`);
    return duration(t[k], `${field}.${k}`);
  };
  const withinMs = required("within");
  const blockMs = required("block");
  const maxBlockMs = t.max_block === undefined ? null : required("max_block");
  if (maxBlockMs !== null && maxBlockMs < blockMs) {
    throw new ConfigError(
      `${field}.max_block: at least the block (${formatDuration(blockMs)}), got ${describe(t.max_block)}`,
    );
  }
  return { after, withinMs, blockMs, maxBlockMs };
}

/**
 * `concurrency = N` (false: none, in a plan) and `concurrency_timeout`: at most N of a key's requests in flight at
 * once, a slot whose holder vanished free again after the timeout (default 60 s). In a plan, its own `concurrency`
 * replaces `inherited` (the top-level one); its own `concurrency_timeout` replaces the inherited timeout.
 */
export function parseConcurrency(
  t: Obj,
  field: string,
  inherited: ConcurrencySpec | null,
  inPlan: boolean,
): ConcurrencySpec | null {
  const n = t.concurrency;
  if (!inPlan) notFalse(t, "concurrency", field, "no concurrency limit");
  if (n === false) {
    if (t.concurrency_timeout !== undefined) {
      throw new ConfigError(`${field}.concurrency_timeout: the plan has no concurrency limit (concurrency = false)`);
    }
    return null;
  }
  const timeoutMs =
    t.concurrency_timeout === undefined
      ? (inherited?.timeoutMs ?? DEFAULTS.concurrencyTimeoutMs)
      : duration(t.concurrency_timeout, `${field}.concurrency_timeout`);
  if (timeoutMs < MIN_SLOT_TIMEOUT_MS || timeoutMs > MAX_SLOT_TIMEOUT_MS) {
    throw new ConfigError(
      `${field}.concurrency_timeout: expected 1s to 1d (how long a vanished request's slot stays taken), got ${describe(t.concurrency_timeout)}`,
    );
  }
  if (n === undefined) {
    if (t.concurrency_timeout !== undefined && inherited === null) {
      throw new ConfigError(`${field}.concurrency_timeout: set only with concurrency (the requests in flight at once)`);
    }
    return inherited && { ...inherited, timeoutMs };
  }
  const limit = wholeNumber(n, `${field}.concurrency`, {
    min: 1,
    max: MAX_CONCURRENCY,
    expected: `the number of a key's requests in flight at once, 1 to ${MAX_CONCURRENCY}`,
  });
  return { limit, timeoutMs };
}

/**
 * `credits = { initial, refill?, status? }` (docs/configuration.md, "Quotas and credits"): each key starts with
 * `initial`; `refill = { amount, period, time_zone? }` raises a smaller balance to `amount` at each period's start; a
 * request the balance cannot cover is refused with `status` (402, or 429).
 */
function parseCredits(value: unknown, field: string): CreditsSetting {
  const c = object(value, field);
  unknownFields(c, ["initial", "refill", "status"], field);
  const initial = wholeNumber(c.initial, `${field}.initial`, {
    min: 0,
    expected: "a whole number ≥ 0 (each key's first balance)",
  });
  let refill: { amount: number; period: Period; zone: string } | null = null;
  if (c.refill !== undefined) {
    const r = object(c.refill, `${field}.refill`);
    unknownFields(r, ["amount", "period", "time_zone"], `${field}.refill`);
    const amount = wholeNumber(r.amount, `${field}.refill.amount`, POSITIVE);
    refill = { amount, ...periodAndZone(r, `${field}.refill`) };
  }
  const status = oneOf(c.status ?? 402, `${field}.status`, {
    choices: [402, 429] as const,
    expected: "402 (Payment Required) or 429",
  });
  return { spec: checkCredits({ initial, refill }), status };
}

/**
 * `usage = true`, or `{ keep = "400d", time_zone = "UTC" }` (docs/configuration.md, "Usage"): exact requests and cost
 * per calendar day in `time_zone`, kept for `keep` (whole days, 1 to 3660).
 */
function parseUsage(value: unknown, field: string): UsageSpec {
  if (value === true) return { zone: "UTC", keepDays: 400 };
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ConfigError(`${field}: expected true or { keep = "400d", time_zone = "UTC" }, got ${describe(value)}`);
  }
  const u = value as Obj;
  unknownFields(u, ["keep", "time_zone"], field);
  let keepDays = 400;
  if (u.keep !== undefined) {
    const days = typeof u.keep === "string" ? /^([1-9][0-9]*)d$/.exec(u.keep)?.[1] : undefined;
    if (days === undefined || Number(days) > MAX_USAGE_DAYS) {
      throw new ConfigError(
        `${field}.keep: expected whole days from "1d" to "${MAX_USAGE_DAYS}d", got ${describe(u.keep)}`,
      );
    }
    keepDays = Number(days);
  }
  return checkUsage({ zone: timeZone(u.time_zone, `${field}.time_zone`), keepDays });
}
