/**
 * @module What a user writes to make a limiter (package export `.`, through src/index.ts): the settings in the shape
 * of the proxy's `RATE_LIMIT` (docs/configuration.md), and `createLimiter`'s options around them. Types only; they are
 * parsed and checked by src/config/parse.ts.
 */

import type { HeaderForm } from "../config/types.ts";
import type { Duration } from "../core/duration.ts";
import type { VerifyAnswer } from "../pipeline/verify-hook.ts";

/** One limit: at most `limit` cost units in any window of `window`. */
export interface LimitSetting {
  readonly limit: number;
  readonly window: Duration;
  /** Records are rounded up to this (default: 1 ms where the ring fits, else a small fraction of the window). */
  readonly tick?: Duration;
  /** The name in `RateLimit-Policy` (default `per-second`, `per-minute`, … or `per-<window>`). */
  readonly name?: string;
}

/**
 * A calendar quota (docs/configuration.md, "Quotas and credits"): at most `limit` units per `period` in `time_zone`
 * (IANA, default `"UTC"`), reset at each period's start. It goes in a plan's `limits` beside the sliding ones.
 */
export interface QuotaSetting {
  readonly limit: number;
  readonly period: "hour" | "day" | "week" | "month";
  readonly time_zone?: string;
  /** The name in `RateLimit-Policy` (default `hourly`, `daily`, `weekly`, `monthly`). */
  readonly name?: string;
}

/**
 * Prepaid credits (docs/configuration.md, "Quotas and credits"): each key starts with `initial`, each grant spends its
 * cost, a request the balance cannot cover is refused (`reason: "credits"`, `402` or `status`) and spends nothing;
 * `refill` raises a smaller balance to `amount` at each period's start.
 */
export interface CreditsSetting {
  readonly initial: number;
  readonly refill?: {
    readonly amount: number;
    readonly period: "hour" | "day" | "week" | "month";
    readonly time_zone?: string;
  };
  readonly status?: 402 | 429;
}

/** A plan chosen by key prefix: its own limits (and routes, in place of the top-level ones), or none (`unlimited`). */
export interface PlanSetting {
  readonly name: string;
  readonly key_prefix: string;
  readonly limits?: readonly (LimitSetting | QuotaSetting)[];
  readonly routes?: readonly RouteSetting[];
  readonly unlimited?: boolean;
  /** The plan's own per-address limits in place of the top-level `ip`; `false`: none for its keys. */
  readonly ip?: AddressSetting | false;
  /** The plan's own penalty in place of the top-level one; `false`: none for its keys. */
  readonly penalty?: PenaltySetting | false;
  /** The plan's own concurrency in place of the top-level one; `false`: none for its keys. */
  readonly concurrency?: number | false;
  readonly concurrency_timeout?: Duration;
  /** The plan's own credits in place of the top-level ones; `false`: none for its keys. */
  readonly credits?: CreditsSetting | false;
  /** The plan's own usage in place of the top-level one; `false`: none for its keys. */
  readonly usage?: UsageSetting | false;
  /**
   * Limits counted per account across all of its keys (docs/configuration.md, "Accounts"), all or nothing with the
   * key's own and its address's: for requests that name an account (`limit(…, { account })`, the `verify` hook).
   */
  readonly account?: { readonly limits: readonly LimitSetting[] };
  /**
   * Whether its keys must be minted (docs/configuration.md, "Signed keys"): `true` (only keys signed with the Worker
   * secret `KEY_SECRET`), `"optional"` (a key shaped like a minted key must prove itself, others still pass, while
   * customers move over).
   */
  readonly signed?: boolean | "optional";
}

/**
 * Exact usage per key and calendar day (docs/configuration.md, "Usage"): `true` (days in UTC, kept 400 days), or
 * `keep` (whole days, `"1d"` to `"3660d"`) and `time_zone`. Keys of such a plan get no leases.
 */
export type UsageSetting = true | { readonly keep?: string; readonly time_zone?: string };

