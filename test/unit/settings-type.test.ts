// The library's settings type and the parser's field list cannot drift (issue 59.5): the keys of `LimiterSettings`
// are exactly `LIMITER_FIELDS`, and `LimiterOptions` adds only the library's own. A field added to one and not the
// other fails the typecheck (`npm run typecheck`, CI) here, before any test runs.
import { describe, expect, expectTypeOf, it } from "vitest";
import { LIMITER_FIELDS, parseLimiterConfig } from "../../src/config/parse.ts";
import type { CostSetting, LimiterOptions, LimiterSettings } from "../../src/library/settings.ts";

type Field = (typeof LIMITER_FIELDS)[number];

describe("LimiterSettings and the parser's fields", () => {
  it("name the same settings", () => {
    expectTypeOf<keyof LimiterSettings>().toEqualTypeOf<Field>();
    expectTypeOf<Exclude<keyof LimiterOptions, Field>>().toEqualTypeOf<
      "binding" | "name" | "prefix" | "clock" | "verify" | "verifyCache"
    >();
    expect(LIMITER_FIELDS).toContain("paths");
  });

  it("a settled cost rule and paths, as typed, are what the parser takes", () => {
    const costs: CostSetting[] = [
      {
        method: "POST",
        path: "/v1/chat",
        reserve: { json: ["max_completion_tokens", "max_tokens"], times: "n", input: "bytes", default: 100 },
        settle: "openai",
      },
      { path: "/v1/x", reserve: { header: "x-max" }, settle: { header: "x-cost" } },
      { path: "/v1/y", reserve: 50, settle: { json: "usage.total" } },
      { path: "/v1/z", cost: 2 },
    ];
    const settings: LimiterSettings = {
      limits: [{ limit: 1000, window: "1m" }],
      costs,
      paths: { escaped_slashes: "keep" },
    };
    const config = parseLimiterConfig(settings, "createLimiter");
    expect(config.costs.map((c) => c.pathPrefix)).toEqual(["/v1/chat", "/v1/x", "/v1/y", "/v1/z"]);
    expect(config.paths.escapedSlashes).toBe("keep");
  });
});
