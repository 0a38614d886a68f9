/**
 * @module The config parser: valid configs (the minimum, wrangler.toml, README examples, every
 * field), every config error naming its field and quoting the bad value, plan and cost lookup,
 * and properties: limits round-trip, junk never escapes as anything but a ConfigError.
 */

import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { normalizePath } from "../../src/base/path.ts";
import { policyHeader as policyOf } from "../../src/client/headers.ts";
import { costFor, planForKey, routeBudget, routeFor } from "../../src/config/lookup.ts";
import {
  LIMITER_FIELDS,
  MAX_ORIGIN_TIMEOUT_MS,
  PROXY_FIELDS,
  parseConfig,
  parseLimiterConfig,
} from "../../src/config/parse.ts";
import { type Config, ConfigError, DEFAULTS, type Limit, type Plan } from "../../src/config/types.ts";
import {
  defaultTickMs,
  MAX_KEY_SLOTS,
  MAX_RING_SLOTS,
  normalizeLimits,
  parseDuration,
  ringLayout,
} from "../../src/core/index.ts";
import { KEY_CHARS } from "../../src/pipeline/key.ts";
import { targetsOf } from "../../src/proxy/upstream.ts";

type Obj = Record<string, unknown>;

const policyHeader = (plan: Plan) => policyOf(plan.limits ?? []);

const ORIGIN = "https://api.example.com";
/** The minimum config of README.md. */
const MINIMUM = {
  limits: [
    { limit: 100, window: "1s" },
    { limit: 1000, window: "1m" },
  ],
};
const MINIMUM_LIMITS: Limit[] = [
  { limit: 100, windowMs: 1_000, tickMs: 1, name: "per-second" },
  { limit: 1000, windowMs: 60_000, tickMs: 1, name: "per-minute" },
];
const MINIMUM_POLICY = '"per-second";q=100;w=1, "per-minute";q=1000;w=60';
const MINIMUM_PLAN = {
  limits: MINIMUM_LIMITS,
  leaseMs: 30_000,
  routes: [],
  ip: null,
  penalty: null,
  concurrency: null,
};
/** An address budget as parsed: its limits as a plan named `name`, its objects' kind. */
function addressBudget(kind: string, limits: Limit[], leaseMs: number, name = "ip") {
  return { kind, plan: { name, keyPrefix: "", limits, leaseMs, routes: [], ip: null } };
}

/** The proxy's CORS settings by default: no origin listed, preflights 60 a minute per address. */
const DEFAULT_CORS = {
  origins: new Set(),
  preflight: {
    kind: "preflight",
    plan: {
      name: "preflight",
      keyPrefix: "",
      limits: [{ limit: 60, windowMs: 60_000, tickMs: 1, name: "preflight-per-minute" }],
      leaseMs: 30_000,
      routes: [],
      ip: null,
    },
  },
};
const DEFAULT_KEY = { header: "x-api-key", bearer: true, query: null, maxLength: 256, pattern: null };

function parse(rateLimit: unknown, origin: unknown = ORIGIN): Config {
  return parseConfig({ ORIGIN: origin, RATE_LIMIT: rateLimit });
}

/**
 * The config of one ORIGIN as plain data (`origin`: its href), so `toEqual` compares every field; the origins'
 * own fields are the gateway's tests' (test/unit/gateway.test.ts).
 */
function plain(config: Config): Omit<Config, "origins"> & { origin: string } {
  const { origins, ...rest } = config;
  expect(origins.map((o) => [o.path, o.field, o.headers, o.forwardKey])).toEqual([["/", "ORIGIN", [], true]]);
  return { ...rest, origin: (origins[0] as Config["origins"][number]).url.href };
}

/** The ConfigError `f` throws; fails the test when it throws nothing or anything else. */
function configError(f: () => unknown): ConfigError {
  let thrown: unknown;
  try {
    f();
  } catch (e) {
    thrown = e;
  }
  expect(thrown, "expected a ConfigError").toBeInstanceOf(ConfigError);
  return thrown as ConfigError;
}

/**
 * Reads `[vars]` from a wrangler.toml the way wrangler does. Wrangler is imported here, by the few tests that read
 * TOML, not by the file: importing it takes seconds, and a mutation run (npm run test:mutation) loads this file once
 * per mutant.
 */
async function varsOf(configPath: string): Promise<{ ORIGIN?: unknown; RATE_LIMIT?: unknown }> {
  const { unstable_readConfig } = await import("wrangler");
  return unstable_readConfig({ config: configPath }).vars as { ORIGIN?: unknown; RATE_LIMIT?: unknown };
}

