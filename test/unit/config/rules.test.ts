/**
 * @module Rules matched by method and path (src/config/rules.ts): `routes`, each with its own budget. `costs`' errors
 * are in errors.test.ts, their look-up in lookup.test.ts.
 */

import { describe, expect, it } from "vitest";
import { routeFor } from "../../../src/config/lookup.ts";
import { parseLimiterConfig } from "../../../src/config/parse.ts";
import type { Plan } from "../../../src/config/types.ts";
import { configError, parse } from "./support.ts";

describe('routes (docs/configuration.md, "Per-route budgets")', () => {
  const ROUTES = [
    { name: "search", method: "post", path: "/v1/search", limits: [{ limit: 5, window: "1m" }] },
    {
      name: "export",
      path: "/v1/export/",
      limits: [
        { limit: 2, window: "1h" },
        { limit: 10, window: "1d" },
      ],
    },
  ];
  const withRoutes = (routes: unknown, more: object = {}) =>
    parse({ limits: [{ limit: 1000, window: "1m" }], routes, ...more });

  it("parses the issue's shape: a route's limits are named after it, and shown after the plan's", () => {
    const config = withRoutes(ROUTES);
    const [search, exp] = config.defaultPlan?.routes ?? [];
    expect(search).toMatchObject({
      name: "search",
      method: "POST",
      pathPrefix: "/v1/search",
      limits: [{ limit: 5, windowMs: 60_000, tickMs: 1, name: "search" }],
    });
    expect(exp?.limits.map((l) => l.name)).toEqual(["export-per-hour", "export-per-day"]);
    expect(exp?.shown.map((l) => l.name)).toEqual(["per-minute", "export-per-hour", "export-per-day"]);
    expect(routeFor(config.defaultPlan as Plan, "POST", "/v1/search/deep")).toBe(search);
    expect(routeFor(config.defaultPlan as Plan, "GET", "/v1/search")).toBeNull();
    expect(routeFor(config.defaultPlan as Plan, "GET", "/v1/export/x")).toBe(exp);
    expect(routeFor(config.defaultPlan as Plan, "GET", "/v1/export")).toBeNull();
  });

  it("gives plans the top-level routes unless they have their own; unlimited plans have none", () => {
    const config = withRoutes(ROUTES, {
      plans: [
        { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }], routes: [ROUTES[0]] },
        { name: "pro", key_prefix: "pro_", limits: [{ limit: 10, window: "1s" }] },
        { name: "free", key_prefix: "free_", unlimited: true },
      ],
      anonymous: { limits: [{ limit: 5, window: "1m" }] },
    });
    expect(config.plans.map((p) => p.routes.map((r) => r.name))).toEqual([["search"], ["search", "export"], []]);
    expect(config.anonymous?.routes.map((r) => r.name)).toEqual(["search", "export"]);
  });

  it("fails loudly, naming the field", () => {
    const cases: [unknown, object, string][] = [
      ["x", {}, 'RATE_LIMIT.routes: expected an array, got "x"'],
      [[{ path: "/a", limits: [{ limit: 1, window: "1s" }] }], {}, "RATE_LIMIT.routes[0].name: required"],
      [
        [{ name: "Search", path: "/a", limits: [{ limit: 1, window: "1s" }] }],
        {},
        'RATE_LIMIT.routes[0].name: use up to 64 lower-case letters, digits, "_", "-" or ".", starting with a letter, got "Search"',
      ],
      [[{ name: "a", limits: [{ limit: 1, window: "1s" }] }], {}, "RATE_LIMIT.routes[0].path: required"],
      [[{ name: "a", path: "/a" }], {}, "RATE_LIMIT.routes[0].limits: required"],
      [[{ name: "a", path: "/a", limits: [] }], {}, "RATE_LIMIT.routes[0].limits: expected at least one limit"],
      [
        [{ name: "a", path: "/a", limits: [{ limit: 0, window: "1s" }] }],
        {},
        "RATE_LIMIT.routes[0].limits[0].limit: expected a positive integer, got 0",
      ],
      [
        [{ name: "a", path: "/a", limits: [{ limit: 1, window: "1s" }], cost: 2 }],
        {},
        "RATE_LIMIT.routes[0].cost: unknown setting; expected one of name, method, path, limits",
      ],
      [
        [
          { name: "a", path: "/a", limits: [{ limit: 1, window: "1s" }] },
          { name: "a", path: "/b", limits: [{ limit: 1, window: "1s" }] },
        ],
        {},
        'RATE_LIMIT.routes[1].name: "a" is already used by RATE_LIMIT.routes[0]',
      ],
      [
        [
          { name: "v1", path: "/v1/", limits: [{ limit: 1, window: "1s" }] },
          { name: "search", method: "POST", path: "/v1/search", limits: [{ limit: 1, window: "1s" }] },
        ],
        {},
        'RATE_LIMIT.routes[1]: POST "/v1/search" never applies, every such request already matches RATE_LIMIT.routes[0] (any method "/v1/") and the first match wins; put the more specific rule first',
      ],
      [
        [{ name: "a", path: "/a", limits: [{ limit: 1, window: "1m", name: "per-minute" }] }],
        {},
        'RATE_LIMIT.routes[0].limits[0].name: "per-minute" is also a limit of plan "default"; the headers show both, so give the route\'s limit another name',
      ],
      [
        [{ name: "a", path: "/%7e", limits: [{ limit: 1, window: "1s" }] }],
        {},
        'RATE_LIMIT.routes[0].path: requests are matched on their normalised path (docs/configuration.md, "Paths"), so write it as "/~", got "/%7e"',
      ],
    ];
    for (const [routes, more, message] of cases) {
      expect(configError(() => withRoutes(routes, more)).message, JSON.stringify(routes)).toBe(message);
    }
    expect(
      configError(() => parse({ plans: [{ name: "free", key_prefix: "f_", unlimited: true, routes: ROUTES }] }))
        .message,
    ).toBe("RATE_LIMIT.plans[0].routes: an unlimited plan has no budgets; remove routes or unlimited = true");
    expect(
      configError(() =>
        parse({
          routes: ROUTES,
          plans: [{ name: "t", key_prefix: "t_", limits: [{ limit: 1, window: "1s" }], routes: [ROUTES[0]] }],
        }),
      ).message,
    ).toBe(
      "RATE_LIMIT.routes: no plan uses them (every plan with limits has its own routes, and there is no RATE_LIMIT.limits); remove them or move them into a plan",
    );
  });

  it("the library's routes may go without a path (matched by name), but not a method without one", () => {
    const lib = parseLimiterConfig(
      { limits: [{ limit: 10, window: "1m" }], routes: [{ name: "search", limits: [{ limit: 1, window: "1m" }] }] },
      "createLimiter",
    );
    expect(lib.defaultPlan?.routes[0]).toMatchObject({ name: "search", method: null, pathPrefix: null });
    expect(routeFor(lib.defaultPlan as Plan, "GET", "/")).toBeNull();
    expect(
      configError(() =>
        parseLimiterConfig(
          {
            limits: [{ limit: 10, window: "1m" }],
            routes: [{ name: "s", method: "GET", limits: [{ limit: 1, window: "1m" }] }],
          },
          "createLimiter",
        ),
      ).message,
    ).toBe("createLimiter.routes[0].path: required with a method (a route is matched on both)");
  });
});
