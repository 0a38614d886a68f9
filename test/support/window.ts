/**
 * @module The window judge: is a limiter strict, judged only from what a client sent and when the
 * origin saw it? Runtime-neutral (checked by both tsconfigs): e2e tests, the soak and the bench use it.
 *
 * A grant decided at d arrives at the origin at a ≥ d, and d ≥ its send time s, so d ∈ [a − J, a]
 * with J = max(a − s) over all arrivals. Arrivals inside any window of length W − J were therefore
 * decided inside one window of length W: at most N of them, if the limiter is exact.
 */

import { KeyLog, type LimitSpec } from "../../src/core/index.ts";

/** Sliding-window check of times `ts` (ms, any order): the largest count in any window `(t − w, t]`. */
export function maxInWindow(ts: readonly number[], w: number): number {
  const sorted = [...ts].sort((a, b) => a - b);
  let max = 0;
  let head = 0;
  for (let i = 0; i < sorted.length; i++) {
    while ((sorted[head] as number) <= (sorted[i] as number) - w) head += 1;
    max = Math.max(max, i - head + 1);
  }
  return max;
}

/** One request as the client saw it, and one arrival as the origin recorded it, matched by `id`. */
export interface SentAt {
  readonly id: number;
  readonly sentAt: number;
}
export interface ArrivedAt {
  readonly id: number;
  readonly at: number;
}

export interface WindowVerdict {
  readonly limit: number;
  readonly windowMs: number;
  /** `windowMs − jitter`: the window the arrivals are judged in. */
  readonly shrunkMs: number;
  /** The most arrivals in any window of `shrunkMs`; strict means `max ≤ limit`. */
  readonly max: number;
}

/**
 * Judges one key's arrivals against its limits. `jitter` is the largest send-to-arrival time;
 * an arrival whose id was never sent is an error (the origin saw something nobody asked for).
 */
export function judgeWindows(
  sent: readonly SentAt[],
  arrivals: readonly ArrivedAt[],
  limits: readonly { limit: number; windowMs: number }[],
  jitter = maxSendToArrival(sent, arrivals),
): { jitter: number; windows: WindowVerdict[] } {
  const times = arrivals.map((a) => a.at);
  const windows = limits.map((l) => ({
    limit: l.limit,
    windowMs: l.windowMs,
    shrunkMs: l.windowMs - jitter,
    max: maxInWindow(times, l.windowMs - jitter),
  }));
  return { jitter, windows };
}

/** The largest `at − sentAt` over the arrivals; throws on an arrival whose id was never sent. */
export function maxSendToArrival(sent: readonly SentAt[], arrivals: readonly ArrivedAt[]): number {
  const sentById = new Map(sent.map((s) => [s.id, s.sentAt]));
  let jitter = 0;
  for (const a of arrivals) {
    const s = sentById.get(a.id);
    if (s === undefined) throw new Error(`an arrival (id ${a.id}) that was never sent`);
    jitter = Math.max(jitter, a.at - s);
  }
  return jitter;
}

/** A request as the client timed it: sent at `sentAt`, answered at `receivedAt` (decided in between). */
export interface Timed {
  readonly sentAt: number;
  readonly receivedAt: number;
  readonly status: number;
}

/**
 * Denials that no timing could justify: a 429 decided at some d ∈ [sentAt, receivedAt] is right only if
 * one limit held N grants in (d − W, d]; a grant g was decided in [g.sentAt, g.receivedAt]. When, for every
 * limit, fewer than N grants could possibly lie in such a window, the denial was wrong whatever the
 * scheduling — an exact limiter never gives one. (Every request costs 1.) Returns those denials.
 *
 * `slackMs` widens each window backwards: with leases a unit is recorded at the object up to one lease
 * lifetime after it is spent (docs/design.md, "Future-dated grants"), so it may still count for that long after
 * leaving a window of use times; pass the lease lifetime to judge a leasing limiter by what it promises.
 */
export function unjustifiedDenials(
  requests: readonly Timed[],
  limits: readonly { limit: number; windowMs: number }[],
  slackMs = 0,
): Timed[] {
  const grants = requests.filter((r) => r.status === 200);
  return requests.filter(
    (d) =>
      d.status === 429 &&
      limits.every(
        (l) =>
          grants.filter((g) => g.sentAt <= d.receivedAt && g.receivedAt > d.sentAt - l.windowMs - slackMs).length <
          l.limit,
      ),
  );
}

/** Units recorded (or used) at a time. */
export interface Grant {
  t: number;
  cost: number;
}

/** Cost of the grants in the real window `(at − w, at]`. */
export function usedIn(grants: readonly Grant[], w: number, at: number): number {
  let sum = 0;
  for (const g of grants) if (g.t > at - w && g.t <= at) sum += g.cost;
  return sum;
}

/**
 * The guarantee, checked by a sweep over real use times: for every limit and every use at `t`,
 * the uses in `(t − W, t]` cost at most `N`. A window's count only rises at a use, so the windows
 * ending at each use cover every window. Returns the first violation or null.
 */
export function sweepViolation(uses: readonly Grant[], limits: readonly LimitSpec[]): string | null {
  for (const l of limits) {
    for (const g of uses) {
      const used = usedIn(uses, l.windowMs, g.t);
      if (used > l.limit) return `${used} > ${l.limit} in (${g.t - l.windowMs}, ${g.t}]`;
    }
  }
  return null;
}

/**
 * What an exact limiter deciding each request at its send time grants for requests of cost 1 sent at `sentAt`
 * (any order): the reference utilisation is judged against (KeyLog, no leases).
 */
export function exactGrants(sentAt: readonly number[], limits: readonly LimitSpec[]): number {
  const log = new KeyLog(limits);
  let n = 0;
  for (const t of [...sentAt].sort((a, b) => a - b)) if (log.take(t, { cost: 1 }).decision.allowed) n++;
  return n;
}
