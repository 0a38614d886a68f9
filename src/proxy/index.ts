/**
 * @module The ready proxy (package export `./proxy`): the limiter in front of an origin, configured
 * by `ORIGIN` and `RATE_LIMIT` in wrangler.toml. `export { default, RateLimiter } from "<package>/proxy"`; with
 * `LimiterService` too, other Workers share its `RATE_LIMIT` over a service binding.
 */

import { servedOver } from "../library/create.ts";
import { serviceOf } from "../library/service.ts";
import { createProxy, type WorkerEnv } from "./app.ts";

export { RateLimiter } from "../object/index.ts";
export { createProxy, type Hooks, type ProxyApp, type WorkerEnv } from "./app.ts";

const proxy = createProxy();

/**
 * The proxy's `RATE_LIMIT` for other Workers (`[[services]] … entrypoint = "LimiterService"`): `limit({ key, cost? })`,
 * `peek`, `refund` and `settle`, decided by the same client and leases as its HTTP requests (no route, no client
 * address: a library `limit()`'s). Invalid vars reject with their ConfigError.
 */
export const LimiterService = serviceOf(servedOver((env) => proxy.serving(env as WorkerEnv)));

export default {
  fetch: (request, env, ctx) => proxy.fetch(request, env, ctx),
} satisfies ExportedHandler<WorkerEnv>;
