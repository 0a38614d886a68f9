// Calendar quotas in the key's object (docs/design.md, "Quotas, credits and usage"), inside workerd with its SQLite
// storage and the object's clock seam: all or nothing with the sliding limits, one `meta` row for every quota written
// with the grant, counts kept across an eviction, leases counted at once and their unused units given back, refunds to
// the period they were granted in, and the idle alarm keeping the state until a day after the period ends.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LimitSpec } from "../../src/core/index.ts";
import type { QuotaSpec } from "../../src/core/quota.ts";
import { UNSTORED_WINDOW_MS } from "../../src/object/budgets.ts";
import type { RateLimiter } from "../../src/object/index.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
import { object, T0 } from "./object.ts";

// T0 is 2027-01-15T08:00:00Z.
const DAY_END = Date.UTC(2027, 0, 16);
const MONTH_END = Date.UTC(2027, 1, 1);
const monthly: QuotaSpec[] = [{ limit: 5, period: "month", zone: "UTC" }];
const daily: QuotaSpec[] = [{ limit: 3, period: "day", zone: "UTC" }];
const wide: LimitSpec[] = [{ limit: 1_000, windowMs: 60_000, tickMs: 1 }];

describe("quotas at the key's object", () => {
  it("a quota alone: grants its limit, refuses to the next start, writes one meta row per grant and no slots", async () => {
    const o = await object();
    expect(new Date(T0).toISOString()).toBe("2027-01-15T08:00:00.000Z");
    for (let i = 0; i < 3; i++) {
      const d = await o.take([], 1, { quotas: daily });
      expect(d).toMatchObject({ allowed: true, limits: [] });
      expect(d.quotas).toEqual([{ remaining: 2 - i, resetMs: DAY_END - T0, exceeded: false }]);
    }
    expect(o.written()).toBe(0); // no budget_slots rows
    const refused = await o.take([], 1, { quotas: daily });
    expect(refused).toMatchObject({ allowed: false, retryAfterMs: DAY_END - T0, blockedUntil: DAY_END });
    const { meta, tables } = await o.stored();
    expect(tables).toContain("meta");
    expect(meta).toEqual([
      {
        k: "quotas",
        v: JSON.stringify([
          { limit: 3, period: "day", zone: "UTC", start: DAY_END - 86_400_000, end: DAY_END, used: 3 },
        ]),
      },
    ]);
    expect(await o.alarm()).toBe(DAY_END + IDLE_KEEP_MS);
    // Without quotas and without limits, nothing is limited: refused as no limit at all.
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      await expect(instance.take([], { cost: 1 })).rejects.toThrow(/^limits: expected at least one limit/);
    });
  });

  it("counts survive an eviction; a new period starts afresh; the alarm deletes the state a day after it ends", async () => {
    const o = await object();
    for (let i = 0; i < 5; i++) await o.take(wide, 1, { quotas: monthly });
    await o.evict();
    expect((await o.take(wide, 1, { quotas: monthly })).allowed).toBe(false);
    // A raised limit keeps what the month has used.
    expect((await o.take(wide, 1, { quotas: [{ ...monthly[0], limit: 6 } as QuotaSpec] })).quotas?.[0]?.remaining).toBe(
      0,
    );
    // The sliding window's rows are read as counting a day after them (a minute's window is not stored), which alone
    // would keep the key a day after that; the month's count keeps it until a day after the month ends. (A day's count
    // ends within a day of its grants: it never keeps them longer.)
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.stored()).meta.map((m) => (m as { k: string }).k)).toEqual(["quotas"]);
    expect(await o.rows()).toHaveLength(1);
    expect(await o.alarm()).toBe(MONTH_END + IDLE_KEEP_MS);
    o.at(MONTH_END + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.stored()).tables).toEqual([]);
    expect((await o.take(wide, 1, { quotas: monthly })).quotas?.[0]?.remaining).toBe(4);
  });

  it("all or nothing: a refusal by either counts in neither", async () => {
    const o = await object();
    const tight: LimitSpec[] = [{ limit: 1, windowMs: 1_000, tickMs: 1 }];
    expect((await o.take(tight, 1, { quotas: monthly })).allowed).toBe(true);
    const bySliding = await o.take(tight, 1, { quotas: monthly });
    expect(bySliding.allowed).toBe(false);
    expect(bySliding.quotas?.[0]).toMatchObject({ remaining: 4, exceeded: false });
    o.at(T0 + 1_000);
    expect((await o.take(tight, 1, { quotas: monthly })).quotas?.[0]?.remaining).toBe(3);
    const o2 = await object();
    await o2.take(wide, 5, { quotas: monthly });
    o2.written();
    const byQuota = await o2.take(wide, 1, { quotas: monthly });
    expect(byQuota).toMatchObject({ allowed: false, retryAfterMs: Date.UTC(2027, 1, 1) - T0 });
    expect(byQuota.limits[0]?.remaining).toBe(995);
    expect(o2.written()).toBe(0);
  });

  it("a lease counts in the quota when granted; its unused units come back with a settlement, in the period only", async () => {
    const o = await object();
    const d = await o.take(wide, 1, { quotas: monthly, leaseUnits: 100, leaseMs: 30_000 });
    const lease = d.lease;
    // Half of the 4 the quota has left after the cost.
    expect(lease?.units).toBe(2);
    expect(d.quotas?.[0]?.remaining).toBe(2);
    const settle = [{ recordedAt: lease?.recordedAt ?? [], issuedAt: d.now, used: 1, lastUseMs: 10, unused: 1 }];
    await o.settle(wide, settle);
    expect((await o.peek(wide)).quotas).toBeUndefined(); // a peek without quotas shows none
    const p = (await o.stub.peek(wide, 1, undefined, { quotas: monthly })) as Awaited<ReturnType<typeof o.peek>>;
    expect(p.quotas?.[0]?.remaining).toBe(3);
  });

  it("a settled leased grant's refund (quotasOnly) gives its units to the quota, not the windows, once", async () => {
    const o = await object();
    const d = await o.take(wide, 1, { quotas: monthly, leaseUnits: 100, leaseMs: 30_000 });
    const lease = d.lease;
    // The lease's 2 units both used and settled at their use: they stay in the window, and in the quota.
    const settle = [{ recordedAt: lease?.recordedAt ?? [], issuedAt: d.now, used: 2, lastUseMs: 10, unused: 0 }];
    await o.settle(wide, settle);
    const quota = async () =>
      ((await o.stub.peek(wide, 1, undefined, { quotas: monthly })) as Awaited<ReturnType<typeof o.peek>>).quotas?.[0];
    expect((await quota())?.remaining).toBe(2);
    const window = (await o.peek(wide)).limits[0]?.remaining;
    const grant = { id: "lease-1.2", recordedAt: [], units: 1, at: d.now, quotasOnly: true };
    expect(await o.stub.refund(wide, grant)).toBe(true);
    expect((await quota())?.remaining).toBe(3);
    expect((await o.peek(wide)).limits[0]?.remaining).toBe(window); // the window keeps the use's record
    expect(await o.stub.refund(wide, grant)).toBe(false);
    expect((await quota())?.remaining).toBe(3);
    // A key without quotas gives nothing back this way.
    const plain = await object();
    const e = await plain.take(wide, 1);
    expect(await plain.stub.refund(wide, { ...grant, at: e.now })).toBe(false);
  });

  it("a refund gives a grant's units back to the period it was granted in, once", async () => {
    const o = await object();
    const d = await o.take(wide, 2, { quotas: monthly });
    const grant = { id: "g1", recordedAt: d.recordedAt ?? [], units: 2, at: d.now };
    expect(await o.stub.refund(wide, grant)).toBe(true);
    expect(await o.stub.refund(wide, grant)).toBe(false);
    expect((await o.take(wide, 5, { quotas: monthly })).allowed).toBe(true);
    // A grant of January refunded in February: February's count stays.
    const o2 = await object();
    const jan = await o2.take(wide, 5, { quotas: monthly });
    o2.at(Date.UTC(2027, 1, 1, 0, 0, 30));
    await o2.take(wide, 5, { quotas: monthly });
    expect(await o2.stub.refund(wide, { id: "g2", recordedAt: jan.recordedAt ?? [], units: 5, at: jan.now })).toBe(
      true,
    );
    expect((await o2.take(wide, 1, { quotas: monthly })).allowed).toBe(false);
  });
});

