// Leases over real HTTP, judged where it matters, at the recording origin: real clients → workerd → the origin. An
// isolate that sees a key often spends units its object leased to it ahead of use; the guarantee must not move: no
// window of any limit holds more than N grants judged at the origin's arrival times (allowing only the measured
// send-to-arrival latency, test/support/window.ts), with one isolate, with several isolates sharing the key's object,
// and across a restart that kills isolates holding leases.
//
// What each isolate did is observed through the test-only entry test/e2e/worker/lease-entry.ts (the real handle()
// and RateLimiter; `GET /__lease-test/stats?key=…` gives the isolate's decisions by reason, its object calls, the
// units its lease table still holds, and what the object says is left). That makes one identity checkable exactly,
// once nothing is in flight: every unit the object counts for a key was spent (a grant the origin saw) or is still
// held by an isolate — nothing lost, nothing spent twice:
//
//     arrivals at the origin + Σ units held by isolates = N − what the object says is left   (longest window)
//
// Every test runs the real bundle (built by `wrangler deploy --dry-run`) in workerd through Miniflare's API with a
// direct socket per Worker (test/support/workers.ts): one Worker is one isolate; several Workers of that bundle in
// one workerd share the RateLimiter namespace through `scriptName`, each its own isolate on its own port. Not
// `wrangler dev`: its proxy passed ~40 requests/s on this shared 2-core machine, too few to overload a key that
// leases. Object storage is on tmpfs, as in the soak and the bench.
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../support/harness.ts";
import type { KeyReport } from "../support/lease-report.ts";
import { arrivalsOf as arrivalsAt, burst, granted, load, send } from "../support/load.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { exactGrants, judgeWindows, unjustifiedDenials } from "../support/window.ts";
import { type Bundle, buildBundle, startWorkers, type Workers } from "../support/workers.ts";

const LEASES_CONFIG = "test/e2e/worker/wrangler.leases.toml";

type Spec = { limit: number; windowMs: number };
const HOT: Spec[] = [
  { limit: 200, windowMs: 2000 },
  { limit: 2000, windowMs: 60_000 },
];
/** 100/1s: a lease lives 31 ms and carries at most 6 units. */
const STEADY: Spec[] = [{ limit: 100, windowMs: 1000 }];
const STEADY_LEASE_MS = 31;
const BIG: Spec[] = [{ limit: 1000, windowMs: 60_000 }];
/** Leases on with a shorter lifetime than the default 30 s, so that the tests' runs see several. */
const RATE_LIMIT = {
  limits: [{ limit: 1000, window: "1m" }],
  leases: { enabled: true, max_lifetime: "1s" },
  plans: [
    {
      name: "hot",
      key_prefix: "hot_",
      limits: [
        { limit: 200, window: "2s" },
        { limit: 2000, window: "1m" },
      ],
    },
    { name: "steady", key_prefix: "steady_", limits: [{ limit: 100, window: "1s" }] },
    { name: "roomy", key_prefix: "roomy_", limits: [{ limit: 100_000, window: "1m" }] },
  ],
};
/** 200/2s + 2000/1m: a lease lives at most 1 s and carries at most 2 · 200 / 8 = 50 units (far below the limits). */
const HOT_LEASE_UNITS = 50;
/** 1000/1m: a lease lives at most 1 s and carries at most 2 · 1000 / 8 = 250 units (far below the limit). */
const BIG_LEASE_UNITS = 250;

let origin: Origin;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  origin = await startOrigin();
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
  await origin?.close();
});

const key = (prefix: string) => `${prefix}_${crypto.randomUUID()}`;

/** The requests on `k` that reached this file's origin. */
const arrivalsOf = (k: string) => arrivalsAt(origin, k);

async function report(url: string, k: string): Promise<KeyReport> {
  const r = await fetch(`${url}/__lease-test/stats?key=${encodeURIComponent(k)}`);
  expect(r.status).toBe(200);
  return (await r.json()) as KeyReport;
}

interface Settled {
  reports: KeyReport[];
  /** Σ units held by the isolates. */
  held: number;
  /** What the object says is left under the longest window. */
  left: number;
  arrivals: number;
}

/**
 * The key's state once nothing is in flight: waits (polling, up to 10 s) until the identity above holds —
 * background work (lease refills, returns) may still land for a moment after the last response — and returns the
 * last reading whether or not it held, for the test to assert on. `lost`: units held by isolates that are gone.
 */
