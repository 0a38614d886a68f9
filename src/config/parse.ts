/**
 * @module Parses and validates a limiter's configuration once: the proxy's `[vars]` in
 * wrangler.toml, or the settings given to `createLimiter()`. Every error names the field; nothing
 * invalid ever falls back to "no limit". This file reads the limiter's own settings and hands the
 * rest to the parsers of plans (plans.ts), limits (limits.ts), rules (rules.ts), inherited
 * settings (inherited.ts) and the proxy's own (proxy-settings.ts).
 */

import { ESCAPED_SLASHES, type EscapedSlashes } from "../base/path.ts";
import { describe } from "../core/duration.ts";
import {
  duration,
  fromJsonString,
  MAX_TIMER_MS,
  nonEmptyString,
  type Obj,
  object,
  oneOf,
  optionalBoolean,
  POSITIVE,
  timeout,
  topLevel,
  unknownFields,
  wholeNumber,
} from "./fields.ts";
import { parseUpstreams } from "./gateway.ts";
import { parseGuesses } from "./guesses.ts";
import { CREDITS, PENALTY, parseConcurrency, USAGE } from "./inherited.ts";
import {
  addressSetting,
  checkRoutesTaken,
  type PlanContext,
  parseAnonymous,
  parseDefaultPlan,
  parsePlans,
} from "./plans.ts";
import { parseAdmin, parseCors, parseOrigin, parseRefund } from "./proxy-settings.ts";
import { parseCosts, parseRoutes } from "./rules.ts";
import {
  type AddressBudget,
  type Config,
  ConfigError,
  DEFAULTS,
  type FailureMode,
  HEADER_FORMS,
  JURISDICTIONS,
  type Jurisdiction,
  type KeySource,
  type LeaseSettings,
  type LimiterConfig,
} from "./types.ts";

export { parseLimits } from "./limits.ts";

/** The longest timer `setTimeout` keeps: longer delays overflow and fire at once. */
export const MAX_ORIGIN_TIMEOUT_MS = MAX_TIMER_MS;

/** The settings of a limiter, in the proxy and in the library. */
export const LIMITER_FIELDS = [
  "limits",
  "routes",
  "plans",
  "anonymous",
  "costs",
  "key",
  "failure_mode",
  "fallback_share",
  "jurisdiction",
  "shadow",
  "object_timeout",
  "leases",
  "headers",
  "paths",
  "ip",
  "ipv6_subnet",
  "penalty",
  "concurrency",
  "concurrency_timeout",
  "credits",
  "usage",
  "guesses",
] as const;

/** The settings only the proxy reads. */
export const PROXY_FIELDS = [
  "origin_timeout",
  "admin",
  "refund",
  "cors",
  "origins",
  "origin_headers",
  "forward_key",
] as const;

/**
 * Parses the proxy's vars. Each var may be given as TOML/JSON values or as a JSON string
 * (dashboard variables and `wrangler dev --var` deliver strings).
 *
 * @throws ConfigError naming the first bad field
 */
export function parseConfig(vars: { ORIGIN?: unknown; RATE_LIMIT?: unknown }): Config {
  const root = "RATE_LIMIT";
  // ORIGIN first: a bad one, or none where RATE_LIMIT cannot give origins either, is the first error.
  const origin =
    (vars.ORIGIN === undefined || vars.ORIGIN === "") && vars.RATE_LIMIT !== undefined
      ? null
      : parseOrigin(vars.ORIGIN);
  const rl = object(fromJsonString(vars.RATE_LIMIT, root), root);
  unknownFields(rl, [...LIMITER_FIELDS, ...PROXY_FIELDS], root);
  const origins = parseUpstreams(origin, rl, root);
  return {
    ...limiterSettings(rl, root, true),
    origins,
    originTimeoutMs: timeout(rl.origin_timeout, `${root}.origin_timeout`, DEFAULTS.originTimeoutMs),
    admin: parseAdmin(rl.admin, root),
    refundStatuses: parseRefund(rl.refund, root),
    cors: parseCors(rl.cors, root, parseLeases(rl.leases, root)),
  };
}

