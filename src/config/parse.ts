/**
 * @module Parses and validates a limiter's configuration once: the proxy's `[vars]` in
 * wrangler.toml, or the settings given to `createLimiter()`. Every error names the field; nothing
 * invalid ever falls back to "no limit".
 */

import { ESCAPED_SLASHES, type EscapedSlashes, normalizePath } from "../base/path.ts";
import { checkTimeZone, PERIODS, type Period } from "../core/calendar.ts";
import { checkCredits } from "../core/credits.ts";
import { describe, formatDuration, parseDuration } from "../core/duration.ts";
import { type Limit as CoreLimit, maxLeaseMs, normalizeLimits } from "../core/limits.ts";
import type { PenaltySpec } from "../core/penalty.ts";
import { type ConcurrencySpec, MAX_CONCURRENCY, MAX_SLOT_TIMEOUT_MS, MIN_SLOT_TIMEOUT_MS } from "../core/slots.ts";
import { checkUsage, MAX_USAGE_DAYS, type UsageSpec } from "../core/usage.ts";
import {
  array,
  fromJsonString,
  nonEmptyString,
  type Obj,
  object,
  optionalArray,
  optionalBoolean,
  unknownFields,
  wrap,
} from "./fields.ts";
import {
  type AddressBudget,
  type AdminSettings,
  type Config,
  ConfigError,
  type CorsSettings,
  type CostRule,
  type CreditsSetting,
  DEFAULTS,
  type FailureMode,
  HEADER_FORMS,
  type HeaderForm,
  JURISDICTIONS,
  type Jurisdiction,
  KEY_CHARS,
  type KeySource,
  type LeaseSettings,
  type Limit,
  type LimiterConfig,
  type Plan,
  type QuotaLimit,
  type Route,
} from "./types.ts";

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
] as const;

/** The settings only the proxy reads. */
export const PROXY_FIELDS = ["origin_timeout", "admin", "refund", "cors"] as const;

/**
 * Parses the proxy's vars. Each var may be given as TOML/JSON values or as a JSON string
 * (dashboard variables and `wrangler dev --var` deliver strings).
 *
 * @throws ConfigError naming the first bad field
 */
export function parseConfig(vars: { ORIGIN?: unknown; RATE_LIMIT?: unknown }): Config {
  const origin = parseOrigin(vars.ORIGIN);
  const root = "RATE_LIMIT";
  const rl = object(fromJsonString(vars.RATE_LIMIT, root), root);
  unknownFields(rl, [...LIMITER_FIELDS, ...PROXY_FIELDS], root);
  return {
    ...limiterSettings(rl, root, true),
    origin,
    originTimeoutMs: parseTimeout(rl.origin_timeout, `${root}.origin_timeout`, DEFAULTS.originTimeoutMs),
    admin: parseAdmin(rl.admin, root),
    refundStatuses: parseRefund(rl.refund, root),
    cors: parseCors(rl.cors, root, parseLeases(rl.leases, root)),
  };
}

/**
 * Parses a limiter's settings as the library takes them: the shape of `RATE_LIMIT` without the
 * proxy's own settings. Errors name the field from `root` (e.g. `createLimiter.limits[0].window`).
 *
 * @throws ConfigError naming the first bad field
 */
export function parseLimiterConfig(value: unknown, root: string): LimiterConfig {
  const rl = object(value, root);
  for (const k of Object.keys(rl)) {
    if ((PROXY_FIELDS as readonly string[]).includes(k)) {
      throw new ConfigError(`${root}.${k}: only the proxy reads this setting (RATE_LIMIT in its wrangler.toml)`);
    }
  }
  unknownFields(rl, LIMITER_FIELDS, root);
  return limiterSettings(rl, root, false);
}

