// Kept answers (src/object/kept.ts; docs/design.md, "Nothing lost under faults"), inside workerd with the object's
// SQLite storage and clock seam: a call that changes the key's state, sent again with its id, is answered as the first
// time and applied once — a take, a refund, a settle of a cost, a lease settlement, a report of grants made alone, a
// top-up — across an eviction too; a settle with a take's id answers for it or claims it; a call that changed only
// memory keeps its answer there; an answer is kept a minute, one row per
// call, its row reused after; a bad id is refused with nothing applied.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Decision, LimitSpec } from "../../src/core/index.ts";
import type { RateLimiter } from "../../src/object/index.ts";
import { IN_MEMORY_MAX, KEEP_MS } from "../../src/object/kept.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
import { object, perSecond, T0 } from "./object.ts";

const tenPerMinute: LimitSpec[] = [{ limit: 10, windowMs: 60_000, tickMs: 1 }];
const tenPerHour: LimitSpec[] = [{ limit: 10, windowMs: 3_600_000, tickMs: 1 }];
/** A key with credits: its grants are billed, so their answers are kept in storage. */
const billed = { credits: { initial: 1_000 } };
/** Far from its limit: the object leases. */
const roomy: LimitSpec[] = [{ limit: 1_000, windowMs: 60_000, tickMs: 1 }];

type O = Awaited<ReturnType<typeof object>>;

/** The kept answers' rows: call id and when. */
const keptRows = (o: O) =>
  runInDurableObject(o.stub, (_: RateLimiter, state) => {
    const sql = state.storage.sql;
    if (sql.exec("SELECT name FROM sqlite_master WHERE name = 'kept_answers'").toArray().length === 0) return [];
    return sql
      .exec<{ slot: number; id: string; at: number }>("SELECT slot, id, at FROM kept_answers ORDER BY slot")
      .toArray();
  });

/** What the key has left in its one limit. */
const remaining = async (o: O, limits = tenPerMinute) => (await o.peek(limits, 1)).limits[0]?.remaining;

