/**
 * @module Core benchmark: the sliding log (`src/core/sliding-log.ts`) against a classic
 * per-request ring, `limiter`'s TokenBucket and `rate-limiter-flexible`'s RateLimiterMemory,
 * side by side in one process. Run: `npm run bench:core`.
 *
 * Method: every contender is warmed up, then all of them run in interleaved rounds (order rotated
 * and reversed every round); the table reports medians. "time in" contenders get a simulated
 * request stream at 2× the limit rate (time passed in), in batches of whole periods of the stream
 * so that every round sees the same grant/deny mix; "Date.now()" contenders read the clock per call
 * (a real-time flood: far above the limit rate). The third-party limiters read their own clock.
 * Every loop counts grants into a printed sink so no work can be eliminated.
 */

import os from "node:os";
import { performance } from "node:perf_hooks";
import process from "node:process";
import v8 from "node:v8";
import { TokenBucket } from "limiter";
import { RateLimiterMemory, RateLimiterUnion } from "rate-limiter-flexible";
import { type LimitSpec, SlidingLog } from "../src/core/index.ts";
import { ClassicRing, ClassicRings } from "./classic-ring.ts";

const gcFn = (globalThis as { gc?: () => void }).gc;
if (!gcFn) throw new Error("run with node --expose-gc (npm run bench:core)");
const gc: () => void = gcFn;

const ROUNDS = 13;
const WARMUP_BATCHES = 4;
/** Target duration of one batch of a real-time contender. */
const REALTIME_BATCH_MS = 80;
/** Simulated start time: a realistic epoch in ms (a double, as in production). */
const T0 = 1_700_000_000_000;

let sink = 0;

// ---------------------------------------------------------------- the request stream (time in)

/** A simulated clock: `msPerTick` ms pass after every `callsPerTick` calls. */
interface SimClock {
  now: number;
  k: number;
  readonly callsPerTick: number;
  readonly msPerTick: number;
}

function simClock(callsPerTick: number, msPerTick: number): SimClock {
  return { now: T0, k: 0, callsPerTick, msPerTick };
}

// One loop function per contender type, so each call site stays monomorphic.

function runCoreIn(log: SlidingLog, c: SimClock, calls: number): number {
  let now = c.now;
  let k = c.k;
  const per = c.callsPerTick;
  const step = c.msPerTick;
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    if (log.decide(now).allowed) allowed++;
    if (++k === per) {
      k = 0;
      now += step;
    }
  }
  c.now = now;
  c.k = k;
  return allowed;
}

function runRingIn(ring: ClassicRing, c: SimClock, calls: number): number {
  let now = c.now;
  let k = c.k;
  const per = c.callsPerTick;
  const step = c.msPerTick;
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    if (ring.tryAcquire(now)) allowed++;
    if (++k === per) {
      k = 0;
      now += step;
    }
  }
  c.now = now;
  c.k = k;
  return allowed;
}

function runRingsIn(rings: ClassicRings, c: SimClock, calls: number): number {
  let now = c.now;
  let k = c.k;
  const per = c.callsPerTick;
  const step = c.msPerTick;
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    if (rings.tryAcquire(now)) allowed++;
    if (++k === per) {
      k = 0;
      now += step;
    }
  }
  c.now = now;
  c.k = k;
  return allowed;
}

function runCoreNow(log: SlidingLog, calls: number): number {
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    if (log.decide(Date.now()).allowed) allowed++;
  }
  return allowed;
}

function runRingNow(ring: ClassicRing, calls: number): number {
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    if (ring.tryAcquire(Date.now())) allowed++;
  }
  return allowed;
}

function runRingsNow(rings: ClassicRings, calls: number): number {
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    if (rings.tryAcquire(Date.now())) allowed++;
  }
  return allowed;
}

/** `limiter`: synchronous `tryRemoveTokens`; the bucket reads `performance.now()` itself. */
function runTokenBucket(bucket: TokenBucket, calls: number): number {
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    if (bucket.tryRemoveTokens(1)) allowed++;
  }
  return allowed;
}

