/**
 * @module Signed keys (docs/configuration.md, "Signed keys"): keys the isolate can check by itself, so a forged one
 * costs no object call. A minted key is `<plan's key_prefix><body>.<signature>`: the body is the base64url of a small
 * JSON object naming its plan, its account and expiry when it has them, the id of the secret it was signed with and a
 * random nonce; the signature is the base64url HMAC-SHA256 of the body's text with the Worker secret `KEY_SECRET`
 * (`KEY_SECRET_PREVIOUS` also accepted while rotating), checked with Web Crypto in constant time (src/base/hmac.ts).
 */

import { LimiterError, type LimiterErrorCode } from "../base/errors.ts";
import { base64url, fromBase64url, hmac, hmacVerify } from "../base/hmac.ts";
import { logEvent } from "../base/log.ts";
import { ConfigError, KEY_CHARS, type LimiterConfig, type Plan } from "../config/types.ts";
import type { Identity } from "./key.ts";

/** The Worker secrets keys are signed with (`wrangler secret put KEY_SECRET`). */
export interface KeySecrets {
  readonly KEY_SECRET?: unknown;
  readonly KEY_SECRET_PREVIOUS?: unknown;
}

/** Where and when a key is checked: the Worker's `env` (its secrets) and the clock (ms since the epoch). */
export interface Checking {
  readonly env: object;
  readonly now: number;
}

/** What a minted key says of itself, once its signature is proven. */
export interface Claims {
  /** The plan it was minted for. */
  readonly plan: string;
  /** The account (a customer with several keys) it belongs to; null: none. */
  readonly account: string | null;
  /** When it stops being accepted (ms since the epoch); null: never. */
  readonly expires: number | null;
}

/** What {@link mintKey} is asked beside the plan. */
export interface MintOptions {
  /** The account the key belongs to: 1 to 64 printable ASCII characters without spaces or commas. */
  readonly account?: string | null;
  /** When the key stops being accepted: ms since the epoch, or a Date; it must lie after `now`. Missing: never. */
  readonly expires?: number | Date | null;
  /** The clock `expires` must lie after (ms since the epoch); `Date.now()` by default. */
  readonly now?: number;
}

/** A minted key and what it carries ({@link Claims}). */
export interface Minted extends Claims {
  readonly key: string;
}

/** The part of a plan a key is minted for: its name (in the body) and its prefix (before it). */
export interface MintPlan {
  readonly name: string;
  readonly keyPrefix: string;
}

/** Characters of a signature: 32 bytes in base64url. */
const SIG_CHARS = 43;
/** How every minted key's body begins after its plan's prefix: `{"v":1` in base64url. */
const MINTED_LEAD = "eyJ2Ijox";
/** How every minted key ends: a `.` and its signature's 43 base64url characters. */
const SIGNED_TAIL = /\.[A-Za-z0-9_-]{43}$/;
/** The longest account a key may carry. */
export const MAX_ACCOUNT = 64;
const PLAN_NAME = /^[A-Za-z0-9_.-]+$/;
/** The text a secret's id is the HMAC of: the id names the secret in a key without revealing it. */
const SECRET_ID_TEXT = "strict-edge-rate-limiter: key secret id";

/** Each secret's id (8 base64url characters), per isolate. */
const secretIds = new Map<string, Promise<string>>();
/** Keys whose signature was proven, with what they claim, by secret pair (at most {@link MAX_VERIFIED} keys each). */
const verified = new Map<string, Map<string, Claims>>();
const MAX_VERIFIED = 10_000;

/**
 * `identity` (that of a request with `key`, found by `identify`) once its key is proven when its plan is signed
 * ({@link verifyKey}), with the minted key's account; as it is for a request without a key or of a plan not signed.
 *
 * @throws LimiterError and ConfigError as {@link verifyKey}
 */
export async function provenIdentity(
  config: LimiterConfig,
  identity: Identity,
  key: string | null,
  at: Checking,
): Promise<Identity> {
  const { plan } = identity;
  if (key === null || !plan.signed) return identity;
  const claims = await verifyKey(config, plan, key, at);
  // A minted key's account is proven by its signature; else the account the identity had (the verify hook's) stands.
  return { ...identity, account: claims?.account ?? identity.account ?? null };
}

