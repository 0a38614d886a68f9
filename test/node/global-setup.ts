// Vitest globalSetup for the Node stand-in (vitest.stryker.config.ts): the echo origin, as test/setup/origin.ts starts
// it for the workers project, and wrangler.toml's vars as wrangler reads them.

import type { TestProject } from "vitest/node";
import { unstable_readConfig } from "wrangler";
import { startOrigin } from "../support/origin.ts";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const origin = await startOrigin();
  project.provide("originUrl", origin.url);
  const config = unstable_readConfig({ config: "wrangler.toml" }, { hideWarnings: true });
  project.provide("wranglerVars", JSON.stringify(config.vars));
  return () => origin.close();
}