/**
 * A key refused `after` times within `within` is blocked for `block` (docs/configuration.md, "Penalties"); with
 * `max_block`, each block within `within` of the last one's end doubles, up to `max_block`.
 */
export interface PenaltySetting {
  readonly after: number;
  readonly within: Duration;
  readonly block: Duration;
  readonly max_block?: Duration;
}

/** Limits counted per client address (docs/configuration.md, "Client addresses"). */
export interface AddressSetting {
  readonly limits: readonly LimitSetting[];
}

/** A route with its own budget per key: requests of it must fit these limits as well as the key's. */
export interface RouteSetting {
  /** Lower-case letters, digits, `_`, `-`, `.`; names the route's limits in the headers by default. */
  readonly name: string;
  /** Matched by the hono middleware (optional here: `limit(…, { route: name })` needs none). */
  readonly method?: string;
  readonly path?: string;
  readonly limits: readonly LimitSetting[];
}

/** A `costs` rule: requests by `method` (any when missing) and path prefix cost `cost`, or are reserved and settled. */
export type CostSetting = { readonly method?: string; readonly path: string } & (
  | { readonly cost: number }
  | { readonly reserve: ReserveSetting; readonly settle: SettleSetting }
);

/** A settled rule's reservation (docs/llm.md, "What a rule says"). */
export type ReserveSetting =
  | number
  | { readonly header: string; readonly default?: number }
  | {
      readonly json: string | readonly string[];
      readonly times?: string | readonly string[];
      readonly max_times?: number;
      readonly input: "bytes" | number;
      readonly default?: number;
      readonly max_body?: number;
    };

/** Where a settled rule's actual cost is read (docs/llm.md, "What a rule says"). */
export type SettleSetting = "openai" | "anthropic" | { readonly header: string } | { readonly json: string };

/**
 * A limiter's settings: the shape of the proxy's `RATE_LIMIT` (docs/configuration.md)
 * without its proxy-only settings (`origin_timeout`, `admin`, `refund`).
 */
export interface LimiterSettings {
  /** The limits of keys that match no plan (sliding limits and calendar quotas); a request must fit every one. */
  readonly limits?: readonly (LimitSetting | QuotaSetting)[];
  readonly plans?: readonly PlanSetting[];
  /** Limits for requests without a key, per client address (the hono middleware, or `identify(null, ip)`). */
  readonly anonymous?: { readonly limits: readonly (LimitSetting | QuotaSetting)[] };
  /**
   * Limits every request with a key must also fit, counted per client address across all keys
   * (`limit(…, { ip })`; the hono middleware reads `CF-Connecting-IP`). All or nothing: a request one
   * budget refuses is counted in neither.
   */
  readonly ip?: AddressSetting;
  /** IPv6 clients are counted by their network of this many bits (32–128, default 56). */
  readonly ipv6_subnet?: number;
  /** Blocks a key for a while after repeated refusals (plans inherit it). */
  readonly penalty?: PenaltySetting;
  /** At most this many of a key's requests in flight at once, held by `acquire()` and the hono middleware (plans inherit it). */
  readonly concurrency?: number;
  /** How long a slot whose holder vanished stays taken (default `"60s"`, 1s to 1d). */
  readonly concurrency_timeout?: Duration;
  /** Prepaid credits every key spends (plans inherit them). */
  readonly credits?: CreditsSetting;
  /** Usage kept per key and day (plans inherit it). */
  readonly usage?: UsageSetting;
  /**
   * Requests refused for their key, per client address (docs/configuration.md, "Addresses that guess"): on by default
   * when a plan is signed (10 a minute, then a penalty); `false` turns it off.
   */
  readonly guesses?: false | { readonly limits: readonly LimitSetting[]; readonly penalty?: PenaltySetting };
  /**
   * Routes with their own budget per key (docs/configuration.md, "Per-route budgets"): `limit(…, { route })` names
   * one; the hono middleware matches `method` and `path` when it is given no `route`.
   */
  readonly routes?: readonly RouteSetting[];
  /**
   * What a request costs by method and path prefix (the hono middleware, when it is given no `cost`): a fixed `cost`,
   * or a reservation settled from the response (docs/configuration.md, "Settled costs").
   */
  readonly costs?: readonly CostSetting[];
  /** How paths are normalised before rules match them (docs/configuration.md, "Paths"). */
  readonly paths?: { readonly escaped_slashes?: "reject" | "unescape" | "keep" };
  /** Where the hono middleware reads keys when it is given no `key` function, and what a key may be. */
  readonly key?: {
    readonly header?: string | false;
    readonly bearer?: boolean;
    readonly query?: string | false;
    readonly max_length?: number;
    readonly pattern?: string;
  };
  /**
   * When the key's object does not answer: `"closed"` (refuse, the default), `"open"` (allow), or `"local"` (this
   * isolate decides alone at `fallback_share` of each limit; docs/configuration.md, "When the object cannot answer").
   */
  readonly failure_mode?: "open" | "closed" | "local";
  /** With `failure_mode: "local"`: the share of each limit an isolate grants alone, 0 to 1 (default 1). */
  readonly fallback_share?: number;
  /**
   * Where the limiter's objects are created and keep their data: `"eu"`, `"fedramp"`, `"fedramp-high"` or `"us"`
   * (`namespace.jurisdiction()`). Changing it starts every key afresh.
   */
  readonly jurisdiction?: "eu" | "fedramp" | "fedramp-high" | "us";
  /** Decide and report, but let every request through (`reason: "shadow"`). */
  readonly shadow?: boolean;
  /** Deadline on every call to a key's object (default `"5s"`). */
  readonly object_timeout?: Duration;
  /** Units leased to isolates ahead of use (docs/configuration.md, "Leases"); `false` turns them off. */
  readonly leases?:
    | boolean
    | { readonly enabled?: boolean; readonly max_units?: number; readonly max_lifetime?: Duration };
  /** The form of the rate-limit header fields (default `"draft-11"`). */
  readonly headers?: HeaderForm;
}

