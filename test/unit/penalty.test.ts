// The penalty rule alone (src/core/penalty.ts): refusals counted over a span, a block when they complete it,
// never shorter than the window's own wait, doubling for repeat offenders up to max_block.
import { describe, expect, it } from "vitest";
import { NO_PENALTY, type PenaltySpec, refused } from "../../src/core/penalty.ts";

const spec: PenaltySpec = { after: 3, withinMs: 1_000, blockMs: 10_000, maxBlockMs: null };

describe("refused", () => {
  it("blocks on the `after`-th refusal within the span, and forgets the refusals that did", () => {
    let s = refused(NO_PENALTY, spec, 100, 1);
    expect(s).toEqual({ state: { ...NO_PENALTY, refusals: [100] }, blockUntil: null });
    s = refused(s.state, spec, 200, 1);
    expect(s.blockUntil).toBeNull();
    s = refused(s.state, spec, 300, 1);
    expect(s).toEqual({ state: { refusals: [], lastBlockMs: 10_000, lastEnd: 10_300 }, blockUntil: 10_300 });
  });

  it("refusals older than the span do not count; several at once count each; none is nothing", () => {
    let s = refused(NO_PENALTY, spec, 0, 2);
    expect(s.blockUntil).toBeNull();
    s = refused(s.state, spec, 1_000, 1);
    expect(s.blockUntil).toBeNull();
    expect(s.state.refusals).toEqual([1_000]);
    expect(refused(s.state, spec, 1_001, 2).blockUntil).toBe(11_001);
    expect(refused(s.state, spec, 1_001, 0)).toEqual({ state: s.state, blockUntil: null });
    // A flood reported at once keeps at most `after` times.
    expect(refused(NO_PENALTY, { ...spec, after: 5 }, 0, 4).state.refusals).toEqual([0, 0, 0, 0]);
    expect(refused(NO_PENALTY, spec, 7, 100).blockUntil).toBe(10_007);
  });

  it("never ends before `earliest` (the window's own wait)", () => {
    expect(refused(NO_PENALTY, { ...spec, after: 1 }, 0, 1, 50_000).blockUntil).toBe(50_000);
    expect(refused(NO_PENALTY, { ...spec, after: 1 }, 0, 1, 5_000).blockUntil).toBe(10_000);
  });

  it("max_block: a block within the span of the last one's end doubles, up to max_block; later ones start over", () => {
    const grow = { ...spec, after: 1, maxBlockMs: 25_000 };
    let s = refused(NO_PENALTY, grow, 0, 1);
    expect(s.blockUntil).toBe(10_000);
    s = refused(s.state, grow, 10_500, 1);
    expect(s.blockUntil).toBe(30_500);
    s = refused(s.state, grow, 31_500, 1);
    expect(s.blockUntil).toBe(56_500);
    s = refused(s.state, grow, 56_501, 1);
    expect(s.blockUntil).toBe(81_501);
    // More than the span after the last end: the first length again.
    s = refused(s.state, grow, 82_502, 1);
    expect(s.blockUntil).toBe(92_502);
    // Without max_block, blocks never grow.
    const flat = refused(refused(NO_PENALTY, { ...spec, after: 1 }, 0, 1).state, { ...spec, after: 1 }, 10_001, 1);
    expect(flat.blockUntil).toBe(20_001);
  });

  it("refuses a spec that is no penalty", () => {
    for (const bad of [
      { ...spec, after: 0 },
      { ...spec, withinMs: 0 },
      { ...spec, blockMs: 0.5 },
      { ...spec, maxBlockMs: -1 },
    ]) {
      expect(() => refused(NO_PENALTY, bad, 0, 1), JSON.stringify(bad)).toThrow(RangeError);
    }
  });
});
