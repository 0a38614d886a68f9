// What an isolate decides alone while a key's object cannot answer (src/core/fallback.ts), what the object does with
// the grants reported to it afterwards (KeyLog.record), and the isolate's memory of objects known down
// (src/client/circuit.ts) — all with time passed in.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Circuit, DOWN_FIRST_MS, DOWN_MOST_MS } from "../../src/client/circuit.ts";
import { FALLBACK_NOTHING_RETRY_MS, FallbackLog, KeyLog, type LimitSpec, leaseMargin } from "../../src/core/index.ts";
import { maxInWindow } from "../support/window.ts";

const T0 = 1_800_000_000_000;

describe("FallbackLog: deciding alone", () => {
  it("grants exactly N in every window at a share of 1, refusing with the exact wait", () => {
    const log = new FallbackLog([{ limit: 5, windowMs: 1000 }], 1);
    const granted: number[] = [];
    for (let t = T0; t < T0 + 3000; t += 50) {
      const d = log.take(t, 1);
      if (d.allowed) granted.push(t);
      else expect(d.retryAfterMs).toBe((granted.at(-5) as number) + 1000 - t);
    }
    expect(maxInWindow(granted, 1000)).toBe(5);
    // Three windows' worth: 5 at the start of each.
    expect(granted).toHaveLength(15);
  });

  it("counts the grants it saw made with the object's word: a window spanning the outage holds N in all", () => {
    const log = new FallbackLog([{ limit: 10, windowMs: 1000 }], 1);
    for (let i = 0; i < 8; i++) log.saw(T0 + i * 10, 1);
    const alone = [];
    for (let t = T0 + 100; t < T0 + 1000; t += 10) if (log.take(t, 1).allowed) alone.push(t);
    // 8 seen + 2 alone fill the window; the next one frees when the first seen leaves it: 2 ms later, as a grant seen
    // is recorded as the object records a reported use (1 ms for a clock read in whole ms, 1 ms of clock-rate margin).
    expect(alone).toHaveLength(2);
    expect(log.take(T0 + 1001, 1).allowed).toBe(false);
    expect(log.take(T0 + 1002, 1).allowed).toBe(true);
  });

  it("scales every limit by the share, floored; a share leaving a limit under one unit grants nothing", () => {
    const half = new FallbackLog(
      [
        { limit: 9, windowMs: 1000 },
        { limit: 100, windowMs: 60_000 },
      ],
      0.5,
    );
    let n = 0;
    while (half.take(T0, 1).allowed) n++;
    expect(n).toBe(4);
    const d = half.check(T0, 1);
    expect(d.limits.map((l) => l.remaining)).toEqual([0, 46]);
    const none = new FallbackLog([{ limit: 1, windowMs: 1000 }], 0.5);
    expect(none.take(T0, 1)).toMatchObject({
      allowed: false,
      neverAllowed: false,
      retryAfterMs: FALLBACK_NOTHING_RETRY_MS,
      limits: [{ remaining: 0, exceeded: true }],
    });
    expect(none.pending).toBe(false);
  });

  it("a cost over a scaled limit but within the key's is refused for a while, not for ever (take and check alike)", () => {
    const log = new FallbackLog([{ limit: 10, windowMs: 1000 }], 0.5);
    const wait = { allowed: false, neverAllowed: false, retryAfterMs: FALLBACK_NOTHING_RETRY_MS };
    expect(log.take(T0, 6)).toMatchObject(wait);
    expect(log.check(T0, 6)).toMatchObject(wait);
  });

  it("rejects a share outside 0–1", () => {
    for (const share of [-0.1, 1.5, Number.NaN]) {
      expect(() => new FallbackLog([{ limit: 1, windowMs: 1 }], share)).toThrow(/share: expected a number from 0 to 1/);
    }
  });
});

