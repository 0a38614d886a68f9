/**
 * @module The isolate's own logs of its keys, for `failure_mode = "local"` (docs/design.md, "When the object cannot
 * answer"): per key (and per route with its own budget), every grant this isolate made or saw its object make, at
 * its use; while the key's object cannot answer, requests are decided against them at `fallback_share` of each
 * limit, and the grants made so are reported to the object when it answers again.
 */

import { combine, type RouteBudget } from "../core/budgets.ts";
import type { Decision } from "../core/decision.ts";
import { FallbackLog } from "../core/fallback.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { AloneReport } from "../protocol.ts";

/** How many keys' logs an isolate keeps at most: beyond, the idle ones go, then the least recently used. */
const KEYS_MAX = 10_000;

/**
 * How many slots its logs may hold in memory together (about 20 bytes each: 20 MB): checked every
 * {@link CHECK_EVERY} new keys, and kept under by dropping the idle logs, then the least recently used.
 */
const SLOTS_MAX = 1_000_000;

/** New keys between two counts of the logs' slots. */
const CHECK_EVERY = 256;

/** The budgets a request counts in: its key's object `name` under `limits`, and its `route`'s own budget, if any. */
export interface AloneBudgets {
  readonly name: string;
  readonly limits: readonly LimitSpec[];
  readonly route: RouteBudget | null;
}

/** A grant made alone, as its handle records it (result.ts, `GrantRecord`). */
export interface AloneGrant {
  readonly id: string;
  readonly name: string;
  readonly limits: readonly LimitSpec[];
  readonly route?: RouteBudget | undefined;
  /** When its use is reported to the key's object, per budget (its key's, then its route's): this isolate's clock. */
  readonly alone: readonly number[];
}

/** What settling a grant made alone did here: the units given back, and whether its debt waits to be reported. */
export interface AloneSettled {
  readonly returned: number;
  readonly owed: boolean;
}

/** One key's logs: its own budget's, and each route's it was asked with. */
interface KeyAlone {
  readonly limits: readonly LimitSpec[];
  readonly log: FallbackLog;
  readonly routes: Map<string, { readonly budget: RouteBudget; readonly log: FallbackLog }>;
}

/** Every log of a key: its own budget's, then its routes'. */
function logsOf(k: KeyAlone): FallbackLog[] {
  return [k.log, ...[...k.routes.values()].map((r) => r.log)];
}

/** How many keys' logs, and slots in them, an isolate keeps at most (defaults {@link KEYS_MAX}, {@link SLOTS_MAX}). */
export interface AloneBounds {
  readonly keys: number;
  readonly slots: number;
}

export class AloneLogs {
  readonly #share: number;
  readonly #bounds: AloneBounds;
  /** By object name, least recently used first. */
  readonly #keys = new Map<string, KeyAlone>();
  /** New keys since the logs' slots were last counted. */
  #newKeys = 0;
  /** Ids of grants made alone and settled here, with when each is forgotten (ms): each settles once. */
  readonly #settled = new Map<string, number>();

  /** @param share the fallback share (0–1) of each limit a key's requests get alone */
  constructor(share: number, bounds: AloneBounds = { keys: KEYS_MAX, slots: SLOTS_MAX }) {
    this.#share = share;
    this.#bounds = bounds;
  }

  /** Keys with a log here (for tests and measurements). */
  get size(): number {
    return this.#keys.size;
  }

  /** A grant of `units` in budgets `b` made at `now` with its object's word: counted here too. */
  saw(b: AloneBudgets, now: number, units: number): void {
    for (const log of this.#logs(b, now)) log.saw(now, units);
  }

  /**
   * Decides a request of `cost` in budgets `b` (the key's and its route's: it must fit both, and is recorded in
   * both or neither) alone at `now`. Granted, `reportedAt` says when its use is reported to the object, per budget.
   */
  take(b: AloneBudgets, now: number, cost: number): { decision: Decision; reportedAt: number[] } {
    const logs = this.#logs(b, now);
    const checks = logs.map((log) => log.check(now, cost));
    if (!checks.every((d) => d.allowed)) return { decision: combine(checks), reportedAt: [] };
    const taken = logs.map((log) => log.take(now, cost));
    return { decision: combine(taken), reportedAt: taken.map((d, i) => (logs[i] as FallbackLog).reportedAt(d.now)) };
  }

  /**
   * Settles a grant made alone here (`g`: its key's object name, its route, when its use is reported per budget) at
   * `now` (docs/llm.md, "Settled costs"), once per grant id: gives back `unused` units while they are not yet
   * reported, and with `queue`, counts a `debt` to report with the key's next call. Null for a grant settled before;
   * else the units given back (the fewest of its budgets: the rest stay counted) and whether the debt was queued —
   * not when this isolate keeps no log of the key (another isolate's grant, or a log dropped since).
   */
  settle(g: AloneGrant, s: { unused: number; debt: number; queue: boolean }, now: number): AloneSettled | null {
    if (this.#settled.has(g.id)) return null;
    this.#forgetSettled(now);
    this.#settled.set(g.id, now + this.#longest(g));
    const logs = this.#known(g);
    if (logs.length === 0) return { returned: 0, owed: false };
    const returned = Math.min(...logs.map((log, i) => (s.unused > 0 ? log.giveBack(g.alone[i] ?? 0, s.unused) : 0)));
    const owed = s.debt > 0 && s.queue;
    if (owed) for (const log of logs) log.owe(now, s.debt);
    return { returned, owed };
  }

  /** Counts a settled grant's `debt` here at `now`, to report with the key's next call: false when no log of it is kept here. */
  owe(g: AloneGrant, debt: number, now: number): boolean {
    const logs = this.#known(g);
    for (const log of logs) log.owe(now, debt);
    return logs.length > 0;
  }

  /** The logs of a grant made alone (its key's, its route's), as kept here: none when its key's log is not. */
  #known(g: AloneGrant): FallbackLog[] {
    const k = this.#keys.get(g.name);
    if (k === undefined) return [];
    const route = g.route === undefined ? undefined : k.routes.get(g.route.name);
    return route === undefined ? [k.log] : [k.log, route.log];
  }

  /** How long a settled grant's id is kept: its longest window (after that, nothing of it is given back here). */
  #longest(g: AloneGrant): number {
    return Math.max(...[...g.limits, ...(g.route?.limits ?? [])].map((l) => l.windowMs));
  }

