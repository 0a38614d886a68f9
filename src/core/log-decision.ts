/**
 * @module What a key's log (log.ts) answers at a time `t`, its rings evicted to `t`: each limit's remaining units and
 * reset, the exact wait for a cost, and until when no request can pass. Reads only; pure.
 */

import type { Decision, LimitStatus } from "./decision.ts";
import type { Ring } from "./ring.ts";

/** Where limit `i` lives: ring and member index within it. */
export interface Place {
  readonly ring: Ring;
  readonly j: number;
}

/** What a decision is read from: where each limit lives, and the smallest limit (a cost above it never fits). */
export interface Layout {
  readonly places: readonly Place[];
  readonly minLimit: number;
}

/** Earliest time ≥ `t` at which `cost` fits every limit if nothing else is granted (∞ if never). */
export function freeAt(places: readonly Place[], t: number, cost: number): number {
  let at = t;
  for (const p of places) at = Math.max(at, p.ring.freeAt(p.j, t, cost));
  return at;
}

/** The decision at `t` in `log`; `recordedAt`, where a granted cost was recorded (left out when undefined). */
export function decisionAt(
  log: Layout,
  t: number,
  cost: number,
  outcome: { allowed: boolean; lease?: Decision["lease"]; recordedAt?: readonly number[] | undefined },
): Decision {
  const { allowed, lease = null, recordedAt } = outcome;
  const limits: LimitStatus[] = log.places.map((p) => ({
    remaining: p.ring.remaining(p.j),
    resetMs: p.ring.resetMs(p.j, t),
    exceeded: !allowed && p.ring.remaining(p.j) < cost,
  }));
  const neverAllowed = cost > log.minLimit;
  let blockedUntil = t;
  for (const p of log.places) blockedUntil = Math.max(blockedUntil, p.ring.freeAt(p.j, t, 1));
  const decision: { -readonly [K in keyof Decision]: Decision[K] } = {
    allowed,
    neverAllowed,
    cost,
    now: t,
    retryAfterMs: allowed ? 0 : neverAllowed ? Number.POSITIVE_INFINITY : freeAt(log.places, t, cost) - t,
    blockedUntil,
    limits,
    lease,
  };
  if (recordedAt !== undefined) decision.recordedAt = recordedAt;
  return decision;
}