/** The settings of a limiter; `routePaths`: whether every route needs a `path` (the proxy matches on nothing else). */
function limiterSettings(rl: Obj, root: string, routePaths: boolean): LimiterConfig {
  const key = parseKeySource(rl.key, root);
  const leases = parseLeases(rl.leases, root);

  const routes = rl.routes === undefined ? [] : parseRoutes(rl.routes, `${root}.routes`, routePaths);
  if (rl.ip === false)
    throw new ConfigError(`${root}.ip: leave it out for no per-address limits (false is for a plan)`);
  const ip = rl.ip === undefined ? null : parseAddressBudget(rl.ip, `${root}.ip`, "addr", leases);
  if (rl.penalty === false) throw new ConfigError(`${root}.penalty: leave it out for no penalty (false is for a plan)`);
  const penalty = rl.penalty === undefined ? null : parsePenalty(rl.penalty, `${root}.penalty`);
  if (rl.credits === false) throw new ConfigError(`${root}.credits: leave it out for no credits (false is for a plan)`);
  const credits = rl.credits === undefined ? null : parseCredits(rl.credits, `${root}.credits`);
  if (rl.usage === false) throw new ConfigError(`${root}.usage: leave it out for no usage (false is for a plan)`);
  const usage = rl.usage === undefined ? null : parseUsage(rl.usage, `${root}.usage`);
  const concurrency = parseConcurrency(rl, root, null, false);
  const ctx: PlanContext = { root, maxKeyLength: key.maxLength, leases, routes, routePaths, ip };
  const plans = parsePlans(rl, ctx, { penalty, concurrency, credits, usage });
  const defaultPlan =
    rl.limits === undefined
      ? null
      : withMeterSettings(
          {
            ...makePlan(
              { name: "default", keyPrefix: "", ...parsePlanLimits(rl.limits, `${root}.limits`) },
              leases,
              { settings: routes, field: `${root}.routes` },
              { budget: ip, field: `${root}.ip` },
            ),
            penalty,
            concurrency,
          },
          credits,
          usage,
        );
  if (!defaultPlan && plans.length === 0) {
    throw new ConfigError(`${root}.limits: required (or give ${root}.plans); without limits nothing would be limited`);
  }
  const anonymous = parseAnonymous(rl, ctx, { penalty, concurrency, credits: null, usage: null });
  checkRoutesTaken(rl, ctx, defaultPlan !== null, anonymous !== null);
  return {
    objectTimeoutMs: parseTimeout(rl.object_timeout, `${root}.object_timeout`, DEFAULTS.objectTimeoutMs),
    leases,
    plans,
    defaultPlan,
    anonymous,
    costs: parseCosts(rl.costs, root),
    key,
    ...parseFailure(rl, root),
    jurisdiction: parseJurisdiction(rl.jurisdiction, root),
    shadow: optionalBoolean(rl.shadow, `${root}.shadow`, false),
    headers: parseHeaderForm(rl.headers, root),
    paths: parsePaths(rl.paths, root),
    ipv6Subnet: parseIpv6Subnet(rl.ipv6_subnet, root),
    ip,
  };
}

/** What every plan of a limiter is parsed with: the limiter's own settings that plans inherit or are checked against. */
interface PlanContext {
  readonly root: string;
  readonly maxKeyLength: number;
  readonly leases: LeaseSettings;
  /** The limiter's routes, for plans without their own. */
  readonly routes: readonly RouteSetting[];
  /** Whether every route needs a `path` (the proxy matches on nothing else). */
  readonly routePaths: boolean;
  /** The limiter's per-address budget, for plans without their own. */
  readonly ip: AddressBudget | null;
}

/** What plans inherit from the limiter unless they say otherwise. */
interface Inherited {
  readonly penalty: PenaltySpec | null;
  readonly concurrency: ConcurrencySpec | null;
  readonly credits: CreditsSetting | null;
  readonly usage: UsageSpec | null;
}

/**
 * `plan` with its credits and usage (null: none), and the meters its keys' calls carry to their object (quotas,
 * credits, usage). A plan with credits or usage gets no leases: units leased to an isolate that vanished were never
 * used, yet would stay spent (credits) or billed (usage), and a lease's uses far below the limits are not reported
 * one by one.
 */
function withMeterSettings(plan: Plan, credits: CreditsSetting | null, usage: UsageSpec | null): Plan {
  const quotas = plan.quotas ?? [];
  if (credits === null && usage === null && quotas.length === 0) return plan;
  const meters = {
    ...(quotas.length > 0 ? { quotas } : {}),
    ...(credits ? { credits: credits.spec } : {}),
    ...(usage ? { usage } : {}),
  };
  return {
    ...plan,
    ...(credits ? { credits } : {}),
    ...(usage ? { usage } : {}),
    ...(usage || credits ? { leaseMs: 0 } : {}),
    meters,
  };
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
  let zone = "UTC";
  if (u.time_zone !== undefined) {
    try {
      zone = checkTimeZone(u.time_zone);
    } catch (e) {
      throw new ConfigError(`${field}.time_zone: ${(e as Error).message.replace(/^time zone: /, "")}`);
    }
  }
  return checkUsage({ zone, keepDays });
}

/**
 * `credits = { initial, refill?, status? }` (docs/configuration.md, "Quotas and credits"): each key starts with
 * `initial`; `refill = { amount, period, time_zone? }` raises a smaller balance to `amount` at each period's start; a
 * request the balance cannot cover is refused with `status` (402, or 429).
 */
function parseCredits(value: unknown, field: string): CreditsSetting {
  const c = object(value, field);
  unknownFields(c, ["initial", "refill", "status"], field);
  const initial = c.initial;
  if (typeof initial !== "number" || !Number.isSafeInteger(initial) || initial < 0) {
    throw new ConfigError(
      `${field}.initial: expected a whole number ≥ 0 (each key's first balance), got ${describe(initial)}`,
    );
  }
  let refill: { amount: number; period: Period; zone: string } | null = null;
  if (c.refill !== undefined) {
    const r = object(c.refill, `${field}.refill`);
    unknownFields(r, ["amount", "period", "time_zone"], `${field}.refill`);
    const amount = r.amount;
    if (typeof amount !== "number" || !Number.isSafeInteger(amount) || amount < 1) {
      throw new ConfigError(`${field}.refill.amount: expected a positive integer, got ${describe(amount)}`);
    }
    const { period, zone } = periodAndZone(r, `${field}.refill`);
    refill = { amount, period, zone };
  }
  const status = c.status ?? 402;
  if (status !== 402 && status !== 429) {
    throw new ConfigError(`${field}.status: expected 402 (Payment Required) or 429, got ${describe(c.status)}`);
  }
  return { spec: checkCredits({ initial, refill }), status };
}

