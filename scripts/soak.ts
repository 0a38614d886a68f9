/**
 * @module `npm run soak`: a long run at the highest rate the local runtime sustains, across many keys.
 *
 *   npm run soak                                   # ≥ 60 s warm-up + 60 s judged, 1,000 keys, 32 clients
 *   npm run soak -- --warmup 10 --seconds 30 --keys 200
 *   npm run soak -- --runner wrangler              # under `wrangler dev` instead
 *   npm run soak -- --target floor                 # a no-op Durable Object per key instead of the limiter
 *   npm run soak -- --leases off                   # the per-request path, for comparison
 *
 * Starts the recording origin and the limiter (src/'s Worker and object, bundled with the test-only entry
 * test/e2e/worker/lease-entry.ts that counts where grants came from) in workerd — by default through Miniflare's
 * API with a direct socket (test/support/workers.ts, no dev proxy), or under `wrangler dev`
 * (test/support/harness.ts) — drives it with concurrent HTTP clients over a skewed key distribution (a few hot
 * keys, a long tail) on 127.0.0.1 only, samples workerd's memory every second, and judges: no unexpected status
 * (only 200 and 429), every key's sliding windows at the origin hold at most N (allowing the measured
 * send-to-arrival latency), and memory that settles and stays under its ceiling. Exits 1 if a check fails.
 * Leases are on (the default): every other hot key has limits that lease (200/1s + 5000/1m), the rest keep
 * 5/1s + 30/10s (under 16: never leased); the report gives, per plan, the grants spent from leases and the object
 * calls per grant.
 *
 * Memory (scripts/soak-memory.ts): workerd settles after a number of requests, not after a fixed time, so
 * `--warmup` is the least warm-up: it goes on until memory has stopped rising, up to `--max-warmup`, and only
 * then are `--seconds` judged for flatness; a ceiling (idle + workerd's own allowance + an allowance per key)
 * holds at every duration. The report gives memory per key. `--target floor` (an empty Durable Object per key)
 * and `--target pass` (a Worker that only proxies) measure what workerd itself grows by under the same load.
 * Under `--runner wrangler` memory is reported, not judged (see below).
 *
 * Why workerd direct by default: `wrangler dev` (4.156) grows by ~30 KiB per request even for a
 * hello-world Worker (its dev proxy and inspector plumbing), which would hide the limiter's own memory.
 */

import { existsSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "node:util";
import { startRuntime } from "../bench/http/runtime.ts";
import { startLimiter, tempDir } from "../test/support/harness.ts";
import type { IsolateReport } from "../test/support/lease-report.ts";
import { type Origin, startOrigin } from "../test/support/origin.ts";
import { groupPids, type Memory, memoryOf, sumMemory } from "../test/support/proc.ts";
import { judgeWindows, maxSendToArrival } from "../test/support/window.ts";
import { buildBundle, startWorkers } from "../test/support/workers.ts";
import { hasSettled, judgeMemory, SETTLE_WINDOW_MS } from "./soak-memory.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "60" },
    warmup: { type: "string", default: "60" },
    "max-warmup": { type: "string", default: "180" },
    runner: { type: "string", default: "miniflare" },
    target: { type: "string", default: "product" },
    keys: { type: "string", default: "1000" },
    clients: { type: "string", default: "32" },
    leases: { type: "string", default: "on" },
    "state-dir": { type: "string" },
    /** Writes every memory sample (once a second) to this JSON file. */
    samples: { type: "string" },
  },
});
const SECONDS = Number(values.seconds);
const KEYS = Number(values.keys);
const CLIENTS = Number(values.clients);
/** The warm-up lasts at least this long, and until memory has settled, but no longer than the cap. */
const WARM_UP_MS = Number(values.warmup) * 1000;
const MAX_WARM_UP_MS = Math.max(WARM_UP_MS, Number(values["max-warmup"]) * 1000);
const RUNNER = values.runner;
const TARGET = values.target;
if (RUNNER !== "miniflare" && RUNNER !== "wrangler") {
  throw new Error(`--runner: "miniflare" or "wrangler", got ${RUNNER}`);
}
if (TARGET !== "product" && TARGET !== "floor" && TARGET !== "pass") {
  throw new Error(`--target: "product", "floor" or "pass", got ${TARGET}`);
}
if (TARGET !== "product" && RUNNER !== "miniflare") throw new Error("--target floor|pass needs --runner miniflare");
if (values.leases !== "on" && values.leases !== "off") throw new Error(`--leases: "on" or "off", got ${values.leases}`);
for (const [name, v, min, max] of [
  ["--seconds", SECONDS, 10, 3600],
  ["--warmup", WARM_UP_MS / 1000, 0, 3600],
  ["--max-warmup", MAX_WARM_UP_MS / 1000, 0, 3600],
  ["--keys", KEYS, 1, 100_000],
  ["--clients", CLIENTS, 1, 1024],
] as const) {
  if (!Number.isInteger(v) || v < min || v > max)
    throw new Error(`${name}: an integer from ${min} to ${max}, got ${v}`);
}

