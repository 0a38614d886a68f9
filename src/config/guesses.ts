/**
 * @module Parses `guesses`: the budget per client address of requests refused for their key (docs/configuration.md,
 * "Addresses that guess") — on by default when a plan is signed, off otherwise unless set.
 */

import { type Obj, object, unknownFields } from "./fields.ts";
import { PENALTY } from "./inherited.ts";
import { parseLimits } from "./limits.ts";
import { limitsPlan } from "./plans.ts";
import { type AddressBudget, ConfigError, DEFAULTS, type LeaseSettings, type Plan } from "./types.ts";

/** The kind of a guessing address's object name: `guess:<client>`. */
export const GUESS_KIND = "guess";

/**
 * `guesses = { limits = [...], penalty? }`, or `false`: none. Left out, {@link DEFAULTS}' when one of `plans` is signed,
 * else none. Its limits are named `guess-per-minute` etc. by default.
 *
 * @throws ConfigError naming the field
 */
export function parseGuesses(
  rl: Obj,
  root: string,
  plans: readonly Plan[],
  leases: LeaseSettings,
): AddressBudget | null {
  const field = `${root}.guesses`;
  const value = rl.guesses;
  if (value === false) return null;
  if (value === undefined && !plans.some((p) => p.signed !== undefined)) return null;
  if (value === true) {
    throw new ConfigError(`${field}: expected { limits = [...], penalty = {...} } or false, got true`);
  }
  const t = value === undefined ? (DEFAULTS.guesses as Obj) : object(value, field);
  unknownFields(t, ["limits", "penalty"], field);
  if (t.limits === undefined) throw new ConfigError(`${field}.limits: required, e.g. [{ limit = 10, window = "1m" }]`);
  const limits = parseLimits(t.limits, `${field}.limits`, { defaultName: (w) => `guess-${w}` });
  const penalty = t.penalty === undefined ? null : PENALTY.parse(t.penalty, `${field}.penalty`);
  return { kind: GUESS_KIND, plan: { ...limitsPlan(GUESS_KIND, limits, leases, field), penalty } };
}
