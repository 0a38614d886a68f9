/**
 * @module The library's contract (package export `.`, through src/index.ts): a {@link Limiter} — `limit()`, `peek()`,
 * `refund()`, `settle()`, `reset()`, `acquire()`/`release()`, `decideRequest()`, `headers()`, `binding()`,
 * `service()` — and the options of one call. src/library/create.ts makes one.
 */

import type { HeaderSink } from "../client/headers.ts";
import type { Background } from "../client/index.ts";
import type { RateLimitResult } from "../client/result.ts";
import type { LimiterConfig } from "../config/types.ts";
import type { UsagePeriod } from "../core/usage.ts";
import type { Pipeline, RequestOptions, Settled } from "../pipeline/index.ts";
import type { Identity } from "../pipeline/key.ts";
import type { Minted, MintOptions } from "../pipeline/signed.ts";
import type { TopUp } from "../protocol.ts";

/** The options of one `limit()` call. */
export interface LimitCallOptions {
  /** The request's units (default 1). */
  readonly cost?: number;
  /** The runtime's execution context: lease refills and give-backs outlive the response. */
  readonly ctx?: Background;
  /**
   * A route's name from `routes`: the request must fit that route's budget too (for keys whose plan
   * has no route of that name, the key's limits alone apply).
   *
   * @throws RangeError when no plan has a route of that name
   */
  readonly route?: string;
  /**
   * The client's address (`CF-Connecting-IP`): with `ip` limits configured, the request must fit its
   * address's budget too (docs/configuration.md, "Client addresses"); without an address they are not applied.
   */
  readonly ip?: string | null;
  /**
   * The account the request is counted against too (docs/configuration.md, "Accounts"): with its key's plan's
   * `account` limits, it must fit them as well, all or nothing. By default the account the `verify` hook named, if
   * any; given here, it wins.
   *
   * @throws TypeError for a name that is not 1 to 128 printable ASCII characters without spaces or commas
   */
  readonly account?: string;
}

/**
 * What the binding-shaped `limit()` takes ({@link Limiter.binding}, {@link LimiterService}): the options of Cloudflare's
 * rate limiting binding (`RateLimitOptions`), with `cost` beside its `delta`.
 */
export interface BindingLimitOptions {
  /** The key, as `limit()` takes it. */
  readonly key: string;
  /** The request's units: a whole number ≥ 1 (default 1). */
  readonly cost?: number;
  /** The platform binding's name for `cost` (given with `cost`, they must be equal). */
  readonly delta?: number;
}

/** Cloudflare's rate limiting binding's shape (`RateLimit`), over an exact limiter. */
export interface LimitBinding {
  /**
   * Decides one request: `success` is `limit()`'s `allowed`.
   *
   * @throws as `limit()` (a rejection): TypeError for a missing key, RangeError for a cost that is not a whole number
   *   ≥ 1, LimiterError for a key the limiter cannot decide; nothing is counted
   */
  limit(options: BindingLimitOptions): Promise<{ success: boolean }>;
}

/** A binding-shaped decision over a service binding: the whole result, with the binding's `success` beside it. */
export type ServiceResult = RateLimitResult & { readonly success: boolean };

/**
 * The calls of a limiter's `LimiterService` ({@link Limiter.service}), made over a service binding by other Workers.
 * A result it returned may be refunded or settled by any Worker bound to it.
 */
export interface LimiterServiceCalls {
  /** {@link LimitBinding.limit}, answering the whole result with `success` beside it. @throws as `limit()` */
  limit(options: BindingLimitOptions): Promise<ServiceResult>;
  /** What a request of `cost` would get now, consuming nothing ({@link Limiter.peek}). @throws as `limit()` */
  peek(options: BindingLimitOptions): Promise<RateLimitResult>;
  /** Gives back what `result` was granted, once ({@link Limiter.refund}). */
  refund(result: RateLimitResult): Promise<boolean>;
  /** Settles `result`'s reservation to `actual`, once ({@link Limiter.settle}). */
  settle(result: RateLimitResult, actual: number): Promise<Settled>;
}

/**
 * The class {@link Limiter.service} makes, to export from a Worker by name: a `WorkerEntrypoint` (the runtime constructs
 * it) whose instances are a `LimiterService` (src/library/service.ts).
 */
export type LimiterServiceClass = new (ctx: never, env: never) => LimiterServiceCalls;

