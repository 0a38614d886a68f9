/**
 * @module The parsed configuration's types, its defaults and its error: what every layer reads.
 * Imports nothing above the core (the client and the proxy import this, never the reverse).
 */

import type { EscapedSlashes } from "../base/path.ts";
import type { Period } from "../core/calendar.ts";
import type { CreditSpec } from "../core/credits.ts";
import type { Limit as CoreLimit } from "../core/limits.ts";
import type { PenaltySpec } from "../core/penalty.ts";
import type { QuotaSpec } from "../core/quota.ts";
import type { ConcurrencySpec } from "../core/slots.ts";
import type { UsageSpec } from "../core/usage.ts";

/** A header form, as `RATE_LIMIT.headers` names it. */
export type HeaderForm = "draft-11" | "draft-8" | "draft-7" | "draft-6" | "legacy" | "none";

/** Every form, the default first. */
export const HEADER_FORMS: readonly HeaderForm[] = ["draft-11", "draft-8", "draft-7", "draft-6", "legacy", "none"];

/**
 * Printable ASCII without spaces or commas: what a key may contain. No commas, because a
 * repeated header reaches the Worker joined as `a, b` (or `a, ` with an empty second line),
 * and an origin reading the header as a list would see another key than the limiter.
 */
export const KEY_CHARS = /^[\x21-\x2b\x2d-\x7e]+$/;

/** A limit with its tick and its header name: what the object is sent and the headers show. */
export interface Limit extends CoreLimit {
  readonly name: string;
}

/**
 * A calendar quota (docs/configuration.md, "Quotas and credits"): at most `limit` units per `period` in `zone`, reset
 * at each period's start. `windowMs` is the period's nominal length (an hour, 24 hours, 7 days, 30 days): what a
 * result's `windowMs` says of it.
 */
export interface QuotaLimit extends QuotaSpec {
  readonly name: string;
  readonly windowMs: number;
}

/** A plan's `credits` as parsed (docs/configuration.md, "Quotas and credits"): the balance's rules, and the status of a refusal. */
export interface CreditsSetting {
  readonly spec: CreditSpec;
  /** What a request the balance cannot cover is answered: 402 (Payment Required), or 429. */
  readonly status: 402 | 429;
}

/** A limit or a quota as results and headers show it (a quota's `period` and `zone` say which it is). */
export interface ShownLimit {
  readonly name: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly period?: Period;
  readonly zone?: string;
}

/**
 * What a plan's keys count beside the limits (docs/configuration.md, "Quotas and credits", "Usage"), decided with the
 * limits all or nothing at the key's object; each is missing when the plan has none.
 */
export interface PlanMeters {
  /** Its calendar quotas (limits with a `period`). */
  readonly quotas?: readonly QuotaLimit[];
  /** Prepaid credits its keys spend (`credits`: the plan's own, else the top-level one). */
  readonly credits?: CreditSpec;
  /**
   * Exact usage kept per key and day (`usage`: the plan's own, else the top-level one; docs/configuration.md,
   * "Usage"). Its keys get no leases: every grant is counted at their object.
   */
  readonly usage?: UsageSpec;
}

