/**
 * @module The request pipeline every adapter runs — the proxy, the hono middleware and the library's
 * `limit()`: cost → key → identity → route → decision → record (log line and data point), and the
 * refund after the response. The adapters only read their request and write their response, so what
 * a decision costs, whom it counts against and what it leaves in the logs cannot differ between them.
 */

import { clientOf } from "../base/address.ts";
import { keyId, logEvent } from "../base/log.ts";
import type { HeaderSink } from "../client/headers.ts";
import type { Background, LimiterClient, LimiterNamespace, LimitRequest } from "../client/index.ts";
import { errorName } from "../client/policy.ts";
import { bothOf, headersOf, type RateLimitResult, setHeadersOf } from "../client/result.ts";
import { costFor, routeFor } from "../config/lookup.ts";
import {
  type AddressBudget,
  ConfigError,
  type Jurisdiction,
  type LimiterConfig,
  type Plan,
  type Route,
} from "../config/types.ts";
import { countGuess } from "./guesses.ts";
import { clientSignal, isWebSocketUpgrade, normalizedPath, pathnameOf } from "./http.ts";
import { checkKey, type Identity, identify, noClientAddress, objectName, readKey } from "./key.ts";
import { untilEnd } from "./response-end.ts";
import { provenIdentity } from "./signed.ts";
import { recordDecision, type TelemetryEnv } from "./telemetry.ts";

type Maybe<T> = T | Promise<T>;

/** One request as an adapter describes it to the pipeline. */
export interface Asking {
  /**
   * The request's key, read by the adapter (null: it has none — the `anonymous` limits per client
   * address, or `401`). A function is called only once the request is known to cost something.
   */
  readonly key: string | null | (() => Maybe<string | null | undefined>);
  /**
   * The client's address (`CF-Connecting-IP`): names the budget of a request without a key
   * (`anonymous`), and the `ip` budget a request with a key must also fit.
   */
  readonly ip?: string | null;
  /** The request's units; by default the first matching `costs` rule's (needs `method` and `path`), else 1. */
  readonly cost?: number | (() => Maybe<number>);
  /** A route's name; by default the plan's first route matching `method` and `path`, if any. */
  readonly route?: string;
  readonly method?: string;
  /** The request's normalised path as rules match it (called only when a rule needs it). */
  readonly path?: () => string;
  /** The runtime's `waitUntil`: lease refills, give-backs and refunds outlive the response. */
  readonly bg?: Background;
  /**
   * The adapter frees the request's concurrency slot when its response has ended ({@link Pipeline.sent},
   * {@link Pipeline.release}): with a plan's `concurrency`, a granted request takes one.
   */
  readonly inFlight?: boolean;
}

/** A request decided against one address budget alone ({@link Pipeline.decideAddress}). */
export interface AddressAsking {
  readonly budget: AddressBudget;
  /** The client's address (`CF-Connecting-IP`). */
  readonly ip: string | null;
  readonly bg?: Background;
}

/** How {@link Pipeline.decideRequest} reads a request, where the configuration's rules are not what is wanted. */
export interface RequestOptions {
  /** The request's key (`undefined`, `null` or `""`: it has none); by default read as the `key` setting says. */
  readonly key?: () => Maybe<string | null | undefined>;
  /** The request's units; by default the first matching `costs` rule's, else 1. 0: not limited. */
  readonly cost?: number | (() => Maybe<number>);
  /** The runtime's `ExecutionContext` (or anything with `waitUntil`). */
  readonly ctx?: Background;
}

/** What an adapter adds to {@link RequestOptions} (the proxy): what it has already read, and an observer. */
export interface AdapterOptions extends RequestOptions {
  /** The request's normalised path as rules match it, when the adapter has normalised it already. */
  readonly path?: string;
  /** Called with the decision and its key's object name before the answer is built. */
  readonly observe?: DecisionObserver;
}

/** A request's decision and the identity it was made for (what a refund needs). */
export interface Decided {
  readonly result: RateLimitResult;
  readonly identity: Identity;
}

/** Observes every decision with its key's object name (the proxy's tests and embedders). */
export type DecisionObserver = (result: RateLimitResult, name: string) => void;

/** One limiter's pipeline: its configuration, its client, and the scope its objects are named in. */
export class Pipeline<C extends LimiterConfig = LimiterConfig> {
  readonly config: C;
  readonly client: LimiterClient<C>;
  /** Prefixes this limiter's object names (`<scope>/key:<key>`); null: `key:<key>`, as the proxy names them. */
  readonly scope: string | null;

