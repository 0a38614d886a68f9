/**
 * @module Limits of any size: memory, storage rows and restore time per key at worst, and
 * utilisation under steady 2× overload, for 100/1s, 100,000/1d, 1,000,000/30d and 10,000,000/1d,
 * of the ticked `KeyLog` (the per-millisecond log it replaced is in git history, with its figures).
 * Run: `npm run bench:limits`.
 *
 * Method (also printed with the results):
 * - Worst case per key: the key is filled so that every slot it can hold is used — one unit per
 *   grant at distinct ticks spread over the window; when its ring is bounded by slots rather than
 *   by `N`, every tick in `(F − W, F]` gets a per-request grant and every tick in
 *   `(F, ⌈F + lease⌉]` a two-unit lease taken at `F`, as far ahead as a lease reaches within the
 *   ring's slack (`F` is placed within its tick so that this count is largest).
 * - Memory: `heapUsed + external` after `gc()` before and after building K filled keys, ÷ K;
 *   next to it slots × 20 B of the slots held and allocated.
 * - Rows: distinct storage keys the fill wrote (`${ring}:${key}` of `take(...).writes`), and the
 *   same over the 3-window overload stream.
 * - Restore: `KeyLog.restore(limits, rows, F)` from the filled key's rows in storage-key order;
 *   1 warm-up, median of RESTORE_RUNS.
 * - Utilisation: requests at `T0 + ⌊i·W/(2N)⌋` (2× the limit rate, integer ms), i < 6N: three
 *   windows from an empty key; the ticked log's grants ÷ an exact per-ms log's (`KeyLog` with
 *   `tickMs: 1` where that fits, else analytic: N per W), and a sweep over the granted requests'
 *   times (use time = request time) for the most in any window of W.
 */

