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
import { headersOf, type RateLimitResult, setHeadersOf } from "../client/result.ts";
import { costFor, routeFor } from "../config/lookup.ts";
import type { AddressBudget, LimiterConfig, Plan, Route } from "../config/types.ts";
import { decideAll, type ExtraBudget } from "./all-or-nothing.ts";
import type { AdapterOptions, AddressAsking, Asking, Decided, DecisionObserver } from "./asking.ts";
import { countGuess } from "./guesses.ts";
import { clientSignal, isWebSocketUpgrade, normalizedPath, pathnameOf } from "./http.ts";
import { checkKey, type Identity, identify, noClientAddress, objectName, readKey } from "./key.ts";
import { costOfRequest } from "./reservation.ts";
import { untilEnd } from "./response-end.ts";
import { type Settled, settledWhenEnded, settleResult } from "./settle.ts";
import { provenIdentity } from "./signed.ts";
import { recordDecision, type TelemetryEnv } from "./telemetry.ts";
import type { KeyVerifier } from "./verify-hook.ts";

export type { AdapterOptions, AddressAsking, Asking, Decided, DecisionObserver, RequestOptions } from "./asking.ts";
export { inJurisdiction, namespaceOf } from "./namespace.ts";
export type { Settled } from "./settle.ts";

/** One limiter's pipeline: its configuration, its client, and the scope its objects are named in. */
export class Pipeline<C extends LimiterConfig = LimiterConfig> {
  readonly config: C;
  readonly client: LimiterClient<C>;
  /** Prefixes this limiter's object names (`<scope>/key:<key>`); null: `key:<key>`, as the proxy names them. */
  readonly scope: string | null;
  /** The `verify` hook's verifier (docs/configuration.md, "Keys kept elsewhere"); null: plans by key prefix. */
  readonly verifier: KeyVerifier | null;