async function settle(urls: readonly string[], k: string, n: number, longest: number, lost = 0): Promise<Settled> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const reports = await Promise.all(urls.map((u) => report(u, k)));
    const held = reports.reduce((sum, r) => sum + r.held, 0);
    const left = reports[0]?.remaining[longest] as number;
    const arrivals = arrivalsOf(k).length;
    if (arrivals + held + lost === n - left || Date.now() > deadline) return { reports, held, left, arrivals };
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The reports' decision counts by reason, and object calls, summed over isolates. */
function totals(reports: readonly KeyReport[]) {
  const reasons: Record<string, number> = {};
  let takes = 0;
  let giveBacks = 0;
  let leases = 0;
  let largestLease = 0;
  for (const r of reports) {
    if (!r.counts) continue;
    for (const [reason, n] of Object.entries(r.counts.reasons)) reasons[reason] = (reasons[reason] ?? 0) + n;
    takes += r.counts.takes;
    giveBacks += r.counts.giveBacks;
    leases += r.counts.leases;
    largestLease = Math.max(largestLease, r.counts.largestLease);
  }
  return { reasons, takes, giveBacks, leases, largestLease };
}

/**
 * Sustained overload on one key: strict at the origin, only 200 and 429, the origin saw exactly the grants, the
 * accounting identity holds, and leases carried grants until the key reached its limit (then the object grants
 * none for a shortest window after each refusal: at the limit it is the per-request path, for utilisation).
 */
async function overload(urls: readonly string[], clientsPerUrl: number, label: string) {
  const k = key("hot");
  const sent = await load(urls, k, clientsPerUrl, 4000);
  const arrivals = arrivalsOf(k);
  const { jitter, windows } = judgeWindows(sent, arrivals, HOT);
  const s = await settle(urls, k, 2000, 1);
  const t = totals(s.reports);
  const grants = granted(sent);
  console.info(
    label,
    JSON.stringify({ requests: sent.length, grants, jitter, windows, held: s.held, left: s.left, ...t }),
  );
  expect(sent.filter((x) => x.status !== 200 && x.status !== 429)).toEqual([]);
  expect(sent.length).toBeGreaterThan(grants);
  expect(arrivals.length).toBe(grants);
  for (const w of windows) expect(w.max).toBeLessThanOrEqual(w.limit);
  expect(s.arrivals + s.held).toBe(2000 - s.left);
  // Where the grants came from: every 200 is either spent from a lease or decided by the object itself.
  expect((t.reasons.leased ?? 0) + (t.reasons.granted ?? 0)).toBe(grants);
  expect(t.reasons.leased ?? 0).toBeGreaterThan(0);
  expect(t.largestLease).toBeLessThanOrEqual(HOT_LEASE_UNITS);
  return { k, sent, grants };
}

let bundle: Bundle;
/** Object storage on tmpfs when there is one, as in the soak and the bench: fsync on this VM's disk stalls objects. */
const STATE_BASE = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();

beforeAll(async () => {
  bundle = await buildBundle(LEASES_CONFIG);
  cleanups.push(bundle.cleanup);
});

/** Starts `count` Workers (isolates) on a fresh state directory; stopped and removed after the file. */
async function start(count: number): Promise<{ workers: Workers; persistTo: string }> {
  const state = await tempDir("limiter-leases-", STATE_BASE);
  cleanups.push(state.cleanup);
  const workers = await startWorkers({
    bundle,
    count,
    origin: origin.url,
    rateLimit: RATE_LIMIT,
    persistTo: state.path,
  });
  cleanups.push(() => workers.stop());
  return { workers, persistTo: state.path };
}

describe("one isolate", () => {
  let limiter: { url: string };

  beforeAll(async () => {
    const { workers } = await start(1);
    limiter = { url: workers.urls[0] as string };
  });

  it("sustained overload from 8 clients on one key: strict, exact accounting, leases until the limit", async () => {
    await overload([limiter.url], 8, "one isolate, overload");
  });

  it("utilisation under steady overload: at least 95% of what an exact per-request limiter grants", async () => {
    const k = key("steady");
    const sent = await load([limiter.url], k, 8, 5000);
    const grants = granted(sent);
    const { jitter, windows } = judgeWindows(sent, arrivalsOf(k), STEADY);
    const exact = exactGrants(
      sent.map((s) => s.sentAt),
      STEADY,
    );
    // For reference only: denials no timing could justify (window.ts), without and with one lease lifetime of
    // slack. Not asserted: a lease that expires unused while the isolate stalls for longer than its 31 ms lifetime
    // (common on this shared machine) still counts at the object until its units are given back, and a denial
    // meanwhile cannot be justified from use times alone. The exact replay over several windows is the measure.
    const unjustified = unjustifiedDenials(sent, STEADY).length;
    const unjustifiedWithSlack = unjustifiedDenials(sent, STEADY, STEADY_LEASE_MS).length;
    const t = totals([await report(limiter.url, k)]);
    console.info(
      "one isolate, utilisation",
      JSON.stringify({
        requests: sent.length,
        grants,
        exact,
        ratio: grants / exact,
        jitter,
        windows,
        unjustified,
        unjustifiedWithSlack,
        ...t,
      }),
    );
    expect(sent.filter((x) => x.status !== 200 && x.status !== 429)).toEqual([]);
    expect(sent.length).toBeGreaterThan(2 * exact);
    for (const w of windows) expect(w.max).toBeLessThanOrEqual(w.limit);
    expect(t.leases).toBeGreaterThan(0);
    expect(grants).toBeGreaterThanOrEqual(0.95 * exact);
  });

  it("a busy key under its limits: almost every grant spent from a lease, few object calls", async () => {
    const k = key("roomy");
    const sent = await load([limiter.url], k, 8, 2000);
    const s = await settle([limiter.url], k, 100_000, 0);
    const t = totals(s.reports);
    const grants = granted(sent);
    console.info(
      "one isolate, busy key",
      JSON.stringify({ grants, ...t, callsPerGrant: (t.takes + t.giveBacks) / grants, held: s.held }),
    );
    expect(grants).toBe(sent.length);
    expect(arrivalsOf(k)).toHaveLength(grants);
    expect(s.arrivals + s.held).toBe(100_000 - s.left);
    expect(t.reasons.leased ?? 0).toBeGreaterThan(0.9 * grants);
    expect(t.takes + t.giveBacks).toBeLessThan(0.1 * grants);
  });
});

