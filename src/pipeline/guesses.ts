/**
 * @module Addresses that guess (docs/configuration.md, "Addresses that guess"): a request refused in the isolate for
 * its key — not minted, forged, expired, malformed, not `key.pattern`, of no plan, unknown to the verify hook — counts one unit against its
 * client address's `guesses` budget, so an address that keeps guessing gets `429` and then the budget's penalty,
 * without any key's object being touched. A blocked address is answered from the deny cache: no call at all.
 */

import { clientOf } from "../base/address.ts";
import { LimiterError, type LimiterErrorCode } from "../base/errors.ts";
import { keyId, logEvent } from "../base/log.ts";
import type { Background, LimiterClient, LimiterNamespace } from "../client/index.ts";
import type { RateLimitResult } from "../client/result.ts";
import type { LimiterConfig, Plan } from "../config/types.ts";
import { objectName } from "./key.ts";
import { recordDecision, type TelemetryEnv } from "./telemetry.ts";

/** The refusals of a key that count as a guess. */
const GUESSES: ReadonlySet<LimiterErrorCode> = new Set<LimiterErrorCode>([
  "malformed_key",
  "invalid_key",
  "no_plan",
  // A key the verify hook does not know: each distinct one costs a lookup, so an address inventing them is a guesser.
  "unknown_key",
  "key_unsigned",
  "key_malformed",
  "key_signature",
  "key_secret_retired",
  "key_expired",
  "key_plan_mismatch",
  "key_plan_unknown",
]);

/** A request refused for its key, as the pipeline saw it. */
export interface Guess {
  readonly config: LimiterConfig;
  readonly client: LimiterClient;
  readonly ns: LimiterNamespace;
  /** The limiter's scope ({@link objectName}). */
  readonly scope: string | null;
  /** The request's key when it was read (null: it could not be, or there was none). */
  readonly key: string | null;
  /** The client's address; undefined: the adapter does not know it (the library's `limit()` without `ip`). */
  readonly ip: string | null | undefined;
  readonly bg?: Background;
}

/** What the address's budget said of a guess it refused: the refusal, the address's object name and its plan. */
export interface RefusedGuess {
  readonly result: RateLimitResult;
  readonly name: string;
  readonly plan: Plan;
}

/**
 * Counts the refusal `e` of `guess`'s key against its address's `guesses` budget (when `e` is such a refusal, the
 * budget is configured and the address known), logging a signed key's refusal by key id. Resolves the budget's
 * refusal when the address has guessed too much (answer it instead of `e`), else null (answer `e`: a `401`).
 */
export async function countGuess(env: object, guess: Guess, e: unknown): Promise<RefusedGuess | null> {
  if (!(e instanceof LimiterError) || !GUESSES.has(e.code)) return null;
  const { config, client, ns, scope, key, ip, bg } = guess;
  if (e.code.startsWith("key_")) {
    const id = key === null ? null : await keyId(objectName("key", key, scope));
    logEvent("key_refused", { code: e.code, key_id: id }, "warn");
  }
  const budget = config.guesses;
  const address = ip === undefined || ip === null ? null : clientOf(ip, config.ipv6Subnet);
  if (!budget || address === null) return null;
  const name = objectName(budget.kind, address, scope);
  const decided = await client.limit({ ns, name, plan: budget.plan, cost: 1, ...(bg ? { bg } : {}) });
  // The address's budget refused it: `refusedBy` says so, in the log line and the answer (which names the address).
  const result: RateLimitResult = decided.allowed ? decided : { ...decided, refusedBy: "ip" };
  await recordDecision(env as TelemetryEnv, name, result);
  return result.allowed ? null : { result, name, plan: budget.plan };
}
