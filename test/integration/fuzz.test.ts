// The HTTP surface under generated input (fast-check): keys from every source (well-formed and hostile), paths
// (near-misses of the admin path, encoded and dotted ones, random ones), methods, headers, admin bodies with
// their times, the admin token anywhere. What must hold whatever arrives:
// - only documented statuses, never a 5xx (the origin and the objects are healthy here);
// - nothing is proxied that carries the admin token;
// - nothing is counted that was not served: each key's grants at its object equal what the origin saw of it;
// - no key appears in clear in any log line.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { costFor } from "../../src/config/lookup.ts";
import { parseConfig } from "../../src/config/parse.ts";
import { envWith, handle, originUrl, type WorkerEnv } from "./helpers.ts";

const TOKEN = "fuzz-admin-token-0123456789";
const RUN = crypto.randomUUID().slice(0, 8);
/** The well-formed keys: few, so that some reach their limit. Admin bodies name other keys (`adm_`). */
const KEYS = Array.from({ length: 5 }, (_, i) => `fz_${RUN}_${i}`);
const RATE_LIMIT = {
  limits: [{ limit: 6, window: "1m" }],
  plans: [{ name: "adm", key_prefix: "adm_", limits: [{ limit: 3, window: "1m" }] }],
  costs: [
    { path: "/health", cost: 0 },
    { method: "POST", path: "/v1/search", cost: 2 },
  ],
  key: { query: "api_key" },
  // Per-request decisions: a key's grants at its object are then exactly what was counted.
  leases: false,
};
/** Statuses docs/http.md documents for a healthy origin and healthy objects (the origin echoes 200). */
const DOCUMENTED = new Set([200, 400, 401, 403, 404, 405, 409, 413, 422, 429]);

const hostileKey = fc.oneof(
  fc.string({ unit: "grapheme", minLength: 1, maxLength: 12 }),
  fc.constantFrom("a b", "a,b", "\u00a0k", "k\u3000", "\ufeffk", "k\v", "x".repeat(300), "ключ", "k\u0000"),
);
const key = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...KEYS) }, { weight: 1, arbitrary: hostileKey });
const path = fc.oneof(
  fc.constantFrom(
    "/",
    "/v1/items",
    "/health",
    "/healthz",
    "/v1/search",
    "/__limiter/",
    "/__limiter/status",
    "/__limiter/block",
    "/__LIMITER/status",
    "/%5F%5Flimiter/status",
    "//__limiter/status",
    "/__limiter",
    "/__limiter;/status",
    "/health%2F..%2Fv1/search",
    "/health/../v1/search",
    "/%76%31/search",
  ),
  fc.webPath().filter((p) => !p.includes("__special") && !p.includes("__arrivals")),
);
const time = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom<unknown>(
      "9999-12-31T23:59:59Z",
      9_000_000_000_000_000,
      "2100-01-01T00:00:00.001Z",
      "2099-01-01T00:00:00Z",
      -1,
      "soon",
      null,
    ),
  },
  { weight: 1, arbitrary: fc.integer() },
  { weight: 1, arbitrary: fc.date({ noInvalidDate: true }).map((d) => d.toISOString()) },
);
const adminKey = fc.oneof(fc.constantFrom("adm_a", "adm_b", `adm_${RUN}`), hostileKey);
const span = fc.oneof(fc.constantFrom<unknown>("1h", "366d", "367d", "0ms", 5000), fc.string());
const limitsJunk = fc.oneof(fc.constant([{ limit: 2, window: "1m" }]), fc.anything());
/** An admin endpoint and a body for it: its own fields (now and then wrong ones), times near and far. */
const adminCall = fc.oneof(
  fc.record({
    action: fc.constantFrom("status", "reset", "unblock", "override/delete"),
    body: fc.record({ key: adminKey }),
  }),
  fc.record({
    action: fc.constant("block"),
    body: fc.oneof(fc.record({ key: adminKey, until: time }), fc.record({ key: adminKey, for: span })),
  }),
  fc.record({
    action: fc.constant("override"),
    body: fc.record(
      { key: adminKey, limits: limitsJunk, expires: time, for: span },
      { requiredKeys: ["key", "limits"] },
    ),
  }),
  fc.record({
    action: fc.constantFrom("", "stats", "block"),
    body: fc.record({ key: adminKey, until: time, junk: fc.anything() }, { requiredKeys: [] }),
  }),
);
const printable = fc.stringMatching(/^[\x20-\x7e]{0,20}$/);
const apiRequest = fc.record({
  method: fc.constantFrom("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"),
  path,
  key,
  source: fc.constantFrom("header", "bearer", "query", "none"),
  auth: fc.constantFrom("none", "admin", "wrong", "key", "admin-header", "admin-query"),
  body: fc.oneof(
    adminCall.map((c) => JSON.stringify(c.body)),
    fc.string(),
    fc.constant(""),
  ),
  header: fc.tuple(fc.constantFrom("x-extra", "accept", "x-forwarded-for"), printable),
});
/** An operator's call: an admin endpoint, the token (mostly), a body for it. */
const adminRequest = fc
  .record({
    method: fc.constantFrom("POST", "POST", "POST", "GET", "PUT"),
    call: adminCall,
    auth: fc.constantFrom("admin", "admin", "admin", "wrong", "none"),
    header: fc.tuple(fc.constant("x-extra"), printable),
  })
  .map(({ method, call, auth, header }) => ({
    method,
    path: `/__limiter/${call.action}`,
    key: "",
    source: "none" as const,
    auth,
    body: JSON.stringify(call.body),
    header,
  }));
