/**
 * @module `npm run soak`: a long run at the highest rate the local runtime sustains, across many keys.
 *
 *   npm run soak                                   # 60 s warm-up + 60 s judged, 1,000 keys, 32 clients
 *   npm run soak -- --warmup 10 --seconds 10 --keys 100 --clients 16
 *   npm run soak -- --runner wrangler              # under `wrangler dev` instead
 *
 * Starts the recording origin and the limiter's deployable bundle in workerd — by default through
 * Miniflare's API with a direct socket (bench/http/runtime.ts, no dev proxy), or under `wrangler dev`
 * (test/support/harness.ts) — drives it with concurrent HTTP clients over a skewed key distribution (a few hot
 * keys, a long tail), samples workerd's memory, and judges: no unexpected status (only 200 and 429), every
 * key's sliding windows at the origin hold at most N (allowing the measured send-to-arrival latency),
 * memory flat after warm-up. Exits 1 if a check fails.
 *
 * The warm-up runs the same load: workerd's memory rises for about a minute (1,000 objects start, V8's
 * heap and SQLite's caches size themselves) and then stays flat; the judged part starts after it.
 *
 * Why workerd direct by default: `wrangler dev` (4.156) grows by ~30 KiB per request even for a
 * hello-world Worker (its dev proxy and inspector plumbing), which would hide the limiter's own memory.
 */

import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { parseArgs } from "node:util";
import { startRuntime } from "../bench/http/runtime.ts";
import { startLimiter, tempDir } from "../test/support/harness.ts";
import { type Origin, startOrigin } from "../test/support/origin.ts";
import { maxInWindow } from "../test/support/window.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "60" },
    warmup: { type: "string", default: "60" },
    runner: { type: "string", default: "miniflare" },
    keys: { type: "string", default: "1000" },
    clients: { type: "string", default: "32" },
  },
});
const SECONDS = Number(values.seconds);
const KEYS = Number(values.keys);
const CLIENTS = Number(values.clients);
const RUNNER = values.runner;
if (RUNNER !== "miniflare" && RUNNER !== "wrangler")
  throw new Error(`--runner: "miniflare" or "wrangler", got ${RUNNER}`);

const LIMITS = [
  { limit: 5, windowMs: 1000 },
  { limit: 30, windowMs: 10_000 },
];
/** Memory is judged after this much of the same load. */
const WARM_UP_MS = Number(values.warmup) * 1000;
const RATE_LIMIT = { limits: LIMITS.map((l) => ({ limit: l.limit, window: `${l.windowMs}ms` })) };

/** Key index with a skew: half the traffic on the first 1% of keys, the rest spread over all. */
function pickKey(): number {
  const hot = Math.max(1, Math.floor(KEYS / 100));
  return Math.random() < 0.5 ? Math.floor(Math.random() * hot) : Math.floor(Math.random() * KEYS);
}

/** Resident memory (KiB) of one process. */
async function processRss(pid: number): Promise<{ workerd: number; total: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return { workerd: rss, total: rss };
}

/** The limiter running somewhere: its URL, its memory, and how to stop it. */
interface Target {
  url: string;
  rss(): Promise<{ workerd: number; total: number }>;
  stop(): Promise<void>;
}

async function startTarget(origin: string, persistTo: string): Promise<Target> {
  if (RUNNER === "wrangler") {
    const limiter = await startLimiter({ origin, rateLimit: RATE_LIMIT, persistTo });
    return { url: limiter.url, rss: () => groupRss(limiter.pgid), stop: () => limiter.stop() };
  }
  const runtime = await startRuntime({
    origin,
    rateLimit: RATE_LIMIT,
    chartLimit: 100,
    chartWindowMs: 10_000,
    stateDir: tmpdir(),
  });
  const pid = runtime.pid;
  if (pid === null) throw new Error("cannot tell the workerd process apart");
  return { url: runtime.urls.product, rss: () => processRss(pid), stop: () => runtime.dispose() };
}

/** Resident memory (KiB) of every process in the group (wrangler and workerd). */
async function groupRss(pgid: number): Promise<{ workerd: number; total: number }> {
  const { readdir } = await import("node:fs/promises");
  let workerd = 0;
  let total = 0;
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = await readFile(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[2]) !== pgid) continue;
      const status = await readFile(`/proc/${pid}/status`, "utf8");
      const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      total += rss;
      if (stat.includes("(workerd)")) workerd += rss;
    } catch {
      // the process went away
    }
  }
  return { workerd, total };
}

interface Sent {
  key: number;
  id: number;
  sentAt: number;
  status: number;
}