/** A set of limits chosen for a key. `limits: null` means unlimited (the object is never called). */
export interface Plan {
  readonly name: string;
  /** Keys starting with this prefix use this plan (`""` for the default plan). */
  readonly keyPrefix: string;
  readonly limits: readonly Limit[] | null;
  /** `limits` then its calendar quotas, as results and headers show them (one list, built once); `limits` when missing. */
  readonly shown?: readonly ShownLimit[];
  /**
   * What its keys count beside the limits (its quotas, credits, usage), as their calls carry it to their object;
   * none when missing. A plan with quotas has `limits` (maybe empty), never null.
   */
  readonly meters?: PlanMeters;
  /** With `meters.credits`: what a request the balance cannot cover is answered, 402 (Payment Required) or 429. */
  readonly creditStatus?: 402 | 429;
  /** Lease lifetime asked for this plan's keys (ms): `leases.max_lifetime`, at most the longest window and a minute; 0: no leases. The object shortens it near a limit. */
  readonly leaseMs: number;
  /** Routes with their own budgets for this plan's keys (the plan's own `routes`, else the top-level ones). */
  readonly routes: readonly Route[];
  /**
   * The budget every request of this plan's keys must also fit, per client address (`ip`: the plan's
   * own, else the top-level one); null: none (`ip = false`, an unlimited plan, or none configured).
   */
  readonly ip?: AddressBudget | null;
  /**
   * The budget every request of this plan's keys that name an account must also fit, per account across its keys
   * (`account`, docs/configuration.md, "Accounts"); null or missing: none.
   */
  readonly account?: AccountBudget | null;
  /** Blocks for repeat offenders (`penalty`: the plan's own, else the top-level one); null: none. */
  readonly penalty?: PenaltySpec | null;
  /** Requests in flight at once per key (`concurrency`: the plan's own, else the top-level one); null: no limit. */
  readonly concurrency?: ConcurrencySpec | null;
  /**
   * Whether its keys must be minted (docs/configuration.md, "Signed keys"): `required` (`signed = true`: every key
   * carries a valid signature), `optional` (a key shaped like a minted key must prove itself; others pass unsigned,
   * while customers move over); missing: not signed.
   */
  readonly signed?: SignedMode;
}

/** A plan's `signed` setting as parsed: `true` is `required`. */
export type SignedMode = "required" | "optional";

/**
 * Limits counted per client address (docs/configuration.md, "Client addresses"): `ip` (across all keys sent
 * from an address), and the proxy's CORS preflights.
 */
export interface AddressBudget {
  /** Its limits as a plan (named `ip` or `preflight`, no routes): what the client decides with. */
  readonly plan: Plan;
  /** The kind of its objects' names: `addr` (the top-level `ip`), `addr.<plan>` (a plan's own), `preflight`; `acct.<plan>` for an account. */
  readonly kind: string;
}

/** A plan's `account` limits: a budget as an address's is, its objects named `acct.<plan>:<account>`. */
export type AccountBudget = AddressBudget;

/** Browsers calling the proxy from other origins (docs/configuration.md, "Browsers (CORS)"). */
export interface CorsSettings {
  /** Origins whose requests get the limiter's CORS headers: `"*"` for any, else exact `scheme://host[:port]`. */
  readonly origins: "*" | ReadonlySet<string>;
  /** Preflights (`OPTIONS` with `Access-Control-Request-Method`) per client address: they carry no key. */
  readonly preflight: AddressBudget;
}

/**
 * A route's own budget (docs/configuration.md, "Per-route budgets"): requests matching `method` and starting with
 * `pathPrefix` must fit these limits as well as their key's, per key.
 */
export interface Route {
  readonly name: string;
  readonly method: string | null;
  /** Null: matched by name only (the library's `limit(…, { route })`). */
  readonly pathPrefix: string | null;
  readonly limits: readonly Limit[];
  /** The plan's limits, the route's, then the plan's quotas: what a request of this route is shown (built once). */
  readonly shown: readonly ShownLimit[];
}

/** How isolates lease units ahead of use (docs/configuration.md, "Leases"). */
export interface LeaseSettings {
  readonly enabled: boolean;
  /** The most units one lease may carry. */
  readonly maxUnits: number;
  /** The longest lease lifetime (ms). */
  readonly maxLifetimeMs: number;
}

/**
 * Requests matching `method` and starting with `pathPrefix` cost `cost` units (0: not limited); with `settled`, they
 * are granted for a reservation read from the request and settled to what the response reports (docs/llm.md).
 */
export interface CostRule {
  readonly method: string | null;
  readonly pathPrefix: string;
  /**
   * The units of a request decided without being read (`limit()` with no request): the rule's `cost`, or a settled
   * rule's fixed reservation or `default`; null: a settled rule whose reservation only the request can give.
   */
  readonly cost: number | null;
  /** Where the reservation and the actual cost come from; missing: the cost is `cost`, known when decided. */
  readonly settled?: SettledCost;
}

/** A `costs` rule's `reserve` and `settle` (docs/llm.md): the most a request may cost, and what it did cost. */
export interface SettledCost {
  readonly reserve: Reserve;
  readonly settle: Settle;
}

/** A field of a JSON body: a dotted `path`, as written in `field`. */
export interface JsonField {
  readonly field: string;
  readonly path: readonly string[];
}

