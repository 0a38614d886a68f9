/**
 * @module The client: the isolate side of one limiter. It owns its lease table, deny cache and
 * round-trip estimate; its clock is an input and every call takes the object namespace; it
 * returns one {@link RateLimitResult} per decision — the value the headers, the logs, Analytics
 * Engine, the proxy and the library's users all read. Two clients share nothing.
 *
 * Its parts (parts.ts): a request's path (acquire.ts), what a call asks and what its answer leaves here (answers.ts),
 * the object calls under the failure policy (calls.ts), deciding without the object (without.ts), the penalty counts
 * (refusals.ts), and the results (outcomes.ts).
 */

import type { LimiterConfig } from "../config/types.ts";
import type { Decision } from "../core/decision.ts";
import type { Background, LimiterNamespace } from "../protocol.ts";
import { Acquire } from "./acquire.ts";
import { type AloneGrant, AloneLogs } from "./alone.ts";
import { Answers } from "./answers.ts";
import { ObjectCalls } from "./calls.ts";
import { Circuit } from "./circuit.ts";
import { DenyCache } from "./deny-cache.ts";
import { InFlight } from "./in-flight.ts";
import { type KeySettlements, LeaseTable } from "./leases.ts";
import { Outcomes, refusalReason, shownOf, statesOf, withLease } from "./outcomes.ts";
import type { Parts } from "./parts.ts";
import { Refusals } from "./refusals.ts";
import type { LimitRequest, PeekRequest } from "./request.ts";
import { checkGrant, type GrantRecord, type RateLimitResult, type SlotRecord } from "./result.ts";
import { Without } from "./without.ts";

export type { Background, LimiterNamespace, LimiterStub } from "../protocol.ts";
export { DENY_RECHECK_MS } from "./answers.ts";
export type { LimitRequest, PeekRequest } from "./request.ts";
export { type LimitResult, type RateLimitResult, type Reason, UNAVAILABLE_RETRY_MS, violated } from "./result.ts";

/** A client's inputs besides its configuration. */
export interface ClientOptions {
  /** The isolate's clock (ms since the epoch); `Date.now` by default. */
  readonly clock?: () => number;
}

export class LimiterClient<C extends LimiterConfig = LimiterConfig> {
  readonly config: C;
  /** Units leased ahead, per key (exposed for tests and measurements). */
  readonly leases = new LeaseTable();
  /** Keys no request can pass before a known time (exposed for tests and measurements). */
  readonly denyCache = new DenyCache();
  readonly #clock: () => number;
  /** What the client's paths share. */
  readonly #p: Parts;
  readonly #without: Without;
  readonly #acquire: Acquire;

