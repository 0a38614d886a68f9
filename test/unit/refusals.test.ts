// An isolate's count of a key's refusals towards its plan's penalty (src/client/refusals.ts): those answered from the
// deny cache are carried by the next call, and a refusal that could complete the count goes to the object — also while
// a call carrying the earlier ones is out, so refusals sent together learn of the block as refusals sent one at a time.
import { describe, expect, it } from "vitest";
import type { Blocked } from "../../src/client/deny-cache.ts";
import { Refusals } from "../../src/client/refusals.ts";
import type { Plan } from "../../src/config/types.ts";
import type { Decision } from "../../src/core/decision.ts";
import type { TakeAsk } from "../../src/protocol.ts";

const penalty = { after: 3, withinMs: 60_000, blockMs: 600_000, maxBlockMs: null };
const plan = { penalty } as unknown as Plan;
const noPenalty = { penalty: null } as unknown as Plan;
const full: Blocked = { until: 1_000, freeAt: [1_000], retryAt: new Map() };
const ask = { cost: 1 } as unknown as TakeAsk;
const seen = (refusalsSeen: number) => ({ refusalsSeen }) as unknown as Decision;

describe("Refusals", () => {
  it("counts refusals answered here until the one that would complete the penalty, which goes to the object", () => {
    const r = new Refusals();
    expect(r.completesPenalty("k", plan, full, 0)).toBe(false);
    r.refusedHere("k", plan, full, 0);
    expect(r.completesPenalty("k", plan, full, 0)).toBe(false);
    r.refusedHere("k", plan, full, 0);
    expect(r.completesPenalty("k", plan, full, 0)).toBe(true);
    // The next call carries them, and the penalty.
    expect(r.penalized("k", plan, ask)).toEqual({ cost: 1, penalty, refused: 2 });
    expect(r.penalized("k", plan, ask)).toEqual({ cost: 1, penalty, refused: 0 });
  });

  it("while a call carrying refusals is out, they still count: a refusal sent together with it goes to the object", () => {
    const r = new Refusals();
    r.refusedHere("k", plan, full, 0);
    r.refusedHere("k", plan, full, 0);
    r.penalized("k", plan, ask);
    expect(r.completesPenalty("k", plan, full, 0)).toBe(true);
    // The object's answer replaces the estimate with its own count (here: a window that let one of them go).
    r.saw("k", seen(1));
    expect(r.completesPenalty("k", plan, full, 0)).toBe(false);
    r.saw("k", { refusalsSeen: undefined } as unknown as Decision);
    expect(r.completesPenalty("k", plan, full, 0)).toBe(false);
    r.refusedHere("k", plan, full, 0);
    expect(r.completesPenalty("k", plan, full, 0)).toBe(true);
  });

  it("a refusal the object counted and this isolate then granted is one fewer reported: below 0, off the next report", () => {
    const r = new Refusals();
    r.refusedHere("k", plan, full, 0);
    r.grantedHere("k", plan);
    r.grantedHere("k", plan);
    // 1 − 2: none reported, one left to take off.
    expect(r.penalized("k", plan, ask)).toEqual({ cost: 1, penalty, refused: 0 });
    r.refusedHere("k", plan, full, 0);
    r.refusedHere("k", plan, full, 0);
    r.grantedHere("k", plan);
    // −1 + 2 − 1.
    expect(r.penalized("k", plan, ask)).toEqual({ cost: 1, penalty, refused: 0 });
    r.refusedHere("k", plan, full, 0);
    r.refusedHere("k", plan, full, 0);
    expect(r.penalized("k", plan, ask)).toEqual({ cost: 1, penalty, refused: 2 });
    expect(r.penalized("k", plan, ask)).toEqual({ cost: 1, penalty, refused: 0 });
  });

  it("counts nothing for a plan without a penalty, nor while the key is blocked", () => {
    const r = new Refusals();
    r.refusedHere("k", noPenalty, full, 0);
    r.grantedHere("k", noPenalty);
    expect(r.penalized("k", noPenalty, ask)).toBe(ask);
    expect(r.completesPenalty("k", noPenalty, full, 0)).toBe(false);
    const blocked: Blocked = { ...full, blockedBy: 10, cause: "penalty" };
    for (let i = 0; i < 5; i++) r.refusedHere("k", plan, blocked, 9);
    expect(r.completesPenalty("k", plan, blocked, 9)).toBe(false);
    // The block has ended at 10: the refusals while it lasted did not count.
    expect(r.completesPenalty("k", plan, blocked, 10)).toBe(false);
    expect(r.penalized("k", plan, ask)).toEqual({ cost: 1, penalty, refused: 0 });
  });

  it("keeps each key's counts apart, and starts afresh past 10,000 keys", () => {
    const r = new Refusals();
    r.refusedHere("a", plan, full, 0);
    r.refusedHere("a", plan, full, 0);
    expect(r.completesPenalty("b", plan, full, 0)).toBe(false);
    expect(r.completesPenalty("a", plan, full, 0)).toBe(true);
    r.saw("a", seen(2));
    for (let i = 0; i < 10_000; i++) {
      r.refusedHere(`x${i}`, plan, full, 0);
      r.saw(`x${i}`, seen(1));
    }
    // "a" was forgotten in both counts when the maps filled.
    expect(r.penalized("a", plan, ask)).toEqual({ cost: 1, penalty, refused: 0 });
    expect(r.completesPenalty("a", plan, full, 0)).toBe(false);
    // The newest keys are kept: one answered here, one at the object, and this one.
    expect(r.completesPenalty("x9999", plan, full, 0)).toBe(true);
  });
});
