// biome-ignore-all lint/suspicious/noTemplateCurlyInString: the gateway's settings write ${NAME} in plain strings.
// The gateway's rules (docs/llm.md, "The gateway"): `origins`, `origin_headers` and `forward_key` parsed (every error
// naming its field, never a secret's value), the secrets read from the env, the origin a path goes to, the headers an
// origin gets (the client's key removed from every source, the identity fields the limiter's own), and the providers'
// rate-limit fields replaced by the key's. Through the Worker: test/integration/gateway.test.ts.
import { describe, expect, it } from "vitest";
import type { LimitResult, RateLimitResult } from "../../src/client/result.ts";
import { headerTemplates } from "../../src/config/gateway.ts";
import { PROXY_FIELDS, parseConfig, parseLimiterConfig } from "../../src/config/parse.ts";
import { type Config, ConfigError, IDENTITY_HEADERS } from "../../src/config/types.ts";
import { openaiDuration, rfc3339, setProviderHeaders, tightestOf } from "../../src/proxy/provider-headers.ts";
import {
  gatewayLocation,
  type Outgoing,
  setGatewayHeaders,
  type Target,
  targetFor,
  targetsOf,
  targetUrl,
} from "../../src/proxy/upstream.ts";

const LIMITS = [{ limit: 10, window: "1m" }];
const OPENAI = {
  path: "/openai/",
  url: "https://api.openai.com/v1",
  headers: { authorization: "Bearer ${OPENAI_KEY}" },
};
const ANTHROPIC = {
  path: "/anthropic/",
  url: "https://api.anthropic.com",
  headers: { "x-api-key": "${ANTHROPIC_KEY}", "anthropic-version": "2023-06-01" },
};

function parse(rateLimit: Record<string, unknown>, origin?: string): Config {
  return parseConfig({
    ...(origin === undefined ? {} : { ORIGIN: origin }),
    RATE_LIMIT: { limits: LIMITS, ...rateLimit },
  });
}

function configError(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as Error).message;
  }
  throw new Error("no ConfigError");
}

