// docs/configuration.md, "Keys kept elsewhere: the verify hook": its example, compiled and run as written (its
// import pointed at src/) over a KV and a D1 double — the plan and account a stored key names, null for one not
// stored — through the limiter's own verifier.
import { readFileSync } from "node:fs";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import { limiterOf } from "../../src/library/create.ts";
import type { Limiter } from "../../src/library/limiter.ts";
import type { LimiterOptions } from "../../src/library/settings.ts";

/** createLimiter in Node: the library's limiter without the runtime's `LimiterService` (src/library/service.ts). */
const createLimiter = (options: LimiterOptions) =>
  limiterOf(options, () => {
    throw new Error("service(): workerd only");
  });

/** The section's ```ts block, compiled to CommonJS and run: what it exports. */
function example(): Record<string, unknown> {
  const doc = readFileSync("docs/configuration.md", "utf8");
  const start = doc.indexOf("### Keys kept elsewhere: the verify hook");
  const block = /```ts\n([\s\S]*?)```/.exec(doc.slice(start))?.[1] ?? "";
  expect(block).toContain('from "strict-edge-rate-limiter"');
  const js = ts.transpileModule(block, { compilerOptions: { module: ts.ModuleKind.CommonJS } }).outputText;
  const exports: Record<string, unknown> = {};
  const require = (m: string) => {
    if (m !== "strict-edge-rate-limiter") throw new Error(`the example imports ${m}`);
    return { createLimiter };
  };
  new Function("exports", "require", js)(exports, require);
  return exports;
}

const stored: Record<string, unknown> = {
  tk_1: { plan: "team", account: "acme" },
  sk_2: { plan: "team" },
  "legacy-0042": { plan: "free" },
};

describe("the verify hook's example", () => {
  const { limiter, verifyD1 } = example() as { limiter: Limiter; verifyD1: (key: string, env: object) => unknown };
  const kv = { KEYS: { get: async (key: string, type: string) => (type === "json" ? (stored[key] ?? null) : null) } };

  it("over KV: a stored key's plan (not its prefix's) and account; a key not stored is unknown_key", async () => {
    expect(await limiter.pipeline.identifyFor(kv, "tk_1")).toMatchObject({ plan: { name: "team" }, account: "acme" });
    expect(await limiter.pipeline.identifyFor(kv, "sk_2")).toMatchObject({ plan: { name: "team" }, account: null });
    // A key that matches no key_prefix (this limiter has no default plan) has the plan its store names.
    expect(limiter.identify.bind(limiter, "legacy-0042")).toThrow(LimiterError);
    expect(await limiter.pipeline.identifyFor(kv, "legacy-0042")).toMatchObject({ plan: { name: "free" } });
    await expect(limiter.pipeline.identifyFor(kv, "tk_forged")).rejects.toThrow(
      new LimiterError("unknown_key", "This API key is not known."),
    );
    expect(limiter.config.plans.find((p) => p.name === "team")?.account?.kind).toBe("acct.team");
  });

  it("over D1: one query per key, bound, its first row or null", async () => {
    const queries: [string, unknown[]][] = [];
    const db = {
      DB: {
        prepare: (sql: string) => ({
          bind: (...args: unknown[]) => ({
            first: async () => {
              queries.push([sql, args]);
              return stored[args[0] as string] ?? null;
            },
          }),
        }),
      },
    };
    expect(await verifyD1("tk_1", db)).toEqual({ plan: "team", account: "acme" });
    expect(await verifyD1("nope", db)).toBeNull();
    expect(queries).toEqual([
      ["SELECT plan, account FROM api_keys WHERE key = ?", ["tk_1"]],
      ["SELECT plan, account FROM api_keys WHERE key = ?", ["nope"]],
    ]);
  });
});
