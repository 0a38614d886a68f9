/**
 * @module The Worker: config → key → plan → lease or object → headers → proxy.
 */

import { handleAdmin, isAdminRequest } from "./admin.ts";
import { type Config, ConfigError, costFor, type Limit, type Plan, parseConfig, planForKey } from "./config.ts";
import type { Decision, LimitStatus, NamedLimit } from "./core/decision.ts";
import { type Blocked, DenyCache } from "./deny-cache.ts";
import {
  errorName,
  HttpError,
  type LimitState,
  type OriginFetcher,
  problem,
  proxy,
  setRateLimitHeaders,
  tooManyRequests,
} from "./http.ts";
import { readKey } from "./key.ts";
import { type HeldLease, type KeyLeases, LeaseTable, type Unused } from "./leases.ts";
import { recordDecision } from "./telemetry.ts";

/**
 * The bindings the Worker reads: the generated `Env` (`npm run types`), with the vars as `unknown` (the dashboard and
 * `--var` deliver strings; `parseConfig` checks them). `ORIGIN_SERVICE`, when bound, carries allowed requests instead
 * of the public fetch. `ADMIN_TOKEN` (a secret) turns the admin API on; `LIMITER_ANALYTICS`, when bound, gets one
 * data point per decision.
 */
export type WorkerEnv = Omit<Env, "ORIGIN" | "RATE_LIMIT"> & {
  ORIGIN?: unknown;
  RATE_LIMIT?: unknown;
  ORIGIN_SERVICE?: Fetcher;
  ADMIN_TOKEN?: string;
  LIMITER_ANALYTICS?: AnalyticsEngineDataset;
};

let cached: { origin: unknown; rateLimit: unknown; config: Config | ConfigError } | null = null;

/** Parses the config once per isolate (again only if the vars object changes); logs an error once. */
export function configFor(env: WorkerEnv): Config | ConfigError {
  if (cached && cached.origin === env.ORIGIN && cached.rateLimit === env.RATE_LIMIT) return cached.config;
  let config: Config | ConfigError;
  try {
    config = parseConfig(env);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    config = e;
    console.error(JSON.stringify({ event: "config_error", message: e.message }));
  }
  cached = { origin: env.ORIGIN, rateLimit: env.RATE_LIMIT, config };
  return config;
}

const denyCache = new DenyCache();
const leases = new LeaseTable();

/** The isolate's deny cache (exposed for tests and measurements). */
export function isolateDenyCache(): DenyCache {
  return denyCache;
}

/** The isolate's lease table (exposed for tests and measurements). */
export function isolateLeases(): LeaseTable {
  return leases;
}

/** Why a request was let through or refused; in logs and analytics. */
export type Reason =
  | "granted"
  | "leased"
  | "over_limit"
  | "blocked"
  | "cached_denial"
  | "too_costly"
  | "limiter_timeout"
  | "limiter_error"
  | "shadow";

/** One decision, as the Worker made it. */
export interface DecisionEvent {
  /** The object's name: `key:<key>` or `ip:<address>`. */
  readonly name: string;
  readonly plan: string;
  readonly cost: number;
  readonly reason: Reason;
  /** Whether the request goes on to the origin. */
  readonly allowed: boolean;
  /** When it was decided (ms): the object's clock when the object decided, else this isolate's. */
  readonly at: number;
  /** The object's answer, when this request asked the object (null: a lease, the deny cache, a failure). */
  readonly result: Decision | null;
  /** When refused: the exact wait in ms (`Infinity`: never); 0 when allowed. */
  readonly retryAfterMs: number;
  /** When refused: the names of the limits that refused it (none for a block). */
  readonly violated: readonly string[];
}

/** Observers of the Worker's work, and the runtime's `waitUntil` for work after the response. */
export interface Hooks {
  /** Called with every decision, before the response is built. */
  onDecision?(event: DecisionEvent): void;
  /** Keeps background work (lease refills, returns) alive after the response; without it the work still runs. */
  waitUntil?(promise: Promise<unknown>): void;
}

/** Handles one request end to end; never throws, never returns a stack trace. */
export async function handle(request: Request, env: WorkerEnv, hooks: Hooks = {}): Promise<Response> {
  const config = configFor(env);
  if (config instanceof ConfigError) {
    return problem(500, "Rate limiter misconfigured", config.message);
  }
  try {
    if (isAdminRequest(request, env, config)) {
      return await handleAdmin(request, env, config, {
        forget: (name) => forgetLocally(env, config, name, hooks),
      });
    }
    return await limitAndProxy(request, env, config, hooks);
  } catch (e) {
    if (e instanceof HttpError) return e.toResponse();
    console.error(JSON.stringify({ event: "internal_error", message: errorName(e) }));
    return problem(500, "Internal Server Error", "The rate limiter failed unexpectedly.");
  }
}

