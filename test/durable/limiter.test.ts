// The RateLimiter Durable Object inside workerd: decisions, leases, storage rows, eviction, the
// idle alarm, limit changes. Time is the object's `clock()` seam, replaced per instance through
// runInDurableObject (no sleeping).
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Decision, LimitSpec } from "../../src/core/index.ts";
import { UNSTORED_WINDOW_MS } from "../../src/object/budgets.ts";
import type { KeyStatus, RateLimiter } from "../../src/object/index.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
import type { AloneReport } from "../../src/protocol.ts";
import { object, perSecond, T0 } from "./object.ts";

describe("take", () => {
  it("grants up to N in a window, then refuses with the exact wait", async () => {
    const o = await object();
    const results = [];
    for (let i = 0; i < 4; i++) {
      o.at(T0 + i * 100);
      results.push(await o.take(perSecond, 1));
    }
    expect(results.map((r) => r.allowed)).toEqual([true, true, true, false]);
    expect(results.map((r) => r.limits[0]?.remaining)).toEqual([2, 1, 0, 0]);
    // The grant at T0 leaves the window (t > now - W) at T0 + 1000; now is T0 + 300.
    expect(results[3]).toEqual({
      allowed: false,
      neverAllowed: false,
      cost: 1,
      now: T0 + 300,
      retryAfterMs: 700,
      blockedUntil: T0 + 1000,
      limits: [{ remaining: 0, resetMs: 700, exceeded: true }],
      lease: null,
    });
    o.at(T0 + 999);
    expect((await o.take(perSecond, 1)).allowed).toBe(false);
    o.at(T0 + 1000);
    expect((await o.take(perSecond, 1)).allowed).toBe(true);
  });

  it("answers a cost above a limit with 'never', without recording", async () => {
    const o = await object();
    const r = await o.take(perSecond, 4);
    expect(r).toMatchObject({ allowed: false, neverAllowed: true, retryAfterMs: Number.POSITIVE_INFINITY });
    expect(await o.rows()).toEqual([]);
    expect((await o.take(perSecond, 3)).allowed).toBe(true);
  });

  it("weighs cost across several limits and names the one that refuses", async () => {
    const o = await object();
    const limits: LimitSpec[] = [
      { limit: 5, windowMs: 1000 },
      { limit: 8, windowMs: 60_000 },
    ];
    expect((await o.take(limits, 5)).allowed).toBe(true);
    o.at(T0 + 1000);
    const r = await o.take(limits, 4);
    expect(r.allowed).toBe(false);
    expect(r.limits.map((l) => l.exceeded)).toEqual([false, true]);
    expect(r.retryAfterMs).toBe(59_000);
    expect((await o.take(limits, 3)).allowed).toBe(true);
  });

  it("keeps its clock monotone: a clock that goes back decides at the latest time seen", async () => {
    const o = await object();
    o.at(T0 + 500);
    await o.take(perSecond, 3);
    o.at(T0);
    expect(await o.take(perSecond, 1)).toMatchObject({ allowed: false, now: T0 + 500, retryAfterMs: 1000 });
  });

  it("rejects malformed limits, costs and leases with an error naming the field, and records nothing", async () => {
    const o = await object();
    // Called on the instance: the test pool's RPC wrapper reports a rejected RPC call as unhandled.
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      for (const limits of [[], null, "3,1000", [3, 1000]]) {
        await expect(instance.take(limits as never, { cost: 1 })).rejects.toThrow(/^limits/);
      }
      for (const limits of [
        [{ limit: 0, windowMs: 1000 }],
        [{ limit: 3, windowMs: 1.5 }],
        [{ limit: "3", windowMs: 1 }],
      ]) {
        await expect(instance.take(limits as never, { cost: 1 })).rejects.toThrow(/^limits\[0\]/);
      }
      for (const cost of [-1, 1.5, Number.NaN]) {
        await expect(instance.take(perSecond, { cost })).rejects.toThrow(/^cost: /);
      }
      await expect(instance.take(perSecond, { cost: 1, leaseUnits: -2 })).rejects.toThrow(/^leaseUnits: /);
    });
    expect(await o.rows()).toEqual([]);
  });
});

