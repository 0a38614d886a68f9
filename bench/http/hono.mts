/**
 * @module The bench Worker's hono roles (bench/http/worker.mts): what a hono user choosing a limiter compares, in one
 * workerd, each answering `ok` from the same handler.
 *
 * - `hono-bare`: the bare handler, no limiter: the reference.
 * - `hono-ours`: this package's middleware (`rateLimit()`), the ordinary keys' limits (`100/1s + 1000/1m`), leases as
 *   the Worker's `RATE_LIMIT.leases` says (a `hono-ours-off` Worker runs it with leases off).
 * - `hono-peer`: hono-rate-limiter 0.5 with @hono-rate-limiter/cloudflare's Durable Object store (a fixed window per
 *   key in its own object: one object call per request), at the same per-minute limit.
 *
 * Keys come in `x-api-key`; limits nothing in the bench reaches (keys starting `hot`: a limit of a billion a minute).
 */

import { DurableObjectStore } from "@hono-rate-limiter/cloudflare";
import { type Context, Hono, type MiddlewareHandler } from "hono";
import { rateLimiter } from "hono-rate-limiter";
import { rateLimit } from "../../src/hono.ts";

export { DurableObjectRateLimiter } from "@hono-rate-limiter/cloudflare";

/** The hono roles. */
export const HONO_ROLES = ["hono-bare", "hono-ours", "hono-peer"] as const;
export type HonoRole = (typeof HONO_ROLES)[number];

interface HonoEnv {
  readonly RATE_LIMIT: { readonly leases?: unknown };
  readonly LIMITER: unknown;
  readonly PEER: DurableObjectNamespace;
}

type App = Hono<{ Bindings: HonoEnv }>;

const keyOf = (c: Context) => c.req.header("x-api-key") ?? "";

/** This package's middleware, leases as the Worker's settings say. */
function ours(leases: boolean): MiddlewareHandler {
  return rateLimit({
    name: leases ? "bench-hono" : "bench-hono-off",
    limits: [
      { limit: 100, window: "1s" },
      { limit: 1000, window: "1m" },
    ],
    // The hot key: limits it never reaches at any rate the bench sends.
    plans: [{ name: "hot", key_prefix: "hot", limits: [{ limit: 1_000_000_000, window: "1m" }] }],
    ...(leases ? {} : { leases: false }),
    key: (c) => keyOf(c),
  });
}

/** hono-rate-limiter with the Durable Object store, made at the first request (the store needs `env.PEER`). */
function peer(): MiddlewareHandler<{ Bindings: HonoEnv }> {
  let made: MiddlewareHandler<{ Bindings: HonoEnv }> | null = null;
  return (c, next) => {
    made ??= rateLimiter<{ Bindings: HonoEnv }>({
      windowMs: 60_000,
      // As ours: 1,000 a minute, and the hot key a limit it never reaches.
      limit: (c) => (keyOf(c).startsWith("hot") ? 1_000_000_000 : 1000),
      keyGenerator: keyOf,
      store: new DurableObjectStore({ namespace: c.env.PEER as never }) as never,
    });
    return made(c, next);
  };
}

/** One app per role and leases setting, made once per isolate. */
const apps = new Map<string, App>();

/** The app of `role` for this Worker's `env`. */
export function honoApp(role: HonoRole, env: HonoEnv): App {
  const leases = env.RATE_LIMIT.leases !== false;
  const id = `${role}:${leases}`;
  let app = apps.get(id);
  if (app === undefined) {
    app = new Hono<{ Bindings: HonoEnv }>();
    if (role === "hono-ours") app.use(ours(leases));
    else if (role === "hono-peer") app.use(peer());
    app.all("*", (c) => c.text("ok"));
    apps.set(id, app);
  }
  return app;
}