describe("credits at the key's object", () => {
  const credits = { initial: 5 };

  it("spends by cost, writes one meta row with the grant, and a refusal spends and writes nothing", async () => {
    const o = await object();
    const d = await o.take(wide, 3, { credits });
    expect(d.credits).toEqual({ balance: 2, exceeded: false });
    const refused = await o.take(wide, 3, { credits });
    expect(refused).toMatchObject({ allowed: false, retryAfterMs: Number.POSITIVE_INFINITY, blockedUntil: T0 });
    expect(refused.credits).toEqual({ balance: 2, exceeded: true });
    const { meta } = await o.stored();
    expect(meta.filter((m) => (m as { k: string }).k === "credits")).toEqual([
      {
        k: "credits",
        v: JSON.stringify({ spec: { initial: 5, refill: null }, state: { balance: 2, refilledAt: null } }),
      },
    ]);
  });

  it("a top-up starts from initial; the balance outlives the idle alarm, which deletes everything else", async () => {
    const o = await object();
    expect(await o.stub.credit(credits, 10)).toBe(15);
    await o.take(wide, 1, { credits });
    expect(await o.alarm()).toBe(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
    const { meta } = await o.stored();
    expect(meta.map((m) => (m as { k: string }).k)).toEqual(["credits"]);
    await o.evict();
    expect((await o.take(wide, 1, { credits })).credits?.balance).toBe(13);
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      await expect(instance.credit(credits, 0)).rejects.toThrow(/^add: /);
      await expect(instance.credit({ initial: -1 }, 1)).rejects.toThrow(/^initial: /);
    });
  });

  it("a refund gives credits back, once", async () => {
    const o = await object();
    const d = await o.take(wide, 3, { credits: { initial: 100 } });
    expect(d.credits?.balance).toBe(97);
    const grant = { id: "c1", recordedAt: d.recordedAt ?? [], units: 3, at: d.now };
    expect(await o.stub.refund(wide, grant)).toBe(true);
    expect(await o.stub.refund(wide, grant)).toBe(false);
    expect((await o.stub.status(wide, 10, [], { credits: { initial: 100 } })).decision.credits?.balance).toBe(100);
  });
});