/**
 * Where a request's reservation comes from: a fixed number, a request header, or fields of its JSON body (times
 * another field's value) plus a bound for its input (`input`: the body's length in bytes, or a number). A
 * missing header or field takes `default` (null: none, a `400`).
 */
export type Reserve =
  | { readonly from: "fixed"; readonly units: number }
  | { readonly from: "header"; readonly header: string; readonly default: number | null }
  | {
      readonly from: "json";
      /** The fields read, in order: the first present is the reservation (`json = ["max_completion_tokens", "max_tokens"]`). */
      readonly fields: readonly JsonField[];
      /**
       * Fields whose value multiplies the field's (`times = "n"`: the choices a completion returns, each up to the
       * field's tokens): the largest present, else 1; over `maxTimes` a `400`.
       */
      readonly times: readonly JsonField[];
      readonly maxTimes: number;
      readonly input: "bytes" | number;
      readonly default: number | null;
      /** The largest body read for it (bytes); a larger one is a `400`. */
      readonly maxBody: number;
    };

/**
 * Where a request's actual cost comes from when its response ends: the usage an OpenAI or Anthropic response reports
 * (streamed or not), a response header, or a field of a JSON response (a dotted `path`; in each event of a stream).
 */
export type Settle =
  | { readonly from: "openai" }
  | { readonly from: "anthropic" }
  | { readonly from: "header"; readonly header: string }
  | ({ readonly from: "json" } & JsonField);

/** Where the API key is read from, in order of precedence. */
export interface KeySource {
  /** Lower-case header name, or null to ignore headers. */
  readonly header: string | null;
  /** Read `Authorization: Bearer <key>`. */
  readonly bearer: boolean;
  /** Query parameter name, or null. */
  readonly query: string | null;
  readonly maxLength: number;
  /** Keys must match this (whole key); others get `401` before any object exists for them. */
  readonly pattern: RegExp | null;
}

/**
 * What a request gets while its key's object cannot answer: refused (`closed`), let through unlimited (`open`), or
 * decided by this isolate alone at `fallback_share` of each limit (`local`; docs/configuration.md, "When the object
 * cannot answer").
 */
export type FailureMode = "open" | "closed" | "local";

/** Where the limiter's objects live and keep their data (`namespace.jurisdiction()`): the runtime's jurisdictions. */
export type Jurisdiction = "eu" | "fedramp" | "fedramp-high" | "us";

/** Every jurisdiction the runtime knows (@cloudflare/workers-types' `DurableObjectJurisdiction`). */
export const JURISDICTIONS: readonly Jurisdiction[] = ["eu", "fedramp", "fedramp-high", "us"];

/** The operators' API (docs/operating.md); it exists only while the secret `ADMIN_TOKEN` is set. */
export interface AdminSettings {
  /** Path prefix of the admin API and its page, starting and ending with `/`. */
  readonly path: string;
}

/** What a limiter is configured with, in the proxy (`RATE_LIMIT`) and in the library (`createLimiter`). */
export interface LimiterConfig {
  /** Deadline on every call to a key's object (ms); past it the request gets the failure mode. */
  readonly objectTimeoutMs: number;
  readonly leases: LeaseSettings;
  /** Plans matched by key prefix, first match wins. */
  readonly plans: readonly Plan[];
  /** The plan for keys that match no prefix; null: such keys get 401. */
  readonly defaultPlan: Plan | null;
  /** The plan for requests without a key, limited per client IP; null: they get 401. */
  readonly anonymous: Plan | null;
  readonly costs: readonly CostRule[];
  readonly key: KeySource;
  readonly failureMode: FailureMode;
  /** With `failureMode` `local`: the share (0–1) of each limit an isolate grants alone. */
  readonly fallbackShare: number;
  /** The jurisdiction the limiter's objects are created in; null: wherever the runtime places them. */
  readonly jurisdiction: Jurisdiction | null;
  /** Decide, log and add headers, but never reject. */
  readonly shadow: boolean;
  /** The form of the rate-limit header fields. */
  readonly headers: HeaderForm;
  /** How request paths are normalised before rules match them (docs/configuration.md, "Paths"). */
  readonly paths: { readonly escapedSlashes: EscapedSlashes };
  /** IPv6 clients are counted by their network of this many bits (32–128), for `ip` and `anonymous`. */
  readonly ipv6Subnet: number;
  /** The top-level `ip` budget (plans inherit it unless they have their own or `ip = false`); null: none. */
  readonly ip: AddressBudget | null;
  /**
   * The budget per client address of requests refused for their key (`guesses`: a key not minted, forged, expired,
   * malformed, not `key.pattern`, of no plan; docs/configuration.md, "Addresses that guess"); missing or null: none.
   */
  readonly guesses?: AddressBudget | null;
}

