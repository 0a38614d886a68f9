/**
 * @module Everything one key stores, store by store (docs/design.md, "Architecture"), opened at the current schema:
 * the budgets' logs, the controls (block, penalty, override), the meters (quotas and credits), usage, concurrency
 * slots, once-only ids and kept answers. It answers when the key next needs waking and forgets what has stopped counting.
 */

import { Budgets } from "./budgets.ts";
import { Controls } from "./controls.ts";
import { SlotStore } from "./inflight.ts";
import { KeptAnswers } from "./kept.ts";
import type { Meta } from "./meta.ts";
import { MeterStore } from "./meters.ts";
import { OnceIds } from "./once.ts";
import { openStorage } from "./schema.ts";
import type { Db } from "./sql.ts";
import { UsageStore } from "./usage.ts";

/**
 * How long a key's state is kept after nothing in it counts any more, before the idle alarm deletes it (ms): a day.
 * Rows under windows of a day or less are read as counting a day after the newest (budgets.ts, `UNSTORED_WINDOW_MS`),
 * so such a key's state is kept two days after its last grant. A key seen again within them writes no state afresh —
 * its alarm, one of the two rows a rare key's first grant writes (a window over a day adds its `meta` row) — and its
 * alarm re-arms about once every two days while it is seen. Kept, a key's state costs storage: a rare key's object is
 * four SQLite pages, ~16 KB (docs/design.md, "A key at rest"), about $0.0000033 a month at $0.20/GB-month, so a day of
 * it is ~1/9 of the $0.000001 its alarm's row costs at $1 per million rows; a key never seen again pays its days once.
 */
export const IDLE_KEEP_MS = 86_400_000;

/** When the idle alarm deletes a key idle from `idleAt` on ({@link IDLE_KEEP_MS} later; ±∞ stay). */
export function sweepAt(idleAt: number): number {
  return idleAt + IDLE_KEEP_MS;
}

export class KeyStores {
  readonly db: Db;
  readonly meta: Meta;
  readonly budgets: Budgets;
  readonly controls: Controls;
  readonly meters: MeterStore;
  readonly usage: UsageStore;
  readonly slots: SlotStore;
  readonly once: OnceIds;
  readonly kept: KeptAnswers;

  /** @param clock the object's clock (ms) */
  constructor(storage: DurableObjectStorage, clock: () => number) {
    const { db, meta } = openStorage(storage);
    this.db = db;
    this.meta = meta;
    this.budgets = new Budgets(db, meta, clock);
    this.controls = new Controls(meta);
    this.meters = new MeterStore(meta);
    this.usage = new UsageStore(db, meta);
    this.slots = new SlotStore(db);
    this.once = new OnceIds(db);
    this.kept = new KeptAnswers(db);
  }

  /**
   * When nothing stored counts any more: the grants' last window, the controls, the quotas' periods, the slots, and the
   * answers kept for calls that may still be sent again (kept.ts).
   */
  idleAt(): number {
    const counts = Math.max(
      this.budgets.idleAt(),
      this.controls.idleAt(),
      this.meters.quotasEnd(),
      this.slots.idleAt(),
    );
    return Math.max(counts, this.kept.keptUntil());
  }

  /**
   * The idle alarm at `now`: drops usage past retention; {@link IDLE_KEEP_MS} after nothing counts any more, forgets the
   * key's state — all of it, or all but what outlives idleness (a credit balance, usage within retention, once-only ids
   * still kept).
   * Returns when it next needs waking (null: never; +∞ while an override without expiry keeps the state).
   */
  async sweep(now: number): Promise<number | null> {
    const pruneAt = this.usage.prune(now);
    const deleteAt = sweepAt(this.idleAt());
    if (deleteAt > now) {
      this.once.forget(now);
      return Math.min(deleteAt, pruneAt ?? Number.POSITIVE_INFINITY);
    }
    if (!this.meters.hasCredits() && pruneAt === null) {
      this.#forget(false);
      this.usage.drop();
      await this.db.deleteAll();
      return null;
    }
    this.db.transaction(() => {
      this.#forget(true);
      this.once.forget(now);
    });
    return pruneAt;
  }

  /** Forgets the idle state in memory, and its rows when `rows`. */
  #forget(rows: boolean): void {
    if (rows) this.budgets.clear();
    else this.budgets.drop();
    this.kept.clear(rows);
    this.controls.clear(rows);
    this.meters.clear(rows);
    this.slots.clear(rows);
  }
}
