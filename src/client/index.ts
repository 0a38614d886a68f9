/**
 * @module The client: the isolate side of one limiter. It owns its lease table, deny cache and
 * round-trip estimate; its clock is an input and every call takes the object namespace; it
 * returns one {@link RateLimitResult} per decision — the value the headers, the logs, Analytics
 * Engine, the proxy and the library's users all read. Two clients share nothing.
 */

import { type Limit, type LimiterConfig, type Plan, type Route, routeBudget } from "../config.ts";
import type { RouteBudget } from "../core/budgets.ts";
import type { Decision, LimitStatus, NamedLimit } from "../core/decision.ts";
import { type LimitSpec, ringSlackMs } from "../core/limits.ts";
import type { Ask } from "../core/log.ts";
import { keyId, logEvent } from "../telemetry.ts";
import { type Blocked, DenyCache } from "./deny-cache.ts";
import { type HeaderState, seconds, setRateLimitHeaders } from "./headers.ts";
import {
  type HeldLease,
  IDLE_RETURN_MS,
  type KeyLeases,
  type LeaseAsk,
  LeaseTable,
  sameLimits,
  type Unused,
} from "./leases.ts";
import { callObject, errorName, isOverloaded, LimiterTimeout } from "./policy.ts";
import type { LimitResult, RateLimitResult, Reason } from "./result.ts";

export type { LimitResult, RateLimitResult, Reason } from "./result.ts";
export { violated } from "./result.ts";

/**
 * What a client needs of the `RateLimiter` namespace (`[[durable_objects.bindings]]`): a stub per
 * object name with the object's RPC methods. A `DurableObjectNamespace<RateLimiter>` is one; tests
 * may pass their own.
 */
export interface LimiterNamespace {
  getByName(name: string): LimiterStub;
}

/** The object's RPC methods the client calls (see src/object/index.ts). */
export interface LimiterStub {
  take(limits: readonly LimitSpec[], ask: Ask, route?: RouteBudget): Promise<Decision>;
  giveBack(
    limits: readonly LimitSpec[],
    recordedAt: readonly number[],
    units: number,
    route?: RouteBudget,
  ): Promise<number>;
  peek(limits: readonly LimitSpec[], cost: number, route?: RouteBudget): Promise<Decision>;
  reset(limits: readonly LimitSpec[], buckets: number, routes?: readonly RouteBudget[]): Promise<unknown>;
}

/** Keeps background work (lease refills, give-backs) alive after the response: the runtime's `waitUntil`. */
export interface Background {
  waitUntil?(promise: Promise<unknown>): void;
}

/** A client's inputs besides its configuration. */
export interface ClientOptions {
  /** The isolate's clock (ms since the epoch); `Date.now` by default. */
  readonly clock?: () => number;
}

/**
 * How long a cached denial is trusted before the object is asked again (ms): only time frees
 * capacity, except an operator's reset, unblock or override, which every isolate then sees within
 * this long. A flood costs the object one call per key, isolate and interval.
 */
export const DENY_RECHECK_MS = 1000;

/** The least a request waits for its key's lease call in flight (ms), however fast recent calls were. */
const WAIT_FLOOR_MS = 5;

/** The wait a caller is told when the limiter is unavailable (ms): `Retry-After: 1`. */
export const UNAVAILABLE_RETRY_MS = 1000;

/** Where a grant's units were recorded, so that {@link LimiterClient.refund} can give back exactly those. */
interface Grant {
  readonly name: string;
  /** The limits the request was sent with (the object applies an override itself). */
  readonly limits: readonly Limit[];
  readonly recordedAt: readonly number[];
  readonly units: number;
  /** The lease it was spent from, and that lease's key entry (null: the object granted it). */
  readonly held: HeldLease | null;
  readonly entry: KeyLeases | null;
  /** The route budget it was also recorded in. */
  readonly route?: RouteBudget;
}

export class LimiterClient<C extends LimiterConfig = LimiterConfig> {
  readonly config: C;
  /** Units leased ahead, per key (exposed for tests and measurements). */
  readonly leases = new LeaseTable();
  /** Keys no request can pass before a known time (exposed for tests and measurements). */
  readonly denyCache = new DenyCache();
  readonly #clock: () => number;
  readonly #grants = new WeakMap<RateLimitResult, Grant>();
  /** An operator's override limits as `Limit` lists, one per distinct override (header strings are cached per list). */
  readonly #views = new Map<string, readonly Limit[]>();
  /** Keys at a limit a moment ago (their cached denial lapsed here): see {@link Contention}. */
  readonly #contended = new Map<string, Contention>();
  /** When this client next looks for idle keys' expired units to give back (its clock, ms). */
  #idleCheckAt = 0;

