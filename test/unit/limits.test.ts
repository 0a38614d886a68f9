/** @module Limits: validation, default ticks and ring sizes at their edges (every bound on memory and storage). */

import { describe, expect, it } from "vitest";
import {
  defaultTickMs,
  KeyLog,
  type LimitSpec,
  leaseScale,
  MAX_DURATION_MS,
  maxLeaseMs,
  normalizeLimits,
  ringLayout,
  ringSlackMs,
} from "../../src/core/index.ts";

describe("normalizeLimits", () => {
  it.each([
    [[5], /^limits\[0\]: expected a limit, got 5$/],
    [[null], /^limits\[0\]: expected a limit, got null$/],
    [[{ limit: 1, windowMs: 1000 }, "x"], /^limits\[1\]: expected a limit, got "x"$/],
    [[{ limit: 1.5, windowMs: 1000 }], /^limits\[0\]\.limit: expected a positive integer, got 1.5$/],
    [[{ limit: 1, windowMs: MAX_DURATION_MS + 1 }], /^limits\[0\]\.windowMs: expected whole milliseconds from 1 to /],
    [
      [{ limit: 1, windowMs: 1000, tickMs: 0 }],
      /^limits\[0\]\.tickMs: expected whole milliseconds from 1 to the window/,
    ],
    [[{ limit: 1, windowMs: 1000, tickMs: -5 }], /^limits\[0\]\.tickMs: /],
    [[{ limit: 1, windowMs: 1000, tickMs: 1.5 }], /^limits\[0\]\.tickMs: .*got 1.5$/],
    [[{ limit: 1, windowMs: 1000, tickMs: 1001 }], /^limits\[0\]\.tickMs: .*\(1000\), got 1001$/],
  ])("rejects %j", (specs, message) => {
    expect(() => normalizeLimits(specs as LimitSpec[])).toThrow(message);
  });

  it("accepts a window of exactly 366 days and a tick of exactly the window", () => {
    expect(normalizeLimits([{ limit: 1, windowMs: MAX_DURATION_MS, tickMs: MAX_DURATION_MS }])).toEqual([
      { limit: 1, windowMs: MAX_DURATION_MS, tickMs: MAX_DURATION_MS },
    ]);
  });

  it("uses a 1ms tick up to exactly 2048 slots, a coarser one from 2049", () => {
    expect(defaultTickMs(2048, 86_400_000)).toBe(1);
    expect(defaultTickMs(2049, 86_400_000)).toBeGreaterThan(1);
    // 2046 ms of window plus the lease (63 ms) plus 2: at most min(N, 2111) slots.
    expect(defaultTickMs(1_000_000, 1984)).toBe(1); // 1984 + 62 + 2 = 2048
    expect(defaultTickMs(1_000_000, 1985)).toBe(2); // 2049 slots at 1 ms
  });

  it("sizes the coarse tick from the limits that need it only", () => {
    // A small limit with a long window fits 1 ms (at most 100 slots); the big one with a 1 h window does not.
    const lease = Math.floor(3_600_000 / 32);
    expect(
      normalizeLimits([
        { limit: 100, windowMs: 86_400_000 },
        { limit: 1_000_000, windowMs: 3_600_000 },
      ]).map((l) => l.tickMs),
    ).toEqual([1, Math.ceil((3_600_000 + lease) / 2046)]);
  });

  it("accepts a ring of exactly 2048 slots and names the longest window of a ring that needs more", () => {
    expect(ringLayout(normalizeLimits([{ limit: 1_000_000, windowMs: 1984, tickMs: 1 }]))[0]?.capacity).toBe(2048);
    expect(() =>
      normalizeLimits([
        { limit: 1_000_000, windowMs: 1000, tickMs: 1 },
        { limit: 1_000_000, windowMs: 3000, tickMs: 1 },
        { limit: 1_000_000, windowMs: 2000, tickMs: 1 },
      ]),
    ).toThrow(
      new RangeError(
        "limits[1].tickMs: 1000000 per 3s at a tick of 1ms needs up to 3033 slots per key, more than 2048; use a tick of at least 2ms",
      ),
    );
  });

  it("suggests the smallest tick that fits", () => {
    // 3970 ms + a 124 ms lease: 2049 slots at 2 ms, 1366 at 3 ms.
    expect(() => normalizeLimits([{ limit: 1_000_000, windowMs: 3970, tickMs: 1 }])).toThrow(
      /needs up to 4096 slots per key, more than 2048; use a tick of at least 3ms$/,
    );
    expect(() => normalizeLimits([{ limit: 1_000_000, windowMs: 3970, tickMs: 2 }])).toThrow(/at least 3ms$/);
    expect(normalizeLimits([{ limit: 1_000_000, windowMs: 3970, tickMs: 3 }])[0]?.tickMs).toBe(3);
  });

  it("accepts exactly 4096 slots per key, and says how many more it would need", () => {
    const limits = [
      { limit: 1_000_000, windowMs: 1984, tickMs: 1 }, // 2048 slots
      { limit: 2048, windowMs: 1_000_000, tickMs: 2 }, // 2048 slots: N
    ];
    expect(ringLayout(normalizeLimits(limits)).map((r) => r.capacity)).toEqual([2048, 2048]);
    expect(() => normalizeLimits([...limits, { limit: 1, windowMs: 1_000_000, tickMs: 3 }])).toThrow(
      new RangeError(
        "limits: 3 different ticks need 4097 slots per key, more than 4096; give limits the same tick so they share a ring, or coarser ticks",
      ),
    );
  });
});