/** Most keys: limits under 16, which never lease (every grant is the object's decision). */
const LIMITS = [
  { limit: 5, windowMs: 1000 },
  { limit: 30, windowMs: 10_000 },
];
/**
 * Every other hot key (even index among the first 1%): limits that lease (a lease carries at most 200/8 = 25
 * units, sized from the key's headroom). The odd hot keys keep the small limits, so overload and the deny path stay busy too.
 */
const HOT_LIMITS = [
  { limit: 200, windowMs: 1000 },
  { limit: 5000, windowMs: 60_000 },
];
const HOT_KEYS = Math.max(1, Math.floor(KEYS / 100));
const leases = (key: number) => key < HOT_KEYS && key % 2 === 0;
const keyName = (key: number) => (leases(key) ? `soak_hot_${key}` : `soak_${key}`);
/**
 * The objects' SQLite files go on tmpfs when there is one, as in `npm run bench`: on this VM's disk, 500–1,000
 * objects writing at once stall fsync for tens of seconds (BENCHMARKS.md, "Soak memory"). `--state-dir` overrides.
 */
const STATE_DIR = values["state-dir"] ?? (existsSync("/dev/shm") ? "/dev/shm" : tmpdir());
const asConfig = (limits: typeof LIMITS) => limits.map((l) => ({ limit: l.limit, window: `${l.windowMs}ms` }));
const RATE_LIMIT = {
  limits: asConfig(LIMITS),
  plans: [{ name: "hot", key_prefix: "soak_hot_", limits: asConfig(HOT_LIMITS) }],
  leases: values.leases === "on",
};
/**
 * The product's Worker and object (src/), bundled with the test-only entry test/e2e/worker/lease-entry.ts, which
 * counts each isolate's decisions by reason and its object calls (`GET /__lease-test/stats`): how many grants were
 * spent from leases. `--target floor|pass` run the bench's Workers instead.
 */
const LEASES_CONFIG = "test/e2e/worker/wrangler.leases.toml";
/** Key index with a skew: half the traffic on the first 1% of keys, the rest spread over all. */
function pickKey(): number {
  return Math.random() < 0.5 ? Math.floor(Math.random() * HOT_KEYS) : Math.floor(Math.random() * KEYS);
}

/** The limiter running somewhere: its URL, workerd's memory, and how to stop it. */
interface Target {
  url: string;
  /** What the Worker logged (empty when not captured). */
  logs(): string;
  memory(): Memory;
  stop(): Promise<void>;
}

async function startTarget(origin: string, persistTo: string): Promise<Target> {
  if (RUNNER === "wrangler") {
    const limiter = await startLimiter({ origin, rateLimit: RATE_LIMIT, persistTo, config: LEASES_CONFIG });
    return {
      url: limiter.url,
      logs: () => limiter.output(),
      memory: () => sumMemory(groupPids(limiter.pgid, "workerd").map(memoryOf)),
      stop: () => limiter.stop(),
    };
  }
  if (TARGET === "product") {
    const bundle = await buildBundle(LEASES_CONFIG);
    try {
      const workers = await startWorkers({ bundle, count: 1, origin, rateLimit: RATE_LIMIT, persistTo });
      const pid = workers.pid;
      if (pid === null) {
        await workers.stop();
        throw new Error("cannot tell the workerd process apart");
      }
      return {
        url: workers.urls[0] as string,
        logs: () => workers.output(),
        memory: () => memoryOf(pid),
        stop: async () => {
          await workers.stop();
          await bundle.cleanup();
        },
      };
    } catch (e) {
      await bundle.cleanup();
      throw e;
    }
  }
  const runtime = await startRuntime({
    origin,
    rateLimit: RATE_LIMIT,
    chartLimit: 100,
    chartWindowMs: 10_000,
    stateDir: STATE_DIR,
  });
  const pid = runtime.pid;
  if (pid === null) throw new Error("cannot tell the workerd process apart");
  return {
    url: runtime.urls[TARGET as "floor" | "pass"],
    logs: () => "",
    memory: () => memoryOf(pid),
    stop: () => runtime.dispose(),
  };
}

