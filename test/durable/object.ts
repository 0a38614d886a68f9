// Shared by the Durable Object tests: a fresh RateLimiter with its `clock()` seam under the test's control (no
// sleeping), its RPC calls as the Worker makes them, a proven eviction, and what it stores.
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect } from "vitest";
import type { Decision, LimitSpec } from "../../src/core/index.ts";
import type { Settlement } from "../../src/core/log.ts";
import type { KeyStatus, RateLimiter } from "../../src/object/index.ts";
import { versionOf } from "../../src/object/meta.ts";
import type { TakeAsk as Ask } from "../../src/protocol.ts";

/** The time every test object starts at (ms). */
export const T0 = 1_800_000_000_000;

/** 3 per second at 1ms ticks. */
export const perSecond: LimitSpec[] = [{ limit: 3, windowMs: 1000, tickMs: 1 }];

/** A fresh object with a controllable clock; `at(t)` moves it (survives only until eviction). */
export async function object(name = crypto.randomUUID()) {
  const stub = env.LIMITER.getByName(name);
  let now = T0;
  let written = 0;
  /** Every row written and alarm set, by what it is: `slot` (budget_slots), `meta`, another table's, `alarm`. */
  const writes: string[] = [];
  const install = () =>
    runInDurableObject(stub, (instance: RateLimiter, state) => {
      instance.clock = () => now;
      // Count the rows every write statement reports written (the object holds this same SqlStorage), and the alarms.
      const sql = state.storage.sql;
      const exec = sql.exec.bind(sql);
      Object.defineProperty(sql, "exec", {
        configurable: true,
        value: (query: string, ...bindings: unknown[]) => {
          const cursor = exec(query, ...bindings);
          if (/^\s*(INSERT|UPDATE|DELETE|REPLACE)\b/i.test(query)) {
            const table = /\bbudget_slots\b/.test(query) ? "slot" : /\bmeta\b/.test(query) ? "meta" : "other";
            if (table === "slot") written += cursor.rowsWritten;
            for (let i = 0; i < cursor.rowsWritten; i++) writes.push(table);
          }
          return cursor;
        },
      });
      const setAlarm = state.storage.setAlarm.bind(state.storage);
      Object.defineProperty(state.storage, "setAlarm", {
        configurable: true,
        value: (...args: Parameters<typeof setAlarm>) => {
          writes.push("alarm");
          return setAlarm(...args);
        },
      });
    });
  await install();
  return {
    stub,
    /** One RPC to the object, as the Worker makes it. */
    take(limits: readonly LimitSpec[], cost: number, lease: Omit<Ask, "cost"> = {}): Promise<Decision> {
      return stub.take(limits, { cost, ...lease }) as Promise<Decision>;
    },
    /** Gives back `units` of a lease recorded at `recordedAt` that its isolate will never use (a settlement). */
    giveBack(limits: readonly LimitSpec[], recordedAt: readonly number[], units: number): Promise<number> {
      return stub.settle(limits, [
        { recordedAt, issuedAt: 0, used: 0, lastUseMs: 0, unused: units },
      ]) as Promise<number>;
    },
    refund(limits: readonly LimitSpec[], id: string, recordedAt: readonly number[], units: number): Promise<boolean> {
      return stub.refund(limits, { id, recordedAt, units }) as Promise<boolean>;
    },
    settle(limits: readonly LimitSpec[], settle: readonly Settlement[]): Promise<number> {
      return stub.settle(limits, settle) as Promise<number>;
    },
    peek(limits: readonly LimitSpec[], cost = 1): Promise<Decision> {
      return stub.peek(limits, cost) as Promise<Decision>;
    },
    status(limits: readonly LimitSpec[] = perSecond, buckets = 10): Promise<KeyStatus> {
      return stub.status(limits, buckets) as Promise<KeyStatus>;
    },
    at(t: number) {
      now = t;
    },
    /**
     * Every row written and alarm set since the last call, by what it is (`slot`, `meta`, `other`, `alarm`). The idle
     * alarm's `deleteAll()` goes around `sql.exec`: what it deletes is not here.
     */
    writes: () => writes.splice(0),
    /** Grants rows the object wrote since the last call (as SQLite counts them: `cursor.rowsWritten`). */
    written() {
      const n = written;
      written = 0;
      return n;
    },
    /** Evicts the instance (storage kept), proves the old instance is gone, and installs the clock in the new one. */
    async evict() {
      await runInDurableObject(stub, (instance: RateLimiter) => {
        (instance as unknown as { marker: string }).marker = "old instance";
      });
      await evictDurableObject(stub);
      await runInDurableObject(stub, (instance: RateLimiter) => {
        expect((instance as unknown as { marker?: string }).marker).toBeUndefined();
      });
      await install();
    },
    /** The key's own budget's rows with their storage keys; [] when the object has no tables (a key with no state has none). */
    rows: () =>
      runInDurableObject(stub, (_: RateLimiter, state) => {
        const sql = state.storage.sql;
        if (sql.exec("SELECT name FROM sqlite_master WHERE name = 'budget_slots'").toArray().length === 0) return [];
        return sql
          .exec<{ ring: number; key: number; ts: number; cost: number }>(
            "SELECT ring, key, ts, cost FROM budget_slots WHERE budget = '' ORDER BY ring, ts",
          )
          .toArray();
      }),
    /** The key's own budget's rows without their storage keys. */
    async slots() {
      return (await this.rows()).map(({ ring, ts, cost }) => ({ ring, ts, cost }));
    },
    alarm: () => runInDurableObject(stub, (_: RateLimiter, state) => state.storage.getAlarm()),
    /** Every table, every meta row and the alarm: what the key stores. */
    stored: () =>
      runInDurableObject(stub, async (_: RateLimiter, state) => {
        const sql = state.storage.sql;
        const tables = sql
          .exec<{ name: string; sql: string }>("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
          .toArray();
        const has = (name: string) => tables.some((t) => t.name === name);
        const meta = has("meta")
          ? sql.exec<{ k: string; v: string }>("SELECT k, v FROM meta ORDER BY k").toArray()
          : [];
        const once = has("once_ids")
          ? sql.exec("SELECT kind, id, forget_at FROM once_ids ORDER BY kind, id").toArray()
          : [];
        return {
          tables: tables.map((t) => t.name),
          meta,
          /** The schema version the `meta` table was made under (src/object/meta.ts; null: no such table). */
          schema: has("meta") ? versionOf(tables.find((t) => t.name === "meta")?.sql) : null,
          /** Ids of refunds and top-ups kept (once.ts). */
          once,
          alarm: await state.storage.getAlarm(),
          size: sql.databaseSize,
        };
      }),
  };
}
