/**
 * @module The hono middleware (package export `./hono`): each request is limited per key before the
 * handler runs; allowed ones get the rate-limit headers on their response and the decision in
 * `c.get("rateLimit")`, refused ones a `429` problem+json with `Retry-After`. A request without a
 * usable key throws an `HTTPException` (400 or 401) carrying the problem+json response, so an app's
 * `onError` can restyle it.
 *
 * ```ts
 * import { rateLimit, type RateLimitVariables } from "strict-edge-rate-limiter/hono";
 * const app = new Hono<{ Bindings: Env; Variables: RateLimitVariables }>();
 * app.use("/api/*", rateLimit({ limits: [{ limit: 10, window: "1m" }], key: (c) => c.req.header("x-api-key") }));
 * ```
 */

import type { Context, Env, MiddlewareHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import {
  createLimiter,
  type Limiter,
  LimiterError,
  type LimiterOptions,
  problemFor,
  type RateLimitResult,
  refusal,
  type Settled,
} from "./index.ts";

export type { RateLimitResult, Settled } from "./index.ts";

/**
 * What the middleware sets on the context: `c.get("rateLimit")` is the request's decision; for a granted request,
 * `c.get("rateLimitCost")` settles its cost (docs/configuration.md, "Settled costs").
 */
export type RateLimitVariables = {
  rateLimit: RateLimitResult;
  rateLimitCost: RateLimitCost;
};

/**
 * A granted request's cost, settled by the handler (docs/configuration.md, "Settled costs"): granted for its `cost` —
 * a reservation, the most it may cost — it is settled once to what it did cost.
 */
export interface RateLimitCost {
  /**
   * Settles the request to `actual` now: `reserved − actual` units given back, `actual − reserved` recorded as debt.
   * Once per request (a second settle, or one after `report`'s, does nothing: `settled: false`).
   *
   * @throws RangeError (a rejection) when `actual` is not a whole number ≥ 0
   */
  settle(actual: number): Promise<Settled>;
  /**
   * Reports the request's actual cost so far, for a response that streams (the middleware's `reportCost: true`): the
   * last report counts, and the request is settled to it when the response has ended — its body streamed to the end,
   * failed, or cancelled by a client that went away. A request with no report keeps its reservation.
   *
   * @throws RangeError when `actual` is not a whole number ≥ 0; TypeError when the middleware has no `reportCost`
   */
  report(actual: number): void;
}

type Maybe<T> = T | Promise<T>;

/** The middleware's options: a limiter's settings (or a `limiter` to share), and how to read each request. */
export interface RateLimitOptions<E extends Env = Env> extends Omit<LimiterOptions, "key"> {
  /**
   * The request's key: a function (`undefined`, `null` or `""`: the request has none — `401`, or
   * the `anonymous` limits per client IP), or where to read it (`RATE_LIMIT.key`'s table; by
   * default the `x-api-key` header, then `Authorization: Bearer`).
   */
  readonly key?: ((c: Context<E>) => Maybe<string | null | undefined>) | LimiterOptions["key"];
  /** The request's cost in units: a number or a function; by default the first matching `costs` rule, else 1. 0: not limited. */
  readonly cost?: number | ((c: Context<E>) => Maybe<number>);
  /** Requests for which this returns true are not limited at all (no decision, no headers). */
  readonly skip?: (c: Context<E>) => Maybe<boolean>;
  /**
   * Called after the handler: true gives the request's units back (it is not counted), e.g.
   * `(c) => c.res.status >= 500`.
   */
  readonly refund?: (c: Context<E>) => Maybe<boolean>;
  /** The answer to a refused request; by default a `429` (or, limiter unavailable and failing closed, `503`) problem+json. */
  readonly handler?: (c: Context<E>, result: RateLimitResult) => Maybe<Response>;
  /** A limiter to use instead of one built from the settings (to share its leases between several `use`s). */
  readonly limiter?: Limiter;
  /**
   * The handler reports each request's actual cost with `c.get("rateLimitCost").report(n)`, as its response streams;
   * the request is settled to the last report when the response has ended (docs/configuration.md, "Settled costs").
   * Off by default: a response is then passed on as the handler made it.
   */
  readonly reportCost?: boolean;
}

/**
 * The rate-limit middleware. The settings are validated when it is created: a bad one throws a
 * `ConfigError` naming it.
 */
export function rateLimit<E extends Env = Env>(
  options: RateLimitOptions<E>,
): MiddlewareHandler<E & { Variables: RateLimitVariables }> {
  const { key, cost, skip, refund, handler, limiter: given, reportCost = false, ...settings } = options;
  const limiter =
    given ?? createLimiter({ ...settings, ...(typeof key === "function" || key === undefined ? {} : { key }) });
  const { config } = limiter;

  return async (c, next) => {
    const ctx = c as unknown as Context<E>;
    if (skip && (await skip(ctx))) return next();
    const env = c.env as object;
    const bg = background(c);
    let result: RateLimitResult | null;
    try {
      result = await limiter.decideRequest(env, c.req.raw, {
        ...(typeof key === "function" ? { key: () => key(ctx) } : {}),
        ...(cost === undefined ? {} : { cost: typeof cost === "number" ? cost : () => cost(ctx) }),
        ctx: bg,
      });
    } catch (e) {
      if (!(e instanceof LimiterError)) throw e;
      const res = problemFor(e, config.key.bearer);
      throw new HTTPException(res.status as 400, { res, message: e.message, cause: e });
    }
    if (!result) return next();
    c.set("rateLimit", result);
    if (!result.allowed) return handler ? handler(ctx, result) : refusal(result, config.headers);
    const settling = costOf(limiter, env, result, reportCost);
    c.set("rateLimitCost", settling.handle);
    try {
      await next();
      setHeaders(c, limiter, result);
      // The response stands whatever happens to the refund: units not given back count until they leave the window.
      if (refund && (await refund(ctx))) await limiter.refund(env, result);
    } catch (e) {
      await limiter.release(env, result);
      throw e;
    }
    // With `concurrency`, the request's slot is freed once the handler's response has ended (or its socket closed);
    // with `reportCost`, its cost is settled then to what the handler reported.
    let sent = limiter.whenEnded(env, result, c.res, bg);
    if (reportCost) sent = limiter.settleWhenEnded(env, result, sent, { ctx: bg, actual: settling.reported });
    if (sent !== c.res) c.res = sent;
  };
}

/** A granted request's {@link RateLimitCost}, and the cost its handler last reported (null: none). */
function costOf(
  limiter: Limiter,
  env: object,
  result: RateLimitResult,
  reportCost: boolean,
): { readonly handle: RateLimitCost; readonly reported: () => number | null } {
  let reported: number | null = null;
  const handle: RateLimitCost = {
    settle: (actual) => limiter.settle(env, result, actual),
    report(actual) {
      if (!reportCost) throw new TypeError("report(): set reportCost: true on the middleware, or call settle()");
      if (!Number.isSafeInteger(actual) || actual < 0)
        throw new RangeError(`actual: expected a whole number ≥ 0, got ${String(actual)}`);
      reported = actual;
    },
  };
  return { handle, reported: () => reported };
}

/** The runtime's `waitUntil`, when the app runs with an execution context (not under `app.request()`). */
function background(c: Context): { waitUntil?(promise: Promise<unknown>): void } {
  try {
    const ctx = c.executionCtx;
    return { waitUntil: (p) => ctx.waitUntil(p) };
  } catch {
    return {};
  }
}

/**
 * Sets the decision's headers on the handler's response (made into one of its own first when its headers are
 * immutable: a fetched response's), straight onto it: no `Headers` made and copied per request.
 */
function setHeaders(c: Context, limiter: Limiter, result: RateLimitResult): void {
  try {
    limiter.setHeaders(result, c.res.headers);
  } catch {
    c.res = new Response(c.res.body, c.res);
    limiter.setHeaders(result, c.res.headers);
  }
}