/**
 * The claims of `key`, a key of the signed `plan` (its `signed` set), proven by its signature with `KEY_SECRET` or
 * `KEY_SECRET_PREVIOUS`; null for a key of an `optional` plan that is not shaped like a minted key ({@link looksMinted}:
 * it passes unsigned). A key shaped like one proves itself or is refused, under `optional` too. A key proven once is
 * remembered in the isolate (its plan and expiry are still checked on every request).
 *
 * @throws LimiterError saying why the key is refused (`key_unsigned`, `key_malformed`, `key_secret_retired`,
 *   `key_signature`, `key_plan_unknown`, `key_plan_mismatch`, `key_expired`): a `401`
 * @throws ConfigError when `KEY_SECRET` is not set
 */
export async function verifyKey(config: LimiterConfig, plan: Plan, key: string, at: Checking): Promise<Claims | null> {
  const { env, now } = at;
  const [current, previous] = secretsOf(env, plan.name);
  const proven = verifiedBy(current, previous);
  let claims = proven.get(key);
  if (claims === undefined) {
    // A key whose plan the verify hook named need not start with the plan's prefix: then it was not minted for it.
    if (!key.startsWith(plan.keyPrefix)) {
      if (plan.signed === "optional") return null;
      throw refused("key_plan_mismatch");
    }
    const rest = key.slice(plan.keyPrefix.length);
    if (!looksMinted(rest)) {
      if (plan.signed === "optional") return null;
      throw refused("key_unsigned");
    }
    const read = readMinted(rest);
    if (typeof read === "string") throw refused(read);
    const secret = read.secretId === (await secretId(current)) ? current : previous;
    if (secret === null || read.secretId !== (await secretId(secret))) throw refused("key_secret_retired");
    // A signature not spelt as base64url writes 32 bytes (another spelling of them) is no minted key's: unproven.
    if (read.signature === null || !(await hmacVerify(secret, read.signature, read.body))) {
      throw refused("key_signature");
    }
    claims = read.claims;
    if (proven.size >= MAX_VERIFIED) proven.clear();
    proven.set(key, claims);
  }
  return checkClaims(config, plan, claims, now);
}

/**
 * Whether `rest` (a key after its plan's prefix) is shaped like a minted key: it begins as every minted key's body
 * does (`eyJ2Ijox`, `{"v":1` in base64url) or ends as every minted key does (a `.` and 43 base64url characters). One
 * character dropped, added or changed anywhere in a minted key leaves one of the two, so such a key must prove itself.
 */
function looksMinted(rest: string): boolean {
  return rest.startsWith(MINTED_LEAD) || SIGNED_TAIL.test(rest);
}

/**
 * Mints a key for `plan` signed with `env.KEY_SECRET`: `<keyPrefix><body>.<signature>`, with a random nonce, so no
 * two are alike.
 *
 * @throws ConfigError when `KEY_SECRET` is not set
 * @throws RangeError naming the field: a plan name, account or expiry that is not one
 */
export async function mintKey(env: object, plan: MintPlan, options: MintOptions = {}): Promise<Minted> {
  const { account = null, expires = null, now = Date.now() } = options;
  if (!PLAN_NAME.test(plan.name))
    throw new RangeError(`plan: expected a plan's name, got ${JSON.stringify(plan.name)}`);
  if (account !== null && (typeof account !== "string" || account.length > MAX_ACCOUNT || !KEY_CHARS.test(account))) {
    throw new RangeError(
      `account: expected 1 to ${MAX_ACCOUNT} printable ASCII characters without spaces or commas, got ${JSON.stringify(account)}`,
    );
  }
  const until = expires instanceof Date ? expires.getTime() : expires;
  if (until !== null && (!Number.isSafeInteger(until) || until <= now)) {
    throw new RangeError(`expires: expected a time after now (ms since the epoch, or a Date), got ${String(expires)}`);
  }
  const [secret] = secretsOf(env, plan.name);
  const nonce = base64url(crypto.getRandomValues(new Uint8Array(12)));
  const wire = {
    v: 1,
    p: plan.name,
    ...(account === null ? {} : { a: account }),
    ...(until === null ? {} : { e: until }),
    s: await secretId(secret),
    n: nonce,
  };
  const body = base64url(new TextEncoder().encode(JSON.stringify(wire)));
  const key = `${plan.keyPrefix}${body}.${base64url(await hmac(secret, body))}`;
  return { key, plan: plan.name, account, expires: until };
}

