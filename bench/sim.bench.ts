/**
 * @module `npm run bench:sim`: the product in a simulation shaped like production (BENCHMARKS.md,
 * "Measuring"). The real bundle's proxy app in workerd, as 12 isolates — 4 Workers sharing one
 * object namespace, 3 simulated isolates each (`sim` role, bench/http/worker.mts) — with
 * Worker→object round trips of 2, 20 and 80 ms. Open-loop Poisson arrivals on 10,000 keys drawn
 * from a Zipf distribution (s = 1.1), all on `100/1s + 1000/1m`, 80% of each key's requests to
 * its home isolate (`SIM_AFFINITY`); burst keys that stay quiet for a
 * while, then send twice their per-second limit for two seconds; an isolate vanishing every few
 * seconds with whatever it holds (a fresh one takes its place); and pass-through probes (keys of
 * an unlimited plan) through the same isolates, the reference for added latency.
 *
 * Reported per key class: object calls and rows written per grant (counted at the object), the cost
 * per million grants at the published prices, added latency against the probes of the same
 * isolates, utilisation (grants as a share of what an exact per-request limiter grants for the same
 * arrivals), and windows over N judged at the origin over real arrival times.
 *
 *   npm run bench:sim                   # ~2.5 min
 *   SIM_SECONDS=30 npm run bench:sim    # shorter, for trying things
 *   SIM_LEASES=off | SIM_AFFINITY=1 | SIM_CHURN_MS=0 | SIM_RATE=500   # the per-request path; keys that
 *                                       # stay on one isolate; no churn; another load
 *   SIM_TRACE=/tmp/trace.json npm run bench:sim   # also every object call of the burst keys, to a file, and
 *                                       # the units their leases held at each burst's first refusal
 *   SIM_BOUND=1 npm run bench:sim       # no run: the fewest calls per grant any per-isolate lease could make
 *   SIM_REGIONS=3 npm run bench:sim     # no run: 3 regions, the bound and a model of regional lease holders
 *                                       # (bench/regions-report.ts); SIM_HOLDER_CHURN_MS sets how often one vanishes

 */

import { cpus } from "node:os";
import { resolve } from "node:path";
import { KeyLog, type LimitSpec } from "../src/core/index.ts";
import { startOrigin } from "../test/support/origin.ts";
import { maxInWindow } from "../test/support/window.ts";
import type { StorageCounts } from "./http/counts.ts";
import { quantile } from "./http/load.ts";
import { startRuntime } from "./http/runtime.ts";
import { churnPlan, geography } from "./regions.ts";
import { regionsReport } from "./regions-report.ts";

const SECONDS = Number(process.env.SIM_SECONDS) || 90;
/** Zipf arrivals per second over all keys (the bursts and probes come on top). */
const RATE = Number(process.env.SIM_RATE) || 250;
const KEYS = 10_000;
const ZIPF_S = 1.1;
/** Simulated isolates: 4 Workers × 3, round trips by index within a Worker. */
const WORKERS = ["sim", "sim-2", "sim-3", "sim-4"] as const;
const RTTS = [2, 20, 80];
const ISOLATES = WORKERS.length * RTTS.length;
/** One isolate vanishes (holding whatever it holds) every this many ms (`SIM_CHURN_MS=0`: none). */
const CHURN_MS = process.env.SIM_CHURN_MS === undefined ? 3000 : Number(process.env.SIM_CHURN_MS);
/** Burst keys: quiet for 10–25 s, then twice the per-second limit for 2 s. */
const BURST_KEYS = 6;
const BURST = { rate: 200, ms: 2000, quietMinMs: 10_000, quietMaxMs: 25_000 };
/**
 * The share of a key's requests that reach its home isolate (the rest go to any isolate): an API
 * client mostly reaches one location. `SIM_AFFINITY=0` spreads every key over all isolates.
 */