describe("ringLayout", () => {
  it("sizes a ring by its longest window: at most ⌊(W + lease) / tick⌋ + 2 slots, at most N", () => {
    // lease = ⌊1000 / 32⌋ = 31 ms: 1000 + 31 + 2 slots.
    expect(ringLayout(normalizeLimits([{ limit: 1_000_000, windowMs: 1000 }]))).toEqual([
      { tickMs: 1, limits: [0], capacity: 1033 },
    ]);
    expect(ringLayout(normalizeLimits([{ limit: 1_000_000, windowMs: 10_000, tickMs: 10 }]))[0]?.capacity).toBe(
      Math.floor((10_000 + 312) / 10) + 2,
    );
  });

  it("takes N of the longest window in a ring, the smallest N among equal longest windows, whatever the order", () => {
    const capacity = (specs: LimitSpec[]) => ringLayout(normalizeLimits(specs)).map((r) => r.capacity);
    // The short window's small N does not bound the ring: the long window can hold 100 slots.
    expect(
      capacity([
        { limit: 100, windowMs: 1000 },
        { limit: 5, windowMs: 100 },
      ]),
    ).toEqual([100]);
    expect(
      capacity([
        { limit: 5, windowMs: 100 },
        { limit: 100, windowMs: 1000 },
      ]),
    ).toEqual([100]);
    expect(
      capacity([
        { limit: 10, windowMs: 1000 },
        { limit: 5, windowMs: 1000 },
      ]),
    ).toEqual([5]);
    expect(
      capacity([
        { limit: 5, windowMs: 1000 },
        { limit: 10, windowMs: 1000 },
      ]),
    ).toEqual([5]);
  });

  it("a ring sized by the long window holds every slot the short window's limit lets through", () => {
    const log = new KeyLog([
      { limit: 100, windowMs: 1000 },
      { limit: 5, windowMs: 100 },
    ]);
    let granted = 0;
    for (let t = 0; t < 1000; t += 10) if (log.take(t, { cost: 1 }).decision.allowed) granted++;
    expect(granted).toBe(50);
    expect(log.rings[0]?.size).toBe(50);
  });

  it("lease bounds: lifetimes up to the longest window and at most a minute; ring slack 1/32 of the shortest window", () => {
    const specs = [
      { limit: 100, windowMs: 1000 },
      { limit: 33, windowMs: 65_000 },
    ];
    expect([maxLeaseMs(specs), ringSlackMs(specs)]).toEqual([60_000, 31]);
    expect(maxLeaseMs([{ limit: 5, windowMs: 1000 }])).toBe(1000);
  });
});

describe("leaseScale", () => {
  it("grants the whole spending time far below every limit, none under a quarter free, in proportion between", () => {
    expect(leaseScale(1)).toBe(1);
    expect(leaseScale(0.75)).toBe(1);
    expect(leaseScale(0.5)).toBe(0.5);
    expect(leaseScale(0.375)).toBe(0.25);
    expect(leaseScale(0.25)).toBe(0);
    expect(leaseScale(0.1)).toBe(0);
    expect(leaseScale(-1)).toBe(0);
  });
});