describe("usage at the key's object", () => {
  const usage = { zone: "UTC", keepDays: 3 };
  const all = { from: 0, to: Date.UTC(2100, 0, 1) };
  const DAY = 86_400_000;
  const dayOf = (t: number) => Math.floor(t / DAY) * DAY;

  it("one row per day written with each grant; a refusal counts nothing; a refund comes off its day", async () => {
    const o = await object();
    const tight: LimitSpec[] = [{ limit: 2, windowMs: 1_000, tickMs: 1 }];
    const first = await o.take(tight, 1, { usage });
    await o.take(tight, 1, { usage });
    expect((await o.take(tight, 1, { usage })).allowed).toBe(false);
    o.at(T0 + DAY);
    await o.take(tight, 2, { usage });
    expect(await o.stub.usage(usage, { period: "day", ...all })).toEqual([
      { start: dayOf(T0), end: dayOf(T0) + DAY, requests: 2, cost: 2 },
      { start: dayOf(T0) + DAY, end: dayOf(T0) + 2 * DAY, requests: 1, cost: 2 },
    ]);
    expect(await o.stub.refund(tight, { id: "u1", recordedAt: first.recordedAt ?? [], units: 1, at: first.now })).toBe(
      true,
    );
    const month = await o.stub.usage(usage, { period: "month", ...all });
    expect(month).toEqual([{ start: Date.UTC(2027, 0, 1), end: Date.UTC(2027, 1, 1), requests: 2, cost: 3 }]);
    const usageRows = await runInDurableObject(o.stub, (_: RateLimiter, state) =>
      state.storage.sql.exec("SELECT day, requests, cost FROM usage ORDER BY day").toArray(),
    );
    expect(usageRows).toHaveLength(2);
  });

  it("the idle alarm keeps usage for its retention and drops each day after it, on time while the key is kept too", async () => {
    const o = await object();
    const days = async () => (await o.stub.usage(usage, { period: "day", ...all })).map((p) => p.start);
    await o.take(wide, 1, { usage });
    o.at(T0 + DAY);
    await o.take(wide, 1, { usage });
    // A day after the first grant stopped counting (read as a day after it) the second still counts: nothing goes.
    expect(await o.alarm()).toBe(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.slots()).map((r) => r.ts)).toContain(T0 + DAY);
    expect(await o.alarm()).toBe(T0 + DAY + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    // A day after that one stops counting, the grants' rows go; the days stay.
    o.at(T0 + DAY + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
    expect((await o.stub.usage(usage, { period: "day", ...all })).map((p) => p.requests)).toEqual([1, 1]);
    // The alarm is set for when the first day leaves the 3 days kept.
    expect(await o.alarm()).toBe(dayOf(T0) + 4 * DAY);
    // Seen again half an hour before: the alarm stays set for then, and the first two days leave on time while the
    // grant's state is kept (until a day after it stops counting, read as a day after it).
    const seen = dayOf(T0) + 4 * DAY - 1_800_000;
    o.at(seen);
    await o.take(wide, 1, { usage });
    expect(await o.alarm()).toBe(dayOf(T0) + 4 * DAY);
    o.at(dayOf(T0) + 4 * DAY);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await days()).toEqual([dayOf(T0) + DAY, dayOf(T0) + 3 * DAY]);
    expect(await o.rows()).toHaveLength(1);
    expect(await o.alarm()).toBe(dayOf(T0) + 5 * DAY);
    o.at(dayOf(T0) + 5 * DAY);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await days()).toEqual([dayOf(T0) + 3 * DAY]);
    expect(await o.rows()).toHaveLength(1);
    expect(await o.alarm()).toBe(seen + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(seen + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
    expect(await days()).toEqual([dayOf(T0) + 3 * DAY]);
    // Then the last day leaves at its time and takes what is left of the key with it.
    expect(await o.alarm()).toBe(dayOf(T0) + 7 * DAY);
    o.at(dayOf(T0) + 7 * DAY);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.stored()).tables).toEqual([]);
  });

  it("rejects a spec or a range that is not one", async () => {
    const o = await object();
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      await expect(instance.usage({ zone: "UTC", keepDays: 0 }, { period: "day", ...all })).rejects.toThrow(
        /^keepDays: /,
      );
      await expect(instance.usage(usage, { period: "year" as never, ...all })).rejects.toThrow(/^period: /);
    });
  });
});

