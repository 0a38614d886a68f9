// Settled costs at the key's object (docs/design.md, "Settled costs"), inside workerd with its SQLite storage and the
// object's clock seam: a grant's unused units given back to its windows, route, quotas, credits and usage (its request
// still counted), once per id and never after a refund; the units used beyond the reservation recorded as debt at the
// settle's time, over the limits, which the key then waits out; bad fields refused, nothing changed.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Decision, LimitSpec } from "../../src/core/index.ts";
import type { QuotaSpec } from "../../src/core/quota.ts";
import { UNSTORED_WINDOW_MS } from "../../src/object/budgets.ts";
import type { RateLimiter } from "../../src/object/index.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
import type { RefundedGrant } from "../../src/protocol.ts";
import { object, T0 } from "./object.ts";

const tenPerSecond: LimitSpec[] = [{ limit: 10, windowMs: 1_000, tickMs: 1 }];
const monthly: QuotaSpec[] = [{ limit: 20, period: "month", zone: "UTC" }];
const credits = { initial: 100 };
const usage = { zone: "UTC", keepDays: 3 };
const meters = { quotas: monthly, credits, usage };
const all = { from: 0, to: Date.UTC(2100, 0, 1) };

type O = Awaited<ReturnType<typeof object>>;

/** The grant of decision `d` as its handle carries it, settled: `units` unused, `debt` beyond. */
const settled = (id: string, d: Decision, units: number, debt = 0): RefundedGrant => ({
  id,
  recordedAt: d.recordedAt ?? [],
  units,
  at: d.now,
  settle: true,
  ...(debt > 0 ? { debt } : {}),
});

/** What the key's meters hold now: its quota's remaining units, its balance, and its usage per day. */
async function metersOf(o: O) {
  const status = await o.stub.status(tenPerSecond, 10, [], meters);
  return {
    quota: status.decision.quotas?.[0]?.remaining,
    balance: status.decision.credits?.balance,
    usage: await o.stub.usage(usage, { period: "day", ...all }),
  };
}

