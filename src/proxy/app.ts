/**
 * @module The proxy app: the vars' configuration → the request pipeline (src/pipeline/index.ts) → the
 * origin, plus the operators' API and page. One pipeline per configuration, so the isolate's
 * leases and deny cache belong to it.
 */

import { now as clockNow, epoch } from "../base/clock.ts";
import { LimiterError } from "../base/errors.ts";
import { keyId, logEvent } from "../base/log.ts";
import type { NormalPath } from "../base/path.ts";
import { type Background, type ClientOptions, LimiterClient, type LimiterNamespace } from "../client/index.ts";
import { errorName } from "../client/policy.ts";
import type { RateLimitResult } from "../client/result.ts";
import { costRuleFor } from "../config/lookup.ts";
import { parseConfig } from "../config/parse.ts";
import { type Config, ConfigError, type Settle } from "../config/types.ts";
import type { RateLimiter } from "../object/index.ts";
import { clientSignal, HttpError, normalized, problem, problemFor, refusal } from "../pipeline/http.ts";
import { type DecisionObserver, Pipeline } from "../pipeline/index.ts";
import type { Identity } from "../pipeline/key.ts";
import { handleAdmin, isAdminRequest } from "./admin/index.ts";
import { corsFor, isPreflight, withCors } from "./cors.ts";
import { type Forwarding, forward, type OriginFetcher } from "./forward.ts";
import { objectsOf } from "./objects.ts";
import { setProviderHeaders } from "./provider-headers.ts";
import { settledResponse } from "./settle.ts";
import { type Caller, type Target, targetFor, targetsOf } from "./upstream.ts";

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
  /** The origins with their headers' secrets read (src/proxy/upstream.ts); empty while the config is invalid. */
  readonly targets: readonly Target[];
}

/** The proxy as a Worker: `fetch` for the runtime, `handle` with hooks for tests and embedders. */
export interface ProxyApp {
  fetch(request: Request, env: WorkerEnv, ctx?: Background): Promise<Response>;
  /** Handles one request end to end; never throws, never returns a stack trace. */
  handle(request: Request, env: WorkerEnv, hooks?: Hooks): Promise<Response>;
  /** The client serving these vars (null while they are invalid): its leases and deny cache. */
  clientFor(env: WorkerEnv): LimiterClient<Config> | null;
  /**
   * The pipeline serving these vars and the objects it decides at: what the proxy's `LimiterService` calls
   * (src/proxy/index.ts).
   *
   * @throws ConfigError while the vars are invalid
   */
  serving(env: WorkerEnv): { readonly pipeline: Pipeline<Config>; readonly ns: LimiterNamespace };
}

/** Configurations kept per isolate (the vars of one deploy are one; tests use many). */
const MAX_CONFIGS = 16;

