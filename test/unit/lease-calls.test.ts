// Joining a lease call already out (src/client/lease-calls.ts) at its edges: when a call is due and late, which
// requests may join it, and how long one waits after each wait.
import { describe, expect, it } from "vitest";
import { answered, type CallSlot, callOut, join, waitMs } from "../../src/client/lease-calls.ts";

describe("callOut", () => {
  it("is due a round trip after it is sent (at least 5 ms), late four deviations after (5 ms to a round trip)", () => {
    const slot: CallSlot = { call: null };
    expect(callOut(slot, { units: 4, now: 100 }, { meanMs: 20, devMs: 2 })).toEqual({
      spare: 4,
      dueAt: 120,
      until: 128,
      done: false,
    });
    expect(slot.call?.dueAt).toBe(120);
    expect(callOut(slot, { units: 1, now: 100 }, { meanMs: 0, devMs: 0 })).toMatchObject({ dueAt: 105, until: 110 });
    expect(callOut(slot, { units: 1, now: 100 }, { meanMs: 20.5, devMs: 100 })).toMatchObject({
      dueAt: 121,
      until: 141.5,
    });
  });
});

describe("join", () => {
  it("promises spare units to a request while the call is not late; none past them", () => {
    const slot: CallSlot = { call: null };
    expect(join(slot, 1, 0)).toBeNull();
    const call = callOut(slot, { units: 3, now: 0 }, { meanMs: 20, devMs: 2 });
    expect(join(slot, 2, 27)).toBe(call);
    expect(call.spare).toBe(1);
    expect(join(slot, 2, 27)).toBeNull();
    expect(join(slot, 1, 28)).toBeNull(); // late
    expect(join(slot, 1, 27)).toBe(call);
    expect(call.spare).toBe(0);
  });
});

describe("waitMs", () => {
  const call = () => callOut({ call: null }, { units: 2, now: 0 }, { meanMs: 20, devMs: 2 }); // due at 20, late at 28

  it("waits until the call is due, then until it is late, then not at all", () => {
    expect(waitMs(call(), 5, 0)).toBe(15);
    expect(waitMs(call(), 21, 1)).toBe(7);
    expect(waitMs(call(), 21, 0)).toBe(1); // due already: at least a millisecond
    expect(waitMs(call(), 27, 1)).toBe(1);
    expect(waitMs(call(), 10, 2)).toBeNull();
  });

  it("never for no call, an answered one, or one late at `now`", () => {
    expect(waitMs(null, 0, 0)).toBeNull();
    expect(waitMs(call(), 28, 0)).toBeNull();
    expect(waitMs(call(), 28, 1)).toBeNull();
    const slot: CallSlot = { call: null };
    const c = callOut(slot, { units: 1, now: 0 }, { meanMs: 20, devMs: 2 });
    answered(slot, c);
    expect([c.done, slot.call, waitMs(c, 0, 0)]).toEqual([true, null, null]);
    // A call answered after another was sent for the key leaves the newer one out.
    const newer = callOut(slot, { units: 1, now: 0 }, { meanMs: 20, devMs: 2 });
    answered(slot, c);
    expect(slot.call).toBe(newer);
  });
});
