/**
 * @module `npm run bench`: the whole HTTP path side by side in one run, driven by autocannon:
 * the origin directly, a pass-through Worker, the limiter allowed with leases on and off (1000
 * keys, one hot key, three isolates on one hot key), denied with and without the deny cache,
 * Cloudflare's rate-limit binding as Miniflare simulates it, and a token bucket and a fixed
 * window in a Durable Object. Then: latency with a simulated Worker→object round trip, object
 * calls and rows written per allowed request (and their price), utilisation under steady
 * overload, and the grants chart (docs/grants.svg). See BENCHMARKS.md, "HTTP path".
 *
 *   npm run bench                 # ~10 min
 *   BENCH_QUICK=1 npm run bench   # shorter runs, for trying things
 */

import { execSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { KeyLog } from "../src/core/index.ts";
import { mintKey } from "../src/pipeline/signed.ts";
import { cpuMs } from "../test/support/proc.ts";
import { maxInWindow } from "../test/support/window.ts";
import { grantsSvg } from "./http/chart.ts";
import { emptyCounts, type StorageCounts } from "./http/counts.ts";
import { type LoadResult, load, loadAll, paced, quantile } from "./http/load.ts";
import { type BenchOrigin, startBenchOrigin } from "./http/origin.ts";
import { type Runtime, startRuntime } from "./http/runtime.ts";

const ROOT = resolve(import.meta.dirname, "..");
const QUICK = process.env.BENCH_QUICK === "1";
const ROUNDS = Number(process.env.BENCH_ROUNDS) || (QUICK ? 2 : 3);
const SECONDS = QUICK ? 2 : 3;
const LATENCY_SECONDS = QUICK ? 1 : 3;
const CONNECTIONS = 8;
const LATENCY_RATE = 250;
const KEYS = 1000;
/**
 * `BENCH_ONLY=allowed,floor npm run bench`: only these targets (and the pass-through), no chart; the storage count
 * only when `count` is among them, the service count (two Workers sharing one `LimiterService`) when `svccount` is.
 */
const ONLY = process.env.BENCH_ONLY?.split(",") ?? null;
/** `BENCH_BASELINE=<git rev> npm run bench`: the product as of that revision too, side by side ("before", "beforehot", and its own pass-through "beforepass"). */
const BASELINE = process.env.BENCH_BASELINE || undefined;
const CHART = { limit: 100, windowMs: 10_000, rate: 200, durationMs: QUICK ? 12_000 : 25_000, binMs: 100 };
/** Steady overload for utilisation: 2× the limit rate (leases as the product sizes them). */
const UTIL = { limit: 1000, windowMs: 10_000, rate: 200, durationMs: QUICK ? 12_000 : 25_000 };
/** Simulated Worker→object round trips (ms), and the fixed rate and connections of those runs. */
const RTTS = [0, 10, 50];
const DIST_RATE = 200;
const DIST_SECONDS = QUICK ? 1 : 2;
/** Published prices (BENCHMARKS.md, "Cost per million requests"): $ per Durable Object request and per row written. */
const PRICE = { request: 0.15e-6, row: 1e-6 };
/** Requests to one hot key when counting object calls and rows (all answered before counting). */
const HOT_AMOUNT = QUICK ? 2000 : 5000;

/**
 * Limits high enough that every request passes (the hot keys); `o_` keys: ordinary limits (the
 * 1,000-key rows); `m_` keys: one per-minute limit; `deny_` keys: 1 per hour; `chart_`
 * keys: the chart's limit; `util_` keys: the utilisation run's. Leases on (the default) except in
 * the Workers that turn them off (bench/http/runtime.ts).
 */
const RATE_LIMIT = {
  limits: [
    { limit: 1_000_000, window: "1s" },
    { limit: 100_000_000, window: "1m" },
  ],
  plans: [
    { name: "minute", key_prefix: "m_", limits: [{ limit: 100_000_000, window: "1m" }] },
    // Ordinary keys (the 1,000-key rows): about 2 requests a second each, far below both limits.
    {
      name: "ordinary",
      key_prefix: "o_",
      limits: [
        { limit: 100, window: "1s" },
        { limit: 1000, window: "1m" },
      ],
    },
    { name: "deny", key_prefix: "deny_", limits: [{ limit: 1, window: "1h" }] },
    { name: "chart", key_prefix: "chart_", limits: [{ limit: CHART.limit, window: CHART.windowMs }] },
    { name: "util", key_prefix: "util_", limits: [{ limit: UTIL.limit, window: UTIL.windowMs }] },
    // The pass-through reference: the product's own path for a key it never limits (no object call).
    { name: "free", key_prefix: "free_", unlimited: true },
    // Signed keys (issue 50.6): the hot key's limits and the ordinary keys', each key minted and proven in the isolate.
    // Left out when a baseline runs: its RATE_LIMIT is the same, and a revision before signed keys refuses `signed`.
    ...(BASELINE
      ? []
      : [
          {
            name: "signed",
            key_prefix: "signed_",
            signed: true,
            limits: [
              { limit: 1_000_000, window: "1s" },
              { limit: 100_000_000, window: "1m" },
            ],
          },
          {
            name: "signedo",
            key_prefix: "signedo_",
            signed: true,
            limits: [
              { limit: 100, window: "1s" },
              { limit: 1000, window: "1m" },
            ],
          },
        ]),
  ],
};

/** The product's `KEY_SECRET` (the signed plans' keys are minted with it here). */
const KEY_SECRET = "bench-key-secret";

/**
 * Keys minted for the signed plan `plan` (prefix `prefix`): one hot key, and sets of {@link KEYS} young keys, a fresh
 * set for each slice (minted ahead: a slice must not wait for them).
 */
async function mintedKeys(plan: string, prefix: string, sets: number): Promise<string[][]> {
  const env = { KEY_SECRET };
  const mint = () => mintKey(env, { name: plan, keyPrefix: prefix }).then((m) => m.key);
  return Promise.all(Array.from({ length: sets }, () => Promise.all(Array.from({ length: KEYS }, mint))));
}

/**
 * State on tmpfs when there is one (see BENCHMARKS.md: this VM's disk fsync is not Cloudflare's storage);
 * `BENCH_STATE_DIR=/tmp npm run bench` puts it on disk instead.
 */
const STATE_DIR = process.env.BENCH_STATE_DIR ?? (existsSync("/dev/shm") ? "/dev/shm" : tmpdir());

interface Target {
  readonly id: string;
  readonly label: string;
  /** Several URLs: the load is spread over them (several isolates). */
  readonly url: () => string | string[];
  /** The workerd serving it (for CPU per request; default: the main runtime's); null for the origin. */
  readonly pid?: () => number | null;
  readonly key: string | ((i: number) => string);
  /** The status every response must have, else the run is not what it claims to be. */
  readonly expect: number;
  /** Keys that see steady traffic in production: warmed up to steady state before each slice. */
  readonly steady?: boolean;
  /**
   * Young keys (issue 40): no warm-up, and before each slice a fresh set of keys (`fresh()`) that the slice, this many
   * seconds long, sees for the first time — as an isolate meets keys in production.
   */
  readonly young?: { readonly seconds: number; readonly fresh: () => void };
  /** The target whose workerd CPU per request this one is compared with (default: the pass-through). */
  readonly ref?: string;
}

/**
 * Before each measured slice: ordinary keys (`o_`) get {@link STEADY_WARMUP_S} of the same load first, as in
 * production, where such a key is seen about once a second for minutes: an isolate's lease for a key grows with how
 * long it has watched the key (up to the plan's 30 s lease, capped at 1/4 of the smallest limit far below every
 * limit), so at ~1–2 requests a second its leases reach steady state after 15–30 s. Other 1000-key targets get
 * enough requests to touch every key twice; one key a second.
 */
const STEADY_WARMUP_S = QUICK ? 15 : 30;
/** The ordinary keys' object calls and rows are counted over this long (s): each key's lease calls are 15–30 s apart. */
const COUNT_SECONDS = QUICK ? 5 : 10;
const warmUp = (t: Target) =>
  t.steady ? { duration: STEADY_WARMUP_S } : typeof t.key === "function" ? { amount: 2 * KEYS } : { duration: 1 };
const urlsOf = (t: Target) => [t.url()].flat();

/**
 * 1,000 keys in random order, a fresh set (a new prefix) after each `fresh()`: every slice meets its keys for the first
 * time, no warm-up. Targets sharing one `youngKeys` see the same keys' names, but each in its own objects.
 */
function youngKeys(prefix: string): { key: () => string; fresh: () => void } {
  let generation = 0;
  let next = scatteredKeys(`${prefix}${generation}_`);
  return {
    key: () => next(),
    fresh: () => {
      generation += 1;
      next = scatteredKeys(`${prefix}${generation}_`);
    },
  };
}

/** How long a young-keys slice lasts (s): each of its 1,000 keys is seen for about this long. */
const YOUNG_SECONDS = QUICK ? 5 : 10;

/** A target on 1,000 young keys (`prefix` names the plan they fall in): fresh ones each slice, no warm-up. */
function youngTarget(id: string, label: string, url: () => string, prefix: string): Target {
  const keys = youngKeys(prefix);
  return { id, label, url, key: keys.key, expect: 200, young: { seconds: YOUNG_SECONDS, fresh: keys.fresh } };
}

const manyKeys = (prefix: string) => (i: number) => `${prefix}${i % KEYS}`;

/**
 * Ordinary keys in random order (a fixed seed): each key's requests arrive at random, as in
 * production, so its leases run out at its own times. In turn (`manyKeys`) every key would be
 * at the same point of its lease at once, and a few seconds' slice could see no lease call at all.
 */
const scatteredKeys = (prefix: string) => {
  let seed = 0x9e3779b9;
  return () => {
    // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return `${prefix}${Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * KEYS)}`;
  };
};

const verdict = (ok: boolean) => (ok ? "MET" : "MISSED");

function fmt(n: number, digits = 0): string {
  return Number.isFinite(n) ? n.toFixed(digits) : "-";
}
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2
    ? (s[(s.length - 1) / 2] as number)
    : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};

