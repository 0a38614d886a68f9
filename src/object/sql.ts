/**
 * @module The object's one way into its SQLite storage: a small helper over `SqlStorage` that knows which tables exist
 * (read once when the object loads) and creates a store's table on the store's first write, so a key nobody wrote to
 * stores nothing. Each table belongs to one store module (docs/design.md, "Architecture"), which alone names it.
 */

/** A row's values as SQLite binds them. */
type Binding = string | number | null;

export class Db {
  readonly #storage: DurableObjectStorage;
  readonly #sql: SqlStorage;
  /** The tables that exist, each with the statement that made it (as SQLite keeps it in `sqlite_master`). */
  readonly #tables = new Map<string, string>();
  /** Rows written through {@link run} since the object loaded: a call that changed nothing leaves it as it was. */
  #written = 0;

  constructor(storage: DurableObjectStorage) {
    this.#storage = storage;
    this.#sql = storage.sql;
    const tables = this.all<{ name: string; sql: string }>(
      "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\'",
    );
    for (const { name, sql } of tables) this.#tables.set(name, sql);
  }

  /** Whether the key stores anything at all. */
  get empty(): boolean {
    return this.#tables.size === 0;
  }

  /** Whether `table` exists. */
  has(table: string): boolean {
    return this.#tables.has(table);
  }

  /** The statement `table` was made with, if it exists. */
  ddl(table: string): string | undefined {
    return this.#tables.get(table);
  }

  /** Creates `table` with `ddl` unless it exists (a store's first write). */
  ensure(table: string, ddl: string): void {
    if (this.#tables.has(table)) return;
    this.#sql.exec(ddl);
    this.#tables.set(table, ddl);
  }

  /** Drops `table` if it exists. */
  drop(table: string): void {
    if (!this.#tables.delete(table)) return;
    this.#sql.exec(`DROP TABLE IF EXISTS ${table}`);
  }

  /** Runs a statement that returns nothing. */
  run(query: string, ...bindings: Binding[]): void {
    this.#written += this.#sql.exec(query, ...bindings).rowsWritten;
  }

  /** Rows written by statements since the object loaded (SQLite's count: inserted, updated and deleted rows). */
  get written(): number {
    return this.#written;
  }

  /** Every row a query returns. */
  all<T extends Record<string, SqlStorageValue>>(query: string, ...bindings: Binding[]): T[] {
    return this.#sql.exec<T>(query, ...bindings).toArray();
  }

  /** The first row a query returns, if any. */
  first<T extends Record<string, SqlStorageValue>>(query: string, ...bindings: Binding[]): T | undefined {
    return this.all<T>(query, ...bindings)[0];
  }

  /** Runs `fn` in one transaction. */
  transaction<T>(fn: () => T): T {
    return this.#storage.transactionSync(fn);
  }

  /** Deletes everything the key stores (tables, rows and alarm). */
  async deleteAll(): Promise<void> {
    await this.#storage.deleteAll();
    this.#tables.clear();
  }
}

/**
 * Runs `fn`, turning a synchronous throw into a rejection, as from an async method: an RPC method that answers at once
 * when it can rejects on invalid input.
 */
export function rejecting<T>(fn: () => T | Promise<T>): T | Promise<T> {
  try {
    return fn();
  } catch (e) {
    return Promise.reject(e);
  }
}
