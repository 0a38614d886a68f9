/**
 * @module What a request's call to its key's object asks (its cost, a lease, the settlement of the key's leases
 * here), and what the answer leaves in this isolate: the lease kept, the call's bookkeeping ended, the object's count
 * of refusals, the deny cache entry, an operator's change acted on. The next lease is asked for here too, in the
 * background, when the held ones run low.
 */

import type { Plan } from "../config/types.ts";
import type { Decision } from "../core/decision.ts";
import { ringSlackMs } from "../core/limits.ts";
import type { Settlement } from "../core/log.ts";
import type { TakeAsk } from "../protocol.ts";
import type { Blocked } from "./deny-cache.ts";
import type { HeldLease, KeyLeases, KeySettlements, LeaseAsk, LeaseCall } from "./leases.ts";
import { statesOf } from "./outcomes.ts";
import type { Parts } from "./parts.ts";
import { type LimitRequest, routeEntry } from "./request.ts";

/**
 * How long a cached denial is trusted before the object is asked again (ms): only time frees
 * capacity, except an operator's reset, unblock or override, which every isolate then sees within
 * this long. A flood costs the object one call per key, isolate and interval.
 */
export const DENY_RECHECK_MS = 1000;

/** What a call for a key asks: its settlement always there, empty when there is nothing to settle. */
export type Asked = TakeAsk & { readonly settle: readonly Settlement[] };

/** A call that went out: the key's lease entry (none: the request does not lease), its lease call, its ask, when. */
export interface Sent {
  readonly entry: KeyLeases | undefined;
  readonly call: LeaseCall | null;
  readonly ask: Asked;
  readonly sentAt: number;
  /** A lease call of its own, no request's decision: its answer never clears the key's deny cache entry. */
  readonly leaseOnly?: boolean;
}

export class Answers {
  readonly #p: Parts;

  constructor(parts: Parts) {
    this.#p = parts;
  }

  /**
   * What a call for the key asks: the request's `cost`, the lease `want`ed (sized by the object from the
   * key's log when this isolate has no rate of its own for it), and the settlement of the key's leases here.
   */
  ask(entry: KeyLeases | undefined, want: LeaseAsk | undefined, cost: number, now: number): Asked {
    const leaseUnits = want?.units ?? 0;
    return {
      cost,
      leaseUnits,
      leaseMs: want?.lifetimeMs ?? 0,
      leaseLeadMs: want?.leadMs ?? 0,
      leaseFromLog: entry !== undefined && leaseUnits > 0 && this.#p.leases.fromLog(entry),
      settle: entry ? this.#p.leases.settle(entry, now, cost > 0) : [],
    };
  }

  /** The lease to ask for the key of `entry` under `plan` at `now` (leases.ts, `want`). */
  want(entry: KeyLeases, plan: Plan, now: number): LeaseAsk {
    const sizing = {
      lifetimeMs: plan.leaseMs,
      maxUnits: this.#p.config.leases.maxUnits,
      youngMs: ringSlackMs(plan.limits ?? []),
    };
    return this.#p.leases.want(entry, now, sizing);
  }

  /**
   * The object answered `d` to the call `s` for `r`: keeps the lease it brought, ends the call's bookkeeping, and
   * keeps what it said of the key's refusals, of it being blocked, and of an operator's change.
   *
   * @returns the lease kept, if any
   */
  took(r: LimitRequest, d: Decision, s: Sent): HeldLease | null {
    const { name } = r;
    const lease = s.entry ? this.#keep(s.entry, d, s.sentAt, s.ask) : null;
    if (s.entry) this.ended(s.entry, s.call, s.ask);
    this.#p.refusals.saw(name, d);
    const cached = r.route ? routeEntry(name, r.route) : name;
    this.#remember(cached, d, { cost: s.leaseOnly ? 1 : r.cost, sentAt: s.sentAt, leaseOnly: s.leaseOnly === true });
    this.#observe(r, d);
    return lease;
  }