describe("a call sent again with its id is answered as the first time, applied once", () => {
  it("take: the same decision, one unit counted; a metered key's answer in a row, a plain key's in memory", async () => {
    const o = await object();
    const first = (await o.stub.take(tenPerMinute, { cost: 3, ...billed, call: "c-1" })) as Decision;
    o.at(T0 + 5);
    const again = (await o.stub.take(tenPerMinute, { cost: 3, ...billed, call: "c-1" })) as Decision;
    expect(again).toEqual(first);
    expect(await remaining(o)).toBe(7);
    expect((await keptRows(o)).map((r) => r.id)).toEqual(["c-1"]);
    // Another id is another call.
    await o.stub.take(tenPerMinute, { cost: 3, ...billed, call: "c-2" });
    expect(await remaining(o)).toBe(4);
    // A plain key: the same answer while the object lives, and no row for it.
    const plain = await object();
    const d = await plain.stub.take(tenPerMinute, { cost: 3, call: "p-1" });
    expect(await plain.stub.take(tenPerMinute, { cost: 3, call: "p-1" })).toEqual(d);
    expect(await remaining(plain)).toBe(7);
    expect(await keptRows(plain)).toEqual([]);
  });

  it("take: a lease and the settlements it carried, applied once", async () => {
    const o = await object();
    const leased = (await o.stub.take(roomy, { cost: 1, leaseUnits: 20, leaseMs: 5_000, call: "lease-1" })) as Decision;
    expect(leased.lease?.units).toBe(20);
    expect(await remaining(o, roomy)).toBe(979);
    const lease = leased.lease as NonNullable<Decision["lease"]>;
    // The isolate gives its 20 units back with its next request's call, whose answer is lost: sent again.
    const settle = [{ recordedAt: lease.recordedAt, issuedAt: leased.now, used: 0, lastUseMs: 0, unused: 20 }];
    o.at(T0 + 10);
    const ask = { cost: 1, settle, call: "c-2" };
    const first = (await o.stub.take(roomy, ask)) as Decision;
    const again = (await o.stub.take(roomy, ask)) as Decision;
    expect(again).toEqual(first);
    // 1,000 − 1 (the first request) − 1 (this one): the lease's 20 came back once.
    expect(await remaining(o, roomy)).toBe(998);
  });

  it("refund and settle of a grant: true both times, given back once", async () => {
    const o = await object();
    const d = (await o.stub.take(tenPerMinute, { cost: 4, call: "t-1" })) as Decision;
    const grant = { id: "g-1", recordedAt: d.recordedAt ?? [], units: 4, call: "r-1" };
    expect(await o.stub.refund(tenPerMinute, grant)).toBe(true);
    expect(await o.stub.refund(tenPerMinute, grant)).toBe(true);
    expect(await remaining(o)).toBe(10);
    // The grant's id is spent: a refund of it in another call gives nothing back.
    expect(await o.stub.refund(tenPerMinute, { ...grant, call: "r-2" })).toBe(false);
    const s = (await o.stub.take(tenPerMinute, { cost: 6, call: "t-2" })) as Decision;
    const settle = { id: "g-2", recordedAt: s.recordedAt ?? [], units: 2, settle: true, debt: 0, call: "s-1" };
    expect(await o.stub.refund(tenPerMinute, settle)).toBe(true);
    expect(await o.stub.refund(tenPerMinute, settle)).toBe(true);
    expect(await remaining(o)).toBe(6);
  });

  it("lease settlements and grants made alone: the rows written both times, recorded once", async () => {
    const o = await object();
    const leased = (await o.stub.take(roomy, { cost: 0, leaseUnits: 20, leaseMs: 5_000 })) as Decision;
    const lease = leased.lease as NonNullable<Decision["lease"]>;
    const settle = [{ recordedAt: lease.recordedAt, issuedAt: leased.now, used: 0, lastUseMs: 0, unused: 20 }];
    const rows = await o.stub.settle(roomy, settle, "s-1");
    expect(await o.stub.settle(roomy, settle, "s-1")).toBe(rows);
    expect(await remaining(o, roomy)).toBe(1_000);
    const report = { uses: [{ ageMs: 0, units: 3 }], routes: [], call: "a-1" };
    const written = await o.stub.recover(roomy, report);
    expect(written).toBeGreaterThan(0);
    expect(await o.stub.recover(roomy, report)).toBe(written);
    expect(await remaining(o, roomy)).toBe(997);
  });

  it("top-up: applied both times, the credits added once; its own id stays once for good", async () => {
    const o = await object();
    const spec = { initial: 10 };
    expect(await o.stub.topUp(spec, 5, undefined, "u-1")).toEqual({ balance: 15, applied: true });
    expect(await o.stub.topUp(spec, 5, undefined, "u-1")).toEqual({ balance: 15, applied: true });
    expect(await o.stub.topUp(spec, 5, "top-1", "u-2")).toEqual({ balance: 20, applied: true });
    // The operator's id, sent again in another call: not applied, as before kept answers.
    expect(await o.stub.topUp(spec, 5, "top-1", "u-3")).toEqual({ balance: 20, applied: false });
  });

  it("a settle sent with a take's id: the take's kept decision if it was applied; else it claims the id", async () => {
    const o = await object();
    const d = await o.stub.take(tenPerMinute, { cost: 2, call: "c-1" });
    expect(await o.stub.settle(tenPerMinute, [], "c-1")).toEqual(d);
    // Never applied: the settle keeps its answer though it changed nothing, and the take arriving late finds its id
    // spent (a RangeError: nothing applied, nothing sent again).
    expect(await o.stub.settle(tenPerMinute, [], "c-2")).toBe(0);
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      const late = instance.take(tenPerMinute, { cost: 2, call: "c-2" });
      await expect(Promise.resolve(late)).rejects.toThrow("the id c-2 was spent by a settle");
    });
    expect(await remaining(o)).toBe(8);
  });

  it("a claim on a key with nothing stored keeps its answer, and the idle alarm forgets it a day after it is no longer kept", async () => {
    const o = await object();
    expect(await o.stub.settle(tenPerMinute, [], "claim-1")).toBe(0);
    expect(await o.alarm()).toBe(T0 + KEEP_MS + IDLE_KEEP_MS);
    o.at(T0 + KEEP_MS + IDLE_KEEP_MS);
    await runDurableObjectAlarm(o.stub);
    expect((await o.stored()).tables).toEqual([]);
  });

  it("a refusal that counted towards a penalty, sent again: counted once (its answer kept in memory, as its count)", async () => {
    const o = await object();
    const penalty = { after: 3, withinMs: 10_000, blockMs: 60_000, maxBlockMs: null };
    for (let i = 0; i < 3; i++) await o.stub.take(perSecond, { cost: 1, penalty, call: `g-${i}` });
    const refused = (await o.stub.take(perSecond, { cost: 1, penalty, call: "r-1" })) as Decision;
    expect(refused).toMatchObject({ allowed: false, refusalsSeen: 1 });
    expect(await o.stub.take(perSecond, { cost: 1, penalty, call: "r-1" })).toEqual(refused);
    expect(await o.stub.take(perSecond, { cost: 1, penalty, call: "r-1" })).toEqual(refused);
    // Not blocked: two more refusals would have made three.
    const next = (await o.stub.take(perSecond, { cost: 1, penalty, call: "r-2" })) as Decision;
    expect(next).toMatchObject({ refusalsSeen: 2 });
    expect(next.blockCause).toBeUndefined();
  });

  it("a refusal that can never pass, kept: sent again after an eviction, its wait is still Infinity", async () => {
    const o = await object();
    const leased = (await o.stub.take(roomy, { cost: 1, leaseUnits: 20, leaseMs: 5_000 })) as Decision;
    const lease = leased.lease as NonNullable<Decision["lease"]>;
    // Over the limit: it can never pass; the settlement it carries (the lease given back) makes it write, so it is kept.
    const settle = [{ recordedAt: lease.recordedAt, issuedAt: leased.now, used: 0, lastUseMs: 0, unused: 20 }];
    const ask = { cost: 1_001, settle, call: "c-1" };
    const first = (await o.stub.take(roomy, ask)) as Decision;
    expect(first).toMatchObject({ allowed: false, neverAllowed: true, retryAfterMs: Number.POSITIVE_INFINITY });
    await o.evict();
    expect(await o.stub.take(roomy, ask)).toEqual(first);
    // The lease's 20 came back once.
    expect(await remaining(o, roomy)).toBe(999);
  });

  it("release of a concurrency slot: true both times, the slot freed once", async () => {
    const o = await object();
    const slot = { id: "req-1", limit: 1, timeoutMs: 60_000 };
    expect(((await o.stub.take(tenPerMinute, { cost: 1, slot })) as Decision).allowed).toBe(true);
    expect(await o.stub.release("req-1", "rel-1")).toBe(true);
    expect(await o.stub.release("req-1", "rel-1")).toBe(true);
    // Another call to free it finds none.
    expect(await o.stub.release("req-1", "rel-2")).toBe(false);
  });

  it("across an eviction: a metered key's answer is in storage; a plain key's grant counts again (never over)", async () => {
    const o = await object();
    const first = await o.stub.take(tenPerMinute, { cost: 2, ...billed, call: "c-1" });
    await o.evict();
    expect(await o.stub.take(tenPerMinute, { cost: 2, ...billed, call: "c-1" })).toEqual(first);
    expect(await remaining(o)).toBe(8);
    // The restarted instance keeps adding answers after the ones it found.
    await o.stub.take(tenPerMinute, { cost: 1, ...billed, call: "c-2" });
    expect((await keptRows(o)).map((r) => [r.slot, r.id])).toEqual([
      [0, "c-1"],
      [1, "c-2"],
    ]);
    // A plain key restarted between a call and its repeat counts the grant twice: units lost, never over.
    const plain = await object();
    await plain.stub.take(tenPerMinute, { cost: 2, call: "p-1" });
    await plain.evict();
    await plain.stub.take(tenPerMinute, { cost: 2, call: "p-1" });
    expect(await remaining(plain)).toBe(6);
  });
});