describe("origins, origin_headers and forward_key, parsed", () => {
  it("origins in order, then ORIGIN as /; each origin's headers over origin_headers; the key kept only without headers", () => {
    const config = parse(
      {
        origin_headers: { "x-gateway": "edge", "x-team": "${TEAM}" },
        origins: [OPENAI, { ...ANTHROPIC, headers: { ...ANTHROPIC.headers, "x-team": "ai" } }],
      },
      "https://fallback.example/base",
    );
    expect(config.origins.map((o) => [o.path, o.url.href, o.field, o.forwardKey])).toEqual([
      ["/openai/", "https://api.openai.com/v1", "RATE_LIMIT.origins[0]", false],
      ["/anthropic/", "https://api.anthropic.com/", "RATE_LIMIT.origins[1]", false],
      ["/", "https://fallback.example/base", "ORIGIN", false],
    ]);
    expect(config.origins[0]?.headers.map((h) => [h.name, h.parts])).toEqual([
      ["x-gateway", ["edge"]],
      ["x-team", [{ secret: "TEAM" }]],
      ["authorization", ["Bearer ", { secret: "OPENAI_KEY" }]],
    ]);
    // The origin's own x-team replaces the common one.
    expect(config.origins[1]?.headers.map((h) => [h.name, h.parts])).toEqual([
      ["x-gateway", ["edge"]],
      ["x-api-key", [{ secret: "ANTHROPIC_KEY" }]],
      ["anthropic-version", ["2023-06-01"]],
      ["x-team", ["ai"]],
    ]);
  });

  it("ORIGIN alone: one origin at /, no headers, the key forwarded; forward_key says otherwise either way", () => {
    const plain = parse({}, "https://api.example.com");
    expect(plain.origins.map((o) => [o.path, o.url.href, o.headers, o.forwardKey])).toEqual([
      ["/", "https://api.example.com/", [], true],
    ]);
    expect(parse({ forward_key: false }, "https://api.example.com").origins[0]?.forwardKey).toBe(false);
    const kept = parse({ forward_key: true, origin_headers: { authorization: "Bearer ${X}" } }, "https://a.example");
    expect(kept.origins[0]?.forwardKey).toBe(true);
    // An origin without headers of its own or in common keeps the key; one with them does not.
    const mixed = parse({ origins: [OPENAI, { path: "/own/", url: "https://own.example" }] });
    expect(mixed.origins.map((o) => o.forwardKey)).toEqual([false, true]);
  });

  it("a value's text around ${NAME}: literal parts kept, several secrets, a name only of letters, digits and _", () => {
    expect(headerTemplates({ "X-Both": "a ${ONE}-${TWO_2} z" }, "f")).toEqual([
      { name: "x-both", parts: ["a ", { secret: "ONE" }, "-", { secret: "TWO_2" }, " z"], field: "f.X-Both" },
    ]);
    expect(headerTemplates({ x: "${A}" }, "f")[0]?.parts).toEqual([{ secret: "A" }]);
    expect(headerTemplates({ x: "$A {B}" }, "f")[0]?.parts).toEqual(["$A {B}"]);
  });

  it("the proxy's settings only: the library refuses them by name", () => {
    for (const field of ["origins", "origin_headers", "forward_key"]) {
      expect(PROXY_FIELDS).toContain(field);
      expect(configError(() => parseLimiterConfig({ limits: LIMITS, [field]: true }, "createLimiter"))).toBe(
        `createLimiter.${field}: only the proxy reads this setting (RATE_LIMIT in its wrangler.toml)`,
      );
    }
  });

  it.each([
    [{}, undefined, "ORIGIN: required, the base URL of your API"],
    [{ origins: [] }, undefined, "RATE_LIMIT.origins: expected at least one { path, url }"],
    [{ origins: "x" }, undefined, "RATE_LIMIT.origins: expected an array"],
    [{ origins: [{ url: "https://a.example" }] }, undefined, "RATE_LIMIT.origins[0].path: required"],
    [{ origins: [{ path: "openai/", url: "https://a.example" }] }, undefined, 'got "openai/"'],
    [{ origins: [{ path: "/openai", url: "https://a.example" }] }, undefined, 'got "/openai"'],
    [{ origins: [{ path: "/a b/", url: "https://a.example" }] }, undefined, 'got "/a b/"'],
    [{ origins: [{ path: "/a/" }] }, undefined, "RATE_LIMIT.origins[0].url: required"],
    [{ origins: [{ path: "/a/", url: "ftp://a.example" }] }, undefined, "RATE_LIMIT.origins[0].url: expected an http"],
    [
      { origins: [{ path: "/a/", url: "https://u:p@a.example" }] },
      undefined,
      'RATE_LIMIT.origins[0].url: must not carry a user name or password (fetch refuses such URLs), got "https://***@a.example/"',
    ],
    [
      { origins: [{ path: "/a/", url: "https://a.example", host: "x" }] },
      undefined,
      "origins[0].host: unknown setting",
    ],
    [
      { origins: [OPENAI, { path: "/openai/v2/", url: "https://b.example" }] },
      undefined,
      'RATE_LIMIT.origins[1].path: "/openai/v2/" is never reached, "/openai/" before it matches first; list the longer path first',
    ],
    [{ origins: [{ path: "/", url: "https://a.example" }, OPENAI] }, undefined, 'origins[1].path: "/openai/" is never'],
    [{ origin_headers: "x" }, "https://a.example", "RATE_LIMIT.origin_headers: expected a table/object"],
    [{ origin_headers: { "a b": "x" } }, "https://a.example", "RATE_LIMIT.origin_headers.a b: not a header name"],
    [{ origin_headers: { x: 5 } }, "https://a.example", "RATE_LIMIT.origin_headers.x: expected a string"],
    [{ origin_headers: { x: "a\r\nb: c" } }, "https://a.example", "holds only visible characters, spaces and tabs"],
    [{ origin_headers: { x: "café ☕" } }, "https://a.example", "holds only visible characters, spaces and tabs"],
    [
      { origin_headers: { x: "Bearer ${OPENAI_KEY" } },
      "https://a.example",
      "origin_headers.x: a ${ without its closing }",
    ],
    [{ origin_headers: { x: "${A} ${B" } }, "https://a.example", "a ${ without its closing }"],
    [{ origin_headers: { x: "${}" } }, "https://a.example", "${} is not a secret's name"],
    [{ origin_headers: { x: "${1A}" } }, "https://a.example", "${1A} is not a secret's name"],
    [{ origin_headers: { x: "${A-B}" } }, "https://a.example", "${A-B} is not a secret's name"],
    [
      { origin_headers: { Host: "a" } },
      "https://a.example",
      "RATE_LIMIT.origin_headers.Host: the proxy sets or removes host",
    ],
    [{ origin_headers: { "X-Limiter-Plan": "a" } }, "https://a.example", "removes x-limiter-plan itself"],
    [{ origin_headers: { connection: "a" } }, "https://a.example", "removes connection itself"],
    [{ forward_key: "no" }, "https://a.example", "RATE_LIMIT.forward_key: expected true or false"],
  ])("%j (ORIGIN %s): %s", (rl, origin, says) => {
    expect(configError(() => parse(rl as Record<string, unknown>, origin))).toContain(says);
  });
});