  /**
   * The call that carried `ask` for the key of `entry` (and its lease `call`, if any) answered or failed: its
   * settlement's give-backs are no longer coming (leases.ts, `returned`), and its lease call is no longer out.
   */
  ended(entry: KeyLeases, call: LeaseCall | null, ask: Asked): void {
    this.#p.leases.returned(entry, ask.settle);
    if (call) this.#p.leases.answered(entry, call);
  }

  /** Asks for the next lease in the background when the held ones run low (off the request's path). */
  refill(r: LimitRequest, entry: KeyLeases, now: number): void {
    const { name, plan } = r;
    const { leases, calls } = this.#p;
    // Not while the key's object is known down: its probe finds it up first.
    if (this.#p.circuit.failures(name) > 0) return;
    const want = this.want(entry, plan, now);
    if (!leases.needsRefill(entry, now, want)) return;
    const ask = this.ask(entry, want, 0, now);
    const call = leases.calling(entry, want.units, now, ask.leaseFromLog);
    const done = calls.take(r, this.#p.refusals.penalized(name, plan, ask)).then(
      (d) => {
        this.took(r, d, { entry, call, ask, sentAt: now, leaseOnly: true });
      },
      (e) => {
        this.ended(entry, call, ask);
        calls.log("lease_refill_failed", name, e);
      },
    );
    r.bg?.waitUntil?.(done);
  }

  /**
   * Keeps the lease an answer brought (returned), or (a lease was asked for and none came, the key being near or at
   * a limit) asks for none for a shortest window: requests then neither wait for lease calls nor make them. Not after
   * a first lease sized from the key's log, which may simply have found no history. A request's own cost granted
   * with the lease is recorded with it: it counts as the lease's first use, settled like the others.
   */
  #keep(entry: KeyLeases, d: Decision, sentAt: number, ask: TakeAsk): HeldLease | null {
    const { leases, alone } = this.#p;
    leases.saw(entry, { limits: d.limits, decidedAt: d.now, sentAt, applied: d.limitsOverride ?? null });
    // Not while grants made alone wait to be recorded: the object sized it without them, and a lease's uses are not
    // checked against this isolate's log. Its units stay counted at the object until they expire.
    if (d.lease && alone?.pending(entry.name)) return null;
    if (d.lease) {
      const used = d.allowed ? ask.cost : 0;
      return leases.add(entry, {
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

  /**
   * Acts on an operator's change seen in the object's answer: a block drops the key's leases here, and
   * leases granted under other limits than the ones now applied (an override came or went) are
   * dropped, and settled with the key's object in the background. Other isolates do the same when they next ask the
   * object; until then they spend what they hold (at most 1/4 of the smallest limit a lease, within
   * one lease lifetime), and those units were counted when leased.
   */
  #observe(r: LimitRequest, d: Decision): void {
    const dropped: KeySettlements[] = [];
    if (d.blockedBy !== undefined) this.#p.leases.drop(r.name, dropped);
    else this.#p.leases.dropOthers(r.name, d.limitsOverride ?? null, dropped);
    this.#p.calls.settle(r.ns, dropped, r.bg ?? {});
  }

  /**
   * Stores what the object said about the key being blocked, in local time, for the call sent at `sentAt` asking
   * for `cost`. A lease-only answer (`leaseOnly`) never clears an entry: it was not a request's decision.
   */
  #remember(name: string, d: Decision, call: { cost: number; sentAt: number; leaseOnly: boolean }): void {
    const { cost, sentAt, leaseOnly } = call;
    const { denyCache } = this.#p;
    const blockedForMs = d.blockedUntil - d.now;
    if (blockedForMs <= 0) {
      if (!leaseOnly) denyCache.delete(name);
      return;
    }
    // The object decided after `sentAt`, so sentAt + its durations never runs past its own times. An entry kept for
    // the limits is kept (with what it learnt of other costs) unless a block now refuses the key.
    const kept = denyCache.get(name, sentAt);
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
    denyCache.set(name, entry, sentAt);
  }
}
