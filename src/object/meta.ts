/**
 * @module The `meta` table: one row per fact the key keeps beside its tables, as text under a key. Which keys exist and
 * what they mean belongs to the store that writes them (controls.ts, meters.ts, usage.ts, budgets.ts); this module only
 * reads and writes rows. The statement that makes the table carries the schema's version (schema.ts) in a comment,
 * which SQLite keeps in `sqlite_master`: a key's storage knows its version without a row of its own.
 */

import type { Db } from "./sql.ts";

/** The table, made under schema version `version`. */
function ddlOf(version: number): string {
  return `CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL /* schema ${version} */) WITHOUT ROWID`;
}

/** The schema version a `meta` table was made under (0: before versions, or no table). */
export function versionOf(ddl: string | undefined): number {
  return Number(/\/\* schema (\d+) \*\//.exec(ddl ?? "")?.[1] ?? 0);
}

/** The first string after every string that starts with `prefix`. */
function after(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

export class Meta {
  readonly #db: Db;
  readonly #ddl: string;

  /** @param version the schema version a table made now is stamped with */
  constructor(db: Db, version: number) {
    this.#db = db;
    this.#ddl = ddlOf(version);
  }

  /** The schema version the table was made under (0: none, or made before versions). */
  get version(): number {
    return versionOf(this.#db.ddl("meta"));
  }

  /** Makes the table anew under this code's version (a migration's last step), its rows kept. */
  restamp(): void {
    const rows = this.exists ? this.#db.all<{ k: string; v: string }>("SELECT k, v FROM meta") : [];
    this.#db.drop("meta");
    this.#db.ensure("meta", this.#ddl);
    for (const { k, v } of rows) this.#db.run("INSERT INTO meta (k, v) VALUES (?, ?)", k, v);
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
    this.#db.ensure("meta", this.#ddl);
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
