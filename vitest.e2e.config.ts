// Vitest for `npm run test:e2e`: Node tests that run the project under `wrangler dev` (test/support/harness.ts).
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    name: "e2e",
    environment: "node",
    include: ["test/e2e/**/*.test.ts"],
    // Quiet while tests pass, as `npm test`: what a test logs (its judged figures) is shown only when it fails.
    silent: "passed-only",
    // Each file starts its own wrangler dev; one at a time on a 2-core machine.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
