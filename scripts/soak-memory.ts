/**
 * @module The soak's memory verdict (scripts/soak.ts), pure so that test/unit/soak-memory.test.ts can feed it
 * made-up runs. Memory is workerd's resident set in KiB, sampled once a second.
 *
 * What the memory is (BENCHMARKS.md, "Soak memory"): under this load workerd's resident memory rises by
 * 300–500 MiB over idle (more at higher rates) and then stays flat just the same for a Worker that only proxies (no Durable Object):
 * that is workerd settling (its heap and allocator sizing themselves to the load), reached after some tens of
 * thousands of requests, not after a fixed time. Each Durable Object then costs workerd about 0.23 MiB (an
 * empty one as much as the limiter's); the limiter's own state adds about 0.02 MiB per key. A fixed warm-up is
 * therefore right for one rate and one key count only; this verdict instead
 * - ends the warm-up once memory has settled (`hasSettled`), no earlier than asked and no later than a cap;
 * - then requires flatness: the judged part's peak may exceed the warm-up's by noise only
 *   (`flatnessAllowanceKiB`; workerd moves in steps of up to ~60 MiB while settled);
 * - and at every duration a ceiling: idle + workerd's own settling allowance + an allowance per key.
 * A leak fails the ceiling on a long enough run, and flatness once its growth over the judged part
 * exceeds the noise (96 MiB: about 1.6 MiB/s over the default 60 s).
 */

/** One sample: ms since the load started, workerd's resident memory in KiB. */
export interface RssSample {
  readonly at: number;
  readonly rss: number;
}

const MiB = 1024;
/** Settled: the last `SETTLE_WINDOW_MS` of samples peak at most this much above every earlier sample. */
export const SETTLE_WINDOW_MS = 15_000;
const settleToleranceKiB = (peak: number) => Math.max(0.02 * peak, 16 * MiB);
/**
 * What workerd itself may grow by over idle under the soak's load: measured +300–420 MiB with `--target pass`
 * at ~1,000 requests/s, and up to +490 MiB for the limiter at ~1,500/s; it grows with the rate.
 */
export const WORKERD_ALLOWANCE_MIB = 768;
/** What each key's object may add (measured about 0.25 MiB per key with 1,000 keys, workerd's per-object cost). */
export const PER_KEY_ALLOWANCE_MIB = 1;

/** How far the judged part's peak may rise above the warm-up's: noise, not growth. */
export const flatnessAllowanceKiB = (warmUpPeak: number) => Math.max(0.1 * warmUpPeak, 96 * MiB);

const peak = (xs: readonly RssSample[]) => Math.max(0, ...xs.map((s) => s.rss));

/** Whether memory has stopped rising by `now`: the last window's peak is within tolerance of the peak before it. */
export function hasSettled(samples: readonly RssSample[], now: number): boolean {
  const before = samples.filter((s) => s.at <= now - SETTLE_WINDOW_MS);
  const recent = samples.filter((s) => s.at > now - SETTLE_WINDOW_MS && s.at <= now);
  if (before.length === 0 || recent.length === 0) return false;
  const base = peak(before);
  return peak(recent) <= base + settleToleranceKiB(base);
}

export interface MemoryVerdict {
  /** MiB, rounded, for the report. */
  readonly report: {
    readonly idle: number;
    readonly warm_up_peak: number;
    readonly judged_peak: number;
    readonly end: number;
    readonly growth_after_warm_up: number;
    readonly allowed_growth: number;
    readonly ceiling: number;
    /** (end − idle) / keys: everything workerd grew by under load, per key, including its own settling. */
    readonly per_key: number;
  };
  readonly failures: string[];
}

/**
 * Judges one run. `judgedFrom` is when the warm-up ended (ms since the load started); `settled`
 * whether it ended because memory had settled (rather than at the cap).
 */
export function judgeMemory(o: {
  idle: number;
  samples: readonly RssSample[];
  judgedFrom: number;
  keys: number;
  settled: boolean;
}): MemoryVerdict {
  const warmUp = o.samples.filter((s) => s.at < o.judgedFrom);
  const judged = o.samples.filter((s) => s.at >= o.judgedFrom);
  const end = o.samples.at(-1)?.rss ?? 0;
  const warmUpPeak = peak(warmUp);
  const judgedPeak = peak(judged);
  const allowed = flatnessAllowanceKiB(warmUpPeak);
  const ceiling = o.idle + (WORKERD_ALLOWANCE_MIB + o.keys * PER_KEY_ALLOWANCE_MIB) * MiB;
  const mib = (kib: number) => Math.round(kib / MiB);
  const failures: string[] = [];
  if (warmUp.length === 0 || judged.length < 5) failures.push("too few memory samples to judge memory");
  else if (judgedPeak - warmUpPeak > allowed) {
    failures.push(
      `workerd memory grew ${mib(judgedPeak - warmUpPeak)} MiB after the warm-up (${o.settled ? "settled" : "not settled by the cap"} at ${mib(warmUpPeak)} MiB; allowed ${mib(allowed)} MiB)`,
    );
  }
  const highest = Math.max(warmUpPeak, judgedPeak);
  if (highest > ceiling) {
    failures.push(
      `workerd memory peaked at ${mib(highest)} MiB, over its ceiling ${mib(ceiling)} MiB (idle ${mib(o.idle)} + ${WORKERD_ALLOWANCE_MIB} + ${o.keys} keys × ${PER_KEY_ALLOWANCE_MIB} MiB)`,
    );
  }
  return {
    report: {
      idle: mib(o.idle),
      warm_up_peak: mib(warmUpPeak),
      judged_peak: mib(judgedPeak),
      end: mib(end),
      growth_after_warm_up: mib(judgedPeak - warmUpPeak),
      allowed_growth: mib(allowed),
      ceiling: mib(ceiling),
      per_key: Number(((end - o.idle) / MiB / o.keys).toFixed(3)),
    },
    failures,
  };
}
