// docs/configuration.md, "Testing your code": its hono app and its plain Node test, compiled and run as written (their
// imports pointed at this repository's src/ and the installed hono and vitest): the test's own `it`s run here. Its
// workerd example is examples/hono-app's vitest config and test, as they stand: test/e2e/examples.test.ts runs them
// from the packed package.
import { readFileSync } from "node:fs";
import { Hono } from "hono";
import ts from "typescript";
import { beforeEach, describe, expect, it } from "vitest";
import * as testing from "../../src/testing/index.ts";

/** The section's ```ts blocks, in order. */
const blocks = (() => {
  const doc = readFileSync("docs/configuration.md", "utf8");
  const start = doc.indexOf("### Testing your code");
  const section = doc.slice(start, doc.indexOf("\n## ", start));
  return [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);
})();

/** Runs a block as CommonJS with `modules` as what it may import; what it exports. */
function run(block: string, modules: Record<string, unknown>): Record<string, unknown> {
  const js = ts.transpileModule(block, { compilerOptions: { module: ts.ModuleKind.CommonJS } }).outputText;
  const exports: Record<string, unknown> = {};
  const require = (m: string) => {
    if (!(m in modules)) throw new Error(`the example imports ${m}`);
    return modules[m];
  };
  new Function("exports", "require", js)(exports, require);
  return exports;
}

describe("docs/configuration.md, Testing your code", () => {
  expect(blocks).toHaveLength(4);
  const [configTs, workerdTs, appTs, testTs] = blocks as [string, string, string, string];
  it("shows examples/hono-app's vitest config and test as they stand", () => {
    expect(configTs).toBe(readFileSync("examples/hono-app/vitest.config.ts", "utf8"));
    expect(workerdTs).toBe(readFileSync("examples/hono-app/test/index.test.ts", "utf8"));
  });
  expect(appTs).toContain("// app.ts");
  expect(testTs).toContain('from "strict-edge-rate-limiter/testing"');
  const app = run(appTs, { hono: { Hono } });
  run(testTs, { vitest: { beforeEach, expect, it }, "strict-edge-rate-limiter/testing": testing, "./app": app });
});
