/**
 * @module The gateway's side of forwarding (docs/llm.md, "The gateway"): the origins with their headers' secrets read
 * from the Worker's env once per configuration, the origin a path goes to, and the request headers an origin gets —
 * the client's key removed where the operator's credential replaces it, the limiter's identity fields set.
 */

import { keyId } from "../base/log.ts";
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
 * @throws ConfigError naming the header that names a secret `env` lacks, or whose value is not one header value (a
 *   line break, NUL, not text) — the secret's name, never its value
 */
export function targetsOf(config: Config, env: object): Target[] {
  const values = new Map<string, string>();
  const secret = (name: string, field: string) => {
    let value = values.get(name);
    if (value === undefined) {
      value = secretValue(env, name, field);
      values.set(name, value);
    }
    return value;
  };
  return config.origins.map((upstream) => ({
    upstream,
    headers: upstream.headers.map(
      (h) => [h.name, h.parts.map((p) => (typeof p === "string" ? p : secret(p.secret, h.field))).join("")] as const,
    ),
  }));
}

function secretValue(env: object, name: string, field: string): string {
  const value = (env as Record<string, unknown>)[name];
  const where = `${field}: the secret ${name}`;
  if (value === undefined || value === "") {
    throw new ConfigError(
      `${where} is not set for this Worker; put it with \`wrangler secret put ${name}\`, or locally in .dev.vars (then restart wrangler dev)`,
    );
  }
  if (typeof value !== "string") throw new ConfigError(`${where} is a binding of another kind, not a secret (text)`);
  if (/[\r\n\0]/.test(value)) throw new ConfigError(`${where} holds a line break or NUL; put it again without one`);
  return value;
}

/** The target of the first origin whose path prefix both of a request's paths start with; null: none serves it. */
export function targetFor(targets: readonly Target[], match: string, path: string): Target | null {
  for (const t of targets) {
    if (match.startsWith(t.upstream.path)) return path.startsWith(t.upstream.path) ? t : null;
  }
  return null;
}

/** What a forwarded request is sent with, beside itself: its origin, its URL and path, its key's sources, its caller. */
export interface Outgoing {
  readonly target: Target;
  /** `request.url` parsed. */
  readonly incoming: URL;
  /** The normalised path the rules matched (src/base/path.ts). */
  readonly path: string;
  readonly keySource: KeySource;
  /** Who is calling, for the identity fields; null: nobody known (a preflight). */
  readonly caller: Caller | null;
}

/** The URL a request goes to: its origin's URL, the path past the origin's prefix, the query (the key's parameter dropped where the key is). */
export function targetUrl(o: Outgoing): URL {
  const { url, path: prefix, forwardKey } = o.target.upstream;
  const out = new URL(url);
  out.pathname = url.pathname.replace(/\/+$/, "") + o.path.slice(prefix.length - 1);
  out.search = o.incoming.search;
  const param = o.keySource.query;
  if (!forwardKey && param !== null && out.searchParams.has(param)) out.searchParams.delete(param);
  return out;
}

/**
 * Sets what an origin is told on a forwarded request's `headers`: the client's key removed from every source it can
 * come from unless the origin takes it, the limiter's identity fields replaced by the caller's, then the operator's
 * headers.
 */
export async function setGatewayHeaders(headers: Headers, o: Outgoing): Promise<void> {
  const { target, keySource, caller } = o;
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