const AFFINITY = process.env.SIM_AFFINITY === undefined ? 0.8 : Number(process.env.SIM_AFFINITY);
/** Pass-through probes: this share of the Zipf rate, on keys of an unlimited plan. */
const PROBE_SHARE = 0.1;
/** Published prices: $ per Durable Object request and per SQLite row written (BENCHMARKS.md). */
const PRICE = { request: 0.15e-6, row: 1e-6 };

const LIMITS: LimitSpec[] = [
  { limit: 100, windowMs: 1000 },
  { limit: 1000, windowMs: 60_000 },
];
/** `SIM_LEASES=off`: the per-request path, for comparison. */
const LEASES = process.env.SIM_LEASES !== "off";
const RATE_LIMIT = {
  limits: [
    { limit: 100, window: "1s" },
    { limit: 1000, window: "1m" },
  ],
  plans: [{ name: "probe", key_prefix: "free_", unlimited: true }],
  leases: LEASES,
};

/** A burst key's object call as the bench Worker traced it (bench/http/worker.mts, `TracedCall`), with its isolate. */
interface Traced {
  readonly key: string;
  readonly rttMs: number;
  readonly sentAt: number;
  readonly fromLog: boolean;
  readonly allowed: boolean;
  readonly cost: number;
  readonly units: number;
  readonly lifetimeMs: number;
  readonly remaining: readonly number[];
  isolate: number;
}

/**
 * `SIM_TRACE`: writes the burst keys' object calls and requests to `file`, and prints what their leases held at each
 * burst's first refusal by the object — units an isolate held unspent, or spent and not yet settled, while the
 * burst's other requests were refused: the home isolate's and the others', first leases (sized from the key's log)
 * and leases sized by the isolate's own rate.
 */
async function trace(file: string, urls: Record<string, string>, sent: readonly Sent[]): Promise<void> {
  const calls: Traced[] = [];
  for (const [w, worker] of WORKERS.entries()) {
    const list = (await (await fetch(`${urls[worker]}/__sim/trace`)).json()) as Traced[];
    for (const c of list) calls.push({ ...c, isolate: w * RTTS.length + RTTS.indexOf(c.rttMs) });
  }
  const requests = sent.filter((s) => s.key.startsWith("b_"));
  const { writeFileSync } = await import("node:fs");
  writeFileSync(file, JSON.stringify({ calls, requests }));
  const held = { home: { first: 0, sized: 0 }, other: { first: 0, sized: 0 } };
  let bursts = 0;
  for (let b = 0; b < BURST_KEYS; b++) {
    const key = `b_${b}`;
    const mine = requests.filter((s) => s.key === key);
    const counts = new Map<number, number>();
    for (const s of mine) counts.set(s.isolate, (counts.get(s.isolate) ?? 0) + 1);
    const home = [...counts.entries()].sort((x, y) => y[1] - x[1])[0]?.[0];
    const own = calls.filter((c) => c.key === `key:${key}`).sort((x, y) => x.sentAt - y.sentAt);
    let last = Number.NEGATIVE_INFINITY;
    let refusedThisBurst = true;
    for (const c of own) {
      // A burst starts after a quiet spell longer than any lease here.
      if (c.sentAt - last > BURST.quietMinMs / 2) refusedThisBurst = false;
      last = c.sentAt;
      if (refusedThisBurst || c.allowed || c.cost === 0 || c.remaining[0] !== 0) continue;
      refusedThisBurst = true;
      bursts++;
      for (const l of own) {
        if (l.units === 0 || l.sentAt > c.sentAt || l.sentAt + l.lifetimeMs <= c.sentAt) continue;
        held[l.isolate === home ? "home" : "other"][l.fromLog ? "first" : "sized"] += l.units;
      }
    }
  }
  const per = (n: number) => fmt(n / Math.max(1, bursts), 1);
  console.log(
    `
SIM_TRACE: ${calls.length} object calls of burst keys written to ${file}. At each of ${bursts} bursts' first refusal by the object, units in leases still alive, per burst: home isolate ${per(held.home.first)} (first leases) + ${per(held.home.sized)} (sized here); other isolates ${per(held.other.first)} + ${per(held.other.sized)}`,
  );
}