import { cpus, loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import process from "node:process";
import { KeyLog, ringSlackMs, roundUp, type SlotRow } from "../src/core/index.ts";

const T0 = 1_700_000_000_000;
const DAY = 86_400_000;
const RESTORE_RUNS = 7;
/** Windows of the overload stream. */
const WINDOWS = 3;
/** Above this many requests the ticked log's stream is simulated per group (see {@link tickedGrouped}). */
const MAX_DIRECT_REQUESTS = 6_000_000;
const started = performance.now();
const loadAtStart = loadavg()[0] as number;

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with node --expose-gc (npm run bench:limits)");

let sink = 0;

// ------------------------------------------------------------------ helpers

interface Config {
  readonly name: string;
  readonly limit: number;
  readonly windowMs: number;
  /** Keys built for the memory measurement. */
  readonly keys: number;
}

const CONFIGS: Config[] = [
  { name: "100/1s", limit: 100, windowMs: 1000, keys: 1000 },
  { name: "100,000/1d", limit: 100_000, windowMs: DAY, keys: 100 },
  { name: "1,000,000/30d", limit: 1_000_000, windowMs: 30 * DAY, keys: 100 },
  { name: "10,000,000/1d", limit: 10_000_000, windowMs: DAY, keys: 100 },
];

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

/** `heapUsed + external` (typed arrays' backing stores are external) after full collections. */
function heapNow(): number {
  gc?.();
  gc?.();
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

/** Bytes retained per key by `count` keys from `build`. */
function retainedPerKey(count: number, build: () => unknown): number {
  const kept: unknown[] = [];
  const before = heapNow();
  for (let k = 0; k < count; k++) kept.push(build());
  const after = heapNow();
  sink += kept.length;
  return (after - before) / count;
}

/** Median ms of `RESTORE_RUNS` calls after one warm-up. */
function timeRestore(restore: () => unknown): number {
  restore();
  const ms: number[] = [];
  for (let r = 0; r < RESTORE_RUNS; r++) {
    const start = performance.now();
    sink += restore() ? 1 : 0;
    ms.push(performance.now() - start);
  }
  return median(ms);
}

function floorDiv(a: number, b: number): number {
  let q = Math.floor(a / b);
  if (q * b > a) q--;
  else if ((q + 1) * b <= a) q++;
  return q;
}

const fmt = (n: number): string => n.toLocaleString("en-US");
const kib = (bytes: number): string =>
  bytes >= 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(1)} KiB`;
const msStr = (ms: number): string => (ms >= 10 ? ms.toFixed(0) : ms >= 1 ? ms.toFixed(1) : ms.toFixed(3));

// ------------------------------------------------------------------ worst-case fill

interface Filled<L> {
  readonly log: L;
  /** Slots held after the fill. */
  readonly slots: number;
  /** Distinct storage keys the fill wrote. */
  readonly rows: number;
  /** The fill's last time (the restore's `now`). */
  readonly at: number;
}

/** How the new core is filled for a config: the fill's end `F` and whether leases are needed. */
interface NewPlan {
  readonly tick: number;
  readonly capacity: number;
  readonly at: number;
  readonly leaseMs: number;
  /** Bounded by `N` (fill `N` ticks of the window) rather than by slots (fill every tick, then leases). */
  readonly byLimit: boolean;
}

function planNew(c: Config): NewPlan {
  const probe = new KeyLog([{ limit: c.limit, windowMs: c.windowMs }]);
  const ring = probe.rings[0] as KeyLog["rings"][number];
  const tick = ring.tickMs;
  // Slots ahead of now: as far as a lease can reach, within the ring's slack.
  const leaseMs = Math.min(ringSlackMs(probe.limits), probe.maxLeaseMs);
  const byLimit = ring.capacity === c.limit;
  // Ticks at which slots can be held at F = q·tick + φ: (F − W, ⌈F + lease⌉]; pick φ with the most.
  let phi = 0;
  let most = -1;
  for (let p = 0; p < tick && !byLimit; p++) {
    const count = Math.ceil((p + leaseMs) / tick) - Math.floor((p - c.windowMs) / tick);
    if (count > most) [most, phi] = [count, p];
  }
  const base = T0 + c.windowMs;
  const at = base - (base % tick) + tick + phi;
  return { tick, capacity: ring.capacity, at, leaseMs, byLimit };
}

/** New core: see the module comment. */
function fillNew(c: Config, plan: NewPlan): Filled<KeyLog> {
  const limits = [{ limit: c.limit, windowMs: c.windowMs }];
  const log = new KeyLog(limits);
  const { tick, at, leaseMs } = plan;
  const keys = new Set<string>();
  const note = (writes: readonly SlotRow[]) => {
    for (const w of writes) keys.add(`${w.ring}:${w.key}`);
  };
  const first = Math.floor((at - c.windowMs) / tick) + 1; // first tick index inside (F − W, F]
  const inWindow = Math.floor(at / tick) - first + 1;
  if (plan.byLimit) {
    if (c.limit > inWindow) throw new Error(`${c.name}: N exceeds the window's ticks`);
    for (let k = 0; k < c.limit; k++) {
      const t = (first + floorDiv(k * inWindow, c.limit)) * tick;
      const o = log.take(t, { cost: 1 });
      if (!o.decision.allowed) throw new Error(`${c.name}: new fill denied at grant ${k}`);
      note(o.writes);
    }
  } else {
    for (let k = 0; k < inWindow; k++) {
      const o = log.take((first + k) * tick, { cost: 1 });
      if (!o.decision.allowed) throw new Error(`${c.name}: new fill denied at tick ${k}`);
      note(o.writes);
    }
    const last = roundUp(at + leaseMs, tick);
    for (let s = roundUp(at + 1, tick); s <= last; s += tick) {
      const o = log.take(at, { cost: 0, leaseUnits: 2, leaseMs: Math.min(s - at, leaseMs) });
      if (!o.decision.lease || o.writes[0]?.ts !== s) throw new Error(`${c.name}: lease not recorded at ${s}`);
      note(o.writes);
    }
  }
  const slots = log.rings.reduce((sum, r) => sum + r.size, 0);
  return { log, slots, rows: keys.size, at };
}

