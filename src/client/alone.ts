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

/** How many keys' logs an isolate keeps: beyond, the idle ones go, then the oldest. */
const KEYS_MAX = 10_000;

/** The budgets a request counts in: its key's object `name` under `limits`, and its `route`'s own budget, if any. */
export interface AloneBudgets {
  readonly name: string;
  readonly limits: readonly LimitSpec[];
  readonly route: RouteBudget | null;
}

/** One key's logs: its own budget's, and each route's it was asked with. */
interface KeyAlone {
  readonly limits: readonly LimitSpec[];
  readonly log: FallbackLog;
  readonly routes: Map<string, { readonly budget: RouteBudget; readonly log: FallbackLog }>;
}

export class AloneLogs {
  readonly #share: number;
  readonly #keys = new Map<string, KeyAlone>();

  /** @param share the fallback share (0–1) of each limit a key's requests get alone */
  constructor(share: number) {
    this.#share = share;
  }

  /** A grant of `units` in budgets `b` made at `now` with its object's word: counted here too. */
  saw(b: AloneBudgets, now: number, units: number): void {
    for (const log of this.#logs(b, now)) log.saw(now, units);
  }

  /**
   * Decides a request of `cost` in budgets `b` (the key's and its route's: it must fit both, and is recorded in both or
   * neither) alone
   * at `now`.
   */
  take(b: AloneBudgets, now: number, cost: number): Decision {
    const logs = this.#logs(b, now);
    const checks = logs.map((log) => log.check(now, cost));
    if (!checks.every((d) => d.allowed)) return combine(checks);
    return combine(logs.map((log) => log.take(now, cost)));
  }

  /** Whether a request of `cost` in budgets `b` would be granted alone at `now`; records nothing. */
  check(b: AloneBudgets, now: number, cost: number): Decision {
    return combine(this.#logs(b, now).map((log) => log.check(now, cost)));
  }

  /**
   * What to report for `name` in a call sent at `now` (its grants made alone, per budget), or null when there is
   * nothing, or a report is out already. Follow with {@link answered}.
   */
  report(name: string, now: number): AloneReport | null {
    const k = this.#keys.get(name);
    if (k === undefined || (!k.log.pending && ![...k.routes.values()].some((r) => r.log.pending))) return null;
    const uses = k.log.report(now);
    const routes = [...k.routes.values()]
      .map((r) => ({ budget: r.budget, uses: r.log.report(now) }))
      .filter((r) => r.uses.length > 0);
    if (uses.length === 0 && routes.length === 0) {
      k.log.answered(false);
      for (const r of k.routes.values()) r.log.answered(false);
      return null;
    }
    return { uses, routes };
  }

  /** The call carrying `name`'s latest report came back: `recorded` by the object, or not (it goes again). */
  answered(name: string, recorded: boolean): void {
    const k = this.#keys.get(name);
    if (k === undefined) return;
    k.log.answered(recorded);
    for (const r of k.routes.values()) r.log.answered(recorded);
  }

  /** The logs of budgets `b`, made when missing; a key's limits changed start afresh. */
  #logs(b: AloneBudgets, now: number): FallbackLog[] {
    const { name, limits, route } = b;
    let k = this.#keys.get(name);
    if (k === undefined || k.limits !== limits) {
      if (k === undefined && this.#keys.size >= KEYS_MAX) this.#prune(now);
      k = { limits, log: new FallbackLog(limits, this.#share), routes: new Map() };
      this.#keys.set(name, k);
    }
    if (route === null) return [k.log];
    let r = k.routes.get(route.name);
    if (r === undefined || r.budget.limits !== route.limits) {
      r = { budget: route, log: new FallbackLog(route.limits, this.#share) };
      k.routes.set(route.name, r);
    }
    return [k.log, r.log];
  }

  /**
   * Drops the logs with nothing counting and nothing to report at `now`; when none is, the oldest half (their grants
   * made alone are then never reported: more than 10,000 keys decided alone at once).
   */
  #prune(now: number): void {
    for (const [name, k] of this.#keys) {
      if (k.log.idleAt <= now && [...k.routes.values()].every((r) => r.log.idleAt <= now)) this.#keys.delete(name);
    }
    if (this.#keys.size < KEYS_MAX) return;
    let drop = this.#keys.size / 2;
    for (const name of this.#keys.keys()) {
      if (drop-- <= 0) break;
      this.#keys.delete(name);
    }
  }
}
