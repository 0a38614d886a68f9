/**
 * @module How the client's decisions become results (result.ts, `resultOf`): one shape for an answer of the key's
 * object, one for a decision made in this isolate, one for an unlimited plan — and the limits each shows (a plan's,
 * an operator's override, a route's, the quotas).
 */

import type { LimiterConfig, Plan, Route, ShownLimit } from "../config/types.ts";
import type { Decision, LimitStatus, NamedLimit } from "../core/decision.ts";
import type { HeaderState } from "./headers.ts";
import type { LimitRequest } from "./request.ts";
import { type Handle, type Outcome, type RateLimitResult, type Reason, resultOf } from "./result.ts";

/** The request a result is about: its plan, its cost, its route. */
export type Asked = Pick<LimitRequest, "plan" | "cost" | "route">;

/** A decision made here, as {@link Outcome} says it; the limits shown are its plan's (and route's) unless `shown` says. */
export type Here = Omit<Outcome, "plan" | "cost" | "route" | "shown"> & { readonly shown?: readonly ShownLimit[] };

/** What the key's object answered comes to: the reason, whether it fits, and (granted) its states and handle. */
export interface Answered {
  readonly reason: Reason;
  readonly fits: boolean;
  /** Per limit shown, its state (default: the decision's own, {@link statesOf}). */
  readonly states?: readonly (HeaderState | null)[];
  readonly handle?: Handle | null;
}

export class Outcomes {
  readonly #settings: Pick<LimiterConfig, "failureMode" | "shadow">;
  /** An operator's override limits as `Limit` lists, one per distinct override (and route). */
  readonly #views = new Map<string, readonly ShownLimit[]>();

  constructor(settings: Pick<LimiterConfig, "failureMode" | "shadow">) {
    this.#settings = settings;
  }

  /** An unlimited plan's request of `cost` at `at`: nothing asked, nothing shown. */
  unlimited(plan: Plan, cost: number, at: number): RateLimitResult {
    return resultOf(this.#settings, { plan, shown: [], cost, reason: "unlimited", fits: true, at });
  }

  /** A decision on `r` made in this isolate (a lease, the deny cache, alone, a failure, a cost too high). */
  here(r: Asked, o: Here): RateLimitResult {
    const route = r.route ?? null;
    return resultOf(this.#settings, { shown: shownOf(r.plan, route), ...o, plan: r.plan, cost: r.cost, route });
  }

  /**
   * The key's object's decision `d` on `r`: the limits it applied, its time and the key's balance; when it does not
   * fit, which limits refused it and the wait.
   */
  decided(r: Asked, d: Decision, o: Answered): RateLimitResult {
    const route = r.route ?? null;
    const { reason, fits, states = statesOf(d), handle } = o;
    const refused = fits ? {} : { exceeded: statesOf(d).map((l) => l.exceeded), retryAfterMs: d.retryAfterMs };
    return resultOf(this.#settings, {
      plan: r.plan,
      shown: this.shown(r.plan, d.limitsOverride, route),
      cost: r.cost,
      reason,
      fits,
      states,
      ...refused,
      at: d.now,
      route,
      ...(handle === undefined ? {} : { handle }),
      credits: d.credits?.balance,
    });
  }

  /**
   * The limits to show: the plan's, or an operator's override (one list per distinct override), then
   * the route's when the request has one.
   */
  shown(
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
}

/** The limits `plan`'s requests (of `route`) are shown: its limits, the route's, then its quotas. */
export function shownOf(plan: Plan, route: Route | null): readonly ShownLimit[] {
  return route?.shown ?? plan.shown ?? plan.limits ?? [];
}

/** A decision's states in the order shown: its limits', then its quotas'. */
export function statesOf(d: Decision): readonly LimitStatus[] {
  return d.quotas ? [...d.limits, ...d.quotas] : d.limits;
}

/** A state with `units` more remaining: units this isolate holds on lease. */
export function withLease(l: LimitStatus, units: number): HeaderState {
  return units === 0 ? l : { remaining: l.remaining + units, resetMs: l.resetMs };
}

/** The reason of the object's refusal: a block's, a full concurrency, an empty balance, or the limits. */
export function refusalReason(d: Decision): Reason {
  if (d.blockedBy !== undefined) return blockReason(d);
  if (d.concurrencyFull) return "concurrency";
  return d.credits?.exceeded ? "credits" : "over_limit";
}

/** The reason of a refusal by a block: a penalty's, or an operator's. */
function blockReason(d: Decision): Reason {
  return d.blockCause === "penalty" ? "penalty" : "blocked";
}