describe("what each feature writes per grant", () => {
  /** Counts every row each write statement of the object reports written, from now on. */
  async function counting(o: Awaited<ReturnType<typeof object>>): Promise<() => Promise<number>> {
    await runInDurableObject(o.stub, (_: RateLimiter, state) => {
      const sql = state.storage.sql as SqlStorage & { rowsCounted?: number };
      const exec = sql.exec.bind(sql);
      sql.rowsCounted = 0;
      Object.defineProperty(sql, "exec", {
        configurable: true,
        value: (query: string, ...bindings: unknown[]) => {
          const cursor = exec(query, ...bindings);
          if (/^\s*(INSERT|UPDATE|DELETE|REPLACE)\b/i.test(query))
            sql.rowsCounted = (sql.rowsCounted ?? 0) + cursor.rowsWritten;
          return cursor;
        },
      });
    });
    return () =>
      runInDurableObject(o.stub, (_: RateLimiter, state) => {
        const sql = state.storage.sql as SqlStorage & { rowsCounted?: number };
        const n = sql.rowsCounted ?? 0;
        sql.rowsCounted = 0;
        return n;
      });
  }

  it.each([
    ["none: one row per ring, as before", {}, 1],
    ["quotas: one meta row more", { quotas: daily }, 2],
    ["credits: one meta row more", { credits: { initial: 100 } }, 2],
    ["usage: one usage row more", { usage: { zone: "UTC", keepDays: 400 } }, 2],
    [
      "all three: three rows more",
      { quotas: daily, credits: { initial: 100 }, usage: { zone: "UTC", keepDays: 400 } },
      4,
    ],
  ])("%s", async (_, meters, rows) => {
    const o = await object();
    // The first grant makes the tables and metadata; the next ones are what a grant writes.
    await o.take(wide, 1, meters);
    const written = await counting(o);
    await written();
    for (let i = 0; i < 2; i++) {
      o.at(T0 + 10 * (i + 1));
      expect((await o.take(wide, 1, meters)).allowed).toBe(true);
      expect(await written()).toBe(rows);
    }
  });
});

describe("a key written before quotas", () => {
  it("keeps its sliding history when its plan gains quotas, credits and usage", async () => {
    const o = await object();
    const tight: LimitSpec[] = [{ limit: 3, windowMs: 60_000, tickMs: 1 }];
    for (let i = 0; i < 2; i++) await o.take(tight, 1);
    o.at(T0 + 1_000);
    const d = await o.take(tight, 1, {
      quotas: monthly,
      credits: { initial: 10 },
      usage: { zone: "UTC", keepDays: 10 },
    });
    expect(d.limits[0]?.remaining).toBe(0);
    expect((await o.take(tight, 1, { quotas: monthly })).allowed).toBe(false);
    // The quota counts from its first grant: what came before it was not counted under it.
    expect(d.quotas?.[0]?.remaining).toBe(4);
    expect(d.credits?.balance).toBe(9);
  });
});

