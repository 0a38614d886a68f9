/**
 * @module Parses a limiter's plans: the default plan (the top-level `limits`), `plans` chosen by key prefix, the
 * `anonymous` plan and per-address budgets; each plan joined to its routes, per-address budget and the settings it
 * inherits.
 */

import { maxLeaseMs } from "../core/limits.ts";
import type { UsageSpec } from "../core/usage.ts";
import { parseAccount } from "./accounts.ts";
import {
  type Inheritable,
  nonEmptyString,
  type Obj,
  object,
  optionalArray,
  optionalBoolean,
  ownOrInherited,
  unknownFields,
} from "./fields.ts";
import { CREDITS, type Inherited, PENALTY, parseConcurrency, USAGE } from "./inherited.ts";
import { parseLimits, parsePlanLimits } from "./limits.ts";
import type { RouteSetting } from "./rules.ts";
import { parseRoutes } from "./rules.ts";
import {
  type AddressBudget,
  ConfigError,
  type CreditsSetting,
  KEY_CHARS,
  type LeaseSettings,
  type Limit,
  type Plan,
  type QuotaLimit,
  type Route,
  type SignedMode,
} from "./types.ts";

/** What every plan of a limiter is parsed with: the limiter's own settings that plans inherit or are checked against. */
export interface PlanContext {
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

/** `ip`: a per-address budget whose objects are named by `kind` (`addr`, `addr.<plan>`). */
export function addressSetting(kind: string, leases: LeaseSettings): Inheritable<AddressBudget> {
  return {
    key: "ip",
    none: "no per-address limits",
    unlimited: "never consult the limiter",
    parse: (value, field) => parseAddressBudget(value, field, kind, leases),
  };
}

/** The default plan: the top-level `limits` with what every plan inherits; null without them. */
export function parseDefaultPlan(rl: Obj, ctx: PlanContext, inherited: Inherited): Plan | null {
  const { root } = ctx;
  if (rl.limits === undefined) return null;
  const plan = makePlan(
    { name: "default", keyPrefix: "", ...parsePlanLimits(rl.limits, `${root}.limits`) },
    ctx.leases,
    { settings: ctx.routes, field: `${root}.routes` },
    { budget: ctx.ip, field: `${root}.ip` },
  );
  const { penalty, concurrency, credits, usage } = inherited;
  return withMeterSettings({ ...plan, penalty, concurrency }, credits, usage);
}

/**
 * `plan` with its credits and usage (null: none) added to the meters its keys' calls carry to their object (its
 * quotas already there). A plan with credits or usage gets no leases: units leased to an isolate that vanished were
 * never used, yet would stay spent (credits) or billed (usage), and a lease's uses far below the limits are not
 * reported one by one.
 */
function withMeterSettings(plan: Plan, credits: CreditsSetting | null, usage: UsageSpec | null): Plan {
  if (credits === null && usage === null) return plan;
  return {
    ...plan,
    meters: { ...plan.meters, ...(credits ? { credits: credits.spec } : {}), ...(usage ? { usage } : {}) },
    ...(credits ? { creditStatus: credits.status } : {}),
    leaseMs: 0,
  };
}

/** `plans = [...]`: each plan with its penalty and concurrency; names unique, no prefix hidden by an earlier one. */
export function parsePlans(rl: Obj, ctx: PlanContext, inherited: Inherited): Plan[] {
  const { root } = ctx;
  const plans = optionalArray(rl.plans, `${root}.plans`).map((p, i) => {
    const field = `${root}.plans[${i}]`;
    const plan = parsePlan(p, field, ctx);
    const raw = p as Obj;
    const unlimited = plan.limits === null;
    const penalty = ownOrInherited(raw, field, PENALTY, { inherited: inherited.penalty, unlimited });
    const credits = ownOrInherited(raw, field, CREDITS, { inherited: inherited.credits, unlimited });
    const usage = ownOrInherited(raw, field, USAGE, { inherited: inherited.usage, unlimited });
    const concurrency = unlimited ? null : parseConcurrency(raw, field, inherited.concurrency, true);
    const signed = parseSigned(raw.signed, `${field}.signed`);
    const metered = withMeterSettings({ ...plan, penalty, concurrency, ...(signed ? { signed } : {}) }, credits, usage);
    const account = parseAccount(raw, field, metered, ctx.leases);
    return account ? { ...metered, account } : metered;
  });
  const names = new Set<string>();
  for (const [i, p] of plans.entries()) {
    if (names.has(p.name)) throw new ConfigError(`${root}.plans[${i}].name: ${JSON.stringify(p.name)} is used twice`);
    names.add(p.name);
    const earlier = plans.findIndex((q, j) => j < i && p.keyPrefix.startsWith(q.keyPrefix));
    if (earlier !== -1) {
      throw new ConfigError(
        `${root}.plans[${i}].key_prefix: ${JSON.stringify(p.keyPrefix)} can never match, every such key already matches ${root}.plans[${earlier}] (key_prefix ${JSON.stringify((plans[earlier] as Plan).keyPrefix)}) and the first match wins; put the longer prefix first`,
      );
    }
  }
  return plans;
}

/** `anonymous = { limits, routes? }`: the limits of requests without a key, per client address; null without. */
export function parseAnonymous(rl: Obj, ctx: PlanContext, inherited: Inherited): Plan | null {
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
  // Its keys are addresses: no credits or usage.
  return { ...anonymous, penalty: inherited.penalty, concurrency: inherited.concurrency };
}

/** Top-level routes that no plan takes would silently do nothing: an error. */
export function checkRoutesTaken(rl: Obj, ctx: PlanContext, hasDefault: boolean, hasAnonymous: boolean): void {
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
 * `ip = { limits = [...] }`: limits every request must also fit, counted per client address. Its limits are named
 * `ip-per-minute` etc. by default, apart from the keys' limits in the headers.
 */
function parseAddressBudget(value: unknown, field: string, kind: string, leases: LeaseSettings): AddressBudget {
  const t = object(value, field);
  unknownFields(t, ["limits"], field);
  const limits = parseLimits(t.limits, `${field}.limits`, { defaultName: (w) => `ip-${w}` });
  return { kind, plan: limitsPlan("ip", limits, leases, field) };
}

/** A plan of limits alone (no routes, no per-address budget): an address's budget, the preflights'. */
export function limitsPlan(name: string, limits: Limit[], leases: LeaseSettings, field: string): Plan {
  return makePlan(
    { name, keyPrefix: "", limits },
    leases,
    { settings: [], field: `${field}.routes` },
    { budget: null, field },
  );
}

function parsePlan(value: unknown, field: string, ctx: PlanContext): Plan {
  const { root, maxKeyLength, leases, routes, routePaths } = ctx;
  const p = object(value, field);
  unknownFields(p, PLAN_FIELDS, field);
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
  const address = addressSetting(`addr.${name}`, leases);
  if (unlimited) {
    // Refuses an unlimited plan's own ip.
    ownOrInherited(p, field, address, { inherited: null, unlimited });
    return { name, keyPrefix, limits: null, leaseMs: 0, routes: [], ip: null };
  }
  const own = p.routes === undefined ? null : parseRoutes(p.routes, `${field}.routes`, routePaths);
  const { limits, quotas } = parsePlanLimits(p.limits, `${field}.limits`);
  const ip = ownOrInherited(p, field, address, { inherited: ctx.ip, unlimited });
  return makePlan(
    { name, keyPrefix, limits, quotas },
    leases,
    { settings: own ?? routes, field: own ? `${field}.routes` : `${root}.routes` },
    // With `ip = false` there is no budget, so no field to name.
    { budget: ip, field: p.ip === undefined ? `${root}.ip` : `${field}.ip` },
  );
}

/** The settings of a plan in `plans`. */
const PLAN_FIELDS = [
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
  "account",
  "signed",
] as const;

/** `signed = true | false | "optional"` (docs/configuration.md, "Signed keys"); null: not signed. */
function parseSigned(value: unknown, field: string): SignedMode | null {
  if (value === undefined || value === false) return null;
  if (value === true) return "required";
  if (value === "optional") return "optional";
  throw new ConfigError(
    `${field}: expected true (keys must be minted), "optional" (minted keys checked, others still pass) or false, got ${JSON.stringify(value)}`,
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
  return { name, keyPrefix, limits, shown: [...limits, ...quotas], meters: { quotas }, leaseMs, routes, ip };
}
