/**
 * @module parseConfig and parseLimiterConfig (src/config/parse.ts): valid configs — the minimum, wrangler.toml,
 * README's and docs/'s examples, every field — and settings at their edges. Errors field by field:
 * errors.test.ts; junk anywhere: properties.test.ts.
 */

import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  LIMITER_FIELDS,
  MAX_ORIGIN_TIMEOUT_MS,
  PROXY_FIELDS,
  parseConfig,
  parseLimiterConfig,
} from "../../../src/config/parse.ts";
import { type Config, DEFAULTS, type Limit, type Plan } from "../../../src/config/types.ts";
import { defaultTickMs } from "../../../src/core/index.ts";
import { targetsOf } from "../../../src/proxy/upstream.ts";
import { configError, MINIMUM, ORIGIN, parse, policyHeader, rl } from "./support.ts";

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

/**
 * The config of one ORIGIN as plain data (`origin`: its href), so `toEqual` compares every field; the origins'
 * own fields are the gateway's tests' (test/unit/gateway.test.ts).
 */
function plain(config: Config): Omit<Config, "origins"> & { origin: string } {
  const { origins, ...rest } = config;
  expect(origins.map((o) => [o.path, o.field, o.headers, o.forwardKey])).toEqual([["/", "ORIGIN", [], true]]);
  return { ...rest, origin: (origins[0] as Config["origins"][number]).url.href };
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
    const { parseLimits } = await import("../../../src/config/parse.ts");
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
