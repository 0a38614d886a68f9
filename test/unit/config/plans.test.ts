/**
 * @module Plans (src/config/plans.ts): client addresses' budgets (`ip`, inherited by plans) beside the proxy's CORS
 * settings, and plans joined to their routes, addresses and inherited settings.
 */

import { describe, expect, it } from "vitest";
import { parseConfig, parseLimiterConfig } from "../../../src/config/parse.ts";
import { configError, MINIMUM, type Obj, ORIGIN, parse } from "./support.ts";

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