  /** Forgets the ids of settled grants whose time is over at `now` (kept in the order they were settled). */
  #forgetSettled(now: number): void {
    for (const [id, until] of this.#settled) {
      if (until > now) break;
      this.#settled.delete(id);
    }
  }

  /** Whether a request of `cost` in budgets `b` would be granted alone at `now`; records nothing. */
  check(b: AloneBudgets, now: number, cost: number): Decision {
    return combine(this.#logs(b, now).map((log) => log.check(now, cost)));
  }

  /** Whether grants made alone for `name` wait to be recorded by its object (a report of them may be out). */
  pending(name: string): boolean {
    const k = this.#keys.get(name);
    return k !== undefined && logsOf(k).some((log) => log.pending);
  }

  /**
   * What a call for `name` sent at `now` reports: its grants made alone, per budget. Null when there are none, or a
   * report of the key is out already (one at a time: each comes back to exactly the grants it carried). Follow a
   * report with {@link answered}.
   */
  report(name: string, now: number): AloneReport | null {
    const k = this.#keys.get(name);
    if (k === undefined) return null;
    const logs = logsOf(k);
    if (logs.some((log) => log.reporting) || !logs.some((log) => log.pending)) return null;
    const uses = k.log.report(now) ?? [];
    const routes = [...k.routes.values()]
      .map((r) => ({ budget: r.budget, uses: r.log.report(now) ?? [] }))
      .filter((r) => r.uses.length > 0);
    if (uses.length === 0 && routes.length === 0) return null;
    return { uses, routes };
  }

  /** The call carrying `name`'s report came back: `recorded` by the object, or not (its grants go again). */
  answered(name: string, recorded: boolean): void {
    const k = this.#keys.get(name);
    if (k !== undefined) for (const log of logsOf(k)) log.answered(recorded);
  }

  /** The logs of budgets `b`, made when missing (a key's limits changed: afresh); the key becomes the most recent. */
  #logs(b: AloneBudgets, now: number): FallbackLog[] {
    const { name, limits, route } = b;
    let k = this.#keys.get(name);
    if (k !== undefined) this.#keys.delete(name);
    if (k === undefined || k.limits !== limits) {
      if (k === undefined && (this.#keys.size >= this.#bounds.keys || ++this.#newKeys >= CHECK_EVERY)) this.#bound(now);
      k = { limits, log: new FallbackLog(limits, this.#share), routes: new Map() };
    }
    this.#keys.set(name, k);
    if (route === null) return [k.log];
    let r = k.routes.get(route.name);
    if (r === undefined || r.budget.limits !== route.limits) {
      r = { budget: route, log: new FallbackLog(route.limits, this.#share) };
      k.routes.set(route.name, r);
    }
    return [k.log, r.log];
  }

  /**
   * Keeps the logs under their bounds of keys and slots at `now`: the idle ones go (nothing
   * counting, nothing to report), then the least recently used until half the bounds (their grants made alone, if
   * any, are then never reported).
   */
  #bound(now: number): void {
    this.#newKeys = 0;
    let slots = 0;
    for (const [name, k] of this.#keys) {
      const logs = logsOf(k);
      if (logs.every((log) => log.idleAt <= now)) this.#keys.delete(name);
      else for (const log of logs) slots += log.slots;
    }
    const { keys, slots: most } = this.#bounds;
    if (this.#keys.size < keys && slots <= most) return;
    for (const [name, k] of this.#keys) {
      if (this.#keys.size <= keys / 2 && slots <= most / 2) break;
      for (const log of logsOf(k)) slots -= log.slots;
      this.#keys.delete(name);
    }
  }
}
