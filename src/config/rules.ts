/**
 * @module Parses the rules that match requests by method and path: `costs` (what a request costs) and `routes` (a
 * route's own budget). A rule that an earlier one always matches first is an error.
 */

import { normalizePath } from "../base/path.ts";
import { array, nonEmptyString, type Obj, object, optionalArray, unknownFields, wholeNumber } from "./fields.ts";
import { parseLimits } from "./limits.ts";
import { parseSettled } from "./settled.ts";
import { ConfigError, type CostRule, type Route } from "./types.ts";

/** `costs = [{ method?, path, cost }]` (or `reserve` and `settle` in place of `cost`): first match wins. */
export function parseCosts(value: unknown, root: string): CostRule[] {
  const rules = optionalArray(value, `${root}.costs`).map((c, i) => parseCost(c, `${root}.costs[${i}]`));
  shadowed(rules, `${root}.costs`);
  return rules;
}

function parseCost(value: unknown, field: string): CostRule {
  const c = object(value, field);
  unknownFields(c, ["method", "path", "cost", "reserve", "settle"], field);
  const { method, pathPrefix } = parseMatch(c, field);
  // A cost known only after the response (docs/llm.md): reserved from the request, settled from the response.
  if (c.reserve !== undefined || c.settle !== undefined) return { method, pathPrefix, ...parseSettled(c, field) };
  const cost = wholeNumber(c.cost, `${field}.cost`, { min: 0, expected: "a whole number ≥ 0 (0 means not limited)" });
  return { method, pathPrefix, cost };
}

/** A route as parsed, before it is joined to a plan's limits. */
export type RouteSetting = Omit<Route, "shown">;

/** The shape of a route's name: it names the route in headers, logs and the admin API. */
const ROUTE_NAME = /^[a-z][a-z0-9_.-]*$/;

/** `routes = [{ name, method?, path, limits }]`: first match wins; a route an earlier one always matches first is an error. */
export function parseRoutes(value: unknown, field: string, pathRequired: boolean): RouteSetting[] {
  const routes = array(value, field).map((item, i): RouteSetting => {
    const f = `${field}[${i}]`;
    const r = object(item, f);
    unknownFields(r, ["name", "method", "path", "limits"], f);
    const name = nonEmptyString(r.name, `${f}.name`);
    if (!ROUTE_NAME.test(name) || name.length > 64) {
      throw new ConfigError(
        `${f}.name: use up to 64 lower-case letters, digits, "_", "-" or ".", starting with a letter, got ${JSON.stringify(name)}`,
      );
    }
    const { method, pathPrefix } =
      r.path === undefined && !pathRequired ? { method: null, pathPrefix: null } : parseMatch(r, f);
    if (pathPrefix === null && r.method !== undefined) {
      throw new ConfigError(`${f}.path: required with a method (a route is matched on both)`);
    }
    const limits = parseLimits(r.limits, `${f}.limits`, {
      defaultName: (l) => (Array.isArray(r.limits) && r.limits.length === 1 ? name : `${name}-${l}`),
    });
    return { name, method, pathPrefix, limits };
  });
  for (const [i, r] of routes.entries()) {
    const twin = routes.findIndex((q, j) => j < i && q.name === r.name);
    if (twin !== -1) {
      throw new ConfigError(`${field}[${i}].name: ${JSON.stringify(r.name)} is already used by ${field}[${twin}]`);
    }
  }
  shadowed(routes, field);
  return routes;
}

/** Characters a URL's pathname never holds unencoded (WHATWG path percent-encode set, `\`, non-ASCII). */
const NOT_IN_PATHNAME = /[^\x21-\x7e]|["#<>?`{}\\]/;

/** A rule's `method` (optional) and `path` prefix, written as requests' normalised paths are (docs/configuration.md, "Paths"). */
function parseMatch(c: Obj, field: string): { method: string | null; pathPrefix: string } {
  const method = c.method === undefined ? null : nonEmptyString(c.method, `${field}.method`).toUpperCase();
  if (method !== null && !/^[A-Z]+$/.test(method)) {
    throw new ConfigError(`${field}.method: expected an HTTP method such as "POST", got ${JSON.stringify(c.method)}`);
  }
  const pathPrefix = nonEmptyString(c.path, `${field}.path`);
  if (!pathPrefix.startsWith("/")) {
    throw new ConfigError(`${field}.path: expected a path prefix starting with "/", got ${JSON.stringify(pathPrefix)}`);
  }
  if (NOT_IN_PATHNAME.test(pathPrefix)) {
    throw new ConfigError(
      `${field}.path: a request path never holds this unencoded (no query, fragment, spaces or non-ASCII; percent-encode them as in the URL), got ${JSON.stringify(pathPrefix)}`,
    );
  }
  // Rules match normalised paths: a prefix written otherwise could never match.
  let normal: string;
  try {
    // Through the URL parser first, as a request's path is (it resolves literal dot segments).
    normal = normalizePath(new URL(`http://rule.invalid${pathPrefix}`).pathname, "keep").match;
  } catch {
    normal = "";
  }
  if (normal !== pathPrefix) {
    throw new ConfigError(
      `${field}.path: requests are matched on their normalised path (docs/configuration.md, "Paths"), so write it as ${normal ? JSON.stringify(normal) : "a path without dot segments"}, got ${JSON.stringify(pathPrefix)}`,
    );
  }
  return { method, pathPrefix };
}

/** A rule that matches requests: an optional method and a path prefix (null: a route matched by name only). */
interface Match {
  readonly method: string | null;
  readonly pathPrefix: string | null;
}

/** Fails on a rule that an earlier one always matches first (costs, routes): it could never apply. */
function shadowed(rules: readonly Match[], field: string): void {
  for (const [i, r] of rules.entries()) {
    const path = r.pathPrefix;
    if (path === null) continue;
    const earlier = rules.findIndex(
      (q, j) =>
        j < i && q.pathPrefix !== null && (q.method === null || q.method === r.method) && path.startsWith(q.pathPrefix),
    );
    if (earlier !== -1) {
      const q = rules[earlier] as Match;
      throw new ConfigError(
        `${field}[${i}]: ${r.method ?? "any method"} ${JSON.stringify(r.pathPrefix)} never applies, every such request already matches ${field}[${earlier}] (${q.method ?? "any method"} ${JSON.stringify(q.pathPrefix)}) and the first match wins; put the more specific rule first`,
      );
    }
  }
}
