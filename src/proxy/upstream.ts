/**
 * @module The gateway's side of forwarding (docs/llm.md, "The gateway"): the origins with their headers' secrets read
 * from the Worker's env once per configuration, the origin a path goes to, and the request headers an origin gets —
 * the client's key removed where the operator's credential replaces it, the limiter's identity fields set.
 */

import { keyId } from "../base/log.ts";
import { secretsNamed } from "../config/gateway.ts";
import { type Config, ConfigError, IDENTITY_HEADERS, type KeySource, type Upstream } from "../config/types.ts";

/** An origin with its headers' values: the operator's secrets in them, kept in this isolate's memory only. */
export interface Target {
  readonly upstream: Upstream;
  readonly headers: readonly (readonly [name: string, value: string])[];
}

/** Who is calling, as the origin is told (null fields: not known, the header left out). */
export interface Caller {
  /** The key's object name (`key:<key>`), or null for a request without a key. */
  readonly name: string | null;
  readonly plan: string | null;
  readonly account: string | null;
}

/**
 * The origins of `config` with their headers' values read from `env`.
 *
 * @throws ConfigError naming a secret the configuration names and `env` lacks, or whose value is not one header value
 *   (a line break, NUL, not text) — the secret's name, never its value
 */
export function targetsOf(config: Config, env: object): Target[] {
  const values = new Map<string, string>();
  for (const name of secretsNamed(config.origins)) values.set(name, secretValue(env, name));
  return config.origins.map((upstream) => ({
    upstream,
    headers: upstream.headers.map(
      (h) =>
        [h.name, h.parts.map((p) => (typeof p === "string" ? p : (values.get(p.secret) as string))).join("")] as const,
    ),
  }));
}

function secretValue(env: object, name: string): string {
  const value = (env as Record<string, unknown>)[name];
  const where = `${name} (named in the proxy's origin headers)`;
  if (value === undefined || value === "") {
    throw new ConfigError(
      `${where}: this Worker has no such secret; put it with \`wrangler secret put ${name}\`, or locally in .dev.vars (then restart wrangler dev)`,
    );
  }
  if (typeof value !== "string")
    throw new ConfigError(`${where}: expected a secret (text), got a binding of another kind`);
  if (/[\r\n\0]/.test(value))
    throw new ConfigError(`${where}: its value holds a line break or NUL; put it again without one`);
  return value;
}

/** The target of the first origin whose path prefix both of a request's paths start with; null: none serves it. */
export function targetFor(targets: readonly Target[], match: string, path: string): Target | null {
  for (const t of targets) {
    if (match.startsWith(t.upstream.path)) return path.startsWith(t.upstream.path) ? t : null;
  }
  return null;
}

/** The URL a request for `path` (with the query of `incoming`) goes to at `target`. */
export function targetUrl(target: Target, path: string, incoming: URL, keySource: KeySource): URL {
  const { url, path: prefix, forwardKey } = target.upstream;
  const out = new URL(url);
  out.pathname = url.pathname.replace(/\/+$/, "") + path.slice(prefix.length - 1);
  out.search = incoming.search;
  if (!forwardKey && keySource.query !== null && out.searchParams.has(keySource.query)) {
    out.searchParams.delete(keySource.query);
  }
  return out;
}

/**
 * Sets what an origin is told on a forwarded request's `headers`: the client's key removed from every source it can
 * come from unless the origin takes it, the limiter's identity fields replaced by the caller's, then the operator's
 * headers.
 */
export async function setGatewayHeaders(
  headers: Headers,
  target: Target,
  keySource: KeySource,
  caller: Caller | null,
): Promise<void> {
  if (!target.upstream.forwardKey) {
    if (keySource.header !== null) headers.delete(keySource.header);
    if (keySource.bearer) headers.delete("authorization");
  }
  for (const name of IDENTITY_HEADERS) headers.delete(name);
  if (caller?.name) headers.set("x-limiter-key-id", await keyId(caller.name));
  if (caller?.plan) headers.set("x-limiter-plan", caller.plan);
  if (caller?.account) headers.set("x-limiter-account", caller.account);
  for (const [name, value] of target.headers) headers.set(name, value);
}
