/**
 * @module One request as the client's paths take it (from the pipeline, or from `peek()`), and the names it is known
 * by in this isolate: its deny cache entry, and the budgets its grants made alone count in.
 */

import { routeBudget } from "../config/lookup.ts";
import type { Plan, Route } from "../config/types.ts";
import type { Background, LimiterNamespace } from "../protocol.ts";
import type { AloneBudgets } from "./alone.ts";

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

/** A request to read a key's state (`LimiterClient.peek`): a {@link LimitRequest}'s key, plan, cost and route. */
export type PeekRequest = Pick<LimitRequest, "ns" | "name" | "plan" | "route"> & { readonly cost?: number };

/** The budgets `r` counts in, as this isolate's own logs keep them: its key's, and its route's own. */
export function aloneBudgets(r: Pick<LimitRequest, "name" | "plan" | "route">): AloneBudgets {
  return { name: r.name, limits: r.plan.limits ?? [], route: r.route ? routeBudget(r.route) : null };
}

/** The deny cache entry of a route's requests: the key's name and the route's (a NUL byte is in neither). */
export function routeEntry(name: string, route: Route): string {
  return `${name}\u0000${route.name}`;
}
