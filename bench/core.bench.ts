/**
 * @module Core benchmark: the call the object makes per request — `KeyLog.take` and the
 * structured clone of its decision (what the RPC does to the result) — in ns per call, for the
 * limit sets users configure, with and without leases. Run: `npm run bench:core`.
 *
 * Method: each case replays a request stream at twice its shortest limit's rate (time passed in,
 * so every round sees the same grant/deny mix), warmed up, then timed in interleaved rounds; the
 * table shows the median ns per call. Every loop feeds a printed sink so no work is eliminated.
 */

import { performance } from "node:perf_hooks";
import process from "node:process";
import { KeyLog, type LimitSpec } from "../src/core/index.ts";

const ROUNDS = 9;
const CALLS = 20_000;
const T0 = 1_700_000_000_000;

interface Case {
  readonly name: string;
  readonly limits: LimitSpec[];
  /** Units per lease asked with each call (0: per-request decisions only). */
  readonly lease: number;
}

const CASES: Case[] = [
  { name: "100/1s", limits: [{ limit: 100, windowMs: 1000 }], lease: 0 },
  {
    name: "100/1s + 1000/1m",
    limits: [
      { limit: 100, windowMs: 1000 },
      { limit: 1000, windowMs: 60_000 },
    ],
    lease: 0,
  },
  { name: "10,000,000/1s", limits: [{ limit: 10_000_000, windowMs: 1000 }], lease: 0 },
  { name: "100,000/1d", limits: [{ limit: 100_000, windowMs: 86_400_000 }], lease: 0 },
  { name: "1,000,000/30d", limits: [{ limit: 1_000_000, windowMs: 30 * 86_400_000 }], lease: 0 },
  { name: "100/1s, lease asks of 20", limits: [{ limit: 100, windowMs: 1000 }], lease: 20 },
];

let sink = 0;

/** One run of `calls` decisions at twice the shortest limit's rate; returns ns per call. */
function run(c: Case, calls: number, clone: boolean): number {
  const log = new KeyLog(c.limits);
  const shortest = c.limits.reduce((a, b) => (b.windowMs / b.limit < a.windowMs / a.limit ? b : a));
  const msPerCall = shortest.windowMs / shortest.limit / 2;
  const ask = c.lease > 0 ? { cost: 1, leaseUnits: c.lease, leaseMs: 50 } : { cost: 1 };
  const start = performance.now();
  for (let i = 0; i < calls; i++) {
    const { decision } = log.take(T0 + i * msPerCall, ask);
    if (clone) sink += structuredClone(decision).limits.length;
    else if (decision.allowed) sink++;
  }
  return ((performance.now() - start) * 1e6) / calls;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

const rows: { name: string; take: number; cloned: number }[] = [];
for (const c of CASES) {
  run(c, CALLS, true);
  run(c, CALLS, false);
}
const take = new Map<string, number[]>();
const cloned = new Map<string, number[]>();
for (let r = 0; r < ROUNDS; r++) {
  for (const c of r % 2 === 0 ? CASES : [...CASES].reverse()) {
    take.set(c.name, [...(take.get(c.name) ?? []), run(c, CALLS, false)]);
    cloned.set(c.name, [...(cloned.get(c.name) ?? []), run(c, CALLS, true)]);
  }
}
for (const c of CASES) {
  rows.push({ name: c.name, take: median(take.get(c.name) ?? []), cloned: median(cloned.get(c.name) ?? []) });
}

console.log(`node ${process.version}, ${ROUNDS} rounds × ${CALLS} calls, medians`);
console.log("| limits | take, ns/call | take + structuredClone(decision), ns/call |");
console.log("|---|---|---|");
for (const r of rows) console.log(`| ${r.name} | ${r.take.toFixed(0)} | ${r.cloned.toFixed(0)} |`);
console.log(`(sink ${sink})`);
console.log("reproduce: npm run bench:core");
