/**
 * @module Kept answers (docs/design.md, "Nothing lost under faults"): the answer of each call that changed the key's
 * state, by the call's id, for {@link KEEP_MS}. A call sent again because its answer was lost (a dropped connection, the
 * caller's deadline, an object restarted after the change was durable) is answered with the kept answer, and nothing is
 * applied twice. The object writes it in the same synchronous turn as the change, so both commit together (and the
 * output gate holds the answer until they are durable).
 *
 * One row per answer slot in `kept_answers`: a new answer takes the oldest slot whose answer is older than
 * {@link KEEP_MS}, else a new one. A call costs one row written and nothing is ever deleted row by row; the table holds
 * as many rows as calls came within {@link KEEP_MS} at the busiest, and goes with the key's state when it is idle.
 * Answers are kept in storage only where a repeat after a restart could break a limit or bill twice (settlements,
 * meters, a settle's claim: src/object/index.ts says which); the others — a plain grant, which would only count twice,
 * and calls made once by ids of their own — in memory, at no row.
 *
 * Each answer is kept with the method that made it: a call sent again gets it only from the same method; a settle may
 * read any (a settle sent with the id of a request's take answers for that take: src/client/calls.ts).
 */

import type { Db } from "./sql.ts";

const DDL =
  "CREATE TABLE IF NOT EXISTS kept_answers (slot INTEGER PRIMARY KEY, id TEXT NOT NULL, at INTEGER NOT NULL, answer TEXT NOT NULL)";

const UPSERT =
  "INSERT INTO kept_answers (slot, id, at, answer) VALUES (?, ?, ?, ?) ON CONFLICT (slot) DO UPDATE SET id = excluded.id, at = excluded.at, answer = excluded.answer";

/**
 * How long an answer is kept (ms): longer than any caller sends a call again (`RESEND_WITHIN_MS` in
 * src/client/policy.ts: 30 s), with room for the clocks of isolate and object to differ.
 */
export const KEEP_MS = 60_000;

/**
 * The most answers kept in memory (the oldest go first): a key deciding a thousand calls a second keeps its last few
 * seconds' — every call sent again at once, or claimed a second later — in a few MB, not a minute's in tens of MB. An
 * answer gone early is only a plain grant that may count twice, never over a limit.
 */
export const IN_MEMORY_MAX = 4_096;

/** The method a kept answer is of. */
export type KeptMethod = "take" | "refund" | "settle" | "recover" | "topUp" | "release";

/** An answer as kept: its method and itself. */
export interface Kept {
  readonly method: KeptMethod;
  readonly answer: unknown;
}

/** Non-finite numbers (a refusal's `retryAfterMs: Infinity`), which JSON has no form for, as tagged strings. */
const NON_FINITE = "\u0000number:";

function encode(kept: Kept): string {
  return JSON.stringify(kept, (_, v: unknown) =>
    typeof v === "number" && !Number.isFinite(v) ? `${NON_FINITE}${String(v)}` : v,
  );
}

function decode(text: string): Kept {
  return JSON.parse(text, (_, v: unknown) =>
    typeof v === "string" && v.startsWith(NON_FINITE) ? Number(v.slice(NON_FINITE.length)) : v,
  ) as Kept;
}

/** An answer slot in memory: which call's answer it holds, and since when. */
interface Slot {
  readonly slot: number;
  readonly id: string;
  readonly at: number;
}

export class KeptAnswers {
  readonly #db: Db;
  /** Slots by call id, and in the order they were written (oldest first); read from the table on first use. */
  #byId: Map<string, Slot> | null = null;
  #order: Slot[] = [];
  #slots = 0;
  /** Answers kept in memory only, by call id, oldest first (Map order): of calls that wrote no row. */
  readonly #inMemory = new Map<string, Kept & { readonly at: number }>();

  constructor(db: Db) {
    this.#db = db;
  }

  /** The answer kept for `id` at `now`, if there is one not yet {@link KEEP_MS} old. */
  answer(id: string, now: number): Kept | undefined {
    const held = this.#inMemory.get(id);
    if (held !== undefined) return now - held.at < KEEP_MS ? held : undefined;
    const s = this.#index().get(id);
    if (s === undefined || now - s.at >= KEEP_MS) return undefined;
    const row = this.#db.first<{ answer: string }>(
      "SELECT answer FROM kept_answers WHERE slot = ? AND id = ?",
      s.slot,
      id,
    );
    return row === undefined ? undefined : decode(row.answer);
  }

  /**
   * Keeps `kept` for `id` from `now`: in storage (one row written: a slot whose answer is too old to be asked for, or
   * a new one) when `durable`, else in memory only.
   */
  keep(id: string, now: number, kept: Kept, durable: boolean): void {
    if (!durable) {
      for (const [old, k] of this.#inMemory) {
        if (now - k.at < KEEP_MS && this.#inMemory.size < IN_MEMORY_MAX) break;
        this.#inMemory.delete(old);
      }
      this.#inMemory.set(id, { ...kept, at: now });
      return;
    }
    const byId = this.#index();
    const oldest = this.#order[0];
    const reuse = oldest !== undefined && now - oldest.at >= KEEP_MS;
    if (reuse) {
      this.#order.shift();
      if (byId.get(oldest.id) === oldest) byId.delete(oldest.id);
    }
    const s: Slot = { slot: reuse ? oldest.slot : this.#slots++, id, at: now };
    this.#db.ensure("kept_answers", DDL);
    this.#db.run(UPSERT, s.slot, id, now, encode(kept));
    byId.set(id, s);
    this.#order.push(s);
  }

  /** When the newest answer stops being kept (−∞: none). */
  keptUntil(): number {
    const newest = this.#index().size === 0 ? undefined : this.#order.at(-1);
    return newest === undefined ? Number.NEGATIVE_INFINITY : newest.at + KEEP_MS;
  }

  /** Forgets every answer kept in storage (the key's state was deleted, or dropped with the table). */
  clear(rows: boolean): void {
    if (rows) this.#db.drop("kept_answers");
    this.#byId = new Map();
    this.#order = [];
    this.#slots = 0;
  }

  /** The slots by id, read once from the table (a restarted object finds the answers its last instance kept). */
  #index(): Map<string, Slot> {
    if (this.#byId !== null) return this.#byId;
    const byId = new Map<string, Slot>();
    const rows = this.#db.has("kept_answers")
      ? this.#db.all<{ slot: number; id: string; at: number }>(
          "SELECT slot, id, at FROM kept_answers ORDER BY at, slot",
        )
      : [];
    for (const r of rows) {
      const s: Slot = { slot: r.slot, id: r.id, at: r.at };
      byId.set(r.id, s);
      this.#order.push(s);
      this.#slots = Math.max(this.#slots, r.slot + 1);
    }
    this.#byId = byId;
    return byId;
  }

  /** Migration: the table, for a key stored before kept answers (a new key makes it with its first kept answer). */
  static create(db: Db): void {
    db.ensure("kept_answers", DDL);
  }
}