/** `plans = [...]`: each plan with its penalty and concurrency; names unique, no prefix hidden by an earlier one. */
function parsePlans(rl: Obj, ctx: PlanContext, inherited: Inherited): Plan[] {
  const { root } = ctx;
  const plans = optionalArray(rl.plans, `${root}.plans`).map((p, i) => {
    const field = `${root}.plans[${i}]`;
    const plan = parsePlan(p, field, ctx);
    const own = (p as Obj).penalty;
    if (plan.limits === null && own !== undefined && own !== false) {
      throw new ConfigError(
        `${field}.penalty: an unlimited plan's keys are never refused; remove penalty or unlimited = true`,
      );
    }
    const spec =
      plan.limits === null || own === false
        ? null
        : own === undefined
          ? inherited.penalty
          : parsePenalty(own, `${field}.penalty`);
    const ownCredits = (p as Obj).credits;
    if (plan.limits === null && ownCredits !== undefined && ownCredits !== false) {
      throw new ConfigError(
        `${field}.credits: an unlimited plan's keys never consult the limiter; remove credits or unlimited = true`,
      );
    }
    const credits =
      plan.limits === null || ownCredits === false
        ? null
        : ownCredits === undefined
          ? inherited.credits
          : parseCredits(ownCredits, `${field}.credits`);
    const ownUsage = (p as Obj).usage;
    if (plan.limits === null && ownUsage !== undefined && ownUsage !== false) {
      throw new ConfigError(
        `${field}.usage: an unlimited plan's keys never consult the limiter, so nothing would be counted; remove usage or unlimited = true`,
      );
    }
    const usage =
      plan.limits === null || ownUsage === false
        ? null
        : ownUsage === undefined
          ? inherited.usage
          : parseUsage(ownUsage, `${field}.usage`);
    const full = {
      ...plan,
      penalty: spec,
      concurrency: plan.limits === null ? null : parseConcurrency(p as Obj, field, inherited.concurrency, true),
    };
    return withMeterSettings(full, credits, usage);
  });
  const names = new Set<string>();
  for (const [i, p] of plans.entries()) {
    if (names.has(p.name)) throw new ConfigError(`${root}.plans[${i}].name: ${JSON.stringify(p.name)} is used twice`);
    names.add(p.name);
    const earlier = plans.findIndex((q, j) => j < i && p.keyPrefix.startsWith(q.keyPrefix));
    if (earlier !== -1) {
      throw new ConfigError(
        `${root}.plans[${i}].key_prefix: ${JSON.stringify(p.keyPrefix)} can never match, every such key already matches ${root}.plans[${earlier}] (key_prefix ${JSON.stringify(plans[earlier]?.keyPrefix)}) and the first match wins; put the longer prefix first`,
      );
    }
  }
  return plans;
}

/** `anonymous = { limits, routes? }`: the limits of requests without a key, per client address; null without. */
function parseAnonymous(rl: Obj, ctx: PlanContext, inherited: Inherited): Plan | null {
  const { root, leases, routes, routePaths } = ctx;
  if (rl.anonymous === undefined) return null;
  const a = object(rl.anonymous, `${root}.anonymous`);
  unknownFields(a, ["limits", "routes"], `${root}.anonymous`);
  const own = a.routes === undefined ? null : parseRoutes(a.routes, `${root}.anonymous.routes`, routePaths);
  const anonymous = makePlan(
    { name: "anonymous", keyPrefix: "", ...parsePlanLimits(a.limits, `${root}.anonymous.limits`) },
    leases,
    { settings: own ?? routes, field: own ? `${root}.anonymous.routes` : `${root}.routes` },
    // Requests without a key are already counted per address: by the anonymous limits alone.
    { budget: null, field: `${root}.anonymous` },
  );
  return withMeterSettings(
    { ...anonymous, penalty: inherited.penalty, concurrency: inherited.concurrency },
    null,
    null,
  );
}

/** Top-level routes that no plan takes would silently do nothing: an error. */
function checkRoutesTaken(rl: Obj, ctx: PlanContext, hasDefault: boolean, hasAnonymous: boolean): void {
  const { root, routes } = ctx;
  const takers = optionalArray(rl.plans, `${root}.plans`).filter((p) => {
    const raw = p as Obj;
    return raw.unlimited !== true && raw.routes === undefined;
  });
  const anonymousTakes = hasAnonymous && (rl.anonymous as Obj).routes === undefined;
  if (!hasDefault && routes.length > 0 && takers.length === 0 && !anonymousTakes) {
    throw new ConfigError(
      `${root}.routes: no plan uses them (every plan with limits has its own routes, and there is no ${root}.limits); remove them or move them into a plan`,
    );
  }
}

/**
 * `penalty = { after, within, block, max_block? }`: a key refused `after` times within `within` is blocked for
 * `block`; with `max_block`, each block within `within` of the last one's end doubles, up to `max_block`.
 */
