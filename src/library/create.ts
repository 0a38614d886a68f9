/**
 * @module A {@link Limiter} over one pipeline ({@link limiterOf}) — its settings parsed once, its objects named apart
 * from every other limiter's, its namespace resolved once per `env`. No runtime imports: `createLimiter`
 * (src/library/service.ts) adds the runtime's `LimiterService`, the in-memory limiter (src/testing/) runs it in Node.
 */

import { epoch, now } from "../base/clock.ts";
import { type Background, LimiterClient, type LimiterNamespace } from "../client/index.ts";
import { callIds, callObject, callOnce } from "../client/policy.ts";
import { checkAccount } from "../config/accounts.ts";
import { routeBudget } from "../config/lookup.ts";
import { parseLimiterConfig } from "../config/parse.ts";
import { ConfigError, type LimiterConfig, type Plan } from "../config/types.ts";
import { type UsagePeriod, usageBy } from "../core/usage.ts";
import { type Asking, namespaceOf, Pipeline, routeNamed } from "../pipeline/index.ts";
import { settingsName } from "../pipeline/key.ts";
import { mintFor } from "../pipeline/signed.ts";
import { verifierOf } from "../pipeline/verify-hook.ts";
import type { LimiterStub, TopUp } from "../protocol.ts";
import { bindingOf } from "./binding.ts";
import type { LimitCallOptions, Limiter, LimiterServiceClass } from "./limiter.ts";
import type { LimiterOptions } from "./settings.ts";

/** What a limiter's name may be: it goes into every object name. */
const LIMITER_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * Checks the binding's name and the limiter's (`prefix`: its old spelling).
 *
 * @throws ConfigError naming the bad setting
 */
function checkNaming(binding: unknown, name: unknown, prefix: unknown): void {
  if (typeof binding !== "string" || binding === "") {
    throw new ConfigError(`createLimiter.binding: expected a binding name, got ${JSON.stringify(binding)}`);
  }
  for (const [field, value] of [
    ["name", name],
    ["prefix", prefix],
  ] as const) {
    if (value !== undefined && value !== null && (typeof value !== "string" || !LIMITER_NAME.test(value))) {
      throw new ConfigError(
        `createLimiter.${field}: expected 1 to 64 letters, digits, "_", "-" or "."${field === "name" ? " (or null)" : ""}, got ${JSON.stringify(value)}`,
      );
    }
  }
  if (name !== undefined && prefix !== undefined) {
    throw new ConfigError("createLimiter.prefix: give name only (prefix is its old spelling)");
  }
}

/** The runtime's `waitUntil` of `ctx`, bound (an `ExecutionContext`'s method needs its `this`). */
function bgOf(ctx: Background | undefined): Background {
  return ctx ? { waitUntil: (p: Promise<unknown>) => ctx.waitUntil?.(p) } : {};
}

/** `cost`, checked: a whole number ≥ 1. @throws RangeError */
function checked(cost: number): number {
  if (!Number.isSafeInteger(cost) || cost < 1) {
    throw new RangeError(`cost: expected a whole number ≥ 1, got ${String(cost)}`);
  }
  return cost;
}

/** `key`, checked: a non-empty string. @throws TypeError */
function keyOf(key: string): string {
  if (typeof key !== "string" || key === "") throw new TypeError("key: expected a non-empty string");
  return key;
}

/**
 * The name of a limiter given none: derived from its limits (pipeline/key.ts, `settingsName`) — refused for one with
 * calendar quotas, credits or usage, whose every key's counts, balance and usage a change of limits would leave behind
 * in the objects of the old name.
 *
 * @throws ConfigError saying a name is needed
 */
function derivedName(config: LimiterConfig): string {
  if ([config.defaultPlan, config.anonymous, ...config.plans].some((p) => p?.meters !== undefined)) {
    throw new ConfigError(
      'createLimiter.name: required with calendar quotas, credits or usage (e.g. name: "api"): the default name follows the limits, and a change of them would leave every key\'s counts, balance and usage behind',
    );
  }
  return settingsName(config);
}

/**
 * What a `limit()` or `acquire()` call asks the pipeline, checked.
 *
 * @throws TypeError for a key or an account that is not one; RangeError for a cost that is not a whole number ≥ 1
 */
function askingOf(key: string, options: LimitCallOptions, inFlight: boolean): Asking {
  const { cost = 1, ctx, route, ip, account } = options;
  return {
    key: keyOf(key),
    cost: checked(cost),
    bg: bgOf(ctx),
    inFlight,
    ...(route === undefined ? {} : { route }),
    ...(ip === undefined || ip === null ? {} : { ip }),
    ...(account === undefined ? {} : { account: checkAccount(account, "account") }),
  };
}