/** `rate-limiter-flexible`: async `consume`, awaited per call; a denial rejects the promise. */
async function runRlfMemory(rl: RateLimiterMemory, calls: number): Promise<number> {
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    try {
      await rl.consume("key");
      allowed++;
    } catch {
      // denied: consume rejects with a RateLimiterRes
    }
  }
  return allowed;
}

async function runRlfUnion(rl: RateLimiterUnion, calls: number): Promise<number> {
  let allowed = 0;
  for (let i = 0; i < calls; i++) {
    try {
      await rl.consume("key");
      allowed++;
    } catch {
      // denied by at least one limiter
    }
  }
  return allowed;
}

// ---------------------------------------------------------------- contenders

type Clock = "in" | "now" | "own";

interface Contender {
  readonly scenario: string;
  readonly name: string;
  readonly clock: Clock;
  /** Runs `calls` requests; returns how many were granted. */
  readonly run: (calls: number) => number | Promise<number>;
  /** Calls per batch: fixed (whole stream periods) for "in", calibrated for the others. */
  calls: number;
  readonly opsPerSec: number[];
  granted: number;
  total: number;
}

interface Scenario {
  readonly id: string;
  readonly limits: readonly LimitSpec[];
  /** The 2×-rate stream: calls per tick and ms per tick. */
  readonly callsPerTick: number;
  readonly msPerTick: number;
  /** Calls per "time in" batch: a whole number of the stream's grant/deny periods. */
  readonly batchCalls: number;
  /** The classic ring is much faster: it runs this many times more periods per batch (same stream). */
  readonly ringBatchFactor: number;
}

const S100: Scenario = {
  id: "100/1s",
  limits: [{ limit: 100, windowMs: 1000 }],
  callsPerTick: 1,
  msPerTick: 5, // 200 req/s; period 1 s = 200 calls
  batchCalls: 200 * 12_000, // 2.4M
  ringBatchFactor: 8,
};
const S10M: Scenario = {
  id: "10M/1s",
  limits: [{ limit: 10_000_000, windowMs: 1000 }],
  callsPerTick: 20_000, // 20M req/s; period 1 s = 20M calls
  msPerTick: 1,
  batchCalls: 20_000_000,
  ringBatchFactor: 1,
};
const S2: Scenario = {
  id: "100/1s+1000/1m",
  limits: [
    { limit: 100, windowMs: 1000 },
    { limit: 1000, windowMs: 60_000 },
  ],
  callsPerTick: 1,
  msPerTick: 5, // 200 req/s; period 1 min = 12,000 calls
  batchCalls: 12_000 * 200, // 2.4M
  ringBatchFactor: 4,
};
const SCENARIOS = [S100, S10M, S2];

function contender(scenario: string, name: string, clock: Clock, run: Contender["run"], calls: number): Contender {
  return { scenario, name, clock, run, calls, opsPerSec: [], granted: 0, total: 0 };
}

function tokenBucketFor(limits: readonly LimitSpec[]): TokenBucket {
  // Hierarchical for several limits: the longest window is the parent.
  const sorted = [...limits].sort((a, b) => b.windowMs - a.windowMs);
  let parent: TokenBucket | undefined;
  for (const l of sorted) {
    parent = new TokenBucket({
      bucketSize: l.limit,
      tokensPerInterval: l.limit,
      interval: l.windowMs,
      ...(parent ? { parentBucket: parent } : {}),
    });
  }
  return parent as TokenBucket;
}

function rlfFor(limits: readonly LimitSpec[], prefix: string): RateLimiterMemory[] {
  return limits.map(
    (l, i) => new RateLimiterMemory({ points: l.limit, duration: l.windowMs / 1000, keyPrefix: `${prefix}-${i}` }),
  );
}