  constructor(client: LimiterClient<C>, scope: string | null) {
    this.config = client.config;
    this.client = client;
    this.scope = scope;
  }

  /**
   * The object name and plan of `key` (checked as a request's key is), or of the client address
   * `ip` for a request without a key (`null`).
   *
   * @throws LimiterError for a malformed key, a key that is needed and missing, does not match `key.pattern`, or matches no plan
   */
  identify(key: string | null, ip: string | null = null): Identity {
    // Given by the caller (`limit(env, key)`, the middleware's `key` function): where it came from is theirs to say.
    if (key !== null) checkKey(key, "the key given", this.config.key.maxLength);
    return identify(this.config, key, key === null ? clientOf(ip, this.config.ipv6Subnet) : null, this.scope);
  }

  /**
   * The object name of `budget` for the client address `ip` (`CF-Connecting-IP`).
   *
   * @throws LimiterError `no_client_address` when the address is missing or malformed
   */
  addressName(budget: AddressBudget, ip: string | null): string {
    const client = clientOf(ip, this.config.ipv6Subnet);
    if (client === null) throw noClientAddress();
    return objectName(budget.kind, client, this.scope);
  }

  /**
   * Decides one request and records the decision: a log line for a refusal, a data point when
   * `env` binds `LIMITER_ANALYTICS`. Resolves null when the request costs nothing (not limited,
   * no headers).
   *
   * @throws LimiterError for a request without a usable key or client address
   * @throws RangeError for a cost that is not a whole number ≥ 0, or a route no plan has
   */
  async decide(env: object, ns: LimiterNamespace, asking: Asking, observe?: DecisionObserver): Promise<Decided | null> {
    let path: string | undefined;
    const read = asking.path;
    const once = read && { ...asking, path: () => (path ??= read()) };
    const cost = await this.#cost(once || asking);
    if (cost === 0) return null;
    let key: string | null = null;
    let identity: Identity;
    try {
      key = typeof asking.key === "function" ? (await asking.key()) || null : asking.key;
      // A signed plan's key is proven in the isolate (signed.ts): one refused there never reaches an object.
      const at = { env, now: this.client.now() };
      identity = await provenIdentity(this.config, this.identify(key, asking.ip ?? null), key, at);
    } catch (e) {
      // A key refused here may count against its address (guesses.ts): past its budget, that refusal is the answer.
      const { config, client, scope } = this;
      const { ip, bg } = asking;
      const guess = await countGuess(env, { config, client, ns, scope, key, ip, ...(bg ? { bg } : {}) }, e);
      if (guess) return { result: guess.result, identity: { name: guess.name, plan: guess.plan } };
      throw e;
    }
    const route = this.#route(identity.plan, once || asking);
    // The address budget applies to requests with a key whose adapter knows the address (the library's
    // limit() without `ip` leaves it out; the proxy and the middleware always pass the header, present or not).
    const budget = key === null || asking.ip === undefined ? null : (identity.plan.ip ?? null);
    const request: LimitRequest = {
      ns,
      name: identity.name,
      plan: identity.plan,
      cost,
      route,
      ...(asking.bg ? { bg: asking.bg } : {}),
      ...(asking.inFlight ? { inFlight: true } : {}),
    };
    const result = budget
      ? await this.#decideBoth(request, budget, asking.ip ?? null)
      : await this.client.limit(request);
    observe?.(result, identity.name);
    await recordDecision(env as TelemetryEnv, identity.name, result);
    return { result, identity };
  }

  /**
   * Decides an HTTP request as the proxy and the middleware do: its key read as the `key` setting says (or
   * `options.key`), its address from `CF-Connecting-IP`, its cost and route by its method and path; a granted
   * request's concurrency slot is released at once when the client goes away (`request.signal`; not for a
   * WebSocket upgrade, {@link isWebSocketUpgrade}, whose slot is its socket's). Null when it costs nothing.
   *
   * @throws LimiterError for a request without a usable key or client address, or a path the normaliser refuses
   */
  async decideRequest(
    env: object,
    ns: LimiterNamespace,
    request: Request,
    options: AdapterOptions = {},
  ): Promise<RateLimitResult | null> {
    const { key, cost, ctx: bg = {}, path, observe } = options;
    const decided = await this.decide(
      env,
      ns,
      {
        key: key ?? (() => readKey(request, this.config.key)),
        ip: request.headers.get("cf-connecting-ip"),
        ...(cost === undefined ? {} : { cost }),
        method: request.method,
        path: path === undefined ? () => normalizedPath(pathnameOf(request.url), this.config) : () => path,
        bg,
        inFlight: true,
      },
      observe,
    );
    if (!decided) return null;
    const { result } = decided;
    // Only a request holding a concurrency slot has anything to release (reading `request.signal` makes an
    // AbortSignal, for every request).
    if (this.client.holdsSlot(result.handle?.slot ?? null) && !isWebSocketUpgrade(request))
      this.releaseOnAbort(ns, result, clientSignal(request), bg);
    return result;
  }