/**
 * A key asked with an account for a plan that counts none (it has no `account` limits, docs/configuration.md,
 * "Accounts"): the account would be carried and never counted. A RangeError naming `account`.
 */
export class NoAccountLimits extends RangeError {
  constructor(plan: string) {
    super(
      `account: plan ${JSON.stringify(plan)} has no account limits, so a key's account would count nothing; give the plan account = { limits = [...] } first, or mint without an account`,
    );
    this.name = "NoAccountLimits";
  }
}

/**
 * {@link mintKey} for the plan of `config` named `name`, which must be signed; the key no longer than `key.max_length`,
 * its account (if any) one the plan counts.
 *
 * @throws RangeError naming the field (`plan`: no such plan, or not signed; `account`, `expires`; `key`: too long);
 *   {@link NoAccountLimits} for an account the plan does not count
 * @throws ConfigError when `KEY_SECRET` is not set
 */
export async function mintFor(
  config: LimiterConfig,
  env: object,
  name: string,
  options: MintOptions = {},
): Promise<Minted> {
  const plan = config.plans.find((p) => p.name === name);
  if (!plan) {
    const names = config.plans.filter((p) => p.signed).map((p) => JSON.stringify(p.name));
    throw new RangeError(`plan: no plan named ${JSON.stringify(name)}; signed plans: ${names.join(", ") || "none"}`);
  }
  if (!plan.signed) {
    throw new RangeError(`plan: plan ${JSON.stringify(name)} is not signed (set signed = true or "optional" in it)`);
  }
  if (options.account !== undefined && options.account !== null && !plan.account) throw new NoAccountLimits(name);
  const minted = await mintKey(env, plan, options);
  if (minted.key.length > config.key.maxLength) {
    throw new RangeError(
      `key: the minted key has ${minted.key.length} characters, over key.max_length (${config.key.maxLength}); give a shorter account, or raise key.max_length`,
    );
  }
  return minted;
}

/** A key's parts after its prefix as read, or the code of why it is not a minted key. */
type Read =
  | {
      readonly body: string;
      /** Null: 43 characters that are not base64url's one spelling of 32 bytes (it proves nothing). */
      readonly signature: Uint8Array | null;
      readonly secretId: string;
      readonly claims: Claims;
    }
  | LimiterErrorCode;

/**
 * `rest` (a key after its prefix, shaped like a minted key) as `<body>.<signature>` with the body's fields;
 * `key_malformed` when it cannot be read so: cut short, a character dropped or added, a body that is not a minted one's.
 */
function readMinted(rest: string): Read {
  const dot = rest.lastIndexOf(".");
  const body = rest.slice(0, Math.max(dot, 0));
  const text = rest.slice(dot + 1);
  const bytes = fromBase64url(body);
  if (dot === -1 || text.length !== SIG_CHARS || bytes === null) return "key_malformed";
  const signature = fromBase64url(text);
  let wire: unknown;
  try {
    wire = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes));
  } catch {
    return "key_malformed";
  }
  // JSON that is not an object (`null`, a number, a list) is no minted key's body.
  if (typeof wire !== "object" || wire === null || Array.isArray(wire)) return "key_malformed";
  const w = wire as Record<string, unknown>;
  const account = w.a === undefined ? null : w.a;
  const expires = w.e === undefined ? null : w.e;
  const wellFormed =
    w.v === 1 &&
    typeof w.p === "string" &&
    PLAN_NAME.test(w.p) &&
    (account === null || (typeof account === "string" && account.length <= MAX_ACCOUNT && KEY_CHARS.test(account))) &&
    (expires === null || (Number.isSafeInteger(expires) && (expires as number) > 0)) &&
    typeof w.s === "string" &&
    typeof w.n === "string";
  if (!wellFormed) return "key_malformed";
  const claims = { plan: w.p as string, account: account as string | null, expires: expires as number | null };
  return { body, signature, secretId: w.s as string, claims };
}