  constructor(client: LimiterClient<C>, scope: string | null, verifier: KeyVerifier | null = null) {
    this.config = client.config;
    this.client = client;
    this.scope = scope;
    this.verifier = verifier;
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
   * {@link identify}, and for a key of a limiter with a `verify` hook, the hook's plan and account (cached); a signed
   * plan's key proven in the isolate (signed.ts), with the account it carries. Every call that reaches a key's object
   * (a decision, and the library's peek, reset, credit and usage) identifies it here: a key refused here reaches none.
   *
   * @throws LimiterError as {@link identify}; `unknown_key` or `verify_failed` from the hook; a signed key's refusal
   * @throws ConfigError for a hook's answer that names no plan, or a signed plan without `KEY_SECRET`
   */
  async identifyFor(env: object, key: string | null, ip: string | null = null): Promise<Identity> {
    let identity: Identity;
    if (key === null || this.verifier === null) identity = this.identify(key, ip);
    else {
      checkKey(key, "the key given", this.config.key.maxLength);
      identity = await this.verifier.identify(env, key, this.scope);
    }
    return provenIdentity(this.config, identity, key, { env, now: this.client.now() });
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
      identity = await this.identifyFor(env, key, asking.ip ?? null);
    } catch (e) {
      // A key refused here may count against its address (guesses.ts): past its budget, that refusal is the answer.
      const { config, client, scope } = this;
      const { ip, bg } = asking;
      const guess = await countGuess(env, { config, client, ns, scope, key, ip, ...(bg ? { bg } : {}) }, e);
      if (guess) return { result: guess.result, identity: { name: guess.name, plan: guess.plan } };
      throw e;
    }
    const route = this.#route(identity.plan, once || asking);
    const request: LimitRequest = {
      ns,
      name: identity.name,
      plan: identity.plan,
      cost,
      route,
      ...(asking.bg ? { bg: asking.bg } : {}),
      ...(asking.inFlight ? { inFlight: true } : {}),
    };
    const extras = key === null ? [] : this.#extraBudgets(identity, asking);
    const result = extras.length > 0 ? await decideAll(this, request, extras) : await this.client.limit(request);
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
   * @throws LimiterError for a request without a usable key or client address, a path the normaliser refuses, or a
   *   reservation a settled `costs` rule cannot read from it (`bad_reservation`)
   */
  async decideRequest(
    env: object,
    ns: LimiterNamespace,
    request: Request,
    options: AdapterOptions = {},
  ): Promise<RateLimitResult | null> {
    return (await this.decideIncoming(env, ns, request, options))?.result ?? null;
  }

  /** {@link decideRequest}, with whom the decision counted against (the proxy tells the origin who is calling). */
  async decideIncoming(
    env: object,
    ns: LimiterNamespace,
    request: Request,
    options: AdapterOptions = {},
  ): Promise<Decided | null> {
    const { key, cost, ctx: bg = {}, path, observe } = options;
    let normal = path;
    const pathOf = () => (normal ??= normalizedPath(pathnameOf(request.url), this.config));
    const decided = await this.decide(
      env,
      ns,
      {
        key: key ?? (() => readKey(request, this.config.key)),
        ip: request.headers.get("cf-connecting-ip"),
        // By the `costs` rules, a settled rule's reservation read from the request (src/pipeline/reservation.ts).
        cost: cost ?? (() => costOfRequest(this.config, request, pathOf)),
        method: request.method,
        path: pathOf,
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
    return decided;
  }

  /**
   * Whom an HTTP request's key names ({@link identifyFor}: its key read as the `key` setting says, its address from
   * `CF-Connecting-IP`), deciding nothing — the proxy's check of a request its `costs` rule frees. A key refused here
   * counts against its address's `guesses` as in {@link decide}: past that budget, its refusal is the answer.
   *
   * @throws LimiterError as {@link identifyFor}, while the address's guesses allow it
   */
  async identifyIncoming(
    env: object,
    ns: LimiterNamespace,
    request: Request,
    bg: Background = {},
  ): Promise<{ identity: Identity } | { refused: RateLimitResult }> {
    const ip = request.headers.get("cf-connecting-ip");
    let key: string | null = null;
    try {
      key = readKey(request, this.config.key);
      return { identity: await this.identifyFor(env, key, ip) };
    } catch (e) {
      const { config, client, scope } = this;
      const guess = await countGuess(env, { config, client, ns, scope, key, ip, bg }, e);
      if (guess) return { refused: guess.result };
      throw e;
    }
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
   * The budgets a request with a key must fit beside its key's, all or nothing (docs/design.md, "Several
   * identifiers"): its address's `ip` limits when its adapter knows the address (the library's limit() without `ip`
   * leaves it out; the proxy and the middleware always pass the header, present or not), and its account's.
   */
  #extraBudgets(identity: Identity, asking: Asking): ExtraBudget[] {
    const { ip, account } = identity.plan;
    const extras: ExtraBudget[] = [];
    if (ip && asking.ip !== undefined) extras.push({ by: "ip", name: this.addressName(ip, asking.ip), plan: ip.plan });
    const named = asking.account ?? identity.account ?? null;
    if (account && named !== null) {
      extras.push({ by: "account", name: objectName(account.kind, named, this.scope), plan: account.plan });
    }
    return extras;
  }

  /** One budget's decision (the key's, an address's or an account's), as the client makes it. */
  limit(request: LimitRequest): Promise<RateLimitResult> {
    return this.client.limit(request);
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
   * The response to send for a request granted for a reservation whose actual cost is known only when it has ended
   * (docs/configuration.md, "Settled costs"): once its body has streamed to the end, failed, or been cancelled by a
   * client that went away, `end.actual()` is read and, when it is a number, the request is settled to it; null keeps
   * the reservation. A result with nothing granted passes the response on untouched.
   */
  settleWhenEnded(
    ns: LimiterNamespace,
    result: RateLimitResult,
    response: Response,
    end: { readonly bg?: Background; readonly actual: () => number | null },
  ): Response {
    if ((result.handle?.grants.length ?? 0) === 0) return response;
    return settledWhenEnded(response, (actual) => this.settle(ns, result, actual), end);
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
   * @returns false when nothing was given back (a refusal, already refunded or settled, a failed call, or a leased
   *   grant whose lease was settled since or is another isolate's)
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

  /**
   * Settles a request granted for a reservation (its cost) to its `actual` cost, once — from its result or a copy of
   * it, in this isolate or another (src/pipeline/settle.ts): `reserved − actual` given back as a refund gives back,
   * `actual − reserved` recorded now as debt (`settle_debt`). A result never settled keeps its reservation.
   *
   * @throws RangeError for an `actual` that is not a whole number ≥ 0; TypeError (a rejection) for a handle not as
   *   the limiter gave it
   */
  settle(ns: LimiterNamespace, result: RateLimitResult, actual: number): Promise<Settled> {
    return settleResult(this.client, ns, result, actual);
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