/** createLimiter's own options beside the settings: a misspelt setting's error lists them too (not `prefix`, the old spelling). */
const OWN_OPTIONS = ["name", "binding", "clock", "verify", "verifyCache"];

/** Makes a limiter's `LimiterService` class (`Limiter.service()`): src/library/service.ts's in workerd. */
export type ServiceMaker = (limiter: Limiter) => LimiterServiceClass;

/**
 * A limiter for these settings, validated now (`createLimiter`, src/library/service.ts, with the runtime's
 * `LimiterService` as `service`).
 *
 * @throws ConfigError naming the first bad setting
 */
export function limiterOf(options: LimiterOptions, service: ServiceMaker): Limiter {
  const { binding = "LIMITER", name: given, prefix, clock, verify, verifyCache, ...settings } = options;
  checkNaming(binding, given, prefix);
  const config = parseLimiterConfig(settings, "createLimiter", OWN_OPTIONS);
  const name = given !== undefined ? given : (prefix ?? derivedName(config));
  const time = clock ?? now;
  const current = pipelineOf(() => {
    const verifier = verifierOf(config, { verify, verifyCache }, time, "createLimiter");
    return new Pipeline(new LimiterClient(config, { clock: time }), name, verifier);
  });
  // Resolved once per limiter: an isolate's requests share one `env` (a different one, as in tests, resolves again).
  let seen: { env: object; ns: LimiterNamespace } | null = null;
  const namespace = (env: object): LimiterNamespace => {
    if (seen?.env !== env) seen = { env, ns: namespaceOf(env, binding, config.jurisdiction) };
    return seen.ns;
  };

  const topUpTarget = async (env: object, key: string) => {
    const { name: object, plan } = await current().identifyFor(env, keyOf(key));
    return { stub: () => namespace(env).getByName(object), plan, timeoutMs: config.objectTimeoutMs };
  };
  const decide = async (env: object, key: string, options: LimitCallOptions, inFlight: boolean) => {
    const decided = await current().decide(env, namespace(env), askingOf(key, options, inFlight));
    // A cost of at least 1 is always decided.
    return (decided as NonNullable<typeof decided>).result;
  };

  const limiter: Limiter = {
    config,
    bindingName: binding,
    name,
    get pipeline() {
      return current();
    },
    identify: (key, ip = null) => current().identify(key === null ? null : keyOf(key), ip),
    limit: (env, key, options = {}) => decide(env, key, options, false),
    acquire: (env, key, options = {}) => decide(env, key, options, true),
    release: (env, result) => current().release(namespace(env), result),
    decideRequest: (env, request, { key, cost, ctx } = {}) =>
      current().decideRequest(env, namespace(env), request, {
        ...(key === undefined ? {} : { key }),
        ...(cost === undefined ? {} : { cost }),
        ctx: bgOf(ctx),
      }),
    whenEnded: (env, result, response, ctx) => current().sent(namespace(env), result, response, bgOf(ctx)),
    settleWhenEnded: (env, result, response, { ctx, actual }) =>
      current().settleWhenEnded(namespace(env), result, response, { bg: bgOf(ctx), actual }),
    headers: (result) => current().headers(result),
    mintKey: (env, plan, options = {}) => mintFor(config, env, plan, { now: current().client.now(), ...options }),
    setHeaders: (result, target) => current().setHeaders(result, target),
    async peek(env, key, { cost = 1, route } = {}) {
      const ns = namespace(env);
      const pipeline = current();
      const { name: object, plan } = await pipeline.identifyFor(env, keyOf(key));
      const named = route === undefined ? null : routeNamed(config, plan, route);
      return pipeline.client.peek({ ns, name: object, plan, cost: checked(cost), route: named });
    },
    refund: async (env, result) => current().refund(namespace(env), result),
    settle: async (env, result, actual) => current().settle(namespace(env), result, actual),
    async reset(env, key) {
      const ns = namespace(env);
      const pipeline = current();
      const { name: object, plan } = await pipeline.identifyFor(env, keyOf(key));
      if (!plan.limits) return;
      const limits = plan.limits;
      const routes = plan.routes.map(routeBudget);
      await callObject(() => ns.getByName(object).reset(limits, 1, routes) as Promise<unknown>, config.objectTimeoutMs);
      pipeline.client.forget(ns, object);
    },
    credit: async (env, key, add, { id } = {}) => (await topUp(await topUpTarget(env, key), add, id)).balance,
    topUp: async (env, key, add, { id } = {}) => topUp(await topUpTarget(env, key), add, id),
    usage: async (env, key, options) => usageOf(current(), { env, ns: () => namespace(env) }, keyOf(key), options),
    binding: (env, ctx) => bindingOf(limiter, env, ctx),
    service: () => service(limiter),
  };
  return limiter;
}

