/**
 * @module The library (package export `.`): `createLimiter` for any Worker — `limit()`, `peek()`,
 * `refund()`, `reset()`, `acquire()`/`release()`, `headers()` — and the `RateLimiter` Durable Object class to bind in
 * wrangler.toml.
 *
 * ```ts
 * import { createLimiter, RateLimiter } from "strict-edge-rate-limiter";
 * export { RateLimiter };
 * const limiter = createLimiter({ limits: [{ limit: 10, window: "1m" }] });
 * // in fetch(request, env, ctx):
 * const r = await limiter.limit(env, key, { ctx });
 * if (!r.allowed) return new Response("Too Many Requests", { status: 429, headers: limiter.headers(r) });
 * ```
 */

import type { HeaderSink } from "./client/headers.ts";
import { type Background, LimiterClient, type LimiterNamespace } from "./client/index.ts";
import { callObject, withDeadline } from "./client/policy.ts";
import type { RateLimitResult } from "./client/result.ts";
import { routeBudget } from "./config/lookup.ts";
import { parseLimiterConfig } from "./config/parse.ts";
import { ConfigError, type HeaderForm, type LimiterConfig, type Plan } from "./config/types.ts";
import type { Duration } from "./core/duration.ts";
import { type UsagePeriod, usageBy } from "./core/usage.ts";
import { namespaceOf, Pipeline, type RequestOptions, routeNamed } from "./pipeline/index.ts";
import { type Identity, settingsName } from "./pipeline/key.ts";
import type { LimiterStub } from "./protocol.ts";

export { LimiterError, type LimiterErrorCode } from "./base/errors.ts";
export type { HeaderSink } from "./client/headers.ts";
export type { Background, LimiterNamespace } from "./client/index.ts";
export {
  type GrantRecord,
  type Handle,
  headersOf,
  type LimitResult,
  type RateLimitResult,
  type Reason,
  type SlotRecord,
  violated,
} from "./client/result.ts";
export type { HeaderForm, LimiterConfig } from "./config/types.ts";
export { ConfigError } from "./config/types.ts";
export type { Duration } from "./core/duration.ts";
export type { UsagePeriod } from "./core/usage.ts";
export { RateLimiter } from "./object/index.ts";
export { problemFor, refusal } from "./pipeline/http.ts";
export type { RequestOptions } from "./pipeline/index.ts";
export type { Identity } from "./pipeline/key.ts";

/** One limit: at most `limit` cost units in any window of `window`. */
export interface LimitSetting {
  readonly limit: number;
  readonly window: Duration;
  /** Records are rounded up to this (default: 1 ms where the ring fits, else a small fraction of the window). */
  readonly tick?: Duration;
  /** The name in `RateLimit-Policy` (default `per-second`, `per-minute`, … or `per-<window>`). */
  readonly name?: string;
}

/**
 * A calendar quota (docs/configuration.md, "Quotas and credits"): at most `limit` units per `period` in `time_zone`
 * (IANA, default `"UTC"`), reset at each period's start. It goes in a plan's `limits` beside the sliding ones.
 */
export interface QuotaSetting {
  readonly limit: number;
  readonly period: "hour" | "day" | "week" | "month";
  readonly time_zone?: string;
  /** The name in `RateLimit-Policy` (default `hourly`, `daily`, `weekly`, `monthly`). */
  readonly name?: string;
}

/**
 * Prepaid credits (docs/configuration.md, "Quotas and credits"): each key starts with `initial`, each grant spends its
 * cost, a request the balance cannot cover is refused (`reason: "credits"`, `402` or `status`) and spends nothing;
 * `refill` raises a smaller balance to `amount` at each period's start.
 */
export interface CreditsSetting {
  readonly initial: number;
  readonly refill?: {
    readonly amount: number;
    readonly period: "hour" | "day" | "week" | "month";
    readonly time_zone?: string;
  };
  readonly status?: 402 | 429;
}

