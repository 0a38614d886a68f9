/**
 * @module `POST <admin>/keys {"plan", "account"?, "expires"? | "for"?}`: mints a key for a signed plan
 * (docs/operating.md, "Minting keys") — `{"key", "plan", "account", "expires"}`. Nothing is stored: the key carries
 * its plan, account and expiry, signed with `KEY_SECRET`. Each mistake a `400` naming the field (`422` for an account
 * the plan has no limits for); no `KEY_SECRET`, a `500` saying so.
 */

import { keyId, logEvent } from "../../base/log.ts";
import { type Config, ConfigError } from "../../config/types.ts";
import { describe } from "../../core/duration.ts";
import { HttpError } from "../../pipeline/http.ts";
import { objectName } from "../../pipeline/key.ts";
import { mintFor, NoAccountLimits } from "../../pipeline/signed.ts";
import { bad, unprocessable, when } from "./body.ts";
import { iso, json } from "./status.ts";

/** The fields a mint call's body may carry. */
export const KEY_FIELDS = ["plan", "account", "expires", "for"] as const;

/** Mints the key `body` asks for, with `env`'s `KEY_SECRET`, its expiry checked against `now`. */
export async function mint(body: Record<string, unknown>, env: object, config: Config, now: number): Promise<Response> {
  const { plan, account } = body;
  if (typeof plan !== "string" || plan === "") {
    throw bad(`plan: required, the name of a signed plan, e.g. {"plan": "pro"}; got ${describe(plan)}`);
  }
  if (account !== undefined && account !== null && typeof account !== "string") {
    throw bad(`account: expected a string, got ${describe(account)}`);
  }
  const expires = when(body, "expires", "expire", now);
  try {
    const minted = await mintFor(config, env, plan, { account: account ?? null, expires, now });
    logEvent("admin", {
      action: "keys",
      key_id: await keyId(objectName("key", minted.key)),
      plan: minted.plan,
      account: minted.account,
      expires: minted.expires === null ? null : iso(minted.expires),
    });
    return json({
      key: minted.key,
      plan: minted.plan,
      account: minted.account,
      expires: minted.expires === null ? null : iso(minted.expires),
    });
  } catch (e) {
    // An account the plan does not count: well formed, but this configuration has no budget for it (as `ip` without one).
    if (e instanceof NoAccountLimits) throw unprocessable(e.message);
    if (e instanceof RangeError) throw bad(e.message);
    if (e instanceof ConfigError) throw new HttpError(500, "Rate limiter misconfigured", e.message);
    throw e;
  }
}
