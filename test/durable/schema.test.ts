// The schema's version and migrations (src/object/schema.ts), on the rows 0.3.0 left: route budgets, calendar quotas,
// credits with a top-up's id, usage, a concurrency slot, an override and a refund's id in one key; a penalty's block in
// another. After the upgrade each is decided, refunded and reported on with nothing lost, and the migration runs once.
// (0.1.0's and 0.2.0's tables: test/durable/limiter.test.ts, "0.2.0's state".)
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Decision, LimitSpec } from "../../src/core/index.ts";
import type { UsagePeriod } from "../../src/core/usage.ts";
import { type KeyStatus, type RateLimiter, SCHEMA_VERSION } from "../../src/object/index.ts";
import { versionOf } from "../../src/object/meta.ts";
import { MIGRATIONS } from "../../src/object/schema.ts";
import { T0 } from "./object.ts";

const limits: LimitSpec[] = [{ limit: 100, windowMs: 60_000, tickMs: 1 }];
const search = { name: "search", limits: [{ limit: 5, windowMs: 3_600_000, tickMs: 1000 }] };
const quotas = [{ limit: 50, period: "day" as const, zone: "UTC" }];
const credits = { initial: 20 };
const usage = { zone: "UTC", keepDays: 400 };
const DAY = Date.UTC(2027, 0, 15);

/** A key's object whose storage is as 0.3.0 left it (its own tables and rows, written as 0.3.0 wrote them). */
async function stored030(rows: (sql: SqlStorage) => void) {
  const stub = env.LIMITER.getByName(crypto.randomUUID());
  // Written into a fresh object (its constructor found nothing to migrate), then evicted: the next instance loads them.
  const before = await runInDurableObject(stub, async (_: RateLimiter, state) => {
    const sql = state.storage.sql;
    sql.exec(
      "CREATE TABLE budget_slots (budget TEXT NOT NULL, ring INTEGER NOT NULL, key INTEGER NOT NULL, ts INTEGER NOT NULL, cost INTEGER NOT NULL, PRIMARY KEY (budget, ring, key)) WITHOUT ROWID",
    );
    sql.exec("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID");
    rows(sql);
    await state.storage.setAlarm(T0 + 60_000);
    return tablesOf(sql);
  });
  await evictDurableObject(stub);
  await runInDurableObject(stub, (instance: RateLimiter) => {
    instance.clock = () => T0 + 20;
  });
  return { stub, before };
}

/** Every table and row but the runtime's own. */
function tablesOf(sql: SqlStorage): Record<string, unknown[]> {
  const out: Record<string, unknown[]> = {};
  const tables = sql.exec<{ name: string }>(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' ORDER BY name",
  );
  for (const { name } of tables.toArray()) out[name] = sql.exec(`SELECT * FROM ${name}`).toArray();
  return out;
}

/** The schema version a key's storage is at: the one its `meta` table was made under (0: before versions). */
function versionIn(stub: DurableObjectStub<RateLimiter>) {
  return runInDurableObject(stub, (_: RateLimiter, state) => {
    const meta = state.storage.sql.exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE name = 'meta'").toArray();
    return versionOf(meta[0]?.sql);
  });
}

/** Every table and row of a key, as its loaded (migrated) object has them. */
function dump(stub: DurableObjectStub<RateLimiter>) {
  return runInDurableObject(stub, (_: RateLimiter, state) => tablesOf(state.storage.sql));
}

/** One key as 0.3.0 left it: two grants (the first refunded as `g-1`), one on the search route, a top-up `top-1`. */
const billed = (sql: SqlStorage) => {
  sql.exec(
    "INSERT INTO budget_slots VALUES ('', 1, 0, ?, 0), ('', 1, 1, ?, 2), ('search', 1000, 0, ?, 2)",
    T0,
    T0 + 5,
    T0 + 1000,
  );
  const meta: [string, string][] = [
    ["credits", JSON.stringify({ spec: { initial: 20, refill: null }, state: { balance: 28, refilledAt: null } })],
    [
      "override",
      JSON.stringify({
        limits: [{ limit: 200, windowMs: 60_000, tickMs: 1, name: "vip" }],
        expiresAt: T0 + 86_400_000,
      }),
    ],
    ["quotas", JSON.stringify([{ limit: 50, period: "day", zone: "UTC", start: DAY, end: DAY + 86_400_000, used: 2 }])],
    ["refund:g-1", String(T0 + 86_400_007)],
    ["topup:top-1", String(T0 + 7)],
    ["usage", JSON.stringify(usage)],
    ["window:", "60000"],
    ["window:search", "3600000"],
  ];
  for (const [k, v] of meta) sql.exec("INSERT INTO meta VALUES (?, ?)", k, v);
  sql.exec(
    "CREATE TABLE usage (day INTEGER PRIMARY KEY, requests INTEGER NOT NULL, cost INTEGER NOT NULL) WITHOUT ROWID",
  );
  sql.exec("INSERT INTO usage VALUES (?, 1, 2)", DAY);
  sql.exec("CREATE TABLE inflight (id TEXT PRIMARY KEY, expires INTEGER NOT NULL) WITHOUT ROWID");
  sql.exec("INSERT INTO inflight VALUES ('slot-1', ?)", T0 + 30_005);
};