/** What the limiter said about one request. */
interface Verdict {
  readonly reason: Reason;
  readonly allowed: boolean;
  /** Per limit, for the RateLimit field (null: not known). */
  readonly states: readonly (LimitState | null)[];
  /** When refused: the exact wait, `Infinity` for never. */
  readonly retryAfterMs: number;
  /** When refused: the limits that refused it. */
  readonly violated: readonly boolean[];
  readonly result: Decision | null;
  /** When it was decided: the object's clock for its own decisions, this isolate's otherwise. */
  readonly at: number;
  /** The limits applied when an operator's override replaced the plan's (null: the plan's). */
  readonly applied?: readonly NamedLimit[] | null;
}

async function limitAndProxy(request: Request, env: WorkerEnv, config: Config, hooks: Hooks): Promise<Response> {
  const send: OriginFetcher = env.ORIGIN_SERVICE ? (r) => (env.ORIGIN_SERVICE as Fetcher).fetch(r) : (r) => fetch(r);
  const url = new URL(request.url);
  const cost = costFor(config, request.method, url.pathname);
  if (cost === 0) return proxy(request, config, send, url);

  const key = readKey(request, config.key);
  let plan: Plan | null;
  let name: string;
  if (key === null) {
    if (!config.anonymous) throw unauthorized(config, "This API needs an API key.");
    plan = config.anonymous;
    name = `ip:${request.headers.get("cf-connecting-ip") ?? "unknown"}`;
  } else {
    if (config.key.pattern && !config.key.pattern.test(key)) throw unauthorized(config, "This API key is not valid.");
    plan = planForKey(config, key);
    if (!plan) throw unauthorized(config, "This API key matches no plan.");
    name = `key:${key}`;
  }
  const limits = plan.limits;
  if (!limits) return proxy(request, config, send, url);

  let verdict: Verdict;
  // Every limit is at least 1, so only a cost above 1 can exceed one.
  if (cost > 1 && limits.some((l) => cost > l.limit)) {
    verdict = refused(
      "too_costly",
      [],
      limits.map((l) => cost > l.limit),
      Number.POSITIVE_INFINITY,
      null,
      Date.now(),
    );
  } else {
    verdict = await decide(env, config, plan, name, cost, hooks);
  }
  // Headers, names and 429s follow the limits the object applied: an override's, else the plan's.
  const shown = verdict.applied ? withLimits(plan, verdict.applied) : plan;
  const violated = verdict.allowed ? [] : (shown.limits ?? []).filter((_, i) => verdict.violated[i]).map((l) => l.name);
  const event: DecisionEvent = {
    name,
    plan: plan.name,
    cost,
    reason: verdict.reason,
    allowed: verdict.allowed,
    at: verdict.at,
    result: verdict.result,
    retryAfterMs: verdict.allowed ? 0 : verdict.retryAfterMs,
    violated,
  };
  hooks.onDecision?.(event);
  await recordDecision(env, event);
  if (verdict.reason === "limiter_timeout" || verdict.reason === "limiter_error") {
    if (config.failureMode === "open") return proxy(request, config, send, url);
    return problem(
      503,
      "Service Unavailable",
      "The rate limiter is unavailable; retry shortly.",
      {},
      { "Retry-After": "1" },
    );
  }
  if (!verdict.allowed) {
    if (!config.shadow) {
      const detail =
        verdict.reason === "blocked"
          ? `This API key is blocked by an operator; retry after ${Math.ceil(verdict.retryAfterMs / 1000)} s.`
          : undefined;
      return tooManyRequests(shown, verdict.states, violated, verdict.retryAfterMs, detail);
    }
    console.log(
      JSON.stringify({
        event: "shadow_deny",
        reason: verdict.reason,
        plan: plan.name,
        key: redact(name),
        cost,
        violated,
        retry_after_ms: verdict.retryAfterMs,
      }),
    );
  }
  const response = await proxy(request, config, send, url);
  setRateLimitHeaders(response.headers, shown, verdict.states);
  return response;
}

const views = new Map<string, Plan>();