function makeContenders(): Contender[] {
  const out: Contender[] = [];
  for (const s of SCENARIOS) {
    const multi = s.limits.length > 1;
    const coreIn = new SlidingLog(s.limits);
    const coreInClock = simClock(s.callsPerTick, s.msPerTick);
    out.push(contender(s.id, "core", "in", (n) => runCoreIn(coreIn, coreInClock, n), s.batchCalls));
    const ringClock = simClock(s.callsPerTick, s.msPerTick);
    if (multi) {
      const rings = new ClassicRings(s.limits);
      out.push(
        contender(s.id, "classic-ring", "in", (n) => runRingsIn(rings, ringClock, n), s.batchCalls * s.ringBatchFactor),
      );
    } else {
      const l = s.limits[0] as LimitSpec;
      const ring = new ClassicRing(l.limit, l.windowMs);
      out.push(
        contender(s.id, "classic-ring", "in", (n) => runRingIn(ring, ringClock, n), s.batchCalls * s.ringBatchFactor),
      );
    }
    const coreNow = new SlidingLog(s.limits);
    out.push(contender(s.id, "core", "now", (n) => runCoreNow(coreNow, n), 0));
    if (multi) {
      const rings = new ClassicRings(s.limits);
      out.push(contender(s.id, "classic-ring", "now", (n) => runRingsNow(rings, n), 0));
    } else {
      const l = s.limits[0] as LimitSpec;
      const ring = new ClassicRing(l.limit, l.windowMs);
      out.push(contender(s.id, "classic-ring", "now", (n) => runRingNow(ring, n), 0));
    }
    const bucket = tokenBucketFor(s.limits);
    out.push(contender(s.id, "limiter TokenBucket", "own", (n) => runTokenBucket(bucket, n), 0));
    const rls = rlfFor(s.limits, `bench-${s.id}`);
    if (multi) {
      const union = new RateLimiterUnion(...rls);
      out.push(contender(s.id, "rlf RateLimiterMemory", "own", (n) => runRlfUnion(union, n), 0));
    } else {
      const rl = rls[0] as RateLimiterMemory;
      out.push(contender(s.id, "rlf RateLimiterMemory", "own", (n) => runRlfMemory(rl, n), 0));
    }
  }
  return out;
}

/** Runs one batch; returns its ops/s. */
async function timeBatch(c: Contender): Promise<number> {
  const start = performance.now();
  const r = c.run(c.calls);
  const granted = typeof r === "number" ? r : await r;
  const ms = performance.now() - start;
  sink += granted;
  c.granted += granted;
  c.total += c.calls;
  return (c.calls / ms) * 1000;
}

async function calibrate(c: Contender): Promise<void> {
  let calls = 1000;
  for (;;) {
    c.calls = calls;
    const start = performance.now();
    const r = c.run(calls);
    sink += typeof r === "number" ? r : await r;
    const ms = performance.now() - start;
    if (ms >= REALTIME_BATCH_MS / 4) {
      c.calls = Math.max(1000, Math.round((calls * REALTIME_BATCH_MS) / ms));
      return;
    }
    calls *= 4;
  }
}

// ---------------------------------------------------------------- memory

