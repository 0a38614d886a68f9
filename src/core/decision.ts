/** @module The decision: one plain value from the core, over the RPC, to the headers and the deny cache. */

/** One limit's state after a decision. */
export interface LimitStatus {
  /** Cost units that could still be granted right now (after this decision); never negative. */
  readonly remaining: number;
  /**
   * Milliseconds until `remaining` next grows: when the oldest slot leaves the window or, while the
   * limit is used up, when a cost of 1 fits again. 0 when nothing is in the window.
   */
  readonly resetMs: number;
  /** True when this limit alone refused the request. */
  readonly exceeded: boolean;
}

/** Units granted ahead of use, to be spent by the caller until its own clock passes `sentAt + lifetimeMs`. */
export interface Lease {
  /** Units beyond the request's own cost. */
  readonly units: number;
  /** How long the caller may spend them, measured on its own clock from just before it asked. */
  readonly lifetimeMs: number;
  /** Where each ring recorded the lease (ms): hand these back with unused units. */
  readonly recordedAt: readonly number[];
}

/** A limit with its name, as an operator's per-key override gives it (the Worker's config `Limit`). */
export interface NamedLimit {
  readonly limit: number;
  readonly windowMs: number;
  readonly tickMs: number;
  readonly name: string;
}

/** The outcome of one request (and, with a lease, of units granted ahead). */
export interface Decision {
  /** Whether the request's cost was granted and recorded. */
  readonly allowed: boolean;
  /** The cost exceeds some limit's `N`: it can never pass (`retryAfterMs` is `Infinity`). */
  readonly neverAllowed: boolean;
  /** The cost asked for (0 for a lease asked ahead of any request). */
  readonly cost: number;
  /** The log's clock when it decided (ms; monotone). */
  readonly now: number;
  /**
   * 0 when allowed. Otherwise the exact wait: this request would be granted at `now + retryAfterMs`
   * if nothing else were granted or given back meanwhile, and not a millisecond earlier.
   */
  readonly retryAfterMs: number;
  /** Absolute time (ms) before which no request of cost 1 can pass; `now` when one could pass now. */
  readonly blockedUntil: number;
  /** One entry per limit, in the order the limits were given. */
  readonly limits: readonly LimitStatus[];
  /**
   * Present when the request was sent with calendar quotas (docs/configuration.md, "Quotas and credits"): each one's
   * state after the decision, in the order sent (`resetMs`: to the next period's start).
   */
  readonly quotas?: readonly LimitStatus[];
  /**
   * Present when the request was sent with the plan's credits (docs/configuration.md, "Quotas and credits"): the
   * key's balance after the decision, and whether it was too small for the request's cost (nothing was spent).
   */
  readonly credits?: { readonly balance: number; readonly exceeded: boolean };
  /** Units granted ahead, or null (per-request decision, or a denial). */
  readonly lease: Lease | null;
  /**
   * Present when the request's own cost was recorded: where each ring recorded it (ms), to give
   * exactly those units back on a refund.
   */
  readonly recordedAt?: readonly number[];
  /**
   * Present when an operator's block refused the request: the block's end (ms). Then `limits`
   * report nothing remaining until then, and `retryAfterMs` runs at least to it.
   */
  readonly blockedBy?: number;
  /**
   * Present when the key's requests in flight filled its concurrency (docs/configuration.md, "Concurrency"): the
   * request was refused at once and nothing recorded, though its rate limits (reported in `limits`) would fit it.
   */
  readonly concurrencyFull?: true;
  /**
   * Present when the request was sent with a penalty (docs/configuration.md, "Penalties"): the refusals the object
   * has counted towards it, still within its span (0 right after a block began). An isolate answers refusals from its
   * deny cache only while they cannot complete the count.
   */
  readonly refusalsSeen?: number;
  /** `"penalty"` when the block refusing the request is a penalty for repeated refusals (docs/configuration.md, "Penalties"), not an operator's. */
  readonly blockCause?: "penalty";
  /**
   * Present when an operator's per-key override was applied instead of the limits sent: the
   * limits decided against, in the order of `limits`.
   */
  readonly limitsOverride?: readonly NamedLimit[];
}