/** {@link createLimiter}'s options: the settings, the binding's name, the limiter's name, and the clock. */
export interface LimiterOptions extends LimiterSettings {
  /** The name of the `RateLimiter` Durable Object binding in `env` (default `"LIMITER"`). */
  readonly binding?: string;
  /**
   * Names this limiter's objects `<name>/key:<key>`, apart from every other limiter's: two limiters
   * share a key's log only when they have the same name. By default the name is derived from the
   * settings (`s-` and a hash of the plans, limits and routes), so limiters with different limits
   * never share a log — and a change of limits starts every key afresh; give a name to keep the logs
   * across such changes. `null`: the objects are named `key:<key>`, as the proxy names them (and as
   * 0.2 named every limiter's).
   */
  readonly name?: string | null;
  /** @deprecated The name of 0.2: `prefix: "x"` is `name: "x"`. */
  readonly prefix?: string;
  /** The clock (ms since the epoch); `Date.now` by default. */
  readonly clock?: () => number;
  /**
   * Keys kept elsewhere (docs/configuration.md, "Keys kept elsewhere: the verify hook"): called with a key (checked as
   * a key, and against `key.pattern`) and the Worker's `env`, it answers the key's plan by name — or
   * `{ plan, account }` — in place of the plan its prefix would choose, or null for a key it does not know (`401`
   * `unknown_key`, nothing counted). A hook that throws gets `503` `verify_failed`, whatever `failure_mode` says.
   * Answers are cached in the isolate for `verifyCache`.
   */
  // biome-ignore lint/suspicious/noExplicitAny: the user's Env, whatever it is.
  readonly verify?: (key: string, env: any) => VerifyAnswer | Promise<VerifyAnswer>;
  /**
   * How long the isolate keeps `verify`'s answers: a known key's for `hit` (default `"5m"`), an unknown key's for
   * `miss` (default `"30s"`), at most `max` keys (default 10,000; the least recently used is dropped first).
   */
  readonly verifyCache?: { readonly hit?: Duration; readonly miss?: Duration; readonly max?: number };
}