describe("leases", () => {
  // Far from its limit a key may hold half of its headroom, for up to the longest window.
  const roomy: LimitSpec[] = [{ limit: 1000, windowMs: 1600, tickMs: 1 }];

  it("records a lease as one row at now + lifetime, together with the request's own cost", async () => {
    const o = await object();
    const d = await o.take(roomy, 1, { leaseUnits: 20, leaseMs: 5000 });
    // The lifetime is capped at the longest window.
    expect(d.lease).toEqual({ units: 20, lifetimeMs: 1600, recordedAt: [T0 + 1600] });
    expect(d.limits[0]?.remaining).toBe(979);
    expect(await o.rows()).toEqual([{ ring: 1, key: expect.any(Number), ts: T0 + 1600, cost: 21 }]);
    // A per-request grant before the lease's record is written at its own time: one more row.
    o.at(T0 + 10);
    await o.take(roomy, 1);
    expect((await o.rows()).map((r) => [r.ts, r.cost])).toEqual([
      [T0 + 10, 1],
      [T0 + 1600, 21],
    ]);
  });

  it("shrinks leases near the limit, keeps them within half the headroom, and grants none when little is left", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 160, windowMs: 1600, tickMs: 1 }];
    const ask = { leaseUnits: 20, leaseMs: 50 };
    expect((await o.take(limits, 40)).allowed).toBe(true);
    const leases = [];
    for (let i = 0; i < 4; i++) leases.push((await o.take(limits, 1, ask)).lease);
    // 119 of 160 free after the first request's cost, a little under 3/4: units scaled by 2 · 119/160 − 1/2 (19 of
    // 20), the time to spend them too but never under 50 ms (here the whole lifetime asked). All leases together stay
    // within half of that headroom: 59 units ahead, 19 + 1 per request at a time, the fourth none.
    expect(leases.map((l) => [l?.units ?? 0, l?.lifetimeMs ?? 0])).toEqual([
      [19, 50],
      [19, 50],
      [19, 50],
      [0, 0],
    ]);
    // Given back, the share is there again.
    expect(await o.giveBack(limits, leases[0]?.recordedAt ?? [], 19)).toBe(1);
    expect((await o.take(limits, 1, ask)).lease?.units).toBe(18);
    // Near the limit: none.
    expect((await o.take(limits, 40)).allowed).toBe(true);
    expect((await o.take(limits, 1, ask)).lease).toBeNull();
    expect(await o.take(limits, 20)).toMatchObject({ allowed: false });
  });

  it("settles a caller's leases with the key's next request, before deciding it: used units re-dated, unused taken back", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 40, windowMs: 60_000, tickMs: 1 }];
    const d = await o.take(limits, 1, { leaseUnits: 4, leaseMs: 100 });
    expect(d.lease).toMatchObject({ units: 4, lifetimeMs: 100 });
    o.at(T0 + 200);
    // The caller used the request's own unit (recorded with the lease) and one more, the last 30 ms after it asked,
    // and gives up the other three.
    const settle = [{ recordedAt: d.lease?.recordedAt ?? [], issuedAt: d.now, used: 2, lastUseMs: 30, unused: 3 }];
    const next = await o.take(limits, 1, { settle });
    // The answer counts the given-back units as free: the two uses and the new request are all that is used.
    expect(next.limits[0]?.remaining).toBe(37);
    // The uses are recorded at issuedAt + 30, plus 1 ms for whole-millisecond clocks and the margin of 1 ms.
    expect((await o.rows()).filter((r) => r.cost > 0).map((r) => [r.ts, r.cost])).toEqual([
      [T0 + 32, 2],
      [T0 + 200, 1],
    ]);
    // A lease granted under other limits (another ring layout) is not here: nothing moves.
    const elsewhere = { recordedAt: [T0 + 100, T0 + 100], issuedAt: T0, used: 1, lastUseMs: 0, unused: 1 };
    const other = await o.take(limits, 1, { settle: [elsewhere] });
    expect(other).toMatchObject({ allowed: true });
    expect(other.limits[0]?.remaining).toBe(36);
  });

  it("settles on a call of its own, and a restart keeps what it moved", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 40, windowMs: 1000, tickMs: 1 }];
    const d = await o.take(limits, 0, { leaseUnits: 5, leaseMs: 500 });
    const recordedAt = d.lease?.recordedAt ?? [];
    expect(recordedAt).toEqual([T0 + 500]);
    o.at(T0 + 100);
    // Two units used by 40 ms after the ask; the lease is still being spent, so nothing is given back.
    const rows = await o.settle(limits, [{ recordedAt, issuedAt: d.now, used: 2, lastUseMs: 40, unused: 0 }]);
    expect(rows).toBe(2);
    await o.evict();
    o.at(T0 + 1042);
    // T0 + 42 has left the 1 s window; the three still leased at T0 + 500 count.
    expect((await o.peek(limits)).limits[0]?.remaining).toBe(37);
    expect(await o.settle(limits, [{ recordedAt, issuedAt: d.now, used: 0, lastUseMs: 0, unused: 3 }])).toBe(1);
    expect((await o.peek(limits)).limits[0]?.remaining).toBe(40);
  });

  it("takes back unused units, and forgets a slot that holds nothing any more", async () => {
    const o = await object();
    const d = await o.take(roomy, 0, { leaseUnits: 10, leaseMs: 50 });
    const recordedAt = d.lease?.recordedAt ?? [];
    expect(await o.giveBack(roomy, recordedAt, 4)).toBe(1);
    expect((await o.rows()).map((r) => r.cost)).toEqual([6]);
    expect(await o.giveBack(roomy, recordedAt, 6)).toBe(1);
    expect((await o.rows()).map((r) => r.cost)).toEqual([0]);
    expect((await o.take(roomy, 1)).limits[0]?.remaining).toBe(999);
  });

  it("refunds a grant once by its id, after a restart too; forgets the id once the grant has left every window", async () => {
    const o = await object();
    const d = await o.take(perSecond, 2);
    expect(d.recordedAt).toEqual([T0]);
    expect(await o.refund(perSecond, "g1", d.recordedAt ?? [], 2)).toBe(true);
    expect((await o.peek(perSecond)).limits[0]?.remaining).toBe(3);
    expect(await o.refund(perSecond, "g1", d.recordedAt ?? [], 2)).toBe(false);
    await o.take(perSecond, 1);
    await o.evict();
    expect(await o.refund(perSecond, "g1", d.recordedAt ?? [], 2)).toBe(false);
    expect((await o.peek(perSecond)).limits[0]?.remaining).toBe(2);
    const refunds = async () => (await o.stored()).once.filter((r) => r.kind === "refund").map((r) => r.id);
    expect(await refunds()).toEqual(["g1"]);
    // A window later the first id's grant counts nowhere any more: the alarm forgets it, and keeps the second's.
    o.at(T0 + 1000);
    const e = await o.take(perSecond, 1);
    expect(await o.refund(perSecond, "g2", e.recordedAt ?? [], 1)).toBe(true);
    expect(await refunds()).toEqual(["g1", "g2"]);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await refunds()).toEqual(["g2"]);
    // Called on the instance: the test pool's RPC wrapper reports a rejected RPC call as unhandled.
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      for (const id of ["", "x".repeat(129), 7]) {
        const grant = { id: id as string, recordedAt: e.recordedAt ?? [], units: 1 };
        await expect(instance.refund(perSecond, grant)).rejects.toThrow(/^id: /);
      }
    });
  });

  it("refunds nothing recorded under other limits than the key's log keeps, and nothing of a key with no state", async () => {
    const o = await object();
    expect(await o.refund(perSecond, "none", [T0], 1)).toBe(false);
    expect(await o.stored()).toMatchObject({ tables: [] });
    const d = await o.take(perSecond, 2);
    // The plan changed since (another window): the handle's record is not where the key's log now keeps its units.
    const other: LimitSpec[] = [{ limit: 3, windowMs: 2000, tickMs: 1 }];
    expect(await o.refund(other, "g1", d.recordedAt ?? [], 2)).toBe(false);
    expect((await o.peek(perSecond)).limits[0]?.remaining).toBe(1);
    // Not remembered: refunded with the limits it was granted under, it gives back.
    expect(await o.refund(perSecond, "g1", d.recordedAt ?? [], 2)).toBe(true);
    expect((await o.peek(perSecond)).limits[0]?.remaining).toBe(3);
    // After a restart the log is built from storage for the refund alone, and the refund is kept until the
    // grant's window has passed (then the alarm forgets it).
    const e = await o.take(perSecond, 1);
    await o.evict();
    expect(await o.refund(perSecond, "g2", e.recordedAt ?? [], 1)).toBe(true);
    expect((await o.peek(perSecond)).limits[0]?.remaining).toBe(3);
    const ids = async () => (await o.stored()).once.filter((r) => r.kind === "refund").map((r) => r.id);
    expect(await ids()).toEqual(["g1", "g2"]);
    expect(await o.alarm()).not.toBeNull();
  });

  it("counts leased units after a restart, and takes them back after it", async () => {
    const o = await object();
    const d = await o.take(roomy, 1, { leaseUnits: 30, leaseMs: 50 });
    await o.evict();
    o.at(T0 + 1);
    expect((await o.take(roomy, 1)).limits[0]?.remaining).toBe(1000 - 31 - 1);
    expect(await o.giveBack(roomy, d.lease?.recordedAt ?? [], 30)).toBe(1);
    expect((await o.take(roomy, 1)).limits[0]?.remaining).toBe(1000 - 1 - 1 - 1);
  });

  it("evaluates at the real now after a restart, never at a future record", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 32, windowMs: 1600, tickMs: 1 }];
    o.at(T0 + 10);
    await o.take(limits, 1);
    o.at(T0 + 1600);
    expect((await o.take(limits, 1, { leaseUnits: 2, leaseMs: 50 })).lease?.recordedAt).toEqual([T0 + 1650]);
    await o.evict();
    o.at(T0 + 1601);
    // (T0 + 1, T0 + 1601] holds the grant at T0 + 10 and the lease's 3 units: 28 left, not 29.
    expect((await o.take(limits, 28)).allowed).toBe(true);
    expect(await o.take(limits, 1)).toMatchObject({ allowed: false, retryAfterMs: 9 });
  });
});

