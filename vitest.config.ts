// Vitest: "unit" (plain Node), "meta" (plain Node: the repository held to its own rules) and "workers" (inside
// workerd via @cloudflare/vitest-plugin).
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
          // The property tests take seconds; on a loaded machine the default 5 s timed three of them out. No test
          // measures time: this only tells a hang from a slow machine.
          testTimeout: 30_000,
        },
      },
      {
        test: {
          // Checks of the repository, not of the product's behaviour: its docs' links and examples, its configs'
          // comments, the code's shape and the mutation gate's floors. Outside the mutation run
          // (vitest.mutation.config.ts takes test/unit/ alone): no mutant is caught by them alone.
          name: "meta",
          environment: "node",
          include: ["test/meta/**/*.test.ts"],
          // As for the unit tests: only tells a hang from a slow machine.
          testTimeout: 30_000,
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
          // As for the unit tests: a property test inside workerd timed out at 5 s on a loaded machine.
          testTimeout: 30_000,
          // quiet-workerd.ts: workerd's own traces of connections the tests cut on purpose are dropped (the plugin
          // prints workerd's lines itself, past `silent`); any other line workerd prints still shows.
          globalSetup: ["./test/setup/origin.ts", "./test/setup/quiet-workerd.ts"],
        },
      },
    ],
  },
});
