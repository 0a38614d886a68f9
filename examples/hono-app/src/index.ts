// A hono app whose /api routes are limited per API key: 5 requests in any minute, `test_` keys 2.
import { Hono } from "hono";
import { RateLimiter } from "strict-edge-rate-limiter";
import { type RateLimitVariables, rateLimit } from "strict-edge-rate-limiter/hono";

// The Durable Object class that keeps each key's log: export it from the Worker, bind it in wrangler.toml.
export { RateLimiter };

const app = new Hono<{ Bindings: Env; Variables: RateLimitVariables }>();

app.use(
  "/api/*",
  rateLimit({
    // Names this limiter's objects (`api/key:<key>`): its logs outlive changes to the limits below.
    name: "api",
    limits: [{ limit: 5, window: "1m" }],
    plans: [{ name: "test", key_prefix: "test_", limits: [{ limit: 2, window: "1m" }] }],
    key: (c) => c.req.header("x-api-key"),
    // A failed call is not counted against the key.
    refund: (c) => c.res.status >= 500,
  }),
);

app.get("/api/hello", (c) => {
  const limit = c.get("rateLimit");
  return c.json({ hello: "world", reason: limit.reason, remaining: limit.limits[0]?.remaining ?? null });
});

app.get("/api/fail", (c) => c.json({ error: "the handler failed" }, 500));

app.get("/", (c) => c.text("not limited"));

export default app;
