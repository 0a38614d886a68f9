/**
 * @module The proxy app: the vars' configuration → the request pipeline (src/pipeline/index.ts) → the
 * origin, plus the operators' API and page. One pipeline per configuration, so the isolate's
 * leases and deny cache belong to it.
 */

import { LimiterError } from "../base/errors.ts";
import { logEvent } from "../base/log.ts";
import type { NormalPath } from "../base/path.ts";
import { type Background, type ClientOptions, LimiterClient, type LimiterNamespace } from "../client/index.ts";
import { errorName } from "../client/policy.ts";
import type { RateLimitResult } from "../client/result.ts";
import { costRuleFor } from "../config/lookup.ts";
import { parseConfig } from "../config/parse.ts";
import { type Config, ConfigError } from "../config/types.ts";
import type { RateLimiter } from "../object/index.ts";
import { clientSignal, HttpError, normalized, problem, problemFor, refusal } from "../pipeline/http.ts";
import { type DecisionObserver, Pipeline } from "../pipeline/index.ts";
import { handleAdmin, isAdminRequest } from "./admin/index.ts";
import { corsFor, isPreflight, withCors } from "./cors.ts";
import { forward, type OriginFetcher } from "./forward.ts";
import { objectsOf } from "./objects.ts";
import { settledResponse } from "./settle.ts";

/**
 * The bindings the proxy reads: the generated `Env` (`npm run types`), with the vars as `unknown`
 * (the dashboard and `--var` deliver strings; `parseConfig` checks them). `ORIGIN_SERVICE`, when
 * bound, carries allowed requests instead of the public fetch. `ADMIN_TOKEN` (a secret) turns the
 * admin API on; `LIMITER_ANALYTICS`, when bound, gets one data point per decision.
 */
export interface WorkerEnv {
  readonly LIMITER: DurableObjectNamespace<RateLimiter>;
  readonly ORIGIN?: unknown;
  readonly RATE_LIMIT?: unknown;
  readonly ORIGIN_SERVICE?: Fetcher;
  readonly ADMIN_TOKEN?: string;
  readonly LIMITER_ANALYTICS?: AnalyticsEngineDataset;
  /** The secret signed keys are minted and checked with (docs/configuration.md, "Signed keys"). */
  readonly KEY_SECRET?: string;
  /** The secret before `KEY_SECRET`, still accepted while keys move over (docs/operating.md, "Rotating KEY_SECRET"). */
  readonly KEY_SECRET_PREVIOUS?: string;
}

/** Observers of the proxy's work, and the runtime's `waitUntil` for work after the response. */
export interface Hooks extends Background {
  /** Called with every decision and the key's object name, before the response is built. */
  readonly onDecision?: DecisionObserver;
}

/** The parsed configuration of one set of vars, and its client. */
interface Loaded {
  readonly origin: unknown;
  readonly rateLimit: unknown;
  readonly config: Config | ConfigError;
  readonly pipeline: Pipeline<Config> | null;
}

/** The proxy as a Worker: `fetch` for the runtime, `handle` with hooks for tests and embedders. */
export interface ProxyApp {
  fetch(request: Request, env: WorkerEnv, ctx?: Background): Promise<Response>;
  /** Handles one request end to end; never throws, never returns a stack trace. */
  handle(request: Request, env: WorkerEnv, hooks?: Hooks): Promise<Response>;
  /** The client serving these vars (null while they are invalid): its leases and deny cache. */
  clientFor(env: WorkerEnv): LimiterClient<Config> | null;
}

/** Configurations kept per isolate (the vars of one deploy are one; tests use many). */
const MAX_CONFIGS = 16;

/** A proxy with its own clients; `options.clock` drives every client's clock and the admin API's. */
export function createProxy(options: ClientOptions = {}): ProxyApp {
  const loaded: Loaded[] = [];
  const now = options.clock ?? Date.now;

  /** Parses the vars once (again only when they change); logs an error once. */
  function load(env: WorkerEnv): Loaded {
    const found = loaded.find((l) => l.origin === env.ORIGIN && l.rateLimit === env.RATE_LIMIT);
    if (found) return found;
    let config: Config | ConfigError;
    try {
      config = parseConfig(env);
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      config = e;
      logEvent("config_error", { message: e.message }, "error");
    }
    // The proxy names its objects `key:<key>` (no scope): it is the binding's one limiter.
    const pipeline = config instanceof ConfigError ? null : new Pipeline(new LimiterClient(config, options), null);
    const entry: Loaded = { origin: env.ORIGIN, rateLimit: env.RATE_LIMIT, config, pipeline };
    if (loaded.length >= MAX_CONFIGS) loaded.shift();
    loaded.push(entry);
    return entry;
  }

  async function handle(request: Request, env: WorkerEnv, hooks: Hooks = {}): Promise<Response> {
    const { config, pipeline } = load(env);
    if (config instanceof ConfigError || !pipeline) {
      return problem(500, "Rate limiter misconfigured", (config as ConfigError).message);
    }
    // A listed origin's browser may read the limiter's answers and its rate-limit fields.
    const cors = corsFor(request, config.cors, config.headers);
    const answer = (response: Response, own: boolean) => (cors ? withCors(response, cors, own) : response);
    try {
      const url = new URL(request.url);
      const path = normalized(url.pathname, config);
      if (isAdminRequest(request, path.match, env, config)) {
        return await handleAdmin(request, path.match, env, config, {
          forget: (name) => pipeline.client.forget(objectsOf(env, config), name, hooks),
          now,
        });
      }
      const ns = objectsOf(env, config);
      return await limitAndForward({ request, url, path, env, ns, hooks }, pipeline, answer);
    } catch (e) {
      if (e instanceof HttpError) return answer(e.toResponse(), true);
      if (e instanceof LimiterError) return answer(problemFor(e, config.key.bearer), true);
      // Logged where it was found (once).
      if (e instanceof ConfigError) return problem(500, "Rate limiter misconfigured", e.message);
      logEvent("internal_error", { message: errorName(e) }, "error");
      return problem(500, "Internal Server Error", "The rate limiter failed unexpectedly.");
    }
  }

  return {
    fetch: (request, env, ctx) => handle(request, env, ctx ? { waitUntil: (p) => ctx.waitUntil?.(p) } : {}),
    handle,
    clientFor: (env) => load(env).pipeline?.client ?? null,
  };
}

