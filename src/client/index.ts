/**
 * @module The client: the isolate side of one limiter. It owns its lease table, deny cache and
 * round-trip estimate; its clock is an input and every call takes the object namespace; it
 * returns one {@link RateLimitResult} per decision — the value the headers, the logs, Analytics
 * Engine, the proxy and the library's users all read. Two clients share nothing.
 */

import { keyId, logEvent } from "../base/log.ts";
import { routeBudget } from "../config/lookup.ts";
import type { Limit, LimiterConfig, Plan, Route, ShownLimit } from "../config/types.ts";
import type { Decision, LimitStatus, NamedLimit } from "../core/decision.ts";
import { ringSlackMs } from "../core/limits.ts";
import type { AloneReport, Background, LimiterNamespace, TakeAsk } from "../protocol.ts";
import { type AloneBudgets, AloneLogs } from "./alone.ts";
import { Circuit } from "./circuit.ts";
import { type Blocked, DenyCache } from "./deny-cache.ts";
import type { HeaderState } from "./headers.ts";
import { sameOverride } from "./held.ts";
import { InFlight, type SlotAsk } from "./in-flight.ts";
import { waitMs } from "./lease-calls.ts";
import {
  type HeldLease,
  IDLE_RETURN_MS,
  type KeyLeases,
  type KeySettlements,
  type LeaseAsk,
  type LeaseCall,
  LeaseTable,
} from "./leases.ts";
import { callObject, errorName, isOverloaded, LimiterTimeout } from "./policy.ts";
import {
  checkGrant,
  type GrantRecord,
  type Handle,
  type Outcome,
  type RateLimitResult,
  type Reason,
  resultOf,
  type SlotRecord,
  UNAVAILABLE_RETRY_MS,
} from "./result.ts";

export type { Background, LimiterNamespace, LimiterStub } from "../protocol.ts";
export { type LimitResult, type RateLimitResult, type Reason, UNAVAILABLE_RETRY_MS, violated } from "./result.ts";

/** One request as the pipeline hands it to the client: who is asking, for what, under which plan, and where. */
export interface LimitRequest {
  /** The limiter's objects (`env[binding]`). */
  readonly ns: LimiterNamespace;
  /** The object name of the key (or client address) the request counts against. */
  readonly name: string;
  readonly plan: Plan;
  /** The request's units, a whole number ≥ 1. */
  readonly cost: number;
  /** The runtime's `waitUntil`: lease refills, give-backs and refunds outlive the response. */
  readonly bg?: Background;
  /** The route whose budget the request must fit as well (docs/configuration.md, "Per-route budgets"). */
  readonly route?: Route | null;
  /** With a plan's `concurrency`, a granted request takes one of the key's slots. */
  readonly inFlight?: boolean;
}

/** A request to read a key's state ({@link LimiterClient.peek}): a {@link LimitRequest}'s key, plan, cost and route. */
export type PeekRequest = Pick<LimitRequest, "ns" | "name" | "plan" | "route"> & { readonly cost?: number };

/** What a decision at the key's object goes on from: the limits, the key's lease entry, a slot asked for, the time. */
interface AtObject {
  readonly limits: readonly Limit[];
  readonly entry: KeyLeases | undefined;
  readonly slot: SlotAsk | undefined;
  readonly now: number;
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

export class LimiterClient<C extends LimiterConfig = LimiterConfig> {
  readonly config: C;
  /** Units leased ahead, per key (exposed for tests and measurements). */
  readonly leases = new LeaseTable();
  /** Keys no request can pass before a known time (exposed for tests and measurements). */
  readonly denyCache = new DenyCache();
  readonly #clock: () => number;
  /** An operator's override limits as `Limit` lists, one per distinct override (and route). */
  readonly #views = new Map<string, readonly ShownLimit[]>();
  /** Per key: refusals answered from the deny cache since its last call, sent with the next (a penalty counts them). */
  readonly #refusals = new Map<string, number>();
  /** Per key: the refusals its object had counted towards the plan's penalty at its latest answer. */
  readonly #objectRefusals = new Map<string, number>();
  /** When this client next looks for idle keys' expired units to give back (its clock, ms). */
  #idleCheckAt = 0;
  /** Concurrency slots held by granted requests, until released. */
  readonly #inFlight: InFlight;
  /** Keys whose objects this isolate knows to be down: not called until a probe finds them up. */
  readonly #circuit: Circuit;
  /** With `failure_mode = "local"`: this isolate's own logs of its keys, decided against while their objects are down. */
  readonly #alone: AloneLogs | null;

  constructor(config: C, options: ClientOptions = {}) {
    this.config = config;
    this.#clock = options.clock ?? Date.now;
    this.#inFlight = new InFlight(config.objectTimeoutMs, (event, name, e, level) => this.#log(event, name, e, level));
    this.#circuit = new Circuit(config.objectTimeoutMs);
    this.#alone = config.failureMode === "local" ? new AloneLogs(config.fallbackShare) : null;
  }

  /** The client's clock (ms). */
  now(): number {
    return this.#clock();
  }

