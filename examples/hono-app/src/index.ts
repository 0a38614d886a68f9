import { Hono } from "hono";
import { RateLimiter } from "strict-edge-rate-limiter";
import { type RateLimitVariables, rateLimit } from "strict-edge-rate-limiter/hono";

export { RateLimiter }; // the class your wrangler config binds: export it from your Worker

const app = new Hono<{ Bindings: Env; Variables: RateLimitVariables }>();

app.use(
  "/api/*",
  rateLimit({
    name: "api",                           // names this limiter's objects (api/key:<key>)
    limits: [{ limit: 10, window: "1m" }],
    key: (c) => c.req.header("x-api-key"), // none → 401 problem+json
    refund: (c) => c.res.status >= 500,    // failed calls are not counted
  }),
);

app.get("/api/hello", (c) => c.json({ remaining: c.get("rateLimit").limits[0]?.remaining }));
app.get("/api/fail", (c) => c.json({ error: "failed" }, 500)); // a 500: its unit is given back
app.get("/", (c) => c.text("not limited"));                    // outside /api/*

export default app;