describe("FallbackLog: edges", () => {
  it("a share of 0 grants nothing (saw counts nothing, nothing is reported); so does one leaving any limit under 1", () => {
    const none = new FallbackLog([{ limit: 100, windowMs: 1000 }], 0);
    none.saw(T0, 1);
    expect(none.take(T0, 1)).toMatchObject({ allowed: false, blockedUntil: T0 + FALLBACK_NOTHING_RETRY_MS });
    expect(none.check(T0, 1)).toMatchObject({ allowed: false, retryAfterMs: FALLBACK_NOTHING_RETRY_MS });
    expect([none.pending, none.slots, none.idleAt]).toEqual([false, 0, Number.NEGATIVE_INFINITY]);
    const one = new FallbackLog(
      [
        { limit: 100, windowMs: 1000 },
        { limit: 1, windowMs: 60_000 },
      ],
      0.5,
    );
    expect(one.take(T0, 1).allowed).toBe(false);
    expect(new FallbackLog([{ limit: 1, windowMs: 1000 }], 1).take(T0, 1).allowed).toBe(true);
  });

  it("a refusal is not a grant made alone", () => {
    const log = new FallbackLog([{ limit: 1, windowMs: 1000 }], 1);
    log.take(T0, 1);
    log.report(T0);
    log.answered(true);
    expect(log.take(T0 + 1, 1).allowed).toBe(false);
    expect(log.pending).toBe(false);
  });

  it("groups grants made alone per the finest tick, rounded up; keeps them for the longest window", () => {
    const log = new FallbackLog(
      [
        { limit: 100, windowMs: 10_000, tickMs: 10 },
        { limit: 1000, windowMs: 100_000, tickMs: 100 },
      ],
      1,
    );
    log.take(T0 + 3, 1);
    log.take(T0 + 7, 1);
    log.take(T0 + 13, 1);
    // T0 is a multiple of both ticks: +3 and +7 group at +10, +13 at +20; ages from the report's time.
    expect(log.report(T0 + 50)).toEqual([
      { ageMs: 40, units: 2 },
      { ageMs: 30, units: 1 },
    ]);
    log.answered(false);
    // Left the 10 s window, not the 100 s one: still reported.
    expect(log.report(T0 + 50_000)).toHaveLength(2);
  });

  it("counts its slots: ring slots and grants made alone", () => {
    const log = new FallbackLog([{ limit: 5, windowMs: 1000 }], 1);
    const empty = log.slots;
    log.take(T0, 1);
    expect(log.slots).toBe(empty + 1);
    expect(empty).toBeGreaterThan(0);
  });
});

