// What a key is, read from a request: sources, their order, the one rule every reader of keys uses.
import { describe, expect, it } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { KeySource } from "../../src/config/types.ts";
import { httpErrorOf } from "../../src/pipeline/http.ts";
import { checkKey, identify, objectName, readKey, settingsName } from "../../src/pipeline/key.ts";

const SOURCE: KeySource = { header: "x-api-key", bearer: true, query: "api_key", maxLength: 16, pattern: null };

function req(headers: Record<string, string> = {}, query = ""): Request {
  return new Request(`https://api.example/v1${query}`, { headers });
}

function status(f: () => unknown): number | string {
  try {
    return JSON.stringify(f());
  } catch (e) {
    if (e instanceof LimiterError) return httpErrorOf(e).status;
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

  it("names the key as the caller describes it: where it was read, or that it was given (the library, the middleware)", () => {
    expect(() => checkKey("x".repeat(17), "the key given", 16)).toThrow(/^the key given is longer than 16 characters$/);
    expect(() => checkKey("a b", "the key in x-api-key", 16)).toThrow(/^the key in x-api-key may hold printable ASCII/);
  });
});

describe("readKey: sources and their names", () => {
  it("reads only the sources configured, and names the source in its errors", () => {
    const none: KeySource = { header: null, bearer: false, query: null, maxLength: 16, pattern: null };
    expect(readKey(req({ "x-api-key": "a", authorization: "Bearer a" }, "?api_key=a"), none)).toBeNull();
    expect(readKey(req({ authorization: "Bearer b" }), { ...none, bearer: true })).toBe("b");
    expect(readKey(req({}, "?k=c"), { ...none, query: "k" })).toBe("c");
    expect(readKey(req({ "x-k": "d" }), { ...none, header: "x-k" })).toBe("d");
    const detail = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return (e as LimiterError).message;
      }
      return null;
    };
    expect(detail(() => readKey(req({ authorization: "Bearer a b" }), SOURCE))).toBe(
      "the key in Authorization: Bearer may hold printable ASCII only (no spaces, commas — a repeated header arrives joined by one — or control characters)",
    );
    expect(detail(() => readKey(req({}, `?api_key=${"x".repeat(17)}`), SOURCE))).toBe(
      "the key in ?api_key is longer than 16 characters",
    );
    expect(detail(() => readKey(req({ "x-api-key": "a", authorization: "Bearer b" }), SOURCE))).toBe(
      "x-api-key and Authorization: Bearer carry different keys; send one key",
    );
    expect(detail(() => readKey(req({}, "?api_key=a&api_key=b"), SOURCE))).toBe(
      "the api_key query parameter is given 2 times",
    );
  });
});

describe("identify", () => {
  const config = parseLimiterConfig(
    {
      plans: [{ name: "test", key_prefix: "test_", limits: [{ limit: 1, window: "1s" }] }],
      anonymous: { limits: [{ limit: 2, window: "1s" }] },
      key: { pattern: "test_[a-z]+|live_[a-z]+" },
    },
    "t",
  );

  it("names the key's object and finds its plan", () => {
    expect(identify(config, "test_abc", null)).toEqual({ name: "key:test_abc", plan: config.plans[0] });
  });

  it("a request without a key: the anonymous plan per client (as clientOf counts it); none is a 400, no shared bucket", () => {
    expect(identify(config, null, "2001:db8::/56")).toEqual({ name: "ip:2001:db8::/56", plan: config.anonymous });
    expect(identify(config, null, "192.0.2.1", "api").name).toBe("api/ip:192.0.2.1");
    let caught: unknown;
    try {
      identify(config, null, null);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(LimiterError);
    expect([(caught as LimiterError).name, (caught as LimiterError).code]).toEqual([
      "LimiterError",
      "no_client_address",
    ]);
    expect(httpErrorOf(caught as LimiterError).status).toBe(400);
    expect((caught as LimiterError).message).toMatch(/CF-Connecting-IP\) is missing or not an IP address/);
  });

  it("401 with the reason: no key without anonymous limits, a key off the pattern, a key no plan matches", () => {
    const noAnon = parseLimiterConfig({ limits: [{ limit: 1, window: "1s" }], key: { bearer: false } }, "t");
    const detail = (f: () => unknown, bearer: boolean) => {
      try {
        f();
      } catch (e) {
        const http = httpErrorOf(e as LimiterError, bearer);
        return [(e as LimiterError).code, http.status, http.message, http.headers["WWW-Authenticate"]];
      }
      return null;
    };
    expect(detail(() => identify(noAnon, null, "1.2.3.4"), false)).toEqual([
      "key_required",
      401,
      "This API needs an API key.",
      undefined,
    ]);
    expect(detail(() => identify(config, "other_abc", null), true)).toEqual([
      "invalid_key",
      401,
      "This API key is not valid.",
      'Bearer realm="api"',
    ]);
    expect(detail(() => identify(config, "live_abc", null), true)).toEqual([
      "no_plan",
      401,
      "This API key matches no plan.",
      'Bearer realm="api"',
    ]);
  });
});

describe("object names", () => {
  it("objectName: <kind>:<id>, with a limiter's name before it", () => {
    expect(objectName("key", "live_1")).toBe("key:live_1");
    expect(objectName("addr", "192.0.2.1", null)).toBe("addr:192.0.2.1");
    expect(objectName("key", "live_1", "api")).toBe("api/key:live_1");
  });

  it("settingsName: s- and 12 hex digits of what grants mean; not header names, lease sizes or failure modes", () => {
    const name = (s: Record<string, unknown>) => settingsName(parseLimiterConfig(s, "t"));
    const base = { limits: [{ limit: 10, window: "1m" }] };
    const a = name(base);
    expect(a).toMatch(/^s-[0-9a-f]{12}$/);
    expect(name(base)).toBe(a);
    expect(name({ ...base, leases: false, failure_mode: "open", headers: "draft-6" })).toBe(a);
    expect(name({ limits: [{ limit: 10, window: "1m", name: "other" }] })).toBe(a);
    // A different limit, window, tick, plan, prefix, route or anonymous budget is another limiter.
    const others = [
      { limits: [{ limit: 11, window: "1m" }] },
      { limits: [{ limit: 10, window: "2m" }] },
      { limits: [{ limit: 10, window: "1m", tick: "1s" }] },
      { ...base, plans: [{ name: "p", key_prefix: "p_", limits: [{ limit: 1, window: "1s" }] }] },
      { ...base, plans: [{ name: "p", key_prefix: "q_", limits: [{ limit: 1, window: "1s" }] }] },
      { ...base, plans: [{ name: "p", key_prefix: "p_", unlimited: true }] },
      { ...base, routes: [{ name: "r", limits: [{ limit: 1, window: "1s" }] }] },
      { ...base, routes: [{ name: "r", limits: [{ limit: 2, window: "1s" }] }] },
      { ...base, anonymous: { limits: [{ limit: 1, window: "1s" }] } },
    ].map(name);
    expect(new Set([a, ...others]).size).toBe(others.length + 1);
  });
});