/** A deterministic PRNG (mulberry32), so that runs are comparable. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Planned {
  readonly at: number;
  readonly key: string;
  readonly isolate: number;
}

interface Sent {
  readonly id: number;
  readonly key: string;
  readonly isolate: number;
  /** Wall clock (ms): arrival times for the exact limiter and the origin's windows. */
  readonly sentAt: number;
  receivedAt: number;
  /** Send to answer on the monotonic clock, with sub-millisecond resolution (added latency). */
  latencyMs: number;
  status: number;
}

/** The run's arrivals, in time order: Zipf keys, bursts after quiet, probes. */
function schedule(random: () => number): Planned[] {
  const out: Planned[] = [];
  const cdf = new Float64Array(KEYS);
  let sum = 0;
  for (let k = 0; k < KEYS; k++) {
    sum += 1 / (k + 1) ** ZIPF_S;
    cdf[k] = sum;
  }
  const zipf = () => {
    const u = random() * sum;
    let lo = 0;
    let hi = KEYS - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cdf[mid] as number) < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const isolate = () => Math.floor(random() * ISOLATES);
  /** A key's isolate: its home one (fixed per key) with probability AFFINITY, else any. */
  const home = (k: number) => (random() < AFFINITY ? (k * 7919) % ISOLATES : isolate());
  /** Exponential gaps (ms) of a Poisson process at `rate` per second. */
  const gap = (rate: number) => (-Math.log(1 - random()) * 1000) / rate;
  const poisson = (rate: number, from: number, to: number, each: (t: number) => void) => {
    for (let t = from + gap(rate); t < to; t += gap(rate)) each(t);
  };
  const end = SECONDS * 1000;
  poisson(RATE, 0, end, (t) => {
    const k = zipf();
    out.push({ at: t, key: `z_${k}`, isolate: home(k) });
  });
  poisson(RATE * PROBE_SHARE, 0, end, (t) =>
    out.push({ at: t, key: `free_${Math.floor(random() * 100)}`, isolate: isolate() }),
  );
  for (let b = 0; b < BURST_KEYS; b++) {
    let t = BURST.quietMinMs * random();
    while (t < end) {
      poisson(BURST.rate, t, Math.min(end, t + BURST.ms), (at) =>
        out.push({ at, key: `b_${b}`, isolate: home(KEYS + b) }),
      );
      t += BURST.ms + BURST.quietMinMs + (BURST.quietMaxMs - BURST.quietMinMs) * random();
    }
  }
  return out.sort((a, b) => a.at - b.at);
}

/** The run: every planned arrival sent at its time (open loop), isolates churned as it goes. */
async function run(urls: readonly string[], plan: readonly Planned[], random: () => number): Promise<Sent[]> {
  const sent: Sent[] = [];
  const inFlight = new Set<Promise<void>>();
  const start = performance.now();
  const send = (p: Planned, id: number) => {
    const worker = Math.floor(p.isolate / RTTS.length);
    const t0 = performance.now();
    const s: Sent = { id, key: p.key, isolate: p.isolate, sentAt: Date.now(), receivedAt: 0, latencyMs: 0, status: 0 };
    sent.push(s);
    const done = fetch(`${urls[worker]}/r?id=${id}`, {
      headers: {
        "x-api-key": p.key,
        "x-sim-isolate": String(p.isolate % RTTS.length),
        "x-bench-rtt": String(RTTS[p.isolate % RTTS.length]),
      },
    })
      .then(async (r) => {
        await r.arrayBuffer();
        s.status = r.status;
      })
      .catch(() => {
        s.status = -1;
      })
      .finally(() => {
        s.receivedAt = Date.now();
        s.latencyMs = performance.now() - t0;
        inFlight.delete(done);
      });
    inFlight.add(done);
  };
  let next = 0;
  let churnAt = CHURN_MS;
  let churned = 0;
  while (next < plan.length) {
    const now = performance.now() - start;
    while (next < plan.length && (plan[next] as Planned).at <= now) send(plan[next] as Planned, next++);
    if (CHURN_MS > 0 && now >= churnAt) {
      churnAt += CHURN_MS;
      const i = Math.floor(random() * ISOLATES);
      const worker = Math.floor(i / RTTS.length);
      void fetch(`${urls[worker]}/__sim/churn?i=${i % RTTS.length}`, { method: "POST" }).then((r) => r.arrayBuffer());
      churned++;
    }
    await new Promise((r) => setTimeout(r, 1));
  }
  await Promise.all(inFlight);
  console.log(
    `sent ${sent.length} requests in ${((performance.now() - start) / 1000).toFixed(1)} s; ${churned} isolates vanished`,
  );
  return sent;
}

