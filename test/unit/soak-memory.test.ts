// The soak's memory verdict (scripts/soak-memory.ts) on made-up runs shaped like the measured ones: workerd
// settling (a saturating rise with steps), a leak (a steady rise), and a per-key cost over the ceiling.
import { describe, expect, it } from "vitest";
import { hasSettled, judgeMemory, type RssSample } from "../../scripts/soak-memory.ts";

const MiB = 1024;
const IDLE = 138 * MiB;

/** One sample a second for `seconds`, memory in MiB given by `f(t in s)`. */
const run = (seconds: number, f: (t: number) => number): RssSample[] =>
  Array.from({ length: seconds }, (_, i) => ({ at: (i + 1) * 1000, rss: Math.round(f(i + 1) * MiB) }));

/** Settling as measured: +380 MiB over idle, most of it in the first ~30 s, with ±20 MiB of jitter. */
const settling = (t: number) => 138 + 380 * (1 - Math.exp(-t / 12)) + 20 * Math.sin(t * 1.7);

/** When the soak would end the warm-up: the first second ≥ `min` at which memory has settled. */
function warmUpEnd(samples: RssSample[], min: number): number | null {
  for (const s of samples)
    if (
      s.at >= min &&
      hasSettled(
        samples.filter((x) => x.at <= s.at),
        s.at,
      )
    )
      return s.at;
  return null;
}

describe("hasSettled", () => {
  it("not while memory still rises steadily", () => {
    const leak = run(120, (t) => 200 + 2 * t);
    expect(leak.some((s) => hasSettled(leak, s.at))).toBe(false);
  });

  it("once a saturating rise has flattened, not before", () => {
    const samples = run(120, settling);
    const end = warmUpEnd(samples, 10_000);
    expect(end).not.toBeNull();
    expect(end as number).toBeGreaterThan(30_000);
    expect(end as number).toBeLessThan(90_000);
  });
});

describe("judgeMemory", () => {
  it("a settled run that stays flat, with a 60 MiB step, passes", () => {
    const samples = run(120, (t) => settling(t) + (t > 90 ? 60 : 0));
    const from = warmUpEnd(samples, 10_000) as number;
    const v = judgeMemory({ idle: IDLE, samples, judgedFrom: from, keys: 200, settled: true });
    expect(v.failures).toEqual([]);
  });

  it("a leak of 2 MiB/s after settling fails flatness", () => {
    const samples = run(120, (t) => settling(t) + (t > 60 ? 2 * (t - 60) : 0));
    const v = judgeMemory({ idle: IDLE, samples, judgedFrom: 60_000, keys: 1000, settled: true });
    expect(v.failures).toEqual([expect.stringMatching(/^workerd memory grew \d+ MiB after the warm-up/)]);
  });

  it("a short run cut off mid-rise is judged by the ceiling, and passes under it", () => {
    // --warmup 10 --seconds 30 --keys 200 before the fix: 304 → 609 MiB was settling, not a leak.
    const samples = run(40, settling);
    const v = judgeMemory({ idle: IDLE, samples, judgedFrom: 10_000, keys: 200, settled: false });
    expect(v.failures.filter((f) => f.includes("ceiling"))).toEqual([]);
    expect(v.report.ceiling).toBe(138 + 768 + 200);
  });

  it("memory over idle + workerd's allowance + 1 MiB per key fails, however flat", () => {
    const samples = run(120, () => 138 + 768 + 100 + 50);
    const v = judgeMemory({ idle: IDLE, samples, judgedFrom: 60_000, keys: 100, settled: true });
    expect(v.failures).toEqual([expect.stringMatching(/over its ceiling 1006 MiB/)]);
    expect(v.report.per_key).toBeCloseTo(9.18, 2);
  });

  it("too few samples after the warm-up is a failure, not a pass", () => {
    const samples = run(20, settling);
    expect(judgeMemory({ idle: IDLE, samples, judgedFrom: 18_000, keys: 10, settled: true }).failures).toEqual([
      "too few memory samples to judge memory",
    ]);
  });
});