function parsePenalty(value: unknown, field: string): PenaltySpec {
  const t = object(value, field);
  unknownFields(t, ["after", "within", "block", "max_block"], field);
  const after = t.after;
  if (typeof after !== "number" || !Number.isSafeInteger(after) || after < 1 || after > 1000) {
    throw new ConfigError(
      `${field}.after: expected the number of refusals that trigger a block, 1 to 1000, got ${describe(after)}`,
    );
  }
  const duration = (k: string) => {
    if (t[k] === undefined) throw new ConfigError(`${field}.${k}: required, e.g. "1m"`);
    return wrap(() => parseDuration(t[k], `${field}.${k}`));
  };
  const withinMs = duration("within");
  const blockMs = duration("block");
  const maxBlockMs = t.max_block === undefined ? null : duration("max_block");
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
function parseConcurrency(
  t: Obj,
  field: string,
  inherited: ConcurrencySpec | null,
  inPlan: boolean,
): ConcurrencySpec | null {
  const n = t.concurrency;
  if (n === false && !inPlan) {
    throw new ConfigError(`${field}.concurrency: leave it out for no concurrency limit (false is for a plan)`);
  }
  if (n === false) {
    if (t.concurrency_timeout !== undefined) {
      throw new ConfigError(`${field}.concurrency_timeout: the plan has no concurrency limit (concurrency = false)`);
    }
    return null;
  }
  const timeoutMs =
    t.concurrency_timeout === undefined
      ? (inherited?.timeoutMs ?? DEFAULTS.concurrencyTimeoutMs)
      : wrap(() => parseDuration(t.concurrency_timeout, `${field}.concurrency_timeout`));
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
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 1 || n > MAX_CONCURRENCY) {
    throw new ConfigError(
      `${field}.concurrency: expected the number of a key's requests in flight at once, 1 to ${MAX_CONCURRENCY}, got ${describe(n)}`,
    );
  }
  return { limit: n, timeoutMs };
}

/** `ipv6_subnet`: the IPv6 network length clients are counted by. */
function parseIpv6Subnet(value: unknown, root: string): number {
  if (value === undefined) return DEFAULTS.ipv6Subnet;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 32 || value > 128) {
    throw new ConfigError(
      `${root}.ipv6_subnet: expected a network length from 32 to 128 bits (56: a site's usual network), got ${describe(value)}`,
    );
  }
  return value;
}

/**
 * `ip = { limits = [...] }`: limits every request must also fit, counted per client address. Its limits are named
 * `ip-per-minute` etc. by default, apart from the keys' limits in the headers.
 */
function parseAddressBudget(value: unknown, field: string, kind: string, leases: LeaseSettings): AddressBudget {
  const t = object(value, field);
  unknownFields(t, ["limits"], field);
  const limits = parseLimits(t.limits, `${field}.limits`, (w) => `ip-${w}`);
  const plan = makePlan(
    { name: "ip", keyPrefix: "", limits },
    leases,
    { settings: [], field: `${field}.routes` },
    { budget: null, field },
  );
  return { kind, plan };
}

/** `cors = { origins = [...] | "*", preflight_limits = [...] }` (proxy only). */
function parseCors(value: unknown, root: string, leases: LeaseSettings): CorsSettings {
  const field = `${root}.cors`;
  const c = value === undefined ? {} : object(value, field);
  unknownFields(c, ["origins", "preflight_limits"], field);
  let origins: CorsSettings["origins"] = new Set();
  if (c.origins === "*") origins = "*";
  else if (c.origins !== undefined) {
    origins = new Set(
      array(c.origins, `${field}.origins`).map((o, i) => {
        const f = `${field}.origins[${i}]`;
        const text = nonEmptyString(o, f);
        let origin: string | null = null;
        try {
          origin = new URL(text).origin;
        } catch {}
        if (origin !== text || !/^https?:/.test(text)) {
          throw new ConfigError(
            `${f}: expected an origin as browsers send it, scheme://host[:port] without a path (e.g. "https://app.example.com"), or origins = "*"; got ${JSON.stringify(text)}`,
          );
        }
        return text;
      }),
    );
  }
  const preflightLimits = parseLimits(
    c.preflight_limits ?? DEFAULTS.preflightLimits,
    `${field}.preflight_limits`,
    (w) => `preflight-${w}`,
  );
  const preflight = {
    kind: "preflight",
    plan: makePlan(
      { name: "preflight", keyPrefix: "", limits: preflightLimits },
      leases,
      { settings: [], field: `${field}.routes` },
      { budget: null, field },
    ),
  };
  return { origins, preflight };
}

/** `paths = { escaped_slashes = "reject" }`: what an encoded slash or backslash in a path gets. */
function parsePaths(value: unknown, root: string): { readonly escapedSlashes: EscapedSlashes } {
  if (value === undefined) return { escapedSlashes: "reject" };
  const p = object(value, `${root}.paths`);
  unknownFields(p, ["escaped_slashes"], `${root}.paths`);
  const v = p.escaped_slashes;
  if (v === undefined) return { escapedSlashes: "reject" };
  if (typeof v === "string" && (ESCAPED_SLASHES as readonly string[]).includes(v)) {
    return { escapedSlashes: v as EscapedSlashes };
  }
  throw new ConfigError(
    `${root}.paths.escaped_slashes: expected one of ${ESCAPED_SLASHES.map((f) => JSON.stringify(f)).join(", ")}, got ${describe(v)}`,
  );
}

