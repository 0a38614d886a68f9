/**
 * @module The hono middleware (package export `./hono`): each request is limited per key before the
 * handler runs; allowed ones get the rate-limit headers on their response and the decision in
 * `c.get("rateLimit")`, refused ones a `429` problem+json with `Retry-After`.
 *
 * ```ts
 * import { rateLimit, type RateLimitVariables } from "strict-edge-rate-limiter/hono";
 * const app = new Hono<{ Bindings: Env; Variables: RateLimitVariables }>();
 * app.use("/api/*", rateLimit({ limits: [{ limit: 10, window: "1m" }], key: (c) => c.req.header("x-api-key") }));
 * ```
 */

import type { Context, Env, MiddlewareHandler } from "hono";
import type { Background, LimiterNamespace } from "./client/index.ts";
import { errorName } from "./client/policy.ts";
import type { RateLimitResult } from "./client/result.ts";
import { costFor, routeFor } from "./config.ts";
import { copyHeaders, HttpError, refusal } from "./http.ts";
import { createLimiter, type Limiter, type LimiterOptions, namespaceOf } from "./index.ts";
import { readKey } from "./key.ts";
import { normalized } from "./path.ts";
import { keyId, logEvent, recordDecision } from "./telemetry.ts";

export type { RateLimitResult } from "./client/result.ts";

/** What the middleware sets on the context: `c.get("rateLimit")` is the request's decision. */
export type RateLimitVariables = {
  rateLimit: RateLimitResult;
};

type Maybe<T> = T | Promise<T>;

/** A request's decision, the namespace it was made in, and the key's object name. */
interface Decided {
  readonly result: RateLimitResult;
  readonly ns: LimiterNamespace;
  readonly name: string;
}

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
}

/**
 * The rate-limit middleware. The settings are validated when it is created: a bad one throws a
 * `ConfigError` naming it.
 */
export function rateLimit<E extends Env = Env>(
  options: RateLimitOptions<E>,
): MiddlewareHandler<E & { Variables: RateLimitVariables }> {
  const { key, cost, skip, refund, handler, limiter: given, ...settings } = options;
  const limiter =
    given ?? createLimiter({ ...settings, ...(typeof key === "function" || key === undefined ? {} : { key }) });
  const { config, client, binding } = limiter;

  return async (c, next) => {
    const ctx = c as unknown as Context<E>;
    if (skip && (await skip(ctx))) return next();
    let decided: Decided | null;
    try {
      decided = await decide(ctx);
    } catch (e) {
      if (e instanceof HttpError) return e.toResponse();
      throw e;
    }
    if (!decided) return next();
    const { result, ns, name } = decided;
    c.set("rateLimit", result);
    if (!result.allowed) return handler ? handler(ctx, result) : refusal(result);
    await next();
    setHeaders(c, result.headers);
    if (refund && (await refund(ctx))) {
      // The response stands whatever happens to the refund: units not given back count until they leave the window.
      try {
        await client.refund(ns, result);
      } catch (e) {
        logEvent("refund_failed", { key_id: await keyId(name), message: errorName(e) }, "error");
      }
    }
  };

  /** The request's decision, or null when it costs nothing. */
  async function decide(c: Context<E>): Promise<Decided | null> {
    // The normalised path, read only when a rule needs it (a path the normaliser refuses is a 400 then).
    let path: string | undefined;
    const match = () => (path ??= normalized(new URL(c.req.url).pathname, config).match);
    const units =
      cost === undefined ? costFor(config, c.req.method, match()) : typeof cost === "number" ? cost : await cost(c);
    if (units === 0) return null;
    const k = typeof key === "function" ? (await key(c)) || null : readKey(c.req.raw, config.key);
    const { name, plan } = limiter.identify(k, c.req.header("cf-connecting-ip") ?? null);
    const ns = namespaceOf(c.env as object, binding);
    const route = plan.routes.length > 0 ? routeFor(plan, c.req.method, match()) : null;
    const result = await client.limit(ns, name, plan, units, background(c), route);
    await recordDecision(c.env as object, name, result);
    return { result, ns, name };
  }
}

/** The runtime's `waitUntil`, when the app runs with an execution context (not under `app.request()`). */
function background(c: Context): Background {
  try {
    const ctx = c.executionCtx;
    return { waitUntil: (p) => ctx.waitUntil(p) };
  } catch {
    return {};
  }
}

/** Copies the decision's headers onto the handler's response (copied first when its headers are immutable). */
function setHeaders(c: Context, headers: Headers): void {
  try {
    copyHeaders(headers, c.res.headers);
  } catch {
    c.res = new Response(c.res.body, c.res);
    copyHeaders(headers, c.res.headers);
  }
}