describe("what is kept, and for how long", () => {
  it("a call that changed nothing keeps its answer in memory only: no row, and after an eviction it is decided again", async () => {
    const o = await object();
    await o.stub.take(perSecond, { cost: 3, call: "c-1" });
    const refused = (await o.stub.take(perSecond, { cost: 1, call: "c-2" })) as Decision;
    expect(refused.allowed).toBe(false);
    expect(await keptRows(o)).toEqual([]);
    o.at(T0 + 1_000);
    expect(await o.stub.take(perSecond, { cost: 1, call: "c-2" })).toEqual(refused);
    await o.evict();
    expect(((await o.stub.take(perSecond, { cost: 1, call: "c-2" })) as Decision).allowed).toBe(true);
  });

  it("one row per call; after KEEP_MS a repeat is a new call, and its row reused", async () => {
    const o = await object();
    o.writes();
    await o.stub.take(tenPerHour, { cost: 1, ...billed, call: "c-1" });
    // The grant's slot row, the credits (meta), the budget's window (meta), the idle alarm, and one kept answer.
    expect(o.writes().filter((w) => w === "other")).toHaveLength(1);
    o.at(T0 + KEEP_MS);
    await o.stub.take(tenPerHour, { cost: 1, ...billed, call: "c-2" });
    expect((await keptRows(o)).map((r) => [r.slot, r.id])).toEqual([[0, "c-2"]]);
    // c-1's answer is gone: sent again now, it counts again (the isolate never sends a call that late).
    await o.stub.take(tenPerHour, { cost: 1, ...billed, call: "c-1" });
    expect(await remaining(o, tenPerHour)).toBe(7);
    expect(await keptRows(o)).toHaveLength(2);
  });

  it("answers kept in memory are bounded: past IN_MEMORY_MAX the oldest is gone, the newest kept", async () => {
    const o = await object();
    const wide: LimitSpec[] = [{ limit: 100_000, windowMs: 60_000, tickMs: 1_000 }];
    await runInDurableObject(o.stub, (instance: RateLimiter) => {
      for (let i = 0; i <= IN_MEMORY_MAX; i++) instance.take(wide, { cost: 1, call: `c-${i}` });
      // The first was forgotten: sent again, it counts again; the last is answered from memory.
      instance.take(wide, { cost: 1, call: "c-0" });
      instance.take(wide, { cost: 1, call: `c-${IN_MEMORY_MAX}` });
    });
    expect(await remaining(o, wide)).toBe(100_000 - IN_MEMORY_MAX - 2);
    expect(await keptRows(o)).toEqual([]);
  });

  it("a bad id is refused with nothing applied", async () => {
    const o = await object();
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      for (const call of ["", "x".repeat(129), 7]) {
        const take = instance.take(tenPerMinute, { cost: 1, call: call as string });
        await expect(Promise.resolve(take)).rejects.toThrow(/call's id/);
      }
      await expect(Promise.resolve(instance.settle(tenPerMinute, [], ""))).rejects.toThrow(/call's id/);
    });
    expect(await remaining(o)).toBe(10);
  });
});