describe("several isolates (Workers of one bundle in one workerd, one object namespace)", () => {
  const ISOLATES = 3;
  let persistTo: string;
  let workers: Workers;

  beforeAll(async () => {
    ({ workers, persistTo } = await start(ISOLATES));
  });

  it("each Worker is its own isolate, and they share the key's object", async () => {
    const k = key("hot");
    for (const url of workers.urls) expect((await send(url, k)).status).toBe(200);
    const reports = await Promise.all(workers.urls.map((u) => report(u, k)));
    expect(new Set(reports.map((r) => r.isolate)).size).toBe(ISOLATES);
    // Three grants on one object: each isolate sees what the others took.
    expect(reports.map((r) => r.remaining[1])).toEqual([1997, 1997, 1997]);
  });

  it("overload spread across the isolates: strict over all arrivals together, exact accounting, leases until the limit", async () => {
    await overload(workers.urls, 4, "three isolates, overload");
  });

  it("bursts across isolates grant at most what is left, exactly what is left minus units still held", async () => {
    const k = key("big");
    // Each isolate uses part of the key, leasing ahead as it goes.
    const before = await load(workers.urls, k, 2, 400);
    const s0 = await settle(workers.urls, k, 1000, 0);
    expect(s0.arrivals + s0.held).toBe(1000 - s0.left);
    // Then every isolate at once asks for more than the key has left.
    const perUrl = Math.ceil((1000 - granted(before)) / ISOLATES) + 50;
    const sent = await burst(workers.urls, k, perUrl);
    const grants = granted(sent);
    const s1 = await settle(workers.urls, k, 1000, 0);
    const t0 = totals(s0.reports);
    const t1 = totals(s1.reports);
    const givenBack = s1.reports.reduce((n, r) => n + (r.counts?.givenBackUnits ?? 0), 0);
    console.info(
      "bursts across isolates",
      JSON.stringify({
        before: granted(before),
        heldBefore: s0.held,
        leftBefore: s0.left,
        burst: sent.length,
        grants,
        heldAfter: s1.held,
        leftAfter: s1.left,
        givenBack,
        leasesInBurst: t1.leases - t0.leases,
        leasedInBurst: (t1.reasons.leased ?? 0) - (t0.reasons.leased ?? 0),
      }),
    );
    expect(sent.filter((x) => x.status !== 200 && x.status !== 429)).toEqual([]);
    expect(arrivalsOf(k)).toHaveLength(granted(before) + grants);
    // At most what the key had left (units the isolates held are part of it), never over N in all.
    expect(grants).toBeLessThanOrEqual(1000 - granted(before));
    expect(granted(before) + grants).toBeLessThanOrEqual(1000);
    // Exactly what it had left, minus what isolates still hold, minus what the object still has (returned units
    // only: the burst asked for more than there was).
    expect(s1.arrivals + s1.held).toBe(1000 - s1.left);
    expect(grants).toBe(1000 - granted(before) - s1.held - s1.left);
    expect(s1.left).toBeLessThanOrEqual(givenBack);
    // Leases happened (before the burst at least: near its limit, the key's leases stay within half of its
    // headroom, which the units already ahead may fill), and none was larger than 1/4 of the limit.
    expect(t1.leases).toBeGreaterThan(0);
    expect(t1.largestLease).toBeLessThanOrEqual(BIG_LEASE_UNITS);
    const { windows } = judgeWindows([...before, ...sent], arrivalsOf(k), BIG);
    for (const w of windows) expect(w.max).toBeLessThanOrEqual(w.limit);
  });

  it("a restart while leases are out: units held by the dead isolates count, nothing more is granted", async () => {
    const k = key("big");
    const before = await load(workers.urls, k, 2, 300);
    // Make sure some isolate holds units when the runtime goes (it usually does after the load above).
    let s0 = await settle(workers.urls, k, 1000, 0);
    for (let i = 0; s0.held === 0 && i < 20; i++) {
      before.push(...(await burst(workers.urls, k, 5)));
      s0 = await settle(workers.urls, k, 1000, 0);
    }
    const grantedBefore = granted(before);
    expect(s0.held).toBeGreaterThan(0);
    expect(s0.arrivals).toBe(grantedBefore);
    expect(s0.arrivals + s0.held).toBe(1000 - s0.left);

    await workers.stop();
    workers = await startWorkers({ bundle, count: ISOLATES, origin: origin.url, rateLimit: RATE_LIMIT, persistTo });
    cleanups.push(() => workers.stop());

    // New isolates: nothing held. The object, rebuilt from storage, still counts the dead isolates' units.
    const fresh = await Promise.all(workers.urls.map((u) => report(u, k)));
    expect(fresh.map((r) => r.held)).toEqual([0, 0, 0]);
    expect(fresh[0]?.remaining[0]).toBe(s0.left);

    // Every isolate at once asks for more than the key had left before the restart.
    const after = await burst(workers.urls, k, Math.ceil((1000 - grantedBefore) / ISOLATES) + 50);
    const grantsAfter = granted(after);
    const s1 = await settle(workers.urls, k, 1000, 0, s0.held);
    console.info(
      "restart with leases out",
      JSON.stringify({ grantedBefore, heldByDead: s0.held, grantsAfter, heldAfter: s1.held, leftAfter: s1.left }),
    );
    expect(after.filter((x) => x.status !== 200 && x.status !== 429)).toEqual([]);
    // Never more than the key had left, the dead isolates' units included (they count until they leave the window)…
    expect(grantsAfter).toBeLessThanOrEqual(1000 - grantedBefore - s0.held);
    // …and exactly that, minus what the new isolates hold and returned units the object still has.
    expect(s1.arrivals + s1.held + s0.held).toBe(1000 - s1.left);
    expect(grantsAfter).toBe(1000 - grantedBefore - s0.held - s1.held - s1.left);
    expect(arrivalsOf(k)).toHaveLength(grantedBefore + grantsAfter);
    const { windows } = judgeWindows([...before, ...after], arrivalsOf(k), BIG);
    for (const w of windows) expect(w.max).toBeLessThanOrEqual(w.limit);
  });
});

