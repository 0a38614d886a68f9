/**
 * @module A plan's `account = { limits = [...] }` (docs/configuration.md, "Accounts"): limits counted per account
 * across all of its keys, all or nothing with the key's own limits and its address's. Parsed here; counted in an
 * object per plan and account (`acct.<plan>:<account>`).
 */

import { maxLeaseMs } from "../core/limits.ts";
import { object, unknownFields } from "./fields.ts";
import { parseLimits } from "./limits.ts";
import { type AccountBudget, ConfigError, type LeaseSettings, type Plan } from "./types.ts";

/**
 * The account budget of `plan` (`raw.account`, at `field`); null without one. Its limits are named
 * `account-per-minute` etc. by default, apart from the key's, its routes' and its address's: the headers show them
 * together.
 *
 * @throws ConfigError naming the field: not a table of limits, on an unlimited plan, or a name another budget uses
 */
export function parseAccount(
  raw: Record<string, unknown>,
  field: string,
  plan: Plan,
  leases: LeaseSettings,
): AccountBudget | null {
  if (raw.account === undefined) return null;
  const at = `${field}.account`;
  if (plan.limits === null) {
    throw new ConfigError(`${at}: an unlimited plan's keys never consult the limiter; remove account or unlimited`);
  }
  const t = object(raw.account, at);
  unknownFields(t, ["limits"], at);
  const limits = parseLimits(t.limits, `${at}.limits`, { defaultName: (w) => `account-${w}` });
  const taken = [
    ...(plan.shown ?? plan.limits),
    ...plan.routes.flatMap((r) => r.limits),
    ...(plan.ip?.plan.limits ?? []),
  ];
  for (const [j, l] of limits.entries()) {
    if (taken.some((k) => k.name === l.name)) {
      throw new ConfigError(
        `${at}.limits[${j}].name: ${JSON.stringify(l.name)} is also a limit of plan ${JSON.stringify(plan.name)}, its routes or its ip; the headers show them together, so give the account's limit another name`,
      );
    }
  }
  const leaseMs = leases.enabled ? Math.min(leases.maxLifetimeMs, maxLeaseMs(limits)) : 0;
  return { kind: `acct.${plan.name}`, plan: { name: "account", keyPrefix: "", limits, leaseMs, routes: [], ip: null } };
}

/** The most characters an account's name may have: it goes into an object's name. */
export const MAX_ACCOUNT_LENGTH = 128;

/** Printable ASCII without spaces or commas, as a key (config/types.ts, `KEY_CHARS`). */
const ACCOUNT_CHARS = /^[\x21-\x2b\x2d-\x7e]+$/;

/**
 * Checks that `account` can name an account: 1 to {@link MAX_ACCOUNT_LENGTH} characters of printable ASCII without
 * spaces or commas.
 *
 * @param field what the error names: `limit().account`, the verify hook's answer
 * @throws TypeError naming `field`, without the value (it may be a customer's id)
 */
export function checkAccount(account: unknown, field: string): string {
  if (typeof account !== "string" || account.length > MAX_ACCOUNT_LENGTH || !ACCOUNT_CHARS.test(account)) {
    throw new TypeError(
      `${field}: expected an account name of 1 to ${MAX_ACCOUNT_LENGTH} printable ASCII characters without spaces or commas`,
    );
  }
  return account;
}
