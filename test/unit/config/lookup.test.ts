/**
 * @module The look-ups of a parsed config (src/config/lookup.ts): a key's plan, a request's cost, a request's route
 * and a route's budget.
 */

import { describe, expect, it } from "vitest";
import { costFor, planForKey, routeBudget, routeFor } from "../../../src/config/lookup.ts";
import { parseLimiterConfig } from "../../../src/config/parse.ts";
import type { Plan } from "../../../src/config/types.ts";
import { MINIMUM, parse, rl } from "./support.ts";

describe("planForKey", () => {
  const plans = [
    { name: "live", key_prefix: "live_", unlimited: true },
    { name: "test_long", key_prefix: "test_long_", limits: [{ limit: 1, window: "1s" }] },
    { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }] },
  ];
  // Parsed inside each test, never while the file is collected: code run then counts as run by every test, and a
  // mutation run (npm run test:mutation) would run every test for each of its mutants.
  const withDefault = () => parse({ ...MINIMUM, plans });
  const withoutDefault = () => parse({ plans });

  it.each([
    ["live_abc", "live"],
    ["live_", "live"],
    ["test_long_abc", "test_long"],
    ["test_longer", "test"],
    ["test_abc", "test"],
    ["test", "default"],
    ["TEST_abc", "default"],
    ["xlive_abc", "default"],
    ["abc", "default"],
  ])("key %j gets plan %j (first matching prefix, else the default)", (key, name) => {
    expect(planForKey(withDefault(), key)?.name).toBe(name);
  });

  it.each([
    ["live_abc", "live"],
    ["test_long_x", "test_long"],
    ["test_x", "test"],
    ["other", null],
    ["test", null],
  ])("without default limits, key %j gets %j", (key, name) => {
    expect(planForKey(withoutDefault(), key)?.name ?? null).toBe(name);
  });

  it("returns the plan objects themselves: unlimited has no limits and no policy", () => {
    const config = withDefault();
    expect(planForKey(config, "live_1")).toBe(config.plans[0]);
    expect(planForKey(config, "live_1")).toMatchObject({ limits: null, leaseMs: 0 });
    expect(planForKey(config, "zzz")).toBe(config.defaultPlan);
  });
});

describe("costFor", () => {
  // Parsed inside each test (see planForKey).
  const config = () =>
    parse(
      rl({
        costs: [
          { path: "/health", cost: 0 },
          { method: "post", path: "/v1/search", cost: 5 },
          { path: "/v1/search", cost: 2 },
          { method: "GET", path: "/v1", cost: 3 },
        ],
      }),
    );

  it.each([
    ["GET", "/health", 0],
    ["POST", "/health", 0],
    ["GET", "/healthz", 0], // a prefix, not a segment
    ["GET", "/health/deep", 0],
    ["POST", "/v1/search", 5],
    ["POST", "/v1/search/more", 5],
    ["GET", "/v1/search", 2],
    ["PUT", "/v1/search", 2],
    ["GET", "/v1/users", 3],
    ["GET", "/v1", 3],
    ["POST", "/v1/users", 1],
    ["GET", "/v2", 1],
    ["GET", "/", 1],
    ["DELETE", "/V1/search", 1], // paths are case-sensitive
  ])("%s %s costs %i (first matching rule, else 1)", (method, path, cost) => {
    expect(costFor(config(), method, path)).toBe(cost);
  });

  it("costs 1 without rules", () => {
    expect(costFor(parse(MINIMUM), "POST", "/anything")).toBe(1);
  });

  it("a catch-all last rule sets the default", () => {
    const c = parse(
      rl({
        costs: [
          { path: "/cheap", cost: 1 },
          { path: "/", cost: 4 },
        ],
      }),
    );
    expect([costFor(c, "GET", "/cheap"), costFor(c, "GET", "/x")]).toEqual([1, 4]);
  });
});

describe("routeFor and routeBudget", () => {
  it("a route matched by name only (the library's) never matches a request's path", () => {
    const config = parseLimiterConfig(
      {
        limits: [{ limit: 10, window: "1m" }],
        routes: [
          { name: "export", limits: [{ limit: 1, window: "1h" }] },
          { name: "all", path: "/", limits: [{ limit: 5, window: "1m" }] },
        ],
      },
      "t",
    );
    const plan = config.defaultPlan as Plan;
    expect(routeFor(plan, "GET", "/export")?.name).toBe("all");
    expect(routeBudget(plan.routes[0] as NonNullable<(typeof plan.routes)[0]>)).toEqual({
      name: "export",
      limits: [{ limit: 1, windowMs: 3_600_000, tickMs: 1, name: "export" }],
    });
  });
});
