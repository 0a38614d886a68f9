// A stand-in for workerd's Durable Objects in plain Node, for the mutation gate only (vitest.stryker.config.ts): Stryker
// instruments code in its own Node process and cannot reach inside workerd, so the Durable Object and integration tests
// run there against this. workerd stays the judge: `npm test` runs the same tests inside it, and only tests that pass
// there count. What it keeps of the runtime: one instance per name over one SQLite database (node:sqlite), kept across
// eviction; calls through a stub, with arguments and results copied as RPC copies them and a rejection for a throw;
// `blockConcurrencyWhile` holding calls until the constructor's work is done; one alarm per object.
import { DatabaseSync, type StatementSync } from "node:sqlite";

type Row = Record<string, SqlStorageValue>;

/** `ctx.storage.sql` over node:sqlite: `exec` with bindings, a cursor with `toArray`, `one`, `rowsWritten`. */
class Sql {
  readonly #db: DatabaseSync;
  readonly #statements = new Map<string, StatementSync>();

  constructor(db: DatabaseSync) {
    this.#db = db;
  }

  get databaseSize(): number {
    const page = this.#db.prepare("PRAGMA page_size").get() as { page_size: number };
    const count = this.#db.prepare("PRAGMA page_count").get() as { page_count: number };
    return page.page_size * count.page_count;
  }

  exec<T extends Row = Row>(query: string, ...bindings: SqlStorageValue[]) {
    let statement = this.#statements.get(query);
    if (statement === undefined) {
      statement = this.#db.prepare(query);
      this.#statements.set(query, statement);
    }
    const args = bindings as (string | number | null)[];
    const reads = /^\s*(SELECT|PRAGMA|WITH)\b/i.test(query);
    const rows = reads ? (statement.all(...args) as T[]) : [];
    const rowsWritten = reads ? 0 : Number(statement.run(...args).changes);
    return {
      rowsWritten,
      rowsRead: rows.length,
      toArray: (): T[] => rows,
      one: (): T => {
        if (rows.length !== 1) throw new Error(`Expected exactly one result from SQL query, but got ${rows.length}.`);
        return rows[0] as T;
      },
      [Symbol.iterator]: () => rows[Symbol.iterator](),
    };
  }

  /** Forgets prepared statements (their tables were dropped). */
  reset(): void {
    this.#statements.clear();
  }
}

/** What an object keeps across evictions: its database and its alarm. */
class Disk {
  readonly db = new DatabaseSync(":memory:");
  alarm: number | null = null;
}

/** `ctx.storage`, one per instance (as in workerd, where each instance has its own `SqlStorage`), over the object's disk. */
class Storage {
  readonly #disk: Disk;
  readonly db: DatabaseSync;
  readonly sql: Sql;

  constructor(disk: Disk) {
    this.#disk = disk;
    this.db = disk.db;
    this.sql = new Sql(disk.db);
  }

  get alarm(): number | null {
    return this.#disk.alarm;
  }

  set alarm(at: number | null) {
    this.#disk.alarm = at;
  }

  async getAlarm(): Promise<number | null> {
    return this.alarm;
  }

  async setAlarm(at: number | Date): Promise<void> {
    const ms = typeof at === "number" ? at : at.getTime();
    // workerd refuses alarms after 2189 (the reason for MAX_TIME_MS in src/object/index.ts).
    if (!Number.isFinite(ms) || ms > Date.UTC(2189, 0, 1)) throw new TypeError(`setAlarm: invalid time ${ms}`);
    this.alarm = ms;
  }

  async deleteAlarm(): Promise<void> {
    this.alarm = null;
  }

  /** Drops every table and the alarm, as workerd's `deleteAll` does for a SQLite-backed object. */
  async deleteAll(): Promise<void> {
    const tables = this.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[];
    for (const { name } of tables) this.db.exec(`DROP TABLE "${name}"`);
    this.sql.reset();
    this.alarm = null;
  }

  transactionSync<T>(fn: () => T): T {
    this.db.exec("SAVEPOINT tx");
    try {
      const out = fn();
      this.db.exec("RELEASE tx");
      return out;
    } catch (e) {
      this.db.exec("ROLLBACK TO tx");
      this.db.exec("RELEASE tx");
      throw e;
    }
  }
}

/** The `ctx` an object is constructed with. */
class State {
  readonly storage: Storage;
  readonly id: { readonly name: string; toString(): string };
  /** The constructor's `blockConcurrencyWhile` work: calls wait for it. */
  ready: Promise<unknown> = Promise.resolve();

  constructor(name: string, storage: Storage) {
    this.storage = storage;
    this.id = { name, toString: () => name };
  }

  blockConcurrencyWhile<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.ready.then(fn);
    this.ready = run.catch(() => undefined);
    return run;
  }

  waitUntil(_: Promise<unknown>): void {}
}

/** The base class `cloudflare:workers` exports. */
export class DurableObject<Env = unknown> {
  protected readonly ctx: DurableObjectState;
  protected readonly env: Env;

  constructor(ctx: DurableObjectState, env: Env) {
    this.ctx = ctx;
    this.env = env;
  }
}

type Instance = Record<string | symbol, unknown> & { alarm?: () => Promise<void> };
type Constructor = new (ctx: DurableObjectState, env: unknown) => object;

/** One object: its storage, and its live instance until evicted. */
class Slot {
  readonly disk = new Disk();
  #instance: { object: Instance; state: State } | null = null;

  constructor(
    readonly name: string,
    readonly make: Constructor,
  ) {}

  /** The live instance, constructed on first use (after an eviction, anew over the same storage). */
  async live(): Promise<{ object: Instance; state: State }> {
    if (this.#instance === null) {
      const state = new State(this.name, new Storage(this.disk));
      const object = new this.make(state as unknown as DurableObjectState, {}) as Instance;
      this.#instance = { object, state };
    }
    await this.#instance.state.ready;
    return this.#instance;
  }

  evict(): void {
    this.#instance = null;
  }
}

/** A copy as RPC makes one (structured clone; functions are not sent). */
function copy<T>(value: T): T {
  return value === undefined ? value : structuredClone(value);
}

/** A namespace of objects of one class, with `getByName` as the Worker uses it. */
export class Namespace {
  readonly #slots = new Map<string, Slot>();

  constructor(readonly make: Constructor) {}

  slot(name: string): Slot {
    let slot = this.#slots.get(name);
    if (slot === undefined) {
      slot = new Slot(name, this.make);
      this.#slots.set(name, slot);
    }
    return slot;
  }

  getByName(name: string): object {
    const slot = this.slot(name);
    const stub = new Proxy(
      {},
      {
        get: (_, method) => {
          if (method === SLOT) return slot;
          if (method === "then" || typeof method === "symbol") return undefined;
          return async (...args: unknown[]) => {
            const { object } = await slot.live();
            const fn = object[method];
            if (typeof fn !== "function") throw new TypeError(`The RPC receiver does not implement "${method}".`);
            return copy(await (fn as (...a: unknown[]) => unknown).apply(object, copy(args)));
          };
        },
      },
    );
    return stub;
  }
}

const SLOT = Symbol("slot");

/** The object behind a stub from {@link Namespace.getByName}. */
export function slotOf(stub: unknown): Slot {
  const slot = (stub as Record<symbol, Slot | undefined>)[SLOT];
  if (slot === undefined) throw new TypeError("not a stub of the Node stand-in's namespace");
  return slot;
}
