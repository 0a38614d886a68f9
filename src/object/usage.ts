/**
 * @module The key's usage (docs/configuration.md, "Usage"): one row per day in the `usage` table — requests and their
 * cost, written with the grant, refunds subtracted — and the spec it is kept under (the `meta` row `usage`), which the
 * alarm prunes by.
 */

import { checkUsage, keptFrom, type UsagePeriod, type UsageSpec, usageBy, usageDay } from "../core/usage.ts";
import type { Meta } from "./meta.ts";
import type { Db } from "./sql.ts";

const DDL =
  "CREATE TABLE IF NOT EXISTS usage (day INTEGER PRIMARY KEY, requests INTEGER NOT NULL, cost INTEGER NOT NULL) WITHOUT ROWID";

/** A range of usage asked for: days or months overlapping `[from, to)`. */
export interface UsageRange {
  readonly period: "day" | "month";
  readonly from: number;
  readonly to: number;
}

export class UsageStore {
  readonly #db: Db;
  readonly #meta: Meta;
  /** The spec last stored (JSON), so that a grant rewrites it only when it changed; and as checked. */
  #text: string | null = null;
  #kept: UsageSpec | null = null;

  constructor(db: Db, meta: Meta) {
    this.#db = db;
    this.#meta = meta;
  }

  /** Counts a grant in the usage of the day of `t` under `spec` (its row; the spec's row when it changed). */
  count(spec: UsageSpec, t: number, counted: { requests: number; cost: number }): void {
    if (this.#text === null && this.#db.has("usage")) this.stored();
    const kept = this.#kept;
    const checked =
      kept !== null && kept.zone === spec?.zone && kept.keepDays === spec.keepDays ? kept : checkUsage(spec);
    this.#db.ensure("usage", DDL);
    if (checked !== kept) {
      const text = JSON.stringify(checked);
      if (this.#text !== text) this.#meta.set("usage", text);
      this.#text = text;
      this.#kept = checked;
    }
    this.#db.run(
      "INSERT INTO usage (day, requests, cost) VALUES (?, ?, ?) ON CONFLICT (day) DO UPDATE SET requests = requests + excluded.requests, cost = cost + excluded.cost",
      usageDay(checked, t),
      counted.requests,
      counted.cost,
    );
  }

  /**
   * Takes a refunded grant of `units` granted at `at` off its day (`requests`: 1, or 0 for a settle's unused units: the
   * request still counts); whether the key keeps usage.
   */
  refund(at: number, units: number, requests: 0 | 1 = 1): boolean {
    const spec = this.#db.has("usage") ? this.stored() : null;
    if (spec === null) return false;
    this.#db.run(
      "UPDATE usage SET requests = MAX(0, requests - ?), cost = MAX(0, cost - ?) WHERE day = ?",
      requests,
      units,
      usageDay(spec, at),
    );
    return true;
  }

  /** Adds a settle's debt of `units` used by `t` to the day of `t` (no request: it counted already), if kept. */
  charge(t: number, units: number): void {
    const spec = this.#db.has("usage") ? this.stored() : null;
    if (spec !== null && units > 0) this.count(spec, t, { requests: 0, cost: units });
  }

  /**
   * The usage per day or month overlapping the range under `spec`, within its retention at `now`, without days whose
   * requests were all refunded; nothing written.
   */
  query(spec: UsageSpec, range: UsageRange, now: number): UsagePeriod[] {
    const checked = checkUsage(spec);
    const rows = this.#db.has("usage")
      ? this.#db.all<{ day: number; requests: number; cost: number }>(
          // A day whose every request was refunded (0 requests, cost 0) had no use: left out like a day without any.
          "SELECT day, requests, cost FROM usage WHERE day >= ? AND (requests > 0 OR cost > 0)",
          keptFrom(checked, now),
        )
      : [];
    return usageBy(checked, rows, range);
  }

  /** Drops the days past retention; returns when the oldest day kept leaves it (ms), or null when none is kept. */
  prune(now: number): number | null {
    if (!this.#db.has("usage")) return null;
    const kept = this.stored();
    if (kept === null) return null;
    this.#db.run("DELETE FROM usage WHERE day < ?", keptFrom(kept, now));
    const oldest = this.#db.first<{ day: number | null }>("SELECT MIN(day) AS day FROM usage")?.day ?? null;
    return oldest === null ? null : oldest + (kept.keepDays + 1) * 86_400_000;
  }

  /** The spec last stored, or null. */
  stored(): UsageSpec | null {
    const text = this.#meta.get("usage");
    if (text === undefined) return null;
    this.#text = text;
    this.#kept = JSON.parse(text) as UsageSpec;
    return this.#kept;
  }

  /** Forgets the spec in memory (the database was deleted). */
  drop(): void {
    this.#text = null;
    this.#kept = null;
  }
}
