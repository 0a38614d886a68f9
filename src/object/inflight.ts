/**
 * @module The key's concurrency slots (docs/configuration.md, "Concurrency"): one row per request in flight at the
 * origin in the `inflight` table (its id and when it lapses), held in memory as the core's {@link Slots}.
 */

import { type ConcurrencySpec, checkSlotAsk, checkSlotTimeout, Slots } from "../core/slots.ts";
import type { Db } from "./sql.ts";

const DDL = "CREATE TABLE IF NOT EXISTS inflight (id TEXT PRIMARY KEY, expires INTEGER NOT NULL) WITHOUT ROWID";

/** A request's slot as a call asks for it: its id and the plan's concurrency. */
export type SlotAsk = { readonly id: string } & ConcurrencySpec;

export class SlotStore {
  readonly #db: Db;
  #slots: Slots;

  constructor(db: Db) {
    this.#db = db;
    const rows = db.has("inflight") ? db.all<{ id: string; expires: number }>("SELECT id, expires FROM inflight") : [];
    this.#slots = new Slots(rows.map((r) => [r.id, r.expires] as const));
  }

  /** Whether the request `slot` may hold a slot at `now` (its own, or a free one); lapsed slots are dropped first. */
  fits(now: number, slot: SlotAsk): boolean {
    checkSlotAsk(slot);
    for (const id of this.#slots.lapse(now)) this.#db.run("DELETE FROM inflight WHERE id = ?", id);
    return this.#slots.fits(now, slot.id, slot);
  }

  /** Takes the granted request's slot and stores it. */
  take(now: number, slot: SlotAsk): void {
    const taken = this.#slots.take(now, slot.id, slot);
    if (!taken.held) return;
    this.#db.ensure("inflight", DDL);
    this.#db.run("INSERT OR REPLACE INTO inflight (id, expires) VALUES (?, ?)", slot.id, taken.expiresAt);
  }

  /** Frees the slot of the request `id`; false when it held none. */
  release(id: string): boolean {
    if (typeof id !== "string") throw new RangeError("id: expected a request's slot id");
    if (!this.#slots.release(id)) return false;
    this.#db.run("DELETE FROM inflight WHERE id = ?", id);
    return true;
  }

  /** Keeps the slot of the request `id` for `timeoutMs` more from `now`; false when it holds none any more. */
  renew(now: number, id: string, timeoutMs: number): boolean {
    if (typeof id !== "string") throw new RangeError("id: expected a request's slot id");
    checkSlotTimeout(timeoutMs);
    const until = this.#slots.renew(now, id, timeoutMs);
    if (until === null) return false;
    this.#db.run("UPDATE inflight SET expires = ? WHERE id = ?", until, id);
    return true;
  }

  /** Requests holding a slot at `now`. */
  heldAt(now: number): number {
    return this.#slots.heldAt(now);
  }

  /** When the last slot lapses (−∞: none held). */
  idleAt(): number {
    return this.#slots.lastExpiry;
  }

  /** Forgets every slot (the key went idle): memory, and the table unless the database is gone (`rows` false). */
  clear(rows = true): void {
    this.#slots = new Slots();
    if (rows) this.#db.drop("inflight");
  }
}
