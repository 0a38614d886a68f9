/**
 * @module A request's path through the client (`LimiterClient.limit`): from a lease this isolate holds, from the deny
 * cache, after waiting for a lease call out that brings its units, or at the key's object — whose answer may be
 * refused here still, by this isolate's own log of grants made alone, or granted from a unit at hand.
 */

import { routeBudget } from "../config/lookup.ts";
import type { Limit } from "../config/types.ts";
import type { Decision } from "../core/decision.ts";
import type { Answers } from "./answers.ts";
import type { Blocked } from "./deny-cache.ts";
import { sameOverride } from "./held.ts";
import type { SlotAsk } from "./in-flight.ts";
import { claimRoom, refusedByLimits, settlingAnswered, settlingFailed, waitMs } from "./lease-calls.ts";
import { type HeldLease, IDLE_RETURN_MS, type KeyLeases, type KeySettlements, type LeaseCall } from "./leases.ts";
import { refusalReason, statesOf, withLease } from "./outcomes.ts";
import type { Parts } from "./parts.ts";
import { aloneBudgets, type LimitRequest, routeEntry } from "./request.ts";
import type { GrantRecord, RateLimitResult } from "./result.ts";
import { NOT_CALLED, type Without } from "./without.ts";

/** What a decision at the key's object goes on from: the limits, the key's lease entry, a slot asked for, the time. */
interface AtObject {
  readonly limits: readonly Limit[];
  readonly entry: KeyLeases | undefined;
  readonly slot: SlotAsk | undefined;
  readonly now: number;
}

export class Acquire {
  readonly #p: Parts;
  readonly #answers: Answers;
  readonly #without: Without;
  /** When this client next looks for idle keys' expired units to give back (its clock, ms). */
  #idleCheckAt = 0;

  constructor(parts: Parts, answers: Answers, without: Without) {
    this.#p = parts;
    this.#answers = answers;
    this.#without = without;
  }

  /**
   * Decides `r` under `limits`, with a concurrency `slot` asked for or not: from a lease this isolate holds, from the
   * deny cache, after waiting for a lease call out that brings its units, or at the key's object.
   */
  async decide(r: LimitRequest, limits: readonly Limit[], slot: SlotAsk | undefined): Promise<RateLimitResult> {
    const { name, plan, cost } = r;
    const { leases, denyCache, refusals } = this.#p;
    const route = r.route ?? null;
    let now = this.#p.now();
    const elsewhere: KeySettlements[] = [];
    // A request taking a concurrency slot is decided at the key's object: a lease holds no slots. Nor does a route
    // with its own budget, checked at the object with the key's limits (a lease counts only in the key's budget);
    // its deny cache entry is the route's own.
    const entry = plan.leaseMs > 0 && !slot && !route ? leases.touch(name, limits, now, elsewhere) : undefined;
    const cached = route ? routeEntry(name, route) : name;
    if (now >= this.#idleCheckAt) {
      this.#idleCheckAt = now + IDLE_RETURN_MS;
      leases.idle(now, elsewhere);
    }
    this.#p.calls.settle(r.ns, elsewhere, r.bg ?? {});
    // A request waits for no other request's call, except a lease call out that will bring enough units to cover it
    // (leases.ts, `calling`), and for no longer than that call's round trip (docs/design.md, "No waiting behind other
    // requests"). It waits on its own timers, until the answer is due and at most until it is late: workerd runs a
    // request's code only in that request's context, so an answer that arrives in another request may not wake it.
    let joined: LeaseCall | null = null;
    for (let waits = 0; ; waits++) {
      if (entry) {
        const held = leases.spend(entry, cost, now);
        if (held) {
          this.#answers.refill(r, entry, now);
          return this.#leased(r, entry, held, now);
        }
      }
      if (!this.#p.config.shadow) {
        const blocked = denyCache.get(cached, now);
        const retryAt = blocked && (cost === 1 ? blocked.until : blocked.retryAt.get(cost));
        if (blocked && retryAt !== undefined && !refusals.completesPenalty(name, plan, blocked, now)) {
          // Refused while this isolate holds units of the key's that expired unspent (the object counts them until they
          // go back): to the object, carrying them back. (Not under a block: its answer dropped the key's leases here.)
          if (entry && leases.expiredUnspent(entry, now, blocked.applied ?? null) >= cost) break;
          refusals.refusedHere(name, plan, blocked, now);
          return this.#cachedDenial(r, blocked, retryAt, now);
        }
      }
      if (waits === 0 && entry) joined = leases.join(entry, cost, now);
      const ms = waitMs(joined, now, waits);
      if (ms === null) break;
      await sleep(ms);
      now = this.#p.now();
    }
    return this.#atObject(r, { limits, entry, slot, now });
  }

