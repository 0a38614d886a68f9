/**
 * @module The RateLimiter Durable Object: one per key, the single writer of that key's log.
 * Loads the log from SQLite once, decides with the pure core, writes the one slot a grant
 * touched (nothing for a denial), and deletes the key's state once it has been idle longer
 * than its longest window.
 */

import { DurableObject } from "cloudflare:workers";
import { type LimitSpec, SlidingLog, type SlotRow } from "./core/sliding-log.ts";
import { encodeDecision, readWireLimits, type WireDecision, type WireLimits } from "./wire.ts";

/** Whether `log` was built for these limits (same N and W, in order): else it must be rebuilt. Allocates nothing. */
function sameLimits(log: SlidingLog, limits: WireLimits): boolean {
  const have = log.limits;
  if (!Array.isArray(limits) || have.length * 2 !== limits.length) return false;
  for (let i = 0; i < have.length; i++) {
    const a = have[i] as LimitSpec;
    if (a.limit !== limits[2 * i] || a.windowMs !== limits[2 * i + 1]) return false;
  }
  return true;
}

const UPSERT_SLOT =
  "INSERT INTO slots (slot, ts, cost) VALUES (?, ?, ?) ON CONFLICT (slot) DO UPDATE SET ts = excluded.ts, cost = excluded.cost";

export class RateLimiter extends DurableObject<Env> {
  readonly #sql: SqlStorage;
  #log: SlidingLog | null = null;
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
   * Decides one request of `cost` against `limits` (`[limit, windowMs, …]`, see src/wire.ts) at
   * the object's clock and records it when granted: one SQL upsert for a grant, nothing for a
   * denial. Synchronous from start to end, so no other call interleaves. It returns a plain
   * value, except when a grant has to set the idle alarm (a key's first grant, and the first
   * after the alarm fired) and for invalid input (a rejected promise). The output gate still
   * holds the answer until the grant's row is durable.
   */
  decide(limits: WireLimits, cost: number): WireDecision | Promise<WireDecision> {
    try {
      return this.#decide(limits, cost);
    } catch (e) {
      return Promise.reject(e); // as from an async method: callers in the object see a rejection
    }
  }

  #decide(limits: WireLimits, cost: number): WireDecision | Promise<WireDecision> {
    const log = this.#logFor(limits);
    const d = log.decide(this.clock(), cost);
    const result = encodeDecision(d);
    const write = d.write;
    if (write === null) return result;
    this.#sql.exec(UPSERT_SLOT, write.slot, write.ts, write.cost);
    if (this.#alarmAt !== null) return result;
    this.#alarmAt = log.idleAt;
    return this.ctx.storage.setAlarm(this.#alarmAt).then(() => result);
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

  #createTables(): void {
    this.#sql.exec(
      "CREATE TABLE IF NOT EXISTS slots (slot INTEGER PRIMARY KEY, ts INTEGER NOT NULL, cost INTEGER NOT NULL)",
    );
    // WITHOUT ROWID: the key is the row, so writing it writes one row, not a row and an index entry.
    this.#sql.exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID");
  }

  /** Without a log in memory (no call since a restart): the newest stored slot plus the stored longest window. */
  #storedIdleAt(): number | null {
    const row = this.#sql
      .exec<{ ts: number | null; w: string | null }>(
        "SELECT (SELECT MAX(ts) FROM slots) AS ts, (SELECT v FROM meta WHERE k = 'longest_window_ms') AS w",
      )
      .one();
    if (row.ts === null) return null;
    return row.ts + Number(row.w ?? 0);
  }

  /** The log for these limits: built from storage on first use, rebuilt when the limits change. */
  #logFor(wire: WireLimits): SlidingLog {
    if (this.#log !== null && sameLimits(this.#log, wire)) return this.#log;
    const limits = readWireLimits(wire);
    const rows = this.#sql
      .exec<{ slot: number; ts: number; cost: number }>("SELECT slot, ts, cost FROM slots")
      .toArray();
    const { log, rewrite } = SlidingLog.restore(limits, rows);
    if (rewrite) this.#rewrite(log.rows());
    const longest = String(Math.max(...limits.map((l) => l.windowMs)));
    const stored = this.#sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'longest_window_ms'").toArray()[0];
    if (stored?.v !== longest) {
      this.#sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('longest_window_ms', ?)", longest);
    }
    this.#log = log;
    return log;
  }

  #rewrite(rows: readonly SlotRow[]): void {
    this.ctx.storage.transactionSync(() => {
      this.#sql.exec("DELETE FROM slots");
      for (const r of rows) this.#sql.exec("INSERT INTO slots (slot, ts, cost) VALUES (?, ?, ?)", r.slot, r.ts, r.cost);
    });
  }
}
