/**
 * @module The library (package export `.`): `createLimiter` for any Worker — `limit()`, `peek()`,
 * `refund()`, `reset()` — and the `RateLimiter` Durable Object class to bind in wrangler.toml.
 *
 * ```ts
 * import { createLimiter, RateLimiter } from "strict-edge-rate-limiter";
 * export { RateLimiter };
 * const limiter = createLimiter({ limits: [{ limit: 10, window: "1m" }] });
 * // in fetch(request, env, ctx):
 * const r = await limiter.limit(env, key, { ctx });
 * if (!r.allowed) return new Response("Too Many Requests", { status: 429, headers: r.headers });
 * ```
 */

import type { HeaderForm } from "./client/headers.ts";
import { type Background, LimiterClient, type LimiterNamespace } from "./client/index.ts";
import { callObject } from "./client/policy.ts";
import type { RateLimitResult } from "./client/result.ts";
import { ConfigError, type LimiterConfig, type Plan, parseLimiterConfig, type Route, routeBudget } from "./config.ts";
import type { Duration } from "./core/duration.ts";
import { checkKey, type Identity, identify } from "./key.ts";

export type { HeaderForm } from "./client/headers.ts";
export type { Background, LimiterNamespace } from "./client/index.ts";
export { type LimitResult, type RateLimitResult, type Reason, violated } from "./client/result.ts";
export { ConfigError, type LimiterConfig } from "./config.ts";
export type { Duration } from "./core/duration.ts";
export { HttpError, refusal } from "./http.ts";
export type { Identity } from "./key.ts";
export { RateLimiter } from "./object/index.ts";

/** One limit: at most `limit` cost units in any window of `window`. */
export interface LimitSetting {
  readonly limit: number;
  readonly window: Duration;
  /** Records are rounded up to this (default: 1 ms where the ring fits, else a small fraction of the window). */
  readonly tick?: Duration;
  /** The name in `RateLimit-Policy` (default `per-second`, `per-minute`, … or `per-<window>`). */
  readonly name?: string;
}

/** A plan chosen by key prefix: its own limits (and routes, in place of the top-level ones), or none (`unlimited`). */
export interface PlanSetting {
  readonly name: string;
  readonly key_prefix: string;
  readonly limits?: readonly LimitSetting[];
  readonly routes?: readonly RouteSetting[];
  readonly unlimited?: boolean;
}

/** A route with its own budget per key: requests of it must fit these limits as well as the key's. */
export interface RouteSetting {
  /** Lower-case letters, digits, `_`, `-`, `.`; names the route's limits in the headers by default. */
  readonly name: string;
  /** Matched by the hono middleware (optional here: `limit(…, { route: name })` needs none). */
  readonly method?: string;
  readonly path?: string;
  readonly limits: readonly LimitSetting[];
}

/**
 * A limiter's settings: the shape of the proxy's `RATE_LIMIT` (README, "Configuration reference")
 * without its proxy-only settings (`origin_timeout`, `admin`, `refund`).
 */
export interface LimiterSettings {
  /** The limits of keys that match no plan; a request must fit every one. */
  readonly limits?: readonly LimitSetting[];
  readonly plans?: readonly PlanSetting[];
  /** Limits for requests without a key, per client IP (the hono middleware only). */
  readonly anonymous?: { readonly limits: readonly LimitSetting[] };
  /**
   * Routes with their own budget per key (README, "Per-route budgets"): `limit(…, { route })` names
   * one; the hono middleware matches `method` and `path` when it is given no `route`.
   */
  readonly routes?: readonly RouteSetting[];
  /** What a request costs by method and path prefix (the hono middleware, when it is given no `cost`). */
  readonly costs?: readonly { readonly method?: string; readonly path: string; readonly cost: number }[];
  /** Where the hono middleware reads keys when it is given no `key` function, and what a key may be. */
  readonly key?: {
    readonly header?: string | false;
    readonly bearer?: boolean;
    readonly query?: string | false;
    readonly max_length?: number;
    readonly pattern?: string;
  };
  /** When the key's object does not answer: `"closed"` (refuse, the default) or `"open"` (allow). */
  readonly failure_mode?: "open" | "closed";
  /** Decide and report, but let every request through (`reason: "shadow"`). */
  readonly shadow?: boolean;
  /** Deadline on every call to a key's object (default `"5s"`). */
  readonly object_timeout?: Duration;
  /** Units leased to isolates ahead of use (README, "Leases"); `false` turns them off. */
  readonly leases?:
    | boolean
    | { readonly enabled?: boolean; readonly max_units?: number; readonly max_lifetime?: Duration };
  /** The form of the rate-limit header fields (default `"draft-11"`). */
  readonly headers?: HeaderForm;
}

/** {@link createLimiter}'s options: the settings, the binding's name, and the clock. */
export interface LimiterOptions extends LimiterSettings {
  /** The name of the `RateLimiter` Durable Object binding in `env` (default `"LIMITER"`). */
  readonly binding?: string;
  /**
   * Names this limiter's objects `<prefix>/key:<key>` instead of `key:<key>`. Every binding of the
   * `RateLimiter` class reaches the same objects, so two limiters that may see the same key need
   * different prefixes (or their grants share one log).
   */
  readonly prefix?: string;
  /** The clock (ms since the epoch); `Date.now` by default. */
  readonly clock?: () => number;
}

/** The options of one `limit()` call. */
export interface LimitCallOptions {
  /** The request's units (default 1). */
  readonly cost?: number;
  /** The runtime's execution context: lease refills and give-backs outlive the response. */
  readonly ctx?: Background;
  /**
   * A route's name from `routes`: the request must fit that route's budget too (for keys whose plan
   * has no route of that name, the key's limits alone apply).
   *
   * @throws RangeError when no plan has a route of that name
   */
  readonly route?: string;
}