  /**
   * Decides one request against one address budget alone (the proxy's CORS preflights): no key, no route.
   *
   * @throws LimiterError `no_client_address` when the client address is missing or malformed
   */
  async decideAddress(env: object, ns: LimiterNamespace, address: AddressAsking): Promise<RateLimitResult> {
    const { budget, ip, bg } = address;
    const name = this.addressName(budget, ip);
    const result = await this.client.limit({ ns, name, plan: budget.plan, cost: 1, ...(bg ? { bg } : {}) });
    await recordDecision(env as TelemetryEnv, name, result);
    return result;
  }

  /**
   * A request that must fit its key's limits and its client address's (docs/design.md, "Several identifiers"):
   * both objects are asked at once; a grant by one with a refusal by the other is given back before the answer
   * (a leased grant to its lease, at once; else a call), so the refused request ends counted in neither. A
   * give-back that fails leaves that grant counted until it leaves the window: capacity held, never more granted.
   */
  async #decideBoth(request: LimitRequest, budget: AddressBudget, ip: string | null): Promise<RateLimitResult> {
    const { ns, cost, bg } = request;
    const address = this.addressName(budget, ip);
    const [byKey, byAddress] = await Promise.all([
      this.client.limit(request),
      this.client.limit({ ns, name: address, plan: budget.plan, cost, ...(bg ? { bg } : {}) }),
    ]);
    if (byKey.allowed !== byAddress.allowed) {
      await Promise.all([this.refund(ns, byKey.allowed ? byKey : byAddress), this.release(ns, byKey)]);
    }
    return bothOf(byKey, byAddress);
  }

  /** The rate-limit header fields of `result` in this limiter's form, for the response the adapter sends. */
  headers(result: RateLimitResult): Headers {
    return headersOf(result, this.config.headers);
  }

  /** Sets the fields {@link headers} returns straight onto `target` (a response's own headers, say). */
  setHeaders(result: RateLimitResult, target: HeaderSink): void {
    setHeadersOf(result, this.config.headers, target);
  }

  /**
   * The response to send for a request `decide` granted: when the request holds a concurrency slot, it is freed
   * once the response has ended — its body streamed to the end, failed, or cancelled by a client that went away, a
   * WebSocket closed (src/pipeline/response-end.ts).
   */
  sent(ns: LimiterNamespace, result: RateLimitResult, response: Response, bg: Background = {}): Response {
    const slot = result.handle?.slot ?? null;
    if (!this.client.holdsSlot(slot)) return response;
    return untilEnd(response, () => this.client.release(ns, slot), bg);
  }

  /**
   * Frees the concurrency slot `result` holds as soon as `signal` aborts (the client went away: docs/design.md, "What
   * real clients do"), whatever the origin or the handler is still doing; its renewals stop with it. Releasing twice
   * does nothing, so the response's end may release it too.
   */
  releaseOnAbort(ns: LimiterNamespace, result: RateLimitResult, signal: AbortSignal | null, bg: Background = {}): void {
    const slot = result.handle?.slot ?? null;
    if (signal === null || !this.client.holdsSlot(slot)) return;
    const release = () => {
      const done = this.client.release(ns, slot);
      bg.waitUntil?.(done);
    };
    if (signal.aborted) release();
    else signal.addEventListener("abort", release, { once: true });
  }

  /**
   * Frees the concurrency slot a request holds (its result's handle, or a copy of it), once. Never rejects.
   *
   * @returns false when it held none, it was released already, or its key's object did not answer
   */
  release(ns: LimiterNamespace, result: RateLimitResult): Promise<boolean> {
    return this.client.release(ns, result.handle?.slot ?? null);
  }

  /**
   * Gives a decided request's units back (the request is not counted) — from its result or a copy of it, in this
   * isolate or another — each budget's once, logging `refund_failed` when a key's object does not answer.
   *
   * @returns false when nothing was given back (a refusal, already refunded, a failed call, or a leased grant
   *   whose lease was settled since or is another isolate's)
   * @throws TypeError (a rejection) when the handle is not as the limiter gave it; nothing else rejects
   */
  async refund(ns: LimiterNamespace, result: RateLimitResult): Promise<boolean> {
    const grants = result.handle?.grants ?? [];
    const done = await Promise.all(
      grants.map(async (g) => {
        try {
          return await this.client.refund(ns, g);
        } catch (e) {
          if (e instanceof TypeError) throw e;
          logEvent("refund_failed", { key_id: await keyId(g.name), message: errorName(e) }, "error");
          return false;
        }
      }),
    );
    return done.some(Boolean);
  }

  async #cost(asking: Asking): Promise<number> {
    const given = asking.cost;
    const cost =
      given === undefined
        ? costFor(this.config, asking.method ?? "GET", asking.path?.() ?? "/")
        : typeof given === "number"
          ? given
          : await given();
    if (!Number.isSafeInteger(cost) || cost < 0) {
      throw new RangeError(`cost: expected a whole number ≥ 0 (0: not limited), got ${String(cost)}`);
    }
    return cost;
  }

  /** The route whose budget the request also uses: the named one, else the first the request matches. */
  #route(plan: Plan, asking: Asking): Route | null {
    if (asking.route !== undefined) return routeNamed(this.config, plan, asking.route);
    if (plan.routes.length === 0 || asking.path === undefined) return null;
    return routeFor(plan, asking.method ?? "GET", asking.path());
  }
}

