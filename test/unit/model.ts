/**
 * @module A brute-force reference for the sliding log: a plain list of every grant, every
 * answer computed from the definition by scanning it. Slow and obviously right.
 */

import type { LimitSpec } from "../../src/core/index.ts";

export interface Grant {
  t: number;
  cost: number;
}

export interface ModelDecision {
  allowed: boolean;
  neverAllowed: boolean;
  now: number;
  retryAfterMs: number;
  blockedUntil: number;
  limits: { remaining: number; resetMs: number; exceeded: boolean }[];
}

/** Cost of the grants counted by a window `w` at time `at`: those with `t > at − w`. */
export function usedAt(grants: readonly Grant[], w: number, at: number): number {
  let sum = 0;
  for (const g of grants) if (g.t > at - w && g.t <= at) sum += g.cost;
  return sum;
}

export class Model {
  readonly grants: Grant[] = [];
  limits: readonly LimitSpec[];
  /** The latest time decided at; a restart forgets it and falls back to the newest grant. */
  clock = Number.NEGATIVE_INFINITY;

  constructor(limits: readonly LimitSpec[]) {
    this.limits = limits;
  }

  /** The times at which any count can change: now, and each grant's leaving time per window. */
  #candidates(now: number): number[] {
    const times = new Set<number>([now]);
    for (const g of this.grants) for (const l of this.limits) if (g.t + l.windowMs > now) times.add(g.t + l.windowMs);
    return [...times].sort((a, b) => a - b);
  }

  /** Earliest time ≥ now at which `cost` fits every limit in `which` without new grants. */
  #fitsAt(now: number, cost: number, which: readonly LimitSpec[]): number {
    if (which.some((l) => cost > l.limit)) return Number.POSITIVE_INFINITY;
    for (const at of this.#candidates(now)) {
      if (which.every((l) => usedAt(this.grants, l.windowMs, at) + cost <= l.limit)) return at;
    }
    throw new Error("model: no time found");
  }

  /** What a restart from storage keeps: the grants, and a clock at the newest of them. */
  restart(): void {
    this.clock = this.grants.at(-1)?.t ?? Number.NEGATIVE_INFINITY;
  }

  decide(now: number, cost: number): ModelDecision {
    const t = Math.max(Math.floor(now), this.clock);
    this.clock = t;
    const exceeded = this.limits.map((l) => usedAt(this.grants, l.windowMs, t) + cost > l.limit);
    const allowed = !exceeded.some(Boolean);
    if (allowed) {
      const last = this.grants.at(-1);
      if (last && last.t === t) last.cost += cost;
      else this.grants.push({ t, cost });
    }
    const limits = this.limits.map((l, i) => {
      const used = usedAt(this.grants, l.windowMs, t);
      const remaining = Math.max(0, l.limit - used);
      let resetMs = 0;
      if (used > 0) {
        // The first time after t at which remaining grows.
        const at = this.#candidates(t).find(
          (c) => c > t && Math.max(0, l.limit - usedAt(this.grants, l.windowMs, c)) > remaining,
        );
        if (at === undefined) throw new Error("model: remaining never grows");
        resetMs = at - t;
      }
      return { remaining, resetMs, exceeded: exceeded[i] as boolean };
    });
    return {
      allowed,
      neverAllowed: this.limits.some((l) => cost > l.limit),
      now: t,
      retryAfterMs: allowed ? 0 : this.#fitsAt(t, cost, this.limits) - t,
      blockedUntil: this.#fitsAt(t, 1, this.limits),
      limits,
    };
  }
}

/**
 * The guarantee, checked by a sweep: for every limit and every grant at `t`, the grants in
 * `(t − W, t]` cost at most `N`. Any window's count only rises at a grant, so checking the
 * windows that end at each grant covers every window. Returns the first violation or null.
 */
export function sweepViolation(grants: readonly Grant[], limits: readonly LimitSpec[]): string | null {
  for (const l of limits) {
    for (const g of grants) {
      const used = usedAt(grants, l.windowMs, g.t);
      if (used > l.limit) return `${used} > ${l.limit} in (${g.t - l.windowMs}, ${g.t}]`;
    }
  }
  return null;
}
