/**
 * @module The config parser's properties: random valid limit sets round-trip into limits and policy items, and junk
 * anywhere in a valid config is accepted only when it is a valid value, else a ConfigError naming its field.
 */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { normalizePath } from "../../../src/base/path.ts";
import { MAX_ORIGIN_TIMEOUT_MS, parseConfig } from "../../../src/config/parse.ts";
import { ConfigError, type Plan } from "../../../src/config/types.ts";
import { MAX_KEY_SLOTS, normalizeLimits, parseDuration, ringLayout } from "../../../src/core/index.ts";
import { KEY_CHARS } from "../../../src/pipeline/key.ts";
import { type Obj, ORIGIN, parse, policyHeader } from "./support.ts";

/** Windows the property draws from, with their milliseconds, default names and `w`. */
const WINDOWS: readonly [window: string | number, ms: number, name: string, w: number][] = [
  ["250ms", 250, "per-250ms", 1],
  ["1s", 1_000, "per-second", 1],
  ["10s", 10_000, "per-10s", 10],
  ["1m", 60_000, "per-minute", 60],
  [90_000, 90_000, "per-90s", 90],
  ["1h", 3_600_000, "per-hour", 3600],
  ["1d", 86_400_000, "per-day", 86400],
  [1500, 1_500, "per-1500ms", 2],
];