describe("the secrets, read from the env once", () => {
  const config = parse({ origins: [OPENAI, ANTHROPIC] });
  const env = { OPENAI_KEY: "sk-1", ANTHROPIC_KEY: "ant-2" };

  it("each header's value with its secrets in; literal values as written", () => {
    const targets = targetsOf(config, env);
    expect(targets.map((t) => t.headers)).toEqual([
      [["authorization", "Bearer sk-1"]],
      [
        ["x-api-key", "ant-2"],
        ["anthropic-version", "2023-06-01"],
      ],
    ]);
  });

  it.each([
    [{ ANTHROPIC_KEY: "ant-2" }, "RATE_LIMIT.origins[0].headers.authorization: the secret OPENAI_KEY is not set"],
    [{ ...env, OPENAI_KEY: "" }, "RATE_LIMIT.origins[0].headers.authorization: the secret OPENAI_KEY is not set"],
    [{ ...env, OPENAI_KEY: { fetch() {} } }, "the secret OPENAI_KEY is a binding of another kind"],
    [
      { ...env, OPENAI_KEY: "sk-é☕" },
      "the secret OPENAI_KEY holds a line break, NUL or a character no header can carry",
    ],
    [{ ...env, ANTHROPIC_KEY: "ant-2\r\nx-evil: 1" }, "origins[1].headers.x-api-key: the secret ANTHROPIC_KEY holds a"],
    [{ ...env, ANTHROPIC_KEY: "ant\n" }, "origins[1].headers.x-api-key: the secret ANTHROPIC_KEY holds a line break"],
  ])("a secret missing or not one header value: a ConfigError naming it, never its value (%j)", (e, says) => {
    const message = configError(() => targetsOf(config, e));
    expect(message).toContain(says);
    for (const value of Object.values(e)) if (typeof value === "string" && value) expect(message).not.toContain(value);
    expect(message).not.toContain("ant-2");
  });

  it("the missing secret's message says how to put it, deployed and locally", () => {
    expect(configError(() => targetsOf(config, {}))).toBe(
      "RATE_LIMIT.origins[0].headers.authorization: the secret OPENAI_KEY is not set for this Worker; put it with `wrangler secret put OPENAI_KEY`, or locally in .dev.vars (then restart wrangler dev)",
    );
  });
});

/** A forwarded request's `Outgoing` to `target`: what a test gives, the rest of no concern to it. */
function outgoing(target: Target, o: Partial<Outgoing> & Pick<Outgoing, "keySource">): Outgoing {
  return { target, incoming: new URL("https://gw.example/"), path: "/", caller: null, ...o };
}