  constructor(config: C, options: ClientOptions = {}) {
    this.config = config;
    this.#clock = options.clock ?? Date.now;
  }

  /** The client's clock (ms). */
  now(): number {
    return this.#clock();
  }

  /**
   * Decides a request of `cost` units for the object `name` under `plan`: from a lease this
   * isolate holds, from the deny cache, or from the key's object (which may grant a lease with
   * it). Never rejects: a late or failed object call is a `limiter_timeout` or `limiter_error`
   * result, allowed as `failure_mode` says.
   *
   * @throws RangeError when `cost` is not a whole number ≥ 1
   */
  async limit(
    ns: LimiterNamespace,
    name: string,
    plan: Plan,
    cost: number,
    bg: Background = {},
    route: Route | null = null,
  ): Promise<RateLimitResult> {
    if (!Number.isSafeInteger(cost) || cost < 1) {
      throw new RangeError(`cost: expected a whole number ≥ 1, got ${String(cost)} (peek() reads without consuming)`);
    }
    const limits = plan.limits;
    if (!limits) return this.#finish(plan, [], cost, "unlimited", true, [], [], 0, this.now());
    const all = route?.shown ?? limits;
    // Every limit is at least 1, so only a cost above 1 can exceed one.
    if (cost > 1 && all.some((l) => cost > l.limit)) {
      const exceeded = all.map((l) => cost > l.limit);
      const never = Number.POSITIVE_INFINITY;
      return this.#finish(plan, all, cost, "too_costly", false, [], exceeded, never, this.now(), route);
    }
    if (route) return this.#decideRoute(ns, name, plan, limits, route, cost, bg);
    return this.#decide(ns, name, plan, limits, cost, bg);
  }

  /**
   * The key's state as a request of `cost` would find it, consuming nothing: `allowed` says
   * whether it would be granted now, `retryAfterMs` when it would be. Units this isolate holds
   * on lease count as remaining.
   */
  async peek(
    ns: LimiterNamespace,
    name: string,
    plan: Plan,
    cost = 1,
    route: Route | null = null,
  ): Promise<RateLimitResult> {
    if (!Number.isSafeInteger(cost) || cost < 1) {
      throw new RangeError(`cost: expected a whole number ≥ 1, got ${String(cost)}`);
    }
    const limits = plan.limits;
    if (!limits) return this.#finish(plan, [], cost, "unlimited", true, [], [], 0, this.now());
    let d: Decision;
    try {
      d = await callObject(
        () =>
          route ? ns.getByName(name).peek(limits, cost, routeBudget(route)) : ns.getByName(name).peek(limits, cost),
        this.config.objectTimeoutMs,
        (e) => this.#log("limiter_retry", name, e, "warn"),
      );
    } catch (e) {
      return this.#failed(plan, cost, e, route);
    }
    const shown = this.#shown(limits, d.limitsOverride, route);
    // Units this isolate holds on lease count as remaining, for the key's own limits (route requests never lease).
    const entry = route ? undefined : this.leases.get(name);
    let held = 0;
    const now = this.now();
    if (entry && d.blockedBy === undefined) {
      for (const h of entry.held)
        if (now < h.expiresAt && sameLimits(h.applied, d.limitsOverride ?? null)) held += h.left;
    }
    const states = d.limits.map((l) => withLease(l, held));
    if (d.allowed || held >= cost) return this.#finish(plan, shown, cost, "peek", true, states, [], 0, d.now, route);
    const reason = d.blockedBy !== undefined ? "blocked" : d.neverAllowed ? "too_costly" : "over_limit";
    const exceeded = d.limits.map((l) => l.exceeded);
    return this.#finish(plan, shown, cost, reason, false, states, exceeded, d.retryAfterMs, d.now, route);
  }