async function main(): Promise<number> {
  const origin: Origin = await startOrigin();
  const state = await tempDir("limiter-soak-");
  let target: Target | null = null;
  try {
    target = await startTarget(origin.url, state.path);
    const { url } = target;
    const running = target;
    console.log(
      `soak: ${WARM_UP_MS / 1000} s warm-up + ${SECONDS} s, ${KEYS} keys, ${CLIENTS} clients against ${url} (${RUNNER})`,
    );

    const sent: Sent[] = [];
    const errors = new Map<string, number>();
    let next = 0;
    const start = Date.now();
    const end = start + WARM_UP_MS + SECONDS * 1000;
    const memory: { at: number; workerd: number; total: number }[] = [];
    const sampler = setInterval(() => {
      void running.rss().then((m) => memory.push({ at: Date.now() - start, ...m }));
    }, 1000);

    const client = async () => {
      while (Date.now() < end) {
        const key = pickKey();
        const id = next++;
        const sentAt = Date.now();
        try {
          const r = await fetch(`${url}/soak?id=${id}`, { headers: { "x-api-key": `soak_${key}` } });
          await r.arrayBuffer();
          sent.push({ key, id, sentAt, status: r.status });
        } catch (e) {
          const m = (e as Error).message;
          errors.set(m, (errors.get(m) ?? 0) + 1);
        }
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, client));
    clearInterval(sampler);
    const elapsed = (Date.now() - start) / 1000;

    // Judge: statuses, per-key sweeps at the origin, memory.
    const byStatus = new Map<number, number>();
    for (const s of sent) byStatus.set(s.status, (byStatus.get(s.status) ?? 0) + 1);
    const unexpected = sent.filter((s) => s.status !== 200 && s.status !== 429).length;
    const sentById = new Map(sent.map((s) => [s.id, s]));
    const arrivalsByKey = new Map<string, number[]>();
    let jitter = 0;
    let orphans = 0;
    for (const a of origin.arrivals) {
      const s = sentById.get(Number(new URL(a.url, "http://x").searchParams.get("id")));
      if (!s) {
        orphans += 1;
        continue;
      }
      jitter = Math.max(jitter, a.at - s.sentAt);
      const k = String(a.headers["x-api-key"]);
      const list = arrivalsByKey.get(k) ?? [];
      list.push(a.at);
      arrivalsByKey.set(k, list);
    }
    const granted = byStatus.get(200) ?? 0;
    let violations = 0;
    for (const times of arrivalsByKey.values()) {
      for (const l of LIMITS) if (maxInWindow(times, l.windowMs - jitter) > l.limit) violations += 1;
    }
    const warm = memory.filter((m) => m.at >= WARM_UP_MS);
    const first = warm[0] ?? memory[0];
    const last = memory.at(-1);
    const peak = Math.max(...memory.map((m) => m.workerd));
    const growthMiB = first && last ? (last.workerd - first.workerd) / 1024 : Number.NaN;

    const report = {
      seconds: Number(elapsed.toFixed(1)),
      requests: sent.length,
      requests_per_s: Math.round(sent.length / elapsed),
      statuses: Object.fromEntries(byStatus),
      client_errors: Object.fromEntries(errors),
      keys_used: new Set(sent.map((s) => s.key)).size,
      keys_granted: arrivalsByKey.size,
      origin_arrivals: origin.arrivals.length,
      granted,
      orphan_arrivals: orphans,
      max_send_to_arrival_ms: jitter,
      window_violations: violations,
      workerd_rss_mib: {
        after_warm_up: first ? Math.round(first.workerd / 1024) : null,
        end: last ? Math.round(last.workerd / 1024) : null,
        peak: Math.round(peak / 1024),
        growth_after_warm_up: Number(growthMiB.toFixed(1)),
        every_5s: memory.filter((_, i) => i % 5 === 4).map((m) => Math.round(m.workerd / 1024)),
      },
    };
    console.log(JSON.stringify(report, null, 2));

    const failures: string[] = [];
    if (unexpected > 0) failures.push(`${unexpected} responses other than 200/429`);
    if (errors.size > 0) failures.push(`${[...errors.values()].reduce((a, b) => a + b, 0)} client errors`);
    if (origin.arrivals.length !== granted || orphans > 0) {
      failures.push(`origin saw ${origin.arrivals.length} requests for ${granted} grants (${orphans} unknown)`);
    }
    if (violations > 0) failures.push(`${violations} key/limit sweeps over N`);
    // Flat memory: what workerd holds after warm-up does not keep growing (< 5% or 20 MiB, whichever is more).
    if (first && last && last.workerd - first.workerd > Math.max(first.workerd * 0.05, 20 * 1024)) {
      failures.push(`workerd memory grew ${growthMiB.toFixed(1)} MiB after warm-up`);
    }
    console.log(failures.length === 0 ? "soak: PASS" : `soak: FAIL\n- ${failures.join("\n- ")}`);
    return failures.length === 0 ? 0 : 1;
  } finally {
    await target?.stop();
    await origin.close();
    await state.cleanup();
  }
}

process.exitCode = await main();
