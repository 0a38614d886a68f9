/**
 * @module `npm run bench:outage`: a key's object stops answering (docs/configuration.md, "When the object cannot
 * answer"). The real bundle's proxy in workerd, one isolate, every object call delayed by a round trip R as in
 * production; 4 clients in closed loops on one key at twice its limit, through three phases: up (3 s), the object
 * hanging (or failing at once, `OUTAGE_KIND=fail`) for 6 s, up again (4 s). Per failure mode (closed, open, local):
 * latency per phase against the same loops on a key of an `unlimited` plan through the same isolate (the product's
 * own pass-through), requests that waited `object_timeout`, object calls, and the grants: the most in any window
 * of the limit (by each grant's decision time), and what an exact limiter deciding each request at its send time
 * grants over the run.
 *
 *   npm run bench:outage                      # ~2 min
 *   OUTAGE_RTT=80 OUTAGE_KIND=fail npm run bench:outage
 */

import { cpus } from "node:os";
import { resolve } from "node:path";
import { KeyLog, type LimitSpec } from "../src/core/index.ts";
import { startOrigin } from "../test/support/origin.ts";
import { maxInWindow } from "../test/support/window.ts";
import { quantile } from "./http/load.ts";
import { startRuntime } from "./http/runtime.ts";

const RTT = Number(process.env.OUTAGE_RTT ?? 20);
const KIND = process.env.OUTAGE_KIND === "fail" ? "fail" : "hang";
const OBJECT_TIMEOUT_MS = 300;
const LIMIT: LimitSpec = { limit: 40, windowMs: 1000 };
const CLIENTS = 4;
const PHASES = [
  { name: "up", state: "up", ms: 3000 },
  { name: KIND === "hang" ? "hanging" : "failing", state: KIND, ms: 6000 },
  { name: "up again", state: "up", ms: 4000 },
] as const;

const RATE_LIMIT = {
  limits: [{ limit: 1_000_000, window: "1s" }],
  object_timeout: `${OBJECT_TIMEOUT_MS}ms`,
  plans: [
    { name: "down", key_prefix: "down_", limits: [{ limit: LIMIT.limit, window: LIMIT.windowMs }] },
    { name: "free", key_prefix: "free_", unlimited: true },
  ],
};

interface Sent {
  readonly at: number;
  readonly phase: number;
  latencyMs: number;
  status: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function send(url: string, key: string, mode: string, phase: number): Promise<Sent> {
  const s: Sent = { at: Date.now(), phase, latencyMs: 0, status: 0 };
  const start = performance.now();
  try {
    const res = await fetch(`${url}/outage`, {
      headers: { "x-api-key": key, "x-bench-rtt": String(RTT), "x-outage-mode": mode },
    });
    await res.arrayBuffer();
    s.status = res.status;
  } catch {
    s.status = -1;
  }
  s.latencyMs = performance.now() - start;
  return s;
}

/** Closed loops at twice the limit (each client paced to LIMIT/s ÷ CLIENTS × 2) through the phases. */
async function run(url: string, key: string, mode: string): Promise<Sent[]> {
  const out: Sent[] = [];
  const gapMs = (LIMIT.windowMs * CLIENTS) / (2 * LIMIT.limit);
  let phase = 0;
  const ends: number[] = [];
  for (const p of PHASES) ends.push((ends.at(-1) ?? Date.now()) + p.ms);
  const driver = (async () => {
    for (let i = 0; i < PHASES.length; i++) {
      phase = i;
      await fetch(`${url}/__outage/${(PHASES[i] as (typeof PHASES)[number]).state}`, { method: "POST" });
      await sleep((ends[i] as number) - Date.now());
    }
  })();
  const end = ends.at(-1) as number;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (Date.now() < end) {
        const started = Date.now();
        out.push(await send(url, key, mode, phase));
        await sleep(gapMs - (Date.now() - started));
      }
    }),
  );
  await driver;
  await fetch(`${url}/__outage/up`, { method: "POST" });
  return out;
}