/** The plan with an operator's override limits in place of its own (cached: header strings are built once per plan). */
function withLimits(plan: Plan, limits: readonly NamedLimit[]): Plan {
  const id = `${plan.name}\u0000${JSON.stringify(limits)}`;
  let view = views.get(id);
  if (!view) {
    if (views.size >= 1000) views.clear();
    view = { ...plan, limits: limits as Limit[] };
    views.set(id, view);
  }
  return view;
}

function refused(
  reason: Reason,
  states: readonly (LimitState | null)[],
  violated: readonly boolean[],
  retryAfterMs: number,
  result: Decision | null,
  at: number,
): Verdict {
  return { reason, allowed: false, states, retryAfterMs, violated, result, at };
}

/**
 * The limiter's verdict on one request: from a lease this isolate holds, from the deny cache, or
 * from the key's object (which may grant a lease with it). Never throws: a failed or late object
 * call is a `limiter_timeout` or `limiter_error` verdict.
 */
async function decide(
  env: WorkerEnv,
  config: Config,
  plan: Plan,
  name: string,
  cost: number,
  hooks: Hooks,
): Promise<Verdict> {
  const limits = plan.limits ?? [];
  const unused: Unused[] = [];
  const leasing = plan.leaseMs > 0;
  let now = Date.now();
  const entry = leasing ? leases.touch(name, limits, now, unused) : undefined;
  try {
    // While this key's one lease call is out, wait for it — on this request's own timer: a request
    // must never await a promise another request made (workerd cancels such continuations when
    // that request ends) — for at most two recent round trips, then ask for itself.
    const waitDeadline = now + 2 * Math.max(leases.rttMs, WAIT_FLOOR_MS);
    for (;;) {
      if (entry) {
        const held = leases.spend(entry, cost, now, unused);
        if (held) {
          refill(env, config, plan, name, entry, now, hooks);
          return leased(held, now);
        }
      }
      if (!config.shadow) {
        const blocked = denyCache.get(name, now);
        const retryAt = blocked && (cost === 1 ? blocked.until : blocked.retryAt.get(cost));
        if (blocked && retryAt !== undefined) return cachedDenial(blocked, retryAt, now);
      }
      if (entry && inFlight(entry, now, config) && now < waitDeadline) {
        await new Promise((resolve) => setTimeout(resolve, 1));
        now = Date.now();
        continue;
      }
      break;
    }
    // With a call still in flight after the rounds above, this one asks for itself only.
    const want =
      entry && !inFlight(entry, now, config) ? leases.want(entry, plan.leaseMs, config.leases.maxUnits, now) : 0;
    const sentAt = now;
    const call = ask(env, config, name, limits, { cost, leaseUnits: want, leaseMs: want > 0 ? plan.leaseMs : 0 });
    if (entry && want > 0) settle(entry, call, sentAt, shortestWindow(limits));
    let result: Decision;
    try {
      result = await call;
    } catch (e) {
      return limiterFailed(config, e, Date.now());
    }
    remember(name, result, cost, sentAt);
    observe(name, result, unused);
    const applied = result.limitsOverride ?? null;
    if (!result.allowed && result.blockedBy === undefined && entry) {
      // Units this isolate was leased while the call was out count as used at the object: spend them.
      now = Date.now();
      const held = leases.spend(entry, cost, now, unused);
      if (held) return leased(held, now);
    }
    if (!result.allowed) {
      const violated = result.limits.map((l) => l.exceeded);
      const reason = result.blockedBy !== undefined ? "blocked" : "over_limit";
      return { ...refused(reason, result.limits, violated, result.retryAfterMs, result, result.now), applied };
    }
    return {
      reason: "granted",
      allowed: true,
      states: result.limits.map((l) => withLease(l, result.lease?.units ?? 0)),
      retryAfterMs: 0,
      violated: [],
      result,
      at: result.now,
      applied,
    };
  } finally {
    giveBack(env, config, unused, hooks);
  }
}

function shortestWindow(limits: readonly Limit[]): number {
  return Math.min(...limits.map((l) => l.windowMs));
}

/** The least a request waits for its key's lease call in flight (ms), however fast recent calls were. */
const WAIT_FLOOR_MS = 5;

/** Marks the key's lease call as out, and ties it to the entry: keeps the lease, then clears the mark. */
function settle(entry: KeyLeases, call: Promise<Decision>, sentAt: number, quietMs: number): Promise<void> {
  entry.inflightSince = sentAt;
  const done = () => {
    if (entry.inflightSince === sentAt) entry.inflightSince = null;
  };
  return call.then((d) => {
    if (d.lease) leases.add(entry, d.lease, sentAt, d.limits, d.limitsOverride ?? null);
    // No lease (the key is near or at its limit): ask for none for a while, so that requests
    // neither wait on lease calls nor make them while the object decides per request.
    else entry.quietUntil = sentAt + quietMs;
    done();
  }, done);
}