describe("properties", () => {
  it("random valid limit sets round-trip into limits and one policy item each", () => {
    const limitsArb = fc.uniqueArray(
      fc.record({ limit: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), window: fc.constantFrom(...WINDOWS) }),
      { minLength: 1, maxLength: 4, selector: (l) => l.window[1] },
    );
    fc.assert(
      fc.property(limitsArb, fc.boolean(), (drawn, asJson) => {
        const limits = drawn.map((l) => ({ limit: l.limit, window: l.window[0] }));
        const raw = { limits };
        const plan = parse(asJson ? JSON.stringify(raw) : raw).defaultPlan as Plan;
        const ticks = normalizeLimits(drawn.map((l) => ({ limit: l.limit, windowMs: l.window[1] })));
        expect(plan.limits).toEqual(
          drawn.map((l, i) => ({
            limit: l.limit,
            windowMs: l.window[1],
            tickMs: ticks[i]?.tickMs,
            name: l.window[2],
          })),
        );
        // Whatever the limits, default ticks keep a key within its bound.
        expect(ringLayout(ticks).reduce((n, r) => n + r.capacity, 0)).toBeLessThanOrEqual(MAX_KEY_SLOTS);
        const items = policyHeader(plan).split(", ");
        expect(items).toEqual(drawn.map((l) => `"${l.window[2]}";q=${l.limit};w=${l.window[3]}`));
      }),
    );
  });

  /** Where junk goes: a path into the vars, from a valid base config. */
  const PATHS: readonly (readonly (string | number)[])[] = [
    ["ORIGIN"],
    ["RATE_LIMIT"],
    ["RATE_LIMIT", "limits"],
    ["RATE_LIMIT", "limits", 0],
    ["RATE_LIMIT", "limits", 0, "limit"],
    ["RATE_LIMIT", "limits", 0, "window"],
    ["RATE_LIMIT", "limits", 0, "name"],
    ["RATE_LIMIT", "limits", 2],
    ["RATE_LIMIT", "plans"],
    ["RATE_LIMIT", "plans", 0],
    ["RATE_LIMIT", "plans", 0, "name"],
    ["RATE_LIMIT", "plans", 0, "key_prefix"],
    ["RATE_LIMIT", "plans", 0, "limits"],
    ["RATE_LIMIT", "plans", 0, "unlimited"],
    ["RATE_LIMIT", "plans", 1, "unlimited"],
    ["RATE_LIMIT", "anonymous"],
    ["RATE_LIMIT", "anonymous", "limits"],
    ["RATE_LIMIT", "costs"],
    ["RATE_LIMIT", "costs", 0],
    ["RATE_LIMIT", "costs", 0, "method"],
    ["RATE_LIMIT", "costs", 0, "path"],
    ["RATE_LIMIT", "costs", 0, "cost"],
    ["RATE_LIMIT", "key"],
    ["RATE_LIMIT", "key", "header"],
    ["RATE_LIMIT", "key", "bearer"],
    ["RATE_LIMIT", "key", "query"],
    ["RATE_LIMIT", "key", "max_length"],
    ["RATE_LIMIT", "failure_mode"],
    ["RATE_LIMIT", "fallback_share"],
    ["RATE_LIMIT", "jurisdiction"],
    ["RATE_LIMIT", "shadow"],
    ["RATE_LIMIT", "origin_timeout"],
    ["RATE_LIMIT", "paths"],
    ["RATE_LIMIT", "extra"],
  ];
  const base = () => ({
    ORIGIN,
    RATE_LIMIT: {
      limits: [
        { limit: 100, window: "1s" },
        { limit: 1000, window: "1m" },
      ],
      plans: [
        { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }] },
        { name: "live", key_prefix: "live_", unlimited: true },
      ],
      anonymous: { limits: [{ limit: 5, window: "1m" }] },
      costs: [{ method: "POST", path: "/v1/search", cost: 5 }],
      key: { header: "x-api-key", bearer: true, query: "api_key", max_length: 128 },
      failure_mode: "closed",
      shadow: false,
      origin_timeout: "30s",
    },
  });
  // Built by the first test that needs it, not while the file is collected: building it takes over a second, and a
  // mutation run (npm run test:mutation) loads this file once per mutant.
  let junkArb: fc.Arbitrary<unknown> | undefined;
  const junk = () =>
    (junkArb ??= fc.oneof(
      fc.anything({
        withBigInt: true,
        withBoxedValues: true,
        withDate: true,
        withMap: true,
        withSet: true,
        withNullPrototype: true,
        withObjectString: true,
        withSparseArray: true,
        withTypedArray: true,
        withUnicodeString: true,
      }),
      fc.json(),
      fc.constantFrom<unknown>(
        Symbol("junk"),
        () => 1,
        10n,
        Number.NaN,
        Number.NEGATIVE_INFINITY,
        -0,
        "",
        " ",
        "1s",
        "open",
        "/",
        "__proto__",
        [],
        {},
        Object.create(null),
      ),
    ));

  it("the valid base parses", () => {
    expect(() => parseConfig(base())).not.toThrow();
  });

  const isObject = (v: unknown) => typeof v === "object" && v !== null && !Array.isArray(v);
  const nonEmptyArray = (v: unknown) => Array.isArray(v) && v.length > 0;
  const durationOk = (v: unknown, max = Number.POSITIVE_INFINITY) => {
    try {
      return parseDuration(v, "x") <= max;
    } catch {
      return false;
    }
  };
  const optional = (ok: (v: unknown) => boolean) => (v: unknown) => v === undefined || ok(v);
  const printable = (v: unknown) => typeof v === "string" && /^[\x20-\x7e]+$/.test(v);
  /**
   * What each path accepts: `exact` leaves are accepted iff the predicate holds (junk that parses
   * is a valid value, never silently taken); for the containers, what any accepted value must be.
   */
  const ACCEPTS: Record<string, { exact: boolean; ok: (v: unknown) => boolean }> = {
    ORIGIN: { exact: false, ok: (v) => typeof v === "string" },
    RATE_LIMIT: { exact: false, ok: (v) => isObject(v) || typeof v === "string" },
    // Left out, the plans alone apply (the base has plans).
    "RATE_LIMIT.limits": { exact: false, ok: optional(nonEmptyArray) },
    "RATE_LIMIT.limits.0": { exact: false, ok: isObject },
    "RATE_LIMIT.limits.0.limit": { exact: true, ok: (v) => Number.isSafeInteger(v) && (v as number) >= 1 },
    "RATE_LIMIT.limits.0.window": { exact: true, ok: (v) => durationOk(v) },
    // limits[1] is named per-minute by default: the same name is a duplicate.
    "RATE_LIMIT.limits.0.name": { exact: true, ok: optional((v) => printable(v) && v !== "per-minute") },
    "RATE_LIMIT.limits.2": { exact: false, ok: isObject },
    "RATE_LIMIT.plans": { exact: false, ok: optional(Array.isArray) },
    "RATE_LIMIT.plans.0": { exact: false, ok: isObject },
    "RATE_LIMIT.plans.0.name": {
      exact: true,
      ok: (v) => typeof v === "string" && /^[A-Za-z0-9_.-]+$/.test(v) && v !== "live",
    },
    // Before the "live_" plan: a prefix of "live_" would shadow it.
    "RATE_LIMIT.plans.0.key_prefix": {
      exact: true,
      ok: (v) => typeof v === "string" && KEY_CHARS.test(v) && v.length <= 128 && !"live_".startsWith(v),
    },
    "RATE_LIMIT.plans.0.limits": { exact: false, ok: nonEmptyArray },
    "RATE_LIMIT.plans.0.unlimited": { exact: true, ok: (v) => v === undefined || v === false },
    "RATE_LIMIT.plans.1.unlimited": { exact: true, ok: (v) => v === true },
    "RATE_LIMIT.anonymous": { exact: false, ok: optional((v) => isObject(v) && nonEmptyArray((v as Obj).limits)) },
    "RATE_LIMIT.anonymous.limits": { exact: false, ok: nonEmptyArray },
    "RATE_LIMIT.costs": { exact: false, ok: optional(Array.isArray) },
    "RATE_LIMIT.costs.0": { exact: false, ok: isObject },
    "RATE_LIMIT.costs.0.method": {
      exact: true,
      ok: optional((v) => typeof v === "string" && /^[A-Z]+$/.test(v.toUpperCase())),
    },
    "RATE_LIMIT.costs.0.path": {
      exact: true,
      ok: (v) => {
        if (typeof v !== "string" || !v.startsWith("/") || /[^\x21-\x7e]|["#<>?`{}\\]/.test(v)) return false;
        try {
          return normalizePath(new URL(`http://x${v}`).pathname, "keep").match === v;
        } catch {
          return false;
        }
      },
    },
    "RATE_LIMIT.costs.0.cost": { exact: true, ok: (v) => Number.isSafeInteger(v) && (v as number) >= 0 },
    "RATE_LIMIT.key": { exact: false, ok: optional(isObject) },
    "RATE_LIMIT.key.header": {
      exact: true,
      ok: optional(
        (v) =>
          v === false ||
          (typeof v === "string" &&
            /^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(v.toLowerCase()) &&
            v.toLowerCase() !== "authorization"),
      ),
    },
    "RATE_LIMIT.key.bearer": { exact: true, ok: optional((v) => typeof v === "boolean") },
    "RATE_LIMIT.key.query": { exact: true, ok: optional((v) => v === false || (typeof v === "string" && v !== "")) },
    // At least the longest plan prefix ("test_", "live_").
    "RATE_LIMIT.key.max_length": {
      exact: true,
      ok: optional((v) => Number.isSafeInteger(v) && (v as number) >= 5 && (v as number) <= 4096),
    },
    "RATE_LIMIT.failure_mode": { exact: true, ok: optional((v) => v === "open" || v === "closed" || v === "local") },
    // failure_mode is "closed" in the base: no share goes with it.
    "RATE_LIMIT.fallback_share": { exact: true, ok: optional(() => false) },
    "RATE_LIMIT.jurisdiction": {
      exact: true,
      ok: optional((v) => v === "eu" || v === "fedramp" || v === "fedramp-high" || v === "us"),
    },
    "RATE_LIMIT.shadow": { exact: true, ok: optional((v) => typeof v === "boolean") },
    "RATE_LIMIT.origin_timeout": { exact: true, ok: optional((v) => durationOk(v, MAX_ORIGIN_TIMEOUT_MS)) },
    "RATE_LIMIT.paths": { exact: false, ok: optional(isObject) },
    "RATE_LIMIT.extra": { exact: true, ok: () => false },
  };

  it("every junk path has its judge", () => {
    expect(Object.keys(ACCEPTS).sort()).toEqual(PATHS.map((p) => p.join(".")).sort());
  });

  it.each(PATHS.map((p) => [p.join("."), p] as const))(
    "junk at %s is accepted only when it is a valid value, else a ConfigError naming the field",
    (name, path) => {
      const judge = ACCEPTS[name] as (typeof ACCEPTS)[string];
      fc.assert(
        fc.property(junk(), (value) => {
          const vars: Record<string | number, unknown> = base();
          let at = vars;
          for (const k of path.slice(0, -1)) at = at[k] as Record<string | number, unknown>;
          at[path[path.length - 1] as string | number] = value;
          let accepted = true;
          try {
            parseConfig(vars);
          } catch (e) {
            expect(e).toBeInstanceOf(ConfigError);
            expect((e as Error).message).toMatch(/^(ORIGIN|RATE_LIMIT)[.[:]/);
            accepted = false;
          }
          if (judge.exact) expect(accepted, fc.stringify(value)).toBe(judge.ok(value));
          else if (accepted) expect(judge.ok(value), fc.stringify(value)).toBe(true);
        }),
      );
    },
  );
});