// ------------------------------------------------------------------ the overload stream

/** Request `i` of the stream at 2× the rate: `⌊i·W/(2N)⌋` ms after T0, computed exactly. */
function streamTime(c: Config): (i: number) => number {
  const twoN = 2 * c.limit;
  const q = Math.floor(c.windowMs / twoN);
  const r = c.windowMs % twoN;
  return (i) => i * q + floorDiv(i * r, twoN);
}

/** First request index whose time (after T0) is ≥ `rel` ms: ⌈rel·2N / W⌉ (BigInt: the product may exceed 2^53). */
function firstRequestAt(c: Config, rel: number): number {
  if (rel <= 0) return 0;
  const num = BigInt(rel) * BigInt(2 * c.limit);
  const w = BigInt(c.windowMs);
  return Number((num + w - 1n) / w);
}

/** Granted requests as runs of consecutive request indices: [start, count, start, count, …]. */
class Runs {
  readonly data: number[] = [];
  total = 0;
  add(start: number, count: number): void {
    const d = this.data;
    const n = d.length;
    if (n > 0 && (d[n - 2] as number) + (d[n - 1] as number) === start) d[n - 1] = (d[n - 1] as number) + count;
    else d.push(start, count);
    this.total += count;
  }
  /** Grants at request indices ≥ `from`. */
  countFrom(from: number): number {
    let n = 0;
    for (let k = 0; k < this.data.length; k += 2) {
      const s = this.data[k] as number;
      const e = s + (this.data[k + 1] as number);
      if (e > from) n += e - Math.max(s, from);
    }
    return n;
  }
  /** Request index of the `k`th grant (0-based), or −1. */
  requestOf(k: number): number {
    let before = 0;
    for (let r = 0; r < this.data.length; r += 2) {
      const count = this.data[r + 1] as number;
      if (k < before + count) return (this.data[r] as number) + k - before;
      before += count;
    }
    return -1;
  }
  equals(other: Runs): boolean {
    return this.data.length === other.data.length && this.data.every((v, k) => v === other.data[k]);
  }
}

/** The most granted requests whose times fall in any window `(t − W, t]` (two pointers over the grants). */
function mostInWindow(runs: Runs, time: (i: number) => number, windowMs: number): number {
  const d = runs.data;
  let best = 0;
  let lr = 0; // left pointer: run (index into d) and offset
  let lo = 0;
  let left = 0; // grants before the left pointer
  let right = 0; // grants up to and including the current one
  for (let r = 0; r < d.length; r += 2) {
    const start = d[r] as number;
    const count = d[r + 1] as number;
    for (let o = 0; o < count; o++) {
      const cutoff = time(start + o) - windowMs;
      right++;
      while (time((d[lr] as number) + lo) <= cutoff) {
        left++;
        if (++lo === (d[lr + 1] as number)) {
          lr += 2;
          lo = 0;
        }
      }
      if (right - left > best) best = right - left;
    }
  }
  return best;
}

interface StreamResult {
  readonly runs: Runs;
  /** Distinct storage keys written over the stream. */
  readonly rows: number;
  readonly ms: number;
}

function tickedDirect(c: Config, requests: number): StreamResult {
  const start = performance.now();
  const log = new KeyLog([{ limit: c.limit, windowMs: c.windowMs }]);
  const time = streamTime(c);
  const runs = new Runs();
  const keys = new Set<string>();
  for (let i = 0; i < requests; i++) {
    const o = log.take(T0 + time(i), { cost: 1 });
    if (o.decision.allowed) {
      runs.add(i, 1);
      for (const w of o.writes) keys.add(`${w.ring}:${w.key}`);
    }
  }
  return { runs, rows: keys.size, ms: performance.now() - start };
}