describe("settling a grant at the key's object", () => {
  it("gives the unused units back to the grant's window, once; a refund after it gives nothing", async () => {
    const o = await object();
    const d = await o.take(tenPerSecond, 8);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(2);
    // Reserved 8, cost 3: 5 back.
    expect(await o.stub.refund(tenPerSecond, settled("s1", d, 5))).toBe(true);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(7);
    expect(await o.slots()).toMatchObject([{ ts: T0, cost: 3 }]);
    // Settled again, or refunded: nothing more.
    expect(await o.stub.refund(tenPerSecond, settled("s1", d, 5))).toBe(false);
    expect(await o.refund(tenPerSecond, "s1", d.recordedAt ?? [], 8)).toBe(false);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(7);
    // A grant refunded first settles no more.
    const e = await o.take(tenPerSecond, 2);
    expect(await o.refund(tenPerSecond, "r1", e.recordedAt ?? [], 2)).toBe(true);
    expect(await o.stub.refund(tenPerSecond, settled("r1", e, 1))).toBe(false);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(7);
  });

  it("an exact settle (nothing unused, no debt) changes nothing but spends the id", async () => {
    const o = await object();
    const d = await o.take(tenPerSecond, 4);
    o.written();
    expect(await o.stub.refund(tenPerSecond, settled("x", d, 0))).toBe(true);
    expect(o.written()).toBe(0);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(6);
    expect(await o.refund(tenPerSecond, "x", d.recordedAt ?? [], 4)).toBe(false);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(6);
  });

  it("gives the unused units back to the quota, the credits and the usage of the grant's period; the request still counts", async () => {
    const o = await object();
    const d = await o.take(tenPerSecond, 8, meters);
    expect(await metersOf(o)).toMatchObject({ quota: 12, balance: 92, usage: [{ requests: 1, cost: 8 }] });
    expect(await o.stub.refund(tenPerSecond, settled("m1", d, 5))).toBe(true);
    expect(await metersOf(o)).toMatchObject({ quota: 17, balance: 97, usage: [{ requests: 1, cost: 3 }] });
    // A refund of another grant takes its request off too.
    const e = await o.take(tenPerSecond, 2, meters);
    expect(await o.stub.refund(tenPerSecond, { id: "m2", recordedAt: e.recordedAt ?? [], units: 2, at: e.now })).toBe(
      true,
    );
    expect(await metersOf(o)).toMatchObject({ quota: 17, balance: 97, usage: [{ requests: 1, cost: 3 }] });
  });

  it("records a debt at the settle's time over the limit, in the meters too; the key waits it out", async () => {
    const o = await object();
    const d = await o.take(tenPerSecond, 8, meters);
    o.at(T0 + 100);
    // Reserved 8, cost 15: 7 more, recorded now (after the use), though the window holds only 2 more.
    expect(await o.stub.refund(tenPerSecond, settled("d1", d, 0, 7))).toBe(true);
    const slots = await o.slots();
    expect(slots[0]).toMatchObject({ ts: T0, cost: 8 });
    expect(slots[1]?.cost).toBe(7);
    expect(slots[1]?.ts).toBeGreaterThan(T0 + 100);
    const after = await o.take(tenPerSecond, 1, meters);
    expect(after).toMatchObject({ allowed: false });
    expect(after.limits[0]?.remaining).toBe(0);
    // Over by 5: the key waits until the first grant's 8 have left, and the debt still leaves it 3.
    expect(after.retryAfterMs).toBe(T0 + 1_000 - (T0 + 100));
    expect(await metersOf(o)).toMatchObject({ quota: 5, balance: 85, usage: [{ requests: 1, cost: 15 }] });
    // Once: a settle sent again records nothing.
    expect(await o.stub.refund(tenPerSecond, settled("d1", d, 0, 7))).toBe(false);
    expect(await o.slots()).toHaveLength(2);
    o.at(T0 + 1_000);
    expect((await o.take(tenPerSecond, 3)).allowed).toBe(true);
    expect((await o.take(tenPerSecond, 1)).allowed).toBe(false);
  });

  it("a settle after the idle alarm deleted the key's state: nothing to give back, its debt recorded once", async () => {
    const o = await object();
    const d = await o.take(tenPerSecond, 8);
    expect(await o.alarm()).toBe(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.stored()).tables).toEqual([]);
    // Settled for less: nothing left to give back (the grant left its window long ago), nothing kept.
    expect(await o.stub.refund(tenPerSecond, settled("late", d, 5))).toBe(false);
    expect((await o.stored()).tables).toEqual([]);
    // Settled for more: the debt counts from now, once.
    expect(await o.stub.refund(tenPerSecond, settled("late2", d, 0, 9))).toBe(true);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(1);
    expect(await o.stub.refund(tenPerSecond, settled("late2", d, 0, 9))).toBe(false);
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(1);
    expect(await o.alarm()).not.toBeNull();
  });

  it("a debt is recorded also when the key's limits changed since the grant (nothing given back there), once", async () => {
    const o = await object();
    const d = await o.take(tenPerSecond, 4);
    const twenty: LimitSpec[] = [{ limit: 20, windowMs: 1_000, tickMs: 1 }];
    // Under other limits: a settle for less gives nothing back; one for more records its debt, once.
    expect(await o.stub.refund(twenty, settled("c1", d, 2))).toBe(false);
    expect(await o.stub.refund(twenty, settled("c2", d, 0, 6))).toBe(true);
    expect(await o.stub.refund(twenty, settled("c2", d, 0, 6))).toBe(false);
    expect((await o.peek(twenty)).limits[0]?.remaining).toBe(20 - 4 - 6);
  });

  it("a debt takes a quota over its limit and credits down to 0, never below", async () => {
    const o = await object();
    const few = { quotas: [{ limit: 5, period: "day", zone: "UTC" } as QuotaSpec], credits: { initial: 6 } };
    const d = await o.take(tenPerSecond, 5, few);
    expect(await o.stub.refund(tenPerSecond, settled("q", d, 0, 4))).toBe(true);
    const status = await o.stub.status(tenPerSecond, 10, [], few);
    expect(status.decision.quotas?.[0]?.remaining).toBe(0);
    expect(status.decision.credits?.balance).toBe(0);
    const stored = (await o.stored()).meta.find((m) => (m as { k: string }).k === "quotas") as { v: string };
    expect(JSON.parse(stored.v)[0].used).toBe(9);
  });

  it("gives back to a route's budget and records a debt in it, with the key's", async () => {
    const o = await object();
    const search = { name: "search", limits: [{ limit: 5, windowMs: 60_000, tickMs: 1 }] };
    const d = (await o.stub.take(tenPerSecond, { cost: 4 }, search)) as Decision;
    expect(await o.stub.refund(tenPerSecond, settled("r", d, 3), search)).toBe(true);
    let peek = (await o.stub.peek(tenPerSecond, 1, search)) as Decision;
    expect(peek.limits.map((l) => l.remaining)).toEqual([9, 4]);
    const e = (await o.stub.take(tenPerSecond, { cost: 2 }, search)) as Decision;
    expect(await o.stub.refund(tenPerSecond, settled("r2", e, 0, 5), search)).toBe(true);
    peek = (await o.stub.peek(tenPerSecond, 1, search)) as Decision;
    expect(peek.allowed).toBe(false);
    expect(peek.limits.map((l) => l.remaining)).toEqual([2, 0]);
  });

  it("a settled leased grant (quotasOnly): its unused units to the quota, its debt to the windows and meters", async () => {
    const o = await object();
    const wide: LimitSpec[] = [{ limit: 1_000, windowMs: 60_000, tickMs: 1 }];
    const d = await o.take(wide, 1, { quotas: monthly, leaseUnits: 100, leaseMs: 30_000 });
    const before = (await o.peek(wide)).limits[0]?.remaining as number;
    const quota = async () =>
      ((await o.stub.peek(wide, 1, undefined, { quotas: monthly })) as Decision).quotas?.[0]?.remaining;
    const q = (await quota()) as number;
    const grant = { id: "lease.1", recordedAt: [], units: 2, at: d.now, quotasOnly: true, settle: true };
    expect(await o.stub.refund(wide, grant)).toBe(true);
    expect(await quota()).toBe(q + 2);
    expect((await o.peek(wide)).limits[0]?.remaining).toBe(before);
    expect(await o.stub.refund(wide, { ...grant, id: "lease.2", units: 0, debt: 3 })).toBe(true);
    expect(await quota()).toBe(q - 1);
    expect((await o.peek(wide)).limits[0]?.remaining).toBe(before - 3);
    // A key without quotas: a settle still spends the id and records its debt.
    const plain = await object();
    const e = await plain.take(wide, 1);
    expect(await plain.stub.refund(wide, { ...grant, at: e.now, units: 0, debt: 2 })).toBe(true);
    expect((await plain.peek(wide)).limits[0]?.remaining).toBe(997);
    expect(await plain.stub.refund(wide, { ...grant, at: e.now, units: 0, debt: 2 })).toBe(false);
  });

  it("refuses fields that are not a settle's, naming them, and changes nothing", async () => {
    const o = await object();
    const d = await o.take(tenPerSecond, 4);
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      const refused = (grant: RefundedGrant) => expect(Promise.resolve(instance.refund(tenPerSecond, grant))).rejects;
      await refused({ ...settled("b", d, 0), units: -1 }).toThrow(/^units: /);
      await refused({ ...settled("b", d, 0), debt: 1.5 }).toThrow(/^debt: /);
      await refused({ ...settled("b", d, 0), debt: -1 }).toThrow(/^debt: /);
      // A refund (not a settle) gives back at least one unit.
      await refused({ id: "b", recordedAt: d.recordedAt ?? [], units: 0 }).toThrow(/^units: /);
    });
    expect((await o.peek(tenPerSecond)).limits[0]?.remaining).toBe(6);
    expect(await o.stub.refund(tenPerSecond, settled("b", d, 1))).toBe(true);
  });
});