describe("where a request goes, and what its origin is told", () => {
  const config = parse(
    { origins: [OPENAI, { path: "/plain/", url: "https://plain.example/base/" }], key: { query: "api_key" } },
    "https://rest.example/root",
  );
  const targets = targetsOf(config, { OPENAI_KEY: "sk-1" });
  const [openai, plain, rest] = targets as [Target, Target, Target];

  it("targetFor: by the path the rules match, and only where the forwarded path starts the same", () => {
    const at = (match: string, path = match) => ({ match, path });
    expect(targetFor(targets, at("/openai/v1/x"))).toBe(openai);
    expect(targetFor(targets, at("/plain/x"))).toBe(plain);
    expect(targetFor(targets, at("/elsewhere"))).toBe(rest);
    // `/openai` without its slash is not under `/openai/`: the next origin that matches takes it (here ORIGIN's /).
    expect(targetFor(targets, at("/openai"))).toBe(rest);
    // A `;parameter` in the prefix's segment: the paths differ there, so no origin takes it (the prefix is not
    // replaced by half).
    expect(targetFor(targets, at("/openai/v1", "/openai;x/v1"))).toBeNull();
    const alone = targetsOf(parse({ origins: [OPENAI, ANTHROPIC] }), { OPENAI_KEY: "k", ANTHROPIC_KEY: "a" });
    expect(targetFor(alone, at("/anthropic/v1/messages"))?.upstream.path).toBe("/anthropic/");
    expect(targetFor(alone, at("/x"))).toBeNull();
    expect(targetFor(alone, at("/openai"))).toBeNull();
  });

  it("targetUrl: the prefix replaced by the origin's path, the query kept, the key's parameter dropped where the key is", () => {
    const incoming = new URL("https://gw.example/openai/v1/chat?api_key=sk_customer&x=1");
    expect(
      targetUrl(outgoing(openai, { path: "/openai/v1/chat", incoming: incoming, keySource: config.key })).href,
    ).toBe("https://api.openai.com/v1/v1/chat?x=1");
    expect(targetUrl(outgoing(plain, { path: "/plain/a/b", incoming: incoming, keySource: config.key })).href).toBe(
      "https://plain.example/base/a/b?api_key=sk_customer&x=1",
    );
    expect(
      targetUrl(outgoing(rest, { path: "/a", incoming: new URL("https://gw.example/a"), keySource: config.key })).href,
    ).toBe("https://rest.example/root/a");
    expect(
      targetUrl(outgoing(rest, { path: "/", incoming: new URL("https://gw.example/"), keySource: config.key })).href,
    ).toBe("https://rest.example/root/");
  });

  it("setGatewayHeaders: the key removed from its header and Authorization where headers replace it, identity set", async () => {
    const headers = new Headers({
      "x-api-key": "sk_customer",
      authorization: "Bearer sk_customer",
      "x-limiter-key-id": "forged",
      "x-limiter-plan": "enterprise",
      "x-limiter-account": "someone-else",
      "x-kept": "1",
    });
    setGatewayHeaders(
      headers,
      outgoing(openai, { keySource: config.key, caller: { keyId: "0123456789ab", plan: "pro", account: "acme" } }),
    );
    expect(Object.fromEntries(headers)).toEqual({
      authorization: "Bearer sk-1",
      "x-kept": "1",
      "x-limiter-key-id": "0123456789ab",
      "x-limiter-plan": "pro",
      "x-limiter-account": "acme",
    });
  });

  it("setGatewayHeaders: an origin that takes the key keeps it; the client's identity copies go whoever calls", async () => {
    const headers = new Headers({
      "x-api-key": "sk_customer",
      authorization: "Bearer sk_customer",
      "x-limiter-account": "someone-else",
    });
    setGatewayHeaders(
      headers,
      outgoing(plain, { keySource: config.key, caller: { keyId: null, plan: "anonymous", account: null } }),
    );
    expect(Object.fromEntries(headers)).toEqual({
      "x-api-key": "sk_customer",
      authorization: "Bearer sk_customer",
      "x-limiter-plan": "anonymous",
    });
    const none = new Headers(Object.fromEntries(IDENTITY_HEADERS.map((h) => [h, "x"])));
    setGatewayHeaders(none, outgoing(plain, { keySource: config.key, caller: null }));
    expect([...none.keys()]).toEqual([]);
  });

  it("setGatewayHeaders: nobody known (a CORS preflight): neither identity nor the operator's headers, the key still removed", () => {
    const headers = new Headers({ "x-api-key": "sk_customer", "x-limiter-plan": "forged", origin: "https://app" });
    setGatewayHeaders(headers, outgoing(openai, { keySource: config.key, caller: null }));
    expect(Object.fromEntries(headers)).toEqual({ origin: "https://app" });
  });

  it("setGatewayHeaders: a key source turned off is left alone (bearer off: Authorization is the client's own)", () => {
    const noBearer = parse({ origins: [ANTHROPIC], key: { bearer: false } });
    const headers = new Headers({ "x-api-key": "k", authorization: "Bearer client-own", "x-client": "c" });
    const target = targetsOf(noBearer, { ANTHROPIC_KEY: "ant-1" })[0] as Target;
    const caller = { keyId: null, plan: "default", account: null };
    setGatewayHeaders(headers, outgoing(target, { keySource: noBearer.key, caller }));
    expect(Object.fromEntries(headers)).toEqual({
      authorization: "Bearer client-own",
      "anthropic-version": "2023-06-01",
      "x-api-key": "ant-1",
      "x-client": "c",
      "x-limiter-plan": "default",
    });
  });

  it("gatewayLocation: a redirect back to the origin goes through the gateway; elsewhere on its host is refused", () => {
    const o = outgoing(openai, {
      keySource: config.key,
      incoming: new URL("https://gw.example/openai/v1/files/1?api_key=k"),
      path: "/openai/v1/files/1",
    });
    // ORIGIN's url is https://api.openai.com/v1: under it, back through /openai/.
    expect(gatewayLocation("https://api.openai.com/v1/files/1/content?x=1", o)).toBe(
      "https://gw.example/openai/files/1/content?x=1",
    );
    expect(gatewayLocation("/v1/files/2", o)).toBe("https://gw.example/openai/files/2");
    expect(gatewayLocation("content", o)).toBe("https://gw.example/openai/v1/files/content");
    expect(gatewayLocation("https://api.openai.com/v1", o)).toBe("https://gw.example/openai/");
    // On the origin's host but outside its url: the client would take its key there.
    expect(gatewayLocation("https://api.openai.com/v2/x", o)).toBeNull();
    expect(gatewayLocation("/v10/x", o)).toBeNull();
    // Another host, or an origin that takes the key anyway: as it is.
    expect(gatewayLocation("https://files.example/blob?sig=1", o)).toBe("https://files.example/blob?sig=1");
    expect(gatewayLocation("https://api.openai.com/v2/x", outgoing(plain, { keySource: config.key }))).toBe(
      "https://api.openai.com/v2/x",
    );
  });
});