/** Where the grants came from, per plan: the isolate's decisions by reason and its object calls. */
async function leaseReport(url: string) {
  const r = await fetch(`${url}/__lease-test/stats`);
  if (r.status !== 200) throw new Error(`lease stats: ${r.status}`);
  const { plans } = (await r.json()) as IsolateReport;
  return Object.fromEntries(
    Object.entries(plans).map(([plan, p]) => {
      const grants = (p.reasons.leased ?? 0) + (p.reasons.granted ?? 0);
      const calls = p.takes + p.giveBacks;
      return [
        plan,
        {
          keys: p.keys,
          grants,
          from_leases: p.reasons.leased ?? 0,
          from_leases_share: grants ? Number(((p.reasons.leased ?? 0) / grants).toFixed(3)) : null,
          object_calls: calls,
          object_calls_per_grant: grants ? Number((calls / grants).toFixed(3)) : null,
          leases: p.leases,
          largest_lease: p.largestLease,
          units_given_back: p.givenBackUnits,
          reasons: p.reasons,
        },
      ];
    }),
  );
}

interface Sent {
  key: number;
  id: number;
  sentAt: number;
  status: number;
  /** Send to answer, ms. */
  ms: number;
}

/** The longest one request may take; past it the request counts as a client error (and the soak fails). */
const REQUEST_TIMEOUT_MS = 30_000;

interface Sample extends Memory {
  /** ms since the load started. */
  at: number;
  /** Requests answered so far. */
  requests: number;
}

const mib = (kib: number) => Math.round(kib / 1024);

/** Whether the last settling window answered at least half the run's average rate (flat memory during a stall proves nothing). */
function underLoad(samples: readonly Sample[], at: number): boolean {
  const from = samples.find((x) => x.at > at - SETTLE_WINDOW_MS);
  const last = samples.at(-1);
  if (!from || !last || last.at <= from.at) return false;
  return (last.requests - from.requests) / (last.at - from.at) >= (0.5 * last.requests) / last.at;
}