describe("FallbackLog: reporting the grants made alone", () => {
  it("reports each grant made alone once, by age, oldest first; seen grants are never reported", () => {
    const log = new FallbackLog([{ limit: 100, windowMs: 60_000 }], 1);
    log.saw(T0, 3);
    log.take(T0 + 10, 2);
    log.take(T0 + 10, 1);
    log.take(T0 + 25, 4);
    expect(log.pending).toBe(true);
    const uses = log.report(T0 + 100);
    expect(uses).toEqual([
      { ageMs: 90, units: 3 },
      { ageMs: 75, units: 4 },
    ]);
    log.answered(true);
    expect(log.pending).toBe(false);
    expect(log.report(T0 + 200)).toEqual([]);
  });

  it("one report out at a time: a second gets nothing, grants made meanwhile wait for the next", () => {
    const log = new FallbackLog([{ limit: 100, windowMs: 60_000 }], 1);
    log.take(T0, 1);
    expect(log.report(T0 + 5)).toEqual([{ ageMs: 5, units: 1 }]);
    // Made in the same millisecond as the one out: a new entry, not added to the one out.
    log.take(T0, 1);
    log.take(T0 + 7, 2);
    expect(log.reporting).toBe(true);
    expect(log.report(T0 + 8)).toBeNull();
    log.answered(true);
    expect(log.reporting).toBe(false);
    expect(log.report(T0 + 9)).toEqual([
      { ageMs: 9, units: 1 },
      { ageMs: 2, units: 2 },
    ]);
  });

  it("a report not recorded goes again; grants that left every window are forgotten", () => {
    const log = new FallbackLog([{ limit: 100, windowMs: 1000 }], 1);
    log.take(T0, 1);
    log.take(T0 + 600, 1);
    expect(log.report(T0 + 700)).toHaveLength(2);
    log.answered(false);
    expect(log.report(T0 + 1200)).toEqual([{ ageMs: 600, units: 1 }]);
    log.answered(false);
    expect(log.report(T0 + 1600)).toEqual([]);
    expect(log.pending).toBe(false);
  });

  it("a settle gives back unused units from grants not yet reported at its time or before, latest first, never later ones", () => {
    const log = new FallbackLog([{ limit: 100, windowMs: 60_000, tickMs: 10 }], 1);
    log.take(T0 + 1, 5); // reported at T0 + 10
    log.take(T0 + 15, 7); // at T0 + 20
    log.take(T0 + 25, 3); // at T0 + 30
    expect(log.reportedAt(T0 + 15)).toBe(T0 + 20);
    expect(log.reportedAt(T0 + 20)).toBe(T0 + 20);
    // 9 back at T0 + 20 or before: 7 from T0 + 20, then 2 from T0 + 10; the grant at T0 + 30 is untouched.
    expect(log.giveBack(T0 + 20, 9)).toBe(9);
    expect(log.report(T0 + 40)).toEqual([
      { ageMs: 30, units: 3 },
      { ageMs: 10, units: 3 },
    ]);
    log.answered(true);
    // Reported and recorded: nothing left to give back.
    expect(log.giveBack(T0 + 30, 3)).toBe(0);
  });

  it("a settle gives back no more than waits to be reported, and nothing out in a report", () => {
    const log = new FallbackLog([{ limit: 100, windowMs: 60_000, tickMs: 10 }], 1);
    log.take(T0 + 1, 4);
    expect(log.report(T0 + 20)).toEqual([{ ageMs: 10, units: 4 }]);
    log.take(T0 + 5, 2); // a new entry at the same time, after the one out
    expect(log.giveBack(T0 + 10, 5)).toBe(2);
    expect(log.pending).toBe(true);
    log.answered(true);
    expect(log.pending).toBe(false);
    expect(log.report(T0 + 30)).toEqual([]);
  });

  it("a debt is counted at once, whatever the limits say, and reported as used at its time rounded up", () => {
    const log = new FallbackLog([{ limit: 10, windowMs: 1000, tickMs: 10 }], 1);
    expect(log.take(T0, 4).allowed).toBe(true);
    log.owe(T0 + 21, 20);
    expect(log.check(T0 + 22, 1).allowed).toBe(false);
    expect(log.report(T0 + 50)).toEqual([
      { ageMs: 50, units: 4 },
      { ageMs: 20, units: 20 },
    ]);
    log.answered(false);
    // Owed again at the same grain: one entry, not out.
    log.owe(T0 + 25, 1);
    expect(log.report(T0 + 50)).toEqual([
      { ageMs: 50, units: 4 },
      { ageMs: 20, units: 21 },
    ]);
  });

  it("is idle once nothing counts and nothing is left to report", () => {
    const log = new FallbackLog([{ limit: 100, windowMs: 1000 }], 1);
    expect(log.idleAt).toBe(Number.NEGATIVE_INFINITY);
    log.take(T0, 1);
    // Recorded at T0: it counts until T0 + 1000, and is reported until then.
    expect(log.idleAt).toBe(T0 + 1000);
    log.saw(T0 + 500, 1);
    expect(log.idleAt).toBe(T0 + 502 + 1000);
  });
});

