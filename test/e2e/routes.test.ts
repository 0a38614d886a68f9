// Per-route budgets over real HTTP, judged at the recording origin (docs/configuration.md, "Per-route budgets"): real clients →
// three Workers of the real proxy bundle in one workerd (three isolates sharing the RateLimiter namespace,
// test/support/workers.ts) → the origin. Clients send a key's route and its other requests at once; no window of the
// key's budget (every arrival) nor of the route's (the route's arrivals) may hold more than its N, judged at the
// origin's arrival times allowing only the measured send-to-arrival latency (test/support/window.ts), with the key's
// other requests leasing and without leases.
import { tmpdir } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { judgeWindows } from "../support/window.ts";
import { type Bundle, buildBundle, startWorkers, type Workers } from "../support/workers.ts";

/** The key's budget and the route's (1 s windows, so a few seconds hold several of each). */
const KEY = [{ limit: 80, windowMs: 1000 }];
const SEARCH = [{ limit: 9, windowMs: 1000 }];
const budgets = (leases: boolean) => ({
  limits: [{ limit: 80, window: "1s" }],
  routes: [{ name: "search", method: "POST", path: "/v1/search", limits: [{ limit: 9, window: "1s" }] }],
  leases,
});

let origin: Origin;
let bundle: Bundle;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  origin = await startOrigin();
  bundle = await buildBundle();
  cleanups.push(() => bundle.cleanup());
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
  await origin?.close();
});

async function workers(rateLimit: unknown): Promise<Workers> {
  const state = await tempDir("limiter-routes-", tmpdir());
  const w = await startWorkers({ bundle, count: 3, origin: origin.url, rateLimit, persistTo: state.path });
  cleanups.push(state.cleanup, () => w.stop());
  return w;
}

interface Sent {
  readonly id: number;
  readonly sentAt: number;
  readonly status: number;
  readonly search: boolean;
  /** A 429's `violated_policies` and `route`. */
  readonly refused?: { readonly violated: readonly string[]; readonly route: string | null };
}

let nextId = 0;

/** One request on `k`: the search route (POST) or another path (GET), with an id the origin records. */
async function send(url: string, k: string, search: boolean): Promise<Sent> {
  const id = nextId++;
  const sentAt = Date.now();
  const r = search
    ? await fetch(`${url}/v1/search?id=${id}`, { method: "POST", body: "{}", headers: { "x-api-key": k } })
    : await fetch(`${url}/v1/items?id=${id}`, { headers: { "x-api-key": k } });
  if (r.status !== 429) {
    await r.arrayBuffer();
    return { id, sentAt, status: r.status, search };
  }
  const body = (await r.json()) as { violated_policies: string[]; route?: string };
  return {
    id,
    sentAt,
    status: r.status,
    search,
    refused: { violated: body.violated_policies, route: body.route ?? null },
  };
}

describe.each([
  ["the key's other requests leasing", true],
  ["leases off", false],
])("a route's budget and the key's, three isolates, %s", (_, leases) => {
  it("no window of either budget holds more than N at the origin; every 429 names the budget that refused", async () => {
    const w = await workers(budgets(leases));
    const k = `k_${crypto.randomUUID()}`;
    const sent: Sent[] = [];
    const end = Date.now() + 3000;
    // Per isolate: two clients on the route, two on other paths, back to back.
    await Promise.all(
      w.urls.flatMap((url) =>
        [true, true, false, false].map(async (search) => {
          while (Date.now() < end) sent.push(await send(url, k, search));
        }),
      ),
    );
    expect(sent.every((s) => s.status === 200 || s.status === 429)).toBe(true);
    const arrivals = origin.arrivals
      .filter((a) => a.headers["x-api-key"] === k)
      .map((a) => ({ id: Number(new URL(a.url, "http://x").searchParams.get("id")), at: a.at, url: a.url }));
    const searched = arrivals.filter((a) => a.url.startsWith("/v1/search"));
    expect(arrivals).toHaveLength(sent.filter((s) => s.status === 200).length);
    expect(searched).toHaveLength(sent.filter((s) => s.search && s.status === 200).length);
    // Both budgets were reached: the route's refused some of its requests, the key's some of the others.
    expect(sent.filter((s) => s.search && s.status === 429).length).toBeGreaterThan(0);
    expect(searched.length).toBeGreaterThanOrEqual(SEARCH[0]?.limit ?? 0);
    const all = judgeWindows(sent, arrivals, KEY);
    const route = judgeWindows(
      sent.filter((s) => s.search),
      searched,
      SEARCH,
      all.jitter,
    );
    console.info(
      `routes e2e (leases ${leases})`,
      JSON.stringify({ requests: sent.length, arrivals: arrivals.length, searched: searched.length, ...all, route }),
    );
    for (const v of [...all.windows, ...route.windows]) expect(v.max).toBeLessThanOrEqual(v.limit);
    const refusals = sent.filter((s) => s.refused !== undefined);
    for (const s of refusals) {
      if (s.search) {
        expect(s.refused?.route).toBe("search");
        expect(s.refused?.violated.length).toBeGreaterThan(0);
        expect(s.refused?.violated.every((v) => v === "per-second" || v === "search")).toBe(true);
      } else expect(s.refused).toEqual({ violated: ["per-second"], route: null });
    }
  });
});