describe("review findings, held", () => {
  const credits = { initial: 1 };
  const penalty = { after: 2, withinMs: 60_000, blockMs: 10_000, maxBlockMs: null };

  it("refusals for want of credits never count towards a penalty (a block would outlast the top-up)", async () => {
    const o = await object();
    await o.take(wide, 1, { credits, penalty });
    for (let i = 0; i < 5; i++) {
      o.at(T0 + 10 * (i + 1));
      expect(await o.take(wide, 1, { credits, penalty })).toMatchObject({
        allowed: false,
        credits: { exceeded: true },
      });
    }
    await o.stub.credit(credits, 1);
    expect((await o.take(wide, 1, { credits, penalty })).allowed).toBe(true);
    expect((await o.status(wide)).blockedUntil).toBeNull();
  });

  it("a refund sent again, even after the idle alarm, gives credits and usage back once", async () => {
    const o = await object();
    const usage = { zone: "UTC", keepDays: 30 };
    const short: LimitSpec[] = [{ limit: 100, windowMs: 1_000, tickMs: 1 }];
    const d = await o.take(short, 1, { credits: { initial: 5 }, usage });
    const grant = { id: "again", recordedAt: d.recordedAt ?? [], units: 1, at: d.now };
    expect(await o.stub.refund(short, grant)).toBe(true);
    // The grant's window is long gone and the key idle: the alarm keeps the id while a refund may still come.
    o.at(T0 + 60_000);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    await o.evict();
    expect(await o.stub.refund(short, grant)).toBe(false);
    expect((await o.stub.status(short, 10, [], { credits: { initial: 5 } })).decision.credits?.balance).toBe(5);
    // Given back: the day's one request is refunded, and a day whose every request was refunded is left out.
    expect(await o.stub.usage(usage, { period: "day", from: 0, to: Date.UTC(2100, 0, 1) })).toEqual([]);
    // More than a day after its grant, a refund gives the meters nothing.
    const later = await o.take(short, 1, { credits: { initial: 5 }, usage });
    o.at(later.now + 86_400_001);
    expect(
      await o.stub.refund(short, { id: "late", recordedAt: later.recordedAt ?? [], units: 1, at: later.now }),
    ).toBe(true);
    expect((await o.stub.status(short, 10, [], { credits: { initial: 5 } })).decision.credits?.balance).toBe(4);
  });

  it("keys with credits or usage get no lease from the object, whatever the call asks", async () => {
    const o = await object();
    const asked = { leaseUnits: 50, leaseMs: 10_000 };
    expect((await o.take(wide, 1, { credits: { initial: 100 }, ...asked })).lease).toBeNull();
    expect((await o.take(wide, 1, { usage: { zone: "UTC", keepDays: 3 }, ...asked })).lease).toBeNull();
    // A lease asked alone: nothing granted, nothing spent.
    expect(await o.take(wide, 0, { credits: { initial: 100 }, ...asked })).toMatchObject({
      allowed: true,
      lease: null,
      credits: { balance: 99 },
    });
    expect((await o.take(wide, 1, { quotas: monthly, ...asked })).lease).not.toBeNull();
  });

  it("a top-up with an id adds once; the first usage grant after a wake writes no extra row", async () => {
    const o = await object();
    expect(await o.stub.credit({ initial: 0 }, 10, "pay-1")).toBe(10);
    expect(await o.stub.credit({ initial: 0 }, 10, "pay-1")).toBe(10);
    expect(await o.stub.credit({ initial: 0 }, 10, "pay-2")).toBe(20);
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      await expect(instance.credit({ initial: 0 }, 1, "")).rejects.toThrow(/^id: /);
    });
    const usage = { zone: "UTC", keepDays: 3 };
    await o.take(wide, 1, { usage });
    await o.evict();
    const before = (await o.stored()).meta;
    o.at(T0 + 5);
    await o.take(wide, 1, { usage });
    expect((await o.stored()).meta).toEqual(before);
  });

  it("a refund of a grant made before the plan kept usage takes nothing off a later day", async () => {
    const o = await object();
    const usage = { zone: "UTC", keepDays: 30 };
    const early = await o.take(wide, 1);
    o.at(T0 + 3_600_000);
    await o.take(wide, 1, { usage });
    // Granted before usage was kept: its day has no row, and the grant counted nowhere.
    o.at(T0 + 3_600_001);
    await o.stub.refund(wide, {
      id: "early",
      recordedAt: early.recordedAt ?? [],
      units: 1,
      at: early.now - 86_400_000,
    });
    expect(await o.stub.usage(usage, { period: "day", from: 0, to: Date.UTC(2100, 0, 1) })).toEqual([
      expect.objectContaining({ requests: 1, cost: 1 }),
    ]);
  });
});