/** What the sim reads of an object's counts (bench/http/counts.ts). */
type Stats = Pick<
  StorageCounts,
  | "decides"
  | "giveBacks"
  | "rowsWritten"
  | "slotRowsWritten"
  | "metaRowsWritten"
  | "keptRowsWritten"
  | "setAlarms"
  | "leasedUnits"
  | "returnedUnits"
  | "grants"
  | "databaseSize"
>;

/** Each key's object counts, read at the end (objects are kept in memory for the run). */
async function stats(url: string, keys: readonly string[]): Promise<Map<string, Stats>> {
  const out = new Map<string, Stats>();
  for (let i = 0; i < keys.length; i += 64) {
    await Promise.all(
      keys.slice(i, i + 64).map(async (k) => {
        const r = await fetch(`${url}/__bench/stats?name=${encodeURIComponent(`key:${k}`)}`);
        out.set(k, (await r.json()) as Stats);
      }),
    );
  }
  return out;
}

/** What an exact per-request limiter grants for these send times. */
function exactGrants(times: readonly number[]): number {
  const log = new KeyLog(LIMITS);
  let n = 0;
  for (const t of times) if (log.take(t, { cost: 1 }).decision.allowed) n++;
  return n;
}

const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : "-");

/** The class of a key neither bursting nor at its limit, by its requests over the run. */
function rateClass(requests: number): string {
  const perSecond = requests / SECONDS;
  return perSecond >= 5 ? "hot (≥ 5/s)" : perSecond >= 0.5 ? "ordinary (0.5–5/s)" : "rare (< 0.5/s)";
}

/**
 * `SIM_BOUND=1`: the fewest object calls per grant any design leasing per isolate could make on this run's arrivals
 * and churn, per class, without running it. Each isolate (a vanished one's replacement is a new isolate) calls a key's
 * object at the first request it sees of the key, and that call brings a lease of as many units as it will ever need
 * for the longest lifetime (`SIM_BOUND_MS`, default the plan's 30 s): its next call is at the key's first request
 * there after that lease expired. Every request then costs a call or nothing; refills, settlements and give-backs
 * cost none. Keys at the limit are left out (near a limit no lease is that free).
 */