/**
 * Parses a limiter's settings as the library takes them: the shape of `RATE_LIMIT` without the
 * proxy's own settings. Errors name the field from `root` (e.g. `createLimiter.limits[0].window`).
 * `readElsewhere`: the caller's own settings beside these (`name`, `binding`, …): passed over here,
 * and listed with the others when a setting is unknown.
 *
 * @throws ConfigError naming the first bad field
 */
export function parseLimiterConfig(value: unknown, root: string, readElsewhere: readonly string[] = []): LimiterConfig {
  const rl = object(value, root);
  for (const k of Object.keys(rl)) {
    if ((PROXY_FIELDS as readonly string[]).includes(k)) {
      throw new ConfigError(`${root}.${k}: only the proxy reads this setting (RATE_LIMIT in its wrangler.toml)`);
    }
  }
  unknownFields(rl, [...LIMITER_FIELDS, ...readElsewhere], root);
  return limiterSettings(rl, root, false);
}

/** The settings of a limiter; `routePaths`: whether every route needs a `path` (the proxy matches on nothing else). */
function limiterSettings(rl: Obj, root: string, routePaths: boolean): LimiterConfig {
  const key = parseKeySource(rl.key, root);
  const leases = parseLeases(rl.leases, root);

  const routes = rl.routes === undefined ? [] : parseRoutes(rl.routes, `${root}.routes`, routePaths);
  const ip = topLevel(rl, root, addressSetting("addr", leases));
  const penalty = topLevel(rl, root, PENALTY);
  const credits = topLevel(rl, root, CREDITS);
  const usage = topLevel(rl, root, USAGE);
  const concurrency = parseConcurrency(rl, root, null, false);
  const ctx: PlanContext = { root, maxKeyLength: key.maxLength, leases, routes, routePaths, ip };
  const plans = parsePlans(rl, ctx, { penalty, concurrency, credits, usage });
  const defaultPlan = parseDefaultPlan(rl, ctx, { penalty, concurrency, credits, usage });
  if (!defaultPlan && plans.length === 0) {
    throw new ConfigError(`${root}.limits: required (or give ${root}.plans); without limits nothing would be limited`);
  }
  const anonymous = parseAnonymous(rl, ctx, { penalty, concurrency, credits: null, usage: null });
  checkRoutesTaken(rl, ctx, defaultPlan !== null, anonymous !== null);
  return {
    objectTimeoutMs: timeout(rl.object_timeout, `${root}.object_timeout`, DEFAULTS.objectTimeoutMs),
    leases,
    plans,
    defaultPlan,
    anonymous,
    costs: parseCosts(rl.costs, root),
    key,
    ...parseFailure(rl, root),
    jurisdiction: oneOf<Jurisdiction | null>(rl.jurisdiction, `${root}.jurisdiction`, {
      choices: JURISDICTIONS,
      fallback: null,
    }),
    shadow: optionalBoolean(rl.shadow, `${root}.shadow`, false),
    headers: oneOf(rl.headers, `${root}.headers`, { choices: HEADER_FORMS, fallback: DEFAULTS.headers }),
    paths: parsePaths(rl.paths, root),
    ipv6Subnet: wholeNumber(rl.ipv6_subnet, `${root}.ipv6_subnet`, {
      min: 32,
      max: 128,
      expected: "a network length from 32 to 128 bits (56: a site's usual network)",
      fallback: DEFAULTS.ipv6Subnet,
    }),
    ip,
    ...guessesOf(parseGuesses(rl, root, plans, leases)),
  };
}

/** `guesses` as the configuration carries it: left out when there is none. */
function guessesOf(guesses: AddressBudget | null): { guesses?: AddressBudget } {
  return guesses ? { guesses } : {};
}