describe("the schema", () => {
  it("lists its migrations in order, each with a description; the last is the version written", () => {
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
    for (const m of MIGRATIONS) expect(m.description.length).toBeGreaterThan(10);
    expect(SCHEMA_VERSION).toBe(MIGRATIONS.length);
  });

  it("0.3.0's key: ids move to once_ids, kept answers get their table, every other row stays as it was, and the version is stamped", async () => {
    const { stub, before } = await stored030(billed);
    expect(Object.keys(before)).toEqual(["budget_slots", "inflight", "meta", "usage"]);
    expect(versionOf("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")).toBe(0);
    expect(await stub.peek(limits, 1)).toMatchObject({ allowed: true }); // loads the object: the migration runs
    const after = await dump(stub);
    expect(Object.keys(after)).toEqual(["budget_slots", "inflight", "kept_answers", "meta", "once_ids", "usage"]);
    expect(after.kept_answers).toEqual([]);
    for (const table of ["budget_slots", "inflight", "usage"]) expect(after[table]).toEqual(before[table]);
    expect(after.once_ids).toEqual([
      { kind: "refund", id: "g-1", forget_at: T0 + 86_400_007 },
      { kind: "topup", id: "top-1", forget_at: null },
    ]);
    const kept = (before.meta as { k: string }[]).filter((r) => !/^(refund|topup):/.test(r.k));
    expect(after.meta).toEqual(kept);
    // The version is in the statement that made the meta table (no row of its own): 0.3.0's had none.
    expect(await versionIn(stub)).toBe(SCHEMA_VERSION);
    // Loaded again, nothing is migrated twice.
    await evictDurableObject(stub);
    expect(await stub.peek(limits, 1)).toMatchObject({ allowed: true });
    expect(await dump(stub)).toEqual(after);
  });

  it("0.3.0's key after the upgrade: decided, refunded, topped up and reported on with nothing lost", async () => {
    const { stub } = await stored030(billed);
    const specs = { quotas, credits, usage };
    const s = (await stub.status(limits, 10, [search], specs)) as KeyStatus;
    // The override's limits apply (2 of 200 used), the route has 2 of 5, the quota 2 of 50, the balance 28, a slot held.
    expect(s.override?.limits[0]?.name).toBe("vip");
    expect(s.decision.limits[0]?.remaining).toBe(198);
    expect(s.routes[0]?.decision.limits[0]?.remaining).toBe(3);
    expect(s.decision.quotas?.[0]?.remaining).toBe(48);
    expect(s.decision.credits?.balance).toBe(28);
    expect(s.inFlight).toBe(1);
    // The refund already given and the top-up already applied are not applied again.
    expect(await stub.refund(limits, { id: "g-1", recordedAt: [T0], units: 1, at: T0 })).toBe(false);
    expect(await stub.credit(credits, 10, "top-1")).toBe(28);
    expect(await stub.credit(credits, 10, "top-2")).toBe(38);
    // A grant on the route counts everywhere; its refund gives it back everywhere, once.
    const d = (await stub.take(limits, { cost: 1, ...specs, call: "c-1" }, search)) as Decision;
    expect(d).toMatchObject({ allowed: true, quotas: [{ remaining: 47 }], credits: { balance: 37 } });
    // Sent again with its id (its answer lost): the kept answer, nothing counted twice.
    expect(await stub.take(limits, { cost: 1, ...specs, call: "c-1" }, search)).toEqual(d);
    const grant = { id: "g-2", recordedAt: d.recordedAt ?? [], units: 1, at: d.now };
    expect(await stub.refund(limits, grant, search)).toBe(true);
    expect(await stub.refund(limits, grant, search)).toBe(false);
    const days = (await stub.usage(usage, { period: "day", from: DAY, to: DAY + 86_400_000 })) as UsagePeriod[];
    expect(days.map((p) => [p.requests, p.cost])).toEqual([[1, 2]]);
    const after = (await stub.status(limits, 10, [search], specs)) as KeyStatus;
    expect(after.decision.quotas?.[0]?.remaining).toBe(48);
    expect(after.decision.credits?.balance).toBe(38);
    expect(after.routes[0]?.decision.limits[0]?.remaining).toBe(3);
    // The slot 0.3.0 stored is held until released.
    expect(await stub.release("slot-1")).toBe(true);
    expect(await stub.release("slot-1")).toBe(false);
  });

  it("0.3.0's key blocked by a penalty: still blocked after the upgrade, and the block's doubling remembered", async () => {
    const penalty = { after: 3, withinMs: 60_000, blockMs: 10_000, maxBlockMs: 40_000 };
    const tiny: LimitSpec[] = [{ limit: 1, windowMs: 1000, tickMs: 1 }];
    const { stub } = await stored030((sql) => {
      sql.exec("INSERT INTO budget_slots VALUES ('', 1, 0, ?, 1)", T0);
      for (const [k, v] of [
        ["block_cause", "penalty"],
        ["block_until", String(T0 + 10_000)],
        ["penalty", JSON.stringify({ refusals: [], lastBlockMs: 10_000, lastEnd: T0 + 10_000, withinMs: 60_000 })],
        ["window:", "1000"],
      ])
        sql.exec("INSERT INTO meta VALUES (?, ?)", k as string, v as string);
    });
    const d = (await stub.take(tiny, { cost: 1, penalty })) as Decision;
    expect(d).toMatchObject({ allowed: false, blockCause: "penalty", blockedUntil: T0 + 10_000 });
    const s = (await stub.status(tiny)) as KeyStatus;
    expect(s).toMatchObject({ blockedUntil: T0 + 10_000, blockCause: "penalty" });
    expect(await versionIn(stub)).toBe(SCHEMA_VERSION);
  });
});