function bound(plan: readonly Planned[], random: () => number): void {
  const lifetimeMs = Number(process.env.SIM_BOUND_MS) || 30_000;
  const churns: { at: number; isolate: number }[] = [];
  if (CHURN_MS > 0) {
    for (let t = CHURN_MS; t < SECONDS * 1000; t += CHURN_MS)
      churns.push({ at: t, isolate: Math.floor(random() * ISOLATES) });
  }
  const generation = new Array<number>(ISOLATES).fill(0);
  const until = new Map<string, number>();
  const perKey = new Map<string, { times: number[]; calls: number }>();
  let c = 0;
  for (const p of plan) {
    for (; c < churns.length && (churns[c] as { at: number }).at <= p.at; c++) {
      const i = (churns[c] as { isolate: number }).isolate;
      generation[i] = (generation[i] as number) + 1;
    }
    if (p.key.startsWith("free_")) continue;
    const k = perKey.get(p.key) ?? { times: [], calls: 0 };
    perKey.set(p.key, k);
    k.times.push(p.at);
    const held = `${p.key}|${p.isolate}|${generation[p.isolate]}`;
    if (p.at >= (until.get(held) ?? Number.NEGATIVE_INFINITY)) {
      k.calls++;
      until.set(held, p.at + lifetimeMs);
    }
  }
  const classes = new Map<string, { grants: number; calls: number }>();
  for (const [key, k] of perKey) {
    if (key.startsWith("b_") || exactGrants(k.times) < k.times.length) continue;
    const name = rateClass(k.times.length);
    const cl = classes.get(name) ?? { grants: 0, calls: 0 };
    classes.set(name, cl);
    cl.grants += k.times.length;
    cl.calls += k.calls;
  }
  console.log(
    `SIM_BOUND: the fewest object calls per grant leasing per isolate could make (leases of ${lifetimeMs / 1000} s, as large as needed, nothing else costing a call):`,
  );
  for (const [name, cl] of classes) console.log(`  ${name}: ${fmt(cl.calls / cl.grants, 3)} (${cl.grants} grants)`);
}