describe("KeyLog.record: the object records grants made alone", () => {
  const limits: LimitSpec[] = [{ limit: 10, windowMs: 1000 }];

  it("records each use no earlier than it happened, and counts it whatever the limits say", () => {
    const log = new KeyLog(limits);
    for (let i = 0; i < 8; i++) log.take(T0 + i, { cost: 1 });
    const rows = log.record(T0 + 500, [
      { ageMs: 300, units: 2 },
      { ageMs: 0, units: 1 },
    ]);
    // At now − age + 1 ms + the clock-rate margin (1 + age/50).
    expect(rows.map((r) => [r.ts - T0, r.cost])).toEqual([
      [500 - 300 + 1 + 7, 2],
      [500 + 1 + 1, 1],
    ]);
    // 11 units in the window, one over: it takes two leaving, T0 and T0 + 1, for one more to fit.
    const d = log.check(T0 + 500, 1);
    expect(d).toMatchObject({ allowed: false, retryAfterMs: 501 });
    expect(d.limits[0]?.remaining).toBe(0);
  });

  it("skips a use that has left every window, and counts an older one in the windows that still hold it", () => {
    const log = new KeyLog([
      { limit: 10, windowMs: 1000 },
      { limit: 100, windowMs: 10_000 },
    ]);
    log.take(T0, { cost: 1 });
    const rows = log.record(T0 + 20_000, [
      { ageMs: 15_000, units: 1 },
      { ageMs: 5_000, units: 1 },
    ]);
    expect(rows).toHaveLength(1);
    // Used 5 s ago: recorded then (+ a millisecond and the margin), in the 10 s window and not the 1 s one.
    expect(rows[0]?.ts).toBe(T0 + 20_000 - 5_000 + 1 + leaseMargin(5_000));
    expect(log.check(T0 + 20_000, 1).limits.map((l) => l.remaining)).toEqual([10, 99]);
  });

  it("skips a use whose record would fall exactly on the longest window's edge, and counts one a millisecond inside", () => {
    // ageMs 10,206: recorded at t − 10,206 + 1 + leaseMargin (205) = t − 10,000, the 10 s window's open edge.
    const edge = new KeyLog([
      { limit: 10, windowMs: 1000 },
      { limit: 100, windowMs: 10_000 },
    ]);
    expect(edge.record(T0 + 20_000, [{ ageMs: 10_206, units: 1 }])).toEqual([]);
    expect(edge.check(T0 + 20_000, 1).limits.map((l) => l.remaining)).toEqual([10, 100]);
    // ageMs 10,205: at t − 9,999, inside the 10 s window alone.
    const inside = new KeyLog([
      { limit: 10, windowMs: 1000 },
      { limit: 100, windowMs: 10_000 },
    ]);
    const rows = inside.record(T0 + 20_000, [{ ageMs: 10_205, units: 1 }]);
    expect(rows.map((r) => r.ts)).toEqual([T0 + 20_000 - 9_999]);
    expect(inside.check(T0 + 20_000, 1).limits.map((l) => l.remaining)).toEqual([10, 99]);
  });

  it("rejects what is not a list of uses", () => {
    const log = new KeyLog(limits);
    expect(() => log.record(T0, "x" as never)).toThrow(/uses: expected a list/);
    expect(() => log.record(T0, [{ ageMs: -1, units: 1 }])).toThrow(/ageMs/);
    expect(() => log.record(T0, [{ ageMs: 1, units: 0 }])).toThrow(/units/);
    expect(() => log.record(T0, [{ ageMs: 1.5, units: 1 }])).toThrow(/ageMs/);
  });

  it("property: one isolate through outages and recoveries never lets a window of real use times hold more than N", () => {
    // The object's log and one isolate's own log of the key. Up, the object decides and the isolate sees its grants;
    // down, the isolate decides alone; back up, its report is recorded before the next decision.
    const steps = fc.array(
      fc.record({ gap: fc.integer({ min: 0, max: 400 }), cost: fc.integer({ min: 1, max: 3 }), up: fc.boolean() }),
      { minLength: 1, maxLength: 200 },
    );
    fc.assert(
      fc.property(steps, fc.integer({ min: 0, max: 30 }), (seq, transit) => {
        const spec: LimitSpec[] = [
          { limit: 8, windowMs: 1000 },
          { limit: 20, windowMs: 5000 },
        ];
        const object = new KeyLog(spec);
        const alone = new FallbackLog(spec, 1);
        const uses: number[] = [];
        // The isolate's clock. A call sent at t reaches the object at t + transit (its clock: the same here), which
        // decides then (the grant's use), and its answer is back at t + 2 × transit.
        let t = T0;
        for (const { gap, cost, up } of seq) {
          t += gap;
          if (up) {
            const report = alone.report(t) ?? [];
            object.record(t + transit, report);
            alone.answered(true);
            const d = object.take(t + transit, { cost }).decision;
            if (d.allowed) uses.push(...Array<number>(cost).fill(t + transit));
            t += 2 * transit;
            if (d.allowed) alone.saw(t, cost);
          } else if (alone.take(t, cost).allowed) uses.push(...Array<number>(cost).fill(t));
        }
        expect(maxInWindow(uses, 1000)).toBeLessThanOrEqual(8);
        expect(maxInWindow(uses, 5000)).toBeLessThanOrEqual(20);
      }),
      { numRuns: 300 },
    );
  });
});