/**
 * The plan's route called `name`; null when the plan has no such route (its keys have the key's
 * limits only).
 *
 * @throws RangeError when no plan has a route of that name (a typo would otherwise limit nothing)
 */
export function routeNamed(config: LimiterConfig, plan: Plan, name: string): Route | null {
  const route = plan.routes.find((r) => r.name === name);
  if (route) return route;
  const plans = [config.defaultPlan, config.anonymous, ...config.plans];
  if (!plans.some((p) => p?.routes.some((r) => r.name === name))) {
    throw new RangeError(`route: no plan has a route named ${JSON.stringify(name)}`);
  }
  return null;
}

/**
 * `env[binding]`, checked to be a Durable Object namespace; with a `jurisdiction`, its namespace in that jurisdiction
 * (`namespace.jurisdiction()`), whose objects are created and keep their data there.
 *
 * @throws ConfigError naming the binding and how to add it, or a runtime without jurisdictions
 */
export function namespaceOf(env: object, binding: string, jurisdiction: Jurisdiction | null = null): LimiterNamespace {
  const ns = (env as Record<string, unknown>)[binding] as
    | { getByName?: unknown; jurisdiction?: (j: Jurisdiction) => unknown }
    | undefined;
  if (typeof ns?.getByName !== "function") {
    throw new ConfigError(
      `env.${binding}: no Durable Object binding of that name; bind the RateLimiter class in wrangler.toml ([[durable_objects.bindings]] name = "${binding}", class_name = "RateLimiter") and export it from your Worker`,
    );
  }
  if (jurisdiction === null) return ns as LimiterNamespace;
  return inJurisdiction(ns as { jurisdiction?: (j: Jurisdiction) => LimiterNamespace }, jurisdiction, binding);
}

/**
 * The namespace `ns` (`env[binding]`) in `jurisdiction`: its objects are created and keep their data there. Never
 * falls back to `ns` itself: data meant to stay in a jurisdiction must not silently leave it.
 *
 * @throws ConfigError when the runtime refuses it — local workerd (wrangler dev, Miniflare, the vitest pool) has no
 *   jurisdictions — or `ns` has no `jurisdiction()`
 */
export function inJurisdiction<T>(
  ns: { jurisdiction?: (j: Jurisdiction) => T },
  jurisdiction: Jurisdiction,
  binding: string,
): T {
  if (typeof ns.jurisdiction !== "function") {
    throw new ConfigError(
      `jurisdiction: env.${binding} has no jurisdiction() (not a Durable Object namespace); bind the RateLimiter class, or remove jurisdiction`,
    );
  }
  try {
    return ns.jurisdiction(jurisdiction);
  } catch (e) {
    throw new ConfigError(
      `jurisdiction: the runtime refused "${jurisdiction}" for env.${binding} (${errorName(e)}); local workerd (wrangler dev, Miniflare, vitest) has no jurisdictions: leave jurisdiction out of local configurations`,
    );
  }
}
