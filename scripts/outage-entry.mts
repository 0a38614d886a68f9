/**
 * @module The Worker `npm start -- --outage` runs (scripts/start.ts): the proxy as it ships, with a RateLimiter whose
 * objects for keys starting `down_` answer nothing until `DEMO_OUTAGE_UNTIL` (ms since the epoch) — a hanging object,
 * so a user sees `failure_mode = "local"` decide alone and the object catch up afterwards (docs/configuration.md, "When
 * the object cannot answer"). Nothing of it ships in src/.
 */

import type { RouteBudget } from "../src/core/budgets.ts";
import type { Decision, LimitSpec } from "../src/core/index.ts";
import type { Settlement } from "../src/core/log.ts";
import { RateLimiter as Shipped } from "../src/object/index.ts";
import type { AloneReport, TakeAsk } from "../src/protocol.ts";

export { default } from "../src/proxy/index.ts";

/** A call that never answers. */
const hang = <T,>(): Promise<T> => new Promise<T>(() => {});

export class RateLimiter extends Shipped {
  /** Whether this key's object plays dead now. */
  #down(): boolean {
    const until = Number((this.env as { DEMO_OUTAGE_UNTIL?: string }).DEMO_OUTAGE_UNTIL ?? 0);
    return (this.ctx.id.name ?? "").startsWith("key:down_") && Date.now() < until;
  }

  override take(limits: readonly LimitSpec[], ask: TakeAsk, route?: RouteBudget): Decision | Promise<Decision> {
    return this.#down() ? hang() : super.take(limits, ask, route);
  }

  override settle(
    limits: readonly LimitSpec[],
    settled: readonly Settlement[],
    call?: string,
  ): number | Promise<number> {
    // Answered at once when it answers at all: a dead object's settle fails.
    if (this.#down()) throw new Error("demo outage: this key's object does not answer");
    return super.settle(limits, settled, call);
  }

  override recover(limits: readonly LimitSpec[], report: AloneReport): number | Promise<number> {
    return this.#down() ? hang() : super.recover(limits, report);
  }
}