  /**
   * `ask` with the plan's penalty (docs/configuration.md, "Penalties") and the refusals this isolate answered
   * for the key from its deny cache since its last call; they count at the object as its own refusals do.
   */
  #penalized(name: string, plan: Plan, ask: TakeAsk): TakeAsk {
    if (!plan.penalty) return ask;
    // Net of refusals the object counted that this isolate then granted from a lease (they may make it negative).
    const refused = Math.max(0, this.#refusals.get(name) ?? 0);
    this.#refusals.delete(name);
    return { ...ask, penalty: plan.penalty, refused };
  }

  /** Counts a refusal answered here by the rate limits (not by a block: refusals while blocked never count). */
  #refusedHere(name: string, plan: Plan, blocked: Blocked, now: number): void {
    if (!plan.penalty || (blocked.blockedBy !== undefined && now < blocked.blockedBy)) return;
    if (this.#refusals.size >= 10_000 && !this.#refusals.has(name)) this.#refusals.clear();
    this.#refusals.set(name, (this.#refusals.get(name) ?? 0) + 1);
  }

  /**
   * Whether a refusal of the key answered here could complete its plan's penalty (docs/design.md, "What real clients
   * do"): the object's count at its latest answer, the refusals answered here since, and this one. Such a refusal goes
   * to the object, which counts them all before deciding and answers with the block.
   */
  #completesPenalty(name: string, plan: Plan, blocked: Blocked, now: number): boolean {
    if (!plan.penalty || (blocked.blockedBy !== undefined && now < blocked.blockedBy)) return false;
    return (this.#objectRefusals.get(name) ?? 0) + (this.#refusals.get(name) ?? 0) + 1 >= plan.penalty.after;
  }

  /** Keeps the object's count of the key's refusals from its answer, when the call carried the penalty. */
  #sawRefusals(name: string, d: Decision): void {
    if (d.refusalsSeen === undefined) return;
    if (this.#objectRefusals.size >= 10_000 && !this.#objectRefusals.has(name)) this.#objectRefusals.clear();
    this.#objectRefusals.set(name, d.refusalsSeen);
  }

  /** The result value of an outcome, shaped by this client's settings (result.ts, {@link resultOf}). */
  #result(o: Outcome): RateLimitResult {
    return resultOf(this.config, o);
  }

