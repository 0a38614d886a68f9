// Concurrency slots alone (src/core/slots.ts): at most `limit` held at once, a retried take holds one slot, a
// release frees it, a slot lapses `timeoutMs` after it was taken or last renewed and is not renewed after.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type ConcurrencySpec, checkSlotAsk, checkSlotTimeout, MAX_CONCURRENCY, Slots } from "../../src/core/slots.ts";

const spec: ConcurrencySpec = { limit: 2, timeoutMs: 1_000 };

describe("Slots", () => {
  it("holds at most `limit`; a release frees one; a retried take holds the same slot", () => {
    const s = new Slots();
    expect(s.take(0, "a", spec)).toEqual({ held: true, expiresAt: 1_000, fresh: true });
    expect(s.take(10, "a", spec)).toEqual({ held: true, expiresAt: 1_010, fresh: false });
    expect(s.take(10, "b", spec)).toEqual({ held: true, expiresAt: 1_010, fresh: true });
    expect(s.take(20, "c", spec)).toEqual({ held: false });
    expect(s.fits(20, "c", spec)).toBe(false);
    expect(s.fits(20, "a", spec)).toBe(true);
    expect(s.heldAt(20)).toBe(2);
    expect(s.release("a")).toBe(true);
    expect(s.release("a")).toBe(false);
    expect(s.take(30, "c", spec)).toEqual({ held: true, expiresAt: 1_030, fresh: true });
    expect(s.size).toBe(2);
    expect(s.lastExpiry).toBe(1_030);
  });

  it("a slot lapses at its expiry unless renewed; a lapsed slot is not renewed, and frees its place", () => {
    const s = new Slots([
      ["a", 1_000],
      ["b", 1_500],
    ]);
    expect(s.heldAt(999)).toBe(2);
    expect(s.heldAt(1_000)).toBe(1);
    expect(s.renew(1_000, "a", 1_000)).toBeNull();
    expect(s.renew(1_000, "b", 1_000)).toBe(2_000);
    expect(s.take(1_000, "c", spec)).toEqual({ held: true, expiresAt: 2_000, fresh: true });
    expect(s.lapse(1_999)).toEqual(["a"]);
    expect(s.lapse(2_000).sort()).toEqual(["b", "c"]);
    expect(s.size).toBe(0);
    expect(s.lastExpiry).toBe(Number.NEGATIVE_INFINITY);
    expect(s.renew(2_000, "never", 1_000)).toBeNull();
    // A take after a lapse is fresh, though the id was held once.
    expect(s.take(2_000, "a", spec)).toEqual({ held: true, expiresAt: 3_000, fresh: true });
    s.clear();
    expect(s.size).toBe(0);
  });

  it("an id whose slot lapsed takes a new one only when there is room; a slot lapses at its expiry exactly", () => {
    const s = new Slots();
    const one = { limit: 1, timeoutMs: 1_000 };
    s.take(0, "a", one);
    expect(s.fits(999, "a", one)).toBe(true);
    expect(s.take(999, "a", one)).toEqual({ held: true, expiresAt: 1_999, fresh: false });
    // At its expiry the slot has lapsed: "a" is fresh again, and "b" fits.
    expect(s.fits(1_999, "b", one)).toBe(true);
    expect(s.take(1_999, "a", one)).toEqual({ held: true, expiresAt: 2_999, fresh: true });
    expect(s.take(2_000, "b", one)).toEqual({ held: false });
    // "b" holds, "a" has lapsed: "a" must wait for room like any other request.
    const t = new Slots([
      ["a", 100],
      ["b", 5_000],
    ]);
    expect(t.fits(100, "a", one)).toBe(false);
    expect(t.take(100, "a", one)).toEqual({ held: false });
  });

  it("checks a slot ask as it arrives over RPC: an id of 1 to 64 characters, a limit of 1 to 10,000, a timeout of 1 s to 1 d", () => {
    const ok = { id: "r", limit: 1, timeoutMs: 1_000 };
    expect(() => checkSlotAsk(ok)).not.toThrow();
    expect(() =>
      checkSlotAsk({ ...ok, id: "x".repeat(64), limit: MAX_CONCURRENCY, timeoutMs: 86_400_000 }),
    ).not.toThrow();
    expect(() => checkSlotAsk({ ...ok, id: "" })).toThrow("slot.id: expected a request id of 1 to 64 characters");
    expect(() => checkSlotAsk({ ...ok, id: "x".repeat(65) })).toThrow(RangeError);
    expect(() => checkSlotAsk({ ...ok, id: 7 })).toThrow(RangeError);
    expect(() => checkSlotAsk({ ...ok, limit: 0 })).toThrow("slot.limit: expected 1 to 10000, got 0");
    expect(() => checkSlotAsk({ ...ok, limit: 10_001 })).toThrow(RangeError);
    expect(() => checkSlotAsk({ ...ok, limit: 1.5 })).toThrow(RangeError);
    expect(() => checkSlotAsk({ ...ok, limit: "2" })).toThrow(RangeError);
    expect(() => checkSlotAsk({ ...ok, timeoutMs: 999 })).toThrow(
      "slot.timeoutMs: expected 1000 to 86400000 ms, got 999",
    );
    expect(() => checkSlotTimeout(86_400_001)).toThrow("timeoutMs: expected 1000 to 86400000 ms, got 86400001");
    expect(() => checkSlotTimeout(1_000.5)).toThrow(RangeError);
    expect(() => checkSlotTimeout("60000")).toThrow(RangeError);
  });

  it("property: against a model of slots, never more than `limit` held at any time, and takes agree", () => {
    type Op =
      | { op: "take"; id: number; dt: number }
      | { op: "release"; id: number; dt: number }
      | { op: "renew"; id: number; dt: number }
      | { op: "lapse"; id: number; dt: number };
    const op = fc.record({
      op: fc.constantFrom("take", "release", "renew", "lapse"),
      id: fc.integer({ min: 0, max: 6 }),
      dt: fc.integer({ min: 0, max: 400 }),
    }) as fc.Arbitrary<Op>;
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.array(op, { maxLength: 80 }), (limit, ops) => {
        const sp = { limit, timeoutMs: 1_000 };
        const s = new Slots();
        const model = new Map<string, number>(); // id → expiry
        let now = 0;
        for (const o of ops) {
          now += o.dt;
          const id = `r${o.id}`;
          for (const [k, t] of model) if (t <= now) model.delete(k);
          if (o.op === "take") {
            const can = model.has(id) || model.size < limit;
            const got = s.take(now, id, sp);
            expect(got.held).toBe(can);
            if (can) model.set(id, now + 1_000);
          } else if (o.op === "release") {
            s.release(id);
            model.delete(id);
          } else if (o.op === "renew") {
            expect(s.renew(now, id, 1_000)).toBe(model.has(id) ? now + 1_000 : null);
            if (model.has(id)) model.set(id, now + 1_000);
          } else {
            s.lapse(now);
          }
          expect(s.heldAt(now)).toBe(model.size);
          expect(s.heldAt(now)).toBeLessThanOrEqual(limit);
        }
      }),
      { numRuns: 500 },
    );
  });
});