/** A plan chosen by key prefix: its own limits (and routes, in place of the top-level ones), or none (`unlimited`). */
export interface PlanSetting {
  readonly name: string;
  readonly key_prefix: string;
  readonly limits?: readonly (LimitSetting | QuotaSetting)[];
  readonly routes?: readonly RouteSetting[];
  readonly unlimited?: boolean;
  /** The plan's own per-address limits in place of the top-level `ip`; `false`: none for its keys. */
  readonly ip?: AddressSetting | false;
  /** The plan's own penalty in place of the top-level one; `false`: none for its keys. */
  readonly penalty?: PenaltySetting | false;
  /** The plan's own concurrency in place of the top-level one; `false`: none for its keys. */
  readonly concurrency?: number | false;
  readonly concurrency_timeout?: Duration;
  /** The plan's own credits in place of the top-level ones; `false`: none for its keys. */
  readonly credits?: CreditsSetting | false;
  /** The plan's own usage in place of the top-level one; `false`: none for its keys. */
  readonly usage?: UsageSetting | false;
}

/**
 * Exact usage per key and calendar day (docs/configuration.md, "Usage"): `true` (days in UTC, kept 400 days), or
 * `keep` (whole days, `"1d"` to `"3660d"`) and `time_zone`. Keys of such a plan get no leases.
 */
export type UsageSetting = true | { readonly keep?: string; readonly time_zone?: string };

/**
 * A key refused `after` times within `within` is blocked for `block` (docs/configuration.md, "Penalties"); with
 * `max_block`, each block within `within` of the last one's end doubles, up to `max_block`.
 */
export interface PenaltySetting {
  readonly after: number;
  readonly within: Duration;
  readonly block: Duration;
  readonly max_block?: Duration;
}

