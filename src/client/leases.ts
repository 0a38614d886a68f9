/**
 * @module The isolate's lease table: units a key's object granted ahead of use, spent here while
 * this isolate's clock is inside the lease, and settled with the key's next call (docs/design.md,
 * "Leases"). Bounded like the deny cache. How leases are sized (lease-sizing.ts), joined
 * (lease-calls.ts) and settled (settlement.ts) lives beside it; the table ties them to its entries.
 *
 * A lease asked at local time `sentAt` with lifetime `L` may be spent while the local clock reads
 * less than `sentAt + L − margin`. The object recorded the units at its own `issuedAt + L`, and
 * `issuedAt` came after `sentAt`, so every use happens before the record whenever the two clocks
 * run at the same rate; the margin absorbs small rate differences. Settlement reports, per lease,
 * the units used since the last report and the offset from `sentAt` of the last of them: the object
 * moves them to `issuedAt` plus that offset, still never earlier than a use.
 */

import type { Lease, LimitStatus, NamedLimit } from "../core/decision.ts";
import { FIRST_LEASE_UNITS, type LimitSpec, leaseMargin } from "../core/limits.ts";
import type { Settlement } from "../core/log.ts";
import {
  expire,
  type HeldLease,
  type KeyLeases,
  leaseShare,
  sameOverride,
  spendFrom,
  unitsHeld,
  unitsReturning,
  unsettled,
  type View,
} from "./held.ts";

import { answered, callOut, join, type LeaseCall, type SettlingCall, settlingOut } from "./lease-calls.ts";
import { countRequest, type LeaseAsk, leaseToAsk, NO_ASK, refillDue, sizedByObject } from "./lease-sizing.ts";
import { giveUp, IDLE_RETURN_MS, type KeySettlements, settleForCall, settleIdle } from "./settlement.ts";

export type { HeldLease, KeyLeases, View } from "./held.ts";
export type { LeaseCall } from "./lease-calls.ts";
export type { LeaseAsk } from "./lease-sizing.ts";
export { IDLE_RETURN_MS, type KeySettlements } from "./settlement.ts";

/** How a lease is asked for (see lease-sizing.ts, `leaseToAsk`): its lifetime, its most units, a young key's span. */
export interface LeaseSizing {
  readonly lifetimeMs: number;
  readonly maxUnits: number;
  /** How long a key is young (its first leases sized by the object from its log); 0 by default. */
  readonly youngMs?: number;
}

/** A lease as the key's object granted it, with the call it came with ({@link LeaseTable.add}). */
export interface LeaseGrant {
  readonly lease: Lease;
  /** Local time the call was sent at. */
  readonly sentAt: number;
  /** The object's clock when it granted the lease. */
  readonly issuedAt: number;
  /** The key's limits as the object saw them right after granting it. */
  readonly limits: readonly LimitStatus[];
  /** The limits it was granted under when an operator's override, not the plan, applied (null: the plan's). */
  readonly applied?: readonly NamedLimit[] | null;
  /** The request's own cost granted with it and recorded in its slot: its first use (at `sentAt`). */
  readonly used?: number;
}

/** How many of its latest leases an isolate remembers by id for refunds of grants settled since (a few hundred KB). */
const RETIRED_MAX = 10_000;

export class LeaseTable {
  readonly #entries = new Map<string, KeyLeases>();
  /**
   * This isolate's latest leases by id, also once they have left their key's entry (given up, expired, dropped): a
   * refund of a grant spent from one, its uses settled since, finds it here (at most {@link RETIRED_MAX}).
   */
  readonly #byId = new Map<string, { readonly name: string; readonly lease: HeldLease }>();
  /**
   * Prefixes this table's lease ids: unique to the isolate. Made with the first lease, not with the table: a limiter
   * is made at module level, where workerd allows no random values.
   */
  #idPrefix: string | null = null;
  #leases = 0;
  readonly #max: number;
  #rttMs = 0;
  /** The mean deviation of recent round trips from {@link rttMs} (ms). */
  #rttDevMs = 0;