async function main(): Promise<number> {
  const origin: Origin = await startOrigin();
  const state = await tempDir("limiter-soak-", STATE_DIR);
  let target: Target | null = null;
  try {
    target = await startTarget(origin.url, state.path);
    const { url } = target;
    const running = target;
    console.log(
      `soak: warm-up of ${WARM_UP_MS / 1000}–${MAX_WARM_UP_MS / 1000} s (until memory settles) + ${SECONDS} s, ${KEYS} keys, ${CLIENTS} clients against ${url} (${RUNNER}, ${TARGET})`,
    );

    const sent: Sent[] = [];
    const errors = new Map<string, number>();
    const unexpectedSamples: string[] = [];
    let next = 0;
    const idle = running.memory();
    const start = Date.now();
    const samples: Sample[] = [];
    // The warm-up ends once memory has settled (never for wrangler dev: memory is not judged there).
    let judgedFrom: number | null = null;
    let settled = false;
    let stopAt = Number.POSITIVE_INFINITY;
    const sampler = setInterval(() => {
      const at = Date.now() - start;
      samples.push({ at, requests: sent.length, ...running.memory() });
      if (judgedFrom !== null) return;
      settled = RUNNER === "miniflare" && at >= WARM_UP_MS && hasSettled(samples, at) && underLoad(samples, at);
      if (settled || at >= MAX_WARM_UP_MS || (RUNNER === "wrangler" && at >= WARM_UP_MS)) {
        judgedFrom = at;
        stopAt = Date.now() + SECONDS * 1000;
        console.log(
          `soak: warm-up over after ${(at / 1000).toFixed(0)} s (${settled ? "memory settled" : RUNNER === "wrangler" ? "memory not judged under wrangler dev" : "memory not settled by --max-warmup"}), ${SECONDS} s judged`,
        );
      }
    }, 1000);

    const client = async () => {
      while (Date.now() < stopAt) {
        const key = pickKey();
        const id = next++;
        const sentAt = Date.now();
        try {
          // A deadline, so that a hung runtime ends the soak (as client errors) instead of holding it open.
          const r = await fetch(`${url}/soak?id=${id}`, {
            headers: { "x-api-key": keyName(key) },
            signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
          });
          const body = await r.text();
          if (r.status !== 200 && r.status !== 429 && unexpectedSamples.length < 5) {
            unexpectedSamples.push(`${r.status} ${body.slice(0, 300)}`);
          }
          sent.push({ key, id, sentAt, status: r.status, ms: Date.now() - sentAt });
        } catch (e) {
          const m = (e as Error).message;
          errors.set(m, (errors.get(m) ?? 0) + 1);
        }
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, client));
    clearInterval(sampler);
    samples.push({ at: Date.now() - start, requests: sent.length, ...running.memory() });
    const elapsed = (Date.now() - start) / 1000;

    // Judge: statuses, per-key sweeps at the origin (test/support/window.ts), memory.
    const byStatus = new Map<number, number>();
    for (const s of sent) byStatus.set(s.status, (byStatus.get(s.status) ?? 0) + 1);
    const unexpected = sent.filter((s) => s.status !== 200 && s.status !== 429).length;
    const sentIds = new Set(sent.map((s) => s.id));
    const arrivals = origin.arrivals.map((a) => ({
      id: Number(new URL(a.url, "http://x").searchParams.get("id")),
      at: a.at,
      key: String(a.headers["x-api-key"]),
    }));
    const known = arrivals.filter((a) => sentIds.has(a.id));
    const orphans = arrivals.length - known.length;
    const jitter = maxSendToArrival(sent, known);
    const byKey = new Map<string, typeof known>();
    for (const a of known) {
      const list = byKey.get(a.key) ?? [];
      list.push(a);
      byKey.set(a.key, list);
    }
    const granted = byStatus.get(200) ?? 0;
    let violations = 0;
    if (TARGET === "product") {
      for (const list of byKey.values()) {
        const limits = list[0]?.key.startsWith("soak_hot_") ? HOT_LIMITS : LIMITS;
        for (const w of judgeWindows(sent, list, limits, jitter).windows) if (w.max > w.limit) violations += 1;
      }
    }

    const memory = judgeMemory({
      idle: idle.rss,
      samples,
      judgedFrom: judgedFrom ?? elapsed * 1000,
      keys: KEYS,
      settled,
    });
    const last = samples.at(-1);
    const leaseFigures = TARGET === "product" ? await leaseReport(url) : "not measured (not the limiter)";

    const report = {
      seconds: Number(elapsed.toFixed(1)),
      target: TARGET,
      requests: sent.length,
      requests_per_s: Math.round(sent.length / elapsed),
      statuses: Object.fromEntries(byStatus),
      client_errors: Object.fromEntries(errors),
      unexpected_samples: unexpectedSamples,
      worker_errors: running
        .logs()
        .split("\n")
        .filter((l) => /"event":"(internal_error|limiter_unavailable|lease_return_failed|lease_refill_failed)"/.test(l))
        .slice(0, 5),
      keys_used: new Set(sent.map((s) => s.key)).size,
      keys_granted: byKey.size,
      origin_arrivals: origin.arrivals.length,
      granted,
      orphan_arrivals: orphans,
      max_send_to_arrival_ms: jitter,
      slowest_answer_ms: sent.reduce((m, x) => Math.max(m, x.ms), 0),
      window_violations: TARGET === "product" ? violations : "not judged (not the limiter)",
      leasing_keys: Math.ceil(HOT_KEYS / 2),
      by_plan: leaseFigures,
      warm_up_s: Math.round((judgedFrom ?? 0) / 1000),
      warm_up_settled: settled,
      workerd_rss_mib: {
        ...memory.report,
        anon_end: last ? mib(last.anon) : null,
        file_end: last ? mib(last.file) : null,
        shmem_end: last ? mib(last.shmem) : null,
        every_5s: samples.filter((_, i) => i % 5 === 4).map((m) => mib(m.rss)),
      },
      memory_per_key_mib: memory.report.per_key,
    };
    console.log(JSON.stringify(report, null, 2));
    if (values.samples) writeFileSync(values.samples, JSON.stringify({ keys: KEYS, target: TARGET, idle, samples }));

    const failures: string[] = [];
    if (unexpected > 0) failures.push(`${unexpected} responses other than 200/429`);
    if (errors.size > 0) failures.push(`${[...errors.values()].reduce((a, b) => a + b, 0)} client errors`);
    if (origin.arrivals.length !== granted || orphans > 0) {
      failures.push(`origin saw ${origin.arrivals.length} requests for ${granted} grants (${orphans} unknown)`);
    }
    if (violations > 0) failures.push(`${violations} key/limit sweeps over N`);
    if (RUNNER === "miniflare") failures.push(...memory.failures);
    console.log(failures.length === 0 ? "soak: PASS" : `soak: FAIL\n- ${failures.join("\n- ")}`);
    return failures.length === 0 ? 0 : 1;
  } finally {
    await target?.stop();
    await origin.close();
    await state.cleanup();
  }
}

process.exitCode = await main();