/** Limits counted per client address (docs/configuration.md, "Client addresses"). */
export interface AddressSetting {
  readonly limits: readonly LimitSetting[];
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
 * A top-up of `add` credits (with its `id`, once) at the key's object: its new balance. One try: a retry could add them
 * twice.
 */
async function topUp(
  at: { readonly stub: LimiterStub; readonly plan: Plan; readonly timeoutMs: number },
  add: number,
  id: string | undefined,
): Promise<number> {
  if (!Number.isSafeInteger(add) || add < 1) {
    throw new RangeError(`add: expected a positive whole number of credits, got ${String(add)}`);
  }
  const credits = at.plan.meters?.credits;
  if (!credits) throw new ConfigError(`credit(): the plan ${JSON.stringify(at.plan.name)} of this key has no credits`);
  const call = id === undefined ? at.stub.credit(credits, add) : at.stub.credit(credits, add, id);
  return withDeadline(call, at.timeoutMs);
}

/** The end of `usage()`'s default range: 2100-01-01, past anything kept. */
const USAGE_END = Date.UTC(2100, 0, 1);

/**
 * A limiter's settings: the shape of the proxy's `RATE_LIMIT` (docs/configuration.md)
 * without its proxy-only settings (`origin_timeout`, `admin`, `refund`).
 */
export interface LimiterSettings {
  /** The limits of keys that match no plan (sliding limits and calendar quotas); a request must fit every one. */
  readonly limits?: readonly (LimitSetting | QuotaSetting)[];
  readonly plans?: readonly PlanSetting[];
  /** Limits for requests without a key, per client address (the hono middleware, or `identify(null, ip)`). */
  readonly anonymous?: { readonly limits: readonly (LimitSetting | QuotaSetting)[] };
  /**
   * Limits every request with a key must also fit, counted per client address across all keys
   * (`limit(…, { ip })`; the hono middleware reads `CF-Connecting-IP`). All or nothing: a request one
   * budget refuses is counted in neither.
   */
  readonly ip?: AddressSetting;
  /** IPv6 clients are counted by their network of this many bits (32–128, default 56). */
  readonly ipv6_subnet?: number;
  /** Blocks a key for a while after repeated refusals (plans inherit it). */
  readonly penalty?: PenaltySetting;
  /** At most this many of a key's requests in flight at once, held by `acquire()` and the hono middleware (plans inherit it). */
  readonly concurrency?: number;
  /** How long a slot whose holder vanished stays taken (default `"60s"`, 1s to 1d). */
  readonly concurrency_timeout?: Duration;
  /** Prepaid credits every key spends (plans inherit them). */
  readonly credits?: CreditsSetting;
  /** Usage kept per key and day (plans inherit it). */
  readonly usage?: UsageSetting;
  /**
   * Routes with their own budget per key (docs/configuration.md, "Per-route budgets"): `limit(…, { route })` names
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
  /**
   * When the key's object does not answer: `"closed"` (refuse, the default), `"open"` (allow), or `"local"` (this
   * isolate decides alone at `fallback_share` of each limit; docs/configuration.md, "When the object cannot answer").
   */
  readonly failure_mode?: "open" | "closed" | "local";
  /** With `failure_mode: "local"`: the share of each limit an isolate grants alone, 0 to 1 (default 1). */
  readonly fallback_share?: number;
  /**
   * Where the limiter's objects are created and keep their data: `"eu"`, `"fedramp"`, `"fedramp-high"` or `"us"`
   * (`namespace.jurisdiction()`). Changing it starts every key afresh.
   */
  readonly jurisdiction?: "eu" | "fedramp" | "fedramp-high" | "us";
  /** Decide and report, but let every request through (`reason: "shadow"`). */
  readonly shadow?: boolean;
  /** Deadline on every call to a key's object (default `"5s"`). */
  readonly object_timeout?: Duration;
  /** Units leased to isolates ahead of use (docs/configuration.md, "Leases"); `false` turns them off. */
  readonly leases?:
    | boolean
    | { readonly enabled?: boolean; readonly max_units?: number; readonly max_lifetime?: Duration };
  /** The form of the rate-limit header fields (default `"draft-11"`). */
  readonly headers?: HeaderForm;
}

/** {@link createLimiter}'s options: the settings, the binding's name, the limiter's name, and the clock. */
export interface LimiterOptions extends LimiterSettings {
  /** The name of the `RateLimiter` Durable Object binding in `env` (default `"LIMITER"`). */
  readonly binding?: string;
  /**
   * Names this limiter's objects `<name>/key:<key>`, apart from every other limiter's: two limiters
   * share a key's log only when they have the same name. By default the name is derived from the
   * settings (`s-` and a hash of the plans, limits and routes), so limiters with different limits
   * never share a log — and a change of limits starts every key afresh; give a name to keep the logs
   * across such changes. `null`: the objects are named `key:<key>`, as the proxy names them (and as
   * 0.2 named every limiter's).
   */
  readonly name?: string | null;
  /** @deprecated The name of 0.2: `prefix: "x"` is `name: "x"`. */
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
  /**
   * The client's address (`CF-Connecting-IP`): with `ip` limits configured, the request must fit its
   * address's budget too (docs/configuration.md, "Client addresses"); without an address they are not applied.
   */
  readonly ip?: string | null;
}

/** A limiter: one client (its leases and deny cache) for one configuration. */
export interface Limiter {
  /** The parsed configuration. */
  readonly config: LimiterConfig;
  /** The name of the `RateLimiter` binding it reads from `env`. */
  readonly binding: string;
  /** The limiter's name: its objects are `<name>/key:<key>` (null: `key:<key>`). */
  readonly name: string | null;
  /**
   * The pipeline behind it, shared by the hono middleware; its client's lease table and deny cache
   * are readable for tests and measurements.
   *
   * @internal
   */
  readonly pipeline: Pipeline;
  /**
   * Decides one request of `cost` units (default 1) for `key`: grants and records it, or refuses
   * it with the exact wait. Writes a log line for a refusal, and a data point per decision when
   * `env` binds an Analytics Engine dataset as `LIMITER_ANALYTICS`. Pass the runtime's `ctx` so
   * that lease refills and give-backs outlive the response. It takes no concurrency slot: a plan's
   * `concurrency` applies to {@link acquire} (and the middleware) only.
   *
   * @throws LimiterError for a key that cannot be decided: `malformed_key`, `invalid_key` (not `key.pattern`),
   *   `no_plan`; `problemFor(e)` is the proxy's answer to it
   * @throws RangeError for a cost that is not a whole number ≥ 1, or a route no plan has
   */
  limit(env: object, key: string, options?: LimitCallOptions): Promise<RateLimitResult>;
  /**
   * Decides one request as {@link limit} does and, for a key whose plan has `concurrency`, takes one of its slots
   * (docs/configuration.md, "Concurrency"): at most `concurrency` of the key's requests hold one at once; a request
   * finding them all held is refused at once (`reason: "concurrency"`, `retryAfterMs` 1000) and not counted.
   * Call {@link release} with the result when the request's work has ended (in a `finally`): a slot not released is
   * freed only `concurrency_timeout` after this isolate stops renewing it. For a plan without `concurrency`,
   * `release()` does nothing.
   *
   * @throws as {@link limit}
   */
  acquire(env: object, key: string, options?: LimitCallOptions): Promise<RateLimitResult>;
  /**
   * Frees the concurrency slot `result` holds (its `handle.slot`; a copy of the result works too, in any isolate),
   * once. Resolves false when it held none or it was released already, or when the key's object did not answer
   * (logged as `slot_release_failed`: the slot is then freed by `concurrency_timeout`). Never rejects.
   *
   * @throws ConfigError when `env` has no binding of the limiter's `binding` name
   */
  release(env: object, result: RateLimitResult): Promise<boolean>;
  /**
   * The response header fields of `result` in the limiter's `headers` form: `RateLimit-Policy`, `RateLimit` (or the
   * form's fields), and `Retry-After` when refused. Copy them onto the response you send.
   */
  headers(result: RateLimitResult): Headers;
  /**
   * Sets the fields {@link headers} returns straight onto `target` — your response's own `headers`, say — without
   * making a `Headers` to copy. Throws what `target.set` throws (a fetched response's headers are immutable).
   */
  setHeaders(result: RateLimitResult, target: HeaderSink): void;
  /** What a request of `cost` (default 1) would get now, consuming nothing (`reason: "peek"` when it would pass). */
  peek(env: object, key: string, options?: Omit<LimitCallOptions, "ctx">): Promise<RateLimitResult>;
  /**
   * Gives back exactly what `result` was granted (once): the request is not counted. `result` may be a copy — kept,
   * `structuredClone`d, sent through a queue or KV as JSON — and refunded in any isolate: its `handle` says where the
   * units were recorded. Resolves false when there was nothing to give back (a refusal, already refunded, a leased
   * grant whose lease was settled since or belongs to another isolate), or the key's object did not answer (logged
   * as `refund_failed`).
   *
   * @throws TypeError when the handle is not as the limiter gave it
   */
  refund(env: object, result: RateLimitResult): Promise<boolean>;
  /**
   * Decides an HTTP request as the proxy and the middleware do: its key read as the `key` setting says (or
   * `options.key`), its client address from `CF-Connecting-IP`, its cost by the `costs` rules and its route by its
   * method and path; for a plan with `concurrency`, a granted request takes a slot, released at once when the client
   * goes away (`request.signal`, not for a WebSocket upgrade) — else release it with {@link whenEnded} or
   * {@link release}. Resolves null when the request costs nothing (not limited, no headers).
   *
   * @throws LimiterError for a request without a usable key or client address, or a path the normaliser refuses
   */
  decideRequest(env: object, request: Request, options?: RequestOptions): Promise<RateLimitResult | null>;
  /**
   * The response to send for a request {@link decideRequest} granted: when the request holds a concurrency slot, it
   * is released once the response has ended — its body read to the end, failed, or cancelled, a WebSocket closed.
   */
  whenEnded(env: object, result: RateLimitResult, response: Response, ctx?: Background): Response;
  /** Forgets the key's grants (units leased to isolates and not yet expired still count). */
  reset(env: object, key: string): Promise<void>;
  /**
   * Adds `add` credits to the key's balance (a top-up after a payment; docs/configuration.md, "Quotas and credits"):
   * a key that never spent any starts from its plan's `initial`. Resolves to the new balance. Never retried (the
   * object may have added them before an error): give an `id` (the payment's, 1 to 128 characters) and send it again
   * after a failure — a top-up with an id already seen adds nothing.
   *
   * @throws LimiterError as `limit()` does for the key; RangeError when `add` is not a positive whole number;
   *   ConfigError when the key's plan has no credits
   */
  credit(env: object, key: string, add: number, options?: { readonly id?: string }): Promise<number>;
  /**
   * The key's exact usage per calendar `period` (`"day"` or `"month"` in its plan's usage zone) overlapping
   * `[from, to)` (ms; default: all that is kept), oldest first, periods without use left out: requests granted and
   * their cost, refunds subtracted (docs/configuration.md, "Usage").
   *
   * @throws LimiterError as `limit()` does for the key; ConfigError when its plan keeps no usage; RangeError for a
   *   period or range that is not one
   */
  usage(
    env: object,
    key: string,
    options: { readonly period: "day" | "month"; readonly from?: number; readonly to?: number },
  ): Promise<UsagePeriod[]>;
  /**
   * The object name and plan of `key`, checked as `limit()` checks it; for a request without a key
   * (`null`), those of the `anonymous` limits for the client address `ip`.
   *
   * @throws LimiterError `malformed_key`, `invalid_key`, `no_plan`, or `key_required` for none without `anonymous`
   */
  identify(key: string | null, ip?: string | null): Identity;
}

/** What a limiter's name may be: it goes into every object name. */
const LIMITER_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * Checks the binding's name and the limiter's (`prefix`: its old spelling).
 *
 * @throws ConfigError naming the bad setting
 */
function checkNaming(binding: unknown, name: unknown, prefix: unknown): void {
  if (typeof binding !== "string" || binding === "") {
    throw new ConfigError(`createLimiter.binding: expected a binding name, got ${JSON.stringify(binding)}`);
  }
  for (const [field, value] of [
    ["name", name],
    ["prefix", prefix],
  ] as const) {
    if (value !== undefined && value !== null && (typeof value !== "string" || !LIMITER_NAME.test(value))) {
      throw new ConfigError(
        `createLimiter.${field}: expected 1 to 64 letters, digits, "_", "-" or "."${field === "name" ? " (or null)" : ""}, got ${JSON.stringify(value)}`,
      );
    }
  }
  if (name !== undefined && prefix !== undefined) {
    throw new ConfigError("createLimiter.prefix: give name only (prefix is its old spelling)");
  }
}

/** The runtime's `waitUntil` of `ctx`, bound (an `ExecutionContext`'s method needs its `this`). */
function bgOf(ctx: Background | undefined): Background {
  return ctx ? { waitUntil: (p: Promise<unknown>) => ctx.waitUntil?.(p) } : {};
}

/** `cost`, checked: a whole number ≥ 1. @throws RangeError */
function checked(cost: number): number {
  if (!Number.isSafeInteger(cost) || cost < 1) {
    throw new RangeError(`cost: expected a whole number ≥ 1, got ${String(cost)}`);
  }
  return cost;
}

/** `key`, checked: a non-empty string. @throws TypeError */
function keyOf(key: string): string {
  if (typeof key !== "string" || key === "") throw new TypeError("key: expected a non-empty string");
  return key;
}

/**
 * The name of a limiter given none: derived from its limits (pipeline/key.ts, `settingsName`) — refused for one with
 * calendar quotas, credits or usage, whose every key's counts, balance and usage a change of limits would leave behind
 * in the objects of the old name.
 *
 * @throws ConfigError saying a name is needed
 */
function derivedName(config: LimiterConfig): string {
  if ([config.defaultPlan, config.anonymous, ...config.plans].some((p) => p?.meters !== undefined)) {
    throw new ConfigError(
      'createLimiter.name: required with calendar quotas, credits or usage (e.g. name: "api"): the default name follows the limits, and a change of them would leave every key\'s counts, balance and usage behind',
    );
  }
  return settingsName(config);
}

/**
 * A limiter for these settings, validated now: a bad setting throws a {@link ConfigError} that
 * names it (`createLimiter.limits[0].window: …`). Create it once, at module level: its leases and
 * deny cache live as long as the isolate.
 *
 * @throws ConfigError naming the first bad setting
 */
export function createLimiter(options: LimiterOptions): Limiter {
  const { binding = "LIMITER", name: given, prefix, clock, ...settings } = options;
  checkNaming(binding, given, prefix);
  // The limiter's own options, read above: a misspelt setting's error lists them too (not `prefix`, the old spelling).
  const config = parseLimiterConfig(settings, "createLimiter", ["name", "binding", "clock"]);
  const name = given !== undefined ? given : (prefix ?? derivedName(config));
  const pipeline = new Pipeline(new LimiterClient(config, clock ? { clock } : {}), name);
  const { client } = pipeline;
  // Resolved once per limiter: an isolate's requests share one `env` (a different one, as in tests, resolves again).
  let seen: { env: object; ns: LimiterNamespace } | null = null;
  const namespace = (env: object): LimiterNamespace => {
    if (seen?.env !== env) seen = { env, ns: namespaceOf(env, binding, config.jurisdiction) };
    return seen.ns;
  };

  const decide = async (env: object, key: string, options: LimitCallOptions, inFlight: boolean) => {
    const { cost = 1, ctx, route, ip } = options;
    const asking = {
      key: keyOf(key),
      cost: checked(cost),
      bg: bgOf(ctx),
      inFlight,
      ...(route === undefined ? {} : { route }),
      ...(ip === undefined || ip === null ? {} : { ip }),
    };
    const decided = await pipeline.decide(env, namespace(env), asking);
    // A cost of at least 1 is always decided.
    return (decided as NonNullable<typeof decided>).result;
  };

  return {
    config,
    binding,
    name,
    pipeline,
    identify: (key, ip = null) => pipeline.identify(key === null ? null : keyOf(key), ip),
    limit: (env, key, options = {}) => decide(env, key, options, false),
    acquire: (env, key, options = {}) => decide(env, key, options, true),
    release: (env, result) => pipeline.release(namespace(env), result),
    decideRequest: (env, request, options = {}) =>
      pipeline.decideRequest(env, namespace(env), request, { ...options, ctx: bgOf(options.ctx) }),
    whenEnded: (env, result, response, ctx) => pipeline.sent(namespace(env), result, response, bgOf(ctx)),
    headers: (result) => pipeline.headers(result),
    setHeaders: (result, target) => pipeline.setHeaders(result, target),
    async peek(env, key, { cost = 1, route } = {}) {
      const ns = namespace(env);
      const { name: object, plan } = pipeline.identify(keyOf(key));
      const named = route === undefined ? null : routeNamed(config, plan, route);
      return client.peek({ ns, name: object, plan, cost: checked(cost), route: named });
    },
    refund: async (env, result) => pipeline.refund(namespace(env), result),
    async reset(env, key) {
      const ns = namespace(env);
      const { name: object, plan } = pipeline.identify(keyOf(key));
      if (!plan.limits) return;
      const limits = plan.limits;
      const routes = plan.routes.map(routeBudget);
      await callObject(() => ns.getByName(object).reset(limits, 1, routes) as Promise<unknown>, config.objectTimeoutMs);
      client.forget(ns, object);
    },
    credit: async (env, key, add, { id } = {}) => {
      const { name: object, plan } = pipeline.identify(keyOf(key));
      return topUp({ stub: namespace(env).getByName(object), plan, timeoutMs: config.objectTimeoutMs }, add, id);
    },
    async usage(env, key, { period, from = 0, to = USAGE_END }) {
      const { name: object, plan } = pipeline.identify(keyOf(key));
      const spec = plan.meters?.usage;
      if (!spec) throw new ConfigError(`usage(): the plan ${JSON.stringify(plan.name)} of this key keeps no usage`);
      const range = { period, from, to };
      usageBy(spec, [], range); // throws a RangeError for a period or range that is not one
      const ns = namespace(env);
      return callObject(() => ns.getByName(object).usage(spec, range), config.objectTimeoutMs);
    },
  };
}
