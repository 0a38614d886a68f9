/**
 * @module Joining a lease call already out instead of asking for oneself (docs/design.md, "No
 * waiting behind other requests"): a request that finds no unit here may wait for the key's lease
 * call while the units it asked for cover the request, and never past that call's round trip. And a call carrying the
 * key's settlements, which a refusal it may have caused waits for ("What real clients do").
 */

import type { Decision } from "../core/decision.ts";

/**
 * A lease call out for a key: requests that find no unit here may wait for it while the units it asked
 * for cover them (`spare`), and never past `until`.
 */
export interface LeaseCall {
  /** Lease units asked for and not yet promised to a waiting request. */
  spare: number;
  /** Local time its answer is expected at: a recent round trip after it was sent. */
  readonly dueAt: number;
  /** Local time after which nobody waits for it any more (its answer is late: it may never come). */
  readonly until: number;
  /** Whether its answer came (or it failed). */
  done: boolean;
}

/** What holds a key's call out: one at a time per isolate. */
export interface CallSlot {
  call: LeaseCall | null;
}

/** The least time (ms) a request waits for a lease call out, however fast recent calls were. */
const MIN_WAIT_MS = 5;

/**
 * Marks a lease call for `units` as out for the key at `now`, expected a recent round trip (`rtt.meanMs`, at least
 * {@link MIN_WAIT_MS}) later, and late once four of the round trips' recent deviations (`rtt.devMs`) have passed after
 * that — at least {@link MIN_WAIT_MS}, at most another round trip: an answer seldom comes later, and one that does
 * is waited for no longer. (Late after two round trips always, an answer a few milliseconds past the mean — half of
 * them — kept the requests waiting for it a second round trip before they asked for themselves, three in all.)
 * Cleared with {@link answered}.
 */
export function callOut(
  slot: CallSlot,
  ask: { readonly units: number; readonly now: number },
  rtt: { readonly meanMs: number; readonly devMs: number },
): LeaseCall {
  const { units, now } = ask;
  const mean = Math.max(rtt.meanMs, MIN_WAIT_MS);
  const dueAt = now + Math.ceil(mean);
  const until = dueAt + Math.min(Math.max(4 * rtt.devMs, MIN_WAIT_MS), mean);
  const call: LeaseCall = { spare: units, dueAt, until, done: false };
  slot.call = call;
  return call;
}

/**
 * The key's lease call a request of `cost` may wait for: one out, not late, whose spare units cover the
 * request (they are promised to it). Null: the request asks for itself.
 */
export function join(slot: CallSlot, cost: number, now: number): LeaseCall | null {
  const call = slot.call;
  if (call === null || now >= call.until || call.spare < cost) return null;
  call.spare -= cost;
  return call;
}

/**
 * How long a request waits for `call` after `waits` waits (ms, on its own timer): until it is due, then at most until
 * it is late. Null when there is nothing to wait for (no call, answered, late, or two waits done): then it goes on at
 * once, without yielding. Never on a promise another request resolves: workerd runs a request's code in that
 * request's context only.
 */
export function waitMs(call: LeaseCall | null, now: number, waits: number): number | null {
  if (call === null || call.done || now >= call.until || waits >= 2) return null;
  return Math.max(1, (waits === 0 ? call.dueAt : call.until) - now);
}

/** The lease call answered (or failed): done, and no longer the key's call out. */
export function answered(slot: CallSlot, call: LeaseCall): void {
  call.done = true;
  if (slot.call === call) slot.call = null;
}

/**
 * A call out carrying the key's settlements (docs/design.md, "What real clients do"): the units they free count at the
 * object only once it decides that call, and calls are not ordered, so a request of the same burst may reach the
 * object first and be refused on them. Such a refusal waits for this call's answer and, when the object decided it
 * later than the refusal, asks once more within the room that answer shows.
 */
export interface SettlingCall {
  /** How long a refusal waiting for it sleeps at a time (ms): a recent round trip, at least 5 ms. */
  readonly stepMs: number;
  /** Whether its answer came (or it failed). */
  done: boolean;
  /** The object's clock when it decided the call (its settlements applied); −∞ until answered, or when it failed. */
  decidedAt: number;
  /** Units its answer showed free in every limit, quota and credit balance, not yet claimed by a refused request. */
  room: number;
}

/** A call carrying settlements, sent when recent round trips took `rttMs`. */
export function settlingOut(rttMs: number): SettlingCall {
  return { stepMs: Math.max(Math.ceil(rttMs), MIN_WAIT_MS), done: false, decidedAt: Number.NEGATIVE_INFINITY, room: 0 };
}

/** `call` answered `d`: decided at `d.now` (the object's clock), with what `d` shows free after it as its room. */
export function settlingAnswered(call: SettlingCall, d: Decision): void {
  call.done = true;
  call.decidedAt = d.now;
  const free = [...d.limits, ...(d.quotas ?? [])].map((l) => l.remaining);
  call.room = Math.min(...free, d.credits?.balance ?? Number.POSITIVE_INFINITY);
}

/** `call` failed: nothing to wait for, and no room (its settlements may or may not have been applied). */
export function settlingFailed(call: SettlingCall): void {
  call.done = true;
}

/**
 * Whether a refusal the object decided at `refusedAt` (its clock), for `cost` units, may ask once more after `call`:
 * answered, decided later than the refusal (its settlements were not applied yet when the refusal was), with room for
 * the cost — which the refusal then claims, so that no more units are asked for again than it showed.
 */
export function claimRoom(call: SettlingCall | null, refusedAt: number, cost: number): boolean {
  if (call === null || refusedAt >= call.decidedAt || call.room < cost) return false;
  call.room -= cost;
  return true;
}

/**
 * Whether `d` refused a request on its rate limits alone, which a settlement may free: not a cost over a limit, not a
 * quota or the credits (a settlement re-dates and gives back units in the windows). Blocks and full concurrency are
 * told apart by the caller.
 */
export function refusedByLimits(d: Decision): boolean {
  if (d.neverAllowed || d.credits?.exceeded || d.quotas?.some((q) => q.exceeded)) return false;
  return d.limits.some((l) => l.exceeded);
}