function otherWorkerd(): string {
  try {
    const out = execSync("ps -eo pid,pcpu,args | grep '[w]orkerd serve' || true").toString().trim();
    return out ? `${out.split("\n").length} workerd process(es) running at start (incl. this bench's)` : "none";
  } catch {
    return "unknown";
  }
}

async function main(): Promise<void> {
  const started = performance.now();
  console.log(
    `machine: ${cpus().length}× ${cpus()[0]?.model ?? "?"}, Node ${process.version}; Durable Object state in ${STATE_DIR}`,
  );
  const origin: BenchOrigin = await startBenchOrigin();
  let rt: Runtime | null = null;
  try {
    rt = await startRuntime({
      origin: origin.url,
      rateLimit: RATE_LIMIT,
      chartLimit: CHART.limit,
      chartWindowMs: CHART.windowMs,
      stateDir: STATE_DIR,
      baseline: BASELINE,
      keySecret: KEY_SECRET,
    });
    console.log(`workerd: ${otherWorkerd()}; this bench's: pid ${(rt as Runtime).pid}`);
    const u = (rt as Runtime).urls;
    const all: Target[] = [
      {
        id: "origin",
        label: "(1) origin directly",
        url: () => origin.url,
        pid: () => null,
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "pass",
        label: "(2) pass-through: the product, a key of an unlimited plan",
        url: () => u.product,
        key: manyKeys("free_"),
        expect: 200,
      },
      {
        id: "bare",
        label: "(2b) bare proxy Worker (config parse and proxy, none of the product's request path)",
        url: () => u.pass,
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "floor",
        label: "(2) + a no-op Durable Object call, 1000 keys",
        url: () => u.floor,
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "floorhot",
        label: "(2) + a no-op Durable Object call, one hot key",
        url: () => u.floor,
        key: "hot",
        expect: 200,
      },
      {
        id: "standin",
        label: "(3) limiter's Worker, in-isolate stand-in object",
        url: () => u["stand-in"],
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "allowed",
        label: "(3) limiter, leases on, allowed, 1000 ordinary keys (100/1s + 1000/1m)",
        url: () => u.product,
        key: scatteredKeys("o_"),
        expect: 200,
        steady: true,
      },
      youngTarget(
        "allowedyoung",
        "(3) limiter, leases on, allowed, 1000 young ordinary keys (no warm-up)",
        () => u.product,
        "o_y",
      ),
      {
        id: "hot",
        label: "(3) limiter, leases on, allowed, one hot key",
        url: () => u.product,
        key: "hot",
        expect: 200,
      },
      {
        id: "gwpass",
        label: "(2g) pass-through through the gateway (operator's header from a secret, key removed, identity set)",
        url: () => u["product-gw"],
        key: manyKeys("free_"),
        expect: 200,
      },
      {
        id: "gwhot",
        label: "(3g) limiter through the gateway, leases on, allowed, one hot key",
        url: () => u["product-gw"],
        key: "hot",
        expect: 200,
        ref: "hot",
      },
      {
        id: "hotm",
        label: "(3) limiter, leases on, allowed, one hot key, 1 min limit",
        url: () => u.product,
        key: "m_hot",
        expect: 200,
      },
      {
        id: "hot3",
        label: "(3) limiter, leases on, allowed, one hot key, 3 isolates",
        url: () => [u.product, u["product-2"], u["product-3"]],
        key: "hot3",
        expect: 200,
      },
      {
        id: "allowedoff",
        label: "(3) limiter, leases off, allowed, 1000 ordinary keys",
        url: () => u["product-off"],
        key: scatteredKeys("o_"),
        expect: 200,
        steady: true,
      },
      {
        id: "hotoff",
        label: "(3) limiter, leases off, allowed, one hot key",
        url: () => u["product-off"],
        key: "hot",
        expect: 200,
      },
      {
        id: "denied",
        label: "(4) limiter, denied, deny cache",
        url: () => u.product,
        key: "deny_hot",
        expect: 429,
      },
      {
        id: "deniednc",
        label: "(4) limiter, denied, no deny cache",
        url: () => u.nocache,
        key: "deny_hot",
        expect: 429,
      },
      {
        id: "native",
        label: "(5) native binding (Miniflare), 1000 keys",
        url: () => u.native,
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "tb",
        label: "(5) token bucket DO, 1000 keys",
        url: () => u.tokenbucket,
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "fw",
        label: "(5) fixed window DO, 1000 keys",
        url: () => u.fixedwindow,
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "tbhot",
        label: "(5) token bucket DO, one hot key",
        url: () => u.tokenbucket,
        key: "hot",
        expect: 200,
      },
    ];
    // A hono user's choice (issue 40): this package's middleware against hono-rate-limiter's Durable Object store,
    // with the bare handler as the reference, on young keys (1,000 met for the first time each slice) and a hot key.
    const young = (id: string, label: string, url: () => string, prefix: string): Target => ({
      ...youngTarget(id, label, url, prefix),
      ref: "honobare",
    });
    all.push(
      { id: "honobare", label: "(6) hono, bare handler", url: () => u["hono-bare"], key: "hot", expect: 200 },
      young("honoours", "(6) hono + this middleware, leases on, 1000 young keys", () => u["hono-ours"], "y_"),
      young("honooursoff", "(6) hono + this middleware, leases off, 1000 young keys", () => u["hono-ours-off"], "yo_"),
      young("honopeer", "(6) hono + hono-rate-limiter DO store, 1000 young keys", () => u["hono-peer"], "yp_"),
      {
        id: "honooursh",
        label: "(6) hono + this middleware, leases on, hot key",
        url: () => u["hono-ours"],
        key: "hot",
        expect: 200,
        ref: "honobare",
      },
      {
        id: "honopeerh",
        label: "(6) hono + hono-rate-limiter DO store, hot key",
        url: () => u["hono-peer"],
        key: "hot",
        expect: 200,
        ref: "honobare",
      },
      // Leases off: one object call per request, as the peer makes (issue 48: the call itself at parity).
      {
        id: "honooursoffh",
        label: "(6) hono + this middleware, leases off, hot key",
        url: () => u["hono-ours-off"],
        key: "hot",
        expect: 200,
        ref: "honobare",
      },
      // 1,000 keys in random order, the same keys slice after slice (re-seen, not fresh): what a new user tries first.
      ...(
        [
          ["honooursseen", "leases on", "hono-ours", "s_"],
          ["honooursoffseen", "leases off", "hono-ours-off", "so_"],
          ["honopeerseen", "", "hono-peer", "sp_"],
        ] as const
      ).map(([id, leases, role, prefix]) => ({
        id,
        label: `(6) hono + ${role === "hono-peer" ? "hono-rate-limiter DO store" : `this middleware, ${leases}`}, 1000 keys re-seen`,
        url: () => u[role],
        key: scatteredKeys(prefix),
        expect: 200,
        ref: "honobare",
      })),
    );
    // One library limiter in the Worker that serves the request, against the same limiter over a service binding
    // (issue 60: `limiter.service()`), each answering from the same handler; the bare hono handler as the reference.
    all.push(
      ...(
        [
          ["svcinh", "in-process, hot key", "svc-inproc", "hot", "honobare"],
          ["svcremoteh", "over a service binding, hot key", "svc-remote", "hot", "svcinh"],
          ["svcin", "in-process, 1000 keys re-seen", "svc-inproc", scatteredKeys("vi_"), "honobare"],
          ["svcremote", "over a service binding, 1000 keys re-seen", "svc-remote", scatteredKeys("vr_"), "svcin"],
        ] as const
      ).map(([id, label, role, key, ref]) => ({
        id,
        label: `(7) library limiter ${label}`,
        url: () => u[role],
        key,
        expect: 200,
        ref,
      })),
    );
    if (!BASELINE) {
      // A valid signed key on the hot path (its proof checked once per isolate, then remembered) beside the unsigned
      // hot key of the same limits; 1,000 young signed keys (each proven on first sight) beside 1,000 young unsigned.
      const [hotSet = []] = await mintedKeys("signed", "signed_", 1);
      const young = await mintedKeys("signedo", "signedo_", 4 * ROUNDS + 2);
      let set = 0;
      let at = 0;
      const hotKey = hotSet[0] as string;
      all.push(
        {
          // An unsigned key as long as the signed one (the default plan's, as "hot"): what the key's length costs.
          id: "hotlong",
          label: "(3) limiter, unsigned key as long as a signed one, one hot key",
          url: () => u.product,
          key: `hot${"x".repeat(hotKey.length - 3)}`,
          expect: 200,
          ref: "hot",
        },
        {
          id: "signedhot",
          label: "(3) limiter, signed key, one hot key",
          url: () => u.product,
          key: hotSet[0] as string,
          expect: 200,
          ref: "hot",
        },
        {
          id: "signedyoung",
          label: "(3) limiter, 1000 young signed ordinary keys (no warm-up)",
          url: () => u.product,
          key: () => (young[set % young.length] as string[])[at++ % KEYS] as string,
          expect: 200,
          young: {
            seconds: YOUNG_SECONDS,
            fresh: () => {
              set += 1;
              at = 0;
            },
          },
          ref: "allowedyoung",
        },
      );
    }
    if (u.baseline) {
      const at = u.baseline;
      all.push(
        {
          id: "before",
          label: `(3) limiter at ${BASELINE}, allowed, 1000 keys`,
          url: () => at,
          key: manyKeys("k"),
          expect: 200,
        },
        {
          id: "beforehot",
          label: `(3) limiter at ${BASELINE}, allowed, one hot key`,
          url: () => at,
          key: "hot",
          expect: 200,
        },
        youngTarget("beforeyoung", `(3) limiter at ${BASELINE}, allowed, 1000 young ordinary keys`, () => at, "o_b"),
        {
          // The baseline's own pass-through: its hot key's ratio, measured in the same run.
          id: "beforepass",
          label: `(2) pass-through at ${BASELINE}`,
          url: () => at,
          key: manyKeys("free_"),
          expect: 200,
        },
      );
    }
    const targets = ONLY ? all.filter((t) => t.id === "pass" || ONLY.includes(t.id)) : all;

    // Warm-up: every target, every key (creates the 1000 objects per namespace), first denial made; not young keys.
    for (const t of targets) {
      if (t.young) continue;
      await loadAll(urlsOf(t), { duration: QUICK ? 1 : 2, connections: CONNECTIONS, key: t.key });
    }

    const rps = new Map<string, number[]>();
    const sat = new Map<string, LoadResult[]>();
    const cpu = new Map<string, number[]>();
    const lat = new Map<string, number[]>();
    /** Per round, fixed-rate p99 of (3) allowed, 1000 keys minus that of (2) pass-through (ms). */
    const addedP99ByRound: number[] = [];
    /** Per-round ratios of req/s: [label, numerator id, denominator id]. */
    const RATIOS = [
      ["(3) allowed, 1000 keys / (2) pass-through", "allowed", "pass"],
      ["(3) allowed, hot key / (2) pass-through", "hot", "pass"],
      ["(3) allowed, hot key, 1 min limit / (2) pass-through", "hotm", "pass"],
      ["(3) allowed, hot key, 3 isolates / (2) pass-through", "hot3", "pass"],
      ["(3) leases off, 1000 keys / (2) pass-through", "allowedoff", "pass"],
      ["(3) leases off, hot key / (2) pass-through", "hotoff", "pass"],
      ["(3) leases on / off, 1000 keys", "allowed", "allowedoff"],
      ["(3) leases on / off, hot key", "hot", "hotoff"],
      ["(2g) gateway / (2) pass-through", "gwpass", "pass"],
      ["(7) service binding / in-process, hot key", "svcremoteh", "svcinh"],
      ["(7) service binding / in-process, 1000 keys", "svcremote", "svcin"],
      ["(3g) gateway / plain, hot key", "gwhot", "hot"],
      ["(4) denied, deny cache / (2) pass-through", "denied", "pass"],
      ["(4) denied, no cache / (2) pass-through", "deniednc", "pass"],
      ["(4) denied, deny cache / (3) allowed, 1000 keys", "denied", "allowed"],
      ["no-op object call, 1000 keys / (2) pass-through", "floor", "pass"],
      ["no-op object call, hot key / (2) pass-through", "floorhot", "pass"],
      ["stand-in object / (2) pass-through", "standin", "pass"],
      ["(2b) bare proxy / (2) pass-through", "bare", "pass"],
      ["(3) allowed / no-op object call, 1000 keys", "allowed", "floor"],
      ["(3) allowed / no-op object call, hot key", "hot", "floorhot"],
      ["(3) allowed now / at BENCH_BASELINE, 1000 keys", "allowed", "before"],
      ["(3) allowed now / at BENCH_BASELINE, hot key", "hot", "beforehot"],
      ["(3) allowed now / at BENCH_BASELINE, 1000 young keys", "allowedyoung", "beforeyoung"],
      ["(3) at BENCH_BASELINE, hot key / its pass-through", "beforehot", "beforepass"],
      ["(3) signed / unsigned, hot key", "signedhot", "hot"],
      ["(3) signed / unsigned as long, hot key", "signedhot", "hotlong"],
      ["(3) signed / unsigned, 1000 young keys", "signedyoung", "allowedyoung"],
    ] as const;
    const ratios = new Map<string, number[]>();
    /** Per target, responses with another status than expected (and connection errors) over the saturating runs. */
    const unexpected = new Map<string, number>();
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      const byId: Record<string, number> = {};
      const byIdP99: Record<string, number> = {};
      for (const t of order) {
        // Objects idle for ~10 s are evicted; wake this target's objects before measuring it. Young keys: fresh ones.
        if (t.young) t.young.fresh();
        else await loadAll(urlsOf(t), { connections: CONNECTIONS, key: t.key, ...warmUp(t) });
        const pid = t.pid ? t.pid() : (rt as Runtime).pid;
        const cpu0 = cpuMs(pid);
        const seconds = t.young?.seconds ?? SECONDS;
        const r = await loadAll(urlsOf(t), { duration: seconds, connections: CONNECTIONS, key: t.key });
        const cpu1 = cpuMs(pid);
        if (cpu0 !== null && cpu1 !== null) cpu.set(t.id, [...(cpu.get(t.id) ?? []), ((cpu1 - cpu0) * 1000) / r.total]);
        // Responses other than the expected status are counted and shown (a product bug must show, not stop the run).
        const bad = r.total - (r.statuses[t.expect] ?? 0) + r.errors;
        if (bad > 0) {
          unexpected.set(t.id, (unexpected.get(t.id) ?? 0) + bad);
          console.log(`  ${t.label}: expected only ${t.expect}, got ${JSON.stringify(r.statuses)}, ${r.errors} errors`);
        }
        byId[t.id] = r.rps;
        rps.set(t.id, [...(rps.get(t.id) ?? []), r.rps]);
        sat.set(t.id, [...(sat.get(t.id) ?? []), r]);
        const l = await loadAll(urlsOf(t), {
          duration: LATENCY_SECONDS,
          connections: urlsOf(t).length > 1 ? 3 : 2,
          rate: LATENCY_RATE,
          key: t.key,
        });
        lat.set(t.id, [...(lat.get(t.id) ?? []), ...l.samples]);
        byIdP99[t.id] = quantile(Float64Array.from(l.samples).sort(), 0.99);
      }
      if (byIdP99.allowed !== undefined) addedP99ByRound.push(byIdP99.allowed - (byIdP99.pass as number));
      for (const [label, a, b] of RATIOS) {
        const x = byId[a];
        const y = byId[b];
        if (x !== undefined && y !== undefined) ratios.set(label, [...(ratios.get(label) ?? []), x / y]);
      }
      console.log(
        `round ${round + 1}/${ROUNDS}: ${targets.map((t) => `${t.id} ${fmt(byId[t.id] as number)}`).join(", ")}`,
      );
    }

    console.log(
      `\nworkerd CPU µs/req: the workerd process's user+system CPU time over the measured run, per response (robust to other load on the machine).`,
    );
    console.log(
      `req/s: median of ${ROUNDS} interleaved rounds of ${SECONDS} s, ${CONNECTIONS} connections (saturating). p50/p99 (ms): at saturation, and at a fixed ${LATENCY_RATE} req/s (2 connections, ${ROUNDS}×${LATENCY_SECONDS} s pooled).\n`,
    );
    console.log(
      "| target | req/s | × pass-through | workerd CPU µs/req | p50 sat | p99 sat | p50 @250/s | p99 @250/s | status |",
    );
    console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    const passRps = median(rps.get("pass") ?? []);
    const p = (id: string) => {
      const xs = Float64Array.from(lat.get(id) ?? []).sort();
      return { p50: quantile(xs, 0.5), p99: quantile(xs, 0.99) };
    };
    for (const t of targets) {
      const runs = sat.get(t.id) ?? [];
      const r = median(rps.get(t.id) ?? []);
      const fixed = p(t.id);
      console.log(
        `| ${t.label} | ${fmt(r)} | ${fmt(r / passRps, 2)} | ${fmt(median(cpu.get(t.id) ?? [Number.NaN]))} | ${fmt(median(runs.map((x) => x.p50)), 2)} | ${fmt(median(runs.map((x) => x.p99)), 2)} | ${fmt(fixed.p50, 2)} | ${fmt(fixed.p99, 2)} | ${t.expect}${unexpected.has(t.id) ? ` (${unexpected.get(t.id)} others)` : ""} |`,
      );
    }
    console.log(`\nratios (median of per-round ratios):`);
    for (const [label, xs] of ratios) {
      console.log(`  ${`${label}:`.padEnd(50)} ${fmt(median(xs), 2)}   [${xs.map((x) => fmt(x, 2)).join(", ")}]`);
    }
    // By workerd CPU, round by round: the two targets of a round are measured minutes apart at most, so the VM's
    // slower and faster spells cancel better than in the ratio of the medians. The baseline's targets are compared
    // with the baseline's own pass-through.
    console.log(`\nworkerd CPU per request, pass-through's ÷ the target's (median of per-round ratios):`);
    for (const t of targets) {
      const ref = t.ref ?? (t.id.startsWith("before") ? "beforepass" : "pass");
      const passCpu = cpu.get(ref) ?? [];
      const mine = cpu.get(t.id);
      if (t.id === ref || !mine || mine.length !== passCpu.length) continue;
      const xs = mine.map((c, i) => (passCpu[i] as number) / c);
      console.log(
        `  ${`${t.id} ÷ ${ref}:`.padEnd(24)} ${fmt(median(xs), 2)}   [${xs.map((x) => fmt(x, 2)).join(", ")}]`,
      );
    }
    // A hono user's choice (issue 40): the peer's CPU per request ÷ this middleware's, round by round (targets
    // >= 2 on young keys, >= 2.5 on the hot key).
    const cheaper = [
      ["1,000 young keys", "honopeer", "honoours", 2],
      ["hot key", "honopeerh", "honooursh", 2.5],
      ["1,000 keys re-seen", "honopeerseen", "honooursseen", 1],
      ["hot key, leases off", "honopeerh", "honooursoffh", 1],
      ["1,000 keys re-seen, leases off", "honopeerseen", "honooursoffseen", 1],
    ] as const;
    for (const [label, peerId, oursId, target] of cheaper) {
      const theirs = cpu.get(peerId);
      const mine = cpu.get(oursId);
      if (!theirs || !mine || theirs.length !== mine.length) continue;
      const xs = mine.map((c, i) => (theirs[i] as number) / c);
      console.log(
        `  hono-rate-limiter's ÷ this middleware's, ${label}: ${fmt(median(xs), 2)} (>= ${target} ${verdict(median(xs) >= target)})   [${xs.map((x) => fmt(x, 2)).join(", ")}]`,
      );
    }
    if (ONLY) {
      if (ONLY.includes("count")) await countStorage(u);
      if (ONLY.includes("svccount")) await countService(u);
      console.log(
        `\nBENCH_ONLY: ${ONLY.includes("count") ? "" : "no storage count, "}${ONLY.includes("svccount") ? "" : "no service count, "}no chart or targets; total ${fmt((performance.now() - started) / 1000, 0)} s`,
      );
      return;
    }
    const addedP50 = p("allowed").p50 - p("pass").p50;
    const addedP99 = p("allowed").p99 - p("pass").p99;
    const addedHotP99 = p("hot").p99 - p("pass").p99;
    console.log(
      `  added latency at ${LATENCY_RATE} req/s, 1000 keys: p50 ${fmt(addedP50, 2)} ms, p99 ${fmt(addedP99, 2)} ms (pooled), per round ${addedP99ByRound.map((x) => fmt(x, 2)).join(", ")} ms; hot key p99 ${fmt(addedHotP99, 2)} ms`,
    );

    const dist = await distance(u);
    const storage = await countStorage(u);
    await countService(u);
    const util = await utilisation(u);
    await chart(u);

    const r = (label: (typeof RATIOS)[number][0]) => median(ratios.get(label) ?? [Number.NaN]);
    const allowedRatio = r("(3) allowed, 1000 keys / (2) pass-through");
    const hotRatio = r("(3) allowed, hot key / (2) pass-through");
    const onOffMany = r("(3) leases on / off, 1000 keys");
    const deniedVsAllowed = r("(4) denied, deny cache / (3) allowed, 1000 keys");
    const hotCalls = storage.on.hot.callsPerAllowed;
    const hotRows = storage.on.hot.rowsPerAllowed;
    const far50 = dist.addedP50.get("on m_ 50") ?? Number.NaN;
    const worstUtil = Math.min(...util.map((x) => x.share));
    const over = util.filter((x) => x.most > UTIL.limit).length;
    if (dist.bad > 0) console.log(`\n${dist.bad} distance run(s) had responses other than 200 (see above)`);
    console.log(`\ntargets:`);
    const hotMinuteRatio = r("(3) allowed, hot key, 1 min limit / (2) pass-through");
    const cpuOf = (id: string) => median(cpu.get(id) ?? [Number.NaN]);
    const cpuRatio = (id: string) => cpuOf("pass") / cpuOf(id);
    console.log(
      `  by workerd CPU per request (pass-through's ÷ the target's): hot key ${fmt(cpuRatio("hot"), 2)} (>= 0.95 ${verdict(cpuRatio("hot") >= 0.95)}), 1,000 ordinary keys ${fmt(cpuRatio("allowed"), 2)} (>= 0.85 ${verdict(cpuRatio("allowed") >= 0.85)}), leases off ${fmt(cpuRatio("allowedoff"), 2)}`,
    );
    console.log(
      `  hot key with leases >= 0.95x pass-through (req/s): ${fmt(hotRatio, 2)} (1 s + 1 min limits) ${verdict(hotRatio >= 0.95)}; 1 min limit: ${fmt(hotMinuteRatio, 2)} ${verdict(hotMinuteRatio >= 0.95)}; 3 isolates: ${fmt(r("(3) allowed, hot key, 3 isolates / (2) pass-through"), 2)}`,
    );
    console.log(
      `  1,000 ordinary keys >= 0.85x pass-through (req/s): ${fmt(allowedRatio, 2)} ${verdict(allowedRatio >= 0.85)}; object calls and rows per allowed request <= 0.1: calls ${fmt(storage.on.ordinary.per.callsPerAllowed, 4)}, rows ${fmt(storage.on.ordinary.per.billedRowsPerAllowed, 4)} ${verdict(storage.on.ordinary.per.callsPerAllowed <= 0.1 && storage.on.ordinary.per.billedRowsPerAllowed <= 0.1)}, $${fmt(storage.on.ordinary.per.costPerMillion, 3)} per million (<= 0.10 ${verdict(storage.on.ordinary.per.costPerMillion <= 0.1)})`,
    );
    console.log(
      `  object calls and rows written per allowed request, hot key <= 0.05: calls ${fmt(hotCalls, 4)}, rows ${fmt(hotRows, 4)} ${verdict(hotCalls <= 0.05 && hotRows <= 0.05)} (per-minute limits: calls ${fmt(storage.on.hotMinute.callsPerAllowed, 4)}, rows ${fmt(storage.on.hotMinute.rowsPerAllowed, 4)})`,
    );
    console.log(
      `  hot key p50 added latency with a 50 ms round trip <= 2 ms (per-minute limits): ${fmt(far50, 2)} ms ${verdict(far50 <= 2)}`,
    );
    console.log(
      `  utilisation >= 95% of an exact per-request limiter's grants: ${util.map((x) => `${x.isolates} isolate(s) ${fmt(100 * x.share, 1)}%`).join(", ")} ${verdict(worstUtil >= 0.95)}; windows over N: ${over} ${verdict(over === 0)}`,
    );
    console.log(
      `  1000 keys, leases on no worse than leases off: ${fmt(onOffMany, 2)} (per-round ratio; ${fmt(allowedRatio, 2)} vs ${fmt(r("(3) leases off, 1000 keys / (2) pass-through"), 2)} x pass-through) ${verdict(onOffMany >= 0.95)} (within the ±5% noise counts as no worse)`,
    );
    console.log(
      `  denied with cache >= 1.5x allowed: ${fmt(deniedVsAllowed, 2)} ${verdict(deniedVsAllowed >= 1.5)}; rows written per denied = 0: ${fmt(storage.perDenied, 3)} ${verdict(storage.perDenied === 0)}`,
    );
    console.log(`\ntotal ${fmt((performance.now() - started) / 1000, 0)} s`);
    console.log(
      `reproduce: ${process.env.BENCH_ROUNDS ? `BENCH_ROUNDS=${ROUNDS} ` : ""}${QUICK ? "BENCH_QUICK=1 " : ""}npm run bench`,
    );
    console.log(`hot-key limiter/pass-through throughput ratio: ${fmt(hotRatio, 2)}`);
    console.log(`object calls per allowed request, hot key: ${fmt(hotCalls, 4)}`);
    console.log(`limiter/pass-through throughput ratio: ${fmt(allowedRatio, 2)}`);
    console.log(`object calls per allowed request, 1,000 keys: ${fmt(storage.on.ordinary.per.callsPerAllowed, 4)}`);
  } finally {
    await rt?.dispose();
    await origin.close();
  }
}