describe("storage", () => {
  it("writes one row per grant, none per denial, and grants in one millisecond share a row", async () => {
    const o = await object();
    await o.take(perSecond, 1);
    expect(o.written()).toBe(1);
    await o.take(perSecond, 1);
    expect(o.written()).toBe(1);
    expect(await o.rows()).toEqual([{ ring: 1, key: expect.any(Number), ts: T0, cost: 2 }]);
    o.at(T0 + 10);
    await o.take(perSecond, 1);
    expect(o.written()).toBe(1);
    const afterGrants = await o.rows();
    expect(afterGrants.map((r) => [r.ts, r.cost])).toEqual([
      [T0, 2],
      [T0 + 10, 1],
    ]);
    o.at(T0 + 20);
    expect((await o.take(perSecond, 1)).allowed).toBe(false);
    expect(o.written()).toBe(0);
    expect(await o.rows()).toEqual(afterGrants);
  });

  it("keeps at most capacity rows: a new slot reuses the key of one that can no longer count", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 2, windowMs: 1000, tickMs: 1 }];
    for (const t of [0, 500, 1000, 1500, 2000, 2500, 3000]) {
      o.at(T0 + t);
      expect((await o.take(limits, 1)).allowed).toBe(true);
    }
    const rows = await o.rows();
    expect(rows).toHaveLength(2);
    expect(rows.map((r) => r.ts)).toEqual([T0 + 2500, T0 + 3000]);
  });

  it("writes one row per ring: limits with different ticks keep separate rings", async () => {
    const o = await object();
    const limits: LimitSpec[] = [
      { limit: 10, windowMs: 1000, tickMs: 1 },
      { limit: 1000, windowMs: 86_400_000, tickMs: 60_000 },
    ];
    o.at(T0 + 5);
    await o.take(limits, 2);
    expect(o.written()).toBe(2);
    expect((await o.rows()).map((r) => [r.ring, r.ts, r.cost])).toEqual([
      [1, T0 + 5, 2],
      [60_000, Math.ceil((T0 + 5) / 60_000) * 60_000, 2],
    ]);
  });

  it("rebuilds from storage after an eviction and decides exactly as before, rewriting nothing", async () => {
    const o = await object();
    for (let i = 0; i < 3; i++) {
      o.at(T0 + i * 100);
      await o.take(perSecond, 1);
    }
    const before = await o.rows();
    await o.evict();
    o.written();
    o.at(T0 + 999);
    expect(await o.take(perSecond, 1)).toMatchObject({ allowed: false, retryAfterMs: 1 });
    // Assert on storage before any grant could have written: the restore itself wrote nothing.
    expect(o.written()).toBe(0);
    expect(await o.rows()).toEqual(before);
    o.at(T0 + 1000);
    expect((await o.take(perSecond, 1)).allowed).toBe(true);
    expect(o.written()).toBe(1);
    o.at(T0 + 1050);
    expect((await o.take(perSecond, 1)).allowed).toBe(false);
  });

  it("keeps the history that still matters when the limits (and ticks) change between deploys", async () => {
    const o = await object();
    const before: LimitSpec[] = [{ limit: 10, windowMs: 60_000, tickMs: 1 }];
    for (let i = 0; i < 6; i++) {
      o.at(T0 + i * 1000 + 1);
      await o.take(before, 1);
    }
    await o.evict();
    // A new deploy: a coarser tick, a stricter per-minute limit and a per-second one. The six grants still count.
    const after: LimitSpec[] = [
      { limit: 2, windowMs: 1000, tickMs: 1 },
      { limit: 7, windowMs: 60_000, tickMs: 1000 },
    ];
    o.at(T0 + 6001);
    const r1 = await o.take(after, 1);
    expect(r1).toMatchObject({ allowed: true, limits: [{ remaining: 1 }, { remaining: 0 }] });
    const r2 = await o.take(after, 1);
    expect(r2.allowed).toBe(false);
    // The oldest grant (T0 + 1) was rounded up to T0 + 1000 in the 1s-tick ring: it leaves at T0 + 61000.
    expect(r2.retryAfterMs).toBe(61_000 - 6001);
    const rings = new Set((await o.rows()).map((r) => r.ring));
    expect([...rings].sort((a, b) => a - b)).toEqual([1, 1000]);
  });

  it("carries over the rows of 0.1.0's slots table once", async () => {
    const name = crypto.randomUUID();
    const stub = env.LIMITER.getByName(name);
    await runInDurableObject(stub, (instance: RateLimiter, state) => {
      instance.clock = () => T0 + 10;
      state.storage.sql.exec(
        "CREATE TABLE slots (slot INTEGER PRIMARY KEY, ts INTEGER NOT NULL, cost INTEGER NOT NULL)",
      );
      state.storage.sql.exec("INSERT INTO slots VALUES (0, ?, 2), (1, ?, 1)", T0, T0 + 5);
    });
    await evictDurableObject(stub);
    await runInDurableObject(stub, (instance: RateLimiter) => {
      instance.clock = () => T0 + 10;
    });
    const d = (await stub.take(perSecond, { cost: 1 })) as Decision;
    expect(d.allowed).toBe(false);
    await runInDurableObject(stub, (_: RateLimiter, state) => {
      const tables = state.storage.sql.exec("SELECT name FROM sqlite_master WHERE name = 'slots'").toArray();
      expect(tables).toEqual([]);
    });
  });
});

