/**
 * @module `npm run bench:profile`: where one bench Worker spends its CPU. Starts the bench runtime with workerd's
 * inspector (`BENCH_INSPECT`), loads one Worker with autocannon while V8's sampling profiler runs in it, and prints
 * the functions with the most self time (and the whole profile to a file, for DevTools). The load is 8 saturating
 * connections, on one hot key, on 1,000 keys met fresh or on 1,000 re-seen; the hono roles' limits are the bench's (the product's here
 * are a million a second: nothing is refused). The profiler's own overhead makes times larger than the bench's.
 *
 *   npm run bench:profile                                   # hono-ours, a hot key, 5 s
 *   PROFILE_WORKER=hono-ours PROFILE_KEYS=young npm run bench:profile   # 1,000 keys met fresh
 *   PROFILE_WORKER=hono-ours-off PROFILE_KEYS=seen npm run bench:profile   # the same 1,000 keys, slice after slice
 *   PROFILE_WORKER=product PROFILE_OUT=/tmp/p.cpuprofile npm run bench:profile
 */

import { writeFileSync } from "node:fs";
import { load } from "./http/load.ts";
import { startBenchOrigin } from "./http/origin.ts";
import { type BenchWorkerName, startRuntime } from "./http/runtime.ts";

const PORT = 9229;
const WORKER = (process.env.PROFILE_WORKER ?? "hono-ours") as BenchWorkerName;
const SECONDS = Number(process.env.PROFILE_SECONDS) || 5;
const YOUNG = process.env.PROFILE_KEYS === "young";
/** The same 1,000 keys in random order for the warm-up and the run (re-seen, as bench's `…seen` targets). */
const SEEN = process.env.PROFILE_KEYS === "seen";
const OUT = process.env.PROFILE_OUT ?? "/tmp/bench.cpuprofile";

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { functionName: string; url: string; lineNumber: number };
  readonly children?: number[];
}
interface Profile {
  readonly nodes: ProfileNode[];
  readonly samples: number[];
  readonly timeDeltas: number[];
}

/** A Chrome DevTools Protocol session over the inspector's WebSocket. */
async function session(url: string) {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let id = 0;
  const waiting = new Map<number, (v: unknown) => void>();
  ws.onmessage = (m) => {
    const msg = JSON.parse(String(m.data)) as { id?: number };
    if (msg.id === undefined) return;
    waiting.get(msg.id)?.(msg);
    waiting.delete(msg.id);
  };
  return {
    send: (method: string, params: object = {}) =>
      new Promise<unknown>((resolve, reject) => {
        id += 1;
        waiting.set(id, (reply) => {
          const { result, error } = reply as { result?: unknown; error?: { message: string } };
          if (error) reject(new Error(`${method}: ${error.message}`));
          else resolve(result);
        });
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

/** Self time per function (ms), most first. */
function selfTimes(p: Profile): [string, number][] {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  p.samples.forEach((id, i) => {
    const n = byId.get(id);
    if (!n) return;
    const f = n.callFrame;
    const name = `${f.functionName || "(anonymous)"} ${f.url.split("/").slice(-2).join("/")}:${f.lineNumber + 1}`;
    self.set(name, (self.get(name) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  });
  return [...self.entries()].sort((a, b) => b[1] - a[1]);
}

process.env.BENCH_INSPECT = String(PORT);
const origin = await startBenchOrigin();
const rt = await startRuntime({
  origin: origin.url,
  rateLimit: {
    limits: [
      { limit: 1_000_000, window: "1s" },
      { limit: 100_000_000, window: "1m" },
    ],
  },
  chartLimit: 100,
  chartWindowMs: 10_000,
  stateDir: "/dev/shm",
});
try {
  const url = rt.urls[WORKER];
  const targets = (await (await fetch(`http://127.0.0.1:${PORT}/json`)).json()) as {
    id: string;
    title?: string;
    webSocketDebuggerUrl: string;
  }[];
  const target = targets.find((t) => t.id.endsWith(`:${WORKER}`) || t.title === WORKER);
  if (!target) throw new Error(`no inspector target for ${WORKER}: ${targets.map((t) => t.id).join(", ")}`);
  // Warm-up, then the profiled run; young keys: a new set of 1,000 for each.
  let set = 0;
  const key = YOUNG
    ? () => `y${set}_${Math.floor(Math.random() * 1000)}`
    : SEEN
      ? () => `s_${Math.floor(Math.random() * 1000)}`
      : "hot";
  await load({ url, duration: 2, connections: 8, key });
  set += 1;
  const cdp = await session(target.webSocketDebuggerUrl);
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
  await cdp.send("Profiler.start");
  const run = await load({ url, duration: SECONDS, connections: 8, key });
  const { profile } = (await cdp.send("Profiler.stop")) as { profile: Profile };
  cdp.close();
  writeFileSync(OUT, JSON.stringify(profile));
  const times = selfTimes(profile);
  const total = times.reduce((s, [, ms]) => s + ms, 0);
  console.log(
    `${WORKER}, ${YOUNG ? "1,000 young keys" : SEEN ? "1,000 keys re-seen" : "a hot key"}: ${run.total} responses in ${SECONDS} s (${Math.round(run.rps)}/s), ${fmt((total * 1000) / run.total)} µs of sampled time per response in this isolate (idle included); profile in ${OUT}`,
  );
  console.log("\n| self ms | share | function |\n| ---: | ---: | --- |");
  for (const [name, ms] of times.slice(0, 30)) console.log(`| ${fmt(ms)} | ${fmt((100 * ms) / total)}% | ${name} |`);
} finally {
  await rt.dispose();
  await origin.close();
}

function fmt(n: number): string {
  return n.toFixed(1);
}