/**
 * The same stream, one `take` per group instead of one per request. Within a group of
 * consecutive requests that share both `⌈t / tick⌉` (so every grant is recorded at the same slot)
 * and `⌊(t − W) / tick⌋` (so no slot leaves the window between them: slots lie at multiples of the
 * tick and leave at `slot + W`), the key's `remaining` changes only by the group's own grants, so
 * the per-request log grants exactly the group's first `min(m, remaining)` requests, all recorded
 * at that slot. One `take(t₀, cost = min(m, remaining))` at the group's first time leaves the same
 * state. Exact for one limit without leases (checked against {@link tickedDirect} where that is
 * affordable).
 */
function tickedGrouped(c: Config, requests: number): StreamResult {
  const start = performance.now();
  const log = new KeyLog([{ limit: c.limit, windowMs: c.windowMs }]);
  const tick = (log.limits[0] as { tickMs: number }).tickMs;
  const time = streamTime(c);
  const end = T0 + time(requests - 1);
  // Times at which a request's group key changes: k·tick + 1 (the slot moves on) and j·tick + W (slot j·tick leaves).
  const bounds: number[] = [];
  for (let b = roundUp(T0, tick) + 1; b <= end; b += tick) bounds.push(b);
  for (let b = roundUp(T0 - c.windowMs, tick) + c.windowMs; b <= end; b += tick) bounds.push(b);
  bounds.sort((a, b) => a - b);
  const starts = [0, ...bounds.map((b) => firstRequestAt(c, b - T0)), requests];
  const runs = new Runs();
  const keys = new Set<string>();
  for (let g = 0; g + 1 < starts.length; g++) {
    const a = starts[g] as number;
    const b = Math.min(starts[g + 1] as number, requests);
    if (b <= a) continue;
    const t = T0 + time(a);
    const remaining = (log.peek(t).limits[0] as { remaining: number }).remaining;
    const cost = Math.min(b - a, remaining);
    if (cost === 0) continue;
    const o = log.take(t, { cost });
    if (!o.decision.allowed) throw new Error(`${c.name}: grouped take of ${cost} denied at ${t}`);
    runs.add(a, cost);
    for (const w of o.writes) keys.add(`${w.ring}:${w.key}`);
  }
  return { runs, rows: keys.size, ms: performance.now() - start };
}

// ------------------------------------------------------------------ run

interface MemoryRow {
  readonly config: string;
  readonly tick?: string;
  readonly slots?: number;
  readonly capacity?: number;
  readonly allocated?: number;
  readonly bytesPerSlot?: number;
  readonly retained?: number;
  /** New core: retained per key once every slot has left (arrays stay, freed storage keys stack up). */
  readonly drained?: number;
  readonly keys?: number;
  readonly rowsFill?: number;
  readonly rowsStream?: number;
  readonly restoreMs?: number;
}

interface UtilRow {
  readonly config: string;
  readonly tick: number;
  readonly requests: number;
  readonly how: string;
  readonly reference: string;
  readonly refGrants: number;
  readonly grants: number;
  readonly refAfterFirst: number;
  readonly afterFirst: number;
  readonly most: number;
  readonly refMost: number | null;
  /** How much later than the per-ms log's (at exactly W and 2W) the ticked log's grants number N and 2N came. */
  readonly lag2: number;
  readonly lag3: number;
  readonly limit: number;
}

const memory: MemoryRow[] = [];
const util: UtilRow[] = [];
const notes: string[] = [];

