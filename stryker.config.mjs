// Mutation testing (npm run test:mutation; CONTRIBUTING.md, "Mutation testing"): every file of src/ (but the core's re-exports),
// against the unit, Durable Object and integration tests in plain Node (vitest.stryker.config.ts: Stryker
// instruments code in its own process only, so the workerd tests run against the Node stand-in in test/node/). One test
// process at a time: the machine is shared. Narrow a run with `-- --mutate src/client/leases.ts`.
/** @type {import("@stryker-mutator/api/core").PartialStrykerOptions} */
export default {
  testRunner: "vitest",
  vitest: { configFile: "vitest.stryker.config.ts", related: false },
  mutate: [
    "src/**/*.ts",
    // Re-exports only.
    "!src/core/index.ts",
  ],
  coverageAnalysis: "perTest",
  // Static mutants (module-level values: constants, tables, regular expressions) cannot be traced to the tests that
  // cover them, so each one runs the whole suite: 664 of them took ~55 of ~80 minutes. They are left out of the run
  // and the scores; the tests that read those values (config defaults, header forms, messages) pin them by value.
  ignoreStatic: true,
  concurrency: 1,
  timeoutMS: 10_000,
  tempDirName: ".stryker-tmp",
  cleanTempDir: "always",
  reporters: ["clear-text", "progress", "html", "json"],
  htmlReporter: { fileName: "reports/mutation/mutation.html" },
  jsonReporter: { fileName: "reports/mutation/mutation.json" },
  clearTextReporter: { allowColor: false, reportScoreTable: true },
};