function parseHeaderForm(value: unknown, root: string): HeaderForm {
  if (value === undefined) return DEFAULTS.headers;
  if (typeof value === "string" && (HEADER_FORMS as readonly string[]).includes(value)) return value as HeaderForm;
  throw new ConfigError(
    `${root}.headers: expected one of ${HEADER_FORMS.map((f) => JSON.stringify(f)).join(", ")}, got ${describe(value)}`,
  );
}

/** `refund = { status = [500, 502, 503, 504] }`: responses with these statuses give their units back. */
function parseRefund(value: unknown, root: string): ReadonlySet<number> {
  if (value === undefined) return new Set();
  const r = object(value, `${root}.refund`);
  unknownFields(r, ["status"], `${root}.refund`);
  const list = array(r.status, `${root}.refund.status`);
  return new Set(
    list.map((s, i) => {
      if (typeof s !== "number" || !Number.isInteger(s) || s < 200 || s > 599) {
        throw new ConfigError(
          `${root}.refund.status[${i}]: expected an HTTP status from 200 to 599, got ${describe(s)}`,
        );
      }
      return s;
    }),
  );
}

/** `admin.path`: where the operators' API and page live; a prefix no API path of yours uses. */
function parseAdmin(value: unknown, root: string): AdminSettings {
  if (value === undefined) return { path: DEFAULTS.adminPath };
  const a = object(value, `${root}.admin`);
  unknownFields(a, ["path"], `${root}.admin`);
  if (a.path === undefined) return { path: DEFAULTS.adminPath };
  const path = nonEmptyString(a.path, `${root}.admin.path`);
  if (!/^\/(?:[A-Za-z0-9._~-]+\/)+$/.test(path)) {
    throw new ConfigError(
      `${root}.admin.path: expected a path prefix like "/__limiter/" (segments of letters, digits, ".", "_", "~" or "-", starting and ending with "/", not "/" alone), got ${JSON.stringify(path)}`,
    );
  }
  return { path };
}

function parseOrigin(value: unknown): URL {
  if (value === undefined || value === "") {
    throw new ConfigError('ORIGIN: required, the base URL of your API, e.g. "https://api.example.com"');
  }
  let s: unknown = value;
  if (typeof s === "string" && s.trim().startsWith('"')) s = fromJsonString(s, "ORIGIN");
  if (typeof s !== "string") throw new ConfigError(`ORIGIN: expected a URL string, got ${describe(s)}`);
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new ConfigError(`ORIGIN: expected an absolute http(s) URL, got ${JSON.stringify(s)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`ORIGIN: expected an http or https URL, got ${JSON.stringify(s)}`);
  }
  if (url.username || url.password) {
    // The message reaches clients (500 detail) and logs: never echo the credentials.
    const redacted = `${url.protocol}//***@${url.host}${url.pathname}`;
    throw new ConfigError(
      `ORIGIN: must not carry a user name or password (fetch refuses such URLs), got ${JSON.stringify(redacted)}`,
    );
  }
  if (url.search || url.hash) {
    throw new ConfigError(
      `ORIGIN: must not carry a query or fragment (the request's own are appended), got ${JSON.stringify(s)}`,
    );
  }
  return url;
}

/** The longest timer `setTimeout` keeps: longer delays overflow and fire at once. */
export const MAX_ORIGIN_TIMEOUT_MS = 2_147_483_647;

function parseTimeout(value: unknown, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  const ms = wrap(() => parseDuration(value, field));
  if (ms > MAX_ORIGIN_TIMEOUT_MS) {
    throw new ConfigError(
      `${field}: at most ${MAX_ORIGIN_TIMEOUT_MS} ms (about 24.8 days; longer timers fire at once), got ${describe(value)}`,
    );
  }
  return ms;
}

/** `leases`: `false` turns them off; a table tunes them. */
function parseLeases(value: unknown, root: string): LeaseSettings {
  const d = DEFAULTS.leases;
  if (value === undefined || value === true) return d;
  if (value === false) return { ...d, enabled: false };
  const l = object(value, `${root}.leases`);
  unknownFields(l, ["enabled", "max_units", "max_lifetime"], `${root}.leases`);
  const enabled = optionalBoolean(l.enabled, `${root}.leases.enabled`, d.enabled);
  let maxUnits = d.maxUnits;
  if (l.max_units !== undefined) {
    const m = l.max_units;
    if (typeof m !== "number" || !Number.isSafeInteger(m) || m < 1) {
      throw new ConfigError(`${root}.leases.max_units: expected a positive integer, got ${describe(m)}`);
    }
    maxUnits = m;
  }
  const maxLifetimeMs =
    l.max_lifetime === undefined
      ? d.maxLifetimeMs
      : wrap(() => parseDuration(l.max_lifetime, `${root}.leases.max_lifetime`));
  return { enabled, maxUnits, maxLifetimeMs };
}

