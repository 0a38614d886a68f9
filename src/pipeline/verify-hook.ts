/**
 * @module Keys kept elsewhere (docs/configuration.md, "Keys kept elsewhere: the verify hook"): the library's and the
 * middleware's `verify(key, env)` says which plan a key has (and its account), or null for a key it does not know.
 * Its answers are cached in the isolate — known keys for `hit`, unknown ones for `miss` — in a bounded table, and the
 * lookups of one key in flight at once are one call: a flood of one forged key costs one lookup per isolate per
 * `miss`, not one per request. A lookup has `object_timeout` to answer. Time is passed in.
 */

import { LimiterError } from "../base/errors.ts";
import { keyId, logEvent } from "../base/log.ts";
import { errorName, withDeadline } from "../client/policy.ts";
import { checkAccount } from "../config/accounts.ts";
import { duration, type Obj, object, POSITIVE, unknownFields, wholeNumber } from "../config/fields.ts";
import { ConfigError, type LimiterConfig, type Plan } from "../config/types.ts";
import { unknownKey, verifyFailed } from "./http.ts";
import { type Identity, objectName } from "./key.ts";

/** What a `verify` hook answers for a key: its plan's name, its plan and account, or null for a key it does not know. */
export type VerifyAnswer = string | { readonly plan: string; readonly account?: string | null } | null;

/** The `verify` hook: called with the key (already checked as a key) and the Worker's `env`. */
export type VerifyHook<E = never> = (key: string, env: E) => VerifyAnswer | Promise<VerifyAnswer>;

/** How long the isolate keeps the hook's answers (ms), and how many at most. */
export interface VerifyCacheSettings {
  /** A known key's answer: its plan and account. */
  readonly hitMs: number;
  /** An unknown key's answer (null). */
  readonly missMs: number;
  /** The most keys kept; past it, the least recently used is dropped. */
  readonly max: number;
}

/** The defaults: known keys 5 minutes, unknown ones 30 seconds, 10,000 keys. */
export const VERIFY_CACHE_DEFAULTS: VerifyCacheSettings = { hitMs: 300_000, missMs: 30_000, max: 10_000 };

/** A key's verified plan and account (null: the hook does not know the key). */
type Verified = { readonly plan: Plan; readonly account: string | null } | null;

/** One isolate's verifier over one limiter's hook: its cache, and the lookups in flight. */
export class KeyVerifier {
  readonly #config: LimiterConfig;
  readonly #hook: VerifyHook<object>;
  readonly #settings: VerifyCacheSettings;
  readonly #clock: () => number;
  readonly #cache = new Map<string, { readonly verified: Verified; readonly until: number }>();
  readonly #pending = new Map<string, Promise<Verified>>();

  constructor(config: LimiterConfig, hook: VerifyHook<object>, settings: VerifyCacheSettings, clock: () => number) {
    this.#config = config;
    this.#hook = hook;
    this.#settings = settings;
    this.#clock = clock;
  }

  /** Keys whose answers are cached now (expired ones included until they are read or pushed out). */
  get size(): number {
    return this.#cache.size;
  }

  /**
   * The identity of `key` (already checked as a key): the object name of the key, the hook's plan in place of the
   * one its prefix would choose, and the hook's account.
   *
   * @throws LimiterError `invalid_key` (not `key.pattern`: the hook is not asked), `unknown_key` (the hook answered
   *   null), `verify_failed` (it threw; logged by key id)
   * @throws ConfigError for an answer that names no plan of the limiter, or is not an answer
   */
  async identify(env: object, key: string, scope: string | null): Promise<Identity> {
    if (this.#config.key.pattern && !this.#config.key.pattern.test(key))
      throw new LimiterError("invalid_key", "This API key is not valid.");
    const name = objectName("key", key, scope);
    const verified = await this.#lookup(env, key, name);
    if (verified === null) throw unknownKey();
    return { name, plan: verified.plan, account: verified.account };
  }

  /** The cached answer while it lasts, else the lookup in flight, else a new one. */
  #lookup(env: object, key: string, name: string): Promise<Verified> {
    const now = this.#clock();
    const cached = this.#cache.get(key);
    if (cached !== undefined) {
      this.#cache.delete(key);
      if (now < cached.until) {
        // Most recently used last: the first entry is the one to drop.
        this.#cache.set(key, cached);
        return Promise.resolve(cached.verified);
      }
    }
    const pending = this.#pending.get(key);
    if (pending !== undefined) return pending;
    const lookup = this.#ask(env, key, name).finally(() => this.#pending.delete(key));
    this.#pending.set(key, lookup);
    return lookup;
  }