describe("Circuit: objects known down", () => {
  it("after a failure, no call for a second; then one probe, in the background; up again when it answers", () => {
    const c = new Circuit(500);
    expect(c.admit("k", T0)).toBe("up");
    expect(c.failed("k", T0, true)).toBe(true);
    expect(c.late("k")).toBe(true);
    expect(c.admit("k", T0 + DOWN_FIRST_MS - 1)).toBe("down");
    expect(c.admit("k", T0 + DOWN_FIRST_MS)).toBe("probe");
    // One probe at a time.
    expect(c.admit("k", T0 + DOWN_FIRST_MS + 1)).toBe("down");
    expect(c.answered("k")).toBe(true);
    expect(c.admit("k", T0 + DOWN_FIRST_MS + 2)).toBe("up");
    expect(c.answered("k")).toBe(false);
  });

  it("grows 1 s, 2 s, 4 s … to at most 10 s while probes fail; calls out before it was known down add nothing", () => {
    const c = new Circuit(500);
    c.failed("k", T0, false);
    // Other calls sent before the failure was known fail too: still one failure.
    expect(c.failed("k", T0 + 10, false)).toBe(false);
    expect(c.failures("k")).toBe(1);
    const seen: number[] = [];
    let last = T0;
    for (let i = 0; i < 8; i++) {
      const due = last + expectedInterval(i);
      expect(c.admit("k", due - 1)).toBe("down");
      expect(c.admit("k", due)).toBe("probe");
      seen.push(due - last);
      c.failed("k", due, false);
      last = due;
    }
    expect(seen).toEqual([1000, 2000, 4000, 8000, 10_000, 10_000, 10_000, 10_000]);
    expect(c.failures("k")).toBe(9);
  });

  it("a failure after the interval (a call sent before it ended) counts as one more; an unknown key is neither down nor late", () => {
    const c = new Circuit(500);
    expect([c.late("k"), c.failures("k")]).toEqual([false, 0]);
    c.failed("k", T0, false);
    expect(c.late("k")).toBe(false);
    expect(c.failed("k", T0 + DOWN_FIRST_MS - 1, true)).toBe(false);
    expect(c.failures("k")).toBe(1);
    c.failed("k", T0 + DOWN_FIRST_MS, true);
    expect([c.failures("k"), c.late("k")]).toEqual([2, true]);
    expect(c.admit("k", T0 + DOWN_FIRST_MS + 2 * DOWN_FIRST_MS - 1)).toBe("down");
    expect(c.admit("k", T0 + DOWN_FIRST_MS + 2 * DOWN_FIRST_MS)).toBe("probe");
  });

  it("remembers at most its bound of keys: beyond, it forgets them all", () => {
    const c = new Circuit(500, 3);
    for (const k of ["a", "b", "c"]) c.failed(k, T0, false);
    expect(c.admit("a", T0)).toBe("down");
    c.failed("d", T0, false);
    expect(["a", "b", "c", "d"].map((k) => c.admit(k, T0))).toEqual(["up", "up", "up", "down"]);
  });

  it("a probe not back within the object's deadline counts as failed: the next request probes again later", () => {
    const c = new Circuit(500);
    c.failed("k", T0, true);
    expect(c.admit("k", T0 + 1000)).toBe("probe");
    // Its background work was cut short: never answered, never failed.
    expect(c.admit("k", T0 + 1000 + 500 + DOWN_FIRST_MS - 1)).toBe("down");
    // Counted failed at its deadline (T0 + 2500), and not a millisecond before: the next interval, 2 s, runs from there.
    expect(c.failures("k")).toBe(1);
    expect(c.admit("k", T0 + 2500)).toBe("down");
    expect(c.failures("k")).toBe(2);
    expect(c.admit("k", T0 + 2500 + 2000 - 1)).toBe("down");
    expect(c.admit("k", T0 + 2500 + 2000)).toBe("probe");
    expect(c.failures("k")).toBe(2);
  });
});

/** The interval before the `i`-th probe (from 0): 1 s doubling, at most {@link DOWN_MOST_MS}. */
function expectedInterval(i: number): number {
  return Math.min(DOWN_MOST_MS, DOWN_FIRST_MS * 2 ** i);
}