/** `claims` when they fit `plan` at `now`. @throws LimiterError `key_plan_unknown`, `key_plan_mismatch`, `key_expired` */
function checkClaims(config: LimiterConfig, plan: Plan, claims: Claims, now: number): Claims {
  if (claims.plan !== plan.name) {
    throw refused(config.plans.some((p) => p.name === claims.plan) ? "key_plan_mismatch" : "key_plan_unknown");
  }
  if (claims.expires !== null && now >= claims.expires) throw refused("key_expired");
  return claims;
}

/** The envs whose missing `KEY_SECRET` was logged: once each, not once per request. */
const missingLogged = new WeakSet<object>();

/**
 * `KEY_SECRET` and `KEY_SECRET_PREVIOUS` (null when unset or empty) of `env`.
 *
 * @throws ConfigError when `KEY_SECRET` is not set (a plan named `plan` needs it), logged as `config_error` the first
 *   time for `env`
 */
function secretsOf(env: object, plan: string): [current: string, previous: string | null] {
  const { KEY_SECRET: current, KEY_SECRET_PREVIOUS: previous } = env as KeySecrets;
  if (typeof current !== "string" || current === "") {
    const e = new ConfigError(
      `KEY_SECRET: not set, and plan ${JSON.stringify(plan)} has signed keys; set the secret with \`wrangler secret put KEY_SECRET\` (a long random string), or locally a line KEY_SECRET=<a long random string> in .dev.vars beside wrangler.toml, then restart wrangler dev (it reads .dev.vars when it starts)`,
    );
    if (!missingLogged.has(env)) {
      missingLogged.add(env);
      logEvent("config_error", { message: e.message }, "error");
    }
    throw e;
  }
  return [current, typeof previous === "string" && previous !== "" && previous !== current ? previous : null];
}

/** The keys proven with this pair of secrets (another pair, another map: a retired secret's keys are not kept). */
function verifiedBy(current: string, previous: string | null): Map<string, Claims> {
  const pair = `${current}\u0000${previous ?? ""}`;
  let known = verified.get(pair);
  if (known === undefined) {
    if (verified.size >= 4) verified.clear();
    known = new Map();
    verified.set(pair, known);
  }
  return known;
}

/** The id of `secret` a key carries: 8 base64url characters of an HMAC under it, which reveals nothing of it. */
function secretId(secret: string): Promise<string> {
  let id = secretIds.get(secret);
  if (id === undefined) {
    id = hmac(secret, SECRET_ID_TEXT).then((mac) => base64url(mac.subarray(0, 6)));
    if (secretIds.size >= 16) secretIds.clear();
    secretIds.set(secret, id);
  }
  return id;
}

/** The messages of the refusals, one per code: none echoes the key. */
const MESSAGES: Partial<Record<LimiterErrorCode, string>> = {
  key_unsigned: "This API key is not signed; this API accepts only keys minted by its operator.",
  key_malformed: "This API key is truncated or malformed: it does not read as a minted key.",
  key_signature: "This API key's signature is not valid.",
  key_secret_retired: "This API key was signed with a secret that is no longer accepted; ask for a new key.",
  key_expired: "This API key has expired; ask for a new key.",
  key_plan_mismatch: "This API key was minted for another plan than the one its prefix names.",
  key_plan_unknown: "This API key was minted for a plan this API no longer has; ask for a new key.",
};

function refused(code: LimiterErrorCode): LimiterError {
  return new LimiterError(code, MESSAGES[code] ?? "This API key is not valid.");
}