  /** One call of the hook, its answer cached (not a failure: the next request asks again). */
  async #ask(env: object, key: string, name: string): Promise<Verified> {
    let answer: unknown;
    try {
      // A deadline as on every object call (`object_timeout`): a store that hangs must not hold every request of the key.
      const ms = this.#config.objectTimeoutMs;
      const late = () => new Error(`the verify hook did not answer within ${ms} ms`);
      answer = await withDeadline(
        Promise.resolve().then(() => this.#hook(key, env)),
        ms,
        late,
      );
    } catch (e) {
      // The hook's message may quote the key: never in a log line.
      const message = errorName(e).replaceAll(key, "<key>");
      logEvent("verify_failed", { key_id: await keyId(name), message }, "error");
      throw verifyFailed();
    }
    const verified = this.#verified(answer);
    const { hitMs, missMs, max } = this.#settings;
    if (this.#cache.size >= max) this.#cache.delete(this.#cache.keys().next().value as string);
    this.#cache.set(key, { verified, until: this.#clock() + (verified === null ? missMs : hitMs) });
    return verified;
  }

  /**
   * The hook's answer as a plan and account.
   *
   * @throws ConfigError naming what is wrong (never the key)
   */
  #verified(answer: unknown): Verified {
    if (answer === null || answer === undefined) return null;
    const named = typeof answer === "string" ? { plan: answer } : answer;
    if (typeof named !== "object" || typeof (named as { plan?: unknown }).plan !== "string") {
      throw new ConfigError(`verify: expected a plan's name, { plan, account? } or null, got ${typeof answer}`);
    }
    const { plan: name, account } = named as { plan: string; account?: unknown };
    const plan = planNamed(this.#config, name);
    if (account === undefined || account === null) return { plan, account: null };
    try {
      return { plan, account: checkAccount(account, "verify: the answer's account") };
    } catch (e) {
      throw new ConfigError((e as Error).message);
    }
  }
}

/**
 * The plan called `name`: one of `plans`, or `"default"` for the top-level limits.
 *
 * @throws ConfigError naming the plans there are
 */
function planNamed(config: LimiterConfig, name: string): Plan {
  const plan = config.plans.find((p) => p.name === name) ?? (name === "default" ? config.defaultPlan : null);
  if (plan) return plan;
  const names = [...(config.defaultPlan ? ["default"] : []), ...config.plans.map((p) => p.name)];
  throw new ConfigError(
    `verify: the hook answered the plan ${JSON.stringify(name)}, which this limiter does not have (its plans: ${names.map((n) => JSON.stringify(n)).join(", ") || "none"})`,
  );
}

/**
 * The verifier of a limiter made with `verify` and `verifyCache` (createLimiter's options, at `root`); null without
 * a hook.
 *
 * @throws ConfigError naming the option: a hook that is not a function, a cache setting that is not one, or
 *   `verifyCache` without `verify`
 */
export function verifierOf(
  config: LimiterConfig,
  options: { readonly verify?: unknown; readonly verifyCache?: unknown },
  clock: () => number,
  root: string,
): KeyVerifier | null {
  const { verify, verifyCache } = options;
  if (verify === undefined) {
    if (verifyCache !== undefined) throw new ConfigError(`${root}.verifyCache: only with ${root}.verify`);
    return null;
  }
  if (typeof verify !== "function") {
    throw new ConfigError(`${root}.verify: expected a function (key, env) => plan name, { plan, account } or null`);
  }
  const t: Obj = verifyCache === undefined ? {} : object(verifyCache, `${root}.verifyCache`);
  unknownFields(t, ["hit", "miss", "max"], `${root}.verifyCache`);
  const d = VERIFY_CACHE_DEFAULTS;
  const settings: VerifyCacheSettings = {
    hitMs: t.hit === undefined ? d.hitMs : duration(t.hit, `${root}.verifyCache.hit`),
    missMs: t.miss === undefined ? d.missMs : duration(t.miss, `${root}.verifyCache.miss`),
    max: t.max === undefined ? d.max : wholeNumber(t.max, `${root}.verifyCache.max`, POSITIVE),
  };
  return new KeyVerifier(config, verify as VerifyHook<object>, settings, clock);
}