  constructor(config: C, options: ClientOptions = {}) {
    this.config = config;
    this.#clock = options.clock ?? Date.now;
    const now = () => this.#clock();
    const circuit = new Circuit(config.objectTimeoutMs);
    const alone = config.failureMode === "local" ? new AloneLogs(config.fallbackShare) : null;
    const calls = new ObjectCalls({ config, now, leases: this.leases, circuit, alone });
    this.#p = {
      config,
      now,
      leases: this.leases,
      denyCache: this.denyCache,
      inFlight: new InFlight(config.objectTimeoutMs, (event, name, e, level) => calls.log(event, name, e, level), now),
      circuit,
      alone,
      refusals: new Refusals(),
      calls,
      results: new Outcomes(config),
    };
    this.#without = new Without(this.#p);
    this.#acquire = new Acquire(this.#p, new Answers(this.#p), this.#without);
  }

  /** The client's clock (ms). */
  now(): number {
    return this.#clock();
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
    if (!limits) return this.#p.results.unlimited(plan, cost, this.now());
    const all = shownOf(plan, route);
    // Every limit is at least 1, so only a cost above 1 can exceed one.
    if (cost > 1 && all.some((l) => cost > l.limit)) {
      const exceeded = all.map((l) => cost > l.limit);
      const never = Number.POSITIVE_INFINITY;
      return this.#p.results.here(r, {
        reason: "too_costly",
        fits: false,
        exceeded,
        retryAfterMs: never,
        at: this.now(),
      });
    }
    const slot = r.inFlight && plan.concurrency ? this.#p.inFlight.ask(plan.concurrency) : undefined;
    return this.#acquire.decide(r, limits, slot);
  }

  /**
   * Frees a granted request's concurrency slot (its handle's `slot`), once, from this isolate or any other. Resolves
   * false when there is none, or when the key's object did not answer (logged as `slot_release_failed`; the object
   * frees it after `concurrency_timeout`). Never rejects.
   */
  release(ns: LimiterNamespace, slot: SlotRecord | null): Promise<boolean> {
    return this.#p.inFlight.release(ns, slot);
  }

  /** Whether `slot` is held by this isolate and not yet released. */
  holdsSlot(slot: SlotRecord | null): boolean {
    return this.#p.inFlight.holds(slot);
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
    if (!plan.limits) return this.#p.results.unlimited(plan, cost, this.now());
    const state = this.#p.circuit.admit(name, this.now());
    if (state !== "up") {
      // Known down: answered without it; a probe due goes out, as for a request (docs/design.md, "When the object
      // cannot answer").
      if (state === "probe") this.#p.calls.probe({ ns, name, plan });
      return this.#without.peek({ ...r, cost, route });
    }
    let d: Decision;
    try {
      d = await this.#p.calls.peek({ ...r, cost, route });
    } catch (e) {
      return this.#without.peek({ ...r, cost, route }, e);
    }
    // Units this isolate holds on lease count as remaining, for the key's own limits (route requests never lease).
    const entry = route ? undefined : this.leases.get(name);
    const held =
      entry && d.blockedBy === undefined ? this.leases.spare(entry, this.now(), d.limitsOverride ?? null) : 0;
    const states = statesOf(d).map((l) => withLease(l, held));
    const asked = { plan, cost, route };
    if (d.allowed || (held >= cost && !d.credits?.exceeded))
      return this.#p.results.decided(asked, d, { reason: "peek", fits: true, states });
    const reason =
      d.blockedBy !== undefined || d.credits?.exceeded
        ? refusalReason(d)
        : d.neverAllowed
          ? "too_costly"
          : "over_limit";
    return this.#p.results.decided(asked, d, { reason, fits: false, states });
  }

  /**
   * Gives back exactly the units of `grant` (from a result's handle), once: to the lease it was spent from, in the
   * isolate that spent it (no call), else to the key's object, which gives back each grant id once. A refunded
   * request is not counted.
   *
   * @returns false when there was nothing to give back (already refunded or settled, or a leased grant whose lease was
   *   settled since or is another isolate's: its units were re-dated to their use and stay counted)
   * @throws TypeError for a grant that is not a handle's
   */
  async refund(ns: LimiterNamespace, grant: GrantRecord): Promise<boolean> {
    checkGrant(grant);
    // Decided alone: its units are at no object to give back (docs/configuration.md, "When the object cannot answer").
    if (grant.alone !== undefined) return false;
    if (grant.lease !== undefined) {
      if (this.leases.refund(grant.name, grant.lease, grant.id, grant.units)) return true;
      // Settled since, in this isolate: its record stays where its use put it, its quota units go back (once).
      if (grant.at === undefined || !this.leases.refundSettled(grant.name, grant.lease, grant.id)) return false;
      return this.#p.calls.refund(ns, { ...grant, recordedAt: [], quotasOnly: true });
    }
    const done = await this.#p.calls.refund(ns, grant);
    // The units are free again: this isolate's cached refusals of the key no longer hold.
    if (done) this.denyCache.deleteKey(grant.name);
    return done;
  }

  /**
   * Settles `grant` (from a result's handle) to its `actual` cost, once (docs/configuration.md, "Settled costs"): the
   * units it reserved and did not use go back as a refund gives back — to the lease it was spent from, in the isolate
   * that spent it while the lease's uses are unsettled (no call, unless there is debt); to the key's quotas once they
   * are; else to the key's object — and the units used beyond them are recorded at the object now as debt. A grant
   * settled or refunded before settles no more.
   *
   * @returns false when nothing was done (settled or refunded before, a leased grant of another isolate's)
   * @throws TypeError for a grant that is not a handle's; RangeError for an `actual` that is not a whole number ≥ 0
   */
  async settle(ns: LimiterNamespace, grant: GrantRecord, actual: number): Promise<boolean> {
    checkGrant(grant);
    checkActual(actual);
    const unused = Math.max(0, grant.units - actual);
    const debt = Math.max(0, actual - grant.units);
    if (grant.alone !== undefined) return this.#settleAlone(ns, { ...grant, alone: grant.alone }, unused, debt);
    if (grant.lease !== undefined) {
      const settle = { ...grant, recordedAt: [], units: unused, quotasOnly: true, settle: true, debt };
      if (this.leases.refund(grant.name, grant.lease, grant.id, unused))
        return debt === 0 || this.#p.calls.refund(ns, { ...settle, units: 0 });
      // Settled since, in this isolate: its record stays where its use put it; its unused quota units go back.
      // Another isolate's lease (or one this isolate no longer knows): nothing to give back here, but a debt is
      // recorded at the object all the same (it gives each grant id once).
      if (!this.leases.refundSettled(grant.name, grant.lease, grant.id))
        return debt > 0 && this.#p.calls.refund(ns, { ...settle, units: 0 });
      return (grant.at === undefined && debt === 0) || this.#p.calls.refund(ns, settle);
    }
    const done = await this.#p.calls.refund(ns, { ...grant, units: unused, settle: true, debt });
    if (done && unused > 0) this.denyCache.deleteKey(grant.name);
    return done;
  }

  /**
   * Settles a grant made alone (`failure_mode = "local"`): its unused units given back in the isolate that made it
   * while they are not yet reported (else they stay counted: `reservation_kept`, reason `reported_alone`); its debt
   * reported with the key's next call while a report of it waits or its object is known down, else recorded at the
   * object now, as any settle's (and, when that call fails, reported with the key's next call after all).
   */
  async #settleAlone(
    ns: LimiterNamespace,
    grant: GrantRecord & AloneGrant,
    unused: number,
    debt: number,
  ): Promise<boolean> {
    const { alone, circuit, calls } = this.#p;
    const { name } = grant;
    const now = this.now();
    const queue = circuit.failures(name) > 0 || alone?.pending(name) === true;
    const done = alone === null ? { returned: 0, owed: false } : alone.settle(grant, { unused, debt, queue }, now);
    if (done === null) return false;
    if (done.returned < unused) calls.kept(name, { reserved: grant.units, kept: unused - done.returned });
    if (debt === 0 || done.owed) return true;
    try {
      return await calls.refund(ns, { ...grant, units: 0, settle: true, debt });
    } catch (e) {
      // Not recorded, or not known to be: it goes with the key's next call (recorded twice, it only counts later).
      if (alone?.owe(grant, debt, this.now())) return true;
      throw e;
    }
  }

  /**
   * After an operator's change: forgets this isolate's leases (giving their unused units back) and
   * cached denial for the key, so its next request asks the object.
   */
  forget(ns: LimiterNamespace, name: string, bg: Background = {}): void {
    this.denyCache.deleteKey(name);
    const out: KeySettlements[] = [];
    this.leases.drop(name, out);
    this.#p.calls.settle(ns, out, bg);
  }
}

/**
 * Checks a settle's actual cost: a whole number ≥ 0.
 *
 * @throws RangeError naming `actual`
 */
export function checkActual(actual: number): void {
  if (!Number.isSafeInteger(actual) || actual < 0)
    throw new RangeError(`actual: expected a whole number ≥ 0, got ${String(actual)}`);
}