for (const c of CONFIGS) {
  const limits = [{ limit: c.limit, windowMs: c.windowMs }];
  const requests = WINDOWS * 2 * c.limit;
  const time = streamTime(c);

  // The ticked KeyLog with its default tick.
  const plan = planNew(c);
  const filled = fillNew(c, plan);
  const rows = filled.log.rows().sort((a, b) => a.ring - b.ring || a.key - b.key);
  const check = KeyLog.restore(limits, rows, filled.at);
  const restoredSlots = check.log.rings.reduce((sum, r) => sum + r.size, 0);
  if (check.rewrite || restoredSlots !== filled.slots) throw new Error(`${c.name}: new restore differs`);
  const restoreMs = timeRestore(() => KeyLog.restore(limits, rows, filled.at).log);
  const retained = retainedPerKey(c.keys, () => fillNew(c, plan).log);
  const drained = retainedPerKey(c.keys, () => {
    const { log } = fillNew(c, plan);
    log.peek(filled.at + c.windowMs + plan.leaseMs + plan.tick);
    if (log.rings.some((r) => r.size > 0)) throw new Error(`${c.name}: not drained`);
    return log;
  });
  const direct = requests <= MAX_DIRECT_REQUESTS ? tickedDirect(c, requests) : null;
  const grouped = plan.tick > 1 ? tickedGrouped(c, requests) : null;
  if (direct && grouped) {
    if (!direct.runs.equals(grouped.runs) || direct.rows !== grouped.rows) {
      throw new Error(`${c.name}: grouped simulation differs from per-request`);
    }
    notes.push(
      `${c.name}: grouped simulation = per-request simulation (same granted requests, ${fmt(direct.runs.total)}; ` +
        `${fmt(requests)} takes in ${(direct.ms / 1000).toFixed(1)} s vs ${(grouped.ms / 1000).toFixed(2)} s grouped)`,
    );
  }
  const ticked = (direct ?? grouped) as StreamResult;
  memory.push({
    config: c.name,
    tick: `${fmt(plan.tick)}ms`,
    slots: filled.slots,
    capacity: plan.capacity,
    allocated: filled.log.rings.reduce((sum, r) => sum + r.allocated, 0),
    bytesPerSlot: 20,
    retained,
    drained,
    keys: c.keys,
    rowsFill: filled.rows,
    rowsStream: ticked.rows,
    restoreMs,
  });

  // Utilisation: the per-ms reference.
  const firstOfWindow2 = firstRequestAt(c, c.windowMs);
  let reference: string;
  let refGrants: number;
  let refAfterFirst: number;
  let refMost: number | null = null;
  let exact: KeyLog | null = null;
  try {
    exact = new KeyLog([{ limit: c.limit, windowMs: c.windowMs, tickMs: 1 }]);
  } catch {
    // Too many slots at 1 ms: the analytic reference below.
  }
  if (exact) {
    reference = "KeyLog tickMs 1";
    const runs = new Runs();
    for (let i = 0; i < requests; i++) if (exact.take(T0 + time(i), { cost: 1 }).decision.allowed) runs.add(i, 1);
    refGrants = runs.total;
    refAfterFirst = runs.countFrom(firstOfWindow2);
    refMost = mostInWindow(runs, time, c.windowMs);
  } else {
    reference = "analytic: N per W";
    refGrants = WINDOWS * c.limit;
    refAfterFirst = (WINDOWS - 1) * c.limit;
  }
  util.push({
    config: c.name,
    tick: plan.tick,
    requests,
    how: direct ? "per request" : "grouped per tick",
    reference,
    refGrants,
    grants: ticked.runs.total,
    refAfterFirst,
    afterFirst: ticked.runs.countFrom(firstOfWindow2),
    most: mostInWindow(ticked.runs, time, c.windowMs),
    refMost,
    lag2: time(ticked.runs.requestOf(c.limit)) - c.windowMs,
    lag3: time(ticked.runs.requestOf(2 * c.limit)) - 2 * c.windowMs,
    limit: c.limit,
  });
}

// ------------------------------------------------------------------ report

/** N per (W + the drift of window 3 over window 2), against N per W. */
function longRun(u: UtilRow): number {
  const c = CONFIGS.find((x) => x.name === u.config) as Config;
  return (100 * c.windowMs) / (c.windowMs + u.lag3 - u.lag2);
}

