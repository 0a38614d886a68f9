/**
 * @module `npm run bench`: the whole HTTP path side by side in one run, driven by autocannon:
 * the origin directly, a pass-through Worker, the limiter (allowed; denied with and without
 * the deny cache), Cloudflare's rate-limit binding as Miniflare simulates it, and a token
 * bucket and a fixed window in a Durable Object. Then the limiter's storage writes, counted,
 * and the grants chart (docs/grants.svg). See BENCHMARKS.md, "HTTP path".
 *
 *   npm run bench                 # ~4 min
 *   BENCH_QUICK=1 npm run bench   # shorter runs, for trying things
 */

import { execSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { cpuMs } from "../test/support/proc.ts";
import { maxInWindow } from "../test/support/window.ts";
import { grantsSvg } from "./http/chart.ts";
import type { StorageCounts } from "./http/counts.ts";
import { type LoadResult, load, quantile } from "./http/load.ts";
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
/** `BENCH_ONLY=allowed,floor npm run bench`: only these targets (and the pass-through), no storage count or chart. */
const ONLY = process.env.BENCH_ONLY?.split(",") ?? null;
/** `BENCH_BASELINE=<git rev> npm run bench`: the product as of that revision too, side by side ("before"). */
const BASELINE = process.env.BENCH_BASELINE || undefined;
const CHART = { limit: 100, windowMs: 10_000, rate: 200, durationMs: QUICK ? 12_000 : 25_000, binMs: 100 };

/** Limits high enough that every request passes (the allowed path); `deny_` keys: 1 per hour; `chart_` keys: the chart's limit. */
const RATE_LIMIT = {
  limits: [
    { limit: 1_000_000, window: "1s" },
    { limit: 100_000_000, window: "1m" },
  ],
  plans: [
    { name: "deny", key_prefix: "deny_", limits: [{ limit: 1, window: "1h" }] },
    { name: "chart", key_prefix: "chart_", limits: [{ limit: CHART.limit, window: CHART.windowMs }] },
  ],
};

/**
 * State on tmpfs when there is one (see BENCHMARKS.md: this VM's disk fsync is not Cloudflare's storage);
 * `BENCH_STATE_DIR=/tmp npm run bench` puts it on disk instead.
 */
const STATE_DIR = process.env.BENCH_STATE_DIR ?? (existsSync("/dev/shm") ? "/dev/shm" : tmpdir());

interface Target {
  readonly id: string;
  readonly label: string;
  readonly url: () => string;
  /** The workerd serving it (for CPU per request; default: the main runtime's); null for the origin. */
  readonly pid?: () => number | null;
  readonly key: string | ((i: number) => string);
  /** The status every response must have, else the run is not what it claims to be. */
  readonly expect: number;
}

/** Enough requests to touch every key once more (1000 keys), else one second. */
const warmUp = (t: Target) => (typeof t.key === "function" ? { amount: 2 * KEYS } : { duration: 1 });

const manyKeys = (prefix: string) => (i: number) => `${prefix}${i % KEYS}`;

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
        label: "(2) pass-through Worker",
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
        label: "(3) limiter, allowed, 1000 keys",
        url: () => u.product,
        key: manyKeys("k"),
        expect: 200,
      },
      {
        id: "hot",
        label: "(3) limiter, allowed, one hot key",
        url: () => u.product,
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
      );
    }
    const targets = ONLY ? all.filter((t) => t.id === "pass" || ONLY.includes(t.id)) : all;

    // Warm-up: every target, every key (creates the 1000 objects per namespace), first denial made.
    for (const t of targets)
      await load({ url: t.url(), duration: QUICK ? 1 : 2, connections: CONNECTIONS, key: t.key });

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
      ["(4) denied, deny cache / (2) pass-through", "denied", "pass"],
      ["(4) denied, no cache / (2) pass-through", "deniednc", "pass"],
      ["(4) denied, deny cache / (3) allowed, 1000 keys", "denied", "allowed"],
      ["no-op object call, 1000 keys / (2) pass-through", "floor", "pass"],
      ["no-op object call, hot key / (2) pass-through", "floorhot", "pass"],
      ["stand-in object / (2) pass-through", "standin", "pass"],
      ["(3) allowed / no-op object call, 1000 keys", "allowed", "floor"],
      ["(3) allowed / no-op object call, hot key", "hot", "floorhot"],
      ["(3) allowed now / at BENCH_BASELINE, 1000 keys", "allowed", "before"],
      ["(3) allowed now / at BENCH_BASELINE, hot key", "hot", "beforehot"],
    ] as const;
    const ratios = new Map<string, number[]>();
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      const byId: Record<string, number> = {};
      const byIdP99: Record<string, number> = {};
      for (const t of order) {
        // Objects idle for ~10 s are evicted; wake this target's objects before measuring it.
        await load({ url: t.url(), connections: CONNECTIONS, key: t.key, ...warmUp(t) });
        const pid = t.pid ? t.pid() : (rt as Runtime).pid;
        const cpu0 = cpuMs(pid);
        const r = await load({ url: t.url(), duration: SECONDS, connections: CONNECTIONS, key: t.key });
        const cpu1 = cpuMs(pid);
        if (cpu0 !== null && cpu1 !== null) cpu.set(t.id, [...(cpu.get(t.id) ?? []), ((cpu1 - cpu0) * 1000) / r.total]);
        const bad = r.total - (r.statuses[t.expect] ?? 0);
        if (bad > r.total * 0.001 || r.errors > 0) {
          throw new Error(`${t.label}: expected ${t.expect}, got ${JSON.stringify(r.statuses)}, ${r.errors} errors`);
        }
        byId[t.id] = r.rps;
        rps.set(t.id, [...(rps.get(t.id) ?? []), r.rps]);
        sat.set(t.id, [...(sat.get(t.id) ?? []), r]);
        const l = await load({
          url: t.url(),
          duration: LATENCY_SECONDS,
          connections: 2,
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
        `| ${t.label} | ${fmt(r)} | ${fmt(r / passRps, 2)} | ${fmt(median(cpu.get(t.id) ?? [Number.NaN]))} | ${fmt(median(runs.map((x) => x.p50)), 2)} | ${fmt(median(runs.map((x) => x.p99)), 2)} | ${fmt(fixed.p50, 2)} | ${fmt(fixed.p99, 2)} | ${t.expect} |`,
      );
    }
    console.log(`\nratios (median of per-round ratios):`);
    for (const [label, xs] of ratios) {
      console.log(`  ${`${label}:`.padEnd(50)} ${fmt(median(xs), 2)}   [${xs.map((x) => fmt(x, 2)).join(", ")}]`);
    }
    if (ONLY) {
      console.log(
        `\nBENCH_ONLY: no storage count, chart or targets; total ${fmt((performance.now() - started) / 1000, 0)} s`,
      );
      return;
    }
    const addedP50 = p("allowed").p50 - p("pass").p50;
    const addedP99 = p("allowed").p99 - p("pass").p99;
    const addedHotP99 = p("hot").p99 - p("pass").p99;
    console.log(
      `  added latency at ${LATENCY_RATE} req/s, 1000 keys: p50 ${fmt(addedP50, 2)} ms, p99 ${fmt(addedP99, 2)} ms (pooled), per round ${addedP99ByRound.map((x) => fmt(x, 2)).join(", ")} ms; hot key p99 ${fmt(addedHotP99, 2)} ms`,
    );

    const storage = await countStorage(u.count);
    await chart(u);

    const r = (label: (typeof RATIOS)[number][0]) => median(ratios.get(label) ?? [Number.NaN]);
    const allowedRatio = r("(3) allowed, 1000 keys / (2) pass-through");
    const hotRatio = r("(3) allowed, hot key / (2) pass-through");
    const deniedVsAllowed = r("(4) denied, deny cache / (3) allowed, 1000 keys");
    console.log(`\ntargets:`);
    console.log(
      `  allowed >= 0.8x pass-through (1000 keys): ${fmt(allowedRatio, 2)} ${allowedRatio >= 0.8 ? "MET" : "MISSED"}; hot key ${fmt(hotRatio, 2)} ${hotRatio >= 0.8 ? "MET" : "MISSED"}`,
    );
    console.log(
      `  denied with cache >= 1.5x allowed: ${fmt(deniedVsAllowed, 2)} ${deniedVsAllowed >= 1.5 ? "MET" : "MISSED"}`,
    );
    console.log(
      `  p99 added latency <= 2 ms (at ${LATENCY_RATE} req/s): ${fmt(addedP99, 2)} ms ${addedP99 <= 2 ? "MET" : "MISSED"}`,
    );
    console.log(
      `  rows written per allowed <= 1 (steady state, slot rows): ${fmt(storage.slotsPerAllowed, 3)} ${storage.slotsPerAllowed <= 1 ? "MET" : "MISSED"}; billed incl. first-use meta row and setAlarm, 20 grants/key: ${fmt(storage.billedPerAllowed, 3)}; per denied = 0: ${fmt(storage.perDenied, 3)} ${storage.perDenied === 0 ? "MET" : "MISSED"}`,
    );
    console.log(`\ntotal ${fmt((performance.now() - started) / 1000, 0)} s`);
    console.log(`limiter/pass-through throughput ratio: ${fmt(allowedRatio, 2)}`);
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
  const out = {
    decides: 0,
    grants: 0,
    writeStatements: 0,
    rowsWritten: 0,
    slotRowsWritten: 0,
    setAlarms: 0,
    slotRows: 0,
    metaRows: 0,
    databaseSize: 0,
  };
  for (const x of xs) for (const k of Object.keys(out) as (keyof StorageCounts)[]) out[k] += x[k];
  return out;
}

