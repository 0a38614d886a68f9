/**
 * @module Worker entry: the fetch handler and the RateLimiter Durable Object class.
 */

import { handle } from "./worker.ts";

export { RateLimiter } from "./limiter.ts";

export default {
  fetch(request, env, ctx): Promise<Response> {
    return handle(request, env, { waitUntil: (p) => ctx.waitUntil(p) });
  },
} satisfies ExportedHandler<Env>;