function heapBytes(): number {
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

function fullGc(): void {
  gc();
  gc();
}

/** Bytes retained per key: build `keys` instances, warm each with traffic, gc, divide. */
function retainedPerKey<T>(keys: number, make: (i: number) => T, warm: (t: T, i: number) => void): number {
  const keep: T[] = [];
  fullGc();
  const before = heapBytes();
  for (let i = 0; i < keys; i++) {
    const t = make(i);
    warm(t, i);
    keep.push(t);
  }
  fullGc();
  const after = heapBytes();
  sink += keep.length;
  return (after - before) / keys;
}

/** Warm a core or classic-ring key with the scenario's 2× stream for `windows` longest windows. */
function warmCalls(s: Scenario, windows: number): number {
  const longest = Math.max(...s.limits.map((l) => l.windowMs));
  return Math.ceil(((longest * windows) / s.msPerTick) * s.callsPerTick);
}

interface Memory {
  coreMeasured: number;
  coreSlots: number;
  coreWorstSlots: number;
  ring: number;
  bucket: number;
  rlf: number;
}

async function measureMemory(s: Scenario): Promise<Memory> {
  const heavy = s.limits.some((l) => l.limit > 100_000);
  const keys = heavy ? 4 : 100;
  const calls = warmCalls(s, heavy ? 1 : 1.5);
  let slots = 0;
  const coreMeasured = retainedPerKey(
    keys,
    () => new SlidingLog(s.limits),
    (log) => {
      sink += runCoreIn(log, simClock(s.callsPerTick, s.msPerTick), calls);
      slots = log.allocatedSlots;
    },
  );
  let p = 1;
  while (p < new SlidingLog(s.limits).capacity) p *= 2;
  const multi = s.limits.length > 1;
  const ring = multi
    ? retainedPerKey(
        keys,
        () => new ClassicRings(s.limits),
        (r) => {
          sink += runRingsIn(r, simClock(s.callsPerTick, s.msPerTick), calls);
        },
      )
    : retainedPerKey(
        keys,
        () => new ClassicRing((s.limits[0] as LimitSpec).limit, (s.limits[0] as LimitSpec).windowMs),
        (r) => {
          sink += runRingIn(r, simClock(s.callsPerTick, s.msPerTick), calls);
        },
      );
  const bucket = retainedPerKey(
    100,
    () => tokenBucketFor(s.limits),
    (b) => {
      sink += runTokenBucket(b, 300);
    },
  );
  // rate-limiter-flexible keeps all keys in one limiter (a Map entry, a record and a timer per key).
  const rls = rlfFor(s.limits, `mem-${s.id}`);
  const rl: { consume(key: string): Promise<unknown> } = multi
    ? new RateLimiterUnion(...rls)
    : (rls[0] as RateLimiterMemory);
  fullGc();
  const before = heapBytes();
  for (let i = 0; i < 100; i++) {
    for (let j = 0; j < 3; j++) {
      try {
        await rl.consume(`user-${i}`);
        sink++;
      } catch {
        // denied
      }
    }
  }
  fullGc();
  const rlf = (heapBytes() - before) / 100;
  sink += rls.length;
  return { coreMeasured, coreSlots: slots, coreWorstSlots: p, ring, bucket, rlf };
}

interface Growth {
  /** heapUsed + arrayBuffers after gc, minus before (gc'd) the 10M calls. */
  retained: number;
  /** Garbage collections that ran during the 10M calls (0 when nothing is allocated). */
  gcs: number;
}

/** Heap growth of one core key over 10M calls (after warm-up to steady state). */
function heapGrowth(s: Scenario): Growth {
  const log = new SlidingLog(s.limits);
  const c = simClock(s.callsPerTick, s.msPerTick);
  sink += runCoreIn(log, c, warmCalls(s, 2));
  // Settle: let the JIT finish (re)compiling for this key before measuring.
  sink += runCoreIn(log, c, 1_000_000);
  fullGc();
  const before = heapBytes();
  const profiler = new v8.GCProfiler();
  profiler.start();
  sink += runCoreIn(log, c, 10_000_000);
  const gcs = profiler.stop().statistics.length;
  fullGc();
  const after = heapBytes();
  sink += log.allocatedSlots;
  return { retained: after - before, gcs };
}

function newSpaceUsed(): number {
  for (const sp of v8.getHeapSpaceStatistics()) if (sp.space_name === "new_space") return sp.space_used_size;
  return Number.NaN;
}

/**
 * Bytes allocated per call (short-lived garbage included): the growth of V8's new space over a
 * short burst of calls with no GC in between, minus the same measurement for 0 calls; median of 9.
 */
async function allocPerCall(c: Contender): Promise<number> {
  const n = c.clock === "own" ? 200 : 2000;
  const burst = async (calls: number): Promise<number | undefined> => {
    fullGc();
    const profiler = new v8.GCProfiler();
    profiler.start();
    const a = newSpaceUsed();
    const r = c.run(calls);
    sink += typeof r === "number" ? r : await r;
    const b = newSpaceUsed();
    return profiler.stop().statistics.length === 0 ? b - a : undefined;
  };
  const samples: number[] = [];
  for (let j = 0; j < 9; j++) {
    const full = await burst(n);
    const empty = await burst(0);
    if (full !== undefined && empty !== undefined) samples.push((full - empty) / n);
  }
  return samples.length ? median(samples) : Number.NaN;
}

// ---------------------------------------------------------------- output

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

function fmtOps(x: number): string {
  if (x >= 1e6) return `${(x / 1e6).toFixed(1)}M`;
  if (x >= 1e3) return `${(x / 1e3).toFixed(1)}k`;
  return x.toFixed(0);
}

function fmtBytes(x: number): string {
  const a = Math.abs(x);
  if (a >= 1024 * 1024) return `${(x / 1024 / 1024).toFixed(1)} MiB (${(x / 1e6).toFixed(1)} MB)`;
  if (a >= 1024) return `${(x / 1024).toFixed(1)} KiB`;
  return `${x.toFixed(0)} B`;
}

function fmtAlloc(x: number | undefined): string {
  return x === undefined || Number.isNaN(x) ? "?" : x < 0.05 ? "0" : x.toFixed(x < 10 ? 1 : 0);
}

function table(rows: readonly string[][]): string {
  const widths = (rows[0] as string[]).map((_, i) => Math.max(...rows.map((r) => (r[i] as string).length)));
  return rows
    .map((r) =>
      r.map((cell, i) => (i < 2 ? cell.padEnd(widths[i] as number) : cell.padStart(widths[i] as number))).join("  "),
    )
    .join("\n");
}

// ---------------------------------------------------------------- main

interface Result {
  readonly scenario: string;
  readonly name: string;
  readonly clock: Clock;
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly grantedPct: number;
  readonly samples: readonly number[];
  /** Bytes allocated per call (young generation, garbage included). */
  readonly alloc: number;
}

/**
 * The contenders stay reachable until the end of the run. On Node 22, once the first SlidingLog
 * instances died and a forced gc() ran, later instances ran 8-10x slower in this process (the
 * core's former `#private` fields, now plain fields; see BENCHMARKS.md), which made the memory
 * phase take minutes. Kept so that runs stay comparable.
 */
let keepAlive: Contender[] | null = null;

/** Warm-up, interleaved rounds and allocation per call. */
async function measureThroughput(): Promise<Result[]> {
  const contenders = makeContenders();
  keepAlive = contenders;
  // Warm-up (also leaves every "time in" stream in its steady state), then calibrate real-time batches.
  for (let w = 0; w < WARMUP_BATCHES; w++) {
    for (const c of contenders) {
      if (c.clock === "in") await timeBatch(c);
      else await calibrate(c);
    }
  }
  for (const c of contenders) {
    c.granted = 0;
    c.total = 0;
  }
  for (let r = 0; r < ROUNDS; r++) {
    const order = contenders.map((_, i) => contenders[(i + r * 5) % contenders.length] as Contender);
    if (r % 2) order.reverse();
    for (const c of order) c.opsPerSec.push(await timeBatch(c));
  }
  const alloc: number[] = [];
  for (const c of contenders) alloc.push(await allocPerCall(c));
  return contenders.map((c, i) => ({
    scenario: c.scenario,
    name: c.name,
    clock: c.clock,
    median: median(c.opsPerSec),
    min: Math.min(...c.opsPerSec),
    max: Math.max(...c.opsPerSec),
    grantedPct: (100 * c.granted) / c.total,
    samples: c.opsPerSec,
    alloc: alloc[i] as number,
  }));
}

async function main(): Promise<void> {
  const started = performance.now();
  console.log(
    `node ${process.version} (V8 ${process.versions.v8}), nproc ${os.availableParallelism()}, ${os.cpus()[0]?.model ?? "?"}`,
  );
  const results = await measureThroughput();
  const benchSeconds = (performance.now() - started) / 1000;
  // Let V8 finish its lazy work (bytecode flushing ages over several full GCs) so that it does not
  // show up as noise in the retained-bytes deltas.
  for (let i = 0; i < 8; i++) gc();

  const memory = new Map<string, Memory>();
  for (const s of SCENARIOS) memory.set(s.id, await measureMemory(s));
  const growth = new Map<string, Growth>();
  for (const s of SCENARIOS) growth.set(s.id, heapGrowth(s));
  sink += keepAlive?.length ?? 0;
  keepAlive = null;

  const find = (scenario: string, name: string, clock: Clock) =>
    results.find((x) => x.scenario === scenario && x.name === name && x.clock === clock);

  // Table: one row per scenario × contender.
  const rows: string[][] = [
    [
      "scenario",
      "contender",
      "ops/s time-in",
      "granted",
      "ops/s Date.now()",
      "granted",
      "min..max time-in",
      "min..max Date.now()",
      "alloc B/call",
      "retained/key",
    ],
  ];
  const spread = (x?: { min: number; max: number }) => (x ? `${fmtOps(x.min)}..${fmtOps(x.max)}` : "-");
  for (const s of SCENARIOS) {
    const m = memory.get(s.id) as Memory;
    const multi = s.limits.length > 1;
    for (const name of ["core", "classic-ring", "limiter TokenBucket", "rlf RateLimiterMemory"]) {
      const own = name !== "core" && name !== "classic-ring";
      const a = own ? undefined : find(s.id, name, "in");
      const b = find(s.id, name, own ? "own" : "now");
      const bytes =
        name === "core"
          ? `${fmtBytes(m.coreMeasured)} (${m.coreSlots} slots)`
          : name === "classic-ring"
            ? fmtBytes(m.ring)
            : name === "limiter TokenBucket"
              ? fmtBytes(m.bucket)
              : fmtBytes(m.rlf);
      const allocCell = own ? fmtAlloc(b?.alloc) : `${fmtAlloc(a?.alloc)}|${fmtAlloc(b?.alloc)}`;
      let label = name;
      if (multi && name === "classic-ring") label = "classic-ring x2";
      if (multi && name === "limiter TokenBucket") label = "limiter TokenBucket (parent)";
      if (multi && name === "rlf RateLimiterMemory") label = "rlf RateLimiterUnion";
      rows.push([
        s.id,
        label,
        a ? fmtOps(a.median) : "n/a",
        a ? `${a.grantedPct.toFixed(0)}%` : "-",
        b ? `${fmtOps(b.median)}${own ? "*" : ""}` : "n/a",
        b ? `${b.grantedPct.toFixed(0)}%` : "-",
        spread(a),
        spread(b),
        allocCell,
        bytes,
      ]);
    }
  }
  console.log();
  console.log(
    `ops/s: median of ${ROUNDS} interleaved rounds. time-in: simulated stream at 2x the limit rate, time passed in.`,
  );
  console.log(
    "Date.now(): clock read per call (real-time flood). * = reads its own clock (TokenBucket: performance.now(), rlf: Date.now()).",
  );
  console.log(
    "rlf: async consume awaited per call, a denial is a rejected promise. alloc B/call: time-in|Date.now(), young-gen bytes incl. garbage.",
  );
  console.log();
  console.log(table(rows));
  console.log();
  for (const s of SCENARIOS) {
    const m = memory.get(s.id) as Memory;
    console.log(
      `${s.id}: core holds ${m.coreSlots} slots after 2x traffic; worst case ${m.coreWorstSlots} slots = ${fmtBytes(m.coreWorstSlots * 16)} + overhead`,
    );
  }
  for (const s of SCENARIOS) {
    const g = growth.get(s.id) as Growth;
    console.log(
      `heap growth, core ${s.id}, 10M calls: ${g.retained} bytes retained (gc before and after); ${g.gcs} young-gen GCs ran during the calls`,
    );
  }
  console.log(`sink (granted calls, keeps the work alive): ${sink}`);
  console.log(
    `warm-up, rounds and alloc took ${benchSeconds.toFixed(1)} s, total ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  console.log();

  const ratio = (scenario: string, a: string, ac: Clock, b: string, bc: Clock, scenarioB = scenario) => {
    const x = find(scenario, a, ac);
    const y = find(scenarioB, b, bc);
    if (!x || !y) return { ofMedians: Number.NaN, paired: Number.NaN };
    const paired = median(x.samples.map((v, i) => v / (y.samples[i] as number)));
    return { ofMedians: x.median / y.median, paired };
  };
  const line = (label: string, r: { ofMedians: number; paired: number }) =>
    console.log(`${label}: ${r.ofMedians.toFixed(2)} (median of per-round ratios ${r.paired.toFixed(2)})`);

  const r100 = ratio("100/1s", "core", "in", "classic-ring", "in");
  const r10m = ratio("10M/1s", "core", "in", "classic-ring", "in");
  const r2 = ratio("100/1s+1000/1m", "core", "in", "classic-ring", "in");
  const twoVsOne = ratio("100/1s+1000/1m", "core", "in", "core", "in", "100/1s");
  line("core/classic-ring, 100/1s, time in", r100);
  line("core/classic-ring, 10M/1s, time in", r10m);
  line("core/classic-ring x2, 100/1s+1000/1m, time in", r2);
  line("core 100/1s+1000/1m / core 100/1s, time in", twoVsOne);
  for (const s of SCENARIOS)
    line(`core/classic-ring, ${s.id}, Date.now()`, ratio(s.id, "core", "now", "classic-ring", "now"));
  for (const s of SCENARIOS) {
    line(`core(Date.now())/limiter TokenBucket, ${s.id}`, ratio(s.id, "core", "now", "limiter TokenBucket", "own"));
    line(`core(Date.now())/rlf, ${s.id}`, ratio(s.id, "core", "now", "rlf RateLimiterMemory", "own"));
  }

  const m10 = memory.get("10M/1s") as Memory;
  const worstGrowth = Math.max(...[...growth.values()].map((g) => Math.abs(g.retained)));
  const ok = (b: boolean) => (b ? "MET" : "MISSED");
  console.log();
  console.log(
    `target core/classic-ring >= 1.0 at 100/1s, time in: ${r100.ofMedians.toFixed(2)} ${ok(r100.ofMedians >= 1)}`,
  );
  console.log(
    `target core/classic-ring >= 0.9 at 10M/1s, time in: ${r10m.ofMedians.toFixed(2)} ${ok(r10m.ofMedians >= 0.9)}`,
  );
  console.log(
    `target core retains <= 64 KiB/key at 10M/1s: ${fmtBytes(m10.coreMeasured)}/key measured, worst case ${fmtBytes(m10.coreWorstSlots * 16)} of slots (classic ring ${fmtBytes(m10.ring)}) ${ok(m10.coreMeasured <= 65536 && m10.coreWorstSlots * 16 <= 65536)}`,
  );
  console.log(
    `target core two limits >= 0.8x one limit: ${twoVsOne.ofMedians.toFixed(2)} ${ok(twoVsOne.ofMedians >= 0.8)}`,
  );
  console.log(
    `target zero heap growth over 10M calls (|retained| < 0.01 B/call = 100 kB): max |retained| ${worstGrowth} bytes ${ok(worstGrowth < 100_000)}`,
  );
  console.log(`core/classic-ring ops ratio: ${r100.ofMedians.toFixed(2)}`);
}

await main();