  /** Decides `r` at the key's object: its own call, with a lease ask when none is out for the key. */
  async #atObject(r: LimitRequest, at: AtObject): Promise<RateLimitResult> {
    const { name, plan, cost } = r;
    const { entry, slot, now } = at;
    const { leases, alone } = this.#p;
    const state = this.#p.circuit.admit(name, now);
    if (state !== "up") {
      // Known down: no call on the request's path (docs/design.md, "When the object cannot answer").
      if (state === "probe") this.#p.calls.probe(r);
      return this.#without.decide(r, slot, NOT_CALLED);
    }
    // Slots this isolate took alone while the object could not answer still run: they count with the object's, so a
    // slot at the object and one held here never exceed `concurrency` together.
    const heldAlone = slot ? this.#p.inFlight.heldAlone(name, now) : 0;
    if (slot && heldAlone >= slot.limit) {
      return this.#p.results.here(r, { reason: "concurrency", fits: false, retryAfterMs: 1_000, at: now });
    }
    const want = entry && entry.call === null ? this.#answers.want(entry, plan, now) : undefined;
    const sentAt = now;
    const asked = this.#answers.ask(entry, want, cost, now);
    const ask = slot ? { ...asked, slot: heldAlone > 0 ? { ...slot, limit: slot.limit - heldAlone } : slot } : asked;
    const call = entry && ask.leaseUnits ? leases.calling(entry, ask.leaseUnits, now, ask.leaseFromLog) : null;
    const settling = entry && ask.settle.length > 0 ? leases.settling(entry) : null;
    let d: Decision;
    try {
      d = await this.#p.calls.take(r, this.#p.refusals.penalized(name, plan, ask));
    } catch (e) {
      if (settling) settlingFailed(settling);
      if (entry) this.#answers.ended(entry, call, ask);
      return this.#without.decide(r, slot, e);
    }
    if (settling) settlingAnswered(settling, d);
    const lease = this.#answers.took(r, d, { entry, call, ask, sentAt });
    // Grants this isolate made alone that the object had not recorded when it decided (made while this call was out,
    // or a report of them still out): the object's grant must fit this isolate's log too, else it is refused here
    // (the object's record of it only counts later: never over).
    if (d.allowed && alone?.pending(name)) {
      const checked = alone.check(aloneBudgets(r), this.#p.now(), cost);
      if (!checked.allowed) return this.#without.alone(r, checked, false, {});
    }
    if (!d.allowed && entry && d.blockedBy === undefined && !d.concurrencyFull) {
      // No refusal while a unit is at hand (docs/design.md, "What real clients do"): units a lease call of this
      // isolate brought while this request's call was out, or brings within its round trip, are this request's.
      const held = await this.#unitAtHand(entry, cost);
      if (held) {
        // The object counted this refusal towards a penalty: one fewer of those answered here is reported.
        this.#p.refusals.grantedHere(name, plan);
        return this.#leased(r, entry, held, this.#p.now());
      }
      // Refused by a limit on units of this isolate's leases that expired unspent (they may have expired while the call
      // was out): once more, carrying them back, when they and the room left cover the cost.
      const applied = d.limitsOverride ?? null;
      const unspent = refusedByLimits(d) ? this.#p.leases.expiredUnspent(entry, this.#p.now(), applied) : 0;
      if (unspent > 0 && Math.min(...d.limits.map((l) => l.remaining)) + unspent >= cost) {
        this.#p.refusals.grantedHere(name, plan);
        return this.#atObject(r, { ...at, now: this.#p.now() });
      }
      // Refused by a limit on units a settlement of this isolate's, out when it was decided, frees: once more,
      // within the room that settlement's answer shows.
      if (refusedByLimits(d) && (await this.#roomAfterSettling(entry, r, d.now))) {
        this.#p.refusals.grantedHere(name, plan);
        return this.#atObject(r, { ...at, now: this.#p.now() });
      }
    }
    if (!d.allowed) return this.#p.results.decided(r, d, { reason: refusalReason(d), fits: false });
    return this.#granted(r, d, at, lease);
  }

  /**
   * The object's grant of `r` as a result: what it has left plus every unit this isolate holds (the new lease's
   * included), and the handle a refund or a release needs — the slot taken, where the units were recorded (with a
   * lease, the cost is refunded through it: it may be settled by then).
   */
  #granted(r: LimitRequest, d: Decision, at: AtObject, lease: HeldLease | null): RateLimitResult {
    const { name, cost } = r;
    const { leases } = this.#p;
    const route = r.route ?? null;
    const { entry, limits, slot } = at;
    this.#p.alone?.saw(aloneBudgets(r), this.#p.now(), cost);
    const units = entry ? leases.spare(entry, this.#p.now(), d.limitsOverride ?? null) : 0;
    const held = slot ? this.#p.inFlight.hold(r.ns, name, slot) : null;
    const grant: GrantRecord | null = !d.recordedAt
      ? null
      : {
          ...(lease && entry ? { id: leases.grantId(lease), lease: lease.id } : { id: crypto.randomUUID() }),
          name,
          limits,
          recordedAt: d.recordedAt,
          units: cost,
          ...(route ? { route: routeBudget(route) } : {}),
          // Its units go back to the quotas of the period it was granted in, while that period lasts.
          ...(r.plan.meters ? { at: d.now } : {}),
        };
    const handle = grant || held ? { grants: grant ? [grant] : [], slot: held } : null;
    const states = statesOf(d).map((l) => withLease(l, units));
    return this.#p.results.decided(r, d, { reason: "granted", fits: true, states, handle });
  }

  /**
   * A unit for a request of `cost` the key's object refused: one this isolate holds now, or one the key's lease call
   * out brings, waited for until that call is due and at most until it is late (on this request's own timers, as in
   * {@link decide}). Null when none comes.
   */
  async #unitAtHand(entry: KeyLeases, cost: number): Promise<HeldLease | null> {
    for (let waits = 0; ; waits++) {
      const now = this.#p.now();
      const held = this.#p.leases.spend(entry, cost, now);
      const ms = held ? null : waitMs(entry.call, now, waits);
      if (ms === null) return held;
      await sleep(ms);
    }
  }

