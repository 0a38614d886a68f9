/**
 * @module The RateLimiter Durable Object: one per key, the single writer of that key's log.
 * Loads the log from SQLite once, decides with the pure core, writes the one row per ring that a
 * grant or lease touched (nothing for a denial), and deletes the key's state once nothing in it
 * counts any more.
 */

import { DurableObject } from "cloudflare:workers";
import type { Decision } from "./core/decision.ts";
import type { LimitSpec } from "./core/limits.ts";
import { type Ask, KeyLog } from "./core/log.ts";
import type { SlotRow } from "./core/ring.ts";

const UPSERT =
  "INSERT INTO grants (ring, key, ts, cost) VALUES (?, ?, ?, ?) ON CONFLICT (ring, key) DO UPDATE SET ts = excluded.ts, cost = excluded.cost";

/** Whether `log` was built for these limits (same N, W and tick, in order): else it must be rebuilt. */
function sameLimits(log: KeyLog, limits: readonly LimitSpec[]): boolean {
  const have = log.limits;
  if (!Array.isArray(limits) || have.length !== limits.length) return false;
  return have.every((a, i) => {
    const b = limits[i] as LimitSpec;
    return a.limit === b.limit && a.windowMs === b.windowMs && (b.tickMs === undefined || a.tickMs === b.tickMs);
  });
}

export class RateLimiter extends DurableObject<Env> {
  readonly #sql: SqlStorage;
  #log: KeyLog | null = null;
  /** When the scheduled idle alarm fires (ms), or null when none is set. */
  #alarmAt: number | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = ctx.storage.sql;
    // Read the stored alarm once per instance (a read is ~free; each setAlarm is billed as a row
    // written), so a grant after a restart does not set an alarm that is already set.
    void ctx.blockConcurrencyWhile(async () => {
      this.#createTables();
      this.#alarmAt = await ctx.storage.getAlarm();
    });
  }

  /**
   * Decides one request of `ask.cost` against `limits` at the object's clock, and leases up to
   * `ask.leaseUnits` more for `ask.leaseMs` when the key is far from every limit. One row per ring
   * for a grant, nothing for a denial. Synchronous up to the alarm, so no other call interleaves;
   * the output gate holds the answer until the rows are durable.
   */
  take(limits: readonly LimitSpec[], ask: Ask): Decision | Promise<Decision> {
    try {
      const log = this.#logFor(limits);
      const { decision, writes } = log.take(this.clock(), ask);
      this.#write(writes);
      if (writes.length === 0 || this.#alarmAt !== null) return decision;
      this.#alarmAt = log.idleAt;
      return this.ctx.storage.setAlarm(this.#alarmAt).then(() => decision);
    } catch (e) {
      return Promise.reject(e); // as from an async method: invalid input is a rejection
    }
  }

  /**
   * Takes back `units` of a lease (its `recordedAt`) that the caller will never use. Units whose
   * record has left every window are skipped. Returns the units' rows written.
   */
  giveBack(limits: readonly LimitSpec[], recordedAt: readonly number[], units: number): number {
    const log = this.#logFor(limits);
    const writes = log.giveBack(recordedAt, units);
    this.#write(writes);
    return writes.length;
  }

  /** The key's state now, consuming nothing and writing nothing. */
  peek(limits: readonly LimitSpec[]): Decision {
    return this.#logFor(limits).peek(this.clock());
  }

  /** The object's clock in ms. The only place time is read; tests may replace it. */
  clock(): number {
    return Date.now();
  }

  /** Deletes the key's state once nothing in it counts any more; otherwise re-arms. */
  override async alarm(): Promise<void> {
    this.#alarmAt = null;
    const idleAt = this.#log ? this.#log.idleAt : this.#storedIdleAt();
    if (idleAt === null || idleAt <= this.clock()) {
      this.#log = null;
      await this.ctx.storage.deleteAll();
      this.#createTables();
      return;
    }
    this.#alarmAt = idleAt;
    await this.ctx.storage.setAlarm(idleAt);
  }

  #write(rows: readonly SlotRow[]): void {
    for (const w of rows) this.#sql.exec(UPSERT, w.ring, w.key, w.ts, w.cost);
  }

  #createTables(): void {
    // WITHOUT ROWID: the key is the row, so writing it writes one row, not a row and an index entry.
    this.#sql.exec(
      "CREATE TABLE IF NOT EXISTS grants (ring INTEGER NOT NULL, key INTEGER NOT NULL, ts INTEGER NOT NULL, cost INTEGER NOT NULL, PRIMARY KEY (ring, key)) WITHOUT ROWID",
    );
    this.#sql.exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID");
    // 0.1.0 kept one 1ms ring in `slots (slot, ts, cost)`: carry its rows over once.
    const old = this.#sql.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'slots'").toArray();
    if (old.length > 0) {
      this.#sql.exec("INSERT OR REPLACE INTO grants (ring, key, ts, cost) SELECT 1, slot, ts, cost FROM slots");
      this.#sql.exec("DROP TABLE slots");
    }
  }

  /** Without a log in memory (no call since a restart): the newest stored slot plus the stored longest window. */
  #storedIdleAt(): number | null {
    const row = this.#sql
      .exec<{ ts: number | null; w: string | null }>(
        "SELECT (SELECT MAX(ts) FROM grants) AS ts, (SELECT v FROM meta WHERE k = 'longest_window_ms') AS w",
      )
      .one();
    if (row.ts === null) return null;
    return row.ts + Number(row.w ?? 0);
  }

  /** The log for these limits: built from storage on first use, rebuilt when the limits change. */
  #logFor(limits: readonly LimitSpec[]): KeyLog {
    if (this.#log !== null && sameLimits(this.#log, limits)) return this.#log;
    const rows = this.#sql
      .exec<{ ring: number; key: number; ts: number; cost: number }>("SELECT ring, key, ts, cost FROM grants")
      .toArray();
    const { log, rewrite } = KeyLog.restore(limits, rows, this.clock());
    if (rewrite) this.#rewrite(log.rows());
    const longest = String(Math.max(...log.limits.map((l) => l.windowMs)));
    const stored = this.#sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'longest_window_ms'").toArray()[0];
    if (stored?.v !== longest) {
      this.#sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('longest_window_ms', ?)", longest);
    }
    this.#log = log;
    return log;
  }

  #rewrite(rows: readonly SlotRow[]): void {
    this.ctx.storage.transactionSync(() => {
      this.#sql.exec("DELETE FROM grants");
      this.#write(rows);
    });
  }
}