  /**
   * Gives back exactly the units `result` was granted, once: to the lease it was spent from while
   * that lease is still held here, else to the key's object. A refunded request is not counted.
   *
   * @returns false when there was nothing to give back (a refusal, a peek, or already refunded)
   */
  async refund(ns: LimiterNamespace, result: RateLimitResult): Promise<boolean> {
    const g = this.#grants.get(result);
    if (!g) return false;
    this.#grants.delete(result);
    const { held, entry } = g;
    if (
      held &&
      entry &&
      this.leases.get(g.name) === entry &&
      entry.held.includes(held) &&
      this.now() < held.expiresAt
    ) {
      held.left += g.units;
      return true;
    }
    await callObject(
      () =>
        g.route
          ? ns.getByName(g.name).giveBack(g.limits, g.recordedAt, g.units, g.route)
          : ns.getByName(g.name).giveBack(g.limits, g.recordedAt, g.units),
      this.config.objectTimeoutMs,
      (e) => this.#log("limiter_retry", g.name, e, "warn"),
    );
    return true;
  }

  /**
   * After an operator's change: forgets this isolate's leases (giving their unused units back) and
   * cached denial for the key, so its next request asks the object.
   */
  forget(ns: LimiterNamespace, name: string, bg: Background = {}): void {
    this.denyCache.deleteKey(name);
    const unused: Unused[] = [];
    this.leases.drop(name, unused);
    this.#giveBack(ns, unused, bg);
  }

