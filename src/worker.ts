/**
 * @module The Worker: config → key → plan → object → headers → proxy.
 */

import { type Config, ConfigError, costFor, type Plan, parseConfig, planForKey } from "./config.ts";
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
import { type DecisionResult, decodeDecision, type WireDecision, type WireLimits } from "./wire.ts";

/**
 * The bindings the Worker reads: the generated `Env` (`npm run types`), with the vars as `unknown` (the dashboard and
 * `--var` deliver strings; `parseConfig` checks them). `ORIGIN_SERVICE`, when bound, carries allowed requests instead
 * of the public fetch.
 */
export type WorkerEnv = Omit<Env, "ORIGIN" | "RATE_LIMIT"> & {
  ORIGIN?: unknown;
  RATE_LIMIT?: unknown;
  ORIGIN_SERVICE?: Fetcher;
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

/** The isolate's deny cache (exposed for tests and measurements). */
export function isolateDenyCache(): DenyCache {
  return denyCache;
}

/** One decision of the object, as the Worker saw it. */
export interface DecisionEvent {
  /** The object's name: `key:<key>` or `ip:<address>`. */
  readonly name: string;
  readonly plan: string;
  readonly cost: number;
  readonly result: DecisionResult;
}

/** Observers of the Worker's work (for logging, analytics and tests). */
export interface Hooks {
  /** Called with every decision the object returned, before the response is built. */
  onDecision?(event: DecisionEvent): void;
}

/** Handles one request end to end; never throws, never returns a stack trace. */
export async function handle(request: Request, env: WorkerEnv, hooks: Hooks = {}): Promise<Response> {
  const config = configFor(env);
  if (config instanceof ConfigError) {
    return problem(500, "Rate limiter misconfigured", config.message);
  }
  try {
    return await limitAndProxy(request, env, config, hooks);
  } catch (e) {
    if (e instanceof HttpError) return e.toResponse();
    console.error(JSON.stringify({ event: "internal_error", message: errorName(e) }));
    return problem(500, "Internal Server Error", "The rate limiter failed unexpectedly.");
  }
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

  // Every limit is at least 1, so only a cost above 1 can exceed one.
  if (cost > 1 && !config.shadow) {
    const tooCostly = limits.filter((l) => cost > l.limit).map((l) => l.name);
    if (tooCostly.length > 0) return tooManyRequests(plan, [], tooCostly, Number.POSITIVE_INFINITY);
  }

  const now = Date.now();
  if (!config.shadow) {
    const blocked = denyCache.get(name, now);
    const retryAt = blocked && (cost === 1 ? blocked.until : blocked.retryAt.get(cost));
    if (blocked && retryAt !== undefined) return cachedDenial(plan, blocked, retryAt, now);
  }

  let result: DecisionResult;
  try {
    result = decodeDecision(await decide(env, name, plan.wire, cost));
  } catch (e) {
    return limiterFailed(request, config, send, url, e);
  }
  remember(name, result, cost, now);
  hooks.onDecision?.({ name, plan: plan.name, cost, result });

  const states: LimitState[] = result.limits;
  if (!result.allowed) {
    const violated = limits.filter((_, i) => result.limits[i]?.exceeded).map((l) => l.name);
    if (!config.shadow) return tooManyRequests(plan, states, violated, result.retryAfterMs);
    console.log(
      JSON.stringify({
        event: "shadow_deny",
        plan: plan.name,
        key: redact(name),
        cost,
        violated,
        retry_after_ms: result.retryAfterMs,
      }),
    );
  }
  const response = await proxy(request, config, send, url);
  setRateLimitHeaders(response.headers, plan, states);
  return response;
}

/**
 * One RPC to the key's object; one retry with a fresh stub only for a retryable, non-overload error.
 * Stubs are not cached across requests: workerd binds a stub to the request that made it.
 */
async function decide(env: WorkerEnv, name: string, limits: WireLimits, cost: number): Promise<WireDecision> {
  try {
    return await env.LIMITER.getByName(name).decide(limits, cost);
  } catch (e) {
    const err = e as { retryable?: boolean; overloaded?: boolean };
    if (err?.retryable !== true || err.overloaded === true) throw e;
    return await env.LIMITER.getByName(name).decide(limits, cost);
  }
}

/** Stores what the object said about the key being blocked, in local time. */
function remember(name: string, result: DecisionResult, cost: number, sentAt: number): void {
  if (result.blockedForMs <= 0) {
    denyCache.delete(name);
    return;
  }
  // The object decided after `sentAt`, so sentAt + its durations never runs past its own times.
  const entry: Blocked = denyCache.get(name, sentAt) ?? {
    until: sentAt + result.blockedForMs,
    freeAt: result.limits.map((l) => (l.remaining === 0 ? sentAt + l.resetMs : 0)),
    retryAt: new Map(),
  };
  if (!result.allowed && cost !== 1 && !result.neverAllowed) entry.retryAt.set(cost, sentAt + result.retryAfterMs);
  denyCache.set(name, entry, sentAt);
}

function cachedDenial(plan: Plan, blocked: Blocked, retryAt: number, now: number): Response {
  const limits = plan.limits ?? [];
  const states = blocked.freeAt.map((at) => (at > now ? { remaining: 0, resetMs: at - now } : null));
  const violated = limits.filter((_, i) => (blocked.freeAt[i] ?? 0) > now).map((l) => l.name);
  return tooManyRequests(plan, states, violated, retryAt - now);
}

async function limiterFailed(
  request: Request,
  config: Config,
  send: OriginFetcher,
  url: URL,
  e: unknown,
): Promise<Response> {
  const overloaded = (e as { overloaded?: boolean })?.overloaded === true;
  console.error(
    JSON.stringify({
      event: "limiter_unavailable",
      failure_mode: config.failureMode,
      overloaded,
      message: errorName(e),
    }),
  );
  if (config.failureMode === "open") return proxy(request, config, send, url);
  return problem(
    503,
    "Service Unavailable",
    "The rate limiter is unavailable; retry shortly.",
    {},
    { "Retry-After": "1" },
  );
}

function unauthorized(config: Config, detail: string): HttpError {
  const headers: Record<string, string> = config.key.bearer ? { "WWW-Authenticate": 'Bearer realm="api"' } : {};
  return new HttpError(401, "Unauthorized", detail, { headers });
}

/** Keys are secrets: logs show a short prefix only. */
function redact(name: string): string {
  return name.length > 12 ? `${name.slice(0, 10)}…` : name;
}
