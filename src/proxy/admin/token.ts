/**
 * @module The admin token: whether a request carries it, compared in constant time.
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
