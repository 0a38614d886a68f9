/**
 * @module The `meta` table: one row per fact the key keeps beside its tables, as text under a key. Which keys exist and
 * what they mean belongs to the store that writes them (controls.ts, meters.ts, usage.ts, budgets.ts, schema.ts); this
 * module only reads and writes rows.
 */

import type { Db } from "./sql.ts";

const DDL = "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID";

/** The first string after every string that starts with `prefix`. */
function after(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

export class Meta {
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
  }

  /** Whether the table exists (a key that never wrote a row has none). */
  get exists(): boolean {
    return this.#db.has("meta");
  }

  /** The row's value, if any. */
  get(k: string): string | undefined {
    if (!this.exists) return undefined;
    return this.#db.first<{ v: string }>("SELECT v FROM meta WHERE k = ?", k)?.v;
  }

  /** The values of the rows `ks` that exist, by key. */
  getAll(ks: readonly string[]): Map<string, string> {
    if (!this.exists || ks.length === 0) return new Map();
    const rows = this.#db.all<{ k: string; v: string }>(
      `SELECT k, v FROM meta WHERE k IN (${ks.map(() => "?").join(", ")})`,
      ...ks,
    );
    return new Map(rows.map(({ k, v }) => [k, v]));
  }

  /** The row's value read as JSON, or null. */
  json<T>(k: string): T | null {
    const v = this.get(k);
    return v === undefined ? null : (JSON.parse(v) as T);
  }

  /** The rows whose keys start with `prefix`, without it. */
  prefixed(prefix: string): { k: string; v: string }[] {
    if (!this.exists) return [];
    return this.#db
      .all<{ k: string; v: string }>("SELECT k, v FROM meta WHERE k >= ? AND k < ?", prefix, after(prefix))
      .map(({ k, v }) => ({ k: k.slice(prefix.length), v }));
  }

  /** Writes a row (the table is made by the first). */
  set(k: string, v: string): void {
    this.#db.ensure("meta", DDL);
    this.#db.run("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", k, v);
  }

  /** Deletes rows by key. */
  delete(...ks: string[]): void {
    if (!this.exists || ks.length === 0) return;
    this.#db.run(`DELETE FROM meta WHERE k IN (${ks.map(() => "?").join(", ")})`, ...ks);
  }

  /** Deletes the rows whose keys start with `prefix`. */
  deletePrefixed(prefix: string): void {
    if (this.exists) this.#db.run("DELETE FROM meta WHERE k >= ? AND k < ?", prefix, after(prefix));
  }
}
