// Vitest for Stryker (npm run test:mutation): the "unit" project alone, in plain Node. The "workers" project
// runs inside workerd and must not be used: Stryker's runner instruments code in this process only.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    name: "unit",
    environment: "node",
    include: ["test/unit/**/*.test.ts"],
    // One worker reused across Stryker's many small runs (its runner already limits Vitest to one worker); the
    // unit tests pass this way, and static mutants were killed the same with isolation on.
    isolate: false,
  },
});
