/**
 * @module `npm run soak`: a long run at the highest rate the local runtime sustains, across many keys.
 *
 *   npm run soak                                   # 60 s, 1,000 keys, 32 concurrent clients
 *   npm run soak -- --seconds 10 --keys 100 --clients 16
 *
 * Starts the recording origin and the limiter under `wrangler dev` (test/e2e/harness.ts), drives it with
 * concurrent HTTP clients over a skewed key distribution (a few hot keys, a long tail), samples workerd's
 * memory, and judges: no unexpected status (only 200 and 429), every key's sliding windows at the origin
 * hold at most N (allowing the measured send-to-arrival latency), memory flat. Exits 1 if a check fails.
 */

import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { type Limiter, maxInWindow, startLimiter, tempDir } from "../test/e2e/harness.ts";
import { type Origin, startOrigin } from "../test/setup/origin-server.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "60" },
    keys: { type: "string", default: "1000" },
    clients: { type: "string", default: "32" },
  },
});
const SECONDS = Number(values.seconds);
const KEYS = Number(values.keys);
const CLIENTS = Number(values.clients);

const LIMITS = [
  { limit: 5, windowMs: 1000 },
  { limit: 60, windowMs: 60_000 },
];
const RATE_LIMIT = { limits: LIMITS.map((l) => ({ limit: l.limit, window: `${l.windowMs}ms` })) };

/** Key index with a skew: half the traffic on the first 1% of keys, the rest spread over all. */
function pickKey(): number {
  const hot = Math.max(1, Math.floor(KEYS / 100));
  return Math.random() < 0.5 ? Math.floor(Math.random() * hot) : Math.floor(Math.random() * KEYS);
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
  let limiter: Limiter | null = null;
  try {
    limiter = await startLimiter({ origin: origin.url, rateLimit: RATE_LIMIT, persistTo: state.path });
    const url = limiter.url;
    const pgid = limiter.pgid;
    console.log(`soak: ${SECONDS} s, ${KEYS} keys, ${CLIENTS} clients against ${url}`);

    const sent: Sent[] = [];
    const errors = new Map<string, number>();
    let next = 0;
    const start = Date.now();
    const end = start + SECONDS * 1000;
    const memory: { at: number; workerd: number; total: number }[] = [];
    const sampler = setInterval(() => {
      void groupRss(pgid).then((m) => memory.push({ at: Date.now() - start, ...m }));
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
    const warm = memory.filter((m) => m.at >= 10_000);
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
        at_10s: first ? Math.round(first.workerd / 1024) : null,
        end: last ? Math.round(last.workerd / 1024) : null,
        peak: Math.round(peak / 1024),
        growth_after_10s: Number(growthMiB.toFixed(1)),
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
    // Flat memory: what workerd holds after warm-up does not keep growing (< 10% or 20 MiB, whichever is more).
    if (first && last && last.workerd - first.workerd > Math.max(first.workerd * 0.1, 20 * 1024)) {
      failures.push(`workerd memory grew ${growthMiB.toFixed(1)} MiB after warm-up`);
    }
    console.log(failures.length === 0 ? "soak: PASS" : `soak: FAIL\n- ${failures.join("\n- ")}`);
    return failures.length === 0 ? 0 : 1;
  } finally {
    await limiter?.stop();
    await origin.close();
    await state.cleanup();
  }
}

process.exitCode = await main();
