// Joining a lease call already out (src/client/lease-calls.ts) at its edges: when a call is due and late, which
// requests may join it, and how long one waits after each wait; and a call carrying settlements, which a refusal it
// may have caused waits for and asks again after, within its room.
import { describe, expect, it } from "vitest";
import {
  answered,
  type CallSlot,
  callOut,
  claimRoom,
  join,
  refusedByLimits,
  settlingAnswered,
  settlingFailed,
  settlingOut,
  waitMs,
} from "../../src/client/lease-calls.ts";
import type { Decision, LimitStatus } from "../../src/core/decision.ts";

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

/** A decision at `now`: its limits' and quotas' states, the credits; refused when any of them is exceeded. */
function decided(
  now: number,
  limits: readonly LimitStatus[],
  more: { quotas?: readonly LimitStatus[]; credits?: Decision["credits"]; neverAllowed?: boolean } = {},
): Decision {
  const refused = [...limits, ...(more.quotas ?? [])].some((l) => l.exceeded) || more.credits?.exceeded === true;
  return {
    allowed: !refused,
    neverAllowed: more.neverAllowed ?? false,
    cost: 1,
    now,
    retryAfterMs: refused ? 100 : 0,
    blockedUntil: now,
    limits,
    lease: null,
    ...(more.quotas ? { quotas: more.quotas } : {}),
    ...(more.credits ? { credits: more.credits } : {}),
  };
}
const free = (remaining: number): LimitStatus => ({ remaining, resetMs: 0, exceeded: false });
const full: LimitStatus = { remaining: 0, resetMs: 500, exceeded: true };

describe("a call carrying settlements", () => {
  it("is waited for a recent round trip at a time, at least 5 ms, and has no room until answered", () => {
    expect(settlingOut(20.5)).toEqual({ stepMs: 21, done: false, decidedAt: Number.NEGATIVE_INFINITY, room: 0 });
    expect(settlingOut(0).stepMs).toBe(5);
    expect(settlingOut(5).stepMs).toBe(5);
  });

  it("answered, shows as room the least that every limit, quota and the credits have free after it", () => {
    const call = settlingOut(20);
    settlingAnswered(call, decided(1000, [free(7), free(3)]));
    expect(call).toMatchObject({ done: true, decidedAt: 1000, room: 3 });
    const quotas = settlingOut(20);
    settlingAnswered(quotas, decided(1000, [free(7)], { quotas: [free(9), free(2)] }));
    expect(quotas.room).toBe(2);
    const credits = settlingOut(20);
    settlingAnswered(
      credits,
      decided(1000, [free(7)], { quotas: [free(5)], credits: { balance: 4, exceeded: false } }),
    );
    expect(credits.room).toBe(4);
    const plenty = settlingOut(20);
    settlingAnswered(plenty, decided(1000, [free(7)], { credits: { balance: 40, exceeded: false } }));
    expect(plenty.room).toBe(7);
  });

  it("lets a refusal decided before it ask once more, each claiming its cost of the room the answer showed", () => {
    const call = settlingOut(20);
    // Not answered yet: nothing to claim.
    expect(claimRoom(call, 999, 1)).toBe(false);
    settlingAnswered(call, decided(1000, [free(3)]));
    expect(claimRoom(call, 999, 2)).toBe(true);
    expect(call.room).toBe(1);
    expect(claimRoom(call, 999, 2)).toBe(false); // the room left is short of the cost
    expect(call.room).toBe(1);
    expect(claimRoom(call, 999, 1)).toBe(true);
    expect(call.room).toBe(0);
    expect(claimRoom(call, 999, 1)).toBe(false); // claimed in full
  });

  it("never for no call, a refusal decided at or after it (its settlements were already applied), or a failed call", () => {
    expect(claimRoom(null, 0, 1)).toBe(false);
    const call = settlingOut(20);
    settlingAnswered(call, decided(1000, [free(5)]));
    expect(claimRoom(call, 1000, 1)).toBe(false);
    expect(claimRoom(call, 1001, 1)).toBe(false);
    expect(call.room).toBe(5);
    const failed = settlingOut(20);
    settlingFailed(failed);
    expect(failed).toEqual({ stepMs: 20, done: true, decidedAt: Number.NEGATIVE_INFINITY, room: 0 });
    expect(claimRoom(failed, 0, 1)).toBe(false);
  });
});

describe("refusedByLimits", () => {
  it("is a refusal by a rate limit, which a settlement may free", () => {
    expect(refusedByLimits(decided(0, [free(3), full]))).toBe(true);
    expect(refusedByLimits(decided(0, [full]))).toBe(true);
  });

  it("is not a grant, a cost over a limit, nor a refusal by a quota or the credits, even with a limit full too", () => {
    expect(refusedByLimits(decided(0, [free(3)]))).toBe(false);
    expect(refusedByLimits(decided(0, [full], { neverAllowed: true }))).toBe(false);
    expect(refusedByLimits(decided(0, [free(3)], { quotas: [full] }))).toBe(false);
    expect(refusedByLimits(decided(0, [full], { quotas: [free(2), full] }))).toBe(false);
    expect(refusedByLimits(decided(0, [full], { quotas: [free(2)] }))).toBe(true);
    expect(refusedByLimits(decided(0, [full], { credits: { balance: 0, exceeded: true } }))).toBe(false);
    expect(refusedByLimits(decided(0, [full], { credits: { balance: 5, exceeded: false } }))).toBe(true);
  });
});
