/**
 * @module The wire between an isolate and a key's object (docs/design.md, "Architecture"): what a call asks
 * ({@link TakeAsk}: the log's ask and what only the object reads), what a refund carries, the object's RPC methods
 * the client calls, the namespace that hands out a stub per object name, and the runtime's `waitUntil`. Types only:
 * the client and the object both import it; it imports only the core.
 */

import type { RouteBudget } from "./core/budgets.ts";
import type { CreditSpec } from "./core/credits.ts";
import type { Decision } from "./core/decision.ts";
import type { LimitSpec } from "./core/limits.ts";
import type { Ask, Settlement, Use } from "./core/log.ts";
import type { PenaltySpec } from "./core/penalty.ts";
import type { QuotaSpec } from "./core/quota.ts";
import type { ConcurrencySpec } from "./core/slots.ts";
import type { UsagePeriod, UsageSpec } from "./core/usage.ts";

/**
 * What a key's object counts beside the limits, as the plan has it (docs/configuration.md, "Quotas and credits"):
 * decided with them all or nothing.
 */
export interface MeterSpecs {
  /** The plan's calendar quotas: a lease granted with a request counts in them at once and ends by their period's end. */
  readonly quotas?: readonly QuotaSpec[];
  /** The plan's credits: each grant spends its cost (and a lease its units) from the key's balance. */
  readonly credits?: CreditSpec;
  /** The plan keeps usage: each grant counts in its day's row (docs/configuration.md, "Usage"). */
  readonly usage?: UsageSpec;
}

/** What a call asks of a key's object: the log's {@link Ask}, and what the object reads around the log. */
export interface TakeAsk extends Ask, MeterSpecs {
  /** The key's plan's penalty for repeated refusals (docs/configuration.md, "Penalties"): the object counts them. */
  readonly penalty?: PenaltySpec;
  /** Refusals the caller answered from its deny cache since its last call: they count towards the penalty too. */
  readonly refused?: number;
  /**
   * The request's concurrency slot (docs/configuration.md, "Concurrency"): its id and the plan's `concurrency`. A
   * grant takes the slot; a request finding every slot held is refused at once, nothing recorded.
   */
  readonly slot?: { readonly id: string } & ConcurrencySpec;
  /** Grants the caller made alone while the object could not answer: recorded before the decision. */
  readonly alone?: AloneReport;
  /** The call's id ({@link CallId}): sent again with it, the call is answered as the first time, applied once. */
  readonly call?: CallId;
}

/**
 * The id of a call that may change a key's state (docs/design.md, "Nothing lost under faults"): unique per call (the
 * isolate's prefix and a count), 1 to 128 characters. The object keeps the answer of each id that changed anything for
 * a minute (src/object/kept.ts) and answers a call sent again with it, applying nothing twice.
 */
export type CallId = string;

/**
 * The grants an isolate made alone while the key's object could not answer (`failure_mode = "local"`), reported when
 * it answers again: for the key's own budget, and per route with its own budget. The object records them, never
 * earlier than their use.
 */
export interface AloneReport {
  readonly uses: readonly Use[];
  readonly routes: readonly { readonly budget: RouteBudget; readonly uses: readonly Use[] }[];
  /** The id of the call carrying it on its own (`recover`), {@link CallId}. */
  readonly call?: CallId;
}

/** A grant to give back (`refund`): its id (each is given back once), where its units were recorded, how many. */
export interface RefundedGrant {
  readonly id: string;
  readonly recordedAt: readonly number[];
  readonly units: number;
  /**
   * When it was granted (the decision's `now`), for a key with calendar quotas: its units go back to the quotas while
   * that period lasts (and to its credits, whenever).
   */
  readonly at?: number;
  /**
   * Give back to the key's calendar quotas only (the period of `at`), not to its windows: a unit spent from a lease
   * whose uses were settled since — its record was moved to its use and stays counted until it leaves the window, but
   * its quota unit, counted when the lease was granted, goes back (`recordedAt` is then empty).
   */
  readonly quotasOnly?: boolean;
  /**
   * A settle (docs/configuration.md, "Settled costs"), not a refund: `units` (0 or more) are what the grant reserved
   * and did not use, given back as a refund gives back, but the request itself still counts (usage keeps it); the
   * grant's id is spent as a refund's is, so it settles once and is refunded never after.
   */
  readonly settle?: boolean;
  /**
   * A settle for more than was reserved: the units used beyond the grant's, recorded at the object's clock whatever
   * the limits say (the key waits them out) and counted in its quotas, credits (down to 0) and usage at that time.
   */
  readonly debt?: number;
  /** The id of the call carrying it ({@link CallId}): not the grant's `id`, which is spent once whatever the call. */
  readonly call?: CallId;
}

/**
 * What a client needs of the `RateLimiter` namespace (`[[durable_objects.bindings]]`): a stub per
 * object name with the object's RPC methods. A `DurableObjectNamespace<RateLimiter>` is one; tests
 * may pass their own.
 */
export interface LimiterNamespace {
  getByName(name: string): LimiterStub;
}

/** What a top-up did: the key's balance after it, and whether it added the credits (false: its id was seen before). */
export interface TopUp {
  readonly balance: number;
  readonly applied: boolean;
}

/** The object's RPC methods the client calls (see src/object/index.ts). */
export interface LimiterStub {
  take(limits: readonly LimitSpec[], ask: TakeAsk, route?: RouteBudget): Promise<Decision>;
  refund(limits: readonly LimitSpec[], grant: RefundedGrant, route?: RouteBudget): Promise<boolean>;
  settle(limits: readonly LimitSpec[], settle: readonly Settlement[], call?: CallId): Promise<number>;
  release(id: string, call?: CallId): Promise<boolean>;
  renew(id: string, timeoutMs: number): Promise<boolean>;
  peek(limits: readonly LimitSpec[], cost: number, route?: RouteBudget, meters?: MeterSpecs): Promise<Decision>;
  credit(credits: CreditSpec, add: number, id?: string): Promise<number>;
  topUp(credits: CreditSpec, add: number, id?: string, call?: CallId): Promise<TopUp>;
  usage(
    spec: UsageSpec,
    range: { readonly period: "day" | "month"; readonly from: number; readonly to: number },
  ): Promise<UsagePeriod[]>;
  recover(limits: readonly LimitSpec[], report: AloneReport): Promise<number>;
  reset(limits: readonly LimitSpec[], buckets: number, routes?: readonly RouteBudget[]): Promise<unknown>;
}

/** Keeps background work (lease refills, give-backs) alive after the response: the runtime's `waitUntil`. */
export interface Background {
  waitUntil?(promise: Promise<unknown>): void;
}
