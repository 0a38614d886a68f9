/**
 * @module HMAC-SHA256 with Web Crypto, and base64url: what signed keys are made and checked with (docs/configuration.md,
 * "Signed keys"). A secret's `CryptoKey` is imported once per isolate. Checking uses `crypto.subtle.verify`, which
 * compares in constant time (workerd's `HmacKey::verify` compares with `CRYPTO_memcmp`), never a string compare.
 * Imports nothing.
 */

/** An imported HMAC key (the runtime's `CryptoKey`). */
type HmacKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

/** Imported keys by secret (at most {@link MAX_SECRETS}: a deploy has one or two; tests have more). */
const imported = new Map<string, Promise<HmacKey>>();
const MAX_SECRETS = 16;
const encoder = new TextEncoder();

/** The HMAC-SHA256 `CryptoKey` of `secret` (its UTF-8 bytes), imported once per isolate. */
export function hmacKey(secret: string): Promise<HmacKey> {
  const known = imported.get(secret);
  if (known !== undefined) return known;
  const key = crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
    "verify",
  ]);
  if (imported.size >= MAX_SECRETS) imported.clear();
  imported.set(secret, key);
  return key;
}

/** HMAC-SHA256 of `data`'s UTF-8 bytes under `secret`: 32 bytes. */
export async function hmac(secret: string, data: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.sign("HMAC", await hmacKey(secret), encoder.encode(data)));
}

/** Whether `signature` is the HMAC-SHA256 of `data` under `secret`, compared in constant time by the runtime. */
export async function hmacVerify(secret: string, signature: Uint8Array, data: string): Promise<boolean> {
  return crypto.subtle.verify("HMAC", await hmacKey(secret), signature, encoder.encode(data));
}

/** `bytes` in base64url without padding (RFC 4648 §5). */
export function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * The bytes of base64url `text` without padding; null when it is not exactly how {@link base64url} writes them (other
 * characters, an impossible length, unused bits set): one text per bytes, so a signature cannot be respelt into
 * another key.
 */
export function fromBase64url(text: string): Uint8Array | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) return null;
  const binary = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return base64url(bytes) === text ? bytes : null;
}