/** A request the proxy limits and forwards: the request, its URL and normalised path, the Worker's env and hooks. */
interface Proxied {
  readonly request: Request;
  readonly url: URL;
  readonly path: NormalPath;
  readonly env: WorkerEnv;
  /** The limiter's objects ({@link objectsOf}). */
  readonly ns: LimiterNamespace;
  readonly hooks: Hooks;
}

/**
 * Decides `q` and, granted, forwards it to the origin with the decision's headers on the origin's response (`answer`
 * adds what the whole proxy adds, CORS); refused, answers it.
 */
async function limitAndForward(
  q: Proxied,
  pipeline: Pipeline<Config>,
  answer: (response: Response, own: boolean) => Response,
): Promise<Response> {
  const { request, url, path, env, ns, hooks } = q;
  const { config } = pipeline;
  const send: OriginFetcher = env.ORIGIN_SERVICE ? (r) => (env.ORIGIN_SERVICE as Fetcher).fetch(r) : (r) => fetch(r);
  if (isPreflight(request)) {
    // Not an API call and never keyed: through to the origin (which answers it), within its own budget per address.
    const ip = request.headers.get("cf-connecting-ip");
    const result = await pipeline.decideAddress(env, ns, { budget: config.cors.preflight, ip, bg: hooks });
    if (!result.allowed) return answer(refusal(result, config.headers), true);
    return forward(request, config, send, url, path.path);
  }
  // Checked before anything is counted: fetch cannot send such a request on, and the origin would never see it.
  if (carriesBody(request)) {
    throw new HttpError(400, "Bad Request", `A ${request.method} request cannot carry a body; send it without one.`);
  }
  // The pipeline's one path, as the library and the middleware take it, with the path normalised above (the rules
  // match it, and it is what is forwarded) and the proxy's observer.
  const result = await pipeline.decideRequest(env, ns, request, {
    path: path.match,
    ctx: hooks,
    ...(hooks.onDecision ? { observe: hooks.onDecision } : {}),
  });
  if (!result) return answer(await forward(request, config, send, url, path.path), false);
  if (!result.allowed) return answer(refusal(result, config.headers), true);
  let response: Response;
  try {
    response = await forward(request, config, send, url, path.path);
  } catch (e) {
    hooks.waitUntil?.(pipeline.release(ns, result));
    throw e;
  }
  pipeline.setHeaders(result, response.headers);
  if (config.refundStatuses.has(response.status)) {
    // Started here, whether or not there is a waitUntil to keep it alive (`?.` would skip the call).
    const refund = pipeline.refund(ns, result);
    hooks.waitUntil?.(refund);
  } else response = settling(q, pipeline, result, response);
  return answer(pipeline.sent(ns, result, response, hooks), false);
}

/**
 * `response` as sent for a granted request whose `costs` rule settles its cost from the response (docs/llm.md): read
 * as it passes, the grant settled when its body ends (src/proxy/settle.ts). Any other response as it is.
 */
function settling(q: Proxied, pipeline: Pipeline<Config>, result: RateLimitResult, response: Response): Response {
  const settle = costRuleFor(pipeline.config, q.request.method, q.path.match)?.settled?.settle;
  // Nothing to settle: no rule says so, or nothing was granted (an unlimited plan, failing open).
  if (settle === undefined || !result.handle?.grants.length) return response;
  return settledResponse(response, {
    settle,
    result,
    settleTo: (actual) => pipeline.settle(q.ns, result, actual),
    bg: q.hooks,
    left: clientSignal(q.request),
  });
}

/**
 * Whether a `GET` or `HEAD` carries a body: one framed by `Transfer-Encoding` (chunked, even an empty one: the framing
 * says a body follows, whether or not the runtime hands the Worker a stream for it), or a body stream other than an
 * empty one declared by `Content-Length: 0`.
 */
function carriesBody(request: Request): boolean {
  if (request.method !== "GET" && request.method !== "HEAD") return false;
  if (request.headers.has("transfer-encoding")) return true;
  return request.body !== null && request.headers.get("content-length") !== "0";
}