/** A limiter: one client (its leases and deny cache) for one configuration. */
export interface Limiter {
  /** The parsed configuration. */
  readonly config: LimiterConfig;
  /** The name of the `RateLimiter` binding it reads from `env` (createLimiter's `binding` option). */
  readonly bindingName: string;
  /** The limiter's name: its objects are `<name>/key:<key>` (null: `key:<key>`). */
  readonly name: string | null;
  /**
   * The pipeline behind it, shared by the hono middleware; its client's lease table and deny cache
   * are readable for tests and measurements.
   *
   * @internal
   */
  readonly pipeline: Pipeline;
  /**
   * Decides one request of `cost` units (default 1) for `key`: grants and records it, or refuses
   * it with the exact wait. Writes a log line for a refusal, and a data point per decision when
   * `env` binds an Analytics Engine dataset as `LIMITER_ANALYTICS`. Pass the runtime's `ctx` so
   * that lease refills and give-backs outlive the response. It takes no concurrency slot: a plan's
   * `concurrency` applies to {@link acquire} (and the middleware) only.
   *
   * @throws LimiterError for a key that cannot be decided: `malformed_key`, `invalid_key` (not `key.pattern`),
   *   `no_plan`; with a `verify` hook, `unknown_key` (it answered null) or `verify_failed` (it threw);
   *   `problemFor(e)` is the proxy's answer to it
   * @throws RangeError for a cost that is not a whole number ≥ 1, or a route no plan has
   */
  limit(env: object, key: string, options?: LimitCallOptions): Promise<RateLimitResult>;
  /**
   * Decides one request as {@link limit} does and, for a key whose plan has `concurrency`, takes one of its slots
   * (docs/configuration.md, "Concurrency"): at most `concurrency` of the key's requests hold one at once; a request
   * finding them all held is refused at once (`reason: "concurrency"`, `retryAfterMs` 1000) and not counted.
   * Call {@link release} with the result when the request's work has ended (in a `finally`): a slot not released is
   * freed only `concurrency_timeout` after this isolate stops renewing it. For a plan without `concurrency`,
   * `release()` does nothing.
   *
   * @throws as {@link limit}
   */
  acquire(env: object, key: string, options?: LimitCallOptions): Promise<RateLimitResult>;
  /**
   * Frees the concurrency slot `result` holds (its `handle.slot`; a copy of the result works too, in any isolate),
   * once. Resolves false when it held none or it was released already, or when the key's object did not answer
   * (logged as `slot_release_failed`: the slot is then freed by `concurrency_timeout`). Never rejects.
   *
   * @throws ConfigError when `env` has no binding of the limiter's `binding` name
   */
  release(env: object, result: RateLimitResult): Promise<boolean>;
  /**
   * The response header fields of `result` in the limiter's `headers` form: `RateLimit-Policy`, `RateLimit` (or the
   * form's fields), and `Retry-After` when refused. Copy them onto the response you send.
   */
  headers(result: RateLimitResult): Headers;
  /**
   * Sets the fields {@link headers} returns straight onto `target` — your response's own `headers`, say — without
   * making a `Headers` to copy. Throws what `target.set` throws (a fetched response's headers are immutable).
   */
  setHeaders(result: RateLimitResult, target: HeaderSink): void;
  /** What a request of `cost` (default 1) would get now, consuming nothing (`reason: "peek"` when it would pass). */
  peek(env: object, key: string, options?: Omit<LimitCallOptions, "ctx">): Promise<RateLimitResult>;
  /**
   * Gives back exactly what `result` was granted (once): the request is not counted. `result` may be a copy — kept,
   * `structuredClone`d, sent through a queue or KV as JSON — and refunded in any isolate: its `handle` says where the
   * units were recorded. Resolves false when there was nothing to give back (a refusal, already refunded or settled, a
   * leased grant whose lease was settled since or belongs to another isolate), or the key's object did not answer
   * (logged as `refund_failed`).
   *
   * @throws TypeError when the handle is not as the limiter gave it
   */
  refund(env: object, result: RateLimitResult): Promise<boolean>;
  /**
   * Settles a request granted for a reservation — `limit(env, key, { cost: reserve })`, the most it may cost — to
   * what it did cost, once, when that is known (docs/configuration.md, "Settled costs"): `reserved − actual` units go
   * back to the grant's own windows, quotas, credits and usage, as a refund gives back; `actual − reserved` units are
   * recorded now as debt, over the limits if need be (the key waits them out; logged as `settle_debt`). `result` may
   * be a copy, settled in any isolate, as for {@link refund}. A result never settled keeps its reservation. Resolves
   * `settled: false` when nothing was done: a refusal, settled or refunded before, a leased grant of another isolate's,
   * or the key's object did not answer (logged as `settle_failed`).
   *
   * @throws RangeError when `actual` is not a whole number ≥ 0; TypeError when the handle is not as the limiter gave it
   */
  settle(env: object, result: RateLimitResult, actual: number): Promise<Settled>;
  /**
   * Decides an HTTP request as the proxy and the middleware do: its key read as the `key` setting says (or
   * `options.key`), its client address from `CF-Connecting-IP`, its cost by the `costs` rules and its route by its
   * method and path; for a plan with `concurrency`, a granted request takes a slot, released at once when the client
   * goes away (`request.signal`, not for a WebSocket upgrade) — else release it with {@link whenEnded} or
   * {@link release}. Resolves null when the request costs nothing (not limited, no headers).
   *
   * @throws LimiterError for a request without a usable key or client address, or a path the normaliser refuses
   */
  decideRequest(env: object, request: Request, options?: RequestOptions): Promise<RateLimitResult | null>;
  /**
   * The response to send for a request {@link decideRequest} granted: when the request holds a concurrency slot, it
   * is released once the response has ended — its body read to the end, failed, or cancelled, a WebSocket closed.
   */
  whenEnded(env: object, result: RateLimitResult, response: Response, ctx?: Background): Response;
  /**
   * The response to send for a request granted for a reservation whose actual cost is known only when its response has
   * ended — a stream of a language model's tokens, say: once its body has streamed to the end, failed, or been
   * cancelled by a client that went away, `options.actual()` is read and, when it is a number, the request is settled
   * to it ({@link settle}); null keeps the reservation. Pass the response {@link whenEnded} returned, if any.
   */
  settleWhenEnded(
    env: object,
    result: RateLimitResult,
    response: Response,
    options: { readonly ctx?: Background; readonly actual: () => number | null },
  ): Response;
  /** Forgets the key's grants (units leased to isolates and not yet expired still count). */
  reset(env: object, key: string): Promise<void>;
  /**
   * The shape of Cloudflare's rate limiting binding over this limiter (docs/configuration.md, "Coming from the Workers
   * rate limiting binding"): `binding(env).limit({ key, cost? })` resolves `{ success }`, this limiter's exact decision.
   * Pass the runtime's `ctx` so that lease refills and give-backs outlive the response.
   */
  binding(env: object, ctx?: Background): LimitBinding;
  /**
   * A `WorkerEntrypoint` class serving this limiter to other Workers over a service binding: export it by name
   * (`export const LimiterService = limiter.service()`) and bind it with `entrypoint = "LimiterService"`. Its calls
   * ({@link LimiterServiceCalls}) read this Worker's `env`; over the binding, a `TypeError` or `RangeError` arrives as
   * itself and a `LimiterError` as an `Error` with its `name` and `code`. Only in workerd (it extends the runtime's class).
   */
  service(): LimiterServiceClass;
  /**
   * Adds `add` credits to the key's balance (a top-up after a payment; docs/configuration.md, "Quotas and credits"):
   * a key that never spent any starts from its plan's `initial`. Resolves to the new balance. Never retried (the
   * object may have added them before an error): give an `id` (the payment's, 1 to 128 characters) and send it again
   * after a failure — a top-up with an id already seen adds nothing.
   *
   * @throws LimiterError as `limit()` does for the key; RangeError when `add` is not a positive whole number;
   *   ConfigError when the key's plan has no credits
   */
  credit(env: object, key: string, add: number, options?: { readonly id?: string }): Promise<number>;
  /**
   * {@link credit}, answering what the top-up did: the new `balance`, and `applied` — false when a top-up with this
   * `id` was applied before and this one added nothing (an audit trail records it as a repeat, not as credits added).
   *
   * @throws as {@link credit}; RangeError too for an `add` that would take the balance past `Number.MAX_SAFE_INTEGER`
   *   (nothing is added)
   */
  topUp(env: object, key: string, add: number, options?: { readonly id?: string }): Promise<TopUp>;
  /**
   * The key's exact usage per calendar `period` (`"day"` or `"month"` in its plan's usage zone) overlapping
   * `[from, to)` (ms; default: all that is kept), oldest first, periods without use left out: requests granted and
   * their cost, refunds subtracted (docs/configuration.md, "Usage").
   *
   * @throws LimiterError as `limit()` does for the key; ConfigError when its plan keeps no usage; RangeError for a
   *   period or range that is not one
   */
  usage(
    env: object,
    key: string,
    options: { readonly period: "day" | "month"; readonly from?: number; readonly to?: number },
  ): Promise<UsagePeriod[]>;
  /**
   * Mints a key for the signed plan named `plan` (docs/configuration.md, "Signed keys"), signed with `env.KEY_SECRET`,
   * with an account and an expiry when given: `{ key, plan, account, expires }`. Nothing is stored: the key proves
   * itself.
   *
   * @throws RangeError naming the field: no such plan, a plan not signed, a bad account or expiry, an account for a
   *   plan without account limits, a key longer than `key.max_length`; ConfigError when `KEY_SECRET` is not set
   */
  mintKey(env: object, plan: string, options?: MintOptions): Promise<Minted>;
  /**
   * The object name and plan of `key`, checked as `limit()` checks it, its plan by its prefix (the `verify` hook is
   * not asked); for a request without a key (`null`), those of the `anonymous` limits for the client address `ip`.
   *
   * @throws LimiterError `malformed_key`, `invalid_key`, `no_plan`, or `key_required` for none without `anonymous`
   */
  identify(key: string | null, ip?: string | null): Identity;
}