const request = fc.oneof({ weight: 3, arbitrary: apiRequest }, { weight: 2, arbitrary: adminRequest });
type Generated = typeof apiRequest extends fc.Arbitrary<infer T> ? T : never;

function toRequest(g: Generated): Request | null {
  const headers = new Headers();
  try {
    headers.set(g.header[0], g.header[1]);
  } catch {
    // not a valid header value: leave it out
  }
  let query = "";
  // A header carries bytes; keys outside ASCII go in the query (their header forms are pinned by the e2e tests).
  const ascii = !/[^ -~\t]/.test(g.key) && !/[\u0080-\u{10ffff}]/u.test(g.key);
  const source = ascii || g.source === "none" ? g.source : "query";
  try {
    if (source === "header") headers.set("x-api-key", g.key);
    if (source === "bearer" || (g.auth === "key" && ascii)) headers.set("authorization", `Bearer ${g.key}`);
    if (source === "query") query = `?api_key=${encodeURIComponent(g.key)}`;
  } catch {
    return null; // a key no HTTP header can carry never reaches the Worker
  }
  if (g.auth === "admin") headers.set("authorization", `Bearer ${TOKEN}`);
  // The token where an API key goes, or in a query parameter: never proxied either.
  if (g.auth === "admin-header") headers.set("x-api-key", TOKEN);
  if (g.auth === "admin-query") query += `${query ? "&" : "?"}token=${TOKEN}`;
  if (g.auth === "wrong") headers.set("authorization", "Bearer not-the-token");
  headers.set("content-type", "application/json");
  const hasBody = g.method !== "GET" && g.method !== "HEAD";
  return new Request(`https://limiter.example${g.path}${query}`, {
    method: g.method,
    headers,
    ...(hasBody ? { body: g.body } : {}),
  });
}

interface OriginArrival {
  method: string;
  url: string;
  headers: Record<string, string>;
}

describe("the HTTP surface under generated input", () => {
  let e: WorkerEnv;
  const lines: string[] = [];
  const statuses = new Map<number, number>();

  beforeAll(async () => {
    e = envWith(RATE_LIMIT, { ADMIN_TOKEN: TOKEN });
    for (const level of ["log", "warn", "error"] as const) {
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
        lines.push(args.map(String).join(" "));
      });
    }
    await fetch(`${originUrl}/__arrivals`, { method: "DELETE" });
  });

  afterAll(() => {
    vi.restoreAllMocks();
  });

  it("answers only documented statuses, never a 5xx", async () => {
    await fc.assert(
      fc.asyncProperty(request, async (g) => {
        const req = toRequest(g);
        if (!req) return;
        const res = await handle(req, e);
        await res.arrayBuffer();
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        expect(DOCUMENTED.has(res.status), `${res.status} for ${g.method} ${g.path}`).toBe(true);
      }),
      { numRuns: 1000 },
    );
    // The run reached the interesting answers, not only one kind.
    for (const s of [200, 400, 401, 404, 429]) expect(statuses.get(s) ?? 0, `status ${s}`).toBeGreaterThan(0);
  });

  it("proxied nothing that carries the admin token, and counted exactly what it served", async () => {
    const all = (await (await fetch(`${originUrl}/__arrivals`)).json()) as OriginArrival[];
    expect(all.filter((a) => JSON.stringify(a.headers).includes(TOKEN) || a.url.includes(TOKEN))).toEqual([]);
    const config = parseConfig(e);
    for (const k of KEYS) {
      const served = all
        .filter(
          (a) =>
            a.headers["x-api-key"] === k || a.headers.authorization === `Bearer ${k}` || a.url.includes(`api_key=${k}`),
        )
        .reduce((sum, a) => sum + costFor(config, a.method, new URL(`http://x${a.url}`).pathname), 0);
      const status = await e.LIMITER.getByName(`key:${k}`).peek(config.defaultPlan?.limits ?? []);
      const used = 6 - (status.limits[0]?.remaining ?? 0);
      expect(used, k).toBe(served);
    }
  });

  it("logged no key in clear", () => {
    const logged = lines.join("\n");
    for (const k of [...KEYS, "adm_a", "adm_b", `adm_${RUN}`, TOKEN]) expect(logged.includes(k), k).toBe(false);
  });
});