describe("the providers' rate-limit fields, replaced by the key's", () => {
  const limit = (name: string, l: number, remaining: number | null, resetMs: number | null): LimitResult => ({
    name,
    limit: l,
    windowMs: 60_000,
    remaining,
    resetMs,
    exceeded: false,
  });
  const AT = Date.UTC(2026, 11, 7, 12, 0, 0);
  const result = (limits: LimitResult[]): RateLimitResult => ({
    allowed: true,
    reason: "granted",
    plan: "default",
    route: null,
    refusedBy: null,
    cost: 1,
    retryAfterMs: 0,
    limits,
    at: AT,
    handle: null,
  });

  it("OpenAI's x-ratelimit-* all removed; the tightest limit as -tokens: limit, remaining, reset as OpenAI writes it", () => {
    const headers = new Headers({
      "x-ratelimit-limit-requests": "10000",
      "x-ratelimit-limit-tokens": "30000000",
      "x-ratelimit-remaining-tokens": "29999000",
      "x-ratelimit-reset-tokens": "2ms",
      "x-request-id": "kept",
      "anthropic-ratelimit-tokens-limit": "kept too",
    });
    setProviderHeaders(headers, "openai", result([limit("a", 3000, 2500, 1500), limit("b", 100_000, 400, 90_000)]));
    expect(Object.fromEntries(headers)).toEqual({
      "x-ratelimit-limit-tokens": "100000",
      "x-ratelimit-remaining-tokens": "400",
      "x-ratelimit-reset-tokens": "1m30s",
      "x-request-id": "kept",
      "anthropic-ratelimit-tokens-limit": "kept too",
    });
  });

  it("Anthropic's anthropic-ratelimit-* removed; -tokens-limit, -remaining, -reset as RFC 3339", () => {
    const headers = new Headers({
      "anthropic-ratelimit-requests-limit": "4000",
      "anthropic-ratelimit-input-tokens-limit": "2000000",
      "x-ratelimit-limit-tokens": "kept",
    });
    setProviderHeaders(headers, "anthropic", result([limit("a", 3000, 2500, 1500)]));
    expect(Object.fromEntries(headers)).toEqual({
      "anthropic-ratelimit-tokens-limit": "3000",
      "anthropic-ratelimit-tokens-remaining": "2500",
      "anthropic-ratelimit-tokens-reset": "2026-12-07T12:00:02Z",
      "x-ratelimit-limit-tokens": "kept",
    });
  });

  it("no limits (an unlimited plan, the limiter unavailable): theirs removed, none set; unknown states left out", () => {
    const headers = new Headers({ "x-ratelimit-limit-tokens": "30000000" });
    setProviderHeaders(headers, "openai", result([]));
    expect([...headers.keys()]).toEqual([]);
    setProviderHeaders(headers, "openai", result([limit("a", 50, null, null)]));
    expect(Object.fromEntries(headers)).toEqual({ "x-ratelimit-limit-tokens": "50" });
  });

  it("tightestOf: fewest remaining among the known; the smallest limit when none is known", () => {
    expect(tightestOf([])).toBeNull();
    expect(tightestOf([limit("a", 10, 5, 1), limit("b", 100, 3, 1)])?.name).toBe("b");
    expect(tightestOf([limit("a", 10, 3, 1), limit("b", 100, 3, 1)])?.name).toBe("a");
    expect(tightestOf([limit("a", 10, null, null), limit("b", 100, 30, 1)])?.name).toBe("b");
    expect(tightestOf([limit("a", 10, 3, 1), limit("b", 100, null, null)])?.name).toBe("a");
    expect(tightestOf([limit("a", 100, null, null), limit("b", 10, null, null)])?.name).toBe("b");
  });

  it.each([
    [0, "0ms"],
    [1, "1ms"],
    [999, "999ms"],
    [1000, "1s"],
    [1500, "1.5s"],
    [1234, "1.234s"],
    [1000.0004, "1s"],
    [1234.5678, "1.235s"],
    [59_999, "59.999s"],
    [60_000, "1m0s"],
    [90_500, "1m30.5s"],
    [3_600_000, "1h0m0s"],
    [3_723_000, "1h2m3s"],
  ])("openaiDuration(%d) = %s", (ms, text) => {
    expect(openaiDuration(ms)).toBe(text);
  });

  it("rfc3339: UTC, whole seconds rounded up", () => {
    expect(rfc3339(AT)).toBe("2026-12-07T12:00:00Z");
    expect(rfc3339(AT + 1)).toBe("2026-12-07T12:00:01Z");
    expect(rfc3339(AT + 1000)).toBe("2026-12-07T12:00:01Z");
  });
});