async function stats(countUrl: string, name: string): Promise<StorageCounts> {
  const res = await fetch(`${countUrl}/__bench/stats?name=${encodeURIComponent(name)}`);
  return (await res.json()) as StorageCounts;
}

function sum(xs: StorageCounts[]): StorageCounts {
  const out = emptyCounts();
  for (const x of xs) for (const k of Object.keys(out) as (keyof StorageCounts)[]) out[k] += x[k];
  return out;
}

/** `a − b`, count by count: what a run added. */
function minus(a: StorageCounts, b: StorageCounts): StorageCounts {
  const out = emptyCounts();
  for (const k of Object.keys(out) as (keyof StorageCounts)[]) out[k] = a[k] - b[k];
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Object calls and rows per allowed request for one load, counted in the object. */
interface PerAllowed {
  readonly allowed: number;
  readonly callsPerAllowed: number;
  readonly rowsPerAllowed: number;
  /** Rows plus `setAlarm` calls (each billed as a row written). */
  readonly billedRowsPerAllowed: number;
  /** $ per million allowed requests: object requests and rows written. */
  readonly costPerMillion: number;
}

function perAllowed(s: StorageCounts, allowed: number): PerAllowed {
  const calls = s.decides + s.giveBacks;
  const billed = s.rowsWritten + s.setAlarms;
  return {
    allowed,
    callsPerAllowed: calls / allowed,
    rowsPerAllowed: s.rowsWritten / allowed,
    billedRowsPerAllowed: billed / allowed,
    costPerMillion: (1e6 * (calls * PRICE.request + billed * PRICE.row)) / allowed,
  };
}

/**
 * Object calls and rows written per allowed request, counted inside the object
 * (`CountingRateLimiter`: `take` and `giveBack` calls, `sql.exec` rows, `setAlarm`), with leases on
 * (Worker `count`) and off (`count-off`); no deny cache, so every request that needs the object reaches it.
 */
async function countStorage(u: Runtime["urls"]) {
  console.log(
    `\nper allowed request, counted in the object (CountingRateLimiter; object calls = take + giveBack; rows written incl. setAlarm as billed):`,
  );
  const keys = 200;
  const measure = async (url: string, tag: string) => {
    const many = await load({ url, amount: 4000, connections: CONNECTIONS, key: (i) => `${tag}c${i % keys}` });
    await sleep(200);
    const manyS = sum(await Promise.all(Array.from({ length: keys }, (_, i) => stats(url, `key:${tag}c${i}`))));
    const hot = await load({ url, amount: HOT_AMOUNT, connections: CONNECTIONS, key: `${tag}chot` });
    await sleep(200);
    const hotS = await stats(url, `key:${tag}chot`);
    const hotM = await load({ url, amount: HOT_AMOUNT, connections: CONNECTIONS, key: `m_${tag}chot` });
    await sleep(200);
    const hotMS = await stats(url, `key:m_${tag}chot`);
    return {
      raw: { many: manyS, hot: hotS, hotMinute: hotMS },
      many: perAllowed(manyS, many.statuses[200] ?? 0),
      hot: perAllowed(hotS, hot.statuses[200] ?? 0),
      hotMinute: perAllowed(hotMS, hotM.statuses[200] ?? 0),
    };
  };
  /** 1,000 ordinary keys in steady state, as the throughput rows run them: counted over the measured seconds only. */
  const ordinary = async (url: string, tag: string) => {
    const key = scatteredKeys(`o_${tag}c`);
    const statsAll = async () =>
      sum(await Promise.all(Array.from({ length: KEYS }, (_, i) => stats(url, `key:o_${tag}c${i}`))));
    await load({ url, duration: STEADY_WARMUP_S, connections: CONNECTIONS, key });
    await sleep(200);
    const before = await statsAll();
    const run = await load({ url, duration: COUNT_SECONDS, connections: CONNECTIONS, key });
    await sleep(200);
    return {
      raw: minus(await statsAll(), before),
      per: perAllowed(minus(await statsAll(), before), run.statuses[200] ?? 0),
    };
  };
  const on = { ...(await measure(u.count, "")), ordinary: await ordinary(u.count, "") };
  const off = { ...(await measure(u["count-off"], "off_")), ordinary: await ordinary(u["count-off"], "off_") };
  console.log(
    "| load | leases | allowed | take calls | leases granted (units) | giveBack calls (units) | rows written (+ setAlarm) | object calls / allowed | rows / allowed | $ / million allowed |",
  );
  console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  const loads = [
    ["hot", `one hot key, ${HOT_AMOUNT} requests, 1 s + 1 min limits`],
    ["hotMinute", `one hot key, ${HOT_AMOUNT} requests, 1 min limit`],
    ["many", `${keys} keys, 20 requests each`],
  ] as const;
  const row = (label: string, name: string, s: StorageCounts, a: PerAllowed) =>
    console.log(
      `| ${label} | ${name} | ${a.allowed} | ${s.decides} | ${s.leases} (${s.leasedUnits}) | ${s.giveBacks} (${s.returnedUnits}) | ${s.rowsWritten} (+${s.setAlarms}) | ${fmt(a.callsPerAllowed, 4)} | ${fmt(a.billedRowsPerAllowed, 4)} | ${fmt(a.costPerMillion, 3)} |`,
    );
  for (const [k, label] of loads) {
    for (const [name, m] of [
      ["on", on],
      ["off", off],
    ] as const) {
      row(label, name, m.raw[k], m[k]);
    }
  }
  for (const [name, m] of [
    ["on", on],
    ["off", off],
  ] as const) {
    row(
      `${KEYS} ordinary keys (100/1s + 1000/1m), steady, ${COUNT_SECONDS} s after ${STEADY_WARMUP_S} s`,
      name,
      m.ordinary.raw,
      m.ordinary.per,
    );
  }
  console.log(
    `  ${KEYS} ordinary keys, object instances their calls started (workerd evicts an object ~10 s after its last call): leases on ${on.ordinary.raw.starts} of ${on.ordinary.raw.decides + on.ordinary.raw.giveBacks} calls, off ${off.ordinary.raw.starts} of ${off.ordinary.raw.decides + off.ordinary.raw.giveBacks}`,
  );
  console.log(
    `  native rate-limit binding: no object calls, no rows, no separate price ($0 beyond the Worker); Miniflare simulates it with one internal object call per request`,
  );
  await load({ url: u.count, amount: 1, connections: 1, key: "deny_c" });
  const before = await stats(u.count, "key:deny_c");
  await load({ url: u.count, amount: 4000, connections: CONNECTIONS, key: "deny_c" });
  const after = await stats(u.count, "key:deny_c");
  const denials = after.decides - before.decides;
  const perDenied = (after.rowsWritten - before.rowsWritten) / denials;
  console.log(
    `  denied: ${denials} denials reached the object and wrote ${after.rowsWritten - before.rowsWritten} rows, ${after.setAlarms - before.setAlarms} setAlarm: ${fmt(perDenied, 3)} rows per denied request`,
  );
  return { on, off, perDenied };
}

/** What the objects of a load's keys counted, and the load's responses: all of them, and the grants (`200`). */
interface Counted {
  readonly s: StorageCounts;
  readonly allowed: number;
  readonly total: number;
}

/**
 * Object calls per grant for two consumer Workers deciding the same keys (issue 60): both over service bindings to one
 * `LimiterService` (`svc-remote-1`, `svc-remote-2` → `svc-host-count`), whose one lease table serves them both, against
 * each with its own library limiter in-process (`svc-inproc-1`, `svc-inproc-2`: two lease tables over the same
 * objects). The same limiter (bench/http/service.mts, leases on as by default) and the same loads, each spread over the
 * two consumers at once; calls counted in the object (`CountingRateLimiter`: take + giveBack).
 */
async function countService(u: Runtime["urls"]) {
  /** The steady load's rate over both consumers: each of the 1,000 keys about once a second. */
  const STEADY_RATE = 1000;
  const variants = [
    {
      id: "shared",
      label: "one LimiterService",
      urls: [u["svc-remote-1"], u["svc-remote-2"]],
      stats: u["svc-host-count"],
    },
    {
      id: "own",
      label: "each its own limiter",
      urls: [u["svc-inproc-1"], u["svc-inproc-2"]],
      stats: u["svc-inproc-1"],
    },
  ] as const;
  const countsOf = async (url: string, keys: readonly string[]) =>
    sum(await Promise.all(keys.map((key) => stats(url, `bench-svc/key:${key}`))));
  const keysOf = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
  const some = 200;
  const loads = [
    {
      label: `one hot key (1e9/1m), ${HOT_AMOUNT} requests`,
      keys: (tag: string) => [`hot${tag}`],
      run: (urls: readonly string[], tag: string) =>
        loadAll(urls, { amount: HOT_AMOUNT, connections: CONNECTIONS, key: `hot${tag}` }),
    },
    {
      label: `${some} keys (100/1s + 1000/1m), 20 requests each`,
      keys: (tag: string) => keysOf(`c${tag}_`, some),
      run: (urls: readonly string[], tag: string) =>
        loadAll(urls, { amount: 20 * some, connections: CONNECTIONS, key: (i) => `c${tag}_${i % some}` }),
    },
  ];
  /**
   * 1,000 keys in steady state, counted over the measured seconds only; at one fixed rate for both (a key's leases grow
   * with the rate its isolate sees it at, and a call over the binding is slower: at saturation the two would differ).
   */
  const steady = async (v: (typeof variants)[number]): Promise<Counted> => {
    const key = scatteredKeys(`s${v.id}_`);
    const keys = keysOf(`s${v.id}_`, KEYS);
    const o = { connections: CONNECTIONS, rate: STEADY_RATE, key };
    await loadAll(v.urls, { ...o, duration: STEADY_WARMUP_S });
    await sleep(200);
    const before = await countsOf(v.stats, keys);
    const run = await loadAll(v.urls, { ...o, duration: COUNT_SECONDS });
    await sleep(200);
    return { s: minus(await countsOf(v.stats, keys), before), allowed: run.statuses[200] ?? 0, total: run.total };
  };
  type Variant = (typeof variants)[number]["id"];
  const rows: { label: string; by: Record<Variant, Counted> }[] = [];
  for (const l of loads) {
    const by = {} as Record<Variant, Counted>;
    for (const v of variants) {
      const r = await l.run(v.urls, v.id);
      await sleep(200); // lease give-backs and refills after the last answer
      by[v.id] = { s: await countsOf(v.stats, l.keys(v.id)), allowed: r.statuses[200] ?? 0, total: r.total };
    }
    rows.push({ label: l.label, by });
  }
  const steadyBy = {} as Record<Variant, Counted>;
  for (const v of variants) steadyBy[v.id] = await steady(v);
  rows.push({
    label: `${KEYS} keys (100/1s + 1000/1m), ${STEADY_RATE} req/s, ${COUNT_SECONDS} s after ${STEADY_WARMUP_S} s`,
    by: steadyBy,
  });
  console.log(
    `\ntwo consumer Workers on the same keys, leases on: both bound to one LimiterService, or each with its own library limiter (object calls = take + giveBack, counted in the object):`,
  );
  console.log(
    "| load | limiter | requests | grants | take calls | leases (units) | giveBack calls | object calls / grant | own ÷ shared |",
  );
  console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  const perGrant = (x: Counted) => (x.s.decides + x.s.giveBacks) / x.allowed;
  const ratios: string[] = [];
  for (const { label, by } of rows) {
    const ratio = perGrant(by.own) / perGrant(by.shared);
    ratios.push(`${label}: ${fmt(perGrant(by.shared), 4)} vs ${fmt(perGrant(by.own), 4)} (${fmt(ratio, 2)}×)`);
    for (const v of variants) {
      const x = by[v.id];
      console.log(
        `| ${label} | ${v.label} | ${x.total} | ${x.allowed} | ${x.s.decides} | ${x.s.leases} (${x.s.leasedUnits}) | ${x.s.giveBacks} | ${fmt(perGrant(x), 4)} | ${v.id === "own" ? fmt(ratio, 2) : "–"} |`,
      );
    }
  }
  console.log(`  object calls per grant, one LimiterService vs each its own limiter: ${ratios.join("; ")}`);
  console.log(`  reproduce: ${QUICK ? "BENCH_QUICK=1 " : ""}BENCH_ONLY=svccount npm run bench`);
}

/**
 * Latency per request with a simulated Worker→object round trip added to every object call
 * (Workers `far` and `far-off`, bench/http/worker.mts), at a fixed rate on one hot key, leases on
 * and off; the pass-through alongside. Per round, each variant warms up for 1 s and is measured for
 * LATENCY_SECONDS; latencies are pooled over the rounds.
 */
async function distance(u: Runtime["urls"]) {
  interface Variant {
    readonly id: string;
    readonly label: string;
    readonly url: string;
    readonly key: string;
    readonly rtt: number;
    readonly far: boolean;
  }
  const variants: Variant[] = [
    {
      id: "pass",
      label: "(2) pass-through: the product, unlimited plan",
      url: u.far,
      key: "free_far",
      rtt: 0,
      far: false,
    },
  ];
  for (const rtt of RTTS) {
    variants.push(
      {
        id: `on m_ ${rtt}`,
        label: `leases on, 1 min limit, +${rtt} ms`,
        url: u.far,
        key: `m_far${rtt}`,
        rtt,
        far: true,
      },
      {
        id: `off m_ ${rtt}`,
        label: `leases off, 1 min limit, +${rtt} ms`,
        url: u["far-off"],
        key: `m_far${rtt}`,
        rtt,
        far: true,
      },
    );
  }
  variants.push({
    id: "on 1s 50",
    label: "leases on, 1 s + 1 min limits, +50 ms",
    url: u.far,
    key: "far1s50",
    rtt: 50,
    far: true,
  });
  const lat = new Map<string, number[]>();
  const counts = new Map<string, { calls: number; allowed: number; reasons: Record<string, number> }>();
  let bad = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? variants : [...variants].reverse();
    for (const v of order) {
      const o = { urls: [v.url], rate: DIST_RATE, key: v.key, headers: { "x-bench-rtt": String(v.rtt) } };
      await paced({ ...o, duration: 1 });
      if (v.far) await fetch(`${v.url}/__bench/far`);
      const l = await paced({ ...o, duration: DIST_SECONDS });
      await sleep(v.rtt + 20); // returns and refills after the last answer
      if ((l.statuses[200] ?? 0) !== l.total || l.errors > 0) {
        bad += 1;
        console.log(`  ${v.label}: expected only 200, got ${JSON.stringify(l.statuses)}, ${l.errors} errors`);
      }
      lat.set(v.id, [...(lat.get(v.id) ?? []), ...l.samples]);
      if (v.far) {
        const f = (await (await fetch(`${v.url}/__bench/far`)).json()) as {
          take: number;
          giveBack: number;
          reasons: Record<string, number>;
        };
        const c = counts.get(v.id) ?? { calls: 0, allowed: 0, reasons: {} };
        c.calls += f.take + f.giveBack;
        c.allowed += (f.reasons.granted ?? 0) + (f.reasons.leased ?? 0);
        for (const [k, n] of Object.entries(f.reasons)) c.reasons[k] = (c.reasons[k] ?? 0) + n;
        counts.set(v.id, c);
      }
    }
  }
  const q = (id: string) => {
    const xs = Float64Array.from(lat.get(id) ?? []).sort();
    return { p50: quantile(xs, 0.5), p99: quantile(xs, 0.99), n: xs.length };
  };
  const pass = q("pass");
  const addedP50 = new Map<string, number>();
  console.log(
    `\ndistance: one hot key at an even ${DIST_RATE} req/s (open loop), ${ROUNDS}×${DIST_SECONDS} s pooled per row; every object call (take, giveBack) delayed by the round trip (half before, half after); added = p50 − pass-through's p50 in the same phase:`,
  );
  console.log(
    "| variant | p50 (ms) | p99 (ms) | added p50 (ms) | added p99 (ms) | object calls / allowed | decided by the object (not a lease) |",
  );
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const v of variants) {
    const x = q(v.id);
    addedP50.set(v.id, x.p50 - pass.p50);
    const c = counts.get(v.id);
    const waited = c ? (c.reasons.granted ?? 0) / c.allowed : Number.NaN;
    console.log(
      `| ${v.label} | ${fmt(x.p50, 2)} | ${fmt(x.p99, 2)} | ${v.id === "pass" ? "–" : fmt(x.p50 - pass.p50, 2)} | ${v.id === "pass" ? "–" : fmt(x.p99 - pass.p99, 2)} | ${c ? fmt(c.calls / c.allowed, 4) : "–"} | ${c ? `${fmt(100 * waited, 1)}%` : "–"} |`,
    );
  }
  return { addedP50, bad };
}

