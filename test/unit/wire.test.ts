/** @module The RPC wire form: every decision the core makes reads back unchanged on the Worker's side. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SlidingLog } from "../../src/core/index.ts";
import { decodeDecision, encodeDecision, readWireLimits, wireLimits } from "../../src/wire.ts";

const limitsArb = fc.array(
  fc.record({ limit: fc.integer({ min: 1, max: 12 }), windowMs: fc.integer({ min: 1, max: 40 }) }),
  { minLength: 1, maxLength: 4 },
);

describe("wire", () => {
  it("carries every field of every decision, in order, through a structured clone", () => {
    fc.assert(
      fc.property(
        limitsArb,
        fc.array(fc.record({ dt: fc.integer({ min: 0, max: 9 }), cost: fc.integer({ min: 1, max: 14 }) }), {
          maxLength: 40,
        }),
        (limits, steps) => {
          const log = new SlidingLog(readWireLimits(structuredClone(wireLimits(limits))));
          let now = 1_700_000_000_000;
          for (const { dt, cost } of steps) {
            now += dt;
            const d = log.decide(now, cost);
            const read = decodeDecision(structuredClone(encodeDecision(d)));
            expect(read).toEqual({
              allowed: d.allowed,
              neverAllowed: d.neverAllowed,
              now: d.now,
              retryAfterMs: d.retryAfterMs,
              blockedForMs: d.blockedUntil - d.now,
              limits: d.limits.map((l) => ({ remaining: l.remaining, resetMs: l.resetMs, exceeded: l.exceeded })),
            });
          }
        },
      ),
    );
  });

  it("keeps a wait of Infinity (a cost that can never pass)", () => {
    const log = new SlidingLog([{ limit: 2, windowMs: 1000 }]);
    const read = decodeDecision(structuredClone(encodeDecision(log.decide(0, 3))));
    expect(read).toMatchObject({ allowed: false, neverAllowed: true, retryAfterMs: Number.POSITIVE_INFINITY });
    expect(read.limits).toEqual([{ remaining: 2, resetMs: 0, exceeded: true }]);
  });

  it("sends limits as [limit, windowMs, …] without names", () => {
    expect(
      wireLimits([
        { limit: 100, windowMs: 1000, name: "per-second" },
        { limit: 1000, windowMs: 60_000 },
      ]),
    ).toEqual([100, 1000, 1000, 60_000]);
    expect(readWireLimits([100, 1000, 1000, 60_000])).toEqual([
      { limit: 100, windowMs: 1000 },
      { limit: 1000, windowMs: 60_000 },
    ]);
  });

  it.each([[[]], [[1]], [[1, 2, 3]], ["1,2"], [null], [{ limit: 1, windowMs: 1 }]])(
    "refuses malformed limits %j",
    (wire) => {
      expect(() => readWireLimits(wire)).toThrow(/^limits: expected \[limit, windowMs, …\] with at least one pair$/);
    },
  );
});
