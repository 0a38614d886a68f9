/**
 * @module Ids of what must happen once: refunds (a grant given back twice gives back nothing the second time) and
 * top-ups (a top-up sent again adds nothing). One row per id in the `once_ids` table, with when it may be forgotten:
 * a refund's id when giving the grant back would take nothing anyway, a top-up's never.
 */

import type { Meta } from "./meta.ts";
import type { Db } from "./sql.ts";

const DDL =
  "CREATE TABLE IF NOT EXISTS once_ids (kind TEXT NOT NULL, id TEXT NOT NULL, forget_at INTEGER, PRIMARY KEY (kind, id)) WITHOUT ROWID";

/** What an id is of. */
export type OnceKind = "refund" | "topup";

/** Checks an id (1 to 128 characters) of `what` (named in the error). */
export function checkId(id: unknown, what: string): asserts id is string {
  if (typeof id !== "string" || id.length === 0 || id.length > 128)
    throw new RangeError(`id: expected ${what}'s id (1 to 128 characters)`);
}

export class OnceIds {
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
  }

  /** Whether the id was seen (and is still kept). */
  seen(kind: OnceKind, id: string): boolean {
    if (!this.#db.has("once_ids")) return false;
    return this.#db.first("SELECT 1 AS seen FROM once_ids WHERE kind = ? AND id = ?", kind, id) !== undefined;
  }

  /** Keeps the id until `forgetAt` (ms; null: for good). */
  remember(kind: OnceKind, id: string, forgetAt: number | null): void {
    this.#db.ensure("once_ids", DDL);
    this.#db.run("INSERT OR REPLACE INTO once_ids (kind, id, forget_at) VALUES (?, ?, ?)", kind, id, forgetAt);
  }

  /** Forgets the ids whose time has come by `now`. */
  forget(now: number): void {
    if (this.#db.has("once_ids")) this.#db.run("DELETE FROM once_ids WHERE forget_at <= ?", now);
  }

  /** Migration: 0.3.0 kept the ids as `meta` rows `refund:<id>` (when to forget it) and `topup:<id>` (for good). */
  static fromMeta(db: Db, meta: Meta): void {
    const once = new OnceIds(db);
    const kinds = [
      ["refund", "refund:"],
      ["topup", "topup:"],
    ] as const;
    for (const [kind, prefix] of kinds) {
      for (const { k, v } of meta.prefixed(prefix)) once.remember(kind, k, kind === "refund" ? Number(v) : null);
      meta.deletePrefixed(prefix);
    }
  }
}
