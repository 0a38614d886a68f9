/**
 * @module Every config error names its field and quotes the bad value (parseConfig, through every parser of
 * src/config/): one table of bad configs, field by field, and the same error for the JSON-string form.
 */

import { isDeepStrictEqual } from "node:util";
import { describe, expect, it } from "vitest";
import { MAX_ORIGIN_TIMEOUT_MS, parseConfig } from "../../../src/config/parse.ts";
import { MAX_RING_SLOTS } from "../../../src/core/index.ts";
import { configError, MINIMUM, ORIGIN, parse, rl } from "./support.ts";

/** MINIMUM with limits[1] replaced. */
function limit1(l: unknown): Record<string, unknown> {
  return { limits: [{ limit: 100, window: "1s" }, l] };
}
/** MINIMUM with a hole where limits[1] was. */
function limit1Hole(): Record<string, unknown> {
  const limits: unknown[] = [{ limit: 100, window: "1s" }];
  limits.length = 2;
  return { limits };
}
/** A sparse array: a hole, then `item`. */
function holeThen(item: unknown): unknown[] {
  const list: unknown[] = [];
  list[1] = item;
  return list;
}
/** A config whose only plan is `p`. */
function plan0(p: Record<string, unknown>): Record<string, unknown> {
  return rl({ plans: [p] });
}
const TEST_PLAN = { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }] };
/** A config whose only cost rule is `c`. */
function cost0(c: Record<string, unknown>): Record<string, unknown> {
  return rl({ costs: [c] });
}

interface BadCase {
  /** What is wrong. */
  readonly what: string;
  readonly origin?: unknown;
  readonly rateLimit?: unknown;
  /** The message starts with `${field}:`. */
  readonly field: string;
  /** The message contains this (usually the bad value as quoted). */
  readonly quotes: string;
}