/** A limiter: one client (its leases and deny cache) for one configuration. */
export interface Limiter {
  /** The parsed configuration. */
  readonly config: LimiterConfig;
  /** The name of the `RateLimiter` binding it reads from `env`. */
  readonly binding: string;
  /** The client behind it (its lease table and deny cache are readable, for tests and measurements). */
  readonly client: LimiterClient;
  /**
   * Decides one request of `cost` units (default 1) for `key`: grants and records it, or refuses
   * it with the exact wait. Pass the runtime's `ctx` so that lease refills and give-backs outlive
   * the response.
   *
   * @throws HttpError 400 for a malformed key, 401 for a key that matches no plan or `key.pattern`
   */
  limit(env: object, key: string, options?: LimitCallOptions): Promise<RateLimitResult>;
  /** What a request of `cost` (default 1) would get now, consuming nothing (`reason: "peek"` when it would pass). */
  peek(env: object, key: string, options?: Omit<LimitCallOptions, "ctx">): Promise<RateLimitResult>;
  /**
   * Gives back exactly what `result` was granted (once): the request is not counted. Resolves
   * false when there was nothing to give back.
   */
  refund(env: object, result: RateLimitResult): Promise<boolean>;
  /** Forgets the key's grants (units leased to isolates and not yet expired still count). */
  reset(env: object, key: string): Promise<void>;
  /**
   * The object name and plan of `key`, checked as `limit()` checks it; for a request without a key
   * (`null`), those of the `anonymous` limits for the client address `ip`.
   *
   * @throws HttpError 400 for a malformed key, 401 for a key that matches no plan or `key.pattern`, or none without `anonymous`
   */
  identify(key: string | null, ip?: string | null): Identity;
}

/**
 * A limiter for these settings, validated now: a bad setting throws a {@link ConfigError} that
 * names it (`createLimiter.limits[0].window: …`). Create it once, at module level: its leases and
 * deny cache live as long as the isolate.
 *
 * @throws ConfigError naming the first bad setting
 */
export function createLimiter(options: LimiterOptions): Limiter {
  const { binding = "LIMITER", prefix, clock, ...settings } = options;
  if (typeof binding !== "string" || binding === "") {
    throw new ConfigError(`createLimiter.binding: expected a binding name, got ${JSON.stringify(binding)}`);
  }
  if (prefix !== undefined && (typeof prefix !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(prefix))) {
    throw new ConfigError(
      `createLimiter.prefix: expected 1 to 64 letters, digits, "_", "-" or ".", got ${JSON.stringify(prefix)}`,
    );
  }
  const config = parseLimiterConfig(settings, "createLimiter");
  const client = new LimiterClient(config, clock ? { clock } : {});

  const namespace = (env: object): LimiterNamespace => namespaceOf(env, binding);
  const named = (key: string | null, ip: string | null = null): Identity => {
    if (key !== null) {
      if (typeof key !== "string" || key === "") throw new TypeError("key: expected a non-empty string or null");
      checkKey(key, "key", config.key.maxLength);
    }
    const found = identify(config, key, ip);
    return prefix === undefined ? found : { ...found, name: `${prefix}/${found.name}` };
  };

  return {
    config,
    binding,
    client,
    identify: named,
    async limit(env, key, { cost = 1, ctx, route } = {}) {
      const ns = namespace(env);
      const { name, plan } = named(key);
      const bg = ctx ? { waitUntil: (p: Promise<unknown>) => ctx.waitUntil?.(p) } : {};
      return client.limit(ns, name, plan, cost, bg, routeNamed(config, plan, route));
    },
    async peek(env, key, { cost = 1, route } = {}) {
      const ns = namespace(env);
      const { name, plan } = named(key);
      return client.peek(ns, name, plan, cost, routeNamed(config, plan, route));
    },
    refund: async (env, result) => client.refund(namespace(env), result),
    async reset(env, key) {
      const ns = namespace(env);
      const { name, plan } = named(key);
      if (!plan.limits) return;
      const limits = plan.limits;
      const routes = plan.routes.map(routeBudget);
      await callObject(() => ns.getByName(name).reset(limits, 1, routes) as Promise<unknown>, config.objectTimeoutMs);
      client.forget(ns, name);
    },
  };
}

/**
 * The plan's route called `name`; null without a name, or when the plan has no such route (its
 * keys have the key's limits only).
 *
 * @throws RangeError when no plan has a route of that name (a typo would otherwise limit nothing)
 */
export function routeNamed(config: LimiterConfig, plan: Plan, name: string | undefined): Route | null {
  if (name === undefined) return null;
  const route = plan.routes.find((r) => r.name === name);
  if (route) return route;
  const plans = [config.defaultPlan, config.anonymous, ...config.plans];
  if (!plans.some((p) => p?.routes.some((r) => r.name === name))) {
    throw new RangeError(`route: no plan has a route named ${JSON.stringify(name)}`);
  }
  return null;
}

/** `env[binding]`, checked to be a Durable Object namespace. */
export function namespaceOf(env: object, binding: string): LimiterNamespace {
  const ns = (env as Record<string, unknown>)[binding] as { getByName?: unknown } | undefined;
  if (typeof ns?.getByName !== "function") {
    throw new ConfigError(
      `env.${binding}: no Durable Object binding of that name; bind the RateLimiter class in wrangler.toml ([[durable_objects.bindings]] name = "${binding}", class_name = "RateLimiter") and export it from your Worker`,
    );
  }
  return ns as LimiterNamespace;
}
