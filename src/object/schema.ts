/**
 * @module The schema's version and its ordered migrations. A key's storage carries the version it was written under in
 * the statement that made its `meta` table (a comment SQLite keeps in `sqlite_master`: no row of its own, so a new key
 * writes nothing more for it); an object that loads older storage runs each later migration once, in one transaction
 * with the new version. Storage from before versions (0.1.0 to 0.3.0) is version 0. SQLite's `user_version` would be
 * the natural place, but workerd refuses the pragma (SQLITE_AUTH).
 */

import { Budgets } from "./budgets.ts";
import { KeptAnswers } from "./kept.ts";
import { Meta } from "./meta.ts";
import { OnceIds } from "./once.ts";
import { Db } from "./sql.ts";

/** One step from the version before it to `version`. */
export interface Migration {
  readonly version: number;
  readonly description: string;
  readonly up: (db: Db, meta: Meta) => void;
}

/** Every migration, oldest first; the last one's version is the current one. */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: "0.1.0's slots and 0.2.0's grants and route_grants into budget_slots, with their windows",
    up: Budgets.fromLegacy,
  },
  { version: 2, description: "0.3.0's refund and top-up ids out of meta into once_ids", up: OnceIds.fromMeta },
  { version: 3, description: "kept_answers: each state-changing call's answer by its id", up: KeptAnswers.create },
];

/** The version this code writes. */
export const SCHEMA_VERSION = (MIGRATIONS.at(-1) as Migration).version;

/**
 * Opens the key's storage: a new key stores nothing until its first write (its `meta` table is then made under the
 * current version); stored state of an older version is migrated first.
 *
 * @throws Error for storage written by a newer version than this code knows (a rollback): nothing is changed
 */
export function openStorage(storage: DurableObjectStorage): { db: Db; meta: Meta } {
  const db = new Db(storage);
  const meta = new Meta(db, SCHEMA_VERSION);
  if (!db.empty) migrate(db, meta);
  return { db, meta };
}

/**
 * Runs the migrations the stored version has not had, then stamps the current version (the `meta` table made anew,
 * its rows kept), all in one transaction: a key is migrated once, on its first load after an upgrade.
 */
function migrate(db: Db, meta: Meta): void {
  const stored = meta.version;
  if (stored > SCHEMA_VERSION) {
    throw new Error(`storage is at schema version ${stored}, newer than this code's ${SCHEMA_VERSION}`);
  }
  if (stored === SCHEMA_VERSION) return;
  db.transaction(() => {
    for (const m of MIGRATIONS) if (m.version > stored) m.up(db, meta);
    meta.restamp();
  });
}