/** Rows the object writes per allowed and per denied request, counted at the SQL API (bench/http/worker.mts). */
async function countStorage(
  countUrl: string,
): Promise<{ slotsPerAllowed: number; billedPerAllowed: number; perDenied: number }> {
  console.log(`\nstorage, counted in the object (CountingRateLimiter; no deny cache, so every request reaches it):`);
  const keys = 200;
  await load({ url: countUrl, amount: 4000, connections: CONNECTIONS, key: (i) => `c${i % keys}` });
  const many = sum(await Promise.all(Array.from({ length: keys }, (_, i) => stats(countUrl, `key:c${i}`))));
  await load({ url: countUrl, duration: SECONDS, connections: CONNECTIONS, key: "chot" });
  const hot = await stats(countUrl, "key:chot");
  await load({ url: countUrl, amount: 1, connections: 1, key: "deny_c" });
  const before = await stats(countUrl, "key:deny_c");
  await load({ url: countUrl, amount: 4000, connections: CONNECTIONS, key: "deny_c" });
  const after = await stats(countUrl, "key:deny_c");
  const line = (label: string, s: StorageCounts, n: number) =>
    console.log(
      `  ${label}: ${s.decides} decisions, ${s.grants} grants; ${s.writeStatements} write statements, ${s.rowsWritten} rows written (${fmt(s.rowsWritten / s.grants, 3)}/grant; slots ${s.slotRowsWritten}), ${s.setAlarms} setAlarm; at rest per key: ${fmt(s.slotRows / n, 1)} slot rows + ${fmt(s.metaRows / n, 0)} meta row, databaseSize ${fmt(s.databaseSize / n / 1024, 1)} KiB`,
    );
  line(`${keys} keys, 20 grants each`, many, keys);
  line("one hot key", hot, 1);
  // Per allowed: all rows written over all grants, and the slot rows alone (the rest is once per key).
  const perAllowed = (many.rowsWritten + hot.rowsWritten) / (many.grants + hot.grants);
  // Each setAlarm is billed as one row written.
  const billedPerAllowed = (many.rowsWritten + many.setAlarms) / many.grants;
  const slotsPerAllowed = (many.slotRowsWritten + hot.slotRowsWritten) / (many.grants + hot.grants);
  const denials = after.decides - before.decides;
  const perDenied = (after.rowsWritten - before.rowsWritten) / denials;
  console.log(
    `  rows written per allowed request: ${fmt(perAllowed, 3)} in all, ${fmt(slotsPerAllowed, 3)} to slots (the rest: the meta row on a key's first use); billed rows (+ setAlarm) per grant for the ${keys} keys: ${fmt(billedPerAllowed, 3)}`,
  );
  console.log(
    `  denied: ${denials} denials wrote ${after.rowsWritten - before.rowsWritten} rows, ${after.setAlarms - before.setAlarms} setAlarm: ${fmt(perDenied, 3)} rows per denied request`,
  );
  return { slotsPerAllowed, billedPerAllowed, perDenied };
}

/** Steady overload against each limiter at once; grants are recorded at their decision (bench/http/worker.mts). */
async function chart(u: Runtime["urls"]): Promise<void> {
  const contenders = [
    { name: "this limiter (sliding log in a Durable Object)", url: u.chart, key: "chart_limiter" },
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
