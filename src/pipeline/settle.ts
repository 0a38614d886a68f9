/**
 * @module Settled costs (docs/configuration.md, "Settled costs"): a request granted for a reservation — the most it
 * may cost — is settled once to what it did cost when its response has ended. What a settle did ({@link Settled}),
 * the settle of a result's every grant (its key's, its client address's) with the log lines it leaves —
 * `settle_failed` when a budget's object did not answer, `settle_debt` when it cost more than it reserved — and a
 * response settled when it has ended.
 */

import { keyId, logEvent } from "../base/log.ts";
import { checkActual, type LimiterClient, type LimiterNamespace } from "../client/index.ts";
import { errorName } from "../client/policy.ts";
import type { RateLimitResult } from "../client/result.ts";
import type { Background } from "../protocol.ts";
import { untilEnd } from "./response-end.ts";

/** What settling a result did. */
export interface Settled {
  /**
   * Whether it was settled now: false when nothing was done — a refusal or a result with nothing granted, one settled
   * or refunded before, a leased grant of another isolate's, or a key's object that did not answer (`settle_failed`).
   */
  readonly settled: boolean;
  /** The units the grant reserved: its cost. */
  readonly reserved: number;
  /** The actual cost it was settled to. */
  readonly actual: number;
  /** The units given back (`reserved − actual` when settled for less; else 0). */
  readonly returned: number;
  /**
   * The units recorded beyond the reservation (`actual − reserved` when settled for more; else 0): at the settle's
   * time, over the limits if need be — the key waits them out.
   */
  readonly debt: number;
}

/**
 * Settles each grant of `result` (or a copy of it) to `actual`, in this isolate or another, through `client`.
 *
 * @throws RangeError for an `actual` that is not a whole number ≥ 0; TypeError (a rejection) when the handle is not
 *   as the limiter gave it; nothing else rejects
 */
export async function settleResult(
  client: LimiterClient,
  ns: LimiterNamespace,
  result: RateLimitResult,
  actual: number,
): Promise<Settled> {
  checkActual(actual);
  const grants = result.handle?.grants ?? [];
  const reserved = grants[0]?.units ?? result.cost;
  const done = await Promise.all(
    grants.map(async (g) => {
      try {
        return await client.settle(ns, g, actual);
      } catch (e) {
        if (e instanceof TypeError) throw e;
        logEvent("settle_failed", { key_id: await keyId(g.name), message: errorName(e) }, "error");
        return false;
      }
    }),
  );
  if (!done.some(Boolean)) return { settled: false, reserved, actual, returned: 0, debt: 0 };
  const debt = Math.max(0, actual - reserved);
  if (debt > 0) {
    const key = grants[0] as (typeof grants)[number];
    logEvent("settle_debt", { key_id: await keyId(key.name), reserved, actual, debt }, "warn");
  }
  return { settled: true, reserved, actual, returned: Math.max(0, reserved - actual), debt };
}

/**
 * `response` as it should be sent, settled by `settle` once it has ended (response-end.ts, `untilEnd`) to what
 * `end.actual()` says then; null keeps the reservation.
 */
export function settledWhenEnded(
  response: Response,
  settle: (actual: number) => Promise<unknown>,
  end: { readonly bg?: Background; readonly actual: () => number | null },
): Response {
  const settleAtEnd = async () => {
    const actual = end.actual();
    if (actual !== null) await settle(actual);
  };
  return untilEnd(response, settleAtEnd, end.bg ?? {});
}
