// Mutation testing of every file of src/ (npm run test:mutation:full; CONTRIBUTING.md, "Mutation testing"): the
// unit tests, and the Durable Object and integration tests in plain Node against the stand-in for workerd in
// test/node/ (vitest.stryker.config.ts: Stryker instruments code in its own process only). Not part of CI: about
// 45 minutes on 2 cores. Its own incremental file, kept locally (reports/ is not committed).
import gate from "./stryker.config.mjs";

/** @type {import("@stryker-mutator/api/core").PartialStrykerOptions} */
export default {
  ...gate,
  vitest: { configFile: "vitest.stryker.config.ts", related: false },
  mutate: ["src/**/*.ts", "!src/core/index.ts"],
  incrementalFile: "reports/stryker-incremental-full.json",
};
