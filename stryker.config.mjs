// Mutation testing (npm run test:mutation; CONTRIBUTING.md, "Mutation testing"): every file the unit tests cover —
// the pure core, the client (its decisions, lease table, deny cache, header forms, deadline policy and result), the config parser,
// keys, the edge's answers and telemetry — against the unit tests only (vitest.stryker.config.ts: plain Node, never
// workerd). One test process at a time: the machine is shared. Narrow a run with `-- --mutate src/client/leases.ts`.
/** @type {import("@stryker-mutator/api/core").PartialStrykerOptions} */
export default {
  testRunner: "vitest",
  vitest: { configFile: "vitest.stryker.config.ts", related: false },
  mutate: [
    "src/core/*.ts",
    "!src/core/index.ts",
    "src/client/index.ts",
    "src/client/deny-cache.ts",
    "src/client/leases.ts",
    "src/client/headers.ts",
    "src/client/policy.ts",
    "src/client/result.ts",
    "src/config.ts",
    "src/key.ts",
    "src/path.ts",
    "src/http.ts",
    "src/telemetry.ts",
  ],
  coverageAnalysis: "perTest",
  concurrency: 1,
  timeoutMS: 10_000,
  tempDirName: ".stryker-tmp",
  cleanTempDir: "always",
  reporters: ["clear-text", "progress", "html", "json"],
  htmlReporter: { fileName: "reports/mutation/mutation.html" },
  jsonReporter: { fileName: "reports/mutation/mutation.json" },
  clearTextReporter: { allowColor: false, reportScoreTable: true },
};
