/**
 * @module The bench Worker's service roles (bench/http/worker.mts; issue 60's measure): one library limiter decided
 * in-process, and the same limiter reached over a service binding, each answering `ok` from the same handler.
 *
 * - `svc-inproc`: `limiter.limit(env, key)` in the Worker that serves the request.
 * - `svc-remote`: `env.LIMITER_SVC.limit({ key })`, the binding to the `svc-host` Worker's `LimiterService`
 *   (`limiter.service()`, exported by the bench bundle as `BenchLimiterService`), which decides with its own leases.
 *
 * Limits as the hono roles' (`100/1s + 1000/1m`; keys starting `hot`: a billion a minute); keys in `x-api-key`. A
 * Worker of these roles whose LIMITER is `CountingRateLimiter` answers `GET /__bench/stats?name=…` with an object's
 * counts (its names: `bench-svc/key:<key>`).
 */

import { createLimiter } from "../../src/library/service.ts";

export const SERVICE_ROLES = ["svc-inproc", "svc-remote", "svc-host"] as const;
export type ServiceRole = (typeof SERVICE_ROLES)[number];

const limiter = createLimiter({
  name: "bench-svc",
  limits: [
    { limit: 100, window: "1s" },
    { limit: 1000, window: "1m" },
  ],
  plans: [{ name: "hot", key_prefix: "hot", limits: [{ limit: 1_000_000_000, window: "1m" }] }],
});

/** The limiter's `LimiterService` (`svc-host` serves it; `svc-remote` binds it as `LIMITER_SVC`). */
export const BenchLimiterService = limiter.service();

interface ServiceEnv {
  readonly LIMITER_SVC?: { limit(options: { key: string }): Promise<{ success: boolean }> };
}

/** Answers one request of `role`: decided in-process or over the binding, then `ok` (or a 429). */
export async function serviceAnswer(role: ServiceRole, request: Request, env: ServiceEnv, ctx: ExecutionContext) {
  const key = request.headers.get("x-api-key") ?? "";
  let success: boolean;
  if (role === "svc-remote")
    success = (await (env.LIMITER_SVC as NonNullable<ServiceEnv["LIMITER_SVC"]>).limit({ key })).success;
  else success = (await limiter.limit(env, key, { ctx })).allowed;
  return success ? new Response("ok") : new Response("limited", { status: 429 });
}
