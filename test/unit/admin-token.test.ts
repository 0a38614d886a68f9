// Where a request carries the admin token (src/proxy/admin/token.ts): such a request is never proxied. Each candidate
// is compared whole; a value only close to the token is not it.
import { describe, expect, it } from "vitest";
import { isToken, tokenCarrier } from "../../src/proxy/admin/token.ts";

const TOKEN = "s3cret-admin-token";
const req = (path: string, headers: Record<string, string> = {}) =>
  new Request(`https://limiter.example${path}`, { headers });

describe("isToken", () => {
  it("is true for the token exactly; a prefix, an extension, another case or another value of its length is not", () => {
    expect(isToken(TOKEN, TOKEN)).toBe(true);
    for (const near of [
      TOKEN.slice(0, -1),
      `${TOKEN}x`,
      `${TOKEN}${TOKEN}`,
      TOKEN.toUpperCase(),
      "x".repeat(TOKEN.length),
    ]) {
      expect(isToken(near, TOKEN), near).toBe(false);
    }
    // A value made of the token cycled is not the token (the comparison cycles the token, the lengths differ).
    expect(isToken(TOKEN + TOKEN.slice(0, 3), TOKEN)).toBe(false);
    expect(isToken("", TOKEN)).toBe(false);
    expect(isToken("", "")).toBe(false);
    expect(isToken("a", "")).toBe(false);
  });
});

describe("tokenCarrier", () => {
  it.each([
    ["authorization", { authorization: `Bearer ${TOKEN}` }],
    ["authorization", { authorization: `Token   ${TOKEN}` }],
    ["x-api-key", { "x-api-key": TOKEN }],
    ["x-api-key", { "x-api-key": `k_1, ${TOKEN}` }],
    ["x-other", { "x-other": `  ${TOKEN}\t` }],
    ["cookie", { cookie: `a=1; admin=${TOKEN}` }],
  ])("finds it in %s", (name, headers) => {
    expect(tokenCarrier(req("/v1/x", { "x-api-key": "k_plain", ...headers }), TOKEN)).toBe(name);
  });

  it("finds it as any query parameter's value, decoded; a path or a name is not where it is looked for", () => {
    expect(tokenCarrier(req(`/v1/x?token=${TOKEN}`), TOKEN)).toBe("query");
    expect(tokenCarrier(req(`/v1/x?a=1&api_key=${encodeURIComponent(TOKEN)}`), TOKEN)).toBe("query");
    expect(tokenCarrier(req(`/v1/x?${TOKEN}=1`), TOKEN)).toBeNull();
    expect(tokenCarrier(req(`/v1/${TOKEN}`), TOKEN)).toBeNull();
  });

  it("is null for a request without it, or with values only close to it", () => {
    expect(tokenCarrier(req("/v1/x", { "x-api-key": "k_1", authorization: "Bearer k_1" }), TOKEN)).toBeNull();
    expect(tokenCarrier(req(`/v1/x?token=${TOKEN}x`, { "x-api-key": `${TOKEN}x` }), TOKEN)).toBeNull();
    expect(tokenCarrier(req("/v1/x", { authorization: `Bearer ${TOKEN.slice(1)}` }), TOKEN)).toBeNull();
  });
});
