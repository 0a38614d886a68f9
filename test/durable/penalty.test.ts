// Penalties inside the key's object: refusals by the rate limits (its own, and those an isolate answered from its
// deny cache) counted over `within`; a block for `block` (never shorter than the window's own wait), doubling for
// repeat offenders up to `max_block`; operator blocks and refusals while blocked not counted; status shows the
// cause; unblock lifts it; reset forgets the count; all of it across an eviction. Time is the object's `clock()`.
import { describe, expect, it } from "vitest";
import type { PenaltySpec } from "../../src/core/penalty.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
import { object, perSecond, T0 } from "./object.ts";

const penalty: PenaltySpec = { after: 3, withinMs: 10_000, blockMs: 60_000, maxBlockMs: null };

describe("penalty", () => {
  it("the third refusal within the span blocks the key for `block`: reason penalty, Retry-After to its end", async () => {
    const o = await object();
    o.at(T0);
    for (let i = 0; i < 3; i++) expect((await o.take(perSecond, 1, { penalty })).allowed).toBe(true);
    o.at(T0 + 10);
    expect((await o.take(perSecond, 1, { penalty })).blockCause).toBeUndefined();
    o.at(T0 + 20);
    expect((await o.take(perSecond, 1, { penalty })).blockCause).toBeUndefined();
    // Refusals are counted in memory: a refusal still writes nothing.
    expect((await o.stored()).meta.map((m) => (m as { k: string }).k)).not.toContain("penalty");
    o.at(T0 + 30);
    const third = await o.take(perSecond, 1, { penalty });
    expect(third).toMatchObject({ allowed: false, blockCause: "penalty", blockedBy: T0 + 30 + 60_000 });
    expect(third.retryAfterMs).toBe(60_000);
    // While blocked, every request is refused with the penalty, and none counts towards another.
    o.at(T0 + 5_000);
    const blocked = await o.take(perSecond, 1, { penalty });
    expect(blocked).toMatchObject({ allowed: false, blockCause: "penalty", retryAfterMs: 55_030 });
    expect(await o.status()).toMatchObject({ blockedUntil: T0 + 60_030, blockCause: "penalty", refusals: 0 });
    // …also after an eviction.
    await o.evict();
    expect((await o.take(perSecond, 1, { penalty })).blockCause).toBe("penalty");
    o.at(T0 + 60_030);
    expect((await o.take(perSecond, 1, { penalty })).allowed).toBe(true);
  });

  it("refusals older than `within` no longer count; refusals answered from a deny cache count when reported", async () => {
    const o = await object();
    for (let i = 0; i < 3; i++) await o.take(perSecond, 1, { penalty });
    o.at(T0 + 1);
    await o.take(perSecond, 1, { penalty });
    o.at(T0 + 2);
    await o.take(perSecond, 1, { penalty });
    expect((await o.status()).refusals).toBe(2);
    o.at(T0 + 10_002);
    // Both have left the span: this refusal (the window's three are full again first) is the only one.
    for (let i = 0; i < 3; i++) await o.take(perSecond, 1, { penalty });
    expect((await o.take(perSecond, 1, { penalty })).blockCause).toBeUndefined();
    expect((await o.status()).refusals).toBe(1);
    // Two refusals an isolate answered itself, reported with its next call: three in the span.
    const reported = await o.take(perSecond, 1, { penalty, refused: 2 });
    expect(reported).toMatchObject({ allowed: false, blockCause: "penalty" });
  });

  it("reported refusals are counted before the decision: when they complete the count, the request that carries them is decided under the block; every answer says the count", async () => {
    const o = await object();
    // No grant yet: the request fits its limits, but the three refusals reported with it complete the penalty.
    const carried = await o.take(perSecond, 1, { penalty, refused: 3 });
    expect(carried).toMatchObject({ allowed: false, blockCause: "penalty", blockedBy: T0 + 60_000, refusalsSeen: 0 });
    expect(await o.rows()).toEqual([]); // nothing recorded
    // The block's end, its span after, and the day the idle state is kept.
    expect((await o.stored()).alarm).toBe(T0 + 60_000 + penalty.withinMs + IDLE_KEEP_MS);
    // Under the count the request is decided as usual, and the answer says how many refusals the object has seen.
    const p = await object();
    expect(await p.take(perSecond, 1, { penalty, refused: 1 })).toMatchObject({ allowed: true, refusalsSeen: 1 });
    expect((await p.take(perSecond, 1)).refusalsSeen).toBeUndefined();
  });

  it("a block is never shorter than the window's own wait", async () => {
    const o = await object();
    const long = [{ limit: 1, windowMs: 600_000, tickMs: 1 }];
    await o.take(long, 1, { penalty });
    o.at(T0 + 1);
    await o.take(long, 1, { penalty });
    await o.take(long, 1, { penalty });
    const third = await o.take(long, 1, { penalty });
    expect(third.blockedBy).toBe(T0 + 600_000);
  });

  it("max_block: a block within `within` of the last one's end lasts twice as long, up to max_block", async () => {
    const o = await object();
    const spec = { ...penalty, blockMs: 1_000, maxBlockMs: 3_000 };
    const hammer = async () => {
      let d = await o.take(perSecond, 1, { penalty: spec });
      while (d.blockCause === undefined) d = await o.take(perSecond, 1, { penalty: spec });
      return (d.blockedBy as number) - (d.now as number);
    };
    const lengths: number[] = [];
    let t = T0;
    for (let i = 0; i < 4; i++) {
      o.at(t);
      lengths.push(await hammer());
      t += lengths[i] as number;
    }
    expect(lengths).toEqual([1_000, 2_000, 3_000, 3_000]);
    // After a quiet span longer than `within`, the next block is the first length again.
    o.at(t + 20_000);
    expect(await hammer()).toBe(1_000);
  });

  it("an operator's block is not a penalty and its refusals never count; unblock lifts a penalty; reset forgets the count", async () => {
    const o = await object();
    await o.stub.block(T0 + 1_000);
    for (let i = 0; i < 5; i++) expect((await o.take(perSecond, 1, { penalty })).blockCause).toBeUndefined();
    expect(await o.status()).toMatchObject({ blockCause: "operator", refusals: 0 });
    await o.stub.unblock();
    for (let i = 0; i < 6; i++) await o.take(perSecond, 1, { penalty });
    expect((await o.status()).blockCause).toBe("penalty");
    await o.stub.unblock();
    expect(await o.status()).toMatchObject({ blockedUntil: null, blockCause: null });
    // Two refusals, then a reset: they are forgotten, so two more do not block.
    await o.take(perSecond, 1, { penalty });
    await o.take(perSecond, 1, { penalty });
    expect((await o.status()).refusals).toBe(2);
    await o.stub.reset(perSecond);
    expect((await o.status()).refusals).toBe(0);
  });
});