/** Hop-by-hop header fields (RFC 9110 §7.6.1): never forwarded in either direction, never set by the operator. */
export const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
] as const;

/**
 * The headers the proxy sets on every forwarded request to tell the origin who is calling (docs/llm.md, "The
 * gateway"): the key's id as the logs show it, its plan, its account. Copies a client sends are removed first.
 */
export const IDENTITY_HEADERS = ["x-limiter-key-id", "x-limiter-plan", "x-limiter-account"] as const;

/**
 * A header the operator sets on forwarded requests: its value's text, with `${NAME}` parts read from the Worker's
 * secret `NAME` when the configuration is loaded (never kept here). `field`: where the configuration gives it.
 */
export interface HeaderTemplate {
  readonly name: string;
  readonly parts: readonly (string | { readonly secret: string })[];
  readonly field: string;
}

/** Where allowed requests under `path` go (`ORIGIN`: `/`, after every one of `origins`). */
export interface Upstream {
  /** The path prefix it serves, replaced by `url`'s own path. */
  readonly path: string;
  readonly url: URL;
  /** The headers set on every request forwarded to it (`origin_headers`, then its own). */
  readonly headers: readonly HeaderTemplate[];
  /** Whether the client's key goes on to it (`forward_key`; by default, only when it has no headers). */
  readonly forwardKey: boolean;
  /** Where the configuration gives it (`ORIGIN`, `RATE_LIMIT.origins[0]`). */
  readonly field: string;
}

/** The proxy's configuration: a limiter, its origins, and the operators' API. */
export interface Config extends LimiterConfig {
  /** Where allowed requests go, in the order their paths are matched: `origins`, then `ORIGIN` (path `/`). */
  readonly origins: readonly Upstream[];
  readonly originTimeoutMs: number;
  readonly admin: AdminSettings;
  /** Responses with these statuses give their request's units back (a refunded request is not counted). */
  readonly refundStatuses: ReadonlySet<number>;
  /** Which origins' browsers get CORS headers, and the preflights' own budget. */
  readonly cors: CorsSettings;
}

/** A configuration error: the message names the field. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

/** Defaults for the optional settings. */
export const DEFAULTS = {
  keyHeader: "x-api-key",
  maxKeyLength: 256,
  originTimeoutMs: 30_000,
  objectTimeoutMs: 5_000,
  leases: { enabled: true, maxUnits: 1000, maxLifetimeMs: 30_000 } as LeaseSettings,
  failureMode: "closed" as FailureMode,
  /** With `failure_mode = "local"`: each limit in full, as one isolate alone would need it. */
  fallbackShare: 1,
  adminPath: "/__limiter/",
  headers: "draft-11" as HeaderForm,
  ipv6Subnet: 56,
  /** How long a slot whose request's isolate vanished stays taken (docs/configuration.md, "Concurrency"). */
  concurrencyTimeoutMs: 60_000,
  /**
   * `guesses` when a plan is signed and it is not set: 10 refused keys a minute per address, then 429; the third such
   * 429 within 10 minutes blocks the address for 15 minutes, doubling for repeat offenders up to a day.
   */
  guesses: {
    limits: [{ limit: 10, window: "1m" }],
    penalty: { after: 3, within: "10m", block: "15m", max_block: "1d" },
  },
  /** Preflights per client address: generous for browsers (which cache one for its `Max-Age`), tight for a flood. */
  preflightLimits: [{ limit: 60, window: "1m" }],
  /** The largest request body read for a reservation from its JSON (`reserve.max_body`). */
  reserveMaxTimes: 128,
  reserveMaxBody: 1_048_576,
};
