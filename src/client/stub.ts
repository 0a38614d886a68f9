/**
 * @module The key's object as the client calls it: the namespace that hands out a stub per object
 * name, the RPC methods the client uses, and the runtime's `waitUntil` for work after a response.
 */

import type { RouteBudget } from "../core/budgets.ts";
import type { Decision } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { Ask, Settlement } from "../core/log.ts";

/**
 * What a client needs of the `RateLimiter` namespace (`[[durable_objects.bindings]]`): a stub per
 * object name with the object's RPC methods. A `DurableObjectNamespace<RateLimiter>` is one; tests
 * may pass their own.
 */
export interface LimiterNamespace {
  getByName(name: string): LimiterStub;
}

/** The object's RPC methods the client calls (see src/object/index.ts). */
export interface LimiterStub {
  take(limits: readonly LimitSpec[], ask: Ask, route?: RouteBudget): Promise<Decision>;
  refund(
    limits: readonly LimitSpec[],
    grant: { readonly id: string; readonly recordedAt: readonly number[]; readonly units: number },
    route?: RouteBudget,
  ): Promise<boolean>;
  settle(limits: readonly LimitSpec[], settle: readonly Settlement[]): Promise<number>;
  release(id: string): Promise<boolean>;
  renew(id: string, timeoutMs: number): Promise<boolean>;
  peek(limits: readonly LimitSpec[], cost: number, route?: RouteBudget): Promise<Decision>;
  reset(limits: readonly LimitSpec[], buckets: number, routes?: readonly RouteBudget[]): Promise<unknown>;
}

/** Keeps background work (lease refills, give-backs) alive after the response: the runtime's `waitUntil`. */
export interface Background {
  waitUntil?(promise: Promise<unknown>): void;
}