function parsePlan(value: unknown, field: string, ctx: PlanContext): Plan {
  const { root, maxKeyLength, leases, routes, routePaths, ip } = ctx;
  const p = object(value, field);
  unknownFields(
    p,
    [
      "name",
      "key_prefix",
      "limits",
      "unlimited",
      "routes",
      "ip",
      "penalty",
      "concurrency",
      "concurrency_timeout",
      "credits",
      "usage",
    ],
    field,
  );
  const name = nonEmptyString(p.name, `${field}.name`);
  if (!/^[A-Za-z0-9_.-]+$/.test(name)) {
    throw new ConfigError(`${field}.name: use letters, digits, "_", "-" or "." only, got ${JSON.stringify(name)}`);
  }
  const keyPrefix = nonEmptyString(p.key_prefix, `${field}.key_prefix`);
  if (!KEY_CHARS.test(keyPrefix)) {
    throw new ConfigError(
      `${field}.key_prefix: keys hold printable ASCII without spaces or commas only, so no key can start with ${JSON.stringify(keyPrefix)}`,
    );
  }
  if (keyPrefix.length > maxKeyLength) {
    throw new ConfigError(
      `${field}.key_prefix: longer than ${root}.key.max_length (${maxKeyLength}), so no key can start with ${JSON.stringify(keyPrefix)}`,
    );
  }
  const unlimited = optionalBoolean(p.unlimited, `${field}.unlimited`, false);
  if (unlimited && p.limits !== undefined) {
    throw new ConfigError(`${field}: give either limits or unlimited = true, not both`);
  }
  if (!unlimited && p.limits === undefined) {
    throw new ConfigError(`${field}.limits: required (or set unlimited = true)`);
  }
  if (unlimited && p.routes !== undefined) {
    throw new ConfigError(`${field}.routes: an unlimited plan has no budgets; remove routes or unlimited = true`);
  }
  if (unlimited && ((p.concurrency !== undefined && p.concurrency !== false) || p.concurrency_timeout !== undefined)) {
    throw new ConfigError(
      `${field}.concurrency: an unlimited plan's keys never consult the limiter; remove concurrency or unlimited = true`,
    );
  }
  if (unlimited && p.ip !== undefined && p.ip !== false) {
    throw new ConfigError(
      `${field}.ip: an unlimited plan's keys never consult the limiter; remove ip or unlimited = true`,
    );
  }
  if (unlimited) {
    return makePlan({ name, keyPrefix, limits: null }, leases, { settings: [], field }, { budget: null, field });
  }
  const own = p.routes === undefined ? null : parseRoutes(p.routes, `${field}.routes`, routePaths);
  const { limits, quotas } = parsePlanLimits(p.limits, `${field}.limits`);
  const ownIp =
    p.ip === undefined || p.ip === false ? null : parseAddressBudget(p.ip, `${field}.ip`, `addr.${name}`, leases);
  return makePlan(
    { name, keyPrefix, limits, quotas },
    leases,
    { settings: own ?? routes, field: own ? `${field}.routes` : `${root}.routes` },
    { budget: p.ip === false ? null : (ownIp ?? ip), field: ownIp ? `${field}.ip` : `${root}.ip` },
  );
}

/**
 * A plan: its limits, lease lifetime, routes (each route's limits named apart from the plan's) and per-address
 * budget (its limits named apart from both: the headers show them together).
 */
function makePlan(
  head: {
    readonly name: string;
    readonly keyPrefix: string;
    readonly limits: Limit[] | null;
    readonly quotas?: readonly QuotaLimit[];
  },
  leases: LeaseSettings,
  routeSettings: { readonly settings: readonly RouteSetting[]; readonly field: string },
  address: { readonly budget: AddressBudget | null; readonly field: string },
): Plan {
  const { name, keyPrefix, limits, quotas = [] } = head;
  const { settings, field: routesField } = routeSettings;
  const { budget: ip, field: ipField } = address;
  const leaseMs = limits && leases.enabled ? Math.min(leases.maxLifetimeMs, maxLeaseMs(limits)) : 0;
  if (!limits) return { name, keyPrefix, limits, leaseMs, routes: [], ip: null };
  for (const [j, l] of (ip?.plan.limits ?? []).entries()) {
    const twin = [...limits, ...quotas, ...settings.flatMap((r) => r.limits)].find((k) => k.name === l.name);
    if (twin) {
      throw new ConfigError(
        `${ipField}.limits[${j}].name: ${JSON.stringify(l.name)} is also a limit of plan ${JSON.stringify(name)} or its routes; the headers show both, so give the address's limit another name`,
      );
    }
  }
  const routes = settings.map((r, i): Route => {
    for (const [j, l] of r.limits.entries()) {
      if ([...limits, ...quotas].some((k) => k.name === l.name)) {
        throw new ConfigError(
          `${routesField}[${i}].limits[${j}].name: ${JSON.stringify(l.name)} is also a limit of plan ${JSON.stringify(name)}; the headers show both, so give the route's limit another name`,
        );
      }
    }
    return { ...r, shown: [...limits, ...r.limits, ...quotas] };
  });
  if (quotas.length === 0) return { name, keyPrefix, limits, leaseMs, routes, ip };
  return { name, keyPrefix, limits, quotas, shown: [...limits, ...quotas], leaseMs, routes, ip };
}

/** A route as parsed, before it is joined to a plan's limits. */
type RouteSetting = Omit<Route, "shown">;

/** The shape of a route's name: it names the route in headers, logs and the admin API. */
const ROUTE_NAME = /^[a-z][a-z0-9_.-]*$/;