function exact(sent: readonly Sent[]): number {
  const log = new KeyLog([LIMIT]);
  let n = 0;
  for (const s of [...sent].sort((a, b) => a.at - b.at)) if (log.take(s.at, { cost: 1 }).decision.allowed) n++;
  return n;
}

const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : "-");

async function main(): Promise<void> {
  console.log(
    `machine: ${cpus().length}x ${cpus()[0]?.model ?? "?"}, Node ${process.version}; R = ${RTT} ms, object_timeout ${OBJECT_TIMEOUT_MS} ms, the object ${KIND === "hang" ? "hangs" : "fails"}; ${CLIENTS} loops at 2x ${LIMIT.limit}/${LIMIT.windowMs} ms`,
  );
  const origin = await startOrigin();
  const rt = await startRuntime({
    origin: origin.url,
    rateLimit: RATE_LIMIT,
    chartLimit: 100,
    chartWindowMs: 10_000,
    stateDir: resolve("/dev/shm"),
  });
  const url = rt.urls.outage;
  const rows: string[] = [];
  try {
    for (const mode of ["closed", "open", "local"]) {
      const pass = await run(url, `free_${crypto.randomUUID()}`, mode);
      await fetch(`${url}/__outage/stats`);
      const key = `down_${crypto.randomUUID()}`;
      const sent = await run(url, key, mode);
      await sleep(RTT + 100);
      const stats = (await (await fetch(`${url}/__outage/stats`)).json()) as {
        calls: number;
        grants: Record<string, number[]>;
        reasons: Record<string, Record<string, number>>;
      };
      const grants = stats.grants[`key:${key}`] ?? [];
      for (let p = 0; p < PHASES.length; p++) {
        const lat = sent
          .filter((s) => s.phase === p)
          .map((s) => s.latencyMs)
          .sort((a, b) => a - b);
        const ref = pass
          .filter((s) => s.phase === p)
          .map((s) => s.latencyMs)
          .sort((a, b) => a - b);
        const waited = sent.filter((s) => s.phase === p && s.latencyMs >= OBJECT_TIMEOUT_MS).length;
        const statuses: Record<number, number> = {};
        for (const s of sent.filter((x) => x.phase === p)) statuses[s.status] = (statuses[s.status] ?? 0) + 1;
        const row = [
          mode.padEnd(7),
          (PHASES[p] as (typeof PHASES)[number]).name.padEnd(9),
          String(lat.length).padStart(5),
          fmt(quantile(lat, 0.5)).padStart(7),
          fmt(quantile(lat, 0.99)).padStart(7),
          fmt(lat.at(-1) ?? Number.NaN).padStart(7),
          fmt(quantile(ref, 0.5)).padStart(8),
          fmt(quantile(ref, 0.99)).padStart(8),
          String(waited).padStart(7),
          `  ${Object.entries(statuses)
            .map(([k, v]) => `${k}:${v}`)
            .join(" ")}`,
        ].join(" ");
        rows.push(row);
        console.log(row);
      }
      const most = maxInWindow(grants, LIMIT.windowMs);
      const line = `${mode}: ${stats.calls} object calls; grants ${grants.length} (exact limiter at send times: ${exact(sent)}); most in any ${LIMIT.windowMs} ms window ${most} of ${LIMIT.limit}${most > LIMIT.limit ? "  OVER" : ""}; reasons ${JSON.stringify(stats.reasons[`key:${key}`] ?? {})}`;
      rows.push(line);
      console.log(line);
    }
    console.log(
      `\nmode    phase     reqs  p50 ms  p99 ms  max ms  pass p50 pass p99  waited  statuses\n${rows.join("\n")}`,
    );
    console.log(`waited: requests that took object_timeout (${OBJECT_TIMEOUT_MS} ms) or longer`);
  } finally {
    await rt.dispose();
    await origin.close();
  }
}

await main();