async function varsOfToml(toml: string): Promise<{ ORIGIN?: unknown; RATE_LIMIT?: unknown }> {
  const dir = mkdtempSync(join(tmpdir(), "config-test-"));
  try {
    const file = join(dir, "wrangler.toml");
    writeFileSync(file, `name = "t"\ncompatibility_date = "2026-11-02"\n${toml}`);
    return await varsOf(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("parseConfig: valid configs", () => {
  const minimumConfig = {
    origin: "https://api.example.com/",
    originTimeoutMs: 30_000,
    plans: [],
    defaultPlan: { name: "default", keyPrefix: "", ...MINIMUM_PLAN },
    anonymous: null,
    costs: [],
    key: DEFAULT_KEY,
    failureMode: "closed",
    fallbackShare: 1,
    jurisdiction: null,
    shadow: false,
    objectTimeoutMs: 5_000,
    leases: { enabled: true, maxUnits: 1000, maxLifetimeMs: 30_000 },
    admin: { path: "/__limiter/" },
    headers: "draft-11",
    paths: { escapedSlashes: "reject" },
    ipv6Subnet: 56,
    ip: null,
    refundStatuses: new Set(),
    cors: DEFAULT_CORS,
  };

  it("documents the defaults README states", () => {
    expect(DEFAULTS).toEqual({
      keyHeader: "x-api-key",
      maxKeyLength: 256,
      originTimeoutMs: 30_000,
      objectTimeoutMs: 5_000,
      leases: { enabled: true, maxUnits: 1000, maxLifetimeMs: 30_000 },
      failureMode: "closed",
      fallbackShare: 1,
      adminPath: "/__limiter/",
      headers: "draft-11",
      ipv6Subnet: 56,
      concurrencyTimeoutMs: 60_000,
      preflightLimits: [{ limit: 60, window: "1m" }],
      reserveMaxTimes: 128,
      reserveMaxBody: 1_048_576,
      guesses: {
        limits: [{ limit: 10, window: "1m" }],
        penalty: { after: 3, within: "10m", block: "15m", max_block: "1d" },
      },
    });
  });

  it("takes admin.path, and parses limits on their own with errors under the field given", async () => {
    expect(parse({ ...MINIMUM, admin: { path: "/ops/limiter/" } }).admin).toEqual({ path: "/ops/limiter/" });
    expect(parse({ ...MINIMUM, admin: {} }).admin).toEqual({ path: "/__limiter/" });
    const { parseLimits } = await import("../../src/config/parse.ts");
    expect(parseLimits([{ limit: 500, window: "1m", name: "vip" }], "limits")).toEqual([
      { limit: 500, windowMs: 60_000, tickMs: 1, name: "vip" },
    ]);
    expect(configError(() => parseLimits([{ limit: 1, window: "1 sec" }], "limits")).message).toMatch(
      /^limits\[0\]\.window: /,
    );
  });

  it("parses the minimum config with every default filled in", () => {
    const config = parse(MINIMUM);
    expect(plain(config)).toEqual(minimumConfig);
    expect(policyHeader(config.defaultPlan as Plan)).toBe(MINIMUM_POLICY);
  });

  it("parses wrangler.toml's [vars] as wrangler reads them", async () => {
    const vars = await varsOf("wrangler.toml");
    expect(plain(parseConfig(vars))).toEqual({
      ...minimumConfig,
      origin: "http://127.0.0.1:8788/",
      plans: [
        {
          name: "test",
          keyPrefix: "test_",
          limits: [{ limit: 10, windowMs: 60_000, tickMs: 1, name: "per-minute" }],
          leaseMs: 30_000,
          routes: [],
          ip: null,
          penalty: null,
          concurrency: null,
        },
      ],
    });
  });

  it("parses the minimum config as TOML through wrangler", async () => {
    const vars = await varsOfToml(`[vars]
ORIGIN = "https://api.example.com"       # allowed requests go to ORIGIN + path + query

[vars.RATE_LIMIT]
limits = [
  { limit = 100,  window = "1s" },        # a request must fit every limit
  { limit = 1000, window = "1m" },
]
`);
    expect(plain(parseConfig(vars))).toEqual(minimumConfig);
  });

  it("accepts every RATE_LIMIT example in README.md and docs/", async () => {
    const files = [
      "README.md",
      ...readdirSync("docs")
        .filter((f) => f.endsWith(".md"))
        .map((f) => `docs/${f}`),
    ];
    const setting = new RegExp(`^(${[...LIMITER_FIELDS, ...PROXY_FIELDS].join("|")})\\s*=`, "m");
    const checked = [];
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      for (const [, block = ""] of text.matchAll(/```toml\n([\s\S]*?)```/g)) {
        // Examples of the limiter's settings: a [vars.RATE_LIMIT] table, or a fragment of one (costs = …, key = …).
        if (!block.includes("[vars.RATE_LIMIT]") && !setting.test(block)) continue;
        let toml = block;
        if (!toml.includes("[vars.RATE_LIMIT]")) toml = `[vars.RATE_LIMIT]\n${toml}`;
        const ownLimits = /^limits\s*=|^plans\s*=/m.test(toml);
        if (!ownLimits)
          toml = toml.replace("[vars.RATE_LIMIT]\n", '[vars.RATE_LIMIT]\nlimits = [ { limit = 1, window = "1s" } ]\n');
        if (!toml.includes("ORIGIN =")) toml = `[vars]\nORIGIN = "${ORIGIN}"\n${toml}`;
        const vars = await varsOfToml(toml);
        expect(() => parseConfig(vars), `${file}:\n${block}`).not.toThrow();
        const config = parseConfig(vars);
        // A client that leaves the reservation's field out must be able to pass: no rule's default (or fixed)
        // reservation is over the smallest limit of a plan beside it.
        for (const rule of ownLimits ? config.costs : []) {
          if (rule.cost === null || rule.cost === 0) continue;
          for (const plan of [config.defaultPlan, ...config.plans]) {
            const smallest = Math.min(...(plan?.limits ?? []).map((l) => l.limit));
            expect(rule.cost, `${file}: ${rule.pathPrefix}'s reservation against plan ${plan?.name}`).toBeLessThan(
              smallest,
            );
          }
        }
        // Every secret its origins' headers name can be read (a name the Worker could have).
        const anySecret = new Proxy({}, { get: () => "x" });
        expect(() => targetsOf(config, anySecret)).not.toThrow();
        checked.push(block);
      }
    }
    expect(checked.length).toBeGreaterThanOrEqual(4);
  });

  const full = {
    limits: [{ limit: 100, window: "1s" }],
    plans: [
      { name: "live", key_prefix: "live_", unlimited: true },
      { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m", name: "tests" }], ip: false },
      {
        name: "team",
        key_prefix: "team_",
        limits: [{ limit: 20, window: "1m" }],
        ip: { limits: [{ limit: 50, window: "1m" }] },
      },
    ],
    anonymous: { limits: [{ limit: 5, window: 60_000 }] },
    ip: { limits: [{ limit: 300, window: "1m", name: "address" }] },
    ipv6_subnet: 64,
    cors: {
      origins: ["https://app.example.com", "http://localhost:5173"],
      preflight_limits: [{ limit: 10, window: "1s" }],
    },
    costs: [
      { path: "/health", cost: 0 },
      { method: "post", path: "/v1/search", cost: 5 },
    ],
    key: { header: "X-Key", bearer: false, query: "api_key", max_length: 64 },
    failure_mode: "open",
    shadow: true,
    origin_timeout: "5s",
    object_timeout: "250ms",
    leases: { enabled: true, max_units: 50, max_lifetime: "500ms" },
    admin: { path: "/ops/limiter/" },
    headers: "draft-6",
    paths: { escaped_slashes: "unescape" },
    refund: { status: [500, 503] },
  };
  const fullConfig = {
    origin: "https://example.com/api",
    originTimeoutMs: 5_000,
    objectTimeoutMs: 250,
    leases: { enabled: true, maxUnits: 50, maxLifetimeMs: 500 },
    plans: [
      {
        name: "live",
        keyPrefix: "live_",
        limits: null,
        leaseMs: 0,
        routes: [],
        ip: null,
        penalty: null,
        concurrency: null,
      },
      {
        name: "test",
        keyPrefix: "test_",
        limits: [{ limit: 10, windowMs: 60_000, tickMs: 1, name: "tests" }],
        leaseMs: 500,
        routes: [],
        ip: null,
        penalty: null,
        concurrency: null,
      },
      {
        name: "team",
        keyPrefix: "team_",
        limits: [{ limit: 20, windowMs: 60_000, tickMs: 1, name: "per-minute" }],
        leaseMs: 500,
        routes: [],
        ip: addressBudget("addr.team", [{ limit: 50, windowMs: 60_000, tickMs: 1, name: "ip-per-minute" }], 500),
        penalty: null,
        concurrency: null,
      },
    ],
    defaultPlan: {
      name: "default",
      keyPrefix: "",
      limits: [{ limit: 100, windowMs: 1_000, tickMs: 1, name: "per-second" }],
      leaseMs: 500,
      routes: [],
      ip: addressBudget("addr", [{ limit: 300, windowMs: 60_000, tickMs: 1, name: "address" }], 500),
      penalty: null,
      concurrency: null,
    },
    anonymous: {
      name: "anonymous",
      keyPrefix: "",
      limits: [{ limit: 5, windowMs: 60_000, tickMs: 1, name: "per-minute" }],
      leaseMs: 500,
      routes: [],
      ip: null,
      penalty: null,
      concurrency: null,
    },
    ipv6Subnet: 64,
    ip: addressBudget("addr", [{ limit: 300, windowMs: 60_000, tickMs: 1, name: "address" }], 500),
    cors: {
      origins: new Set(["https://app.example.com", "http://localhost:5173"]),
      preflight: addressBudget(
        "preflight",
        [{ limit: 10, windowMs: 1_000, tickMs: 1, name: "preflight-per-second" }],
        500,
        "preflight",
      ),
    },
    costs: [
      { method: null, pathPrefix: "/health", cost: 0 },
      { method: "POST", pathPrefix: "/v1/search", cost: 5 },
    ],
    key: { header: "x-key", bearer: false, query: "api_key", maxLength: 64, pattern: null },
    failureMode: "open",
    fallbackShare: 1,
    jurisdiction: null,
    shadow: true,
    admin: { path: "/ops/limiter/" },
    headers: "draft-6",
    paths: { escapedSlashes: "unescape" },
    refundStatuses: new Set([500, 503]),
  };

  it("parses every setting (plans in order, method upper-cased, header lower-cased)", () => {
    expect(plain(parse(full, "https://example.com/api"))).toEqual(fullConfig);
  });

  it.each([
    ["the minimum", async () => MINIMUM, minimumConfig.origin],
    ["every setting", async () => full, fullConfig.origin],
    ["wrangler.toml", async () => (await varsOf("wrangler.toml")).RATE_LIMIT, "http://127.0.0.1:8788/"],
  ])("reads %s given as JSON strings exactly as given as objects", async (_, read, origin) => {
    const rateLimit = await read();
    const fromObjects = plain(parse(rateLimit, origin));
    expect(plain(parse(JSON.stringify(rateLimit), origin))).toEqual(fromObjects);
    expect(plain(parse(JSON.stringify(rateLimit), JSON.stringify(origin)))).toEqual(fromObjects);
    expect(plain(parse(` ${JSON.stringify(rateLimit, null, 2)}\n`, ` ${JSON.stringify(origin)} `))).toEqual(
      fromObjects,
    );
  });

  it.each([
    ["250ms", 250, "per-250ms", 1],
    ["1s", 1_000, "per-second", 1],
    ["10s", 10_000, "per-10s", 10],
    ["90s", 90_000, "per-90s", 90],
    ["1m", 60_000, "per-minute", 60],
    ["60s", 60_000, "per-minute", 60],
    ["2m", 120_000, "per-2m", 120],
    ["1h", 3_600_000, "per-hour", 3600],
    ["1d", 86_400_000, "per-day", 86400],
    ["366d", 366 * 86_400_000, "per-366d", 366 * 86400],
    [" 2s ", 2_000, "per-2s", 2],
    [1, 1, "per-1ms", 1],
    [1500, 1_500, "per-1500ms", 2],
    [60_000, 60_000, "per-minute", 60],
  ])("window %j is %i ms, named %j, w=%i", (window, windowMs, name, w) => {
    const plan = parse({ limits: [{ limit: 7, window }] }).defaultPlan as Plan;
    expect(plan.limits).toEqual([{ limit: 7, windowMs, tickMs: defaultTickMs(7, windowMs), name }]);
    expect(policyHeader(plan)).toBe(`"${name}";q=7;w=${w}`);
  });

  it.each([
    ["250ms", 250],
    ["1s", 1_000],
    ["1m", 60_000],
    ["1h", 3_600_000],
    ["1d", 86_400_000],
    [2500, 2_500],
    [MAX_ORIGIN_TIMEOUT_MS, MAX_ORIGIN_TIMEOUT_MS],
  ])("origin_timeout %j is %i ms", (origin_timeout, ms) => {
    expect(parse({ ...MINIMUM, origin_timeout }).originTimeoutMs).toBe(ms);
  });

  it("keeps explicit names, escaping them as structured-field strings in the policy header", () => {
    const plan = parse({
      limits: [
        { limit: 1, window: "1s", name: 'burst "hard"' },
        { limit: 2, window: "1s", name: "back\\slash" },
      ],
    }).defaultPlan as Plan;
    expect(plan.limits?.map((l) => l.name)).toEqual(['burst "hard"', "back\\slash"]);
    expect(policyHeader(plan)).toBe('"burst \\"hard\\"";q=1;w=1, "back\\\\slash";q=2;w=1');
  });

  it.each([
    ["http://127.0.0.1:8788", "http://127.0.0.1:8788/"],
    ["https://example.com/api", "https://example.com/api"],
    ["https://example.com/api/", "https://example.com/api/"],
    [" https://EXAMPLE.com ", "https://example.com/"],
  ])("ORIGIN %j is the URL %j", (origin, href) => {
    expect(parse(MINIMUM, origin).origins[0]?.url.href).toBe(href);
  });

  it("needs no default limits when plans are given: keys no plan matches get no plan", () => {
    const config = parse({ plans: [{ name: "a", key_prefix: "a_", limits: [{ limit: 1, window: "1s" }] }] });
    expect(config.defaultPlan).toBeNull();
    expect(config.plans.map((p) => p.name)).toEqual(["a"]);
  });

  it.each([
    [{ header: false }, { ...DEFAULT_KEY, header: null }],
    [{ bearer: false }, { ...DEFAULT_KEY, bearer: false }],
    [{ query: false }, DEFAULT_KEY],
    [{ pattern: "(test|live)_[0-9a-f]{32}" }, { ...DEFAULT_KEY, pattern: /^(?:(test|live)_[0-9a-f]{32})$/u }],
    [
      { header: false, bearer: false, query: "key" },
      { header: null, bearer: false, query: "key", maxLength: 256, pattern: null },
    ],
    [{ max_length: 1 }, { ...DEFAULT_KEY, maxLength: 1 }],
    [{ max_length: 4096 }, { ...DEFAULT_KEY, maxLength: 4096 }],
    [{ header: "Authorization-Key" }, { ...DEFAULT_KEY, header: "authorization-key" }],
    [{}, DEFAULT_KEY],
  ])("key %j reads as %j", (key, expected) => {
    expect(parse({ ...MINIMUM, key }).key).toEqual(expected);
  });

  it("accepts a key_prefix exactly max_length long and costs from 0 to any whole number", () => {
    const config = parse({
      ...MINIMUM,
      key: { max_length: 5 },
      plans: [{ name: "t", key_prefix: "test_", unlimited: true }],
      costs: [
        { path: "/free", cost: 0 },
        { path: "/huge", cost: Number.MAX_SAFE_INTEGER },
      ],
    });
    expect(config.plans[0]?.keyPrefix).toBe("test_");
    expect(config.costs.map((c) => c.cost)).toEqual([0, Number.MAX_SAFE_INTEGER]);
  });

  it("accepts limits of any size, giving long windows a coarser default tick", () => {
    const plan = parse({ limits: [{ limit: Number.MAX_SAFE_INTEGER, window: "366d" }] }).defaultPlan as Plan;
    expect(plan.limits?.[0]).toMatchObject({
      limit: Number.MAX_SAFE_INTEGER,
      tickMs: defaultTickMs(Number.MAX_SAFE_INTEGER, 366 * 86_400_000),
    });
    // A huge limit over a short window keeps 1ms ticks: it needs only windowMs + lease + 2 slots.
    expect(parse({ limits: [{ limit: 2 ** 40, window: "1s" }] }).defaultPlan?.limits?.[0]).toMatchObject({
      limit: 2 ** 40,
      tickMs: 1,
    });
    expect(parse({ limits: [{ limit: 1_000_000, window: "30d", tick: "1h" }] }).defaultPlan?.limits?.[0]?.tickMs).toBe(
      3_600_000,
    );
  });

  it("accepts a plan after a different plan, and a cost rule after one for another method", () => {
    expect(() =>
      parse({
        ...MINIMUM,
        plans: [
          { name: "a", key_prefix: "test_live_", unlimited: true },
          { name: "b", key_prefix: "test_", unlimited: true },
        ],
        costs: [
          { method: "POST", path: "/v1", cost: 2 },
          { method: "GET", path: "/v1", cost: 3 },
          { path: "/v1/x", cost: 4 },
        ],
      }),
    ).not.toThrow();
  });
});

/** MINIMUM with some top-level settings replaced. */
function rl(over: Record<string, unknown>): Record<string, unknown> {
  return { ...MINIMUM, ...over };
}
/** MINIMUM with limits[1] replaced. */
function limit1(l: unknown): Record<string, unknown> {
  return { limits: [{ limit: 100, window: "1s" }, l] };
}
/** MINIMUM with a hole where limits[1] was. */
function limit1Hole(): Record<string, unknown> {
  const limits: unknown[] = [{ limit: 100, window: "1s" }];
  limits.length = 2;
  return { limits };
}
/** A sparse array: a hole, then `item`. */
function holeThen(item: unknown): unknown[] {
  const list: unknown[] = [];
  list[1] = item;
  return list;
}
/** A config whose only plan is `p`. */
function plan0(p: Record<string, unknown>): Record<string, unknown> {
  return rl({ plans: [p] });
}
const TEST_PLAN = { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }] };
/** A config whose only cost rule is `c`. */
function cost0(c: Record<string, unknown>): Record<string, unknown> {
  return rl({ costs: [c] });
}

interface BadCase {
  /** What is wrong. */
  readonly what: string;
  readonly origin?: unknown;
  readonly rateLimit?: unknown;
  /** The message starts with `${field}:`. */
  readonly field: string;
  /** The message contains this (usually the bad value as quoted). */
  readonly quotes: string;
}

const BAD: readonly BadCase[] = [
  // ORIGIN
  { what: "missing ORIGIN", origin: undefined, field: "ORIGIN", quotes: "required" },
  { what: "empty ORIGIN", origin: "", field: "ORIGIN", quotes: "required" },
  { what: "ORIGIN not a URL", origin: "api.example.com", field: "ORIGIN", quotes: 'got "api.example.com"' },
  { what: "ORIGIN with spaces", origin: "not a url", field: "ORIGIN", quotes: 'got "not a url"' },
  { what: "ftp ORIGIN", origin: "ftp://example.com", field: "ORIGIN", quotes: 'got "ftp://example.com"' },
  { what: "file ORIGIN", origin: "file:///etc/passwd", field: "ORIGIN", quotes: 'got "file:///etc/passwd"' },
  { what: "ws ORIGIN", origin: "ws://example.com", field: "ORIGIN", quotes: 'got "ws://example.com"' },
  { what: "ORIGIN with a query", origin: "https://x.com/?a=1", field: "ORIGIN", quotes: 'got "https://x.com/?a=1"' },
  { what: "ORIGIN with a fragment", origin: "https://x.com/#top", field: "ORIGIN", quotes: 'got "https://x.com/#top"' },
  {
    what: "ORIGIN with credentials (quoted redacted)",
    origin: "https://user:secret@x.com/api",
    field: "ORIGIN",
    quotes: 'got "https://***@x.com/api"',
  },
  { what: "ORIGIN a number", origin: 42, field: "ORIGIN", quotes: "got 42" },
  { what: "ORIGIN null", origin: null, field: "ORIGIN", quotes: "got null" },
  { what: "ORIGIN a table", origin: { url: "https://x.com" }, field: "ORIGIN", quotes: "got a object" },
  { what: "ORIGIN bad JSON string", origin: '"https://x.com', field: "ORIGIN", quotes: "not valid JSON" },
  { what: "ORIGIN JSON string of a number", origin: '"1"', field: "ORIGIN", quotes: 'got "1"' },
  { what: "ORIGIN JSON ftp", origin: '"ftp://x.com"', field: "ORIGIN", quotes: 'got "ftp://x.com"' },
  // RATE_LIMIT itself
  { what: "missing RATE_LIMIT", rateLimit: undefined, field: "RATE_LIMIT", quotes: "required" },
  { what: "RATE_LIMIT empty string", rateLimit: "", field: "RATE_LIMIT", quotes: "not valid JSON" },
  { what: "RATE_LIMIT bad JSON", rateLimit: '{"limits": [', field: "RATE_LIMIT", quotes: "not valid JSON" },
  { what: "RATE_LIMIT TOML as a string", rateLimit: "limits = []", field: "RATE_LIMIT", quotes: "not valid JSON" },
  { what: "RATE_LIMIT JSON array", rateLimit: "[1]", field: "RATE_LIMIT", quotes: "got an array" },
  { what: "RATE_LIMIT JSON string", rateLimit: '"x"', field: "RATE_LIMIT", quotes: 'got "x"' },
  { what: "RATE_LIMIT JSON null", rateLimit: "null", field: "RATE_LIMIT", quotes: "got null" },
  { what: "RATE_LIMIT a number", rateLimit: 5, field: "RATE_LIMIT", quotes: "got 5" },
  { what: "RATE_LIMIT an array", rateLimit: [], field: "RATE_LIMIT", quotes: "got an array" },
  { what: "RATE_LIMIT null", rateLimit: null, field: "RATE_LIMIT", quotes: "got null" },
  { what: "RATE_LIMIT true", rateLimit: true, field: "RATE_LIMIT", quotes: "got true" },
  {
    what: "unknown top-level field",
    rateLimit: rl({ limit: 5 }),
    field: "RATE_LIMIT.limit",
    quotes: "unknown setting",
  },
  { what: "JSON unknown field", rateLimit: '{"__proto__": 1}', field: "RATE_LIMIT.__proto__", quotes: "unknown" },
  // limits
  { what: "no limits and no plans", rateLimit: {}, field: "RATE_LIMIT.limits", quotes: "required" },
  { what: "no limits, empty plans", rateLimit: { plans: [] }, field: "RATE_LIMIT.limits", quotes: "required" },
  { what: "limits a string", rateLimit: { limits: "100/s" }, field: "RATE_LIMIT.limits", quotes: 'got "100/s"' },
  { what: "limits a table", rateLimit: { limits: { limit: 1 } }, field: "RATE_LIMIT.limits", quotes: "got a object" },
  { what: "limits null", rateLimit: { limits: null }, field: "RATE_LIMIT.limits", quotes: "got null" },
  { what: "limits empty", rateLimit: { limits: [] }, field: "RATE_LIMIT.limits", quotes: "at least one limit" },
  { what: "limit not a table", rateLimit: { limits: [5] }, field: "RATE_LIMIT.limits[0]", quotes: "got 5" },
  { what: "a hole in limits", rateLimit: limit1Hole(), field: "RATE_LIMIT.limits[1]", quotes: "required" },
  {
    what: "a hole in costs",
    rateLimit: rl({ costs: holeThen({ path: "/", cost: 1 }) }),
    field: "RATE_LIMIT.costs[0]",
    quotes: "required",
  },
  { what: "limit an array", rateLimit: limit1([]), field: "RATE_LIMIT.limits[1]", quotes: "got an array" },
  {
    what: "limit 0",
    rateLimit: limit1({ limit: 0, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got 0",
  },
  {
    what: "limit -1",
    rateLimit: limit1({ limit: -1, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got -1",
  },
  {
    what: "limit fractional",
    rateLimit: limit1({ limit: 1.5, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got 1.5",
  },
  {
    what: "limit a string",
    rateLimit: limit1({ limit: "100", window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: 'got "100"',
  },
  {
    what: "limit NaN",
    rateLimit: limit1({ limit: Number.NaN, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got NaN",
  },
  {
    what: "limit beyond safe integers",
    rateLimit: limit1({ limit: 2 ** 53, window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got 9007199254740992",
  },
  {
    what: "limit missing",
    rateLimit: limit1({ window: "1m" }),
    field: "RATE_LIMIT.limits[1].limit",
    quotes: "got nothing",
  },
  {
    what: "tick too fine for the limit",
    rateLimit: { limits: [{ limit: MAX_RING_SLOTS * 10, window: "1d", tick: "1ms" }] },
    field: "RATE_LIMIT.limits[0].tick",
    quotes: `${MAX_RING_SLOTS * 10} per 1d at a tick of 1ms`,
  },
  {
    what: "tick longer than the window",
    rateLimit: { limits: [{ limit: 5, window: "1s", tick: "2s" }] },
    field: "RATE_LIMIT.limits[0].tick",
    quotes: 'got "2s"',
  },
  {
    what: "tick not a duration",
    rateLimit: { limits: [{ limit: 5, window: "1s", tick: "fast" }] },
    field: "RATE_LIMIT.limits[0].tick",
    quotes: 'got "fast"',
  },
  {
    what: "leases not a table",
    rateLimit: { ...MINIMUM, leases: "yes" },
    field: "RATE_LIMIT.leases",
    quotes: 'got "yes"',
  },
  {
    what: "leases.max_units zero",
    rateLimit: { ...MINIMUM, leases: { max_units: 0 } },
    field: "RATE_LIMIT.leases.max_units",
    quotes: "got 0",
  },
  {
    what: "leases.max_lifetime not a duration",
    rateLimit: { ...MINIMUM, leases: { max_lifetime: "long" } },
    field: "RATE_LIMIT.leases.max_lifetime",
    quotes: 'got "long"',
  },
  {
    what: "leases unknown setting",
    rateLimit: { ...MINIMUM, leases: { lifetime: "1s" } },
    field: "RATE_LIMIT.leases.lifetime",
    quotes: "unknown setting",
  },
  {
    what: "object_timeout not a duration",
    rateLimit: { ...MINIMUM, object_timeout: "soon" },
    field: "RATE_LIMIT.object_timeout",
    quotes: 'got "soon"',
  },
  {
    what: "explicit ticks that need too many rings",
    rateLimit: {
      limits: [1, 2, 3].map((t) => ({ limit: 1e9, window: 1900 * t, tick: t })),
    },
    field: "RATE_LIMIT.limits",
    quotes: "3 different ticks need",
  },
  {
    what: "window a bad string",
    rateLimit: limit1({ limit: 1, window: "1 sec" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1 sec"',
  },
  {
    what: "window empty",
    rateLimit: limit1({ limit: 1, window: "" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got ""',
  },
  {
    what: "window 0s",
    rateLimit: limit1({ limit: 1, window: "0s" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "0s"',
  },
  {
    what: "window 0",
    rateLimit: limit1({ limit: 1, window: 0 }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got 0",
  },
  {
    what: "window -5",
    rateLimit: limit1({ limit: 1, window: -5 }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got -5",
  },
  {
    what: "window fractional ms",
    rateLimit: limit1({ limit: 1, window: 2.5 }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got 2.5",
  },
  {
    what: "window fractional unit",
    rateLimit: limit1({ limit: 1, window: "1.5s" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1.5s"',
  },
  {
    what: "window weeks",
    rateLimit: limit1({ limit: 1, window: "1w" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1w"',
  },
  {
    what: "window without unit",
    rateLimit: limit1({ limit: 1, window: "1000" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'got "1000"',
  },
  {
    what: "window too long",
    rateLimit: limit1({ limit: 1, window: "367d" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: 'at most 366d, got "367d"',
  },
  {
    what: "window true",
    rateLimit: limit1({ limit: 1, window: true }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: "got true",
  },
  { what: "window missing", rateLimit: limit1({ limit: 1 }), field: "RATE_LIMIT.limits[1].window", quotes: "required" },
  {
    what: "two limits with one window (default names clash)",
    rateLimit: limit1({ limit: 5, window: "1000ms" }),
    field: "RATE_LIMIT.limits[1].window",
    quotes: '"per-second", already used by RATE_LIMIT.limits[0]',
  },
  {
    what: "two limits with one name",
    rateLimit: {
      limits: [
        { limit: 1, window: "1s", name: "a" },
        { limit: 2, window: "1m", name: "a" },
      ],
    },
    field: "RATE_LIMIT.limits[1].name",
    quotes: '"a" is already used by RATE_LIMIT.limits[0]',
  },
  {
    what: "a name equal to another limit's default",
    rateLimit: limit1({ limit: 2, window: "1m", name: "per-second" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: '"per-second" is already used',
  },
  {
    what: "name empty",
    rateLimit: limit1({ limit: 2, window: "1m", name: "" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: 'got ""',
  },
  {
    what: "name a number",
    rateLimit: limit1({ limit: 2, window: "1m", name: 5 }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: "got 5",
  },
  {
    what: "name not ASCII (cannot go in a header)",
    rateLimit: limit1({ limit: 2, window: "1m", name: "per-minüte" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: 'got "per-minüte"',
  },
  {
    what: "name with a newline",
    rateLimit: limit1({ limit: 2, window: "1m", name: "a\nb" }),
    field: "RATE_LIMIT.limits[1].name",
    quotes: 'got "a\\nb"',
  },
  {
    what: "unknown limit field",
    rateLimit: limit1({ limit: 2, window: "1m", per: "ip" }),
    field: "RATE_LIMIT.limits[1].per",
    quotes: "unknown setting",
  },
  // plans
  { what: "plans a table", rateLimit: rl({ plans: { test: {} } }), field: "RATE_LIMIT.plans", quotes: "got a object" },
  { what: "plans a string", rateLimit: rl({ plans: "test" }), field: "RATE_LIMIT.plans", quotes: 'got "test"' },
  { what: "plan not a table", rateLimit: rl({ plans: [5] }), field: "RATE_LIMIT.plans[0]", quotes: "got 5" },
  {
    what: "plan without name",
    rateLimit: plan0({ key_prefix: "t_", unlimited: true }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: "required",
  },
  {
    what: "plan name empty",
    rateLimit: plan0({ ...TEST_PLAN, name: "" }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: 'got ""',
  },
  {
    what: "plan name a number",
    rateLimit: plan0({ ...TEST_PLAN, name: 1 }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: "got 1",
  },
  {
    what: "plan name with a space",
    rateLimit: plan0({ ...TEST_PLAN, name: "free tier" }),
    field: "RATE_LIMIT.plans[0].name",
    quotes: 'got "free tier"',
  },
  {
    what: "duplicate plan name",
    rateLimit: rl({ plans: [TEST_PLAN, { ...TEST_PLAN, key_prefix: "other_" }] }),
    field: "RATE_LIMIT.plans[1].name",
    quotes: '"test" is used twice',
  },
  {
    what: "plan without key_prefix",
    rateLimit: plan0({ name: "t", unlimited: true }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: "required",
  },
  {
    what: "key_prefix empty",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: 'got ""',
  },
  {
    what: "key_prefix a number",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: 7 }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: "got 7",
  },
  {
    what: "key_prefix with a space (no key can hold it)",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "test key" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: '"test key"',
  },
  {
    what: "key_prefix with a comma (no key can hold it)",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "test,a" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: '"test,a"',
  },
  {
    what: "key_prefix not ASCII",
    rateLimit: plan0({ ...TEST_PLAN, key_prefix: "tést_" }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: '"tést_"',
  },
  {
    what: "key_prefix longer than key.max_length",
    rateLimit: rl({ plans: [TEST_PLAN], key: { max_length: 4 } }),
    field: "RATE_LIMIT.plans[0].key_prefix",
    quotes: 'max_length (4), so no key can start with "test_"',
  },
  {
    what: "duplicate key_prefix (second plan unreachable)",
    rateLimit: rl({ plans: [TEST_PLAN, { ...TEST_PLAN, name: "other" }] }),
    field: "RATE_LIMIT.plans[1].key_prefix",
    quotes: '"test_" can never match',
  },
  {
    what: "key_prefix shadowed by a shorter earlier one",
    rateLimit: rl({ plans: [TEST_PLAN, { name: "live", key_prefix: "test_live_", unlimited: true }] }),
    field: "RATE_LIMIT.plans[1].key_prefix",
    quotes: '"test_live_" can never match, every such key already matches RATE_LIMIT.plans[0] (key_prefix "test_")',
  },
  {
    what: "plan with both limits and unlimited",
    rateLimit: plan0({ ...TEST_PLAN, unlimited: true }),
    field: "RATE_LIMIT.plans[0]",
    quotes: "not both",
  },
  {
    what: "plan with neither limits nor unlimited",
    rateLimit: plan0({ name: "t", key_prefix: "t_" }),
    field: "RATE_LIMIT.plans[0].limits",
    quotes: "required",
  },
  {
    what: "plan unlimited = false without limits",
    rateLimit: plan0({ name: "t", key_prefix: "t_", unlimited: false }),
    field: "RATE_LIMIT.plans[0].limits",
    quotes: "required",
  },
  {
    what: "plan unlimited not boolean",
    rateLimit: plan0({ name: "t", key_prefix: "t_", unlimited: "yes" }),
    field: "RATE_LIMIT.plans[0].unlimited",
    quotes: 'got "yes"',
  },
  {
    what: "plan limits empty",
    rateLimit: plan0({ ...TEST_PLAN, limits: [] }),
    field: "RATE_LIMIT.plans[0].limits",
    quotes: "at least one limit",
  },
  {
    what: "plan limit window bad",
    rateLimit: plan0({ ...TEST_PLAN, limits: [{ limit: 1, window: "1min" }] }),
    field: "RATE_LIMIT.plans[0].limits[0].window",
    quotes: 'got "1min"',
  },
  {
    what: "unknown plan field",
    rateLimit: plan0({ ...TEST_PLAN, prefix: "x" }),
    field: "RATE_LIMIT.plans[0].prefix",
    quotes: "unknown setting",
  },
  // anonymous
  { what: "anonymous true", rateLimit: rl({ anonymous: true }), field: "RATE_LIMIT.anonymous", quotes: "got true" },
  {
    what: "anonymous an array",
    rateLimit: rl({ anonymous: [] }),
    field: "RATE_LIMIT.anonymous",
    quotes: "got an array",
  },
  {
    what: "anonymous without limits",
    rateLimit: rl({ anonymous: {} }),
    field: "RATE_LIMIT.anonymous.limits",
    quotes: "required",
  },
  {
    what: "anonymous limits empty",
    rateLimit: rl({ anonymous: { limits: [] } }),
    field: "RATE_LIMIT.anonymous.limits",
    quotes: "at least one",
  },
  {
    what: "anonymous limit bad",
    rateLimit: rl({ anonymous: { limits: [{ limit: 0, window: "1m" }] } }),
    field: "RATE_LIMIT.anonymous.limits[0].limit",
    quotes: "got 0",
  },
  {
    what: "anonymous unlimited",
    rateLimit: rl({ anonymous: { unlimited: true } }),
    field: "RATE_LIMIT.anonymous.unlimited",
    quotes: "unknown setting",
  },
  // costs
  { what: "costs a table", rateLimit: rl({ costs: { "/x": 1 } }), field: "RATE_LIMIT.costs", quotes: "got a object" },
  { what: "cost rule null", rateLimit: rl({ costs: [null] }), field: "RATE_LIMIT.costs[0]", quotes: "got null" },
  {
    what: "method empty",
    rateLimit: cost0({ method: "", path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: 'got ""',
  },
  {
    what: "method a number",
    rateLimit: cost0({ method: 1, path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: "got 1",
  },
  {
    what: "method with a path",
    rateLimit: cost0({ method: "GET /x", path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: 'got "GET /x"',
  },
  {
    what: "method list",
    rateLimit: cost0({ method: "GET,POST", path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: 'got "GET,POST"',
  },
  {
    what: "method an array",
    rateLimit: cost0({ method: ["GET"], path: "/", cost: 1 }),
    field: "RATE_LIMIT.costs[0].method",
    quotes: "got an array",
  },
  { what: "path missing", rateLimit: cost0({ cost: 1 }), field: "RATE_LIMIT.costs[0].path", quotes: "required" },
  { what: "path empty", rateLimit: cost0({ path: "", cost: 1 }), field: "RATE_LIMIT.costs[0].path", quotes: 'got ""' },
  {
    what: "path relative",
    rateLimit: cost0({ path: "v1/search", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "v1/search"',
  },
  {
    what: "path a full URL",
    rateLimit: cost0({ path: "https://x.com/v1", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "https://x.com/v1"',
  },
  {
    what: "path with a query (never in a pathname)",
    rateLimit: cost0({ path: "/search?q=1", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "/search?q=1"',
  },
  {
    what: "path with a space",
    rateLimit: cost0({ path: "/v1/search ", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "/v1/search "',
  },
  {
    what: "path not ASCII",
    rateLimit: cost0({ path: "/café", cost: 1 }),
    field: "RATE_LIMIT.costs[0].path",
    quotes: 'got "/café"',
  },
  { what: "path a number", rateLimit: cost0({ path: 1, cost: 1 }), field: "RATE_LIMIT.costs[0].path", quotes: "got 1" },
  {
    what: "cost negative",
    rateLimit: cost0({ path: "/", cost: -1 }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: "got -1",
  },
  {
    what: "cost fractional",
    rateLimit: cost0({ path: "/", cost: 0.5 }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: "got 0.5",
  },
  {
    what: "cost a string",
    rateLimit: cost0({ path: "/", cost: "5" }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: 'got "5"',
  },
  { what: "cost missing", rateLimit: cost0({ path: "/" }), field: "RATE_LIMIT.costs[0].cost", quotes: "got nothing" },
  {
    what: "cost infinite",
    rateLimit: cost0({ path: "/", cost: Number.POSITIVE_INFINITY }),
    field: "RATE_LIMIT.costs[0].cost",
    quotes: "got Infinity",
  },
  {
    what: "unknown cost field",
    rateLimit: cost0({ path: "/", cost: 1, methods: ["GET"] }),
    field: "RATE_LIMIT.costs[0].methods",
    quotes: "unknown setting",
  },
  {
    what: "cost rule shadowed by an earlier prefix",
    rateLimit: rl({
      costs: [
        { path: "/v1", cost: 2 },
        { method: "POST", path: "/v1/search", cost: 5 },
      ],
    }),
    field: "RATE_LIMIT.costs[1]",
    quotes:
      'POST "/v1/search" never applies, every such request already matches RATE_LIMIT.costs[0] (any method "/v1")',
  },
  {
    what: "duplicate cost rule",
    rateLimit: rl({
      costs: [
        { method: "GET", path: "/a", cost: 2 },
        { method: "get", path: "/a", cost: 3 },
      ],
    }),
    field: "RATE_LIMIT.costs[1]",
    quotes: 'GET "/a" never applies',
  },
  // key
  { what: "key a string", rateLimit: rl({ key: "x-api-key" }), field: "RATE_LIMIT.key", quotes: 'got "x-api-key"' },
  {
    what: "key.header empty",
    rateLimit: rl({ key: { header: "" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got ""',
  },
  {
    what: "key.header true",
    rateLimit: rl({ key: { header: true } }),
    field: "RATE_LIMIT.key.header",
    quotes: "got true",
  },
  {
    what: "key.header null",
    rateLimit: rl({ key: { header: null } }),
    field: "RATE_LIMIT.key.header",
    quotes: "got null",
  },
  {
    what: "key.header with a space",
    rateLimit: rl({ key: { header: "x api key" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "x api key"',
  },
  {
    what: "key.header with a colon",
    rateLimit: rl({ key: { header: "X-Api-Key:" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "X-Api-Key:"',
  },
  {
    what: "key.header not ASCII",
    rateLimit: rl({ key: { header: "clé" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "clé"',
  },
  {
    what: "key.header authorization (lower case)",
    rateLimit: rl({ key: { header: "authorization" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "authorization"',
  },
  {
    what: "key.header authorization",
    rateLimit: rl({ key: { header: "Authorization" } }),
    field: "RATE_LIMIT.key.header",
    quotes: 'got "Authorization"',
  },
  {
    what: "key.bearer a string",
    rateLimit: rl({ key: { bearer: "no" } }),
    field: "RATE_LIMIT.key.bearer",
    quotes: 'got "no"',
  },
  { what: "key.bearer 0", rateLimit: rl({ key: { bearer: 0 } }), field: "RATE_LIMIT.key.bearer", quotes: "got 0" },
  {
    what: "key.pattern not a regular expression",
    rateLimit: rl({ key: { pattern: "live_[a-z" } }),
    field: "RATE_LIMIT.key.pattern",
    quotes: 'got "live_[a-z"',
  },
  {
    what: "key.pattern with an unterminated group",
    rateLimit: rl({ key: { pattern: "(live_" } }),
    field: "RATE_LIMIT.key.pattern",
    quotes: 'got "(live_"',
  },
  {
    what: "key.pattern empty",
    rateLimit: rl({ key: { pattern: "" } }),
    field: "RATE_LIMIT.key.pattern",
    quotes: 'got ""',
  },
  { what: "key.query empty", rateLimit: rl({ key: { query: "" } }), field: "RATE_LIMIT.key.query", quotes: 'got ""' },
  { what: "key.query a number", rateLimit: rl({ key: { query: 1 } }), field: "RATE_LIMIT.key.query", quotes: "got 1" },
  {
    what: "key.query true",
    rateLimit: rl({ key: { query: true } }),
    field: "RATE_LIMIT.key.query",
    quotes: "got true",
  },
  {
    what: "key.max_length 0",
    rateLimit: rl({ key: { max_length: 0 } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: "got 0",
  },
  {
    what: "key.max_length too big",
    rateLimit: rl({ key: { max_length: 4097 } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: "got 4097",
  },
  {
    what: "key.max_length fractional",
    rateLimit: rl({ key: { max_length: 10.5 } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: "got 10.5",
  },
  {
    what: "key.max_length a string",
    rateLimit: rl({ key: { max_length: "256" } }),
    field: "RATE_LIMIT.key.max_length",
    quotes: 'got "256"',
  },
  {
    what: "every key source off",
    rateLimit: rl({ key: { header: false, bearer: false } }),
    field: "RATE_LIMIT.key",
    quotes: "every key source is off",
  },
  {
    what: "unknown key field",
    rateLimit: rl({ key: { cookie: "k" } }),
    field: "RATE_LIMIT.key.cookie",
    quotes: "unknown setting",
  },
  // failure_mode, shadow, origin_timeout
  ...["fail-open", "OPEN", "sometimes", "", true, 0, null].map(
    (v): BadCase => ({
      what: `failure_mode ${JSON.stringify(v)}`,
      rateLimit: rl({ failure_mode: v }),
      field: "RATE_LIMIT.failure_mode",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  {
    what: "fallback_share without failure_mode local",
    rateLimit: rl({ failure_mode: "open", fallback_share: 0.5 }),
    field: "RATE_LIMIT.fallback_share",
    quotes: 'only with failure_mode = "local" (failure_mode is "open")',
  },
  ...[-0.1, 1.5, "0.5", Number.NaN, null, true].map(
    (v): BadCase => ({
      what: `fallback_share ${String(v)}`,
      rateLimit: rl({ failure_mode: "local", fallback_share: v }),
      field: "RATE_LIMIT.fallback_share",
      quotes: "expected a number from 0 to 1",
    }),
  ),
  ...["EU", "de", "", "eu ", true, null, 1].map(
    (v): BadCase => ({
      what: `jurisdiction ${JSON.stringify(v)}`,
      rateLimit: rl({ jurisdiction: v }),
      field: "RATE_LIMIT.jurisdiction",
      quotes: 'expected one of "eu", "fedramp", "fedramp-high", "us"',
    }),
  ),
  ...["true", 1, null, "yes"].map(
    (v): BadCase => ({
      what: `shadow ${JSON.stringify(v)}`,
      rateLimit: rl({ shadow: v }),
      field: "RATE_LIMIT.shadow",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  ...["30 s", "0ms", "forever", "", 0, -1, 1.5, "367d", true, null].map(
    (v): BadCase => ({
      what: `origin_timeout ${JSON.stringify(v)}`,
      rateLimit: rl({ origin_timeout: v }),
      field: "RATE_LIMIT.origin_timeout",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  {
    what: "origin_timeout beyond a timer's range",
    rateLimit: rl({ origin_timeout: "25d" }),
    field: "RATE_LIMIT.origin_timeout",
    quotes: `at most ${MAX_ORIGIN_TIMEOUT_MS} ms`,
  },
  {
    what: "origin_timeout one ms beyond a timer's range",
    rateLimit: rl({ origin_timeout: MAX_ORIGIN_TIMEOUT_MS + 1 }),
    field: "RATE_LIMIT.origin_timeout",
    quotes: `got ${MAX_ORIGIN_TIMEOUT_MS + 1}`,
  },
  { what: "admin not a table", rateLimit: rl({ admin: "/x/" }), field: "RATE_LIMIT.admin", quotes: 'got "/x/"' },
  {
    what: "admin with an unknown setting",
    rateLimit: rl({ admin: { token: "t" } }),
    field: "RATE_LIMIT.admin.token",
    quotes: "expected one of path",
  },
  ...["", "__limiter/", "/__limiter", "/", "/a b/", "/x/?q=1/", "//"].map((path) => ({
    what: `admin.path ${JSON.stringify(path)}`,
    rateLimit: rl({ admin: { path } }),
    field: "RATE_LIMIT.admin.path",
    quotes: `got ${JSON.stringify(path)}`,
  })),
  // paths, and cost rules written otherwise than normalised
  ...["REJECT", "decode", true, null].map(
    (v): BadCase => ({
      what: `paths.escaped_slashes ${JSON.stringify(v)}`,
      rateLimit: rl({ paths: { escaped_slashes: v } }),
      field: "RATE_LIMIT.paths.escaped_slashes",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  { what: "paths not a table", rateLimit: rl({ paths: "reject" }), field: "RATE_LIMIT.paths", quotes: 'got "reject"' },
  ...[
    ["/%76%31/search", 'write it as "/v1/search"'],
    ["/v1/../search", 'write it as "/search"'],
    ["//v1", 'write it as "/v1"'],
    ["/a/..;/b", "write it as a path without dot segments"],
    ["/a;b", 'write it as "/a"'],
  ].map(
    ([path, quotes]): BadCase => ({
      what: `cost path ${path}`,
      rateLimit: rl({ costs: [{ path, cost: 1 }] }),
      field: "RATE_LIMIT.costs[0].path",
      quotes: quotes as string,
    }),
  ),
  // headers, refund
  ...["draft-5", "DRAFT-11", "", "x-ratelimit", true, null, 7].map(
    (v): BadCase => ({
      what: `headers ${JSON.stringify(v)}`,
      rateLimit: rl({ headers: v }),
      field: "RATE_LIMIT.headers",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
  { what: "refund not a table", rateLimit: rl({ refund: [500] }), field: "RATE_LIMIT.refund", quotes: "got an array" },
  {
    what: "refund without status",
    rateLimit: rl({ refund: {} }),
    field: "RATE_LIMIT.refund.status",
    quotes: "required",
  },
  {
    what: "refund with an unknown setting",
    rateLimit: rl({ refund: { status: [500], methods: ["GET"] } }),
    field: "RATE_LIMIT.refund.methods",
    quotes: "expected one of status",
  },
  ...[199, 600, 500.5, "500", null].map(
    (v): BadCase => ({
      what: `refund.status ${JSON.stringify(v)}`,
      rateLimit: rl({ refund: { status: [502, v] } }),
      field: "RATE_LIMIT.refund.status[1]",
      quotes: `got ${typeof v === "string" ? JSON.stringify(v) : String(v)}`,
    }),
  ),
];

describe("parseConfig: every error names its field and the bad value", () => {
  it.each(BAD)("$what → $field", (c) => {
    const vars = {
      ORIGIN: "origin" in c ? c.origin : ORIGIN,
      RATE_LIMIT: "rateLimit" in c ? c.rateLimit : MINIMUM,
    };
    const e = configError(() => parseConfig(vars));
    expect(e.name).toBe("ConfigError");
    expect(e.message.startsWith(`${c.field}: `), e.message).toBe(true);
    expect(e.message).toContain(c.quotes);
  });

  it("never echoes ORIGIN's password", () => {
    const e = configError(() => parse(MINIMUM, "https://admin:hunter2@x.com"));
    expect(e.message).not.toMatch(/admin|hunter2/);
  });

  it("gives the same error for the JSON-string form", () => {
    let checked = 0;
    for (const c of BAD) {
      if (!("rateLimit" in c) || typeof c.rateLimit !== "object" || c.rateLimit === null) continue;
      const json = JSON.stringify(c.rateLimit);
      // NaN and Infinity do not survive JSON.
      if (!isDeepStrictEqual(JSON.parse(json), c.rateLimit)) continue;
      checked++;
      const fromObject = configError(() => parse(c.rateLimit)).message;
      expect(configError(() => parse(json)).message, c.what).toBe(fromObject);
    }
    expect(checked).toBeGreaterThan(100);
  });
});

describe("planForKey", () => {
  const plans = [
    { name: "live", key_prefix: "live_", unlimited: true },
    { name: "test_long", key_prefix: "test_long_", limits: [{ limit: 1, window: "1s" }] },
    { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }] },
  ];
  // Parsed inside each test, never while the file is collected: code run then counts as run by every test, and a
  // mutation run (npm run test:mutation) would run every test for each of its mutants.
  const withDefault = () => parse({ ...MINIMUM, plans });
  const withoutDefault = () => parse({ plans });

  it.each([
    ["live_abc", "live"],
    ["live_", "live"],
    ["test_long_abc", "test_long"],
    ["test_longer", "test"],
    ["test_abc", "test"],
    ["test", "default"],
    ["TEST_abc", "default"],
    ["xlive_abc", "default"],
    ["abc", "default"],
  ])("key %j gets plan %j (first matching prefix, else the default)", (key, name) => {
    expect(planForKey(withDefault(), key)?.name).toBe(name);
  });

  it.each([
    ["live_abc", "live"],
    ["test_long_x", "test_long"],
    ["test_x", "test"],
    ["other", null],
    ["test", null],
  ])("without default limits, key %j gets %j", (key, name) => {
    expect(planForKey(withoutDefault(), key)?.name ?? null).toBe(name);
  });

  it("returns the plan objects themselves: unlimited has no limits and no policy", () => {
    const config = withDefault();
    expect(planForKey(config, "live_1")).toBe(config.plans[0]);
    expect(planForKey(config, "live_1")).toMatchObject({ limits: null, leaseMs: 0 });
    expect(planForKey(config, "zzz")).toBe(config.defaultPlan);
  });
});

describe("costFor", () => {
  // Parsed inside each test (see planForKey).
  const config = () =>
    parse(
      rl({
        costs: [
          { path: "/health", cost: 0 },
          { method: "post", path: "/v1/search", cost: 5 },
          { path: "/v1/search", cost: 2 },
          { method: "GET", path: "/v1", cost: 3 },
        ],
      }),
    );

  it.each([
    ["GET", "/health", 0],
    ["POST", "/health", 0],
    ["GET", "/healthz", 0], // a prefix, not a segment
    ["GET", "/health/deep", 0],
    ["POST", "/v1/search", 5],
    ["POST", "/v1/search/more", 5],
    ["GET", "/v1/search", 2],
    ["PUT", "/v1/search", 2],
    ["GET", "/v1/users", 3],
    ["GET", "/v1", 3],
    ["POST", "/v1/users", 1],
    ["GET", "/v2", 1],
    ["GET", "/", 1],
    ["DELETE", "/V1/search", 1], // paths are case-sensitive
  ])("%s %s costs %i (first matching rule, else 1)", (method, path, cost) => {
    expect(costFor(config(), method, path)).toBe(cost);
  });

  it("costs 1 without rules", () => {
    expect(costFor(parse(MINIMUM), "POST", "/anything")).toBe(1);
  });

  it("a catch-all last rule sets the default", () => {
    const c = parse(
      rl({
        costs: [
          { path: "/cheap", cost: 1 },
          { path: "/", cost: 4 },
        ],
      }),
    );
    expect([costFor(c, "GET", "/cheap"), costFor(c, "GET", "/x")]).toEqual([1, 4]);
  });
});

/** Windows the property draws from, with their milliseconds, default names and `w`. */
const WINDOWS: readonly [window: string | number, ms: number, name: string, w: number][] = [
  ["250ms", 250, "per-250ms", 1],
  ["1s", 1_000, "per-second", 1],
  ["10s", 10_000, "per-10s", 10],
  ["1m", 60_000, "per-minute", 60],
  [90_000, 90_000, "per-90s", 90],
  ["1h", 3_600_000, "per-hour", 3600],
  ["1d", 86_400_000, "per-day", 86400],
  [1500, 1_500, "per-1500ms", 2],
];

describe("properties", () => {
  it("random valid limit sets round-trip into limits and one policy item each", () => {
    const limitsArb = fc.uniqueArray(
      fc.record({ limit: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), window: fc.constantFrom(...WINDOWS) }),
      { minLength: 1, maxLength: 4, selector: (l) => l.window[1] },
    );
    fc.assert(
      fc.property(limitsArb, fc.boolean(), (drawn, asJson) => {
        const limits = drawn.map((l) => ({ limit: l.limit, window: l.window[0] }));
        const raw = { limits };
        const plan = parse(asJson ? JSON.stringify(raw) : raw).defaultPlan as Plan;
        const ticks = normalizeLimits(drawn.map((l) => ({ limit: l.limit, windowMs: l.window[1] })));
        expect(plan.limits).toEqual(
          drawn.map((l, i) => ({
            limit: l.limit,
            windowMs: l.window[1],
            tickMs: ticks[i]?.tickMs,
            name: l.window[2],
          })),
        );
        // Whatever the limits, default ticks keep a key within its bound.
        expect(ringLayout(ticks).reduce((n, r) => n + r.capacity, 0)).toBeLessThanOrEqual(MAX_KEY_SLOTS);
        const items = policyHeader(plan).split(", ");
        expect(items).toEqual(drawn.map((l) => `"${l.window[2]}";q=${l.limit};w=${l.window[3]}`));
      }),
    );
  });

  /** Where junk goes: a path into the vars, from a valid base config. */
  const PATHS: readonly (readonly (string | number)[])[] = [
    ["ORIGIN"],
    ["RATE_LIMIT"],
    ["RATE_LIMIT", "limits"],
    ["RATE_LIMIT", "limits", 0],
    ["RATE_LIMIT", "limits", 0, "limit"],
    ["RATE_LIMIT", "limits", 0, "window"],
    ["RATE_LIMIT", "limits", 0, "name"],
    ["RATE_LIMIT", "limits", 2],
    ["RATE_LIMIT", "plans"],
    ["RATE_LIMIT", "plans", 0],
    ["RATE_LIMIT", "plans", 0, "name"],
    ["RATE_LIMIT", "plans", 0, "key_prefix"],
    ["RATE_LIMIT", "plans", 0, "limits"],
    ["RATE_LIMIT", "plans", 0, "unlimited"],
    ["RATE_LIMIT", "plans", 1, "unlimited"],
    ["RATE_LIMIT", "anonymous"],
    ["RATE_LIMIT", "anonymous", "limits"],
    ["RATE_LIMIT", "costs"],
    ["RATE_LIMIT", "costs", 0],
    ["RATE_LIMIT", "costs", 0, "method"],
    ["RATE_LIMIT", "costs", 0, "path"],
    ["RATE_LIMIT", "costs", 0, "cost"],
    ["RATE_LIMIT", "key"],
    ["RATE_LIMIT", "key", "header"],
    ["RATE_LIMIT", "key", "bearer"],
    ["RATE_LIMIT", "key", "query"],
    ["RATE_LIMIT", "key", "max_length"],
    ["RATE_LIMIT", "failure_mode"],
    ["RATE_LIMIT", "fallback_share"],
    ["RATE_LIMIT", "jurisdiction"],
    ["RATE_LIMIT", "shadow"],
    ["RATE_LIMIT", "origin_timeout"],
    ["RATE_LIMIT", "paths"],
    ["RATE_LIMIT", "extra"],
  ];
  const base = () => ({
    ORIGIN,
    RATE_LIMIT: {
      limits: [
        { limit: 100, window: "1s" },
        { limit: 1000, window: "1m" },
      ],
      plans: [
        { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }] },
        { name: "live", key_prefix: "live_", unlimited: true },
      ],
      anonymous: { limits: [{ limit: 5, window: "1m" }] },
      costs: [{ method: "POST", path: "/v1/search", cost: 5 }],
      key: { header: "x-api-key", bearer: true, query: "api_key", max_length: 128 },
      failure_mode: "closed",
      shadow: false,
      origin_timeout: "30s",
    },
  });
  // Built by the first test that needs it, not while the file is collected: building it takes over a second, and a
  // mutation run (npm run test:mutation) loads this file once per mutant.
  let junkArb: fc.Arbitrary<unknown> | undefined;
  const junk = () =>
    (junkArb ??= fc.oneof(
      fc.anything({
        withBigInt: true,
        withBoxedValues: true,
        withDate: true,
        withMap: true,
        withSet: true,
        withNullPrototype: true,
        withObjectString: true,
        withSparseArray: true,
        withTypedArray: true,
        withUnicodeString: true,
      }),
      fc.json(),
      fc.constantFrom<unknown>(
        Symbol("junk"),
        () => 1,
        10n,
        Number.NaN,
        Number.NEGATIVE_INFINITY,
        -0,
        "",
        " ",
        "1s",
        "open",
        "/",
        "__proto__",
        [],
        {},
        Object.create(null),
      ),
    ));

  it("the valid base parses", () => {
    expect(() => parseConfig(base())).not.toThrow();
  });

  const isObject = (v: unknown) => typeof v === "object" && v !== null && !Array.isArray(v);
  const nonEmptyArray = (v: unknown) => Array.isArray(v) && v.length > 0;
  const durationOk = (v: unknown, max = Number.POSITIVE_INFINITY) => {
    try {
      return parseDuration(v, "x") <= max;
    } catch {
      return false;
    }
  };
  const optional = (ok: (v: unknown) => boolean) => (v: unknown) => v === undefined || ok(v);
  const printable = (v: unknown) => typeof v === "string" && /^[\x20-\x7e]+$/.test(v);
  /**
   * What each path accepts: `exact` leaves are accepted iff the predicate holds (junk that parses
   * is a valid value, never silently taken); for the containers, what any accepted value must be.
   */
  const ACCEPTS: Record<string, { exact: boolean; ok: (v: unknown) => boolean }> = {
    ORIGIN: { exact: false, ok: (v) => typeof v === "string" },
    RATE_LIMIT: { exact: false, ok: (v) => isObject(v) || typeof v === "string" },
    // Left out, the plans alone apply (the base has plans).
    "RATE_LIMIT.limits": { exact: false, ok: optional(nonEmptyArray) },
    "RATE_LIMIT.limits.0": { exact: false, ok: isObject },
    "RATE_LIMIT.limits.0.limit": { exact: true, ok: (v) => Number.isSafeInteger(v) && (v as number) >= 1 },
    "RATE_LIMIT.limits.0.window": { exact: true, ok: (v) => durationOk(v) },
    // limits[1] is named per-minute by default: the same name is a duplicate.
    "RATE_LIMIT.limits.0.name": { exact: true, ok: optional((v) => printable(v) && v !== "per-minute") },
    "RATE_LIMIT.limits.2": { exact: false, ok: isObject },
    "RATE_LIMIT.plans": { exact: false, ok: optional(Array.isArray) },
    "RATE_LIMIT.plans.0": { exact: false, ok: isObject },
    "RATE_LIMIT.plans.0.name": {
      exact: true,
      ok: (v) => typeof v === "string" && /^[A-Za-z0-9_.-]+$/.test(v) && v !== "live",
    },
    // Before the "live_" plan: a prefix of "live_" would shadow it.
    "RATE_LIMIT.plans.0.key_prefix": {
      exact: true,
      ok: (v) => typeof v === "string" && KEY_CHARS.test(v) && v.length <= 128 && !"live_".startsWith(v),
    },
    "RATE_LIMIT.plans.0.limits": { exact: false, ok: nonEmptyArray },
    "RATE_LIMIT.plans.0.unlimited": { exact: true, ok: (v) => v === undefined || v === false },
    "RATE_LIMIT.plans.1.unlimited": { exact: true, ok: (v) => v === true },
    "RATE_LIMIT.anonymous": { exact: false, ok: optional((v) => isObject(v) && nonEmptyArray((v as Obj).limits)) },
    "RATE_LIMIT.anonymous.limits": { exact: false, ok: nonEmptyArray },
    "RATE_LIMIT.costs": { exact: false, ok: optional(Array.isArray) },
    "RATE_LIMIT.costs.0": { exact: false, ok: isObject },
    "RATE_LIMIT.costs.0.method": {
      exact: true,
      ok: optional((v) => typeof v === "string" && /^[A-Z]+$/.test(v.toUpperCase())),
    },
    "RATE_LIMIT.costs.0.path": {
      exact: true,
      ok: (v) => {
        if (typeof v !== "string" || !v.startsWith("/") || /[^\x21-\x7e]|["#<>?`{}\\]/.test(v)) return false;
        try {
          return normalizePath(new URL(`http://x${v}`).pathname, "keep").match === v;
        } catch {
          return false;
        }
      },
    },
    "RATE_LIMIT.costs.0.cost": { exact: true, ok: (v) => Number.isSafeInteger(v) && (v as number) >= 0 },
    "RATE_LIMIT.key": { exact: false, ok: optional(isObject) },
    "RATE_LIMIT.key.header": {
      exact: true,
      ok: optional(
        (v) =>
          v === false ||
          (typeof v === "string" &&
            /^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(v.toLowerCase()) &&
            v.toLowerCase() !== "authorization"),
      ),
    },
    "RATE_LIMIT.key.bearer": { exact: true, ok: optional((v) => typeof v === "boolean") },
    "RATE_LIMIT.key.query": { exact: true, ok: optional((v) => v === false || (typeof v === "string" && v !== "")) },
    // At least the longest plan prefix ("test_", "live_").
    "RATE_LIMIT.key.max_length": {
      exact: true,
      ok: optional((v) => Number.isSafeInteger(v) && (v as number) >= 5 && (v as number) <= 4096),
    },
    "RATE_LIMIT.failure_mode": { exact: true, ok: optional((v) => v === "open" || v === "closed" || v === "local") },
    // failure_mode is "closed" in the base: no share goes with it.
    "RATE_LIMIT.fallback_share": { exact: true, ok: optional(() => false) },
    "RATE_LIMIT.jurisdiction": {
      exact: true,
      ok: optional((v) => v === "eu" || v === "fedramp" || v === "fedramp-high" || v === "us"),
    },
    "RATE_LIMIT.shadow": { exact: true, ok: optional((v) => typeof v === "boolean") },
    "RATE_LIMIT.origin_timeout": { exact: true, ok: optional((v) => durationOk(v, MAX_ORIGIN_TIMEOUT_MS)) },
    "RATE_LIMIT.paths": { exact: false, ok: optional(isObject) },
    "RATE_LIMIT.extra": { exact: true, ok: () => false },
  };

  it("every junk path has its judge", () => {
    expect(Object.keys(ACCEPTS).sort()).toEqual(PATHS.map((p) => p.join(".")).sort());
  });

  it.each(PATHS.map((p) => [p.join("."), p] as const))(
    "junk at %s is accepted only when it is a valid value, else a ConfigError naming the field",
    (name, path) => {
      const judge = ACCEPTS[name] as (typeof ACCEPTS)[string];
      fc.assert(
        fc.property(junk(), (value) => {
          const vars: Record<string | number, unknown> = base();
          let at = vars;
          for (const k of path.slice(0, -1)) at = at[k] as Record<string | number, unknown>;
          at[path[path.length - 1] as string | number] = value;
          let accepted = true;
          try {
            parseConfig(vars);
          } catch (e) {
            expect(e).toBeInstanceOf(ConfigError);
            expect((e as Error).message).toMatch(/^(ORIGIN|RATE_LIMIT)[.[:]/);
            accepted = false;
          }
          if (judge.exact) expect(accepted, fc.stringify(value)).toBe(judge.ok(value));
          else if (accepted) expect(judge.ok(value), fc.stringify(value)).toBe(true);
        }),
      );
    },
  );
});

describe("parseConfig: settings at their edges", () => {
  it('failure_mode "local" with its fallback_share (0 and 1 included), and every jurisdiction the runtime knows', () => {
    for (const share of [0, 0.25, 1]) {
      const c = parseConfig({ ORIGIN, RATE_LIMIT: rl({ failure_mode: "local", fallback_share: share }) });
      expect([c.failureMode, c.fallbackShare]).toEqual(["local", share]);
    }
    expect(parseConfig({ ORIGIN, RATE_LIMIT: rl({ failure_mode: "local" }) }).fallbackShare).toBe(1);
    for (const j of ["eu", "fedramp", "fedramp-high", "us"]) {
      expect(parseConfig({ ORIGIN, RATE_LIMIT: rl({ jurisdiction: j }) }).jurisdiction).toBe(j);
    }
    expect(parseLimiterConfig({ limits: [{ limit: 1, window: "1s" }], jurisdiction: "eu" }, "x").jurisdiction).toBe(
      "eu",
    );
  });

  it("refuses an ORIGIN with a user name alone, without echoing it", () => {
    const e = configError(() => parse(MINIMUM, "https://someone@x.com/api"));
    expect(e.message).toBe(
      'ORIGIN: must not carry a user name or password (fetch refuses such URLs), got "https://***@x.com/api"',
    );
  });

  it("refuses an admin.path that does not start with /", () => {
    expect(configError(() => parse({ ...MINIMUM, admin: { path: "ops/limiter/" } })).message).toMatch(
      /^RATE_LIMIT\.admin\.path: expected a path prefix like "\/__limiter\/".*got "ops\/limiter\/"$/,
    );
  });

  it("leases: true is the defaults, false turns them off (no plan gets a lease lifetime)", () => {
    expect(parse({ ...MINIMUM, leases: true }).leases).toEqual(DEFAULTS.leases);
    const off = parse({ ...MINIMUM, leases: false });
    expect(off.leases).toEqual({ ...DEFAULTS.leases, enabled: false });
    expect(off.defaultPlan?.leaseMs).toBe(0);
    expect(parse({ ...MINIMUM, leases: { enabled: false } }).defaultPlan?.leaseMs).toBe(0);
  });

  it("leases: max_units from 1, max_lifetime defaulted on its own, enabled named in its error", () => {
    expect(parse({ ...MINIMUM, leases: { max_units: 1 } }).leases).toEqual({
      enabled: true,
      maxUnits: 1,
      maxLifetimeMs: 30_000,
    });
    expect(configError(() => parse({ ...MINIMUM, leases: { enabled: "yes" } })).message).toBe(
      'RATE_LIMIT.leases.enabled: expected true or false, got "yes"',
    );
  });

  it("a plan with neither limits nor unlimited says how to fix it", () => {
    expect(configError(() => parse(rl({ plans: [{ name: "p", key_prefix: "p_" }] }))).message).toBe(
      "RATE_LIMIT.plans[0].limits: required (or set unlimited = true)",
    );
  });

  it("accepts a tick of exactly the window", () => {
    expect(parse({ limits: [{ limit: 5, window: "1s", tick: "1s" }] }).defaultPlan?.limits).toEqual([
      { limit: 5, windowMs: 1000, tickMs: 1000, name: "per-second" },
    ]);
  });

  it("names both rules when a rule for any method can never apply", () => {
    expect(
      configError(() =>
        parse(
          rl({
            costs: [
              { path: "/", cost: 2 },
              { path: "/x", cost: 3 },
            ],
          }),
        ),
      ).message,
    ).toBe(
      'RATE_LIMIT.costs[1]: any method "/x" never applies, every such request already matches RATE_LIMIT.costs[0] (any method "/") and the first match wins; put the more specific rule first',
    );
  });

  it("lists the settings it knows in an unknown setting's error", () => {
    expect(configError(() => parse({ ...MINIMUM, admin: { paths: "/x/" } })).message).toBe(
      "RATE_LIMIT.admin.paths: unknown setting; expected one of path",
    );
    expect(configError(() => parse({ ...MINIMUM, leases: { units: 5 } })).message).toBe(
      "RATE_LIMIT.leases.units: unknown setting; expected one of enabled, max_units, max_lifetime",
    );
  });

  it("the library takes RATE_LIMIT's shape without the proxy's settings, errors under its own root", () => {
    const lib = parseLimiterConfig({ limits: [{ limit: 5, window: "1s" }], headers: "legacy" }, "createLimiter");
    expect(lib.headers).toBe("legacy");
    expect(lib.defaultPlan?.limits?.[0]).toMatchObject({ limit: 5, windowMs: 1000, name: "per-second" });
    expect("origin" in lib).toBe(false);
    for (const field of ["origin_timeout", "admin", "refund"]) {
      expect(configError(() => parseLimiterConfig({ ...MINIMUM, [field]: {} }, "createLimiter")).message).toBe(
        `createLimiter.${field}: only the proxy reads this setting (RATE_LIMIT in its wrangler.toml)`,
      );
    }
    expect(configError(() => parseLimiterConfig({ plans: [] }, "createLimiter")).message).toBe(
      "createLimiter.limits: required (or give createLimiter.plans); without limits nothing would be limited",
    );
    expect(configError(() => parseLimiterConfig({ ...MINIMUM, origin: "x" }, "createLimiter")).message).toMatch(
      /^createLimiter\.origin: unknown setting; expected one of limits, routes, plans, /,
    );
  });

  it("an unknown setting's error lists every valid one: a plan's limits name a quota's fields, createLimiter its own", () => {
    const planLimit = "unknown setting; expected one of limit, window, tick, period, time_zone, name";
    expect(configError(() => parse({ limits: [{ limit: 5, perod: "day" }] })).message).toBe(
      `RATE_LIMIT.limits[0].perod: ${planLimit}`,
    );
    expect(
      configError(() =>
        parse({ ...MINIMUM, plans: [{ name: "p", key_prefix: "p_", limits: [{ limit: 5, windw: "1s" }] }] }),
      ).message,
    ).toBe(`RATE_LIMIT.plans[0].limits[0].windw: ${planLimit}`);
    expect(configError(() => parse({ ...MINIMUM, anonymous: { limits: [{ limit: 5, zone: "UTC" }] } })).message).toBe(
      `RATE_LIMIT.anonymous.limits[0].zone: ${planLimit}`,
    );
    // Beside a quota, a sliding limit's place is still its own.
    expect(
      configError(() =>
        parse({
          limits: [
            { limit: 5, period: "day" },
            { limit: 5, window: "1s", tik: "1s" },
          ],
        }),
      ).message,
    ).toBe(`RATE_LIMIT.limits[1].tik: ${planLimit}`);
    // Where no quota may stand (a route's limits, an address's), the hint names none of its fields.
    expect(
      configError(() => parse({ ...MINIMUM, ip: { limits: [{ limit: 5, window: "1s", nam: "x" }] } })).message,
    ).toBe("RATE_LIMIT.ip.limits[0].nam: unknown setting; expected one of limit, window, tick, name");
    // The library's own options (read by createLimiter itself) are listed, and passed over here.
    const lib = configError(() =>
      parseLimiterConfig({ ...MINIMUM, nmae: "api" }, "createLimiter", ["name", "binding", "clock"]),
    ).message;
    expect(lib).toBe(
      `createLimiter.nmae: unknown setting; expected one of ${[...LIMITER_FIELDS, "name", "binding", "clock"].join(", ")}`,
    );
    expect(parseLimiterConfig({ ...MINIMUM, name: "api" }, "createLimiter", ["name"]).defaultPlan?.name).toBe(
      "default",
    );
  });

  it("paths: the default is reject, also for an empty table; refund takes 200 and 599", () => {
    expect(parse(MINIMUM).paths).toEqual({ escapedSlashes: "reject" });
    expect(parse({ ...MINIMUM, paths: {} }).paths).toEqual({ escapedSlashes: "reject" });
    expect(parse({ ...MINIMUM, paths: { escaped_slashes: "keep" } }).paths).toEqual({ escapedSlashes: "keep" });
    expect(configError(() => parse({ ...MINIMUM, paths: { escaped_slashes: "x" } })).message).toBe(
      'RATE_LIMIT.paths.escaped_slashes: expected one of "reject", "unescape", "keep", got "x"',
    );
    expect(configError(() => parse({ ...MINIMUM, headers: "x" })).message).toBe(
      'RATE_LIMIT.headers: expected one of "draft-11", "draft-8", "draft-7", "draft-6", "legacy", "none", got "x"',
    );
    expect([...parse({ ...MINIMUM, refund: { status: [200, 599] } }).refundStatuses]).toEqual([200, 599]);
  });

  it("refuses a fractional leases.max_units", () => {
    expect(configError(() => parse({ ...MINIMUM, leases: { max_units: 1.5 } })).message).toBe(
      "RATE_LIMIT.leases.max_units: expected a positive integer, got 1.5",
    );
  });
});

describe('routes (docs/configuration.md, "Per-route budgets")', () => {
  const ROUTES = [
    { name: "search", method: "post", path: "/v1/search", limits: [{ limit: 5, window: "1m" }] },
    {
      name: "export",
      path: "/v1/export/",
      limits: [
        { limit: 2, window: "1h" },
        { limit: 10, window: "1d" },
      ],
    },
  ];
  const withRoutes = (routes: unknown, more: object = {}) =>
    parse({ limits: [{ limit: 1000, window: "1m" }], routes, ...more });

  it("parses the issue's shape: a route's limits are named after it, and shown after the plan's", () => {
    const config = withRoutes(ROUTES);
    const [search, exp] = config.defaultPlan?.routes ?? [];
    expect(search).toMatchObject({
      name: "search",
      method: "POST",
      pathPrefix: "/v1/search",
      limits: [{ limit: 5, windowMs: 60_000, tickMs: 1, name: "search" }],
    });
    expect(exp?.limits.map((l) => l.name)).toEqual(["export-per-hour", "export-per-day"]);
    expect(exp?.shown.map((l) => l.name)).toEqual(["per-minute", "export-per-hour", "export-per-day"]);
    expect(routeFor(config.defaultPlan as Plan, "POST", "/v1/search/deep")).toBe(search);
    expect(routeFor(config.defaultPlan as Plan, "GET", "/v1/search")).toBeNull();
    expect(routeFor(config.defaultPlan as Plan, "GET", "/v1/export/x")).toBe(exp);
    expect(routeFor(config.defaultPlan as Plan, "GET", "/v1/export")).toBeNull();
  });

  it("gives plans the top-level routes unless they have their own; unlimited plans have none", () => {
    const config = withRoutes(ROUTES, {
      plans: [
        { name: "test", key_prefix: "test_", limits: [{ limit: 10, window: "1m" }], routes: [ROUTES[0]] },
        { name: "pro", key_prefix: "pro_", limits: [{ limit: 10, window: "1s" }] },
        { name: "free", key_prefix: "free_", unlimited: true },
      ],
      anonymous: { limits: [{ limit: 5, window: "1m" }] },
    });
    expect(config.plans.map((p) => p.routes.map((r) => r.name))).toEqual([["search"], ["search", "export"], []]);
    expect(config.anonymous?.routes.map((r) => r.name)).toEqual(["search", "export"]);
  });

  it("fails loudly, naming the field", () => {
    const cases: [unknown, object, string][] = [
      ["x", {}, 'RATE_LIMIT.routes: expected an array, got "x"'],
      [[{ path: "/a", limits: [{ limit: 1, window: "1s" }] }], {}, "RATE_LIMIT.routes[0].name: required"],
      [
        [{ name: "Search", path: "/a", limits: [{ limit: 1, window: "1s" }] }],
        {},
        'RATE_LIMIT.routes[0].name: use up to 64 lower-case letters, digits, "_", "-" or ".", starting with a letter, got "Search"',
      ],
      [[{ name: "a", limits: [{ limit: 1, window: "1s" }] }], {}, "RATE_LIMIT.routes[0].path: required"],
      [[{ name: "a", path: "/a" }], {}, "RATE_LIMIT.routes[0].limits: required"],
      [[{ name: "a", path: "/a", limits: [] }], {}, "RATE_LIMIT.routes[0].limits: expected at least one limit"],
      [
        [{ name: "a", path: "/a", limits: [{ limit: 0, window: "1s" }] }],
        {},
        "RATE_LIMIT.routes[0].limits[0].limit: expected a positive integer, got 0",
      ],
      [
        [{ name: "a", path: "/a", limits: [{ limit: 1, window: "1s" }], cost: 2 }],
        {},
        "RATE_LIMIT.routes[0].cost: unknown setting; expected one of name, method, path, limits",
      ],
      [
        [
          { name: "a", path: "/a", limits: [{ limit: 1, window: "1s" }] },
          { name: "a", path: "/b", limits: [{ limit: 1, window: "1s" }] },
        ],
        {},
        'RATE_LIMIT.routes[1].name: "a" is already used by RATE_LIMIT.routes[0]',
      ],
      [
        [
          { name: "v1", path: "/v1/", limits: [{ limit: 1, window: "1s" }] },
          { name: "search", method: "POST", path: "/v1/search", limits: [{ limit: 1, window: "1s" }] },
        ],
        {},
        'RATE_LIMIT.routes[1]: POST "/v1/search" never applies, every such request already matches RATE_LIMIT.routes[0] (any method "/v1/") and the first match wins; put the more specific rule first',
      ],
      [
        [{ name: "a", path: "/a", limits: [{ limit: 1, window: "1m", name: "per-minute" }] }],
        {},
        'RATE_LIMIT.routes[0].limits[0].name: "per-minute" is also a limit of plan "default"; the headers show both, so give the route\'s limit another name',
      ],
      [
        [{ name: "a", path: "/%7e", limits: [{ limit: 1, window: "1s" }] }],
        {},
        'RATE_LIMIT.routes[0].path: requests are matched on their normalised path (docs/configuration.md, "Paths"), so write it as "/~", got "/%7e"',
      ],
    ];
    for (const [routes, more, message] of cases) {
      expect(configError(() => withRoutes(routes, more)).message, JSON.stringify(routes)).toBe(message);
    }
    expect(
      configError(() => parse({ plans: [{ name: "free", key_prefix: "f_", unlimited: true, routes: ROUTES }] }))
        .message,
    ).toBe("RATE_LIMIT.plans[0].routes: an unlimited plan has no budgets; remove routes or unlimited = true");
    expect(
      configError(() =>
        parse({
          routes: ROUTES,
          plans: [{ name: "t", key_prefix: "t_", limits: [{ limit: 1, window: "1s" }], routes: [ROUTES[0]] }],
        }),
      ).message,
    ).toBe(
      "RATE_LIMIT.routes: no plan uses them (every plan with limits has its own routes, and there is no RATE_LIMIT.limits); remove them or move them into a plan",
    );
  });

  it("the library's routes may go without a path (matched by name), but not a method without one", () => {
    const lib = parseLimiterConfig(
      { limits: [{ limit: 10, window: "1m" }], routes: [{ name: "search", limits: [{ limit: 1, window: "1m" }] }] },
      "createLimiter",
    );
    expect(lib.defaultPlan?.routes[0]).toMatchObject({ name: "search", method: null, pathPrefix: null });
    expect(routeFor(lib.defaultPlan as Plan, "GET", "/")).toBeNull();
    expect(
      configError(() =>
        parseLimiterConfig(
          {
            limits: [{ limit: 10, window: "1m" }],
            routes: [{ name: "s", method: "GET", limits: [{ limit: 1, window: "1m" }] }],
          },
          "createLimiter",
        ),
      ).message,
    ).toBe("createLimiter.routes[0].path: required with a method (a route is matched on both)");
  });
});

describe('client addresses (docs/configuration.md, "Client addresses") and CORS', () => {
  const error = (rl: Record<string, unknown>) => {
    try {
      parse({ ...MINIMUM, ...rl });
    } catch (e) {
      return (e as Error).message;
    }
    return null;
  };

  it("ip: names its limits ip-per-…, is inherited by plans unless they have their own or ip = false", () => {
    const config = parse({
      ...MINIMUM,
      ip: { limits: [{ limit: 300, window: "1m" }] },
      plans: [
        { name: "srv", key_prefix: "srv_", limits: [{ limit: 1, window: "1s" }], ip: false },
        {
          name: "team",
          key_prefix: "team_",
          limits: [{ limit: 1, window: "1s" }],
          ip: { limits: [{ limit: 9, window: "1s" }] },
        },
        { name: "live", key_prefix: "live_", unlimited: true },
      ],
    });
    expect(config.ip?.plan.limits?.map((l) => l.name)).toEqual(["ip-per-minute"]);
    expect(config.defaultPlan?.ip).toBe(config.ip);
    expect(config.plans.map((p) => p.ip?.kind ?? null)).toEqual([null, "addr.team", null]);
    expect(config.anonymous).toBeNull();
  });

  it.each([
    [{ ip: false }, "RATE_LIMIT.ip: leave it out for no per-address limits (false is for a plan)"],
    [{ ip: { limits: [] } }, "RATE_LIMIT.ip.limits: expected at least one limit"],
    [
      { ip: { limits: [{ limit: 1, window: "1s" }], routes: [] } },
      "RATE_LIMIT.ip.routes: unknown setting; expected one of limits",
    ],
    [
      { ip: { limits: [{ limit: 1, window: "1s", name: "per-second" }] } },
      'RATE_LIMIT.ip.limits[0].name: "per-second" is also a limit of plan "default" or its routes; the headers show both, so give the address\'s limit another name',
    ],
    [
      { plans: [{ name: "live", key_prefix: "live_", unlimited: true, ip: { limits: [{ limit: 1, window: "1s" }] } }] },
      "RATE_LIMIT.plans[0].ip: an unlimited plan's keys never consult the limiter; remove ip or unlimited = true",
    ],
    [
      { ipv6_subnet: 31 },
      "RATE_LIMIT.ipv6_subnet: expected a network length from 32 to 128 bits (56: a site's usual network), got 31",
    ],
    [
      { ipv6_subnet: 56.5 },
      "RATE_LIMIT.ipv6_subnet: expected a network length from 32 to 128 bits (56: a site's usual network), got 56.5",
    ],
    [
      { cors: { origins: ["https://app.example.com/"] } },
      'RATE_LIMIT.cors.origins[0]: expected an origin as browsers send it, scheme://host[:port] without a path (e.g. "https://app.example.com"), or origins = "*"; got "https://app.example.com/"',
    ],
    [{ cors: { origins: "all" } }, 'RATE_LIMIT.cors.origins: expected an array, got "all"'],
    [{ cors: { preflight_limits: [] } }, "RATE_LIMIT.cors.preflight_limits: expected at least one limit"],
    [
      { cors: { origin: ["https://a.example"] } },
      "RATE_LIMIT.cors.origin: unknown setting; expected one of origins, preflight_limits",
    ],
  ])("%j: %s", (rl, message) => {
    expect(error(rl)).toBe(message);
  });

  it("cors is the proxy's; the library takes ip and ipv6_subnet", () => {
    expect(() => parseLimiterConfig({ ...MINIMUM, cors: { origins: "*" } }, "createLimiter")).toThrow(
      "createLimiter.cors: only the proxy reads this setting (RATE_LIMIT in its wrangler.toml)",
    );
    const lib = parseLimiterConfig(
      { ...MINIMUM, ip: { limits: [{ limit: 1, window: "1s" }] }, ipv6_subnet: 48 },
      "createLimiter",
    );
    expect(lib.ipv6Subnet).toBe(48);
    expect(lib.ip?.kind).toBe("addr");
    expect(parse({ ...MINIMUM, cors: { origins: "*" } }).cors.origins).toBe("*");
  });
});

describe("routeFor and routeBudget", () => {
  it("a route matched by name only (the library's) never matches a request's path", () => {
    const config = parseLimiterConfig(
      {
        limits: [{ limit: 10, window: "1m" }],
        routes: [
          { name: "export", limits: [{ limit: 1, window: "1h" }] },
          { name: "all", path: "/", limits: [{ limit: 5, window: "1m" }] },
        ],
      },
      "t",
    );
    const plan = config.defaultPlan as Plan;
    expect(routeFor(plan, "GET", "/export")?.name).toBe("all");
    expect(routeBudget(plan.routes[0] as NonNullable<(typeof plan.routes)[0]>)).toEqual({
      name: "export",
      limits: [{ limit: 1, windowMs: 3_600_000, tickMs: 1, name: "export" }],
    });
  });
});

describe('penalty (docs/configuration.md, "Penalties")', () => {
  it("parses after, within, block and max_block; plans inherit it, have their own, or turn it off", () => {
    const config = parse({
      ...MINIMUM,
      penalty: { after: 5, within: "1m", block: "10m", max_block: "1d" },
      anonymous: { limits: [{ limit: 1, window: "1s" }] },
      plans: [
        { name: "srv", key_prefix: "srv_", limits: [{ limit: 1, window: "1s" }], penalty: false },
        {
          name: "t",
          key_prefix: "t_",
          limits: [{ limit: 1, window: "1s" }],
          penalty: { after: 2, within: "10s", block: "1m" },
        },
        { name: "live", key_prefix: "live_", unlimited: true },
      ],
    });
    const spec = { after: 5, withinMs: 60_000, blockMs: 600_000, maxBlockMs: 86_400_000 };
    expect(config.defaultPlan?.penalty).toEqual(spec);
    expect(config.anonymous?.penalty).toEqual(spec);
    expect(config.plans.map((p) => p.penalty)).toEqual([
      null,
      { after: 2, withinMs: 10_000, blockMs: 60_000, maxBlockMs: null },
      null,
    ]);
  });

  it.each([
    [{ penalty: false }, "RATE_LIMIT.penalty: leave it out for no penalty (false is for a plan)"],
    [
      { penalty: { after: 0, within: "1m", block: "1m" } },
      "RATE_LIMIT.penalty.after: expected the number of refusals that trigger a block, 1 to 1000, got 0",
    ],
    [{ penalty: { after: 3, block: "1m" } }, 'RATE_LIMIT.penalty.within: required, e.g. "1m"'],
    [{ penalty: { after: 3, within: "1m", block: "1 min" } }, /^RATE_LIMIT\.penalty\.block: expected a duration/],
    [
      { penalty: { after: 3, within: "1m", block: "1h", max_block: "10m" } },
      'RATE_LIMIT.penalty.max_block: at least the block (1h), got "10m"',
    ],
    [
      { penalty: { after: 3, within: "1m", block: "1h", for: "1m" } },
      "RATE_LIMIT.penalty.for: unknown setting; expected one of after, within, block, max_block",
    ],
    [
      {
        plans: [
          { name: "live", key_prefix: "live_", unlimited: true, penalty: { after: 1, within: "1s", block: "1s" } },
        ],
      },
      "RATE_LIMIT.plans[0].penalty: an unlimited plan's keys are never refused; remove penalty or unlimited = true",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ ...MINIMUM, ...rl })).toThrow(message);
  });
});

describe('concurrency (docs/configuration.md, "Concurrency")', () => {
  it("parses concurrency and concurrency_timeout; plans inherit them, have their own, or turn it off", () => {
    const config = parse({
      ...MINIMUM,
      concurrency: 10,
      anonymous: { limits: [{ limit: 1, window: "1s" }] },
      plans: [
        { name: "srv", key_prefix: "srv_", limits: [{ limit: 1, window: "1s" }], concurrency: false },
        { name: "t", key_prefix: "t_", limits: [{ limit: 1, window: "1s" }], concurrency: 2 },
        { name: "slow", key_prefix: "s_", limits: [{ limit: 1, window: "1s" }], concurrency_timeout: "5m" },
        { name: "live", key_prefix: "live_", unlimited: true },
      ],
    });
    expect(config.defaultPlan?.concurrency).toEqual({ limit: 10, timeoutMs: 60_000 });
    expect(config.anonymous?.concurrency).toEqual({ limit: 10, timeoutMs: 60_000 });
    expect(config.plans.map((p) => p.concurrency)).toEqual([
      null,
      { limit: 2, timeoutMs: 60_000 },
      { limit: 10, timeoutMs: 300_000 },
      null,
    ]);
    expect(parse({ ...MINIMUM, concurrency: 1, concurrency_timeout: "1s" }).defaultPlan?.concurrency).toEqual({
      limit: 1,
      timeoutMs: 1_000,
    });
    expect(parse(MINIMUM).defaultPlan?.concurrency).toBeNull();
  });

  it.each([
    [{ concurrency: false }, "RATE_LIMIT.concurrency: leave it out for no concurrency limit (false is for a plan)"],
    [
      { concurrency: 0 },
      "RATE_LIMIT.concurrency: expected the number of a key's requests in flight at once, 1 to 10000, got 0",
    ],
    [{ concurrency: 1.5 }, /^RATE_LIMIT\.concurrency: expected the number/],
    [{ concurrency: "10" }, /^RATE_LIMIT\.concurrency: expected the number/],
    [{ concurrency: 10_001 }, /^RATE_LIMIT\.concurrency: expected the number/],
    [
      { concurrency_timeout: "10s" },
      "RATE_LIMIT.concurrency_timeout: set only with concurrency (the requests in flight at once)",
    ],
    [
      { concurrency: 1, concurrency_timeout: "500ms" },
      'RATE_LIMIT.concurrency_timeout: expected 1s to 1d (how long a vanished request\'s slot stays taken), got "500ms"',
    ],
    [{ concurrency: 1, concurrency_timeout: "2d" }, /^RATE_LIMIT\.concurrency_timeout: expected 1s to 1d/],
    [{ concurrency: 1, concurrency_timeout: "1 min" }, /^RATE_LIMIT\.concurrency_timeout: expected a duration/],
    [
      { plans: [{ name: "live", key_prefix: "live_", unlimited: true, concurrency: 1 }] },
      "RATE_LIMIT.plans[0].concurrency: an unlimited plan's keys never consult the limiter; remove concurrency or unlimited = true",
    ],
    [
      { plans: [{ name: "p", key_prefix: "p_", limits: [{ limit: 1, window: "1s" }], concurrency_timeout: "5s" }] },
      "RATE_LIMIT.plans[0].concurrency_timeout: set only with concurrency (the requests in flight at once)",
    ],
    [
      {
        concurrency: 2,
        plans: [
          {
            name: "p",
            key_prefix: "p_",
            limits: [{ limit: 1, window: "1s" }],
            concurrency: false,
            concurrency_timeout: "5s",
          },
        ],
      },
      "RATE_LIMIT.plans[0].concurrency_timeout: the plan has no concurrency limit (concurrency = false)",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ ...MINIMUM, ...rl })).toThrow(message);
  });
});

describe('calendar quotas (docs/configuration.md, "Quotas and credits")', () => {
  const parse = (rl: Obj) => parseConfig({ ORIGIN, RATE_LIMIT: rl });

  it("a limit with period (and time_zone) is a quota: kept apart from the sliding limits, shown after them", () => {
    const config = parse({
      limits: [
        { limit: 100, window: "1m" },
        { limit: 10_000, period: "month", time_zone: "America/New_York" },
        { limit: 500, period: "day", name: "calls-today" },
      ],
    });
    const plan = config.defaultPlan as Plan;
    expect(plan.limits?.map((l) => l.name)).toEqual(["per-minute"]);
    expect(plan.meters?.quotas).toEqual([
      { name: "monthly", limit: 10_000, period: "month", zone: "America/New_York", windowMs: 2_592_000_000 },
      { name: "calls-today", limit: 500, period: "day", zone: "UTC", windowMs: 86_400_000 },
    ]);
    expect(plan.shown?.map((l) => l.name)).toEqual(["per-minute", "monthly", "calls-today"]);
    expect(policyOf(plan.shown ?? [])).toBe('"per-minute";q=100;w=60, "monthly";q=10000, "calls-today";q=500');
    // Leases as before: sized by the sliding limits (the object cuts them to the quota).
    expect(plan.leaseMs).toBe(30_000);
  });

  it("a plan of quotas alone has no sliding limits and no leases; plans and anonymous take quotas too", () => {
    const config = parse({
      plans: [{ name: "free", key_prefix: "free_", limits: [{ limit: 1000, period: "month" }] }],
      anonymous: { limits: [{ limit: 10, period: "hour" }] },
    });
    const free = config.plans[0] as Plan;
    expect(free).toMatchObject({ limits: [], leaseMs: 0 });
    expect(free.meters?.quotas?.map((q) => q.name)).toEqual(["monthly"]);
    expect(config.anonymous?.meters?.quotas?.map((q) => q.period)).toEqual(["hour"]);
    // A route's limits are shown between the plan's and its quotas.
    const routed = parse({
      limits: [{ limit: 5, period: "week" }],
      routes: [{ name: "search", path: "/search", limits: [{ limit: 1, window: "1s", name: "search" }] }],
    });
    expect(routed.defaultPlan?.routes[0]?.shown.map((l) => l.name)).toEqual(["search", "weekly"]);
  });

  it.each([
    [
      { limits: [{ limit: 1, window: "1d", period: "day" }] },
      "RATE_LIMIT.limits[0]: give either window (a sliding window) or period (a calendar quota), not both",
    ],
    [
      { limits: [{ limit: 1, period: "year" }] },
      'RATE_LIMIT.limits[0].period: expected one of "hour", "day", "week", "month", got "year"',
    ],
    [
      { limits: [{ limit: 1, period: "month", time_zone: "Mars/Olympus_Mons" }] },
      'RATE_LIMIT.limits[0].time_zone: the runtime knows no zone "Mars/Olympus_Mons"; expected an IANA name like "Europe/Berlin"',
    ],
    [
      { limits: [{ limit: 1, period: "month", time_zone: 2 }] },
      'RATE_LIMIT.limits[0].time_zone: expected an IANA name like "Europe/Berlin", got 2',
    ],
    [{ limits: [{ limit: 0, period: "day" }] }, "RATE_LIMIT.limits[0].limit: expected a positive integer, got 0"],
    [{ limits: [{ limit: 1.5, period: "day" }] }, "RATE_LIMIT.limits[0].limit: expected a positive integer, got 1.5"],
    [{ limits: [{ limit: "9", period: "day" }] }, 'RATE_LIMIT.limits[0].limit: expected a positive integer, got "9"'],
    [
      {
        limits: [
          { limit: 9, window: "1s" },
          { limit: 9, period: "day" },
          { limit: 0, window: "1m" },
        ],
      },
      "RATE_LIMIT.limits[2].limit: expected a positive integer, got 0",
    ],
    [
      {
        limits: [
          { limit: 9, period: "day" },
          { limit: 9, period: "day" },
        ],
      },
      'RATE_LIMIT.limits[1].name: "daily" is already used by RATE_LIMIT.limits[0]; give each limit a distinct name',
    ],
    [
      { limits: [{ limit: 1, period: "day", tick: "1s" }] },
      "RATE_LIMIT.limits[0].tick: a calendar quota (period) has no tick",
    ],
    [
      { limits: [{ limit: 1, period: "day", reset: "1st" }] },
      "RATE_LIMIT.limits[0].reset: unknown setting; expected one of limit, period, time_zone, name",
    ],
    [
      { limits: [{ limit: 1, window: "1s", time_zone: "UTC" }] },
      'RATE_LIMIT.limits[0].time_zone: only a calendar quota has one; give period = "hour", "day", "week" or "month" with it',
    ],
    [
      {
        limits: [
          { limit: 1, window: "1d", name: "daily" },
          { limit: 5, period: "day" },
        ],
      },
      'RATE_LIMIT.limits[1].name: "daily" is already used by RATE_LIMIT.limits[0]; give each limit a distinct name',
    ],
    [
      {
        limits: [
          { limit: 5, period: "day" },
          { limit: 1, window: "1 sec" },
        ],
      },
      'RATE_LIMIT.limits[1].window: expected a duration like "250ms", "1s", "1m", "1h" or "1d", or a number of milliseconds, got "1 sec"',
    ],
    [
      {
        limits: [{ limit: 5, period: "day" }],
        routes: [{ name: "a", path: "/a", limits: [{ limit: 1, period: "day" }] }],
      },
      "RATE_LIMIT.routes[0].limits[0].period: calendar quotas are for a plan's limits (a plan's own, the top-level or the anonymous ones), not here",
    ],
    [
      { limits: [{ limit: 5, period: "day" }], ip: { limits: [{ limit: 1, period: "day" }] } },
      "RATE_LIMIT.ip.limits[0].period: calendar quotas are for a plan's limits (a plan's own, the top-level or the anonymous ones), not here",
    ],
    [{ limits: [] }, "RATE_LIMIT.limits: expected at least one limit"],
  ])("%j: %s", (rl, message) => {
    expect(() => parse(rl as Obj)).toThrow(new ConfigError(message));
  });
});

describe('credits (docs/configuration.md, "Quotas and credits")', () => {
  const parse = (rl: Obj) => parseConfig({ ORIGIN, RATE_LIMIT: rl });

  it("a plan's own credits, the top-level ones inherited, false for none; the meters its calls carry", () => {
    const config = parse({
      limits: [{ limit: 10, window: "1s" }],
      credits: { initial: 100, refill: { amount: 100, period: "month", time_zone: "Europe/Paris" } },
      plans: [
        { name: "own", key_prefix: "own_", limits: [{ limit: 5, window: "1s" }], credits: { initial: 0, status: 429 } },
        { name: "none", key_prefix: "none_", limits: [{ limit: 5, window: "1s" }], credits: false },
        {
          name: "heir",
          key_prefix: "heir_",
          limits: [
            { limit: 5, window: "1s" },
            { limit: 9, period: "day" },
          ],
        },
      ],
    });
    const top = { initial: 100, refill: { amount: 100, period: "month", zone: "Europe/Paris" } };
    expect(config.defaultPlan?.meters).toEqual({ credits: top });
    expect(config.defaultPlan?.creditStatus).toBe(402);
    const [own, none, heir] = config.plans;
    expect(own?.meters).toEqual({ credits: { initial: 0, refill: null } });
    expect(own?.creditStatus).toBe(429);
    expect(none?.meters).toBeUndefined();
    expect(none?.creditStatus).toBeUndefined();
    expect(heir?.meters).toEqual({
      quotas: [{ name: "daily", limit: 9, period: "day", zone: "UTC", windowMs: 86_400_000 }],
      credits: top,
    });
    expect(heir?.creditStatus).toBe(402);
  });

  it.each([
    [
      { credits: { initial: -1 } },
      "RATE_LIMIT.credits.initial: expected a whole number ≥ 0 (each key's first balance), got -1",
    ],
    [
      { credits: { initial: 1.5 } },
      "RATE_LIMIT.credits.initial: expected a whole number ≥ 0 (each key's first balance), got 1.5",
    ],
    [
      { credits: { initial: 1, status: 403 } },
      "RATE_LIMIT.credits.status: expected 402 (Payment Required) or 429, got 403",
    ],
    [
      { credits: { initial: 1, refill: { amount: 0, period: "day" } } },
      "RATE_LIMIT.credits.refill.amount: expected a positive integer, got 0",
    ],
    [
      { credits: { initial: 1, refill: { amount: 5, period: "fortnight" } } },
      'RATE_LIMIT.credits.refill.period: expected one of "hour", "day", "week", "month", got "fortnight"',
    ],
    [
      { credits: { initial: 1, refill: { amount: 5, period: "day", time_zone: "Europe/Atlantis" } } },
      'RATE_LIMIT.credits.refill.time_zone: the runtime knows no zone "Europe/Atlantis"; expected an IANA name like "Europe/Berlin"',
    ],
    [
      { credits: { initial: 1, balance: 5 } },
      "RATE_LIMIT.credits.balance: unknown setting; expected one of initial, refill, status",
    ],
    [{ credits: false }, "RATE_LIMIT.credits: leave it out for no credits (false is for a plan)"],
    [
      { credits: { initial: "5" } },
      'RATE_LIMIT.credits.initial: expected a whole number ≥ 0 (each key\'s first balance), got "5"',
    ],
    [
      { credits: { initial: 1, refill: { amount: 1.5, period: "day" } } },
      "RATE_LIMIT.credits.refill.amount: expected a positive integer, got 1.5",
    ],
    [
      { credits: { initial: 1, refill: { amount: "5", period: "day" } } },
      'RATE_LIMIT.credits.refill.amount: expected a positive integer, got "5"',
    ],
    [
      { credits: { initial: 1, refill: { amount: 5 } } },
      'RATE_LIMIT.credits.refill.period: expected one of "hour", "day", "week", "month", got nothing',
    ],
    [
      { credits: { initial: 1, refill: { amount: 5, period: "day", every: 2 } } },
      "RATE_LIMIT.credits.refill.every: unknown setting; expected one of amount, period, time_zone",
    ],
    [
      { plans: [{ name: "live", key_prefix: "live_", unlimited: true, credits: { initial: 1 } }] },
      "RATE_LIMIT.plans[0].credits: an unlimited plan's keys never consult the limiter; remove credits or unlimited = true",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ limits: [{ limit: 1, window: "1s" }], ...(rl as Obj) })).toThrow(new ConfigError(message));
  });
});

describe('usage (docs/configuration.md, "Usage")', () => {
  const parse = (rl: Obj) => parseConfig({ ORIGIN, RATE_LIMIT: rl });

  it("true, or keep and time_zone; inherited, false for none; a plan keeping usage gets no leases", () => {
    const config = parse({
      limits: [{ limit: 100, window: "1m" }],
      usage: true,
      plans: [
        {
          name: "eu",
          key_prefix: "eu_",
          limits: [{ limit: 100, window: "1m" }],
          usage: { keep: "90d", time_zone: "Europe/Berlin" },
        },
        { name: "off", key_prefix: "off_", limits: [{ limit: 100, window: "1m" }], usage: false },
      ],
    });
    expect(config.defaultPlan).toMatchObject({ leaseMs: 0 });
    expect(config.defaultPlan?.meters).toEqual({ usage: { zone: "UTC", keepDays: 400 } });
    expect(config.plans[0]).toMatchObject({ meters: { usage: { zone: "Europe/Berlin", keepDays: 90 } }, leaseMs: 0 });
    expect(config.plans[1]?.meters).toBeUndefined();
    expect(config.plans[1]?.leaseMs).toBe(30_000);
    // The bounds of keep, and a plan with usage false keeps no meters.
    for (const [keep, days] of [
      ["1d", 1],
      ["3660d", 3660],
      ["12d", 12],
    ] as const) {
      expect(
        parse({ limits: [{ limit: 1, window: "1s" }], usage: { keep } }).defaultPlan?.meters?.usage?.keepDays,
      ).toBe(days);
    }
    expect(config.plans[1]?.meters).toBeUndefined();
    // An unlimited plan's keys count nothing, whatever the top level keeps.
    const unlimited = parse({
      limits: [{ limit: 1, window: "1s" }],
      usage: true,
      credits: { initial: 1 },
      plans: [{ name: "u", key_prefix: "u_", unlimited: true }],
    });
    expect(unlimited.plans[0]).toMatchObject({ limits: null });
    expect(unlimited.plans[0]?.meters).toBeUndefined();
    expect(unlimited.plans[0]?.creditStatus).toBeUndefined();
  });

  it.each([
    [{ usage: "yes" }, 'RATE_LIMIT.usage: expected true or { keep = "400d", time_zone = "UTC" }, got "yes"'],
    [{ usage: { keep: "1y" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "1y"'],
    [{ usage: { keep: "3661d" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "3661d"'],
    [{ usage: { keep: "0d" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "0d"'],
    [
      { usage: { time_zone: "Moon/Base" } },
      'RATE_LIMIT.usage.time_zone: the runtime knows no zone "Moon/Base"; expected an IANA name like "Europe/Berlin"',
    ],
    [{ usage: { retention: "400d" } }, "RATE_LIMIT.usage.retention: unknown setting; expected one of keep, time_zone"],
    [{ usage: false }, "RATE_LIMIT.usage: leave it out for no usage (false is for a plan)"],
    [{ usage: { keep: 400 } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got 400'],
    [{ usage: { keep: "40d " } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got "40d "'],
    [{ usage: { keep: " 40d" } }, 'RATE_LIMIT.usage.keep: expected whole days from "1d" to "3660d", got " 40d"'],
    [{ usage: null }, 'RATE_LIMIT.usage: expected true or { keep = "400d", time_zone = "UTC" }, got null'],
    [{ usage: ["400d"] }, 'RATE_LIMIT.usage: expected true or { keep = "400d", time_zone = "UTC" }, got an array'],
    [
      { plans: [{ name: "live", key_prefix: "live_", unlimited: true, usage: true }] },
      "RATE_LIMIT.plans[0].usage: an unlimited plan's keys never consult the limiter, so nothing would be counted; remove usage or unlimited = true",
    ],
  ])("%j: %s", (rl, message) => {
    expect(() => parse({ limits: [{ limit: 1, window: "1s" }], ...(rl as Obj) })).toThrow(new ConfigError(message));
  });
});

describe("plans joined to their routes, addresses and inherited settings (src/config/plans.ts)", () => {
  const parse = (rl: Obj) => parseConfig({ ORIGIN, RATE_LIMIT: rl });
  const L = [{ limit: 5, window: "1m" }];
  const route = (name: string, limitName?: string) => ({
    name,
    path: `/${name}`,
    limits: [{ limit: 1, window: "1s", ...(limitName ? { name: limitName } : {}) }],
  });
  const ownRoutes = { name: "t", key_prefix: "t_", limits: L, routes: [route("own")] };
  const notUsed =
    "RATE_LIMIT.routes: no plan uses them (every plan with limits has its own routes, and there is no RATE_LIMIT.limits); remove them or move them into a plan";

  it("top-level routes must be taken: by a plan without its own, or by anonymous; an unlimited plan takes none", () => {
    const taken = parse({ routes: [route("search")], plans: [{ name: "t", key_prefix: "t_", limits: L }] });
    expect(taken.plans[0]?.routes.map((r) => r.name)).toEqual(["search"]);
    const byAnonymous = parse({ routes: [route("search")], plans: [ownRoutes], anonymous: { limits: L } });
    expect(byAnonymous.anonymous?.routes.map((r) => r.name)).toEqual(["search"]);
    expect(parse({ routes: [], plans: [ownRoutes] }).plans[0]?.routes.map((r) => r.name)).toEqual(["own"]);
    expect(
      configError(() =>
        parse({ routes: [route("search")], plans: [{ name: "u", key_prefix: "u_", unlimited: true }, ownRoutes] }),
      ).message,
    ).toBe(notUsed);
    expect(
      configError(() =>
        parse({ routes: [route("search")], plans: [ownRoutes], anonymous: { limits: L, routes: [route("own")] } }),
      ).message,
    ).toBe(notUsed);
  });

  it("anonymous: its own routes replace the top-level ones; errors name where each route was given", () => {
    const own = parse({ ...MINIMUM, routes: [route("search")], anonymous: { limits: L, routes: [route("anon")] } });
    expect(own.anonymous?.routes.map((r) => r.name)).toEqual(["anon"]);
    expect(configError(() => parse({ ...MINIMUM, anonymous: { limits: L, extra: 1 } })).message).toBe(
      "RATE_LIMIT.anonymous.extra: unknown setting; expected one of limits, routes",
    );
    expect(
      configError(() => parse({ ...MINIMUM, anonymous: { limits: L, routes: [{ ...route("a"), name: "A" }] } }))
        .message,
    ).toMatch(/^RATE_LIMIT\.anonymous\.routes\[0\]\.name: /);
    expect(
      configError(() => parse({ ...MINIMUM, anonymous: { limits: L, routes: [route("a", "per-minute")] } })).message,
    ).toBe(
      'RATE_LIMIT.anonymous.routes[0].limits[0].name: "per-minute" is also a limit of plan "anonymous"; the headers show both, so give the route\'s limit another name',
    );
    expect(
      configError(() => parse({ routes: [route("a", "per-minute")], plans: [ownRoutes], anonymous: { limits: L } }))
        .message,
    ).toBe(
      'RATE_LIMIT.routes[0].limits[0].name: "per-minute" is also a limit of plan "anonymous"; the headers show both, so give the route\'s limit another name',
    );
  });

  it("a plan's routes and ip: a clash of names names the plan's own setting, or the top-level one it inherits", () => {
    const plan = { name: "t", key_prefix: "t_", limits: MINIMUM.limits };
    // The plan's second limit: any of its limits clashes.
    expect(
      configError(() => parse({ ...MINIMUM, plans: [{ ...plan, routes: [route("a", "per-minute")] }] })).message,
    ).toBe(
      'RATE_LIMIT.plans[0].routes[0].limits[0].name: "per-minute" is also a limit of plan "t"; the headers show both, so give the route\'s limit another name',
    );
    const ip = { limits: [{ limit: 9, window: "1m", name: "per-minute" }] };
    expect(configError(() => parse({ ...MINIMUM, plans: [{ ...plan, ip }] })).message).toBe(
      'RATE_LIMIT.plans[0].ip.limits[0].name: "per-minute" is also a limit of plan "t" or its routes; the headers show both, so give the address\'s limit another name',
    );
    expect(
      configError(() =>
        parse({
          plans: [
            { name: "t", key_prefix: "t_", limits: [{ limit: 1, window: "1h" }] },
            { ...plan, key_prefix: "u_", name: "u" },
          ],
          ip,
        }),
      ).message,
    ).toBe(
      'RATE_LIMIT.ip.limits[0].name: "per-minute" is also a limit of plan "u" or its routes; the headers show both, so give the address\'s limit another name',
    );
    const addr = { limits: [{ limit: 9, window: "1m", name: "addr" }] };
    const off = parse({ ...MINIMUM, ip: addr, plans: [{ ...plan, ip: false }] });
    expect(off.plans[0]?.ip).toBeNull();
    expect(off.defaultPlan?.ip?.plan.limits?.map((l) => l.name)).toEqual(["addr"]);
    // A route's limit clashes too.
    expect(
      configError(() =>
        parse({
          limits: [{ limit: 100, window: "1s" }],
          routes: [route("a", "shared")],
          ip: { limits: [{ limit: 9, window: "1m", name: "shared" }] },
        }),
      ).message,
    ).toBe(
      'RATE_LIMIT.ip.limits[0].name: "shared" is also a limit of plan "default" or its routes; the headers show both, so give the address\'s limit another name',
    );
  });

  it("an unlimited plan: concurrency = false is allowed, a limit or its timeout is not; it has no leases, routes or ip", () => {
    const u = { name: "u", key_prefix: "u_", unlimited: true };
    expect(parse({ ...MINIMUM, plans: [{ ...u, concurrency: false }] }).plans[0]).toEqual({
      name: "u",
      keyPrefix: "u_",
      limits: null,
      leaseMs: 0,
      routes: [],
      ip: null,
      penalty: null,
      concurrency: null,
    });
    const refused =
      "RATE_LIMIT.plans[0].concurrency: an unlimited plan's keys never consult the limiter; remove concurrency or unlimited = true";
    expect(configError(() => parse({ ...MINIMUM, plans: [{ ...u, concurrency: 3 }] })).message).toBe(refused);
    expect(configError(() => parse({ ...MINIMUM, plans: [{ ...u, concurrency_timeout: "5s" }] })).message).toBe(
      refused,
    );
    expect(configError(() => parse({ ...MINIMUM, plans: [{ ...u, ip: L }] })).message).toBe(
      "RATE_LIMIT.plans[0].ip: an unlimited plan's keys never consult the limiter; remove ip or unlimited = true",
    );
    expect(
      parse({ ...MINIMUM, plans: [{ ...u, ip: false, penalty: false, credits: false, usage: false }] }).plans[0]?.ip,
    ).toBeNull();
  });
});