  /**
   * Decides a request of `cost` units for the object `name` under `plan`: from a lease this
   * isolate holds, from the deny cache, or from the key's object (which may grant a lease with
   * it). Never rejects: a late or failed object call is a `limiter_timeout` or `limiter_error`
   * result, allowed as `failure_mode` says. With `inFlight` and a plan with `concurrency`, a granted request holds a
   * concurrency slot until {@link release} (such a key is decided at its object per request: no leases).
   *
   * @throws RangeError when `cost` is not a whole number ≥ 1
   */
  async limit(r: LimitRequest): Promise<RateLimitResult> {
    const { plan, cost } = r;
    const route = r.route ?? null;
    if (!Number.isSafeInteger(cost) || cost < 1) {
      throw new RangeError(`cost: expected a whole number ≥ 1, got ${String(cost)} (peek() reads without consuming)`);
    }
    const limits = plan.limits;
    if (!limits) return this.#result({ plan, shown: [], cost, reason: "unlimited", fits: true, at: this.now() });
    const all = shownOf(plan, route);
    // Every limit is at least 1, so only a cost above 1 can exceed one.
    if (cost > 1 && all.some((l) => cost > l.limit)) {
      const exceeded = all.map((l) => cost > l.limit);
      const never = Number.POSITIVE_INFINITY;
      return this.#result({
        plan,
        shown: all,
        cost,
        reason: "too_costly",
        fits: false,
        exceeded,
        retryAfterMs: never,
        at: this.now(),
        route,
      });
    }
    const slot = r.inFlight && plan.concurrency ? this.#inFlight.ask(plan.concurrency) : undefined;
    return this.#decide(r, limits, slot);
  }

  /**
   * Frees a granted request's concurrency slot (its handle's `slot`), once, from this isolate or any other. Resolves
   * false when there is none, or when the key's object did not answer (logged as `slot_release_failed`; the object
   * frees it after `concurrency_timeout`). Never rejects.
   */
  release(ns: LimiterNamespace, slot: SlotRecord | null): Promise<boolean> {
    return this.#inFlight.release(ns, slot);
  }

  /** Whether `slot` is held by this isolate and not yet released. */
  holdsSlot(slot: SlotRecord | null): boolean {
    return this.#inFlight.holds(slot);
  }

  /**
   * The key's state as a request of `cost` would find it, consuming nothing: `allowed` says
   * whether it would be granted now, `retryAfterMs` when it would be. Units this isolate holds
   * on lease count as remaining.
   */
  async peek(r: PeekRequest): Promise<RateLimitResult> {
    const { ns, name, plan, cost = 1 } = r;
    const route = r.route ?? null;
    if (!Number.isSafeInteger(cost) || cost < 1) {
      throw new RangeError(`cost: expected a whole number ≥ 1, got ${String(cost)}`);
    }
    const limits = plan.limits;
    if (!limits) return this.#result({ plan, shown: [], cost, reason: "unlimited", fits: true, at: this.now() });
    const state = this.#circuit.admit(name, this.now());
    if (state !== "up") {
      // Known down: answered without it; a probe due goes out, as for a request (docs/design.md, "When the object
      // cannot answer").
      if (state === "probe") this.#probe({ ns, name, plan, cost, route });
      return this.#peekWithout({ ...r, cost, route });
    }
    let d: Decision;
    try {
      d = await callObject(
        () => {
          const stub = ns.getByName(name);
          if (plan.meters) return stub.peek(limits, cost, route ? routeBudget(route) : undefined, plan.meters);
          return route ? stub.peek(limits, cost, routeBudget(route)) : stub.peek(limits, cost);
        },
        this.config.objectTimeoutMs,
        (e) => this.#log("limiter_retry", name, e, "warn"),
      );
      this.#up(name);
    } catch (e) {
      this.#down(name, e);
      return this.#peekWithout({ ...r, cost, route }, e);
    }
    const shown = this.#shown(plan, d.limitsOverride, route);
    // Units this isolate holds on lease count as remaining, for the key's own limits (route requests never lease).
    const entry = route ? undefined : this.leases.get(name);
    const held =
      entry && d.blockedBy === undefined ? this.leases.spare(entry, this.now(), d.limitsOverride ?? null) : 0;
    const states = statesOf(d).map((l) => withLease(l, held));
    const credits = d.credits?.balance;
    if (d.allowed || (held >= cost && !d.credits?.exceeded))
      return this.#result({ plan, shown, cost, reason: "peek", fits: true, states, at: d.now, route, credits });
    const reason =
      d.blockedBy !== undefined || d.credits?.exceeded
        ? refusalReason(d)
        : d.neverAllowed
          ? "too_costly"
          : "over_limit";
    const exceeded = statesOf(d).map((l) => l.exceeded);
    return this.#result({
      plan,
      shown,
      cost,
      reason,
      fits: false,
      states,
      exceeded,
      retryAfterMs: d.retryAfterMs,
      at: d.now,
      route,
      credits,
    });
  }

  /**
   * Gives back exactly the units of `grant` (from a result's handle), once: to the lease it was spent from, in the
   * isolate that spent it (no call), else to the key's object, which gives back each grant id once. A refunded
   * request is not counted.
   *
   * @returns false when there was nothing to give back (already refunded, or a leased grant whose lease was settled
   *   since or is another isolate's: its units were re-dated to their use and stay counted)
   * @throws TypeError for a grant that is not a handle's
   */
  async refund(ns: LimiterNamespace, grant: GrantRecord): Promise<boolean> {
    checkGrant(grant);
    if (grant.lease !== undefined) return this.leases.refund(grant.name, grant.lease, grant.id, grant.units);
    const { id, name, limits, recordedAt, units, route, at } = grant;
    const refunded = at === undefined ? { id, recordedAt, units } : { id, recordedAt, units, at };
    const done = await callObject(
      () => (route ? ns.getByName(name).refund(limits, refunded, route) : ns.getByName(name).refund(limits, refunded)),
      this.config.objectTimeoutMs,
      (e) => this.#log("limiter_retry", name, e, "warn"),
    );
    // The units are free again: this isolate's cached refusals of the key no longer hold.
    if (done) this.denyCache.deleteKey(name);
    return done;
  }

  /**
   * After an operator's change: forgets this isolate's leases (giving their unused units back) and
   * cached denial for the key, so its next request asks the object.
   */
  forget(ns: LimiterNamespace, name: string, bg: Background = {}): void {
    this.denyCache.deleteKey(name);
    const out: KeySettlements[] = [];
    this.leases.drop(name, out);
    this.#settleElsewhere(ns, out, bg);
  }

  /**
   * Decides `r` under `limits`, with a concurrency `slot` asked for or not: from a lease this isolate holds, from the
   * deny cache, after waiting for a lease call out that brings its units, or at the key's object.
   */
  async #decide(r: LimitRequest, limits: readonly Limit[], slot: SlotAsk | undefined): Promise<RateLimitResult> {
    const { name, plan, cost } = r;
    const route = r.route ?? null;
    let now = this.now();
    const elsewhere: KeySettlements[] = [];
    // A request taking a concurrency slot is decided at the key's object: a lease holds no slots. Nor does a route
    // with its own budget, checked at the object with the key's limits (a lease counts only in the key's budget);
    // its deny cache entry is the route's own.
    const entry = plan.leaseMs > 0 && !slot && !route ? this.leases.touch(name, limits, now, elsewhere) : undefined;
    const cached = route ? routeEntry(name, route) : name;
    if (now >= this.#idleCheckAt) {
      this.#idleCheckAt = now + IDLE_RETURN_MS;
      this.leases.idle(now, elsewhere);
    }
    this.#settleElsewhere(r.ns, elsewhere, r.bg ?? {});
    // A request waits for no other request's call, except a lease call out that will bring enough units to cover it
    // (leases.ts, `calling`), and for no longer than that call's round trip (docs/design.md, "No waiting behind other
    // requests"). It waits on its own timers, until the answer is due and at most until it is late: workerd runs a
    // request's code only in that request's context, so an answer that arrives in another request may not wake it.
    let joined: LeaseCall | null = null;
    for (let waits = 0; ; waits++) {
      if (entry) {
        const held = this.leases.spend(entry, cost, now);
        if (held) {
          this.#refill(r, entry, now);
          return this.#leased(r, entry, held, now);
        }
      }
      if (!this.config.shadow) {
        const blocked = this.denyCache.get(cached, now);
        const retryAt = blocked && (cost === 1 ? blocked.until : blocked.retryAt.get(cost));
        if (blocked && retryAt !== undefined && !this.#completesPenalty(name, plan, blocked, now)) {
          this.#refusedHere(name, plan, blocked, now);
          return this.#cachedDenial(r, blocked, retryAt, now);
        }
      }
      if (waits === 0 && entry) joined = this.leases.join(entry, cost, now);
      const ms = waitMs(joined, now, waits);
      if (ms === null) break;
      await sleep(ms);
      now = this.now();
    }
    return this.#atObject(r, { limits, entry, slot, now });
  }

  /** Decides `r` at the key's object: its own call, with a lease ask when none is out for the key. */
  async #atObject(r: LimitRequest, at: AtObject): Promise<RateLimitResult> {
    const { name, plan, cost } = r;
    const { entry, slot, now } = at;
    const state = this.#circuit.admit(name, now);
    if (state !== "up") {
      // Known down: no call on the request's path (docs/design.md, "When the object cannot answer").
      if (state === "probe") this.#probe(r);
      return this.#without(r, slot, NOT_CALLED);
    }
    const want = entry && entry.call === null ? this.#want(entry, plan, now) : undefined;
    const sentAt = now;
    const ask = slot ? { ...this.#ask(entry, want, cost, now), slot } : this.#ask(entry, want, cost, now);
    const call = entry && ask.leaseUnits ? this.leases.calling(entry, ask.leaseUnits, now, ask.leaseFromLog) : null;
    let d: Decision;
    try {
      d = await this.#call(r, this.#penalized(name, plan, ask));
    } catch (e) {
      if (entry && call) this.leases.answered(entry, call);
      if (entry) this.leases.returned(entry, ask.settle ?? []);
      return this.#without(r, slot, e);
    }
    const lease = entry ? this.#keep(entry, d, sentAt, ask) : null;
    if (entry) this.leases.returned(entry, ask.settle ?? []);
    if (entry && call) this.leases.answered(entry, call);
    this.#sawRefusals(name, d);
    this.#remember(r.route ? routeEntry(name, r.route) : name, d, { cost, sentAt });
    this.#observe(r, d);
    // Grants this isolate made alone that the object had not recorded when it decided (made while this call was out,
    // or a report of them still out): the object's grant must fit this isolate's log too, else it is refused here
    // (the object's record of it only counts later: never over).
    if (d.allowed && this.#alone?.pending(name)) {
      const alone = this.#alone.check(aloneBudgets(r), this.now(), cost);
      if (!alone.allowed) return this.#aloneResult(r, alone, false, {});
    }
    if (!d.allowed && entry && d.blockedBy === undefined && !d.concurrencyFull) {
      // No refusal while a unit is at hand (docs/design.md, "What real clients do"): units a lease call of this
      // isolate brought while this request's call was out, or brings within its round trip, are this request's.
      const held = await this.#unitAtHand(entry, cost);
      if (held) {
        // The object counted this refusal towards a penalty: one fewer of those answered here is reported.
        if (plan.penalty) this.#refusals.set(name, (this.#refusals.get(name) ?? 0) - 1);
        return this.#leased(r, entry, held, this.now());
      }
    }
    return d.allowed ? this.#granted(r, d, at, lease) : this.#refused(r, d);
  }

  /** The object's refusal of `r` as a result. */
  #refused(r: LimitRequest, d: Decision): RateLimitResult {
    const route = r.route ?? null;
    const states = statesOf(d);
    return this.#result({
      plan: r.plan,
      shown: this.#shown(r.plan, d.limitsOverride, route),
      cost: r.cost,
      reason: refusalReason(d),
      fits: false,
      states,
      exceeded: states.map((l) => l.exceeded),
      retryAfterMs: d.retryAfterMs,
      at: d.now,
      route,
      credits: d.credits?.balance,
    });
  }

  /**
   * The object's grant of `r` as a result: what it has left plus every unit this isolate holds (the new lease's
   * included), and the handle a refund or a release needs — the slot taken, where the units were recorded (with a
   * lease, the cost is refunded through it: it may be settled by then).
   */
  #granted(r: LimitRequest, d: Decision, at: AtObject, lease: HeldLease | null): RateLimitResult {
    const { name, cost, plan } = r;
    const route = r.route ?? null;
    const { entry, limits, slot } = at;
    this.#alone?.saw(aloneBudgets(r), this.now(), cost);
    const units = entry ? this.leases.spare(entry, this.now(), d.limitsOverride ?? null) : 0;
    const states = statesOf(d).map((l) => withLease(l, units));
    const held = slot ? this.#inFlight.hold(r.ns, name, slot) : null;
    const grant: GrantRecord | null = !d.recordedAt
      ? null
      : {
          ...(lease && entry ? { id: this.leases.grantId(lease), lease: lease.id } : { id: crypto.randomUUID() }),
          name,
          limits,
          recordedAt: d.recordedAt,
          units: cost,
          ...(route ? { route: routeBudget(route) } : {}),
          // Its units go back to the quotas of the period it was granted in, while that period lasts.
          ...(r.plan.meters ? { at: d.now } : {}),
        };
    const handle = grant || held ? { grants: grant ? [grant] : [], slot: held } : null;
    const shown = this.#shown(plan, d.limitsOverride, route);
    const credits = d.credits?.balance;
    return this.#result({
      plan,
      shown,
      cost,
      reason: "granted",
      fits: true,
      states,
      at: d.now,
      route,
      handle,
      credits,
    });
  }

  /**
   * A unit for a request of `cost` the key's object refused: one this isolate holds now, or one the key's lease call
   * out brings, waited for until that call is due and at most until it is late (on this request's own timers, as in
   * {@link #decide}). Null when none comes.
   */
  async #unitAtHand(entry: KeyLeases, cost: number): Promise<HeldLease | null> {
    for (let waits = 0; ; waits++) {
      const now = this.now();
      const held = this.leases.spend(entry, cost, now);
      const ms = held ? null : waitMs(entry.call, now, waits);
      if (ms === null) return held;
      await sleep(ms);
    }
  }

  /**
   * A request served from a lease: the object's latest answer about the key, plus every unit this isolate still
   * holds (exact with one isolate, as of that answer).
   */
  #leased(r: LimitRequest, entry: KeyLeases, held: HeldLease, now: number): RateLimitResult {
    const { plan, name, cost } = r;
    this.#alone?.saw(aloneBudgets(r), now, cost);
    const units = this.leases.spare(entry, now, held.applied);
    const seen = entry.view;
    const view = seen && sameOverride(seen.applied, held.applied) ? seen : held;
    const elapsed = now - view.sentAt;
    const states = view.limits.map((l) => ({
      remaining: l.remaining + units,
      resetMs: Math.max(0, l.resetMs - elapsed),
    }));
    const shown = this.#shown(plan, held.applied);
    const grant = {
      id: this.leases.grantId(held),
      lease: held.id,
      name,
      limits: entry.limits,
      recordedAt: held.recordedAt,
      units: cost,
    };
    const handle = { grants: [grant], slot: null };
    return this.#result({ plan, shown, cost, reason: "leased", fits: true, states, at: now, handle });
  }

  #cachedDenial(r: LimitRequest, blocked: Blocked, retryAt: number, now: number): RateLimitResult {
    const { plan, cost } = r;
    const route = r.route ?? null;
    const states = blocked.freeAt.map((at) => (at > now ? { remaining: 0, resetMs: at - now } : null));
    const isBlock = blocked.blockedBy !== undefined && now < blocked.blockedBy;
    // A block refuses whatever the limits say: no limit is what refused it.
    const exceeded = blocked.freeAt.map((at) => !isBlock && at > now);
    const shown = this.#shown(plan, blocked.applied, route);
    return this.#result({
      plan,
      shown,
      cost,
      reason: isBlock ? (blocked.cause ?? "blocked") : "cached_denial",
      fits: false,
      states,
      exceeded,
      retryAfterMs: retryAt - now,
      at: now,
      route,
    });
  }

  /**
   * `r` without its key's object: the call failed with `e`, or the object is known down ({@link NOT_CALLED}). With
   * `failure_mode = "local"` this isolate decides alone; else the failure mode does.
   */
  #without(r: LimitRequest, slot: SlotAsk | undefined, e: unknown): RateLimitResult {
    // A key with quotas or credits is never decided alone: only its object knows what its period used, its balance.
    if (this.#alone === null || r.plan.meters) return this.#failed(r, e);
    if (e !== NOT_CALLED) this.#unavailable(e);
    const { name, cost } = r;
    const now = this.now();
    // A concurrency slot alone: counted in this isolate, at the share of the plan's `concurrency`.
    const most = slot ? Math.floor(this.config.fallbackShare * slot.limit) : 0;
    if (slot && !this.#inFlight.fitsAlone(name, most, now)) {
      const d = this.#alone.check(aloneBudgets(r), now, cost);
      return this.#aloneResult(r, d, false, { retryAfterMs: UNAVAILABLE_RETRY_MS });
    }
    const d = this.#alone.take(aloneBudgets(r), now, cost);
    const held = d.allowed && slot ? this.#inFlight.holdAlone(name, slot, now) : null;
    return this.#aloneResult(r, d, d.allowed, { handle: held ? { grants: [], slot: held } : null });
  }

  /** A decision made alone as a result (reason `limiter_fallback`): the shown limits' states as this isolate sees them. */
  #aloneResult(
    r: Pick<LimitRequest, "plan" | "cost" | "route">,
    d: Decision,
    fits: boolean,
    more: { retryAfterMs?: number; handle?: Handle | null },
  ): RateLimitResult {
    const route = r.route ?? null;
    return this.#result({
      plan: r.plan,
      shown: shownOf(r.plan, route),
      cost: r.cost,
      reason: "limiter_fallback",
      fits,
      states: d.limits,
      exceeded: fits ? [] : d.limits.map((l) => l.exceeded),
      retryAfterMs: fits ? 0 : (more.retryAfterMs ?? d.retryAfterMs),
      at: d.now,
      route,
      handle: more.handle ?? null,
    });
  }

  /** `peek()` without the key's object: alone with `failure_mode = "local"`, else the failure mode. */
  #peekWithout(r: PeekRequest & { cost: number }, e: unknown = NOT_CALLED): RateLimitResult {
    const { name, plan, cost } = r;
    const route = r.route ?? null;
    if (this.#alone === null || plan.meters) return this.#failed({ plan, cost, route, name }, e);
    const d = this.#alone.check(aloneBudgets({ name, plan, route }), this.now(), cost);
    return this.#aloneResult({ plan, cost, route }, d, d.allowed, {});
  }

  /**
   * Probes the key's object of `r`, known down, in the background: the grants this isolate made alone go with it
   * (the object records them); when it answers, the key is up and its requests call it again.
   */
  #probe(r: LimitRequest): void {
    const { ns, name } = r;
    const limits = r.plan.limits ?? [];
    const probe = this.#reporting(name, this.now(), (report) =>
      callObject(() => ns.getByName(name).recover(limits, report ?? NO_REPORT), this.config.objectTimeoutMs),
    ).catch(() => {}); // a failed probe: #reporting has marked the key down again
    r.bg?.waitUntil?.(probe);
  }

  /** Logs a request's call to its key's object that failed with `e` (`limiter_unavailable`). */
  #unavailable(e: unknown): void {
    const reason: Reason = e instanceof LimiterTimeout ? "limiter_timeout" : "limiter_error";
    const fields = {
      reason,
      failure_mode: this.config.failureMode,
      overloaded: isOverloaded(e),
      message: errorName(e),
    };
    logEvent("limiter_unavailable", fields, "error");
  }

  /** A call to `name`'s object answered: when it was known down, it is up again (logged). */
  #up(name: string): void {
    if (!this.#circuit.answered(name)) return;
    void keyId(name).then((id) => logEvent("limiter_up", { key_id: id, failure_mode: this.config.failureMode }));
  }

  /**
   * A call to `name`'s object failed with `e`: it is known down (logged when it was up). With `failure_mode =
   * "local"`, this isolate's leases of the key are dropped, their units left counted at the object until they expire:
   * from now on every request for the key is decided against this isolate's own log, which counts units only when
   * used.
   */
  #down(name: string, e: unknown): void {
    const late = e instanceof LimiterTimeout;
    if (!this.#circuit.failed(name, this.now(), late)) return;
    if (this.#alone !== null) this.leases.drop(name, []);
    const fields = { failure_mode: this.config.failureMode, late, overloaded: isOverloaded(e), message: errorName(e) };
    void keyId(name).then((id) => logEvent("limiter_down", { key_id: id, ...fields }, "error"));
  }

  /**
   * The object's call was late or failed (`e`), or the object is known down ({@link NOT_CALLED}, `name` its object's):
   * a result for the failure mode. Only a call that failed is logged.
   */
  #failed(r: Pick<LimitRequest, "plan" | "cost" | "route" | "name">, e: unknown): RateLimitResult {
    const { plan, cost } = r;
    const route = r.route ?? null;
    const late = e === NOT_CALLED ? this.#circuit.late(r.name) : e instanceof LimiterTimeout;
    const reason: Reason = late ? "limiter_timeout" : "limiter_error";
    if (e !== NOT_CALLED) this.#unavailable(e);
    return this.#result({
      plan,
      shown: shownOf(plan, route),
      cost,
      reason,
      fits: false,
      at: this.now(),
      route,
    });
  }

  /**
   * The limits to show: the plan's, or an operator's override (one list per distinct override), then
   * the route's when the request has one.
   */
  #shown(
    plan: Plan,
    override: readonly NamedLimit[] | null | undefined,
    route: Route | null = null,
  ): readonly ShownLimit[] {
    if (!override) return shownOf(plan, route);
    // One view per override, route and plan (the plan's quotas are shown after the override's limits).
    const id = `${JSON.stringify(override)}\u0000${route?.name ?? ""}\u0000${plan.name}`;
    let view = this.#views.get(id);
    if (!view) {
      if (this.#views.size >= 1000) this.#views.clear();
      view = [...override, ...(route?.limits ?? []), ...(plan.meters?.quotas ?? [])];
      this.#views.set(id, view);
    }
    return view;
  }

  /**
   * One call to the key's object under the deadline and retry policy. Stubs are not cached across
   * requests: workerd binds a stub to the request that made it. A retry carries no settlements: the
   * first try may have applied them, and moving a lease's units twice would move units not yet used.
   */
  #call(r: LimitRequest, ask: TakeAsk): Promise<Decision> {
    const { ns, name } = r;
    const limits = r.plan.limits ?? [];
    const route = r.route ? routeBudget(r.route) : undefined;
    const start = this.now();
    return this.#reporting(name, start, (report) => {
      // Grants this isolate made alone go with it, a retry's too: recorded twice, they only count later.
      const quoted = r.plan.meters ? { ...ask, ...r.plan.meters } : ask;
      const first = report ? { ...quoted, alone: report } : quoted;
      let tries = 0;
      return callObject(
        () => {
          // A retry carries no settlements and no refusal count: the first try may have applied them.
          const sent = tries++ === 0 ? first : { ...first, settle: [], refused: 0 };
          const stub = ns.getByName(name);
          return (route ? stub.take(limits, sent, route) : stub.take(limits, sent)).then((d) => {
            this.leases.observeRtt(this.now() - start);
            return d;
          });
        },
        this.config.objectTimeoutMs,
        (e) => this.#log("limiter_retry", name, e, "warn"),
      );
    });
  }

  /**
   * Runs `call` to `name`'s object at `now` with the key's grants made alone (one report out per key at a time; null:
   * none), and keeps what its outcome says: answered, the report is recorded and the object is up; failed, the report
   * goes again and the object is known down.
   */
  #reporting<T>(name: string, now: number, call: (report: AloneReport | null) => Promise<T>): Promise<T> {
    const report = this.#alone?.report(name, now) ?? null;
    return call(report).then(
      (out) => {
        if (report) this.#alone?.answered(name, true);
        this.#up(name);
        return out;
      },
      (e: unknown) => {
        if (report) this.#alone?.answered(name, false);
        this.#down(name, e);
        throw e;
      },
    );
  }

  /**
   * What a call for the key asks: the request's `cost`, the lease `want`ed (sized by the object from the
   * key's log when this isolate has no rate of its own for it), and the settlement of the key's leases here.
   */
  #ask(entry: KeyLeases | undefined, want: LeaseAsk | undefined, cost: number, now: number): TakeAsk {
    const leaseUnits = want?.units ?? 0;
    return {
      cost,
      leaseUnits,
      leaseMs: want?.lifetimeMs ?? 0,
      leaseLeadMs: want?.leadMs ?? 0,
      leaseFromLog: entry !== undefined && leaseUnits > 0 && this.leases.fromLog(entry),
      settle: entry ? this.leases.settle(entry, now, cost > 0) : [],
    };
  }

  /**
   * Keeps the lease an answer brought (returned), or (a lease was asked for and none came, the key being near or at
   * a limit) asks for none for a shortest window: requests then neither wait for lease calls nor make them. Not after
   * a first lease sized from the key's log, which may simply have found no history. A request's own cost granted
   * with the lease is recorded with it: it counts as the lease's first use, settled like the others.
   */
  #keep(entry: KeyLeases, d: Decision, sentAt: number, ask: TakeAsk): HeldLease | null {
    this.leases.saw(entry, { limits: d.limits, decidedAt: d.now, sentAt, applied: d.limitsOverride ?? null });
    // Not while grants made alone wait to be recorded: the object sized it without them, and a lease's uses are not
    // checked against this isolate's log. Its units stay counted at the object until they expire.
    if (d.lease && this.#alone?.pending(entry.name)) return null;
    if (d.lease) {
      const used = d.allowed ? ask.cost : 0;
      return this.leases.add(entry, {
        lease: d.lease,
        sentAt,
        issuedAt: d.now,
        limits: d.limits,
        applied: d.limitsOverride ?? null,
        used,
      });
    }
    if (ask.leaseUnits && !ask.leaseFromLog)
      entry.quietUntil = sentAt + Math.min(...entry.limits.map((l) => l.windowMs));
    return null;
  }

  /** The lease to ask for the key of `entry` under `plan` at `now` (leases.ts, `want`). */
  #want(entry: KeyLeases, plan: Plan, now: number): LeaseAsk {
    const sizing = {
      lifetimeMs: plan.leaseMs,
      maxUnits: this.config.leases.maxUnits,
      youngMs: ringSlackMs(plan.limits ?? []),
    };
    return this.leases.want(entry, now, sizing);
  }

  /** Asks for the next lease in the background when the held ones run low (off the request's path). */
  #refill(r: LimitRequest, entry: KeyLeases, now: number): void {
    const { name, plan } = r;
    // Not while the key's object is known down: its probe finds it up first.
    if (this.#circuit.failures(name) > 0) return;
    const want = this.#want(entry, plan, now);
    if (!this.leases.needsRefill(entry, now, want)) return;
    const ask = this.#ask(entry, want, 0, now);
    const call = this.leases.calling(entry, want.units, now, ask.leaseFromLog);
    const done = this.#call(r, this.#penalized(name, plan, ask)).then(
      (d) => {
        this.#keep(entry, d, now, ask);
        this.leases.returned(entry, ask.settle ?? []);
        this.leases.answered(entry, call);
        this.#sawRefusals(name, d);
        this.#remember(name, d, { cost: 1, sentAt: now, leaseOnly: true });
        this.#observe(r, d);
      },
      (e) => {
        this.leases.answered(entry, call);
        this.leases.returned(entry, ask.settle ?? []);
        this.#log("lease_refill_failed", name, e);
      },
    );
    r.bg?.waitUntil?.(done);
  }

  /**
   * Acts on an operator's change seen in the object's answer: a block drops the key's leases here, and
   * leases granted under other limits than the ones now applied (an override came or went) are
   * dropped, and settled with the key's object in the background. Other isolates do the same when they next ask the
   * object; until then they spend what they hold (at most 1/4 of the smallest limit a lease, within
   * one lease lifetime), and those units were counted when leased.
   */
  #observe(r: LimitRequest, d: Decision): void {
    const dropped: KeySettlements[] = [];
    if (d.blockedBy !== undefined) this.leases.drop(r.name, dropped);
    else this.leases.dropOthers(r.name, d.limitsOverride ?? null, dropped);
    this.#settleElsewhere(r.ns, dropped, r.bg ?? {});
  }

  /** Settles leases of keys this request is not about (dropped or idle ones) with their objects, in the background. */
  #settleElsewhere(ns: LimiterNamespace, out: readonly KeySettlements[], bg: Background): void {
    for (const k of out) {
      const call = callObject(() => ns.getByName(k.name).settle(k.limits, k.settle), this.config.objectTimeoutMs).catch(
        (e: unknown) => this.#log("lease_return_failed", k.name, e),
      );
      bg.waitUntil?.(call);
    }
  }

  /**
   * Stores what the object said about the key being blocked, in local time, for the call sent at `sentAt` asking
   * for `cost`. A lease-only answer (`leaseOnly`) never clears an entry: it was not a request's decision.
   */
  #remember(name: string, d: Decision, call: { cost: number; sentAt: number; leaseOnly?: boolean }): void {
    const { cost, sentAt, leaseOnly = false } = call;
    const blockedForMs = d.blockedUntil - d.now;
    if (blockedForMs <= 0) {
      if (!leaseOnly) this.denyCache.delete(name);
      return;
    }
    // The object decided after `sentAt`, so sentAt + its durations never runs past its own times. An entry kept for
    // the limits is kept (with what it learnt of other costs) unless a block now refuses the key.
    const kept = this.denyCache.get(name, sentAt);
    const entry: Blocked = (kept && d.blockedBy === undefined && kept.blockedBy === undefined ? kept : null) ?? {
      until: sentAt + blockedForMs,
      freeAt: statesOf(d).map((l) => (l.remaining === 0 ? sentAt + l.resetMs : 0)),
      retryAt: new Map(),
      recheckAt: sentAt + DENY_RECHECK_MS,
      blockedBy: d.blockedBy === undefined ? undefined : sentAt + (d.blockedBy - d.now),
      ...(d.blockCause === "penalty" ? { cause: "penalty" as const } : {}),
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

/** The budgets `r` counts in, as this isolate's own logs keep them: its key's, and its route's own. */
function aloneBudgets(r: Pick<LimitRequest, "name" | "plan" | "route">): AloneBudgets {
  return { name: r.name, limits: r.plan.limits ?? [], route: r.route ? routeBudget(r.route) : null };
}

/** What `e` is when a key's object was not called: it is known down. */
const NOT_CALLED = Symbol("not called");

/** The probe of a key with nothing decided alone: it records nothing. */
const NO_REPORT: AloneReport = { uses: [], routes: [] };

/** Resolves after `ms` on this request's own timer. */
function sleep(ms: number): Promise<unknown> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The deny cache entry of a route's requests: the key's name and the route's (a NUL byte is in neither). */
function routeEntry(name: string, route: Route): string {
  return `${name}\u0000${route.name}`;
}

function withLease(l: LimitStatus, units: number): HeaderState {
  return units === 0 ? l : { remaining: l.remaining + units, resetMs: l.resetMs };
}

/** The reason of the object's refusal: a block's, a full concurrency, an empty balance, or the limits. */
function refusalReason(d: Decision): Reason {
  if (d.blockedBy !== undefined) return blockReason(d);
  if (d.concurrencyFull) return "concurrency";
  return d.credits?.exceeded ? "credits" : "over_limit";
}

/** The reason of a refusal by a block: a penalty's, or an operator's. */
function blockReason(d: Decision): Reason {
  return d.blockCause === "penalty" ? "penalty" : "blocked";
}

/** The limits `plan`'s requests (of `route`) are shown: its limits, the route's, then its quotas. */
function shownOf(plan: Plan, route: Route | null): readonly ShownLimit[] {
  return route?.shown ?? plan.shown ?? plan.limits ?? [];
}

/** A decision's states in the order shown: its limits', then its quotas'. */
function statesOf(d: Decision): readonly LimitStatus[] {
  return d.quotas ? [...d.limits, ...d.quotas] : d.limits;
}