// Found by this test and by `npm run soak` with leases on: after ~13 s of mixed load workerd answered plain `500`s
// and logged "Cannot perform I/O on behalf of a different request" / "A promise was resolved or rejected from a
// different request context": requests awaited the key's in-flight lease call, a promise another request made.
// src/worker.ts now waits on each request's own timer instead. The product's own bundle (src/index.ts,
// wrangler.toml) in one isolate, 32 clients for 20 s, half the traffic on a leasing key (200/1s + 5000/1m) and one
// small key, the rest on 198 small keys (5/1s + 30/10s, never leased).
describe("long mixed load on the product's own bundle", () => {
  it("only 200 and 429 over 20 s of mixed load with leases on", async () => {
    const product = await buildBundle("wrangler.toml");
    cleanups.push(product.cleanup);
    const state = await tempDir("limiter-leases-mixed-", STATE_BASE);
    cleanups.push(state.cleanup);
    const rateLimit = {
      limits: [
        { limit: 5, window: "1s" },
        { limit: 30, window: "10s" },
      ],
      plans: [
        {
          name: "hot",
          key_prefix: "mixed_hot_",
          limits: [
            { limit: 200, window: "1s" },
            { limit: 5000, window: "1m" },
          ],
        },
      ],
    };
    const workers = await startWorkers({
      bundle: product,
      count: 1,
      origin: origin.url,
      rateLimit,
      persistTo: state.path,
    });
    cleanups.push(() => workers.stop());
    const url = workers.urls[0] as string;
    const statuses = new Map<number, number>();
    const end = Date.now() + 20_000;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (Date.now() < end) {
          const i = Math.random() < 0.5 ? Math.floor(Math.random() * 2) : Math.floor(Math.random() * 200);
          const r = await fetch(`${url}/mixed`, { headers: { "x-api-key": i === 0 ? "mixed_hot_0" : `mixed_${i}` } });
          await r.arrayBuffer();
          statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        }
      }),
    );
    const errors = workers
      .output()
      .split("\n")
      .filter((l) => /different request|had hung/.test(l)).length;
    console.info("long mixed load", JSON.stringify({ statuses: Object.fromEntries(statuses), errors }));
    expect([...statuses.keys()].filter((s) => s !== 200 && s !== 429)).toEqual([]);
  });
});
