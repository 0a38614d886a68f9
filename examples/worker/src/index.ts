// A plain Worker with two independent limiters on one binding: API calls per key (3 in any minute)
// and logins per user (2 in any minute). Their names keep their objects apart.
import { createLimiter, RateLimiter } from "strict-edge-rate-limiter";

export { RateLimiter };

const api = createLimiter({ name: "api", limits: [{ limit: 3, window: "1m" }] });
const logins = createLimiter({ name: "login", limits: [{ limit: 2, window: "1m", name: "logins" }] });

export default {
  async fetch(request, env, ctx): Promise<Response> {
    const url = new URL(request.url);
    const key = url.searchParams.get("key") ?? "";
    switch (url.pathname) {
      case "/api": {
        const r = await api.limit(env, key, { ctx });
        if (!r.allowed) return Response.json({ error: "slow down", retryAfterMs: r.retryAfterMs }, { status: 429, headers: api.headers(r) });
        return Response.json({ ok: true, remaining: r.limits[0]?.remaining }, { headers: api.headers(r) });
      }
      case "/api/fail": {
        // The work failed after the grant: give its unit back.
        const r = await api.limit(env, key, { ctx });
        if (!r.allowed) return new Response(null, { status: 429, headers: api.headers(r) });
        const refunded = await api.refund(env, r);
        return Response.json({ error: "upstream failed", refunded }, { status: 502 });
      }
      case "/api/peek": {
        const r = await api.peek(env, key);
        return Response.json({ allowed: r.allowed, reason: r.reason, remaining: r.limits[0]?.remaining });
      }
      case "/login": {
        const r = await logins.limit(env, key, { ctx });
        return Response.json({ allowed: r.allowed, reason: r.reason }, { status: r.allowed ? 200 : 429, headers: logins.headers(r) });
      }
      default:
        return new Response("not found", { status: 404 });
    }
  },
} satisfies ExportedHandler<Env>;
