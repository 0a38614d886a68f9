/**
 * @module The admin token: whether a request is authorised by it (`Authorization: Bearer`, for the admin API), and
 * whether it carries it anywhere at all (such a request is never proxied). Both compare in constant time.
 */

import { BEARER } from "../../pipeline/key.ts";

/**
 * Whether the request carries the token, compared in constant time: both sides are hashed to 32
 * bytes first, so neither the length nor the first differing byte changes the work done.
 */
export async function authorized(request: Request, token: string): Promise<boolean> {
  const header = request.headers.get("authorization") ?? "";
  const m = BEARER.exec(header);
  const given = m ? (m[1] ?? "").trim() : "";
  const [a, b] = await Promise.all([sha256(given), sha256(token)]);
  let diff = m && token !== "" ? 0 : 1;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] as number);
  return diff === 0;
}

async function sha256(s: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)));
}

/**
 * Where `request` carries `token`, if anywhere: the name of a header whose value is the token — whole, one of its
 * comma- or semicolon-separated parts, a part's value after `=` (a cookie), or a part's credentials after its scheme
 * (`Bearer <token>`) — or `"query"` for a query parameter whose value is the token; null when it carries it nowhere.
 * Each candidate is compared whole ({@link isToken}): the work done depends on what the request sent, never on the
 * token.
 */
export function tokenCarrier(request: Request, token: string): string | null {
  for (const [name, value] of request.headers) if (valueCarries(value, token)) return name;
  if (request.url.includes("?")) {
    for (const [, value] of new URL(request.url).searchParams) if (isToken(value, token)) return "query";
  }
  return null;
}

/** Whether a header's value carries `token` (see {@link tokenCarrier}). */
function valueCarries(value: string, token: string): boolean {
  if (isToken(value.trim(), token)) return true;
  for (const raw of value.split(/[,;]/)) {
    const part = raw.trim();
    const eq = part.indexOf("=");
    const space = part.search(/\s/);
    if (isToken(part, token)) return true;
    if (eq !== -1 && isToken(part.slice(eq + 1).trim(), token)) return true;
    if (space !== -1 && isToken(part.slice(space + 1).trim(), token)) return true;
  }
  return false;
}

/**
 * Whether `given` is `token`, in time that depends on `given`'s length alone: every character of `given` is compared
 * (against the token's, cycled), so neither the token's length nor its first differing character shows.
 */
export function isToken(given: string, token: string): boolean {
  if (token === "") return false;
  let diff = given.length ^ token.length;
  for (let i = 0; i < given.length; i++) diff |= given.charCodeAt(i) ^ token.charCodeAt(i % token.length);
  return diff === 0;
}
