/**
 * @module Test-only consumer Worker for test/e2e/service-dev.test.ts: a Worker of another project, bound to the limiter
 * project's `LimiterService` (service-entry.ts) as `LIMITS`, run under its own `wrangler dev`. Two configs run it:
 * wrangler.consumer-a.toml and wrangler.consumer-b.jsonc. It forwards what an HTTP request asks to the binding and
 * answers the value as JSON, or the error as it arrived (`400`):
 *
 * - `GET /limit?key=…[&cost=…]`: `env.LIMITS.limit({ key, cost })` (no `key` parameter: no key);
 * - `GET /peek?key=…`: `env.LIMITS.peek({ key })`;
 * - `POST /refund` with a result as JSON: `env.LIMITS.refund(result)`.
 */

import type { LimiterService, RateLimitResult } from "../../../src/index.ts";

interface ConsumerEnv {
  readonly LIMITS: Service<LimiterService>;
}

/** What the binding's call rejected with, as it arrived: its class, `name`, `message` and `code`. */
function arrived(e: unknown) {
  const error = e instanceof Error ? e : new Error(String(e));
  const code = (error as { code?: unknown }).code;
  return { type: error.constructor.name, name: error.name, message: error.message, code: code ?? null };
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const key = url.searchParams.get("key") ?? undefined;
    const cost = url.searchParams.has("cost") ? Number(url.searchParams.get("cost")) : undefined;
    try {
      // The options as a caller with no key would send them: the key left out, not "".
      const options = { key, cost } as { key: string; cost?: number };
      if (url.pathname === "/limit") return Response.json({ value: await env.LIMITS.limit(options) });
      if (url.pathname === "/peek") return Response.json({ value: await env.LIMITS.peek(options) });
      if (url.pathname === "/refund" && request.method === "POST") {
        return Response.json({ value: await env.LIMITS.refund(await request.json<RateLimitResult>()) });
      }
    } catch (e) {
      return Response.json({ error: arrived(e) }, { status: 400 });
    }
    return new Response("not found", { status: 404 });
  },
} satisfies ExportedHandler<ConsumerEnv>;
