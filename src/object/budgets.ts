/**
 * @module The key's budgets (`budget_slots`): the key's own log and its routes' logs (docs/configuration.md, "Per-route
 * budgets") in one table keyed by budget, one row per ring slot a grant touched; and for a budget with a window over a
 * day the longest window its rows were written under (`meta` rows `window:<budget>`), so the alarm knows when they stop
 * counting without the logs in memory. A budget without such a row counts a day after its newest row.
 */

import type { RouteBudget } from "../core/budgets.ts";
import type { LimitSpec } from "../core/limits.ts";
import { KeyLog } from "../core/log.ts";
import type { SlotRow } from "../core/ring.ts";
import type { Meta } from "./meta.ts";
import type { Db } from "./sql.ts";

/** The key's own budget in `budget_slots` and the logs; a route's budget is its route's name (never empty). */
export const KEY_BUDGET = "";

const WINDOW = "window:";

/**
 * The longest window a budget's rows are read as counting for when none is stored (ms): a day. A budget whose windows
 * are all this long or shorter keeps no `window:` row — its rows count until a day after the newest, never earlier than
 * they really stop counting and at most a day later — so a key's first grant writes one row fewer (docs/design.md, "A
 * key at rest"). A longer window is stored.
 */
export const UNSTORED_WINDOW_MS = 86_400_000;

/** The longest window of a log's limits (−∞: none, quotas alone). */
function longestOf(log: KeyLog): number {
  return Math.max(...log.limits.map((l) => l.windowMs));
}

// One table for every budget of the key: its own (budget '') and its routes' (the route's name). WITHOUT ROWID: the key
// is the row, so writing it writes one row, not a row and an index entry.
const DDL =
  "CREATE TABLE IF NOT EXISTS budget_slots (budget TEXT NOT NULL, ring INTEGER NOT NULL, key INTEGER NOT NULL, ts INTEGER NOT NULL, cost INTEGER NOT NULL, PRIMARY KEY (budget, ring, key)) WITHOUT ROWID";

const UPSERT =
  "INSERT INTO budget_slots (budget, ring, key, ts, cost) VALUES (?, ?, ?, ?, ?) ON CONFLICT (budget, ring, key) DO UPDATE SET ts = excluded.ts, cost = excluded.cost";

/**
 * What a log is wanted for: `decide` keeps it in memory (built from storage on first use, rebuilt and rewritten when
 * the limits change); `read` builds one from storage without writing or keeping it; `refund` takes the one in memory
 * when it was built for the limits, else one built from rows that fit them as they are (null otherwise).
 */
export type LogUse = "decide" | "read" | "refund";

/** Whether `log` was built for these limits (same N, W and tick, in order): else it must be rebuilt. */
function builtFor(log: KeyLog, limits: readonly LimitSpec[]): boolean {
  const have = log.limits;
  if (!Array.isArray(limits) || have.length !== limits.length) return false;
  return have.every((a, i) => {
    const b = limits[i] as LimitSpec;
    return a.limit === b.limit && a.windowMs === b.windowMs && (b.tickMs === undefined || a.tickMs === b.tickMs);
  });
}

/** Checks that a route's budget is named. */
export function checkRoute(route: RouteBudget): void {
  if (typeof route.name !== "string" || route.name.length === 0) {
    throw new RangeError(`route.name: expected a non-empty string, got ${JSON.stringify(route.name)}`);
  }
}

export class Budgets {
  readonly #db: Db;
  readonly #meta: Meta;
  readonly #clock: () => number;
  /** The logs in memory, by budget. */
  readonly #logs = new Map<string, KeyLog>();

  constructor(db: Db, meta: Meta, clock: () => number) {
    this.#db = db;
    this.#meta = meta;
    this.#clock = clock;
  }

