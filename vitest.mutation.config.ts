// Vitest for the mutation gate (npm run test:mutation, stryker.config.mjs): the unit tests in plain Node.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    name: "unit",
    environment: "node",
    // The unit tests alone: test/meta/'s checks of the repository are `npm test`'s (the code's shape is read from src/
    // as written, which Stryker's instrumented copy lengthens by design; the docs are compared with files Stryker's
    // sandbox rewrites, `// @ts-nocheck` on top).
    include: ["test/unit/**/*.test.ts"],
    // The regional holders' model (bench:sim's, test/support/holders.ts) is a bench's, not the product's: its runs of
    // whole simulations are too slow under Stryker's coverage, and the core it drives is held by the core's own tests.
    // The fault-injecting property (faults.test.ts) drives three whole clients through random faults: as slow under
    // Stryker's coverage, and the client's own unit tests (policy, resend, client, failure) pin its mutants.
    exclude: ["test/unit/holders.test.ts", "test/unit/faults.test.ts"],
    // One worker reused across Stryker's many small runs (its runner already limits Vitest to one worker).
    isolate: false,
    // One fast-check seed for every run (test/support/fixed-seed.ts): the same mutants killed, the same coverage.
    setupFiles: ["test/support/fixed-seed.ts"],
    // As `npm test`'s unit project: the initial run under Stryker's coverage, on a loaded machine, timed a property
    // test out at the default 5 s. No test measures time; this only tells a hang from a slow machine.
    testTimeout: 30_000,
  },
});