/**
 * Whether the key's lease call is still out. A mark older than the object deadline is cleared: the
 * request that made the call may have been cancelled before its answer could clear it.
 */
function inFlight(entry: KeyLeases, now: number, config: Config): boolean {
  if (entry.inflightSince !== null && now - entry.inflightSince >= config.objectTimeoutMs) entry.inflightSince = null;
  return entry.inflightSince !== null;
}

/** Asks for the next lease in the background when the held ones run low (off the request's path). */
function refill(
  env: WorkerEnv,
  config: Config,
  plan: Plan,
  name: string,
  entry: KeyLeases,
  now: number,
  hooks: Hooks,
): void {
  const want = leases.want(entry, plan.leaseMs, config.leases.maxUnits, now);
  if (inFlight(entry, now, config) || !leases.needsRefill(entry, now, want)) return;
  const call = ask(env, config, name, plan.limits ?? [], { cost: 0, leaseUnits: want, leaseMs: plan.leaseMs });
  const settled = settle(entry, call, now, shortestWindow(plan.limits ?? []));
  call.then(
    (d) => {
      remember(name, d, 1, now, true);
      const unused: Unused[] = [];
      observe(name, d, unused);
      giveBack(env, config, unused, hooks);
    },
    (e) => console.error(JSON.stringify({ event: "lease_refill_failed", key: redact(name), message: errorName(e) })),
  );
  background(hooks, settled);
}

/**
 * Acts on an operator's change seen in the object's answer: a block drops the key's leases here, and
 * leases granted under other limits than the ones now applied (an override came or went) are
 * dropped. Their unused units go into `unused`, to be given back. Other isolates do the same when
 * they next ask the object; until then they spend what they hold, at most one lease lifetime
 * (≤ 1/32 of the shortest window), and those units were counted when leased.
 */
function observe(name: string, d: Decision, unused: Unused[]): void {
  if (d.blockedBy !== undefined) leases.drop(name, unused);
  else leases.dropOthers(name, d.limitsOverride ?? null, unused);
}

/**
 * After an operator's change made here: forgets this isolate's leases (giving their unused units
 * back) and cached denial for the key, so its next request asks the object.
 */
export function forgetLocally(env: WorkerEnv, config: Config, name: string, hooks: Hooks): void {
  denyCache.delete(name);
  const unused: Unused[] = [];
  leases.drop(name, unused);
  giveBack(env, config, unused, hooks);
}

/** Gives unused units back to their keys' objects, in the background. */
function giveBack(env: WorkerEnv, config: Config, unused: readonly Unused[], hooks: Hooks): void {
  for (const u of unused) {
    const call = withDeadline(
      env.LIMITER.getByName(u.name).giveBack(u.limits, u.recordedAt, u.units),
      config.objectTimeoutMs,
    ).catch((e: unknown) => {
      console.error(JSON.stringify({ event: "lease_return_failed", key: redact(u.name), message: errorName(e) }));
    });
    background(hooks, call);
  }
}

function background(hooks: Hooks, promise: Promise<unknown>): void {
  hooks.waitUntil?.(promise);
}

function leased(held: HeldLease, now: number): Verdict {
  return {
    reason: "leased",
    allowed: true,
    states: leaseStates(held, now),
    retryAfterMs: 0,
    violated: [],
    result: null,
    at: now,
    applied: held.applied,
  };
}

/** A request served from a lease: the object's view at the grant, plus what the lease still holds. */
function leaseStates(held: HeldLease, now: number): LimitState[] {
  const elapsed = now - held.sentAt;
  return held.limits.map((l) => ({
    remaining: l.remaining + held.left,
    resetMs: Math.max(0, l.resetMs - elapsed),
  }));
}

function withLease(l: LimitStatus, units: number): LimitState {
  return units === 0 ? l : { remaining: l.remaining + units, resetMs: l.resetMs };
}

