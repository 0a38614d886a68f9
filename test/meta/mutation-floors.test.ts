/** @module The mutation gate's judgement (scripts/mutation-floors.ts): per file, from Stryker's JSON report. */

import { describe, expect, it } from "vitest";
import { FLOORS, problems, type Report, scores } from "../../scripts/mutation-floors.ts";

const mutants = (counts: Record<string, number>) =>
  Object.entries(counts).flatMap(([status, n]) => Array.from({ length: n }, () => ({ status })));

describe("mutation floors", () => {
  it("scores killed and timed-out mutants against all that count; errors and ignored ones do not count", () => {
    const report: Report = {
      files: {
        "src/a.ts": {
          mutants: mutants({ Killed: 90, Timeout: 5, Survived: 4, NoCoverage: 1, CompileError: 7, Ignored: 3 }),
        },
        "src/empty.ts": { mutants: mutants({ RuntimeError: 2 }) },
      },
    };
    expect(scores(report, { "src/a.ts": 95 })).toEqual([
      { file: "src/a.ts", mutants: 100, detected: 95, score: 95, floor: 95 },
      { file: "src/empty.ts", mutants: 0, detected: 0, score: 100, floor: undefined },
    ]);
  });

  it("fails a file below its floor, passes one at it, and names a mutated file without one", () => {
    const report: Report = {
      files: {
        "src/at.ts": { mutants: mutants({ Killed: 19, Survived: 1 }) },
        "src/below.ts": { mutants: mutants({ Killed: 18, Survived: 2 }) },
        "src/new.ts": { mutants: mutants({ Killed: 1 }) },
      },
    };
    expect(problems(report, { "src/at.ts": 95, "src/below.ts": 95 })).toEqual([
      "src/below.ts: 90.00% (18 of 20 mutants detected) is below its floor of 95%",
      "src/new.ts: no floor in scripts/mutation-floors.ts; give it one",
    ]);
  });

  it("has a floor for every file the gate mutates that has code, and only for those", async () => {
    const { readdirSync } = await import("node:fs");
    /** The files a Stryker config mutates, with its `!` exclusions left out. */
    const mutatedBy = async (name: string) => {
      const configFile = new URL(`../../${name}`, import.meta.url).href; // plain JS: imported untyped
      const { default: config } = (await import(configFile)) as { default: { mutate: string[] } };
      const excluded = new Set(config.mutate.filter((p) => p.startsWith("!")).map((p) => p.slice(1)));
      return config.mutate
        .flatMap((pattern) => {
          if (pattern.startsWith("!")) return [];
          if (!pattern.includes("*")) return [pattern];
          // `dir/*.ts` or `dir/**/*.ts`
          const recursive = pattern.includes("/**/");
          const dir = pattern.slice(0, pattern.indexOf("/*"));
          return readdirSync(dir, { recursive })
            .map(String)
            .filter((f) => f.endsWith(".ts"))
            .map((f) => `${dir}/${f}`);
        })
        .filter((f) => !excluded.has(f));
    };
    const gate = await mutatedBy("stryker.config.mjs");
    // Types only: no mutants.
    expect(gate.filter((f) => FLOORS[f] === undefined).sort()).toEqual(["src/client/parts.ts", "src/core/decision.ts"]);
    for (const f of Object.keys(FLOORS)) expect(gate, f).toContain(f);
    expect(gate).toContain("src/core/log.ts");
    expect(gate).toContain("src/client/leases.ts");
    expect(gate).not.toContain("src/object/index.ts");
  });
});
