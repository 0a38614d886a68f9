/**
 * @module The ready proxy (package export `./proxy`): the limiter in front of an origin, configured
 * by `ORIGIN` and `RATE_LIMIT` in wrangler.toml. `export { default, RateLimiter } from "<package>/proxy"`.
 */

import { createProxy, type WorkerEnv } from "./app.ts";

export { RateLimiter } from "../object/index.ts";
export { createProxy, type Hooks, type ProxyApp, type WorkerEnv } from "./app.ts";

const proxy = createProxy();

export default {
  fetch: (request, env, ctx) => proxy.fetch(request, env, ctx),
} satisfies ExportedHandler<WorkerEnv>;