  /** A budget's log under `limits`, for `use` ({@link LogUse}); null only for a refund that cannot be given back. */
  log(budget: string, limits: readonly LimitSpec[], use: "decide" | "read"): KeyLog;
  log(budget: string, limits: readonly LimitSpec[], use: LogUse): KeyLog | null;
  log(budget: string, limits: readonly LimitSpec[], use: LogUse): KeyLog | null {
    const have = this.#logs.get(budget);
    if (have !== undefined && builtFor(have, limits)) return have;
    if (use === "refund" && have !== undefined) return null;
    if (use === "read" && !this.#db.has("budget_slots")) return new KeyLog(limits);
    const { log, rewrite } = KeyLog.restore(limits, this.#rows(budget), this.#clock());
    if (use === "read") return log;
    if (use === "refund") return rewrite ? null : log;
    if (rewrite) {
      this.#db.transaction(() => {
        this.#db.run("DELETE FROM budget_slots WHERE budget = ?", budget);
        this.write(budget, log.rows());
      });
    }
    this.#logs.set(budget, log);
    this.#keepWindow(budget, log);
    return log;
  }

  /** A route's log to decide on, checked to be named. */
  route(route: RouteBudget): KeyLog {
    checkRoute(route);
    return this.log(route.name, route.limits, "decide");
  }