/**
 * Steady overload at 2× the limit rate against one key, with one isolate (Worker `chart`) and,
 * at the same time on another key, three isolates sharing its objects (`chart`, `chart-2`,
 * `chart-3`, the rate split between them). Every decision is recorded at its time (the object's
 * clock when the object decided, the isolate's when a lease or the deny cache did). Grants are
 * compared with what an exact per-request limiter (`KeyLog.take(t, { cost: 1 })`, src/core)
 * grants for the same arrival times, and judged with `maxInWindow` over their use times.
 */
async function utilisation(u: Runtime["urls"]) {
  const urls = [u.chart, u["chart-2"], u["chart-3"]];
  const runs = [
    { isolates: 1, key: "util_1", urls: [u.chart] },
    { isolates: 3, key: "util_3", urls },
  ];
  const fetchDecisions = async () => {
    const all: [string, number, number, string][] = [];
    for (const url of urls) {
      all.push(...((await (await fetch(`${url}/__bench/decisions`)).json()) as [string, number, number, string][]));
    }
    return all;
  };
  await fetchDecisions();
  const t0 = Date.now();
  await Promise.all(
    runs.map((r) => paced({ urls: r.urls, duration: UTIL.durationMs / 1000, rate: UTIL.rate, key: r.key })),
  );
  await sleep(100);
  const decisions = await fetchDecisions();
  console.log(
    `\nutilisation: an even ${UTIL.rate} req/s (2× the limit rate; three isolates: in turn) for ${UTIL.durationMs / 1000} s against ${UTIL.limit} per ${UTIL.windowMs / 1000} s, both runs at once, started ${t0 % 10_000} ms into a 10 s window:`,
  );
  return runs.map((r) => {
    const mine = decisions.filter((d) => d[0] === `key:${r.key}`).sort((a, b) => a[1] - b[1]);
    const grants = mine.filter((d) => d[2] === 1).map((d) => d[1]);
    const log = new KeyLog([{ limit: UTIL.limit, windowMs: UTIL.windowMs }]);
    let exact = 0;
    for (const d of mine) if (log.take(d[1], { cost: 1 }).decision.allowed) exact += 1;
    const reasons: Record<string, number> = {};
    for (const d of mine) reasons[d[3]] = (reasons[d[3]] ?? 0) + 1;
    const most = maxInWindow(grants, UTIL.windowMs);
    const share = grants.length / exact;
    console.log(
      `  ${r.isolates} isolate(s): ${mine.length} arrivals, ${grants.length} grants; an exact per-request limiter grants ${exact} for the same arrivals: ${fmt(100 * share, 1)}%; most in any ${UTIL.windowMs / 1000} s: ${most} (limit ${UTIL.limit}); reasons ${JSON.stringify(reasons)}`,
    );
    return { isolates: r.isolates, share, most };
  });
}

