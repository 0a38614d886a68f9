/**
 * @module The gateway's side of forwarding (docs/llm.md, "The gateway"): the origins with their headers' secrets read
 * from the Worker's env once per configuration, the origin a path goes to, and the request headers an origin gets —
 * the client's key removed where the operator's credential replaces it, the limiter's identity fields set.
 */

import type { NormalPath } from "../base/path.ts";
import { type Config, ConfigError, IDENTITY_HEADERS, type KeySource, type Upstream } from "../config/types.ts";

/** An origin with its headers' values: the operator's secrets in them, kept in this isolate's memory only. */
export interface Target {
  readonly upstream: Upstream;
  readonly headers: readonly (readonly [name: string, value: string])[];
}

/** Who is calling, as the origin is told (null fields: not known, the header left out). */
export interface Caller {
  /** The key's id as the logs show it (never the key), or null for a request without a key. */
  readonly keyId: string | null;
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
  if (!/^[\t\x20-\x7e\x80-\xff]*$/.test(value)) {
    throw new ConfigError(
      `${where} holds a line break, NUL or a character no header can carry; put it again without one`,
    );
  }
  return value;
}

/**
 * The target of the first origin whose path prefix the path the rules match starts with — and the path forwarded
 * too (a `;parameter` in the prefix: none); null: none serves it.
 */
export function targetFor(targets: readonly Target[], path: NormalPath): Target | null {
  for (const t of targets) {
    if (path.match.startsWith(t.upstream.path)) return path.path.startsWith(t.upstream.path) ? t : null;
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
  /**
   * Who is calling, for the identity fields; null: nobody known (a CORS preflight), and then the operator's headers
   * are not sent either: a request no key was checked for never carries the operator's credential.
   */
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
export function setGatewayHeaders(headers: Headers, o: Outgoing): void {
  const { target, keySource, caller } = o;
  if (!target.upstream.forwardKey) {
    if (keySource.header !== null) headers.delete(keySource.header);
    if (keySource.bearer) headers.delete("authorization");
  }
  for (const name of IDENTITY_HEADERS) headers.delete(name);
  if (caller === null) return;
  if (caller.keyId) headers.set("x-limiter-key-id", caller.keyId);
  if (caller.plan) headers.set("x-limiter-plan", caller.plan);
  if (caller.account) headers.set("x-limiter-account", caller.account);
  for (const [name, value] of target.headers) headers.set(name, value);
}

/**
 * A redirect's `Location` as the client may follow it, where the origin never sees the client's key: one back to the
 * origin's own URL (relative, or absolute under it) goes through the gateway instead — its prefix in place of the
 * origin's path — so the client does not send its key there itself; any other place on the origin's host is refused
 * (null: answer `502`). Elsewhere, or where the origin takes the key, as it is.
 */
export function gatewayLocation(location: string, o: Outgoing): string | null {
  const { url: base, path: prefix, forwardKey } = o.target.upstream;
  if (forwardKey) return location;
  let to: URL;
  try {
    to = new URL(location, targetUrl(o));
  } catch {
    return location;
  }
  if (to.origin !== base.origin) return location;
  const root = base.pathname.replace(/\/+$/, "");
  if (to.pathname !== root && !to.pathname.startsWith(`${root}/`)) return null;
  const back = new URL(o.incoming.origin);
  back.pathname = prefix.replace(/\/+$/, "") + (to.pathname.slice(root.length) || "/");
  back.search = to.search;
  back.hash = to.hash;
  return back.href;
}