  /** Writes a budget's rows (one per slot touched). */
  write(budget: string, rows: readonly SlotRow[]): void {
    if (rows.length === 0) return;
    if (!this.#db.has("budget_slots")) {
      this.#db.ensure("budget_slots", DDL);
      // The schema's version is in the statement that made `meta` (schema.ts): made with the key's first rows even when
      // no `meta` row is written, or the key's storage would be read as older than versions and migrated when it loads.
      if (!this.#meta.exists) this.#meta.restamp();
    }
    for (const w of rows) this.#db.run(UPSERT, budget, w.ring, w.key, w.ts, w.cost);
  }

  /** When nothing the budgets hold counts any more (−∞: nothing): the logs in memory, else their stored rows. */
  idleAt(): number {
    let at = this.#storedIdleAt();
    for (const log of this.#logs.values()) at = Math.max(at, this.idleAtOf(log));
    return at;
  }

  /**
   * When a budget's log stops counting, read as its stored rows are (−∞: empty): its newest slot plus its longest
   * window, or plus {@link UNSTORED_WINDOW_MS} when no window is longer — never before `log.idleAt`. The alarm is armed
   * from this while the log is in memory and re-checked from the rows when it fires: read alike, they agree, and an
   * alarm that finds no grant since deletes the state rather than being set again.
   */
  idleAtOf(log: KeyLog): number {
    let newest = Number.NEGATIVE_INFINITY;
    for (const ring of log.rings) newest = Math.max(newest, ring.newest);
    return newest + Math.max(longestOf(log), UNSTORED_WINDOW_MS);
  }

  /**
   * Forgets the key's grants up to now under `limits` (an operator's reset): route budgets never lease, so all they
   * recorded goes (their logs are rebuilt on next use). Units recorded later still count.
   */
  forget(limits: readonly LimitSpec[]): void {
    const through = this.log(KEY_BUDGET, limits, "decide").forget(this.#clock());
    for (const budget of [...this.#logs.keys()]) if (budget !== KEY_BUDGET) this.#logs.delete(budget);
    if (this.#db.has("budget_slots")) this.#db.run("DELETE FROM budget_slots WHERE ts <= ?", through);
  }

  /** Forgets every budget (the key went idle): memory, rows and windows. */
  clear(): void {
    this.#logs.clear();
    if (this.#db.has("budget_slots")) this.#db.run("DELETE FROM budget_slots");
    this.#meta.deletePrefixed(WINDOW);
  }

  /** Forgets the logs in memory only (the database was deleted). */
  drop(): void {
    this.#logs.clear();
  }

  /**
   * Keeps the longest window a budget's rows count for, when it is over {@link UNSTORED_WINDOW_MS}: the key's follows
   * its limits; a route's only grows.
   */
  #keepWindow(budget: string, log: KeyLog): void {
    if (log.limits.length === 0) return; // quotas alone: nothing in budget_slots
    const longest = longestOf(log);
    const stored = this.#meta.get(WINDOW + budget);
    if (longest <= UNSTORED_WINDOW_MS) {
      // Read as a day instead. The key's stored window is stale (its limits had a longer one); a route's shorter than
      // its longest (written before windows of a day or less went unstored) would end its rows too soon.
      if (stored !== undefined && (budget === KEY_BUDGET || Number(stored) < longest))
        this.#meta.delete(WINDOW + budget);
      return;
    }
    // Routes of several plans may share a name: the longest window wins.
    const keep = budget !== KEY_BUDGET && stored !== undefined && Number(stored) >= longest;
    if (!keep && stored !== String(longest)) this.#meta.set(WINDOW + budget, String(longest));
  }

  /** A budget's stored rows. */
  #rows(budget: string): SlotRow[] {
    if (!this.#db.has("budget_slots")) return [];
    return this.#db.all<{ ring: number; key: number; ts: number; cost: number }>(
      "SELECT ring, key, ts, cost FROM budget_slots WHERE budget = ?",
      budget,
    );
  }

  /**
   * When the stored rows stop counting: each budget's newest row plus the longest window it was written under, or
   * {@link UNSTORED_WINDOW_MS} when none is stored.
   */
  #storedIdleAt(): number {
    if (!this.#db.has("budget_slots")) return Number.NEGATIVE_INFINITY;
    const windows = new Map(this.#meta.prefixed(WINDOW).map(({ k, v }) => [k, Number(v)]));
    let at = Number.NEGATIVE_INFINITY;
    const newest = this.#db.all<{ budget: string; ts: number }>(
      "SELECT budget, MAX(ts) AS ts FROM budget_slots GROUP BY budget",
    );
    for (const { budget, ts } of newest) at = Math.max(at, ts + (windows.get(budget) ?? UNSTORED_WINDOW_MS));
    return at;
  }

  /**
   * Migration: carries over earlier versions' rows, once. 0.1.0 kept one 1ms ring in `slots (slot, ts, cost)`; 0.2.0
   * the key's rows in `grants (ring, key, ts, cost)` and the routes' in `route_grants (route, …)`, with the key's
   * longest window in `meta` as `longest_window_ms` and the routes' longest as `route_window_ms`.
   */
  static fromLegacy(db: Db, meta: Meta): void {
    if (db.has("slots") || db.has("grants") || db.has("route_grants")) db.ensure("budget_slots", DDL);
    if (db.has("slots")) {
      db.run(
        "INSERT OR REPLACE INTO budget_slots (budget, ring, key, ts, cost) SELECT '', 1, slot, ts, cost FROM slots",
      );
      db.drop("slots");
    }
    if (db.has("grants")) {
      db.run(
        "INSERT OR REPLACE INTO budget_slots (budget, ring, key, ts, cost) SELECT '', ring, key, ts, cost FROM grants",
      );
      db.drop("grants");
    }
    const routeWindow = meta.get("route_window_ms");
    if (db.has("route_grants")) {
      db.run(
        "INSERT OR REPLACE INTO budget_slots (budget, ring, key, ts, cost) SELECT route, ring, key, ts, cost FROM route_grants",
      );
      // Each route's rows keep counting for the longest route window 0.2.0 knew.
      const routes = db.all<{ route: string }>("SELECT DISTINCT route FROM route_grants");
      if (routeWindow !== undefined) {
        for (const { route } of routes)
          if (meta.get(WINDOW + route) === undefined) meta.set(WINDOW + route, routeWindow);
      }
      db.drop("route_grants");
    }
    const keyWindow = meta.get("longest_window_ms");
    if (keyWindow !== undefined && meta.get(WINDOW) === undefined) meta.set(WINDOW, keyWindow);
    meta.delete("longest_window_ms", "route_window_ms");
  }
}