const cpu = cpus()[0]?.model ?? "unknown CPU";
console.log(
  `node ${process.version}, ${cpus().length} × ${cpu}, load average (1 min) ${loadAtStart.toFixed(2)} at start`,
);
console.log();
console.log("Worst case per key (every slot the key can hold is used):");
console.log();
console.log(
  "| limit | tick | slots held (capacity) | slots × B/slot (allocated) | measured heap/key: full; drained (keys) | rows/key: fill; 3-window overload | restore, median of 7 |",
);
console.log("|---|---|---|---|---|---|---|");
for (const m of memory) {
  const bps = m.bytesPerSlot as number;
  console.log(
    `| ${m.config} | ${m.tick} | ${fmt(m.slots as number)} (${fmt(m.capacity as number)}) | ` +
      `${kib((m.slots as number) * bps)} (${kib((m.allocated as number) * bps)}) | ` +
      `${kib(m.retained as number)}; ${m.drained === undefined ? "–" : kib(m.drained)} (${m.keys}) | ` +
      `${fmt(m.rowsFill as number)}; ${fmt(m.rowsStream as number)} | ${msStr(m.restoreMs as number)} ms |`,
  );
}
console.log();
console.log(
  `Utilisation under steady 2× overload, ${WINDOWS} windows from an empty key (requests at T0 + ⌊i·W/(2N)⌋):`,
);
console.log();
console.log(
  "| limit | tick | requests (simulated) | per-ms reference | per-ms grants | ticked grants | share | share after window 1 | most in any W, ticked (per-ms) ≤ N | lag of windows 2, 3 | long-run share |",
);
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
for (const u of util) {
  const share = (100 * u.grants) / u.refGrants;
  const after = (100 * u.afterFirst) / u.refAfterFirst;
  const ok = u.most <= u.limit && (u.refMost === null || u.refMost <= u.limit) ? "yes" : "NO";
  console.log(
    `| ${u.config} | ${fmt(u.tick)}ms | ${fmt(u.requests)} (${u.how}) | ${u.reference} | ${fmt(u.refGrants)} | ` +
      `${fmt(u.grants)} | ${share.toFixed(3)} % | ${after.toFixed(3)} % | ` +
      `${fmt(u.most)} (${u.refMost === null ? "–" : fmt(u.refMost)}) ≤ ${fmt(u.limit)}: ${ok} | ` +
      `${fmt(u.lag2)}, ${fmt(u.lag3)} ms | ${longRun(u).toFixed(4)} % |`,
  );
}
console.log();
console.log("Notes:");
console.log(
  "- lag: how much later than the per-ms log (exactly at W and 2W) the ticked log granted its (N+1)th and (2N+1)th unit, i.e. started windows 2 and 3; each grant holds capacity until its slot (≤ 1 tick after the request) leaves, so each cycle of N grants drifts later by < 1 tick. Under 2× overload the grants of a cycle fill only the first half of a window, so over whole windows the drift costs nothing until it reaches W/2; in the long run the rate is N per (W + lag per window): long-run share = W / (W + lag₃ − lag₂)",
);
for (const n of notes) console.log(`- ${n}`);
console.log(
  "- fill: one unit per grant at distinct ticks over (F − W, F]; where the ring is bounded by slots, not N, also two-unit leases at every tick in (F, ⌈F + lease⌉] (as far as a lease reaches, within the ring's slack), F placed in its tick to maximise the count",
);
console.log(
  "- heap/key: heapUsed + external after gc(), before and after building the filled keys, ÷ keys; includes the log object, limits and the free-key stack",
);
console.log(
  "- rows/key: distinct storage keys written ('ring:key' of take().writes); restore: rows in storage-key order, 1 warm-up; not counting the SQLite read",
);
console.log(
  "- grouped per tick: one take per run of requests sharing ⌈t/tick⌉ and ⌊(t − W)/tick⌋, cost = min(requests, remaining): exactly the per-request outcome (no slot leaves and the slot does not move within a run); checked equal to per-request where both ran",
);
console.log(
  `- analytic N per W: for these integer request times a per-ms log grants requests [2kN, 2kN + N) of window k (request i + 2N is exactly W after request i), i.e. ${WINDOWS}·N`,
);
console.log(
  `(sink ${sink}; ${((performance.now() - started) / 1000).toFixed(0)} s; load average (1 min) ${(loadavg()[0] as number).toFixed(2)} at end)`,
);
console.log("reproduce: npm run bench:limits");