function parseKeySource(value: unknown, root: string): KeySource {
  if (value === undefined) {
    return { header: DEFAULTS.keyHeader, bearer: true, query: null, maxLength: DEFAULTS.maxKeyLength, pattern: null };
  }
  const k = object(value, `${root}.key`);
  unknownFields(k, ["header", "bearer", "query", "max_length", "pattern"], `${root}.key`);
  let header: string | null = DEFAULTS.keyHeader;
  if (k.header === false) header = null;
  else if (k.header !== undefined) {
    header = nonEmptyString(k.header, `${root}.key.header`).toLowerCase();
    if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(header) || header === "authorization") {
      throw new ConfigError(
        `${root}.key.header: expected a header name other than authorization (use bearer), got ${JSON.stringify(k.header)}`,
      );
    }
  }
  const query = k.query === undefined || k.query === false ? null : nonEmptyString(k.query, `${root}.key.query`);
  const bearer = optionalBoolean(k.bearer, `${root}.key.bearer`, true);
  if (header === null && !bearer && query === null) {
    throw new ConfigError(`${root}.key: every key source is off; enable header, bearer or query`);
  }
  const maxLength = wholeNumber(k.max_length, `${root}.key.max_length`, {
    min: 1,
    max: 4096,
    expected: "an integer from 1 to 4096",
    fallback: DEFAULTS.maxKeyLength,
  });
  return { header, bearer, query, maxLength, pattern: parseKeyPattern(k.pattern, root) };
}

/** `key.pattern`: a regular expression the whole key must match (it is anchored here). */
function parseKeyPattern(value: unknown, root: string): RegExp | null {
  if (value === undefined) return null;
  const source = nonEmptyString(value, `${root}.key.pattern`);
  try {
    return new RegExp(`^(?:${source})$`, "u");
  } catch (e) {
    throw new ConfigError(
      `${root}.key.pattern: expected a regular expression, got ${JSON.stringify(source)} (${(e as Error).message})`,
    );
  }
}

/** `leases`: `false` turns them off; a table tunes them. */
function parseLeases(value: unknown, root: string): LeaseSettings {
  const d = DEFAULTS.leases;
  if (value === undefined || value === true) return d;
  if (value === false) return { ...d, enabled: false };
  const l = object(value, `${root}.leases`);
  unknownFields(l, ["enabled", "max_units", "max_lifetime"], `${root}.leases`);
  return {
    enabled: optionalBoolean(l.enabled, `${root}.leases.enabled`, d.enabled),
    maxUnits: wholeNumber(l.max_units, `${root}.leases.max_units`, { ...POSITIVE, fallback: d.maxUnits }),
    maxLifetimeMs:
      l.max_lifetime === undefined ? d.maxLifetimeMs : duration(l.max_lifetime, `${root}.leases.max_lifetime`),
  };
}

/** The failure modes, as `failure_mode` names them. */
const FAILURE_MODES: readonly FailureMode[] = ["closed", "open", "local"];

/** `failure_mode` and, with `"local"`, `fallback_share` (0–1, default 1). */
function parseFailure(rl: Obj, root: string): { failureMode: FailureMode; fallbackShare: number } {
  const failureMode = oneOf(rl.failure_mode, `${root}.failure_mode`, {
    choices: FAILURE_MODES,
    expected: '"closed", "open" or "local"',
    fallback: DEFAULTS.failureMode,
  });
  const share = rl.fallback_share;
  if (share === undefined) return { failureMode, fallbackShare: DEFAULTS.fallbackShare };
  if (failureMode !== "local") {
    throw new ConfigError(
      `${root}.fallback_share: only with failure_mode = "local" (failure_mode is "${failureMode}"); remove it or set failure_mode = "local"`,
    );
  }
  if (typeof share !== "number" || !(share >= 0 && share <= 1)) {
    throw new ConfigError(`${root}.fallback_share: expected a number from 0 to 1, got ${describe(share)}`);
  }
  return { failureMode, fallbackShare: share };
}

/** `paths = { escaped_slashes = "reject" }`: what an encoded slash or backslash in a path gets. */
function parsePaths(value: unknown, root: string): { readonly escapedSlashes: EscapedSlashes } {
  if (value === undefined) return { escapedSlashes: "reject" };
  const p = object(value, `${root}.paths`);
  unknownFields(p, ["escaped_slashes"], `${root}.paths`);
  const field = `${root}.paths.escaped_slashes`;
  return { escapedSlashes: oneOf(p.escaped_slashes, field, { choices: ESCAPED_SLASHES, fallback: "reject" }) };
}
