/**
 * @module The library (package export `.`): `createLimiter` for any Worker — `limit()`, `peek()`,
 * `refund()`, `settle()`, `reset()`, `acquire()`/`release()`, `headers()`, the platform binding's shape (`binding()`)
 * and a `LimiterService` for other Workers (`service()`) — and the `RateLimiter` Durable Object class to bind in
 * wrangler.toml.
 *
 * ```ts
 * import { createLimiter, RateLimiter } from "strict-edge-rate-limiter";
 * export { RateLimiter };
 * const limiter = createLimiter({ limits: [{ limit: 10, window: "1m" }] });
 * // in fetch(request, env, ctx):
 * const r = await limiter.limit(env, key, { ctx });
 * if (!r.allowed) return new Response("Too Many Requests", { status: 429, headers: limiter.headers(r) });
 * ```
 */

export { LimiterError, type LimiterErrorCode } from "./base/errors.ts";
export type { HeaderSink } from "./client/headers.ts";
export type { Background, LimiterNamespace } from "./client/index.ts";
export {
  type GrantRecord,
  type Handle,
  headersOf,
  type LimitResult,
  type RateLimitResult,
  type Reason,
  type SlotRecord,
  violated,
} from "./client/result.ts";
export type { HeaderForm, LimiterConfig } from "./config/types.ts";
export { ConfigError } from "./config/types.ts";
export type { Duration } from "./core/duration.ts";
export type { UsagePeriod } from "./core/usage.ts";
export type {
  BindingLimitOptions,
  LimitBinding,
  LimitCallOptions,
  Limiter,
  LimiterServiceCalls,
  LimiterServiceClass,
  ServiceResult,
} from "./library/limiter.ts";
export { createLimiter, type LimiterService } from "./library/service.ts";
export type {
  AddressSetting,
  CostSetting,
  CreditsSetting,
  LimiterOptions,
  LimiterSettings,
  LimitSetting,
  PenaltySetting,
  PlanSetting,
  QuotaSetting,
  ReserveSetting,
  RouteSetting,
  SettleSetting,
  UsageSetting,
} from "./library/settings.ts";
export { RateLimiter } from "./object/index.ts";
export { problemFor, refusal } from "./pipeline/http.ts";
export type { RequestOptions, Settled } from "./pipeline/index.ts";
export type { Identity } from "./pipeline/key.ts";
export { type Claims, type Minted, type MintOptions, type MintPlan, mintKey } from "./pipeline/signed.ts";
export type { VerifyAnswer } from "./pipeline/verify-hook.ts";
export type { TopUp } from "./protocol.ts";