/** `routes = [{ name, method?, path, limits }]`: first match wins; a route an earlier one always matches first is an error. */
function parseRoutes(value: unknown, field: string, pathRequired: boolean): RouteSetting[] {
  const routes = array(value, field).map((item, i): RouteSetting => {
    const f = `${field}[${i}]`;
    const r = object(item, f);
    unknownFields(r, ["name", "method", "path", "limits"], f);
    const name = nonEmptyString(r.name, `${f}.name`);
    if (!ROUTE_NAME.test(name) || name.length > 64) {
      throw new ConfigError(
        `${f}.name: use up to 64 lower-case letters, digits, "_", "-" or ".", starting with a letter, got ${JSON.stringify(name)}`,
      );
    }
    const { method, pathPrefix } =
      r.path === undefined && !pathRequired ? { method: null, pathPrefix: null } : parseMatch(r, f);
    if (pathPrefix === null && r.method !== undefined) {
      throw new ConfigError(`${f}.path: required with a method (a route is matched on both)`);
    }
    const limits = parseLimits(r.limits, `${f}.limits`, (l) =>
      Array.isArray(r.limits) && r.limits.length === 1 ? name : `${name}-${l}`,
    );
    return { name, method, pathPrefix, limits };
  });
  for (const [i, r] of routes.entries()) {
    const twin = routes.findIndex((q, j) => j < i && q.name === r.name);
    if (twin !== -1) {
      throw new ConfigError(`${field}[${i}].name: ${JSON.stringify(r.name)} is already used by ${field}[${twin}]`);
    }
  }
  shadowed(routes, field);
  return routes;
}

/** A rule that matches requests: an optional method and a path prefix (null: a route matched by name only). */
interface Match {
  readonly method: string | null;
  readonly pathPrefix: string | null;
}

/** Fails on a rule that an earlier one always matches first (costs, routes): it could never apply. */
function shadowed(rules: readonly Match[], field: string): void {
  for (const [i, r] of rules.entries()) {
    const path = r.pathPrefix;
    if (path === null) continue;
    const earlier = rules.findIndex(
      (q, j) =>
        j < i && q.pathPrefix !== null && (q.method === null || q.method === r.method) && path.startsWith(q.pathPrefix),
    );
    if (earlier !== -1) {
      const q = rules[earlier] as Match;
      throw new ConfigError(
        `${field}[${i}]: ${r.method ?? "any method"} ${JSON.stringify(r.pathPrefix)} never applies, every such request already matches ${field}[${earlier}] (${q.method ?? "any method"} ${JSON.stringify(q.pathPrefix)}) and the first match wins; put the more specific rule first`,
      );
    }
  }
}

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

/**
 * A plan's `limits` (docs/configuration.md, "Quotas and credits"): sliding limits (with `window`) and calendar quotas
 * (with `period`, and `time_zone`), in one list; at least one of either. Names are distinct across both.
 *
 * @throws ConfigError naming `field[i]`
 */