/**
 * The pipeline `make` makes, and with it what the pipeline keeps in the isolate (leases, deny cache, verified keys),
 * made afresh in a new epoch: only the test kit's reset starts one (src/base/clock.ts), so in a Worker it is made once.
 */
function pipelineOf(make: () => Pipeline): () => Pipeline {
  let made = { pipeline: make(), epoch: epoch() };
  return () => {
    if (made.epoch !== epoch()) made = { pipeline: make(), epoch: epoch() };
    return made.pipeline;
  };
}

/** The calls a `LimiterService` serves (src/library/service.ts): a {@link Limiter}'s, or {@link servedOver}'s. */
export type ServedCalls = Pick<Limiter, "limit" | "peek" | "refund" | "settle">;

/**
 * {@link ServedCalls} over the pipeline and namespace `at(env)` gives, decided as a library limiter decides them (no
 * route, no client address): the proxy's for its `RATE_LIMIT` (src/proxy/index.ts).
 *
 * @throws as `at` does (the proxy: a ConfigError for bad vars), and as `limit()` for a bad key or cost
 */
export function servedOver(
  at: (env: object) => { readonly pipeline: Pipeline; readonly ns: LimiterNamespace },
): ServedCalls {
  return {
    async limit(env, key, options = {}) {
      const asking = askingOf(key, options, false);
      const { pipeline, ns } = at(env);
      const decided = await pipeline.decide(env, ns, asking);
      // A cost of at least 1 is always decided.
      return (decided as NonNullable<typeof decided>).result;
    },
    async peek(env, key, { cost = 1 } = {}) {
      const asked = { key: keyOf(key), cost: checked(cost) };
      const { pipeline, ns } = at(env);
      const { name, plan } = await pipeline.identifyFor(env, asked.key);
      return pipeline.client.peek({ ns, name, plan, cost: asked.cost, route: null });
    },
    async refund(env, result) {
      const { pipeline, ns } = at(env);
      return pipeline.refund(ns, result);
    },
    async settle(env, result, actual) {
      const { pipeline, ns } = at(env);
      return pipeline.settle(ns, result, actual);
    },
  };
}

/** The usage of `key` (`Limiter.usage`) at its object in the namespace `ns()` returns. */
async function usageOf(
  pipeline: Pipeline,
  { env, ns }: { readonly env: object; readonly ns: () => LimiterNamespace },
  key: string,
  { period, from = 0, to = USAGE_END }: Parameters<Limiter["usage"]>[2],
): Promise<UsagePeriod[]> {
  const { name: object, plan } = await pipeline.identifyFor(env, key);
  const spec = plan.meters?.usage;
  if (!spec) throw new ConfigError(`usage(): the plan ${JSON.stringify(plan.name)} of this key keeps no usage`);
  const range = { period, from, to };
  usageBy(spec, [], range); // throws a RangeError for a period or range that is not one
  const namespace = ns();
  return callObject(() => namespace.getByName(object).usage(spec, range), pipeline.config.objectTimeoutMs);
}

/** The ids of this module's top-up calls (protocol.ts, `CallId`). */
const topUpCall = callIds();

/**
 * A top-up of `add` credits (with its `id`, once for good) at the key's object: its new balance, and whether it added
 * them. Sent with a call id, and again with it after a failure that may have been applied (policy.ts, `callOnce`):
 * the object adds the credits once, and answers a call sent again as the first time.
 */
async function topUp(
  at: { readonly stub: () => LimiterStub; readonly plan: Plan; readonly timeoutMs: number },
  add: number,
  id: string | undefined,
): Promise<TopUp> {
  if (!Number.isSafeInteger(add) || add < 1) {
    throw new RangeError(`add: expected a positive whole number of credits, got ${String(add)}`);
  }
  const credits = at.plan.meters?.credits;
  if (!credits) throw new ConfigError(`credit(): the plan ${JSON.stringify(at.plan.name)} of this key has no credits`);
  const call = topUpCall();
  return callOnce(() => at.stub().topUp(credits, add, id, call), at.timeoutMs);
}

/** The end of `usage()`'s default range: 2100-01-01, past anything kept. */
const USAGE_END = Date.UTC(2100, 0, 1);
