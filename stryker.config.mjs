// Mutation testing, the gate (npm run test:mutation; CONTRIBUTING.md, "Mutation testing"): the files whose logic the
// unit tests pin down — the core, the client, config, the ground floor (base/), and the pipeline's pure rules (key, http, telemetry, signed, guesses, verify-hook, reservation, usage-report, all-or-nothing) — against the unit tests in plain
// Node (vitest.mutation.config.ts). Incremental: results are kept in test/mutation/incremental.json (written out by scripts/mutation.ts from the
// committed incremental.json.gz, and gzipped back after the run), and
// a run tests again only the mutants whose code or covering tests changed since. `--force` runs them all and
// rewrites the file. The object, the proxy and the adapters are not mutated: CONTRIBUTING.md, "Mutation testing".
/** @type {import("@stryker-mutator/api/core").PartialStrykerOptions} */
export default {
  testRunner: "vitest",
  vitest: { configFile: "vitest.mutation.config.ts", related: false },
  mutate: [
    "src/core/**/*.ts",
    // Re-exports only.
    "!src/core/index.ts",
    "src/client/**/*.ts",
    "src/config/**/*.ts",
    "src/base/**/*.ts",
    "src/pipeline/key.ts",
    "src/pipeline/http.ts",
    "src/pipeline/telemetry.ts",
    // The pipeline's pure rules added with settled costs, signed keys, the verify hook and accounts.
    "src/pipeline/signed.ts",
    "src/pipeline/usage-report.ts",
    "src/pipeline/reservation.ts",
    "src/pipeline/guesses.ts",
    "src/pipeline/verify-hook.ts",
    "src/pipeline/all-or-nothing.ts",
  ],
  incremental: true,
  incrementalFile: "test/mutation/incremental.json",
  coverageAnalysis: "perTest",
  // Static mutants (module-level values: constants, tables, regular expressions) cannot be traced to the tests that
  // cover them, so each one runs the whole suite. They are left out of the run and the scores; the tests that read
  // those values (config defaults, header forms, messages) pin them by value.
  ignoreStatic: true,
  // `// @ts-nocheck` atop the sources and tests (as the incremental file's runs had it: a test file without it is a
  // line shorter, and every test in it would count as changed), not atop examples/ (tests compare those files with
  // the docs' copies of them).
  disableTypeChecks: "{src,test,bench,scripts}/**/*.{ts,mts,js}",
  concurrency: 1,
  timeoutMS: 10_000,
  tempDirName: ".stryker-tmp",
  cleanTempDir: "always",
  reporters: ["clear-text", "progress", "html", "json"],
  htmlReporter: { fileName: "reports/mutation/mutation.html" },
  jsonReporter: { fileName: "reports/mutation/mutation.json" },
  clearTextReporter: { allowColor: false, reportScoreTable: true },
};