const BAD: readonly BadCase[] = [
  // ORIGIN
  { what: "missing ORIGIN", origin: undefined, field: "ORIGIN", quotes: "required" },
  { what: "empty ORIGIN", origin: "", field: "ORIGIN", quotes: "required" },
  { what: "ORIGIN not a URL", origin: "api.example.com", field: "ORIGIN", quotes: 'got "api.example.com"' },
  { what: "ORIGIN with spaces", origin: "not a url", field: "ORIGIN", quotes: 'got "not a url"' },
  { what: "ftp ORIGIN", origin: "ftp://example.com", field: "ORIGIN", quotes: 'got "ftp://example.com"' },
  { what: "file ORIGIN", origin: "file:///etc/passwd", field: "ORIGIN", quotes: 'got "file:///etc/passwd"' },
  { what: "ws ORIGIN", origin: "ws://example.com", field: "ORIGIN", quotes: 'got "ws://example.com"' },
  { what: "ORIGIN with a query", origin: "https://x.com/?a=1", field: "ORIGIN", quotes: 'got "https://x.com/?a=1"' },
  { what: "ORIGIN with a fragment", origin: "https://x.com/#top", field: "ORIGIN", quotes: 'got "https://x.com/#top"' },
  {
    what: "ORIGIN with credentials (quoted redacted)",
    origin: "https://user:secret@x.com/api",
    field: "ORIGIN",
    quotes: 'got "https://***@x.com/api"',
  },
  { what: "ORIGIN a number", origin: 42, field: "ORIGIN", quotes: "got 42" },
  { what: "ORIGIN null", origin: null, field: "ORIGIN", quotes: "got null" },
  { what: "ORIGIN a table", origin: { url: "https://x.com" }, field: "ORIGIN", quotes: "got a object" },
  { what: "ORIGIN bad JSON string", origin: '"https://x.com', field: "ORIGIN", quotes: "not valid JSON" },
  { what: "ORIGIN JSON string of a number", origin: '"1"', field: "ORIGIN", quotes: 'got "1"' },
  { what: "ORIGIN JSON ftp", origin: '"ftp://x.com"', field: "ORIGIN", quotes: 'got "ftp://x.com"' },
  // RATE_LIMIT itself
  { what: "missing RATE_LIMIT", rateLimit: undefined, field: "RATE_LIMIT", quotes: "required" },
  { what: "RATE_LIMIT empty string", rateLimit: "", field: "RATE_LIMIT", quotes: "not valid JSON" },
  { what: "RATE_LIMIT bad JSON", rateLimit: '{"limits": [', field: "RATE_LIMIT", quotes: "not valid JSON" },
  { what: "RATE_LIMIT TOML as a string", rateLimit: "limits = []", field: "RATE_LIMIT", quotes: "not valid JSON" },
  { what: "RATE_LIMIT JSON array", rateLimit: "[1]", field: "RATE_LIMIT", quotes: "got an array" },
  { what: "RATE_LIMIT JSON string", rateLimit: '"x"', field: "RATE_LIMIT", quotes: 'got "x"' },
  { what: "RATE_LIMIT JSON null", rateLimit: "null", field: "RATE_LIMIT", quotes: "got null" },
  { what: "RATE_LIMIT a number", rateLimit: 5, field: "RATE_LIMIT", quotes: "got 5" },
  { what: "RATE_LIMIT an array", rateLimit: [], field: "RATE_LIMIT", quotes: "got an array" },
  { what: "RATE_LIMIT null", rateLimit: null, field: "RATE_LIMIT", quotes: "got null" },
  { what: "RATE_LIMIT true", rateLimit: true, field: "RATE_LIMIT", quotes: "got true" },
  {
    what: "unknown top-level field",
    rateLimit: rl({ limit: 5 }),
    field: "RATE_LIMIT.limit",
    quotes: "unknown setting",
  },
  { what: "JSON unknown field", rateLimit: '{"__proto__": 1}', field: "RATE_LIMIT.__proto__", quotes: "unknown" },
  // limits
  { what: "no limits and no plans", rateLimit: {}, field: "RATE_LIMIT.limits", quotes: "required" },
  { what: "no limits, empty plans", rateLimit: { plans: [] }, field: "RATE_LIMIT.limits", quotes: "required" },
  { what: "limits a string", rateLimit: { limits: "100/s" }, field: "RATE_LIMIT.limits", quotes: 'got "100/s"' },
  { what: "limits a table", rateLimit: { limits: { limit: 1 } }, field: "RATE_LIMIT.limits", quotes: "got a object" },
  { what: "limits null", rateLimit: { limits: null }, field: "RATE_LIMIT.limits", quotes: "got null" },
  { what: "limits empty", rateLimit: { limits: [] }, field: "RATE_LIMIT.limits", quotes: "at least one limit" },
  { what: "limit not a table", rateLimit: { limits: [5] }, field: "RATE_LIMIT.limits[0]", quotes: "got 5" },
  { what: "a hole in limits", rateLimit: limit1Hole(), field: "RATE_LIMIT.limits[1]", quotes: "required" },
  {
    what: "a hole in costs",
    rateLimit: rl({ costs: holeThen({ path: "/", cost: 1 }) }),
    field: "RATE_LIMIT.costs[0]",
    quotes: "required",
  },
  { what: "limit an array", rateLimit: limit1([]), field: "RATE_LIMIT.limits[1]", quotes: "got an array" },
  {
    what: "limit 0",
    rateLimit: limit1({ limit: 0, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got 0",
  },
  {
    what: "limit -1",
    rateLimit: limit1({ limit: -1, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got -1",
  },
  {
    what: "limit fractional",
    rateLimit: limit1({ limit: 1.5, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got 1.5",
  },
  {
    what: "limit a string",
    rateLimit: limit1({ limit: "100", window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: 'got "100"',
  },
  {
    what: "limit NaN",
    rateLimit: limit1({ limit: Number.NaN, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got NaN",
  },
  {
    what: "limit beyond safe integers",
    rateLimit: limit1({ limit: 2 ** 53, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got 9007199254740992",
  },
  {
    what: "limit missing",
    rateLimit: limit1({ window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got nothing",
  },
  {
    what: "tick too fine for the limit",
    rateLimit: { limits: [{ limit: MAX_RING_SLOTS * 10, window: "1d", tick: "1ms" }] },
    field: "RATE_LIMIT.limits[0].tick",
    quotes: `${MAX_RING_SLOTS * 10} per 1d at a tick of 1ms`,
  },
  {
    what: "tick longer than the window",
    rateLimit: { limits: [{ limit: 5, window: "1s", tick: "2s" }] },
    field: "RATE_LIMIT.limits[0].tick",
    quotes: 'got "2s"',
  },
  {
    what: "tick not a duration",
    rateLimit: { limits: [{ limit: 5, window: "1s", tick: "fast" }] },
    field: "RATE_LIMIT.limits[0].tick",
    quotes: 'got "fast"',
  },
  {
    what: "leases not a table",
    rateLimit: { ...MINIMUM, leases: "yes" },
    field: "RATE_LIMIT.leases",
    quotes: 'got "yes"',
  },
  {
    what: "leases.max_units zero",
    rateLimit: { ...MINIMUM, leases: { max_units: 0 } },
    field: "RATE_LIMIT.leases.max_units",
    quotes: "got 0",
  },
  {
    what: "leases.max_lifetime not a duration",
    rateLimit: { ...MINIMUM, leases: { max_lifetime: "long" } },
    field: "RATE_LIMIT.leases.max_lifetime",
    quotes: 'got "long"',
  },
  {
    what: "leases unknown setting",
    rateLimit: { ...MINIMUM, leases: { lifetime: "1s" } },
    field: "RATE_LIMIT.leases.lifetime",
    quotes: "unknown setting",
  },
  {
    what: "object_timeout not a duration",
    rateLimit: { ...MINIMUM, object_timeout: "soon" },
    field: "RATE_LIMIT.object_timeout",
    quotes: 'got "soon"',
  },
  {
    what: "explicit ticks that need too many rings",
    rateLimit: {
      limits: [1, 2, 3].map((t) => ({ limit: 1e9, window: 1900 * t, tick: t })),
    },
    field: "RATE_LIMIT.limits",
    quotes: "3 different ticks need",
  },
  {
    what: "window a bad string",
    rateLimit: limit1({ limit: 1, window: "1 sec" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1 sec"',
  },
  {
    what: "window empty",
    rateLimit: limit1({ limit: 1, window: "" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got ""',
  },
  {
    what: "window 0s",
    rateLimit: limit1({ limit: 1, window: "0s" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "0s"',
  },
  {
    what: "window 0",
    rateLimit: limit1({ limit: 1, window: 0 }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got 0",
  },
  {
    what: "window -5",
    rateLimit: limit1({ limit: 1, window: -5 }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got -5",
  },
  {
    what: "window fractional ms",
    rateLimit: limit1({ limit: 1, window: 2.5 }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got 2.5",
  },
  {
    what: "window fractional unit",
    rateLimit: limit1({ limit: 1, window: "1.5s" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1.5s"',
  },
  {
    what: "window weeks",
    rateLimit: limit1({ limit: 1, window: "1w" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1w"',
  },
  {
    what: "window without unit",
    rateLimit: limit1({ limit: 1, window: "1000" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1000"',
  },
  {
    what: "window too long",
    rateLimit: limit1({ limit: 1, window: "367d" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'at most 366d, got "367d"',
  },
  {
    what: "window true",
    rateLimit: limit1({ limit: 1, window: true }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got true",
  },
  { what: "window missing", rateLimit: limit1({ limit: 1 }), field: "RATE_LIMIT.limits[1].window", quotes: "required" },
  {
    what: "two limits with one window (default names clash)",
    rateLimit: limit1({ limit: 5, window: "1000ms" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: '"per-second", already used by RATE_LIMIT.limits[0]',
  },
  {
    what: "two limits with one name",
    rateLimit: {
      limits: [
        { limit: 1, window: "1s", name: "a" },
        { limit: 2, window: "1m", name: "a" },
      ],
    },
    field: "RATE_LIMIT.limits[1].name",
    quotes: '"a" is already used by RATE_LIMIT.limits[0]',
  },
  {
    what: "a name equal to another limit's default",
    rateLimit: limit1({ limit: 2, window: "1m", name: "per-second" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: '"per-second" is already used',
  },
  {
    what: "name empty",
    rateLimit: limit1({ limit: 2, window: "1m", name: "" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: 'got ""',
  },
  {
    what: "name a number",
    rateLimit: limit1({ limit: 2, window: "1m", name: 5 }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: "got 5",
  },
  {
    what: "name not ASCII (cannot go in a header)",
    rateLimit: limit1({ limit: 2, window: "1m", name: "per-minüte" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: 'got "per-minüte"',
  },
  {
    what: "name with a newline",
    rateLimit: limit1({ limit: 2, window: "1m", name: "a\nb" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: 'got "a\\nb"',
  },
  {
    what: "unknown limit field",
    rateLimit: limit1({ limit: 2, window: "1m", per: "ip" }),
    field: "RATE_LIMIT.limits[1].per",
    quotes: "unknown setting",
  },
  // plans
  { what: "plans a table", rateLimit: rl({ plans: { test: {} } }), field: "RATE_LIMIT.plans", quotes: "got a object" },
  { what: "plans a string", rateLimit: rl({ plans: "test" }), field: "RATE_LIMIT.plans", quotes: 'got "test"' },
  { what: "plan not a table", rateLimit: rl({ plans: [5] }), field: "RATE_LIMIT.plans[0]", quotes: "got 5" },
  {
    what: "plan without name",
    rateLimit: plan0({ key_prefix: "t_", unlimited: true }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: "required",
  },
  {
    what: "plan name empty",
    rateLimit: plan0({ ...TEST_PLAN, name: "" }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: 'got ""',
  },
  {
    what: "plan name a number",
    rateLimit: plan0({ ...TEST_PLAN, name: 1 }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: "got 1",
  },
  {
    what: "plan name with a space",
    rateLimit: plan0({ ...TEST_PLAN, name: "free tier" }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: 'got "free tier"',
  },
  {
    what: "duplicate plan name",
    rateLimit: rl({ plans: [TEST_PLAN, { ...TEST_PLAN, key_prefix: "other_" }] }),
    field: "RATE_LIMIT.plans[1].name",
    quotes: '"test" is used twice',
  },
  {
    what: "plan without key_prefix",
    rateLimit: plan0({ name: "t", unlimited: true }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: "required",
  },
  {
    what: "key_prefix empty",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: 'got ""',
  },
  {
    what: "key_prefix a number",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: 7 }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: "got 7",
  },
  {
    what: "key_prefix with a space (no key can hold it)",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "test key" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: '"test key"',
  },
  {
    what: "key_prefix with a comma (no key can hold it)",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "test,a" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: '"test,a"',
  },
  {
    what: "key_prefix not ASCII",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "tést_" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: '"tést_"',
  },
  {
    what: "key_prefix longer than key.max_length",
    rateLimit: rl({ plans: [TEST_PLAN], key: { max_length: 4 } }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: 'max_length (4), so no key can start with "test_"',
  },
  {
    what: "duplicate key_prefix (second plan unreachable)",
    rateLimit: rl({ plans: [TEST_PLAN, { ...TEST_PLAN, name: "other" }] }),
    field: "RATE_LIMIT.plans[1].key_prefix",
    quotes: '"test_" can never match',
  },
  {
    what: "key_prefix shadowed by a shorter earlier one",
    rateLimit: rl({ plans: [TEST_PLAN, { name: "live", key_prefix: "test_live_", unlimited: true }] }),
    field: "RATE_LIMIT.plans[1].key_prefix",
    quotes: '"test_live_" can never match, every such key already matches RATE_LIMIT.plans[0] (key_prefix "test_")',
  },
  {
    what: "plan with both limits and unlimited",
    rateLimit: plan0({ ...TEST_PLAN, unlimited: true }),
    field: "RATE_LIMIT.plans[0]",
    quotes: "not both",
  },
  {
    what: "plan with neither limits nor unlimited",
    rateLimit: plan0({ name: "t", key_prefix: "t_" }),
    field: "RATE_LIMIT.plans[0].limits",
    quotes: "required",
  },
  {
    what: "plan unlimited = false without limits",
    rateLimit: plan0({ name: "t", key_prefix: "t_", unlimited: false }),
    field: "RATE_LIMIT.plans[0].limits",
    quotes: "required",
  },
  {
    what: "plan unlimited not boolean",
    rateLimit: plan0({ name: "t", key_prefix: "t_", unlimited: "yes" }),
    field: "RATE_LIMIT.plans[0].unlimited",
    quotes: 'got "yes"',
  },
  {
    what: "plan limits empty",
    rateLimit: plan0({ ...TEST_PLAN, limits: [] }),
    field: "RATE_LIMIT.plans[0].limits",
    quotes: "at least one limit",
  },
  {
    what: "plan limit window bad",
    rateLimit: plan0({ ...TEST_PLAN, limits: [{ limit: 1, window: "1min" }] }),
    field: "RATE_LIMIT.plans[0].limits[0].window",
    quotes: 'got "1min"',
  },
  {
    what: "unknown plan field",
    rateLimit: plan0({ ...TEST_PLAN, prefix: "x" }),
    field: "RATE_LIMIT.plans[0].prefix",
    quotes: "unknown setting",
  },
  // anonymous
  { what: "anonymous true", rateLimit: rl({ anonymous: true }), field: "RATE_LIMIT.anonymous", quotes: "got true" },
  {
    what: "anonymous an array",
    rateLimit: rl({ anonymous: [] }),
    field: "RATE_LIMIT.anonymous",
    quotes: "got an array",
  },
  {
    what: "anonymous without limits",
    rateLimit: rl({ anonymous: {} }),
    field: "RATE_LIMIT.anonymous.limits",
    quotes: "required",
  },
  {
    what: "anonymous limits empty",
    rateLimit: rl({ anonymous: { limits: [] } }),
    field: "RATE_LIMIT.anonymous.limits",
    quotes: "at least one",
  },
  {
    what: "anonymous limit bad",
    rateLimit: rl({ anonymous: { limits: [{ limit: 0, window: "1m" }] } }),
    field: "RATE_LIMIT.anonymous.limits[0].limit",
    quotes: "got 0",
  },
  {
    what: "anonymous unlimited",
    rateLimit: rl({ anonymous: { unlimited: true } }),
    field: "RATE_LIMIT.anonymous.unlimited",
    quotes: "unknown setting",
  },
  // costs
  { what: "costs a table", rateLimit: rl({ costs: { "/x": 1 } }), field: "RATE_LIMIT.costs", quotes: "got a object" },
  { what: "cost rule null", rateLimit: rl({ costs: [null] }), field: "RATE_LIMIT.costs[0]", quotes: "got null" },
  {
    what: "method empty",
    rateLimit: cost0({ method: "", path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: 'got ""',
  },
  {
    what: "method a number",
    rateLimit: cost0({ method: 1, path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: "got 1",
  },
  {
    what: "method with a path",
    rateLimit: cost0({ method: "GET /x", path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: 'got "GET /x"',
  },
  {
    what: "method list",
    rateLimit: cost0({ method: "GET,POST", path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: 'got "GET,POST"',
  },
  {
    what: "method an array",
    rateLimit: cost0({ method: ["GET"], path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: "got an array",
  },
  { what: "path missing", rateLimit: cost0({ cost: 1 }), field: "RATE_LIMIT.costs[0].path", quotes: "required" },
  { what: "path empty", rateLimit: cost0({ path: "", cost: 1 }), field: "RATE_LIMIT.costs[0].path", quotes: 'got ""' },
  {
    what: "path relative",
    rateLimit: cost0({ path: "v1/search", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "v1/search"',
  },
  {
    what: "path a full URL",
    rateLimit: cost0({ path: "https://x.com/v1", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "https://x.com/v1"',
  },
  {
    what: "path with a query (never in a pathname)",
    rateLimit: cost0({ path: "/search?q=1", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "/search?q=1"',
  },
  {
    what: "path with a space",
    rateLimit: cost0({ path: "/v1/search ", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "/v1/search "',
  },
  {
    what: "path not ASCII",
    rateLimit: cost0({ path: "/café", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "/café"',
  },
  { what: "path a number", rateLimit: cost0({ path: 1, cost: 1 }), field: "RATE_LIMIT.costs[0].path", quotes: "got 1" },
  {
    what: "cost negative",
    rateLimit: cost0({ path: "/", cost: -1 }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: "got -1",
  },
  {
    what: "cost fractional",
    rateLimit: cost0({ path: "/", cost: 0.5 }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: "got 0.5",
  },
  {
    what: "cost a string",
    rateLimit: cost0({ path: "/", cost: "5" }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: 'got "5"',
  },
  { what: "cost missing", rateLimit: cost0({ path: "/" }), field: "RATE_LIMIT.costs[0].cost", quotes: "got nothing" },
  {
    what: "cost infinite",
    rateLimit: cost0({ path: "/", cost: Number.POSITIVE_INFINITY }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: "got Infinity",
  },
  {
    what: "unknown cost field",
    rateLimit: cost0({ path: "/", cost: 1, methods: ["GET"] }),
    field: "RATE_LIMIT.costs[0].methods",
    quotes: "unknown setting",
  },
  {
    what: "cost rule shadowed by an earlier prefix",
    rateLimit: rl({
      costs: [
        { path: "/v1", cost: 2 },
        { method: "POST", path: "/v1/search", cost: 5 },
      ],
    }),
    field: "RATE_LIMIT.costs[1]",
    quotes:
      'POST "/v1/search" never applies, every such request already matches RATE_LIMIT.costs[0] (any method "/v1")',
  },
  {
    what: "duplicate cost rule",
    rateLimit: rl({
      costs: [
        { method: "GET", path: "/a", cost: 2 },
        { method: "get", path: "/a", cost: 3 },
      ],
    }),
    field: "RATE_LIMIT.costs[1]",
    quotes: 'GET "/a" never applies',
  },
  // key
  { what: "key a string", rateLimit: rl({ key: "x-api-key" }), field: "RATE_LIMIT.key", quotes: 'got "x-api-key"' },
  {
    what: "key.header empty",
    rateLimit: rl({ key: { header: "" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got ""',
  },
  {
    what: "key.header true",
    rateLimit: rl({ key: { header: true } }),
    field: "RATE_LIMIT.key.header",
    quotes: "got true",
  },
  {
    what: "key.header null",
    rateLimit: rl({ key: { header: null } }),
    field: "RATE_LIMIT.key.header",
    quotes: "got null",
  },
  {
    what: "key.header with a space",
    rateLimit: rl({ key: { header: "x api key" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "x api key"',
  },
  {
    what: "key.header with a colon",
    rateLimit: rl({ key: { header: "X-Api-Key:" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "X-Api-Key:"',
  },
  {
    what: "key.header not ASCII",
    rateLimit: rl({ key: { header: "clé" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "clé"',
  },
  {
    what: "key.header authorization (lower case)",
    rateLimit: rl({ key: { header: "authorization" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "authorization"',
  },
  {
    what: "key.header authorization",
    rateLimit: rl({ key: { header: "Authorization" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "Authorization"',
  },
  {
    what: "key.bearer a string",
    rateLimit: rl({ key: { bearer: "no" } }),
    field: "RATE_LIMIT.key.bearer",
    quotes: 'got "no"',
  },
  { what: "key.bearer 0", rateLimit: rl({ key: { bearer: 0 } }), field: "RATE_LIMIT.key.bearer", quotes: "got 0" },
  {
    what: "key.pattern not a regular expression",
    rateLimit: rl({ key: { pattern: "live_[a-z" } }),
    field: "RATE_LIMIT.key.pattern",
    quotes: 'got "live_[a-z"',
  },
  {
    what: "key.pattern with an unterminated group",
    rateLimit: rl({ key: { pattern: "(live_" } }),
    field: "RATE_LIMIT.key.pattern",
    quotes: 'got "(live_"',
  },
  {
    what: "key.pattern empty",
    rateLimit: rl({ key: { pattern: "" } }),
    field: "RATE_LIMIT.key.pattern",
    quotes: 'got ""',
  },
  { what: "key.query empty", rateLimit: rl({ key: { query: "" } }), field: "RATE_LIMIT.key.query", quotes: 'got ""' },
  { what: "key.query a number", rateLimit: rl({ key: { query: 1 } }), field: "RATE_LIMIT.key.query", quotes: "got 1" },
  {
    what: "key.query true",
    rateLimit: rl({ key: { query: true } }),
    field: "RATE_LIMIT.key.query",
    quotes: "got true",
  },
  {
    what: "key.max_length 0",
    rateLimit: rl({ key: { max_length: 0 } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: "got 0",
  },
  {
    what: "key.max_length too big",
    rateLimit: rl({ key: { max_length: 4097 } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: "got 4097",
  },
  {
    what: "key.max_length fractional",
    rateLimit: rl({ key: { max_length: 10.5 } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: "got 10.5",
  },
  {
    what: "key.max_length a string",
    rateLimit: rl({ key: { max_length: "256" } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: 'got "256"',
  },
  {
    what: "every key source off",
    rateLimit: rl({ key: { header: false, bearer: false } }),
    field: "RATE_LIMIT.key",
    quotes: "every key source is off",
  },
  {
    what: "unknown key field",
    rateLimit: rl({ key: { cookie: "k" } }),
    field: "RATE_LIMIT.key.cookie",
    quotes: "unknown setting",
  },
  // failure_mode, shadow, origin_timeout
  ...["fail-open", "OPEN", "sometimes", "", true, 0, null].map(
    (v): BadCase => ({
      what: `failure_mode ${JSON.stringify(v)}`,
      rateLimit: rl({ failure_mode: v }),
      field: "RATE_LIMIT.failure_mode",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  {
    what: "fallback_share without failure_mode local",
    rateLimit: rl({ failure_mode: "open", fallback_share: 0.5 }),
    field: "RATE_LIMIT.fallback_share",
    quotes: 'only with failure_mode = "local" (failure_mode is "open")',
  },
  ...[-0.1, 1.5, "0.5", Number.NaN, null, true].map(
    (v): BadCase => ({
      what: `fallback_share ${String(v)}`,
      rateLimit: rl({ failure_mode: "local", fallback_share: v }),
      field: "RATE_LIMIT.fallback_share",
      quotes: "expected a number from 0 to 1",
    }),
  ),
  ...["EU", "de", "", "eu ", true, null, 1].map(
    (v): BadCase => ({
      what: `jurisdiction ${JSON.stringify(v)}`,
      rateLimit: rl({ jurisdiction: v }),
      field: "RATE_LIMIT.jurisdiction",
      quotes: 'expected one of "eu", "fedramp", "fedramp-high", "us"',
    }),
  ),
  ...["true", 1, null, "yes"].map(
    (v): BadCase => ({
      what: `shadow ${JSON.stringify(v)}`,
      rateLimit: rl({ shadow: v }),
      field: "RATE_LIMIT.shadow",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  ...["30 s", "0ms", "forever", "", 0, -1, 1.5, "367d", true, null].map(
    (v): BadCase => ({
      what: `origin_timeout ${JSON.stringify(v)}`,
      rateLimit: rl({ origin_timeout: v }),
      field: "RATE_LIMIT.origin_timeout",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  {
    what: "origin_timeout beyond a timer's range",
    rateLimit: rl({ origin_timeout: "25d" }),
    field: "RATE_LIMIT.origin_timeout",
    quotes: `at most ${MAX_ORIGIN_TIMEOUT_MS} ms`,
  },
  {
    what: "origin_timeout one ms beyond a timer's range",
    rateLimit: rl({ origin_timeout: MAX_ORIGIN_TIMEOUT_MS + 1 }),
    field: "RATE_LIMIT.origin_timeout",
    quotes: `got ${MAX_ORIGIN_TIMEOUT_MS + 1}`,
  },
  { what: "admin not a table", rateLimit: rl({ admin: "/x/" }), field: "RATE_LIMIT.admin", quotes: 'got "/x/"' },
  {
    what: "admin with an unknown setting",
    rateLimit: rl({ admin: { token: "t" } }),
    field: "RATE_LIMIT.admin.token",
    quotes: "expected one of path",
  },
  ...["", "__limiter/", "/__limiter", "/", "/a b/", "/x/?q=1/", "//"].map((path) => ({
    what: `admin.path ${JSON.stringify(path)}`,
    rateLimit: rl({ admin: { path } }),
    field: "RATE_LIMIT.admin.path",
    quotes: `got ${JSON.stringify(path)}`,
  })),
  // paths, and cost rules written otherwise than normalised
  ...["REJECT", "decode", true, null].map(
    (v): BadCase => ({
      what: `paths.escaped_slashes ${JSON.stringify(v)}`,
      rateLimit: rl({ paths: { escaped_slashes: v } }),
      field: "RATE_LIMIT.paths.escaped_slashes",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  { what: "paths not a table", rateLimit: rl({ paths: "reject" }), field: "RATE_LIMIT.paths", quotes: 'got "reject"' },
  ...[
    ["/%76%31/search", 'write it as "/v1/search"'],
    ["/v1/../search", 'write it as "/search"'],
    ["//v1", 'write it as "/v1"'],
    ["/a/..;/b", "write it as a path without dot segments"],
    ["/a;b", 'write it as "/a"'],
  ].map(
    ([path, quotes]): BadCase => ({
      what: `cost path ${path}`,
      rateLimit: rl({ costs: [{ path, cost: 1 }] }),
      field: "RATE_LIMIT.costs[0].path",
      quotes: quotes as string,
    }),
  ),
  // headers, refund
  ...["draft-5", "DRAFT-11", "", "x-ratelimit", true, null, 7].map(
    (v): BadCase => ({
      what: `headers ${JSON.stringify(v)}`,
      rateLimit: rl({ headers: v }),
      field: "RATE_LIMIT.headers",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  { what: "refund not a table", rateLimit: rl({ refund: [500] }), field: "RATE_LIMIT.refund", quotes: "got an array" },
  {
    what: "refund without status",
    rateLimit: rl({ refund: {} }),
    field: "RATE_LIMIT.refund.status",
    quotes: "required",
  },
  {
    what: "refund with an unknown setting",
    rateLimit: rl({ refund: { status: [500], methods: ["GET"] } }),
    field: "RATE_LIMIT.refund.methods",
    quotes: "expected one of status",
  },
  ...[199, 600, 500.5, "500", null].map(
    (v): BadCase => ({
      what: `refund.status ${JSON.stringify(v)}`,
      rateLimit: rl({ refund: { status: [502, v] } }),
      field: "RATE_LIMIT.refund.status[1]",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
];

describe("parseConfig: every error names its field and the bad value", () => {
  it.each(BAD)("$what → $field", (c) => {
    const vars = {
      ORIGIN: "origin" in c ? c.origin : ORIGIN,
      RATE_LIMIT: "rateLimit" in c ? c.rateLimit : MINIMUM,
    };
    const e = configError(() => parseConfig(vars));
    expect(e.name).toBe("ConfigError");
    expect(e.message.startsWith(`${c.field}: `), e.message).toBe(true);
    expect(e.message).toContain(c.quotes);
  });

  it("never echoes ORIGIN's password", () => {
    const e = configError(() => parse(MINIMUM, "https://admin:hunter2@x.com"));
    expect(e.message).not.toMatch(/admin|hunter2/);
  });

  it("gives the same error for the JSON-string form", () => {
    let checked = 0;
    for (const c of BAD) {
      if (!("rateLimit" in c) || typeof c.rateLimit !== "object" || c.rateLimit === null) continue;
      const json = JSON.stringify(c.rateLimit);
      // NaN and Infinity do not survive JSON.
      if (!isDeepStrictEqual(JSON.parse(json), c.rateLimit)) continue;
      checked++;
      const fromObject = configError(() => parse(c.rateLimit)).message;
      expect(configError(() => parse(json)).message, c.what).toBe(fromObject);
    }
    expect(checked).toBeGreaterThan(100);
  });
});