  /**
   * A request of a route with its own budget: per request at the key's object, which checks the
   * key's limits and the route's together and records in both or neither. It never spends or asks
   * for leases (a lease counts only in the key's budget); its deny cache entry is the route's own.
   */
  async #decideRoute(
    ns: LimiterNamespace,
    name: string,
    plan: Plan,
    limits: readonly Limit[],
    route: Route,
    cost: number,
    bg: Background,
  ): Promise<RateLimitResult> {
    const now = this.now();
    const cached = routeEntry(name, route);
    if (!this.config.shadow) {
      const blocked = this.denyCache.get(cached, now);
      const retryAt = blocked && (cost === 1 ? blocked.until : blocked.retryAt.get(cost));
      if (blocked && retryAt !== undefined) {
        return this.#cachedDenial(plan, limits, cost, blocked, retryAt, now, route);
      }
    }
    let d: Decision;
    try {
      d = await this.#ask(ns, name, limits, { cost }, routeBudget(route));
    } catch (e) {
      return this.#failed(plan, cost, e, route);
    }
    this.#remember(cached, d, cost, now);
    const unused: Unused[] = [];
    this.#observe(name, d, unused);
    this.#giveBack(ns, unused, bg);
    const shown = this.#shown(limits, d.limitsOverride, route);
    if (!d.allowed) {
      const reason = d.blockedBy !== undefined ? "blocked" : "over_limit";
      const exceeded = d.limits.map((l) => l.exceeded);
      return this.#finish(plan, shown, cost, reason, false, d.limits, exceeded, d.retryAfterMs, d.now, route);
    }
    const result = this.#finish(plan, shown, cost, "granted", true, d.limits, [], 0, d.now, route);
    if (d.recordedAt) {
      this.#grants.set(result, {
        name,
        limits,
        recordedAt: d.recordedAt,
        units: cost,
        held: null,
        entry: null,
        route: routeBudget(route),
      });
    }
    return result;
  }

  async #decide(
    ns: LimiterNamespace,
    name: string,
    plan: Plan,
    limits: readonly Limit[],
    cost: number,
    bg: Background,
  ): Promise<RateLimitResult> {
    const unused: Unused[] = [];
    let now = this.now();
    const entry = plan.leaseMs > 0 ? this.leases.touch(name, limits, now, unused) : undefined;
    if (now >= this.#idleCheckAt) {
      this.#idleCheckAt = now + IDLE_RETURN_MS;
      this.leases.idle(now, unused);
    }
    const gate: Gate = { out: null, waitingIn: null };
    try {
      // While this key's one lease call is out, wait for it — on this request's own timer: a request
      // must never await a promise another request made (workerd cancels such continuations when
      // that request ends) — for at most two recent round trips, then ask for itself.
      const waitDeadline = now + 2 * Math.max(this.leases.rttMs, WAIT_FLOOR_MS);
      for (;;) {
        if (entry) {
          const held = this.leases.spend(entry, cost, now);
          if (held) {
            this.#refill(ns, plan, name, entry, now, bg);
            return this.#leased(plan, name, cost, entry, held, now);
          }
        }
        if (!this.config.shadow) {
          const blocked = this.denyCache.get(name, now);
          const retryAt = blocked && (cost === 1 ? blocked.until : blocked.retryAt.get(cost));
          if (blocked && retryAt !== undefined) return this.#cachedDenial(plan, limits, cost, blocked, retryAt, now);
        }
        // The key's lease call, or (at a limit a moment ago) another request's call for it; `#mustWait` only asked
        // when no lease call holds this one back, since it takes a pass or the asker's turn when it says go.
        const leaseCallOut = entry !== undefined && this.#inFlight(entry, now) && now < waitDeadline;
        if (!leaseCallOut && (this.config.shadow || !this.#mustWait(name, now, gate))) break;
        await new Promise((resolve) => setTimeout(resolve, 1));
        now = this.now();
      }
      // With a call still in flight after the rounds above, this one asks for itself only.
      const want =
        entry && !this.#inFlight(entry, now)
          ? this.leases.want(entry, plan.leaseMs, this.config.leases.maxUnits, now, ringSlackMs(limits))
          : undefined;
      const sentAt = now;
      const ask = this.#leaseAsk(entry, want, cost);
      let d: Decision;
      try {
        const call = this.#ask(ns, name, limits, ask);
        if (entry && ask.leaseUnits) this.#settle(entry, call, sentAt, quietMs(ask, limits));
        d = await call;
      } catch (e) {
        this.#contendedAnswer(gate, name, null);
        return this.#failed(plan, cost, e);
      }
      // In the same turn as the answer is remembered: a request that waited finds the new entry, or none.
      this.#contendedAnswer(gate, name, d);
      this.#remember(name, d, cost, sentAt);
      this.#observe(name, d, unused);
      if (!d.allowed && d.blockedBy === undefined && entry) {
        // Units this isolate was leased while the call was out count as used at the object: spend them.
        now = this.now();
        const held = this.leases.spend(entry, cost, now);
        if (held) return this.#leased(plan, name, cost, entry, held, now);
      }
      const shown = this.#shown(limits, d.limitsOverride);
      if (!d.allowed) {
        const reason = d.blockedBy !== undefined ? "blocked" : "over_limit";
        const exceeded = d.limits.map((l) => l.exceeded);
        return this.#finish(plan, shown, cost, reason, false, d.limits, exceeded, d.retryAfterMs, d.now);
      }
      // What the object has left, plus every unit this isolate holds (the new lease's included).
      const units = entry ? this.leases.holding(entry, this.now(), d.limitsOverride ?? null).units : 0;
      const states = d.limits.map((l) => withLease(l, units));
      const result = this.#finish(plan, shown, cost, "granted", true, states, [], 0, d.now);
      if (d.recordedAt) {
        this.#grants.set(result, { name, limits, recordedAt: d.recordedAt, units: cost, held: null, entry: null });
      }
      return result;
    } finally {
      stopWaiting(gate);
      this.#giveBack(ns, unused, bg);
    }
  }

  /**
   * At a limit a moment ago (the key's cached denial lapsed here), this isolate asks the object about
   * the key one request at a time, or as many at once as its last answer left units for: whether
   * this request waits (one poll) or goes, as the asker or on a pass. A request goes as the asker
   * when no call is out, or when the last one went two recent round trips ago (its request may have
   * been cancelled, or the object is slow: at most one more call per two round trips).
   */
  #mustWait(name: string, now: number, gate: Gate): boolean {
    let c = this.#contended.get(name);
    if (!c) {
      if (!this.denyCache.lapsed(name)) return stopWaiting(gate);
      if (this.#contended.size >= this.denyCache.max) {
        this.#contended.delete(this.#contended.keys().next().value as string);
      }
      c = { sentAt: now, out: 0, passes: 0, waiting: 0 };
      this.#contended.set(name, c);
    }
    if (c.passes > 0 || c.out === 0 || now - c.sentAt >= 2 * Math.max(this.leases.rttMs, WAIT_FLOOR_MS)) {
      if (c.passes > 0) c.passes -= 1;
      else c.sentAt = now;
      c.out += 1;
      gate.out = c;
      return stopWaiting(gate);
    }
    if (gate.waitingIn !== c) {
      stopWaiting(gate);
      gate.waitingIn = c;
      c.waiting += 1;
    }
    return true;
  }

  /**
   * An answer to a call that went through a contended key's queue (null: the call failed). Blocked
   * again, the cached denial answers the requests waiting; room for all of them, they all go; room for
   * fewer, that many go at once (less what is still out) and then the next asks alone.
   */
  #contendedAnswer(gate: Gate, name: string, d: Decision | null): void {
    const c = gate.out;
    if (!c) return;
    gate.out = null;
    c.out = Math.max(0, c.out - 1);
    if (!d || this.#contended.get(name) !== c) return;
    const room = d.blockedUntil > d.now ? 0 : Math.min(...d.limits.map((l) => l.remaining));
    if (room === 0 || room >= c.waiting + c.out) this.#contended.delete(name);
    else c.passes = Math.max(0, room - c.out);
  }

  /** The result value: its limits, headers, and what shadow mode and the failure mode make of it. */
  #finish(
    plan: Plan,
    shown: readonly Limit[],
    cost: number,
    reason: Reason,
    fits: boolean,
    states: readonly (HeaderState | null)[],
    exceeded: readonly boolean[],
    retryAfterMs: number,
    at: number,
    route: Route | null = null,
  ): RateLimitResult {
    let allowed = fits;
    let why = reason;
    let wait = retryAfterMs;
    const unavailable = reason === "limiter_timeout" || reason === "limiter_error";
    if (unavailable) {
      allowed = this.config.failureMode === "open";
      wait = allowed ? 0 : UNAVAILABLE_RETRY_MS;
    } else if (!fits && this.config.shadow) {
      allowed = true;
      why = "shadow";
    }
    const limits = shown.map(
      (l, i): LimitResult => ({
        name: l.name,
        limit: l.limit,
        windowMs: l.windowMs,
        remaining: states[i]?.remaining ?? null,
        resetMs: states[i]?.resetMs ?? null,
        exceeded: exceeded[i] ?? false,
      }),
    );
    const headers = new Headers();
    if (!unavailable) setRateLimitHeaders(headers, this.config.headers, shown, states, at);
    if (!allowed && Number.isFinite(wait)) headers.set("Retry-After", String(seconds(wait)));
    return {
      allowed,
      reason: why,
      plan: plan.name,
      route: route?.name ?? null,
      cost,
      retryAfterMs: wait,
      limits,
      at,
      headers,
    };
  }

  /** A request served from a lease: the object's view at the grant, plus what the lease still holds. */
  #leased(plan: Plan, name: string, cost: number, entry: KeyLeases, held: HeldLease, now: number): RateLimitResult {
    // The object's latest view (the newest lease's), plus every unit this isolate still holds: leases are
    // spent in order of expiry, not of grant, so the one spent may be the older view.
    const { latest, units } = this.leases.holding(entry, now, held.applied);
    const view = latest ?? held;
    const elapsed = now - view.sentAt;
    const states = view.limits.map((l) => ({
      remaining: l.remaining + units,
      resetMs: Math.max(0, l.resetMs - elapsed),
    }));
    const shown = this.#shown(plan.limits ?? [], held.applied);
    const result = this.#finish(plan, shown, cost, "leased", true, states, [], 0, now);
    this.#grants.set(result, {
      name,
      limits: entry.limits as readonly Limit[],
      recordedAt: held.recordedAt,
      units: cost,
      held,
      entry,
    });
    return result;
  }

  #cachedDenial(
    plan: Plan,
    limits: readonly Limit[],
    cost: number,
    blocked: Blocked,
    retryAt: number,
    now: number,
    route: Route | null = null,
  ): RateLimitResult {
    const states = blocked.freeAt.map((at) => (at > now ? { remaining: 0, resetMs: at - now } : null));
    const isBlock = blocked.blockedBy !== undefined && now < blocked.blockedBy;
    // A block refuses whatever the limits say: no limit is what refused it.
    const exceeded = blocked.freeAt.map((at) => !isBlock && at > now);
    const shown = this.#shown(limits, blocked.applied, route);
    return this.#finish(
      plan,
      shown,
      cost,
      isBlock ? "blocked" : "cached_denial",
      false,
      states,
      exceeded,
      retryAt - now,
      now,
      route,
    );
  }

  /** The object's call was late or failed: a result for the failure mode. */
  #failed(plan: Plan, cost: number, e: unknown, route: Route | null = null): RateLimitResult {
    const reason: Reason = e instanceof LimiterTimeout ? "limiter_timeout" : "limiter_error";
    logEvent(
      "limiter_unavailable",
      { reason, failure_mode: this.config.failureMode, overloaded: isOverloaded(e), message: errorName(e) },
      "error",
    );
    return this.#finish(plan, route?.shown ?? plan.limits ?? [], cost, reason, false, [], [], 0, this.now(), route);
  }

  /**
   * The limits to show: the plan's, or an operator's override (one list per distinct override), then
   * the route's when the request has one.
   */
  #shown(
    limits: readonly Limit[],
    override: readonly NamedLimit[] | null | undefined,
    route: Route | null = null,
  ): readonly Limit[] {
    if (!override) return route?.shown ?? limits;
    const id = route ? `${JSON.stringify(override)}\u0000${route.name}` : JSON.stringify(override);
    let view = this.#views.get(id);
    if (!view) {
      if (this.#views.size >= 1000) this.#views.clear();
      view = route ? [...(override as readonly Limit[]), ...route.limits] : (override as readonly Limit[]);
      this.#views.set(id, view);
    }
    return view;
  }

  /**
   * One call to the key's object under the deadline and retry policy. Stubs are not cached across
   * requests: workerd binds a stub to the request that made it.
   */
  #ask(ns: LimiterNamespace, name: string, limits: readonly Limit[], ask: Ask, route?: RouteBudget): Promise<Decision> {
    const start = this.now();
    return callObject(
      () =>
        (route ? ns.getByName(name).take(limits, ask, route) : ns.getByName(name).take(limits, ask)).then((d) => {
          this.leases.observeRtt(this.now() - start);
          return d;
        }),
      this.config.objectTimeoutMs,
      (e) => this.#log("limiter_retry", name, e, "warn"),
    );
  }

  /**
   * What a call for the key asks: the request's `cost`, the lease `want`ed (sized by the object from the
   * key's log when this isolate has no rate of its own for it), and the key's expired units to give back.
   */
  #leaseAsk(entry: KeyLeases | undefined, want: LeaseAsk | undefined, cost: number): Ask {
    const leaseUnits = want?.units ?? 0;
    return {
      cost,
      leaseUnits,
      leaseMs: want?.lifetimeMs ?? 0,
      leaseFromLog: entry !== undefined && leaseUnits > 0 && this.leases.fromLog(entry),
      returns: entry ? this.leases.takeReturns(entry) : [],
    };
  }

  /** Marks the key's lease call as out, and ties it to the entry: keeps the lease, then clears the mark. */
  #settle(entry: KeyLeases, call: Promise<Decision>, sentAt: number, quietForMs: number): Promise<void> {
    entry.inflightSince = sentAt;
    const done = () => {
      if (entry.inflightSince === sentAt) entry.inflightSince = null;
    };
    return call.then((d) => {
      if (d.lease) this.leases.add(entry, d.lease, sentAt, d.limits, d.limitsOverride ?? null);
      // No lease: ask for none for `quietForMs` (see quietMs()), so that requests neither wait on lease
      // calls nor make them while the object decides per request.
      else entry.quietUntil = sentAt + quietForMs;
      done();
    }, done);
  }

  /**
   * Whether the key's lease call is still out. A mark older than the object deadline is cleared: the
   * request that made the call may have been cancelled before its answer could clear it.
   */
  #inFlight(entry: KeyLeases, now: number): boolean {
    if (entry.inflightSince !== null && now - entry.inflightSince >= this.config.objectTimeoutMs) {
      entry.inflightSince = null;
    }
    return entry.inflightSince !== null;
  }

  /** Asks for the next lease in the background when the held ones run low (off the request's path). */
  #refill(ns: LimiterNamespace, plan: Plan, name: string, entry: KeyLeases, now: number, bg: Background): void {
    const limits = plan.limits ?? [];
    const want = this.leases.want(entry, plan.leaseMs, this.config.leases.maxUnits, now, ringSlackMs(limits));
    if (this.#inFlight(entry, now) || !this.leases.needsRefill(entry, now, want)) return;
    const ask = this.#leaseAsk(entry, want, 0);
    const call = this.#ask(ns, name, limits, ask);
    const settled = this.#settle(entry, call, now, quietMs(ask, limits));
    call.then(
      (d) => {
        this.#remember(name, d, 1, now, true);
        const unused: Unused[] = [];
        this.#observe(name, d, unused);
        this.#giveBack(ns, unused, bg);
      },
      (e) => this.#log("lease_refill_failed", name, e),
    );
    bg.waitUntil?.(settled);
  }

  /**
   * Acts on an operator's change seen in the object's answer: a block drops the key's leases here, and
   * leases granted under other limits than the ones now applied (an override came or went) are
   * dropped. Their unused units go into `unused`, to be given back. Other isolates do the same when
   * they next ask the object; until then they spend what they hold (at most 1/4 of the smallest
   * limit a lease, within one lease lifetime), and those units were counted when leased.
   */
  #observe(name: string, d: Decision, unused: Unused[]): void {
    if (d.blockedBy !== undefined) this.leases.drop(name, unused);
    else this.leases.dropOthers(name, d.limitsOverride ?? null, unused);
  }

  /** Gives unused units back to their keys' objects, in the background. */
  #giveBack(ns: LimiterNamespace, unused: readonly Unused[], bg: Background): void {
    for (const u of unused) {
      const call = callObject(
        () => ns.getByName(u.name).giveBack(u.limits, u.recordedAt, u.units),
        this.config.objectTimeoutMs,
      ).catch((e: unknown) => this.#log("lease_return_failed", u.name, e));
      bg.waitUntil?.(call);
    }
  }

  /**
   * Stores what the object said about the key being blocked, in local time. A lease-only answer
   * (`leaseOnly`) never clears an entry: it was not a request's decision.
   */
  #remember(name: string, d: Decision, cost: number, sentAt: number, leaseOnly = false): void {
    const blockedForMs = d.blockedUntil - d.now;
    if (blockedForMs <= 0) {
      if (!leaseOnly) this.denyCache.delete(name);
      return;
    }
    // The object decided after `sentAt`, so sentAt + its durations never runs past its own times.
    const entry: Blocked = this.denyCache.get(name, sentAt) ?? {
      until: sentAt + blockedForMs,
      freeAt: d.limits.map((l) => (l.remaining === 0 ? sentAt + l.resetMs : 0)),
      retryAt: new Map(),
      recheckAt: sentAt + DENY_RECHECK_MS,
      blockedBy: d.blockedBy === undefined ? undefined : sentAt + (d.blockedBy - d.now),
      applied: d.limitsOverride ?? null,
    };
    if (!d.allowed && cost !== 1 && !d.neverAllowed) entry.retryAt.set(cost, sentAt + d.retryAfterMs);
    this.denyCache.set(name, entry, sentAt);
  }

  /** A log line about a key's object call: the key only as its `key_id`. */
  #log(event: string, name: string, e: unknown, level: "warn" | "error" = "error"): void {
    void keyId(name).then((id) => logEvent(event, { key_id: id, message: errorName(e) }, level));
  }
}