async function main(): Promise<void> {
  if (process.env.SIM_REGIONS) {
    const regions = Number(process.env.SIM_REGIONS);
    if (!Number.isInteger(regions) || regions < 3) throw new Error("SIM_REGIONS: expected a whole number ≥ 3");
    const random = rng(20261124);
    const plan = schedule(random);
    const end = SECONDS * 1000;
    // The same arrivals and isolate churn as a run and SIM_BOUND; the regions' own draws from streams of their own.
    const isolateChurn = churnPlan(CHURN_MS, ISOLATES, end, random);
    const homeIsolate = (key: string) => (Number(key.slice(2)) + (key.startsWith("b_") ? KEYS : 0)) * 7919;
    const geo = geography(regions, ISOLATES, (key) => (homeIsolate(key) % ISOLATES) % regions, rng(20261125));
    /** Holders vanish as isolates do: each lives as long on average (`SIM_HOLDER_CHURN_MS` overrides). */
    const holderEvery =
      process.env.SIM_HOLDER_CHURN_MS === undefined
        ? (CHURN_MS * ISOLATES) / regions
        : Number(process.env.SIM_HOLDER_CHURN_MS);
    console.log(
      `${SECONDS} s, ${RATE}/s Zipf(${ZIPF_S}) over ${KEYS} keys, ${BURST_KEYS} burst keys, ${AFFINITY * 100}% of a key's requests to its home isolate; one isolate vanishing every ${CHURN_MS / 1000} s, one holder every ${holderEvery / 1000} s`,
    );
    const env = Object.entries(process.env).filter(([k]) => k.startsWith("SIM_"));
    regionsReport({
      plan,
      geo,
      isolateChurn,
      holderChurn: churnPlan(holderEvery, regions, end, rng(20261126)),
      limits: LIMITS,
      // The plan's lease lifetime in the model (the default plan's 30 s; at most the longest window, 60 s).
      lifetimeMs: Number(process.env.SIM_LEASE_MS) || 30_000,
      maxUnits: 1000,
      seconds: SECONDS,
      reproduce: `${env.map(([k, v]) => `${k}=${v} `).join("")}npm run bench:sim`,
    });
    return;
  }
  if (process.env.SIM_BOUND) {
    const random = rng(20261124);
    bound(schedule(random), random);
    return;
  }
  console.log(
    `machine: ${cpus().length}× ${cpus()[0]?.model ?? "?"}, Node ${process.version}; ${SECONDS} s, ${RATE}/s Zipf(${ZIPF_S}) over ${KEYS} keys, ${BURST_KEYS} burst keys, ${ISOLATES} isolates (RTT ${RTTS.join("/")} ms), ${AFFINITY * 100}% of a key's requests to its home isolate, ${CHURN_MS > 0 ? `one isolate vanishing every ${CHURN_MS / 1000} s` : "no isolate vanishing"}; leases ${LEASES ? "on" : "off"}`,
  );
  const origin = await startOrigin();
  const rt = await startRuntime({
    origin: origin.url,
    rateLimit: RATE_LIMIT,
    chartLimit: 100,
    chartWindowMs: 10_000,
    stateDir: resolve("/dev/shm"),
  });
  try {
    const random = rng(20261124);
    const plan = schedule(random);
    const sent = await run(
      WORKERS.map((w) => rt.urls[w]),
      plan,
      random,
    );
    // Background work (refills, give-backs) settles; then every key's object is read.
    await new Promise((r) => setTimeout(r, 2000));
    const byKey = new Map<string, Sent[]>();
    for (const s of sent) {
      const list = byKey.get(s.key);
      if (list) list.push(s);
      else byKey.set(s.key, [s]);
    }
    const limited = [...byKey.keys()].filter((k) => !k.startsWith("free_"));
    const counts = await stats(rt.urls.sim, limited);
    // Units the live isolates still hold unspent at the end: not stranded, they may still be spent or go back.
    const heldAtEnd = new Map<string, number>();
    for (const w of WORKERS) {
      const held = (await (await fetch(`${rt.urls[w]}/__sim/held`)).json()) as Record<string, number>;
      for (const [name, units] of Object.entries(held)) heldAtEnd.set(name, (heldAtEnd.get(name) ?? 0) + units);
    }
    if (process.env.SIM_TRACE) await trace(process.env.SIM_TRACE, rt.urls, sent);
    const arrivals = new Map<string, number[]>();
    const arrivedIds = new Set<number>();
    for (const a of origin.arrivals) {
      const k = String(a.headers["x-api-key"]);
      const id = Number(new URL(a.url, "http://x").searchParams.get("id"));
      arrivedIds.add(id);
      const list = arrivals.get(k);
      if (list) list.push(a.at);
      else arrivals.set(k, [a.at]);
    }

    // Latency of the probes per round trip: the reference for added latency.
    const latency = (list: readonly Sent[]) => list.map((s) => s.latencyMs).sort((a, b) => a - b);
    const probeByRtt = RTTS.map((_, r) =>
      latency(sent.filter((s) => s.key.startsWith("free_") && s.isolate % RTTS.length === r && s.status === 200)),
    );

    interface Class {
      keys: number;
      requests: number;
      grants: number;
      exact: number;
      calls: number;
      rows: number;
      /** Of `rows`: ring slots, `meta`, kept answers, other tables, alarms set; keys whose object wrote anything. */
      slotRows: number;
      metaRows: number;
      keptRows: number;
      alarms: number;
      writers: number;
      /** Rows of `rows` that were keys' first writes in the run: each key's first alarm and window row. */
      firstWrites: number;
      /** The objects' SQLite files at the end (bytes, summed). */
      bytes: number;
      overN: number;
      errors: number;
      mismatched: number;
      byRtt: Sent[][];
      /** Units leased to isolates, units given back (give-backs and settlements), grants the object made itself. */
      leased: number;
      returned: number;
      objectGrants: number;
      /** Units live isolates still held at the end. */
      held: number;
    }
    const classes = new Map<string, Class>();
    const classOf = (k: string, list: readonly Sent[], exact: number) => {
      if (k.startsWith("b_")) return "burst after quiet";
      if (exact < list.length) return "at the limit";
      return rateClass(list.length);
    };
    for (const k of limited) {
      const list = byKey.get(k) as Sent[];
      const times = list.map((s) => s.sentAt).sort((a, b) => a - b);
      const exact = exactGrants(times);
      const name = classOf(k, list, exact);
      let c = classes.get(name);
      if (!c) {
        c = {
          keys: 0,
          requests: 0,
          grants: 0,
          exact: 0,
          calls: 0,
          rows: 0,
          slotRows: 0,
          metaRows: 0,
          keptRows: 0,
          alarms: 0,
          writers: 0,
          firstWrites: 0,
          bytes: 0,
          overN: 0,
          errors: 0,
          mismatched: 0,
          byRtt: RTTS.map(() => []),
          leased: 0,
          returned: 0,
          objectGrants: 0,
          held: 0,
        };
        classes.set(name, c);
      }
      const grants = list.filter((s) => s.status === 200);
      c.keys++;
      c.requests += list.length;
      c.grants += grants.length;
      c.exact += exact;
      c.errors += list.filter((s) => s.status !== 200 && s.status !== 429).length;
      const st = counts.get(k);
      c.calls += (st?.decides ?? 0) + (st?.giveBacks ?? 0);
      c.rows += (st?.rowsWritten ?? 0) + (st?.setAlarms ?? 0);
      c.slotRows += st?.slotRowsWritten ?? 0;
      c.metaRows += st?.metaRowsWritten ?? 0;
      c.keptRows += st?.keptRowsWritten ?? 0;
      c.alarms += st?.setAlarms ?? 0;
      if ((st?.rowsWritten ?? 0) > 0) c.writers++;
      // A key's first write in the run: its alarm, and its window's meta row where it has one.
      c.firstWrites += ((st?.setAlarms ?? 0) > 0 ? 1 : 0) + ((st?.metaRowsWritten ?? 0) > 0 ? 1 : 0);
      c.bytes += st?.databaseSize ?? 0;
      c.leased += st?.leasedUnits ?? 0;
      c.returned += st?.returnedUnits ?? 0;
      c.objectGrants += st?.grants ?? 0;
      c.held += heldAtEnd.get(`key:${k}`) ?? 0;
      for (const s of grants) c.byRtt[s.isolate % RTTS.length]?.push(s);
      // Strictness at the origin: every window of real arrival times, shrunk by the largest send-to-arrival
      // time of the key's requests (an arrival is the request's use; its decision came before it).
      const at = (arrivals.get(k) ?? []).sort((a, b) => a - b);
      c.mismatched += Math.abs(at.length - grants.length) + grants.filter((s) => !arrivedIds.has(s.id)).length;
      const jitter = Math.max(0, ...grants.map((s) => s.receivedAt - s.sentAt));
      for (const l of LIMITS) if (maxInWindow(at, l.windowMs - jitter) > l.limit) c.overN++;
    }

    const order = ["rare (< 0.5/s)", "ordinary (0.5–5/s)", "hot (≥ 5/s)", "at the limit", "burst after quiet"];
    console.log(
      "\n| class | keys | requests | grants | utilisation (÷ exact) | object calls / grant | rows / grant | $ / M grants | added p50 / p99 ms (RTT 2 / 20 / 80) | windows over N |",
    );
    console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |");
    const summary: Record<string, { util: number; calls: number; rows: number; cost: number; p50at80: number }> = {};
    for (const name of order) {
      const c = classes.get(name);
      if (!c) continue;
      const added = RTTS.map((_, r) => {
        const own = latency(c.byRtt[r] ?? []);
        const ref = probeByRtt[r] ?? [];
        if (own.length === 0 || ref.length === 0) return { p50: Number.NaN, p99: Number.NaN };
        return { p50: quantile(own, 0.5) - quantile(ref, 0.5), p99: quantile(own, 0.99) - quantile(ref, 0.99) };
      });
      const util = c.grants / c.exact;
      const calls = c.calls / c.grants;
      const rows = c.rows / c.grants;
      const cost = (calls * PRICE.request + rows * PRICE.row) * 1e6;
      summary[name] = { util, calls, rows, cost, p50at80: added[2]?.p50 ?? Number.NaN };
      console.log(
        `| ${name} | ${c.keys} | ${c.requests} | ${c.grants} | ${fmt(util, 3)} | ${fmt(calls, 3)} | ${fmt(rows, 3)} | ${fmt(cost, 3)} | ${added.map((a) => `${fmt(a.p50, 1)} / ${fmt(a.p99, 1)}`).join(", ")} | ${c.overN}${c.errors ? ` (${c.errors} errors)` : ""}${c.mismatched ? ` (${c.mismatched} grants ≠ arrivals)` : ""} |`,
      );
    }
    console.log(
      `\nprobes (pass-through, an unlimited plan's keys) p50 / p99 ms by RTT: ${probeByRtt.map((l) => `${fmt(quantile(l, 0.5), 1)} / ${fmt(quantile(l, 0.99), 1)}`).join(", ")}`,
    );
    // Where leased units went, per class: spent (grants not made by the object), given back, still held unspent by
    // a live isolate at the end (in a lease alive, or expired and going back with the key's next call there), or
    // stranded — in an isolate that vanished: those held capacity until their record left the window.
    console.log(
      "\n| class | units leased | spent from leases | given back | held at the end (live isolates) | stranded (isolates vanished) |",
    );
    console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (const name of order) {
      const c = classes.get(name);
      if (!c || c.leased === 0) continue;
      const spent = c.grants - c.objectGrants;
      const share = (n: number) => `${n} (${fmt((100 * n) / c.leased, 1)}%)`;
      console.log(
        `| ${name} | ${c.leased} | ${share(spent)} | ${share(c.returned)} | ${share(c.held)} | ${share(c.leased - spent - c.returned - c.held)} |`,
      );
    }
    console.log(
      "rows / grant: rows the object wrote (grants, leases, give-backs, meta) plus alarms set, per grant; $ / M grants: object requests at $0.15/M and rows written at $1.00/M (duration and rows read not included)",
    );
    // What each row is for: the logs' ring slots (a grant, a lease, a settlement's move), `meta` (a budget's window,
    // quotas, controls), kept answers (calls with ids whose repeat could bill twice), other tables, and alarms set.
    // A key's first write in the run also sets its idle alarm (and writes its window's `meta` row for a window over a
    // day): a key seen again within a day writes neither again (src/object/key.ts, IDLE_KEEP_MS), so "without first
    // writes" is a rare key's grant in the steady state.
    console.log(
      "\n| class | slot rows / grant | meta / grant | kept / grant | other / grant | alarms / grant | keys written | rows / grant without each key's first alarm (and window row) | SQLite bytes per key at the end |",
    );
    console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const name of order) {
      const c = classes.get(name);
      if (!c || c.grants === 0) continue;
      const other = c.rows - c.slotRows - c.metaRows - c.keptRows - c.alarms;
      const per = (n: number) => fmt(n / c.grants, 3);
      const steady = (c.rows - c.firstWrites) / c.grants;
      console.log(
        `| ${name} | ${per(c.slotRows)} | ${per(c.metaRows)} | ${per(c.keptRows)} | ${per(other)} | ${per(c.alarms)} | ${c.writers} | ${fmt(steady, 3)} | ${fmt(c.bytes / c.keys, 0)} |`,
      );
    }
    const env = Object.entries(process.env).filter(([k]) => k.startsWith("SIM_"));
    console.log(`\nReproduce: ${env.map(([k, v]) => `${k}=${v} `).join("")}npm run bench:sim`);
    const o = summary["ordinary (0.5–5/s)"];
    if (o) {
      console.log(
        `ordinary keys: object calls per grant ${fmt(o.calls, 3)}, rows per grant ${fmt(o.rows, 3)}, $ per million grants ${fmt(o.cost, 3)}`,
      );
      console.log(`ordinary keys, 80 ms round trip: added p50 latency ${fmt(o.p50at80, 1)} ms`);
    }
    const a = summary["at the limit"];
    if (a) console.log(`keys at the limit: object calls per grant ${fmt(a.calls, 3)}`);
    const worst = Math.min(...Object.values(summary).map((s) => s.util));
    console.log(`lowest utilisation of any class: ${fmt(worst, 3)}`);
    const over = [...classes.values()].reduce((n, c) => n + c.overN, 0);
    console.log(`windows over N: ${over}`);
  } finally {
    await rt.dispose();
    await origin.close();
  }
}

await main();
