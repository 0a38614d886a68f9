/**
 * @module A request decided without its key's object (docs/design.md, "When the object cannot answer"): the call
 * failed or was late, or the object is known down. With `failure_mode = "local"` this isolate decides alone, from its
 * own log of the key at `fallback_share` of each limit; else the failure mode decides (result.ts, `resultOf`).
 */

import type { Decision } from "../core/decision.ts";
import type { SlotAsk } from "./in-flight.ts";
import type { Asked } from "./outcomes.ts";
import type { Parts } from "./parts.ts";
import { LimiterTimeout } from "./policy.ts";
import { aloneBudgets, type LimitRequest, type PeekRequest } from "./request.ts";
import { type GrantRecord, type Handle, type RateLimitResult, type Reason, UNAVAILABLE_RETRY_MS } from "./result.ts";

/** What `e` is when a key's object was not called: it is known down. */
export const NOT_CALLED = Symbol("not called");

export class Without {
  readonly #p: Parts;

  constructor(parts: Parts) {
    this.#p = parts;
  }

  /**
   * `r` without its key's object: the call failed with `e`, or the object is known down ({@link NOT_CALLED}). With
   * `failure_mode = "local"` this isolate decides alone; else the failure mode does.
   */
  decide(r: LimitRequest, slot: SlotAsk | undefined, e: unknown): RateLimitResult {
    const { alone, inFlight } = this.#p;
    // A key with quotas or credits is never decided alone: only its object knows what its period used, its balance.
    if (alone === null || r.plan.meters) return this.failed(r, e);
    if (e !== NOT_CALLED) this.#p.calls.unavailable(e);
    const { name, cost } = r;
    const now = this.#p.now();
    // A concurrency slot alone: counted in this isolate, at the share of the plan's `concurrency`.
    const most = slot ? Math.floor(this.#p.config.fallbackShare * slot.limit) : 0;
    if (slot && !inFlight.fitsAlone(name, most, now)) {
      const d = alone.check(aloneBudgets(r), now, cost);
      return this.alone(r, d, false, { retryAfterMs: UNAVAILABLE_RETRY_MS });
    }
    const budgets = aloneBudgets(r);
    const { decision: d, reportedAt } = alone.take(budgets, now, cost);
    if (!d.allowed) return this.alone(r, d, false, {});
    const held = slot ? inFlight.holdAlone(name, slot, now) : null;
    // Its units are at no object yet (nothing to refund there); a settle finds them here by `alone`.
    const grant: GrantRecord = {
      id: crypto.randomUUID(),
      name,
      limits: budgets.limits,
      recordedAt: [],
      units: cost,
      ...(budgets.route ? { route: budgets.route } : {}),
      alone: reportedAt,
    };
    return this.alone(r, d, true, { handle: { grants: [grant], slot: held } });
  }

  /** `peek()` without the key's object: alone with `failure_mode = "local"`, else the failure mode. */
  peek(r: PeekRequest & { readonly cost: number }, e: unknown = NOT_CALLED): RateLimitResult {
    const { name, plan, cost } = r;
    const route = r.route ?? null;
    if (this.#p.alone === null || plan.meters) return this.failed({ plan, cost, route, name }, e);
    const d = this.#p.alone.check(aloneBudgets({ name, plan, route }), this.#p.now(), cost);
    return this.alone({ plan, cost, route }, d, d.allowed, {});
  }

  /**
   * The object's call was late or failed (`e`), or the object is known down ({@link NOT_CALLED}, `name` its object's):
   * a result for the failure mode. Only a call that failed is logged.
   */
  failed(r: Asked & Pick<LimitRequest, "name">, e: unknown): RateLimitResult {
    const late = e === NOT_CALLED ? this.#p.circuit.late(r.name) : e instanceof LimiterTimeout;
    const reason: Reason = late ? "limiter_timeout" : "limiter_error";
    if (e !== NOT_CALLED) this.#p.calls.unavailable(e);
    return this.#p.results.here(r, { reason, fits: false, at: this.#p.now() });
  }

  /** A decision made alone as a result (reason `limiter_fallback`): the shown limits' states as this isolate sees them. */
  alone(
    r: Asked,
    d: Decision,
    fits: boolean,
    more: { retryAfterMs?: number; handle?: Handle | null },
  ): RateLimitResult {
    return this.#p.results.here(r, {
      reason: "limiter_fallback",
      fits,
      states: d.limits,
      exceeded: fits ? [] : d.limits.map((l) => l.exceeded),
      retryAfterMs: fits ? 0 : (more.retryAfterMs ?? d.retryAfterMs),
      at: d.now,
      handle: more.handle ?? null,
    });
  }
}
