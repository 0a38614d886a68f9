/**
 * @module Where a limiter's objects live: its Durable Object namespace in `env`, checked, and in its jurisdiction
 * when it has one.
 */

import type { LimiterNamespace } from "../client/index.ts";
import { errorName } from "../client/policy.ts";
import { ConfigError, type Jurisdiction } from "../config/types.ts";

/**
 * `env[binding]`, checked to be a Durable Object namespace; with a `jurisdiction`, its namespace in that jurisdiction
 * (`namespace.jurisdiction()`), whose objects are created and keep their data there.
 *
 * @throws ConfigError naming the binding and how to add it, or a runtime without jurisdictions
 */
export function namespaceOf(env: object, binding: string, jurisdiction: Jurisdiction | null = null): LimiterNamespace {
  const ns = (env as Record<string, unknown>)[binding] as
    | { getByName?: unknown; jurisdiction?: (j: Jurisdiction) => unknown }
    | undefined;
  if (typeof ns?.getByName !== "function") {
    throw new ConfigError(
      `env.${binding}: no Durable Object binding of that name; bind the RateLimiter class in wrangler.toml ([[durable_objects.bindings]] name = "${binding}", class_name = "RateLimiter") and export it from your Worker`,
    );
  }
  if (jurisdiction === null) return ns as LimiterNamespace;
  return inJurisdiction(ns as { jurisdiction?: (j: Jurisdiction) => LimiterNamespace }, jurisdiction, binding);
}

/**
 * The namespace `ns` (`env[binding]`) in `jurisdiction`: its objects are created and keep their data there. Never
 * falls back to `ns` itself: data meant to stay in a jurisdiction must not silently leave it.
 *
 * @throws ConfigError when the runtime refuses it — local workerd (wrangler dev, Miniflare, the vitest pool) has no
 *   jurisdictions — or `ns` has no `jurisdiction()`
 */
export function inJurisdiction<T>(
  ns: { jurisdiction?: (j: Jurisdiction) => T },
  jurisdiction: Jurisdiction,
  binding: string,
): T {
  if (typeof ns.jurisdiction !== "function") {
    throw new ConfigError(
      `jurisdiction: env.${binding} has no jurisdiction() (not a Durable Object namespace); bind the RateLimiter class, or remove jurisdiction`,
    );
  }
  try {
    return ns.jurisdiction(jurisdiction);
  } catch (e) {
    throw new ConfigError(
      `jurisdiction: the runtime refused "${jurisdiction}" for env.${binding} (${errorName(e)}); local workerd (wrangler dev, Miniflare, vitest) has no jurisdictions: leave jurisdiction out of local configurations`,
    );
  }
}
