/**
 * @module Test-only Worker for test/e2e/service.test.ts (in one workerd) and test/e2e/service-dev.test.ts (under its
 * own `wrangler dev`): one library limiter served to other Workers over service bindings, as docs/configuration.md
 * ("Coming from the Workers rate limiting binding") shows. Keys `team_…` have 5 units a minute, `crowd_…` 40; any other
 * key matches no plan.
 */

import { createLimiter, RateLimiter } from "../../../src/index.ts";

export { RateLimiter };

const limiter = createLimiter({
  name: "shared",
  plans: [
    { name: "team", key_prefix: "team_", limits: [{ limit: 5, window: "1m" }] },
    { name: "crowd", key_prefix: "crowd_", limits: [{ limit: 40, window: "1m" }] },
  ],
});

export const LimiterService = limiter.service();

export default {
  fetch: () => new Response("a limiter for other Workers: bind LimiterService"),
} satisfies ExportedHandler;
