/**
 * @module The look-ups every request makes in a parsed configuration: its key's plan, its route,
 * its cost. Pure.
 */

import type { RouteBudget } from "../core/budgets.ts";
import type { CostRule, LimiterConfig, Plan, Route } from "./types.ts";

/** The plan for a key: first plan whose prefix matches, else the default plan, else null. */
export function planForKey(config: LimiterConfig, key: string): Plan | null {
  for (const p of config.plans) if (key.startsWith(p.keyPrefix)) return p;
  return config.defaultPlan;
}

/** A route as the key's object takes it (its name and limits): the object keeps its budget apart by name. */
export function routeBudget(route: Route): RouteBudget {
  return { name: route.name, limits: route.limits };
}

/** The route whose budget a request of `plan` also uses: the first of the plan's routes it matches, else null. */
export function routeFor(plan: Plan, method: string, path: string): Route | null {
  for (const r of plan.routes) {
    if (r.pathPrefix !== null && (r.method === null || r.method === method) && path.startsWith(r.pathPrefix)) return r;
  }
  return null;
}

/** The first `costs` rule a request matches, else null. */
export function costRuleFor(config: LimiterConfig, method: string, path: string): CostRule | null {
  for (const r of config.costs) {
    if ((r.method === null || r.method === method) && path.startsWith(r.pathPrefix)) return r;
  }
  return null;
}

/**
 * The cost of a request decided without being read: the first matching rule's, else 1.
 *
 * @throws RangeError when that rule's reservation can only be read from the request (`reserve` from a header or its
 *   body, no `default`): pass the request, or a cost
 */
export function costFor(config: LimiterConfig, method: string, path: string): number {
  const rule = costRuleFor(config, method, path);
  if (rule === null) return 1;
  if (rule.cost === null) {
    throw new RangeError(
      `cost: the costs rule for ${rule.method ?? "any method"} ${JSON.stringify(rule.pathPrefix)} reserves from the request; decide the request itself, or give a cost`,
    );
  }
  return rule.cost;
}