/**
 * A key at a limit a moment ago, as this isolate asks its object about it: when a request last went
 * as the asker (local ms), how many calls that went through the queue are out, passes (requests that
 * may go at once on the last answer's room), and how many requests wait.
 */
interface Contention {
  sentAt: number;
  out: number;
  passes: number;
  waiting: number;
}

/** One request's part in a contended key's queue: the queue it went through, the one it waits in. */
interface Gate {
  out: Contention | null;
  waitingIn: Contention | null;
}

/** Takes a request out of the waiting count it is in, if any: it goes (or was answered). Always false. */
function stopWaiting(gate: Gate): false {
  if (gate.waitingIn) gate.waitingIn.waiting -= 1;
  gate.waitingIn = null;
  return false;
}

/** The deny cache entry of a route's requests: the key's name and the route's (a NUL byte is in neither). */
function routeEntry(name: string, route: Route): string {
  return `${name}\u0000${route.name}`;
}

/**
 * How long to ask for no lease once one was asked for and none came: a shortest window (the key is near or at a
 * limit); none after a first lease, sized from the key's log, which may simply have found no history.
 */
function quietMs(ask: Ask, limits: readonly Limit[]): number {
  return ask.leaseFromLog ? 0 : Math.min(...limits.map((l) => l.windowMs));
}

function withLease(l: LimitStatus, units: number): HeaderState {
  return units === 0 ? l : { remaining: l.remaining + units, resetMs: l.resetMs };
}