describe("0.2.0's state", () => {
  /** An object whose storage is as 0.2.0 left it: the key's rows in `grants`, a route's in `route_grants`. */
  async function stored020(routeWindow = "60000") {
    const name = crypto.randomUUID();
    const stub = env.LIMITER.getByName(name);
    await runInDurableObject(stub, (_: RateLimiter, state) => {
      const sql = state.storage.sql;
      sql.exec(
        "CREATE TABLE grants (ring INTEGER NOT NULL, key INTEGER NOT NULL, ts INTEGER NOT NULL, cost INTEGER NOT NULL, PRIMARY KEY (ring, key)) WITHOUT ROWID",
      );
      sql.exec("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID");
      sql.exec(
        "CREATE TABLE route_grants (route TEXT NOT NULL, ring INTEGER NOT NULL, key INTEGER NOT NULL, ts INTEGER NOT NULL, cost INTEGER NOT NULL, PRIMARY KEY (route, ring, key)) WITHOUT ROWID",
      );
      // Two grants of the key (3 units) and one of its search route, 10 ms apart; a lease of 4 recorded ahead.
      sql.exec("INSERT INTO grants VALUES (1, 0, ?, 2), (1, 1, ?, 1), (1, 2, ?, 4)", T0, T0 + 10, T0 + 500);
      sql.exec("INSERT INTO route_grants VALUES ('search', 1, 0, ?, 1)", T0 + 10);
      sql.exec("INSERT INTO meta VALUES ('longest_window_ms', '1000'), ('route_window_ms', ?)", routeWindow);
      // 0.2.0 set the idle alarm with its grants.
      return state.storage.setAlarm(T0 + 1500);
    });
    await evictDurableObject(stub);
    await runInDurableObject(stub, (instance: RateLimiter) => {
      instance.clock = () => T0 + 20;
    });
    return stub;
  }
  const own: LimitSpec[] = [{ limit: 10, windowMs: 1000, tickMs: 1 }];
  const search = { name: "search", limits: [{ limit: 2, windowMs: 60_000, tickMs: 1 }] };

  it("is read by this version: the key's grants and leases and the route's count, in one table, old ones gone", async () => {
    const stub = await stored020();
    // 7 of 10 used by the key (the lease's 4 included), 1 of 2 by the route: a cost of 1 fits both, a cost of 2 not.
    const peeked = (await stub.peek(own, 1, search)) as Decision;
    expect(peeked.limits.map((l) => l.remaining)).toEqual([3, 1]);
    expect(((await stub.take(own, { cost: 2 }, search)) as Decision).allowed).toBe(false);
    expect(((await stub.take(own, { cost: 1 }, search)) as Decision).allowed).toBe(true);
    expect(((await stub.take(own, { cost: 1 }, search)) as Decision).allowed).toBe(false);
    await runInDurableObject(stub, (_: RateLimiter, state) => {
      const sql = state.storage.sql;
      const tables = sql.exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' ORDER BY name",
      );
      expect(tables.toArray().map((t) => t.name)).toEqual(["budget_slots", "kept_answers", "meta"]);
      const rows = sql.exec("SELECT budget, ts, cost FROM budget_slots ORDER BY budget, ts").toArray();
      expect(rows).toEqual([
        { budget: "", ts: T0, cost: 2 },
        { budget: "", ts: T0 + 10, cost: 1 },
        { budget: "", ts: T0 + 20, cost: 1 },
        { budget: "", ts: T0 + 500, cost: 4 },
        { budget: "search", ts: T0 + 10, cost: 1 },
        { budget: "search", ts: T0 + 20, cost: 1 },
      ]);
      // Carried over as `window:` rows; the key's (a second) went with its first decision — a window of a day or less
      // is not stored — and the route's, as long as its limits' longest, is read as before.
      const meta = sql.exec("SELECT k, v FROM meta WHERE k LIKE 'window:%' ORDER BY k").toArray();
      expect(meta).toEqual([{ k: "window:search", v: "60000" }]);
    });
  });

  it("a route window 0.2.0 kept shorter than the route's limits goes: its rows are read as counting a day, not a second", async () => {
    const stub = await stored020("1000");
    expect(((await stub.take(own, { cost: 1 }, search)) as Decision).allowed).toBe(true);
    const meta = await runInDurableObject(stub, (_: RateLimiter, state) =>
      state.storage.sql.exec("SELECT k FROM meta WHERE k LIKE 'window:%'").toArray(),
    );
    expect(meta).toEqual([]);
  });

  it("keeps the key alive until a day after the route's 0.2.0 window has passed, even before any call", async () => {
    const stub = await stored020();
    // The alarm 0.2.0 set fires before any call: the route's row at T0 + 10 counts for 60 s, so the state stays and
    // the alarm is set again for a day after then.
    await runInDurableObject(stub, (instance: RateLimiter) => {
      instance.clock = () => T0 + 1500;
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await runInDurableObject(stub, (_: RateLimiter, state) => state.storage.getAlarm())).toBe(
      T0 + 60_010 + IDLE_KEEP_MS,
    );
    expect(((await stub.peek(own, 2, search)) as Decision).allowed).toBe(false);
    await runInDurableObject(stub, (instance: RateLimiter) => {
      instance.clock = () => T0 + 60_010 + IDLE_KEEP_MS;
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(((await stub.status(own, 1, [search])) as { stored: boolean }).stored).toBe(false);
  });
});

describe("idle alarm", () => {
  it("is set on the first grant, re-arms while the key is active or idle less than a day, and deletes the state a day after it is idle", async () => {
    const o = await object();
    const limits: LimitSpec[] = [
      { limit: 5, windowMs: 1000, tickMs: 1 },
      { limit: 50, windowMs: 10_000, tickMs: 1 },
    ];
    expect(await o.alarm()).toBeNull();
    o.at(T0 + 100);
    await o.take(limits, 1);
    // No window row: windows of a day or less are read as a day (budgets.ts, UNSTORED_WINDOW_MS).
    expect(o.writes().sort()).toEqual(["alarm", "slot"]);
    expect(await o.alarm()).toBe(T0 + 100 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + 5000);
    await o.take(limits, 1);
    expect(o.writes()).toEqual(["slot"]);
    expect(await o.alarm()).toBe(T0 + 100 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);

    // Fires a day after the first grant is read as counting, but the second is read as counting until T0 + 5000 + a
    // day: nothing is deleted, it re-arms for a day after that.
    o.at(T0 + 100 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toHaveLength(2);
    expect(o.writes()).toEqual(["alarm"]);
    expect(await o.alarm()).toBe(T0 + 5000 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);

    // Seen again before then: its state is there; the grant writes its row only (over a slot that no longer counts) —
    // no alarm.
    const seen = T0 + 1000 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS;
    o.at(seen);
    o.written();
    expect((await o.take(limits, 1)).limits.map((l) => l.remaining)).toEqual([4, 49]);
    expect(o.writes()).toEqual(["slot"]);
    expect(o.written()).toBe(1);
    expect((await o.slots()).map((r) => r.ts)).toEqual([T0 + 5000, seen]);
    expect(await o.alarm()).toBe(T0 + 5000 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);

    // Fires while that grant still counts: nothing is deleted, it re-arms.
    o.at(T0 + 5000 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toHaveLength(2);
    expect(await o.alarm()).toBe(seen + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);

    // A day after that grant stops counting: everything goes. The next grant is a first grant again.
    o.at(seen + UNSTORED_WINDOW_MS + IDLE_KEEP_MS - 1);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toHaveLength(2);
    o.at(seen + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
    expect(await o.alarm()).toBeNull();
    o.writes();
    const fresh = await o.take(limits, 1);
    expect(fresh.limits.map((l) => l.remaining)).toEqual([4, 49]);
    expect(o.writes().sort()).toEqual(["alarm", "slot"]);
  });

  const twoDays: LimitSpec[] = [{ limit: 100, windowMs: 2 * UNSTORED_WINDOW_MS, tickMs: 1 }];
  for (const evicted of [false, true]) {
    it(`a window over a day is stored with the first grant, and the state goes a day after it (${evicted ? "evicted" : "in memory"})`, async () => {
      const o = await object();
      o.at(T0 + 100);
      await o.take(twoDays, 1);
      expect(o.writes().sort()).toEqual(["alarm", "meta", "slot"]);
      expect((await o.stored()).meta).toEqual([{ k: "window:", v: String(2 * UNSTORED_WINDOW_MS) }]);
      const deleteAt = T0 + 100 + 2 * UNSTORED_WINDOW_MS + IDLE_KEEP_MS;
      expect(await o.alarm()).toBe(deleteAt);
      if (evicted) await o.evict();
      // Fired early (when a day's window would have let it go): the grant still counts; set again for the same time.
      o.at(T0 + 100 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
      expect(await runDurableObjectAlarm(o.stub)).toBe(true);
      expect(await o.rows()).toHaveLength(1);
      expect(await o.alarm()).toBe(deleteAt);
      o.at(deleteAt - 1);
      expect(await runDurableObjectAlarm(o.stub)).toBe(true);
      expect(await o.rows()).toHaveLength(1);
      o.at(deleteAt);
      expect(await runDurableObjectAlarm(o.stub)).toBe(true);
      expect(await o.stored()).toMatchObject({ tables: [], alarm: null });
    });
  }

  it("limits changed from a window over a day to a minute: the key's stored window goes, its rows read as a day", async () => {
    const o = await object();
    await o.take(twoDays, 1);
    expect(await o.alarm()).toBe(T0 + 2 * UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + 1000);
    await o.take([{ limit: 100, windowMs: 60_000, tickMs: 1 }], 1);
    expect(o.writes().filter((w) => w === "meta")).toHaveLength(2); // written, then deleted
    expect((await o.stored()).meta).toEqual([]);
    // Evicted, the alarm set under the old window fires early: it finds the newest grant counting a day after it.
    await o.evict();
    o.at(T0 + 2000);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.alarm()).toBe(T0 + 1000 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + 1000 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.stored()).toMatchObject({ tables: [], alarm: null });
  });

  it("a route's stored window over a day stays when the route is decided under a minute (routes of several plans share a name)", async () => {
    const o = await object();
    const own = [{ limit: 100, windowMs: 1000, tickMs: 1 }];
    await o.stub.take(own, { cost: 1 }, { name: "r", limits: twoDays });
    o.at(T0 + 1000);
    await o.stub.take(own, { cost: 1 }, { name: "r", limits: [{ limit: 100, windowMs: 60_000, tickMs: 1 }] });
    expect((await o.stored()).meta).toEqual([{ k: "window:r", v: String(2 * UNSTORED_WINDOW_MS) }]);
  });

  it("counts future records: a lease keeps the key alive until a day after its record has left the window", async () => {
    const o = await object();
    const limits: LimitSpec[] = [{ limit: 1000, windowMs: 1600, tickMs: 1 }];
    o.at(T0 + 10);
    await o.take(limits, 1);
    expect(await o.alarm()).toBe(T0 + 10 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + 20);
    await o.take(limits, 1, { leaseUnits: 10, leaseMs: 50 });
    o.at(T0 + 10 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    // The lease's record at T0 + 70: read as counting until a day after it.
    expect(await o.rows()).toHaveLength(2);
    expect(await o.alarm()).toBe(T0 + 70 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + 69 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toHaveLength(2);
    o.at(T0 + 70 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
  });

  it("deletes the state of an evicted object from storage alone", async () => {
    const o = await object();
    await o.take(perSecond, 2);
    await o.evict();
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS - 1);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toHaveLength(1);
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await o.rows()).toEqual([]);
  });

  it("does not delete a key that is still blocked after an eviction", async () => {
    const o = await object();
    await o.take(perSecond, 3);
    await o.evict();
    o.at(T0 + 999);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.take(perSecond, 1)).allowed).toBe(false);
  });
});

describe("route budgets", () => {
  const own: LimitSpec[] = [{ limit: 10, windowMs: 1000, tickMs: 1 }];
  const search = { name: "search", limits: [{ limit: 2, windowMs: 60_000, tickMs: 1 }] };
  const take = (o: Awaited<ReturnType<typeof object>>, cost = 1, route = search) =>
    o.stub.take(own, { cost }, route) as Promise<Decision>;
  /** The routes' rows: route, time and cost. */
  const routeRows = (o: Awaited<ReturnType<typeof object>>) =>
    runInDurableObject(o.stub, (_: RateLimiter, state) =>
      state.storage.sql
        .exec<{ route: string; ts: number; cost: number }>(
          "SELECT budget AS route, ts, cost FROM budget_slots WHERE budget <> '' ORDER BY budget, ts",
        )
        .toArray()
        .map((r) => ({ ...r })),
    );

  it("commits a request to the key's budget and the route's together: one row each, and none when one refuses", async () => {
    const o = await object();
    expect(await take(o)).toMatchObject({ allowed: true, recordedAt: [T0, T0] });
    expect(o.written()).toBe(2); // the key's row and the route's
    expect(await routeRows(o)).toEqual([{ route: "search", ts: T0, cost: 1 }]);
    o.at(T0 + 10);
    await take(o);
    o.at(T0 + 20);
    const refused = await take(o);
    expect(refused).toMatchObject({
      allowed: false,
      retryAfterMs: 60_000 - 20,
      limits: [
        { remaining: 8, exceeded: false },
        { remaining: 0, exceeded: true },
      ],
    });
    // The refusal wrote nothing: the key's budget still holds 8, the route's rows are the two grants.
    expect(o.written()).toBe(2);
    expect(await routeRows(o)).toHaveLength(2);
    expect((await o.take(own, 8)).allowed).toBe(true);
    // Now the key's budget refuses too: the route's request waits for the later of the two.
    expect((await take(o)).retryAfterMs).toBe(60_000 - 20);
  });

  it("keeps each route's budget apart, and a plain request counts in the key's budget only", async () => {
    const o = await object();
    const exportRoute = { name: "export", limits: [{ limit: 1, windowMs: 60_000, tickMs: 1 }] };
    await take(o, 2);
    expect((await take(o, 1, exportRoute)).allowed).toBe(true);
    expect((await take(o, 1, exportRoute)).allowed).toBe(false);
    expect((await take(o)).allowed).toBe(false);
    expect((await o.take(own, 7)).allowed).toBe(true); // 10 − 2 − 1
    expect((await o.take(own, 1)).allowed).toBe(false);
    expect(await routeRows(o)).toEqual([
      { route: "export", ts: T0, cost: 1 },
      { route: "search", ts: T0, cost: 2 },
    ]);
  });

  it("rebuilds a route's budget after an eviction, gives a refund back to both, and peeks at both", async () => {
    const o = await object();
    const first = await take(o);
    await take(o);
    await o.evict();
    o.at(T0 + 5);
    expect((await take(o)).allowed).toBe(false);
    expect(await o.stub.refund(own, { id: "first", recordedAt: first.recordedAt ?? [], units: 1 }, search)).toBe(true);
    expect((await o.stub.peek(own, 1, search)) as Decision).toMatchObject({
      allowed: true,
      limits: [{ remaining: 9 }, { remaining: 1 }],
    });
    expect((await take(o)).allowed).toBe(true);
    expect((await take(o)).allowed).toBe(false);
  });

  it("is blocked with the key, shows its routes in status, and forgets them on reset", async () => {
    const o = await object();
    await take(o, 2);
    const status = (await o.stub.status(own, 10, [search])) as KeyStatus;
    expect(status.routes).toEqual([
      {
        name: "search",
        decision: expect.objectContaining({ limits: [{ remaining: 0, resetMs: 60_000, exceeded: false }] }),
        used: [2],
      },
    ]);
    await o.stub.block(T0 + 5000);
    expect(await take(o)).toMatchObject({ allowed: false, blockedBy: T0 + 5000 });
    await o.stub.unblock();
    o.at(T0 + 1);
    const reset = (await o.stub.reset(own, 10, [search])) as KeyStatus;
    expect(reset.routes[0]?.decision.limits[0]?.remaining).toBe(2);
    expect(reset.routes[0]?.used).toEqual([0]);
    expect(await routeRows(o)).toEqual([]);
    expect((await take(o)).allowed).toBe(true);
  });

  it("keeps the key alive until a day after the route's longest window has passed, then deletes everything", async () => {
    const o = await object();
    // A route's window over a day is stored (`meta`), beside its row and the key's.
    const archive = { name: "archive", limits: [{ limit: 2, windowMs: 2 * UNSTORED_WINDOW_MS, tickMs: 1 }] };
    await take(o, 1, archive);
    expect(o.writes().sort()).toEqual(["alarm", "meta", "slot", "slot"]);
    expect(await o.alarm()).toBe(T0 + 2 * UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    await o.evict();
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    // The key's own grant stopped counting a day ago (read as a day after it); the route's has not (an evicted object
    // reads its window from storage).
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect(await routeRows(o)).toHaveLength(1);
    expect(await o.alarm()).toBe(T0 + 2 * UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(T0 + 2 * UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await runDurableObjectAlarm(o.stub)).toBe(true);
    expect((await o.stored()).tables).toEqual([]);
  });

  it("rejects a route without a name, and a cost of 0, recording nothing", async () => {
    const o = await object();
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      await expect(instance.take(own, { cost: 1 }, { name: "", limits: search.limits })).rejects.toThrow(
        /^route\.name: /,
      );
      await expect(instance.take(own, { cost: 0, leaseUnits: 1 }, search)).rejects.toThrow(/^cost: /);
    });
    expect(await o.rows()).toEqual([]);
  });
});

describe("recover: grants an isolate made alone while the object could not answer", () => {
  const hour: LimitSpec[] = [{ limit: 5, windowMs: 3_600_000, tickMs: 1 }];
  const alone = (uses: { ageMs: number; units: number }[], routes: AloneReport["routes"] = []): AloneReport => ({
    uses,
    routes,
  });

  it("an empty report (a probe) touches nothing: no tables, no alarm", async () => {
    const o = await object();
    expect(await o.stub.recover(hour, alone([]))).toBe(0);
    expect(await o.stored()).toMatchObject({ tables: [], alarm: null });
  });

  it("records each use at its age before now, never earlier, durable and alarmed; the key then counts them", async () => {
    const o = await object();
    o.at(T0 + 10_000);
    expect(
      await o.stub.recover(
        hour,
        alone([
          { ageMs: 5000, units: 2 },
          { ageMs: 0, units: 1 },
        ]),
      ),
    ).toBe(2);
    // now − age + 1 + (1 + age / 50).
    expect(await o.slots()).toEqual([
      { ring: 1, ts: T0 + 5000 + 1 + 101, cost: 2 },
      { ring: 1, ts: T0 + 10_000 + 2, cost: 1 },
    ]);
    // The idle alarm: a day after the newest stops counting, read as a day after it (an hour's window is not stored).
    expect(await o.alarm()).toBe(T0 + 10_002 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    await o.evict();
    expect((await o.peek(hour)).limits[0]?.remaining).toBe(2);
  });

  it("recorded over the limit when they passed alone: the key waits until they leave its window", async () => {
    const o = await object();
    for (let i = 0; i < 4; i++) await o.take(hour, 1);
    o.at(T0 + 100);
    await o.stub.recover(hour, alone([{ ageMs: 50, units: 3 }]));
    const d = await o.take(hour, 1);
    expect(d).toMatchObject({ allowed: false });
    // 7 in the window: it takes three leaving (the grants at T0) for one more to fit.
    expect(d.retryAfterMs).toBe(3_600_000 - 100);
  });

  it("a take carrying a report records it before deciding; routes' uses go to their budgets", async () => {
    const o = await object();
    const route = { name: "search", limits: [{ limit: 2, windowMs: 3_600_000, tickMs: 1 }] };
    o.at(T0 + 1000);
    const d = await o.stub.take(hour, {
      cost: 1,
      alone: alone([{ ageMs: 500, units: 3 }], [{ budget: route, uses: [{ ageMs: 400, units: 2 }] }]),
    });
    expect(d).toMatchObject({ allowed: true, limits: [{ remaining: 1 }] });
    const routed = await o.stub.take(hour, { cost: 1 }, route);
    expect(routed).toMatchObject({ allowed: false, limits: [{ remaining: 1 }, { remaining: 0, exceeded: true }] });
  });

  it("rejects a report that is not one, writing nothing", async () => {
    const o = await object();
    const bad = alone(
      [{ ageMs: 1, units: 1 }],
      [{ budget: { name: "r", limits: hour }, uses: [{ ageMs: 1, units: 0 }] }],
    );
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      await expect(instance.recover(hour, { uses: "x" } as unknown as AloneReport)).rejects.toThrow(/^alone: expected/);
      await expect(instance.recover(hour, alone([{ ageMs: -1, units: 1 }]))).rejects.toThrow(/^uses\[\]\.ageMs/);
      await expect(instance.recover(hour, bad)).rejects.toThrow(/^uses\[\]\.units/);
    });
    expect(await o.rows()).toEqual([]);
  });
});