  constructor(max = 10_000) {
    this.#max = max;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The key's entry, counting this request in its rate (created when missing; the oldest entry makes room). */
  touch(name: string, limits: readonly LimitSpec[], now: number, out: KeySettlements[]): KeyLeases {
    let e = this.#entries.get(name);
    if (!e) {
      if (this.#entries.size >= this.#max) this.#evictOldest(out);
      e = {
        name,
        limits,
        held: [],
        expired: [],
        call: null,
        view: null,
        score: 0,
        burst: 0,
        seenAt: now,
        firstSeen: now,
        quietUntil: 0,
        givingBack: 0,
      };
      this.#entries.set(name, e);
    }
    e.limits = limits;
    countRequest(e, now);
    return e;
  }

  /**
   * Per key, the units held here unspent: in leases alive, and in expired ones whose units go back with the key's
   * next call (for measurements: bench:sim reads what its isolates hold).
   */
  unspent(): Map<string, number> {
    const out = new Map<string, number>();
    for (const e of this.#entries.values()) {
      let units = 0;
      for (const h of e.held) units += h.left;
      for (const h of e.expired) units += h.left;
      if (units > 0) out.set(e.name, units);
    }
    return out;
  }

  /** The entry without counting a request, if any. */
  get(name: string): KeyLeases | undefined {
    return this.#entries.get(name);
  }

  /** Forgets a key's leases (an operator's reset or block); adds their settlement to `out`. */
  drop(name: string, out: KeySettlements[]): void {
    const e = this.#entries.get(name);
    if (!e) return;
    this.#entries.delete(name);
    const given = giveUp(e, [...e.expired, ...e.held]);
    if (given) out.push(given);
  }

  /** Forgets the key's leases granted under other limits than `applied`; adds their settlement to `out`. */
  dropOthers(name: string, applied: readonly NamedLimit[] | null, out: KeySettlements[]): void {
    const e = this.#entries.get(name);
    if (!e) return;
    const gone: HeldLease[] = [];
    for (const list of [e.held, e.expired]) {
      for (let i = list.length - 1; i >= 0; i--) {
        const h = list[i] as HeldLease;
        if (sameOverride(h.applied, applied)) continue;
        gone.push(h);
        list.splice(i, 1);
      }
    }
    // A lease granted under other limits is recorded in other rings: settled against them, where its units are.
    const given = giveUp(e, gone);
    if (given) out.push(given);
  }

  /**
   * Spends `cost` from the first lease still valid at `now` that has enough left. Expired leases
   * move to `expired`, to be settled with the key's next call.
   */
  spend(e: KeyLeases, cost: number, now: number): HeldLease | null {
    // An entry dropped since the caller took it (a block, an operator's change, eviction) has nothing to spend.
    if (this.#entries.get(e.name) !== e) return null;
    expire(e, now);
    // `held` is sorted by expiry and the expired ones are gone: every lease left is valid at `now`.
    const h = e.held.find((l) => l.left >= cost);
    if (!h) return null;
    spendFrom(h, cost, now);
    return h;
  }

  /**
   * Puts `units` spent from `h` back into it, when they are not settled yet (a refund): true when done. Back in a
   * lease still valid they may be spent again; in an expired one they are given back with its settlement. A settled
   * unit's record was moved to its use: it stays counted (spent again later, it would be used after its record).
   */
  unspend(e: KeyLeases, h: HeldLease, units: number): boolean {
    if (this.#entries.get(e.name) !== e || unsettled(h) < units || !(e.held.includes(h) || e.expired.includes(h))) {
      return false;
    }
    // The earlier uses first: the refunded use may be a later one, and the earlier ones' record is the earlier, so
    // what stays is recorded at its own use or later, never earlier.
    let rest = units;
    for (const g of h.earlier ?? []) {
      const taken = Math.min(rest, g.used);
      g.used -= taken;
      rest -= taken;
    }
    h.used -= rest;
    h.left += units;
    return true;
  }

  /** A new grant's id for `cost` spent from `h` (its handle's: the lease's id, and the grant's count). */
  grantId(h: HeldLease): string {
    return `${h.id}.${++h.grants}`;
  }

  /**
   * Refunds the grant `grantId` of `units` spent from the lease `leaseId` of the key `name`, once: true when its
   * units are back in the lease ({@link unspend}); false when the lease is not this isolate's or no longer here, its
   * uses were settled, or the grant was refunded already.
   */
  refund(name: string, leaseId: string, grantId: string, units: number): boolean {
    const e = this.#entries.get(name);
    if (!e || !grantId.startsWith(`${leaseId}.`)) return false;
    const h = e.held.find((l) => l.id === leaseId) ?? e.expired.find((l) => l.id === leaseId);
    // A grant settled since (its use re-dated to when it happened) stays counted: giving back a later, unsettled
    // use's unit in its place would leave that use without a record at or after it.
    const n = Number(grantId.slice(leaseId.length + 1));
    if (!h || !Number.isSafeInteger(n) || n <= (h.settledGrants ?? 0) || n > h.grants) return false;
    if (h.refunded?.has(grantId) || !this.unspend(e, h, units)) return false;
    h.refunded ??= new Set();
    h.refunded.add(grantId);
    return true;
  }

  /**
   * Marks the grant `grantId` of the lease `leaseId` of the key `name` refunded when its uses were settled since (its
   * units cannot go back into the lease): true when it was such a grant and not refunded before. Its quota units, not
   * its record, may then go back at the object.
   */
  refundSettled(name: string, leaseId: string, grantId: string): boolean {
    const known = this.#byId.get(leaseId);
    const h = known?.name === name ? known.lease : undefined;
    if (!h || !grantId.startsWith(`${leaseId}.`)) return false;
    const n = Number(grantId.slice(leaseId.length + 1));
    if (!Number.isSafeInteger(n) || n < 1 || n > (h.settledGrants ?? 0) || h.refunded?.has(grantId)) return false;
    h.refunded ??= new Set();
    h.refunded.add(grantId);
    return true;
  }

  /** The units of the key's leases valid at `now` under `applied` limits: what this isolate may still grant. */
  holding(e: KeyLeases, now: number, applied: readonly NamedLimit[] | null): number {
    return unitsHeld(e, now, applied);
  }

  /**
   * The units of the key's leases under `applied` limits that expired unspent by `now`: the object counts them until the
   * key's next call from here gives them back (those of leases under other limits are in other rings: freeing nothing).
   */
  expiredUnspent(e: KeyLeases, now: number, applied: readonly NamedLimit[] | null): number {
    expire(e, now);
    return unitsReturning(e, now, applied);
  }

  /**
   * The units the key's object would find free for this isolate's next call beyond what it last said: the units held
   * here and the unused ones of expired leases that call gives back first (exact with one isolate after any pause).
   */
  spare(e: KeyLeases, now: number, applied: readonly NamedLimit[] | null): number {
    return unitsHeld(e, now, applied) + unitsReturning(e, now, applied) + e.givingBack;
  }

  /**
   * The call that carried `settle` (from {@link settle}) answered or failed: its give-backs are in the object's
   * answer, or — every send failed — riding on with a settle of their own (unanswered.ts), shown again by a later
   * answer; either way no longer counted as coming.
   */
  returned(e: KeyLeases, settle: readonly Settlement[]): void {
    e.givingBack = Math.max(0, e.givingBack - givenBack(settle));
  }

  /** Keeps the object's answer about the key when it is the latest decided (answers may arrive out of order). */
  saw(e: KeyLeases, view: View): void {
    if (e.view === null || view.decidedAt >= e.view.decidedAt) e.view = view;
  }

  /**
   * The key's settlements for a call about to go out, `deciding` a request or not (settlement.ts,
   * {@link settleForCall}).
   */
  settle(e: KeyLeases, now: number, deciding = false): Settlement[] {
    // The unused units given back count as coming back while the call is out (`returned` ends that): this
    // isolate's requests before its answer show them in `r`, as the object will once it takes them back.
    const out = settleForCall(e, now, deciding);
    e.givingBack += givenBack(out);
    return out;
  }

  /** Settlements of keys not seen here for {@link IDLE_RETURN_MS}, for calls of their own (settlement.ts, {@link settleIdle}). */
  idle(now: number, out: KeySettlements[]): void {
    for (const e of this.#entries.values()) {
      if (now - e.seenAt < IDLE_RETURN_MS || e.call !== null) continue;
      const settled = settleIdle(e, now);
      if (settled) out.push(settled);
    }
  }

  /**
   * The lease to ask for (lease-sizing.ts, {@link leaseToAsk}), at this isolate's recent round trip; none while
   * the object had none to give, or while its latest answer says it would have none ({@link leaseShare}).
   */
  want(e: KeyLeases, now: number, sizing: LeaseSizing): LeaseAsk {
    const share = leaseShare(e, now);
    if (now < e.quietUntil || share === 0) return NO_ASK;
    // Far below the limits the object last decided against (an operator's override, else the plan's).
    const farBelow = share === 1 && e.view !== null ? (e.view.applied ?? e.limits) : null;
    return leaseToAsk(e, now, { youngMs: 0, ...sizing, rttMs: this.#rttMs, rttDevMs: this.#rttDevMs, farBelow });
  }

  /** Whether the key has no rate of its own here yet: its lease is sized from the object's log. */
  fromLog(e: KeyLeases): boolean {
    return sizedByObject(e);
  }

  /**
   * Records how long an object call took (ms): a moving average over recent calls, and of their deviation from it
   * (as TCP keeps its round-trip time and variation, RFC 6298).
   */
  observeRtt(ms: number): void {
    if (this.#rttMs === 0) {
      this.#rttMs = ms;
      this.#rttDevMs = ms / 2;
      return;
    }
    this.#rttDevMs += (Math.abs(ms - this.#rttMs) - this.#rttDevMs) / 4;
    this.#rttMs += (ms - this.#rttMs) / 8;
  }

  /** The recent object round trip from this isolate (ms). */
  get rttMs(): number {
    return this.#rttMs;
  }

  /** Whether to ask for the next lease now (lease-sizing.ts, {@link refillDue}): never with a call out or nothing to ask. */
  needsRefill(e: KeyLeases, now: number, want: LeaseAsk): boolean {
    if (e.call !== null || want.units === 0) return false;
    let left = 0;
    let until = now;
    for (const h of e.held) {
      if (now >= h.expiresAt) continue;
      left += h.left;
      until = Math.max(until, h.expiresAt);
    }
    return refillDue(e, now, { left, until }, this.#rttMs);
  }

  /**
   * Marks a lease call for `units` as out for the key at `now` (lease-calls.ts, {@link callOut}): requests may wait
   * for the units the object is expected to grant of them ({@link leaseShare}). A first lease (`fromLog`: sized by the
   * object from the key's log) is granted only far below every limit, and then at most {@link FIRST_LEASE_UNITS}.
   */
  calling(e: KeyLeases, units: number, now: number, fromLog = false): LeaseCall {
    const share = leaseShare(e, now);
    const expected = fromLog ? (share < 1 ? 0 : Math.min(units, FIRST_LEASE_UNITS)) : Math.floor(units * share);
    return callOut(e, { units: expected, now }, { meanMs: this.#rttMs, devMs: this.#rttDevMs });
  }

  /** Marks a call carrying the key's settlements as the key's latest (lease-calls.ts, {@link SettlingCall}). */
  settling(e: KeyLeases): SettlingCall {
    const call = settlingOut(this.#rttMs);
    e.settling = call;
    return call;
  }

  /** The key's lease call a request of `cost` may wait for, its units promised to it (lease-calls.ts, {@link join}). */
  join(e: KeyLeases, cost: number, now: number): LeaseCall | null {
    return join(e, cost, now);
  }

  /** The lease call answered (or failed): done, and no longer the key's call out. */
  answered(e: KeyLeases, call: LeaseCall): void {
    answered(e, call);
  }

  /** Keeps a lease the key's object granted (see {@link LeaseGrant}). */
  add(e: KeyLeases, grant: LeaseGrant): HeldLease {
    const { lease, sentAt, issuedAt, limits, applied = null, used = 0 } = grant;
    const expiresAt = sentAt + lease.lifetimeMs - leaseMargin(lease.lifetimeMs);
    this.#idPrefix ??= crypto.randomUUID();
    const held: HeldLease = {
      id: `${this.#idPrefix}.${++this.#leases}`,
      grants: 0,
      left: lease.units,
      used,
      lastUseAt: sentAt,
      expiresAt,
      recordedAt: lease.recordedAt,
      issuedAt,
      sentAt,
      limits,
      applied,
    };
    let i = e.held.length;
    while (i > 0 && (e.held[i - 1] as HeldLease).expiresAt > expiresAt) i--;
    e.held.splice(i, 0, held);
    if (this.#byId.size >= RETIRED_MAX) this.#byId.delete(this.#byId.keys().next().value as string);
    this.#byId.set(held.id, { name: e.name, lease: held });
    return held;
  }

  #evictOldest(out: KeySettlements[]): void {
    for (const [name, e] of this.#entries) {
      if (this.#entries.size < this.#max) break;
      if (e.call !== null) continue;
      this.drop(name, out);
    }
  }
}

/** The unused units `settle` gives back. */
function givenBack(settle: readonly Settlement[]): number {
  let units = 0;
  for (const s of settle) units += s.unused;
  return units;
}