/** A proxy with its own clients; `options.clock` drives every client's clock and the admin API's. */
export function createProxy(options: ClientOptions = {}): ProxyApp {
  const loaded: Loaded[] = [];
  const now = options.clock ?? clockNow;
  /** The epoch its clients were made in: only the test kit's reset starts another (src/base/clock.ts). */
  let madeIn = epoch();

  /** Parses the vars once (again only when they change, or in a new epoch: new clients); logs an error once. */
  function load(env: WorkerEnv): Loaded {
    if (madeIn !== epoch()) {
      loaded.length = 0;
      madeIn = epoch();
    }
    const found = loaded.find((l) => l.origin === env.ORIGIN && l.rateLimit === env.RATE_LIMIT);
    if (found) return found;
    let config: Config | ConfigError;
    let targets: Target[] = [];
    try {
      config = parseConfig(env);
      targets = targetsOf(config, env);
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      config = e;
      logEvent("config_error", { message: e.message }, "error");
    }
    // The proxy names its objects `key:<key>` (no scope): it is the binding's one limiter.
    const pipeline =
      config instanceof ConfigError ? null : new Pipeline(new LimiterClient(config, { clock: now }), null);
    const entry: Loaded = { origin: env.ORIGIN, rateLimit: env.RATE_LIMIT, config, pipeline, targets };
    if (loaded.length >= MAX_CONFIGS) loaded.shift();
    loaded.push(entry);
    return entry;
  }

  async function handle(request: Request, env: WorkerEnv, hooks: Hooks = {}): Promise<Response> {
    const { config, pipeline, targets } = load(env);
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
      // Before anything is counted: a path no origin serves is answered here.
      const target = targetFor(targets, path);
      if (target === null) throw noOrigin(targets);
      const ns = objectsOf(env, config);
      return await limitAndForward({ request, url, path, env, ns, hooks, target }, pipeline, answer);
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
    serving(env) {
      const { config, pipeline } = load(env);
      if (config instanceof ConfigError || !pipeline) throw config;
      return { pipeline, ns: objectsOf(env, config) };
    },
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
  /** The origin its path goes to. */
  readonly target: Target;
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
  const { request, url, path, env, ns, hooks, target } = q;
  const { config } = pipeline;
  const send: OriginFetcher = env.ORIGIN_SERVICE ? (r) => (env.ORIGIN_SERVICE as Fetcher).fetch(r) : (r) => fetch(r);
  const sending = (caller: Caller | null): Forwarding => ({
    target,
    send,
    incoming: url,
    path: path.path,
    keySource: config.key,
    caller,
    timeoutMs: config.originTimeoutMs,
  });
  if (isPreflight(request)) {
    // Not an API call and never keyed: through to the origin (which answers it), within its own budget per address.
    const ip = request.headers.get("cf-connecting-ip");
    const result = await pipeline.decideAddress(env, ns, { budget: config.cors.preflight, ip, bg: hooks });
    if (!result.allowed) return answer(refusal(result, config.headers), true);
    return forward(request, sending(null));
  }
  // Checked before anything is counted: fetch cannot send such a request on, and the origin would never see it.
  if (carriesBody(request)) {
    throw new HttpError(400, "Bad Request", `A ${request.method} request cannot carry a body; send it without one.`);
  }
  // The pipeline's one path, as the library and the middleware take it, with the path normalised above (the rules
  // match it, and it is what is forwarded) and the proxy's observer.
  const decided = await pipeline.decideIncoming(env, ns, request, {
    path: path.match,
    ctx: hooks,
    ...(hooks.onDecision ? { observe: hooks.onDecision } : {}),
  });
  if (!decided) {
    // Free by its `costs` rule, so not decided: where the operator's credential goes with it, its key must still be
    // one the limiter accepts (checked in the isolate, a refused one counted against its address's guesses, nothing
    // else counted), and the origin is told whose it is.
    if (target.upstream.forwardKey) return answer(await forward(request, sending(null)), false);
    const known = await pipeline.identifyIncoming(env, ns, request, hooks);
    if ("refused" in known) return answer(refusal(known.refused, config.headers), true);
    return answer(await forward(request, sending(await callerOf(known.identity))), false);
  }
  const { result, identity } = decided;
  // A settled rule's provider (its settle's name): its own rate-limit fields are replaced by the key's.
  const settle =
    config.costs.length === 0 ? undefined : costRuleFor(config, request.method, path.match)?.settled?.settle;
  const provider = settle?.from === "openai" || settle?.from === "anthropic" ? settle.from : null;
  if (!result.allowed) {
    const refused = refusal(result, config.headers);
    if (provider) setProviderHeaders(refused.headers, provider, result);
    return answer(refused, true);
  }
  let response: Response;
  try {
    response = await forward(request, sending(await callerOf(identity)));
  } catch (e) {
    hooks.waitUntil?.(pipeline.release(ns, result));
    throw e;
  }
  pipeline.setHeaders(result, response.headers);
  if (provider) setProviderHeaders(response.headers, provider, result);
  if (config.refundStatuses.has(response.status)) {
    // Started here, whether or not there is a waitUntil to keep it alive (`?.` would skip the call).
    const refund = pipeline.refund(ns, result);
    hooks.waitUntil?.(refund);
  } else if (settle) response = settling(q, pipeline, { result, settle }, response);
  return answer(pipeline.sent(ns, result, response, hooks), false);
}

/** Who is calling, as the origin is told: a key's id (none for a request without a key), its plan, its account. */
async function callerOf(identity: Identity): Promise<Caller> {
  const keyed = identity.name.startsWith("key:");
  return {
    keyId: keyed ? await keyId(identity.name) : null,
    plan: identity.plan.name,
    account: identity.account ?? null,
  };
}

/** The answer to a path no origin serves (`origins` without `ORIGIN`): `404`, nothing counted. */
function noOrigin(targets: readonly Target[]): HttpError {
  const served = targets.map((t) => t.upstream.path).join(", ");
  return new HttpError(404, "Not Found", `No origin is served at this path; the paths served start with ${served}.`);
}

/**
 * `response` as sent for a granted request whose `costs` rule settles its cost from the response (`settle`,
 * docs/llm.md): read as it passes, the grant settled when its body ends (src/proxy/settle.ts). Any other response as
 * it is.
 */
function settling(
  q: Proxied,
  pipeline: Pipeline<Config>,
  granted: { readonly result: RateLimitResult; readonly settle: Settle },
  response: Response,
): Response {
  const { result, settle } = granted;
  // Nothing to settle: nothing was granted (an unlimited plan, failing open).
  if (!result.handle?.grants.length) return response;
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
