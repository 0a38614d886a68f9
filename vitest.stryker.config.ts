// Vitest for Stryker (npm run test:mutation), in plain Node: Stryker's runner instruments code in this process only,
// so workerd cannot be used. The unit tests as they are; the Durable Object and integration tests against the Node
// stand-in for workerd (test/node/: `cloudflare:workers` and `cloudflare:test` over node:sqlite). `npm test` runs the
// same tests inside workerd, which stays the judge of what they prove.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  resolve: {
    alias: {
      "cloudflare:workers": here("./test/node/workers.ts"),
      "cloudflare:test": here("./test/node/test.ts"),
    },
  },
  test: {
    name: "node",
    environment: "node",
    include: ["test/unit/**/*.test.ts", "test/durable/**/*.test.ts", "test/integration/**/*.test.ts"],
    // Seconds of real-clock overload each: under Stryker every mutant they cover would pay for them. The
    // deterministic tests cover the same code; `npm test` runs these in workerd.
    exclude: ["test/integration/sweep.test.ts"],
    globalSetup: ["./test/node/global-setup.ts"],
    setupFiles: ["./test/node/setup.ts"],
    // One worker reused across Stryker's many small runs (its runner already limits Vitest to one worker); the
    // unit tests pass this way, and static mutants were killed the same with isolation on.
    isolate: false,
  },
});