  /**
   * Whether `r`, refused at the key's object at `refusedAt` (its clock), may ask once more: the key's latest call
   * carrying settlements was decided after the refusal, with room for `r` in its answer (claimed: no more units are
   * asked for again than it showed). Calls are not ordered: a burst's other calls may reach the object before the one
   * that gives back what the key's expired leases did not use, and be refused on those units. While that call is out
   * its answer is waited for, on this request's own timers (as in {@link decide}): at most until its deadline.
   */
  async #roomAfterSettling(entry: KeyLeases, r: LimitRequest, refusedAt: number): Promise<boolean> {
    const settling = entry.settling ?? null;
    while (settling !== null && !settling.done) await sleep(settling.stepMs);
    return claimRoom(settling, refusedAt, r.cost);
  }

  /**
   * A request served from a lease: the object's latest answer about the key, plus every unit this isolate still
   * holds (exact with one isolate, as of that answer).
   */
  #leased(r: LimitRequest, entry: KeyLeases, held: HeldLease, now: number): RateLimitResult {
    const { plan, name, cost } = r;
    const { leases } = this.#p;
    this.#p.alone?.saw(aloneBudgets(r), now, cost);
    const units = leases.spare(entry, now, held.applied);
    const seen = entry.view;
    const view = seen && sameOverride(seen.applied, held.applied) ? seen : held;
    const elapsed = now - view.sentAt;
    const states = view.limits.map((l) => ({
      remaining: l.remaining + units,
      resetMs: Math.max(0, l.resetMs - elapsed),
    }));
    const grant = {
      id: leases.grantId(held),
      lease: held.id,
      name,
      limits: entry.limits,
      recordedAt: held.recordedAt,
      units: cost,
      // A quota counted the lease's units when its object granted it: a refund after its uses were settled goes there.
      ...(plan.meters?.quotas ? { at: held.issuedAt } : {}),
    };
    const handle = { grants: [grant], slot: null };
    const shown = this.#p.results.shown(plan, held.applied);
    // Never a route's request: those are decided at the key's object.
    return this.#p.results.here({ plan, cost }, { shown, reason: "leased", fits: true, states, at: now, handle });
  }

  /** A refusal from the deny cache: a block's until it ends, else the limits' that are full until their `freeAt`. */
  #cachedDenial(r: LimitRequest, blocked: Blocked, retryAt: number, now: number): RateLimitResult {
    const states = blocked.freeAt.map((at) => (at > now ? { remaining: 0, resetMs: at - now } : null));
    const isBlock = blocked.blockedBy !== undefined && now < blocked.blockedBy;
    // A block refuses whatever the limits say: no limit is what refused it.
    const exceeded = blocked.freeAt.map((at) => !isBlock && at > now);
    return this.#p.results.here(r, {
      shown: this.#p.results.shown(r.plan, blocked.applied, r.route ?? null),
      reason: isBlock ? (blocked.cause ?? "blocked") : "cached_denial",
      fits: false,
      states,
      exceeded,
      retryAfterMs: retryAt - now,
      at: now,
    });
  }
}

/** Resolves after `ms` on this request's own timer. */
function sleep(ms: number): Promise<unknown> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
