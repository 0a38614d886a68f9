// vitest.config.ts
// The app's tests run inside workerd with @cloudflare/vitest-plugin: the Worker of wrangler.jsonc, its objects and the
// tests share one isolate, so the test kit's clock is the one they all read.
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

export default defineConfig({
  plugins: [cloudflareTest({ wrangler: { configPath: "./wrangler.jsonc" } })],
});
