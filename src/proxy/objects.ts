/**
 * @module The proxy's Durable Objects: `env.LIMITER`, or its namespace in the configured jurisdiction — one place, so
 * that the proxy and the admin API reach the same objects.
 */

import { logEvent } from "../base/log.ts";
import { ConfigError, type LimiterConfig } from "../config/types.ts";
import type { RateLimiter } from "../object/index.ts";
import { inJurisdiction } from "../pipeline/index.ts";

/** The bindings this reads. */
export interface ObjectsEnv {
  readonly LIMITER: DurableObjectNamespace<RateLimiter>;
}

/** Per binding: its namespace in each jurisdiction asked for, or the runtime's refusal (logged once). */
const placed = new WeakMap<object, Map<string, DurableObjectNamespace<RateLimiter> | ConfigError>>();

/**
 * The limiter's objects: `env.LIMITER`, or its namespace in `config.jurisdiction` (made once per binding).
 *
 * @throws ConfigError when the runtime refuses the jurisdiction (local workerd has none): logged the first time
 */
export function objectsOf(
  env: ObjectsEnv,
  config: Pick<LimiterConfig, "jurisdiction">,
): DurableObjectNamespace<RateLimiter> {
  const j = config.jurisdiction;
  if (j === null) return env.LIMITER;
  let byJurisdiction = placed.get(env.LIMITER);
  if (!byJurisdiction) {
    byJurisdiction = new Map();
    placed.set(env.LIMITER, byJurisdiction);
  }
  let ns = byJurisdiction.get(j);
  if (ns === undefined) {
    try {
      ns = inJurisdiction(env.LIMITER, j, "LIMITER");
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      logEvent("config_error", { message: e.message }, "error");
      ns = e;
    }
    byJurisdiction.set(j, ns);
  }
  if (ns instanceof ConfigError) throw ns;
  return ns;
}
