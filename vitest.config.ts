// Vitest: "unit" (plain Node) and "workers" (inside workerd via @cloudflare/vitest-plugin).
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Quiet while tests pass: what a test logs (the Worker's JSON lines, the sweep's summary) is shown only when it fails.
    silent: "passed-only",
    projects: [
      {
        test: {
          name: "unit",
          environment: "node",
          include: ["test/unit/**/*.test.ts"],
        },
      },
      {
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            remoteBindings: false,
            // Point the Worker at the Node origin started by test/setup/origin.ts.
            miniflare: { bindings: { ORIGIN: inject("originUrl") } },
          })),
        ],
        test: {
          name: "workers",
          include: ["test/durable/**/*.test.ts", "test/integration/**/*.test.ts"],
          globalSetup: ["./test/setup/origin.ts"],
        },
      },
    ],
  },
});
