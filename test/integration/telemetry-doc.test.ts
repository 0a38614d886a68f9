// docs/operating.md's Analytics Engine table against the data points the Worker really writes (through a binding
// double): one row per field the code fills, in order, and the values it lists for the kind of budget (`blob5`) and
// the budget that refused (`blob7`) exactly those seen over every kind of decision — a key's, an address's `ip` and
// account's refusals, a request without a key, a guessed key, a CORS preflight.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import operating from "../../docs/operating.md?raw";
import { mintKey } from "../../src/pipeline/signed.ts";
import { envWith, freshKey, handle, request } from "./helpers.ts";

const SECRET = "telemetry-doc-secret";
const APP = "https://app.example";
const RL = {
  limits: [{ limit: 1, window: "1m" }],
  ip: { limits: [{ limit: 2, window: "1m" }] },
  anonymous: { limits: [{ limit: 1, window: "1m" }] },
  routes: [{ name: "search", path: "/v1/search", limits: [{ limit: 5, window: "1m" }] }],
  plans: [
    {
      name: "pro",
      key_prefix: "live_",
      signed: true,
      limits: [{ limit: 10, window: "1m" }],
      account: { limits: [{ limit: 1, window: "1m" }] },
    },
  ],
  cors: { origins: [APP], preflight_limits: [{ limit: 1, window: "1m" }] },
  guesses: { limits: [{ limit: 1, window: "1m" }] },
  leases: false,
};

beforeEach(() => {
  vi.spyOn(console, "log").mockImplementation(() => {});
  vi.spyOn(console, "warn").mockImplementation(() => {});
});
afterEach(() => vi.restoreAllMocks());

/** The rows of the table under "### Analytics" in docs/operating.md: field → content. */
function documented(): Map<string, string> {
  const section = operating.slice(
    operating.indexOf("### Analytics"),
    operating.indexOf("\n## ", operating.indexOf("### Analytics")),
  );
  const rows = [...section.matchAll(/^\| `(\w+)` \| (.*) \|$/gm)];
  return new Map(rows.map((m) => [m[1] ?? "", m[2] ?? ""]));
}

/** The words a table cell names in backticks (`key`, `ip`, …), links and field names aside. */
function listed(cell: string): Set<string> {
  return new Set([...cell.replace(/\[[^\]]*\]\([^)]*\)/g, "").matchAll(/`([a-z_]+)`/g)].map((m) => m[1] ?? ""));
}

/** Every kind of decision, through the Worker, with a dataset double: the data points written. */
async function pointsOfEveryDecision(): Promise<AnalyticsEngineDataPoint[]> {
  const points: AnalyticsEngineDataPoint[] = [];
  const dataset = { writeDataPoint: (p?: AnalyticsEngineDataPoint) => p && points.push(p) };
  const e = envWith(RL, { LIMITER_ANALYTICS: dataset as AnalyticsEngineDataset, KEY_SECRET: SECRET });
  const b = crypto.getRandomValues(new Uint8Array(3));
  const ip = `10.${b[0]}.${b[1]}.${b[2]}`;
  const from = (key: string | null, path = "/", init: RequestInit = {}) => {
    const headers = new Headers(init.headers);
    headers.set("cf-connecting-ip", ip);
    return request(key, path, { ...init, headers });
  };
  const key = freshKey();
  const preflight = () =>
    from(null, "/", { method: "OPTIONS", headers: { origin: APP, "access-control-request-method": "GET" } });
  const guess = () => from(`live_${crypto.randomUUID()}`);
  const statuses = [
    await handle(from(key, "/v1/search"), e), // a key's grant, on a route
    await handle(from(key), e), // refused by the key's own limit
    await handle(from(freshKey()), e), // the address's second: granted
    await handle(from(freshKey()), e), // refused by the address's ip budget
    await handle(from(null), e), // a request without a key: its address's anonymous budget
    await handle(from(null), e), // refused by it
    await handle(guess(), e), // a key refused in the isolate: a guess, within the address's guess budget
    await handle(guess(), e), // past it
    await handle(preflight(), e), // a CORS preflight
    await handle(preflight(), e), // past its address's preflight budget
  ].map((r) => r.status);
  expect(statuses).toEqual([200, 429, 200, 429, 200, 429, 401, 429, 200, 429]);
  // An account's refusal, from another address (this one's ip budget is used up).
  const account = `acct-${crypto.randomUUID()}`;
  const other = `10.${b[0]}.${b[1]}.${(b[2] ?? 0) ^ 1}`;
  for (const expected of [200, 429]) {
    const { key: minted } = await mintKey({ KEY_SECRET: SECRET }, { name: "pro", keyPrefix: "live_" }, { account });
    const res = await handle(request(minted, "/", { headers: { "cf-connecting-ip": other } }), e);
    expect(res.status).toBe(expected);
  }
  return points;
}

describe("docs/operating.md's Analytics Engine table", () => {
  it("has one row per field the Worker writes, in order, and lists exactly the kinds and refusers it writes", async () => {
    const points = await pointsOfEveryDecision();
    const rows = documented();
    const width = (f: (p: AnalyticsEngineDataPoint) => unknown[] | undefined) =>
      Math.max(...points.map((p) => f(p)?.length ?? 0));
    const fields = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i + 1}`);
    expect([...rows.keys()]).toEqual([
      ...fields(
        "index",
        width((p) => p.indexes),
      ),
      ...fields(
        "blob",
        width((p) => p.blobs),
      ),
      ...fields(
        "double",
        width((p) => p.doubles),
      ),
    ]);
    const seen = (i: number) => new Set(points.map((p) => String(p.blobs?.[i] ?? "")).filter((v) => v !== ""));
    const configured = new Set(["default", ...RL.plans.map((p) => p.name)]);
    // blob2: the plans' names the config does not give (anonymous, guess, preflight) are listed.
    expect(listed(rows.get("blob2") ?? "")).toEqual(new Set([...seen(1)].filter((n) => !configured.has(n))));
    expect(listed(rows.get("blob3") ?? "")).toEqual(seen(2));
    expect(listed(rows.get("blob5") ?? "")).toEqual(seen(4));
    expect(listed(rows.get("blob7") ?? "")).toEqual(seen(6));
    // Each kind is what the table says it is.
    const kinds = points.map((p) => `${p.blobs?.[1]} ${p.blobs?.[4]} ${p.blobs?.[6] || "-"}`);
    expect(kinds).toEqual([
      "default key -",
      "default key key",
      "default key -",
      "default key ip",
      "anonymous ip -",
      "anonymous ip key",
      "guess guess -",
      "guess guess ip",
      "preflight preflight -",
      "preflight preflight key",
      "pro key -",
      "pro key account",
    ]);
  });
});