/** Steady overload against each limiter at once; grants are recorded at their decision (bench/http/worker.mts). */
async function chart(u: Runtime["urls"]): Promise<void> {
  const contenders = [
    { name: "this limiter (sliding log in a Durable Object, leases on)", url: u.chart, key: "chart_limiter" },
    { name: "token bucket in a Durable Object (capacity 100, refill 10/s)", url: u.tokenbucket, key: "chart_tb" },
    { name: "fixed window in a Durable Object (aligned 10 s windows)", url: u.fixedwindow, key: "chart_fw" },
    {
      name: "native rate-limit binding, as Miniflare simulates it (limit 100, period 10)",
      url: u.native,
      key: "chart_native",
    },
  ];
  // Start 6.5 s into a 10 s wall-clock window, so aligned windows roll over 3.5 s in.
  const wait = (16_500 - (Date.now() % 10_000)) % 10_000;
  await new Promise((r) => setTimeout(r, wait));
  const grantsOf = async (url: string) => (await (await fetch(`${url}/__bench/grants`)).json()) as number[];
  for (const c of contenders) await grantsOf(c.url);
  const t0 = Date.now();
  await Promise.all(
    contenders.map((c) =>
      load({ url: c.url, duration: CHART.durationMs / 1000, connections: 4, rate: CHART.rate, key: c.key }),
    ),
  );
  const series = [];
  for (const c of contenders) series.push({ name: c.name, grants: (await grantsOf(c.url)).map((t) => t - t0) });
  console.log(
    `\nchart: ${CHART.rate} req/s per limiter for ${CHART.durationMs / 1000} s against ${CHART.limit} per ${CHART.windowMs / 1000} s, started at ${t0 % 10_000} ms into a 10 s window`,
  );
  for (const s of series) {
    const sorted = [...s.grants].sort((a, b) => a - b);
    console.log(
      `  ${s.name}: ${s.grants.length} grants; most in any ${CHART.windowMs / 1000} s: ${maxInWindow(sorted, CHART.windowMs)}`,
    );
  }
  const svg = grantsSvg(series, {
    title: `Grants per ${CHART.binMs} ms under steady overload: ${CHART.rate} req/s against a limit of ${CHART.limit} per ${CHART.windowMs / 1000} s`,
    subtitle: `npm run bench: workerd via Miniflare, one key per limiter, grants timed at the decision. Overload starts 6.5 s into a wall-clock 10 s window.`,
    limit: CHART.limit,
    windowMs: CHART.windowMs,
    durationMs: CHART.durationMs,
    binMs: CHART.binMs,
  });
  mkdirSync(join(ROOT, "docs"), { recursive: true });
  writeFileSync(join(ROOT, "docs/grants.svg"), svg);
  console.log(`  wrote docs/grants.svg`);
}

await main();
