/**
 * @module The library's typed errors: a request the limiter cannot decide, with a `code` a caller can switch on.
 * No HTTP here: the proxy turns them into problem+json, the hono middleware into an `HTTPException`, and a Worker
 * using `createLimiter()` into whatever it answers (`problemFor()` in src/pipeline/http.ts is the proxy's answer).
 */

/** Why a request cannot be decided. */
export type LimiterErrorCode =
  /** The key is too long, holds characters a key may not, is given twice, or two sources carry different keys. */
  | "malformed_key"
  /** The request has no key and the limiter has no `anonymous` limits. */
  | "key_required"
  /** The key does not match `key.pattern`. */
  | "invalid_key"
  /** The key matches no plan (no default plan, and no plan's `key_prefix`). */
  | "no_plan"
  /** The limiter's `verify` hook does not know the key (it answered null). */
  | "unknown_key"
  /** The limiter's `verify` hook failed (threw or rejected): the key's plan cannot be known. */
  | "verify_failed"
  /** The client address (`CF-Connecting-IP`) is needed (the `anonymous` or `ip` limits) and missing or malformed. */
  | "no_client_address"
  /** The request's path holds what the path normaliser refuses (an encoded slash under `paths.escaped_slashes`, …). */
  | "malformed_path"
  /**
   * A `costs` rule reserves from the request (docs/llm.md) and its reservation cannot be read: not a whole number,
   * missing with no default, or in a body too large or not JSON. Nothing is counted.
   */
  | "bad_reservation"
  /** The key's plan has `signed = true` and the key is not shaped like a minted key: it was never minted. */
  | "key_unsigned"
  /** The key is shaped like a minted key but cannot be read as one: cut short, a character dropped or added. */
  | "key_malformed"
  /** The key reads as minted but its signature does not prove it: forged, or a character changed since it was minted. */
  | "key_signature"
  /** The key was signed with a secret that is no longer `KEY_SECRET` nor `KEY_SECRET_PREVIOUS`. */
  | "key_secret_retired"
  /** The key's expiry has passed. */
  | "key_expired"
  /** The key was minted for another plan than the one its prefix chooses. */
  | "key_plan_mismatch"
  /** The key was minted for a plan this limiter no longer has. */
  | "key_plan_unknown";

/** A request the limiter cannot decide: its `code` says why, its message says so in words. */
export class LimiterError extends Error {
  readonly code: LimiterErrorCode;

  constructor(code: LimiterErrorCode, message: string) {
    super(message);
    this.name = "LimiterError";
    this.code = code;
  }
}
