// What a key is, read from a request: sources, their order, the one rule every reader of keys uses.
import { describe, expect, it } from "vitest";
import type { KeySource } from "../../src/config.ts";
import { HttpError } from "../../src/http.ts";
import { checkKey, readKey } from "../../src/key.ts";

const SOURCE: KeySource = { header: "x-api-key", bearer: true, query: "api_key", maxLength: 16, pattern: null };

function req(headers: Record<string, string> = {}, query = ""): Request {
  return new Request(`https://api.example/v1${query}`, { headers });
}

function status(f: () => unknown): number | string {
  try {
    return JSON.stringify(f());
  } catch (e) {
    if (e instanceof HttpError) return e.status;
    throw e;
  }
}

describe("readKey", () => {
  it("reads the header, then Bearer, then the query parameter; none is null", () => {
    expect(readKey(req({ "x-api-key": "k1" }), SOURCE)).toBe("k1");
    expect(readKey(req({ authorization: "Bearer k2" }), SOURCE)).toBe("k2");
    expect(readKey(req({ authorization: "bearer \t k2 " }), SOURCE)).toBe("k2");
    expect(readKey(req({}, "?api_key=k3"), SOURCE)).toBe("k3");
    expect(readKey(req({ authorization: "Basic abc" }), SOURCE)).toBeNull();
    expect(readKey(req({ "x-api-key": "k1", authorization: "Bearer k1" }, "?api_key=k1"), SOURCE)).toBe("k1");
    expect(readKey(req({ "x-api-key": "k1" }), { ...SOURCE, header: null })).toBeNull();
  });

  it("spaces and tabs around a key are HTTP's whitespace: stripped; a key of only those is no key", () => {
    expect(readKey(req({}, "?api_key=%20k3%09"), SOURCE)).toBe("k3");
    expect(readKey(req({}, "?api_key=%20%20"), SOURCE)).toBeNull();
    expect(readKey(req({ authorization: "Bearer    " }), SOURCE)).toBeNull();
  });

  it("any other whitespace or control character at a key's edge makes it malformed (400), in every source", () => {
    for (const edge of ["\u00a0", "\u3000", "\ufeff", "\v", "\f", "\u2028", "\u0085"]) {
      const encoded = encodeURIComponent(`k${edge}`);
      expect(
        status(() => readKey(req({}, `?api_key=${encoded}`), SOURCE)),
        JSON.stringify(edge),
      ).toBe(400);
      expect(status(() => readKey(req({}, `?api_key=${encodeURIComponent(`${edge}k`)}`), SOURCE))).toBe(400);
    }
  });

  it("refuses two sources with different keys, and a repeated query parameter", () => {
    expect(status(() => readKey(req({ "x-api-key": "a", authorization: "Bearer b" }), SOURCE))).toBe(400);
    expect(status(() => readKey(req({}, "?api_key=a&api_key=a"), SOURCE))).toBe(400);
  });
});

describe("checkKey", () => {
  it("takes printable ASCII without spaces or commas, up to the length", () => {
    expect(() => checkKey("abc!~", "key", 16)).not.toThrow();
    expect(() => checkKey("x".repeat(16), "key", 16)).not.toThrow();
    for (const bad of ["a b", "a,b", "a\tb", "k\u00e9", "", "x".repeat(17)]) {
      expect(
        status(() => checkKey(bad, "key", 16)),
        JSON.stringify(bad),
      ).toBe(400);
    }
  });
});
