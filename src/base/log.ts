/**
 * @module Structured log lines, and the `key_id` that names a key in them: keys never appear in clear. `key_id` is the
 * first 12 hex digits of the SHA-256 of the key's object name (`key:<key>`, or `ip:<address>` for anonymous requests;
 * `<name>/key:<key>` in a named limiter). Imports nothing: every floor logs.
 */

/** `key_id`s computed lately, by object name (at most {@link MAX_IDS}). */
const ids = new Map<string, string>();
const MAX_IDS = 10_000;

/** `key_id` of an object name: the first 12 hex digits of its SHA-256 (`printf 'key:%s' "$KEY" | sha256sum`). */
export async function keyId(name: string): Promise<string> {
  const known = ids.get(name);
  if (known !== undefined) return known;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(name)));
  let hex = "";
  for (let i = 0; i < 6; i++) hex += (digest[i] as number).toString(16).padStart(2, "0");
  if (ids.size >= MAX_IDS) ids.clear();
  ids.set(name, hex);
  return hex;
}

/** One structured log line: `{"event": …, …fields}`. */
export function logEvent(
  event: string,
  fields: Record<string, unknown> = {},
  level: "log" | "warn" | "error" = "log",
): void {
  console[level](JSON.stringify({ event, ...fields }));
}