function parsePlanLimits(value: unknown, field: string): { limits: Limit[]; quotas: QuotaLimit[] } {
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
  if (quotas.length === 0) return { limits: parseLimits(value, field), quotas: [] };
  // The sliding limits alone, their errors naming their places in the whole list.
  const limits =
    sliding.length === 0
      ? []
      : renamed(
          () =>
            parseLimits(
              sliding.map((i) => list[i]),
              field,
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
  const limit = q.limit;
  if (typeof limit !== "number" || !Number.isSafeInteger(limit) || limit < 1) {
    throw new ConfigError(`${f}.limit: expected a positive integer, got ${describe(limit)}`);
  }
  const { period, zone } = periodAndZone(q, f);
  const name = q.name === undefined ? PERIOD_NAMES[period] : limitName(q.name, `${f}.name`);
  return { name, limit, period, zone, windowMs: PERIOD_MS[period] };
}

/** A calendar `period` and its `time_zone` (default `"UTC"`), as a quota and a credits refill take them. */
function periodAndZone(t: Obj, f: string): { period: Period; zone: string } {
  const period = t.period;
  if (typeof period !== "string" || !(PERIODS as readonly string[]).includes(period)) {
    throw new ConfigError(
      `${f}.period: expected one of ${PERIODS.map((p) => `"${p}"`).join(", ")}, got ${describe(period)}`,
    );
  }
  if (t.time_zone === undefined) return { period: period as Period, zone: "UTC" };
  try {
    return { period: period as Period, zone: checkTimeZone(t.time_zone) };
  } catch (e) {
    throw new ConfigError(`${f}.time_zone: ${(e as Error).message.replace(/^time zone: /, "")}`);
  }
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

/**
 * Parses a list of limits as `RATE_LIMIT.limits` takes them (also an operator's per-key override).
 *
 * @throws ConfigError naming `field[i]`
 */
export function parseLimits(
  value: unknown,
  field: string,
  defaultName: (windowName: string) => string = (w) => w,
): Limit[] {
  const list = array(value, field);
  if (list.length === 0) throw new ConfigError(`${field}: expected at least one limit`);
  const limits = list.map((item, i): Limit => {
    const f = `${field}[${i}]`;
    const l = object(item, f);
    if (l.period !== undefined || l.time_zone !== undefined) {
      throw new ConfigError(
        `${f}.${l.period !== undefined ? "period" : "time_zone"}: calendar quotas are for a plan's limits (a plan's own, the top-level or the anonymous ones), not here`,
      );
    }
    unknownFields(l, ["limit", "window", "tick", "name"], f);
    const limit = l.limit;
    if (typeof limit !== "number" || !Number.isSafeInteger(limit) || limit < 1) {
      throw new ConfigError(`${f}.limit: expected a positive integer, got ${describe(limit)}`);
    }
    if (l.window === undefined) throw new ConfigError(`${f}.window: required, e.g. "1s" or "1m"`);
    const windowMs = wrap(() => parseDuration(l.window, `${f}.window`));
    const name =
      l.name === undefined
        ? defaultName(WINDOW_NAMES[windowMs] ?? `per-${formatDuration(windowMs)}`)
        : limitName(l.name, `${f}.name`);
    const tickMs = l.tick === undefined ? undefined : wrap(() => parseDuration(l.tick, `${f}.tick`));
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

function parseCosts(value: unknown, root: string): CostRule[] {
  const rules = optionalArray(value, `${root}.costs`).map((c, i) => parseCost(c, `${root}.costs[${i}]`));
  shadowed(rules, `${root}.costs`);
  return rules;
}

/** Characters a URL's pathname never holds unencoded (WHATWG path percent-encode set, `\`, non-ASCII). */
const NOT_IN_PATHNAME = /[^\x21-\x7e]|["#<>?`{}\\]/;

function parseCost(value: unknown, field: string): CostRule {
  const c = object(value, field);
  unknownFields(c, ["method", "path", "cost"], field);
  const { method, pathPrefix } = parseMatch(c, field);
  const cost = c.cost;
  if (typeof cost !== "number" || !Number.isSafeInteger(cost) || cost < 0) {
    throw new ConfigError(`${field}.cost: expected a whole number ≥ 0 (0 means not limited), got ${describe(cost)}`);
  }
  return { method, pathPrefix, cost };
}

/** A rule's `method` (optional) and `path` prefix, written as requests' normalised paths are (docs/configuration.md, "Paths"). */
function parseMatch(c: Obj, field: string): { method: string | null; pathPrefix: string } {
  const method = c.method === undefined ? null : nonEmptyString(c.method, `${field}.method`).toUpperCase();
  if (method !== null && !/^[A-Z]+$/.test(method)) {
    throw new ConfigError(`${field}.method: expected an HTTP method such as "POST", got ${JSON.stringify(c.method)}`);
  }
  const pathPrefix = nonEmptyString(c.path, `${field}.path`);
  if (!pathPrefix.startsWith("/")) {
    throw new ConfigError(`${field}.path: expected a path prefix starting with "/", got ${JSON.stringify(pathPrefix)}`);
  }
  if (NOT_IN_PATHNAME.test(pathPrefix)) {
    throw new ConfigError(
      `${field}.path: a request path never holds this unencoded (no query, fragment, spaces or non-ASCII; percent-encode them as in the URL), got ${JSON.stringify(pathPrefix)}`,
    );
  }
  // Rules match normalised paths: a prefix written otherwise could never match.
  let normal: string;
  try {
    // Through the URL parser first, as a request's path is (it resolves literal dot segments).
    normal = normalizePath(new URL(`http://rule.invalid${pathPrefix}`).pathname, "keep").match;
  } catch {
    normal = "";
  }
  if (normal !== pathPrefix) {
    throw new ConfigError(
      `${field}.path: requests are matched on their normalised path (docs/configuration.md, "Paths"), so write it as ${normal ? JSON.stringify(normal) : "a path without dot segments"}, got ${JSON.stringify(pathPrefix)}`,
    );
  }
  return { method, pathPrefix };
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
  let maxLength = DEFAULTS.maxKeyLength;
  if (k.max_length !== undefined) {
    const m = k.max_length;
    if (typeof m !== "number" || !Number.isSafeInteger(m) || m < 1 || m > 4096) {
      throw new ConfigError(`${root}.key.max_length: expected an integer from 1 to 4096, got ${describe(m)}`);
    }
    maxLength = m;
  }
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

/** `failure_mode` and, with `"local"`, `fallback_share` (0–1, default 1). */
function parseFailure(rl: Obj, root: string): { failureMode: FailureMode; fallbackShare: number } {
  const mode = rl.failure_mode;
  const failureMode = mode === undefined ? DEFAULTS.failureMode : mode;
  if (failureMode !== "open" && failureMode !== "closed" && failureMode !== "local") {
    throw new ConfigError(`${root}.failure_mode: expected "closed", "open" or "local", got ${describe(mode)}`);
  }
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

/** `jurisdiction`: one the runtime knows (`namespace.jurisdiction()`), or none. */
function parseJurisdiction(value: unknown, root: string): Jurisdiction | null {
  if (value === undefined) return null;
  if ((JURISDICTIONS as readonly unknown[]).includes(value)) return value as Jurisdiction;
  const known = JURISDICTIONS.map((j) => `"${j}"`).join(", ");
  throw new ConfigError(`${root}.jurisdiction: expected one of ${known}, got ${describe(value)}`);
}
