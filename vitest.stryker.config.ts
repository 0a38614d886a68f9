// Vitest for Stryker (npm run test:mutation): the "unit" project alone, in plain Node. The "workers" project
// runs inside workerd and must not be used: Stryker's runner instruments code in this process only.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    name: "unit",
    environment: "node",
    include: ["test/unit/**/*.test.ts"],
    isolate: false,
  },
});
