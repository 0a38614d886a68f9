/**
 * @module What an adapter tells the pipeline about a request (src/pipeline/index.ts), and what it gets back.
 */

import type { Background } from "../client/index.ts";
import type { RateLimitResult } from "../client/result.ts";
import type { AddressBudget } from "../config/types.ts";
import type { Identity } from "./key.ts";

type Maybe<T> = T | Promise<T>;

/** One request as an adapter describes it to the pipeline. */
export interface Asking {
  /**
   * The request's key, read by the adapter (null: it has none — the `anonymous` limits per client
   * address, or `401`). A function is called only once the request is known to cost something.
   */
  readonly key: string | null | (() => Maybe<string | null | undefined>);
  /**
   * The client's address (`CF-Connecting-IP`): names the budget of a request without a key
   * (`anonymous`), and the `ip` budget a request with a key must also fit.
   */
  readonly ip?: string | null;
  /** The request's account (checked): with the plan's `account` limits, it must fit them too; else the key's own. */
  readonly account?: string;
  /** The request's units; by default the first matching `costs` rule's (needs `method` and `path`), else 1. */
  readonly cost?: number | (() => Maybe<number>);
  /** A route's name; by default the plan's first route matching `method` and `path`, if any. */
  readonly route?: string;
  readonly method?: string;
  /** The request's normalised path as rules match it (called only when a rule needs it). */
  readonly path?: () => string;
  /** The runtime's `waitUntil`: lease refills, give-backs and refunds outlive the response. */
  readonly bg?: Background;
  /**
   * The adapter frees the request's concurrency slot when its response has ended (`Pipeline.sent`,
   * `Pipeline.release`): with a plan's `concurrency`, a granted request takes one.
   */
  readonly inFlight?: boolean;
}

/** A request decided against one address budget alone (`Pipeline.decideAddress`). */
export interface AddressAsking {
  readonly budget: AddressBudget;
  /** The client's address (`CF-Connecting-IP`). */
  readonly ip: string | null;
  readonly bg?: Background;
}

/** How `Pipeline.decideRequest` reads a request, where the configuration's rules are not what is wanted. */
export interface RequestOptions {
  /** The request's key (`undefined`, `null` or `""`: it has none); by default read as the `key` setting says. */
  readonly key?: () => Maybe<string | null | undefined>;
  /** The request's units; by default the first matching `costs` rule's, else 1. 0: not limited. */
  readonly cost?: number | (() => Maybe<number>);
  /** The runtime's `ExecutionContext` (or anything with `waitUntil`). */
  readonly ctx?: Background;
}

/** What an adapter adds to {@link RequestOptions} (the proxy): what it has already read, and an observer. */
export interface AdapterOptions extends RequestOptions {
  /** The request's normalised path as rules match it, when the adapter has normalised it already. */
  readonly path?: string;
  /** Called with the decision and its key's object name before the answer is built. */
  readonly observe?: DecisionObserver;
}

/** A request's decision and the identity it was made for (what a refund needs). */
export interface Decided {
  readonly result: RateLimitResult;
  readonly identity: Identity;
}

/** Observes every decision with its key's object name (the proxy's tests and embedders). */
export type DecisionObserver = (result: RateLimitResult, name: string) => void;