/** The object's call was late or failed: a verdict for the failure mode. */
function limiterFailed(config: Config, e: unknown, at: number): Verdict {
  const timeout = e instanceof LimiterTimeout;
  const overloaded = (e as { overloaded?: boolean })?.overloaded === true;
  console.error(
    JSON.stringify({
      event: "limiter_unavailable",
      reason: timeout ? "limiter_timeout" : "limiter_error",
      failure_mode: config.failureMode,
      overloaded,
      message: errorName(e),
    }),
  );
  const reason: Reason = timeout ? "limiter_timeout" : "limiter_error";
  return {
    reason,
    allowed: config.failureMode === "open",
    states: [],
    retryAfterMs: 0,
    violated: [],
    result: null,
    at,
  };
}

/** The object call took longer than `object_timeout`. */
export class LimiterTimeout extends Error {
  override readonly name = "LimiterTimeout";
}

/** Resolves or rejects as `promise` does, or rejects with {@link LimiterTimeout} after `ms`. */
function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | null = null;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new LimiterTimeout(`the limiter did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => {
    if (timer !== null) clearTimeout(timer);
  });
}

/**
 * One RPC to the key's object, under the deadline; one retry with a fresh stub only for a
 * retryable, non-overload error. Stubs are not cached across requests: workerd binds a stub to
 * the request that made it.
 */
function ask(
  env: WorkerEnv,
  config: Config,
  name: string,
  limits: readonly Limit[],
  a: { cost: number; leaseUnits: number; leaseMs: number },
): Promise<Decision> {
  const start = Date.now();
  const once = () =>
    (env.LIMITER.getByName(name).take(limits, a) as Promise<Decision>).then((d) => {
      leases.observeRtt(Date.now() - start);
      return d;
    });
  const call = once().catch((e: unknown) => {
    if (!isRetryable(e)) throw e;
    console.warn(JSON.stringify({ event: "limiter_retry", key: redact(name), message: errorName(e) }));
    return once();
  });
  return withDeadline(call, config.objectTimeoutMs);
}

/** A Durable Object error worth one retry: the runtime says `retryable`, and it is not an overload. */
export function isRetryable(e: unknown): boolean {
  const err = e as { retryable?: unknown; overloaded?: unknown } | null;
  return err?.retryable === true && err.overloaded !== true;
}

/**
 * How long a cached denial is trusted before the object is asked again (ms): only time frees
 * capacity, except an operator's reset, unblock or override, which every isolate then sees within
 * this long. A flood costs the object one call per key, isolate and interval.
 */
export const DENY_RECHECK_MS = 1000;

/**
 * Stores what the object said about the key being blocked, in local time. A lease-only answer
 * (`leaseOnly`) never clears an entry: it was not a request's decision.
 */
function remember(name: string, result: Decision, cost: number, sentAt: number, leaseOnly = false): void {
  const blockedForMs = result.blockedUntil - result.now;
  if (blockedForMs <= 0) {
    if (!leaseOnly) denyCache.delete(name);
    return;
  }
  // The object decided after `sentAt`, so sentAt + its durations never runs past its own times.
  const entry: Blocked = denyCache.get(name, sentAt) ?? {
    until: sentAt + blockedForMs,
    freeAt: result.limits.map((l) => (l.remaining === 0 ? sentAt + l.resetMs : 0)),
    retryAt: new Map(),
    recheckAt: sentAt + DENY_RECHECK_MS,
    blockedBy: result.blockedBy === undefined ? undefined : sentAt + (result.blockedBy - result.now),
    applied: result.limitsOverride ?? null,
  };
  if (!result.allowed && cost !== 1 && !result.neverAllowed) entry.retryAt.set(cost, sentAt + result.retryAfterMs);
  denyCache.set(name, entry, sentAt);
}

function cachedDenial(blocked: Blocked, retryAt: number, now: number): Verdict {
  const states = blocked.freeAt.map((at) => (at > now ? { remaining: 0, resetMs: at - now } : null));
  const isBlock = blocked.blockedBy !== undefined && now < blocked.blockedBy;
  // A block refuses whatever the limits say: no limit is what refused it.
  const violated = blocked.freeAt.map((at) => !isBlock && at > now);
  const reason: Reason = isBlock ? "blocked" : "cached_denial";
  return { ...refused(reason, states, violated, retryAt - now, null, now), applied: blocked.applied ?? null };
}

function unauthorized(config: Config, detail: string): HttpError {
  const headers: Record<string, string> = config.key.bearer ? { "WWW-Authenticate": 'Bearer realm="api"' } : {};
  return new HttpError(401, "Unauthorized", detail, { headers });
}

/** Keys are secrets: logs show a short prefix only. */
function redact(name: string): string {
  return name.length > 12 ? `${name.slice(0, 10)}…` : name;
}
