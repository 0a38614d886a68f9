/**
 * @module What crosses the RPC between the Worker and the object: flat arrays of numbers.
 *
 * Every call serialises its arguments and its result (structured clone). Arrays of numbers
 * cost less to send than objects with named fields (no keys, no strings), and the limits'
 * names are never needed by the object. The Worker keeps its readable `DecisionResult`;
 * only these two functions and the object see the wire form.
 */

import type { LimitSpec } from "./core/sliding-log.ts";

/** Limits as sent to the object: `[limit₀, windowMs₀, limit₁, windowMs₁, …]`. */
export type WireLimits = readonly number[];

/**
 * A decision as the object sends it back:
 * `[flags, now, retryAfterMs, blockedForMs, remaining₀, resetMs₀, exceeded₀, …]`, where flags is
 * 1 when allowed plus 2 when the cost can never pass, and `exceededᵢ` is 1 or 0.
 */
export type WireDecision = number[];

const HEAD = 4;
const PER_LIMIT = 3;

/** A decision, as the Worker reads it. */
export interface DecisionResult {
  /** Whether the request was granted and recorded. */
  allowed: boolean;
  /** The cost exceeds some limit: it can never pass. */
  neverAllowed: boolean;
  /** The object's clock when it decided (ms). */
  now: number;
  /** 0 when allowed; else the exact wait in ms (`Infinity` when it can never pass). */
  retryAfterMs: number;
  /** ms after `now` before which no request of cost 1 can pass for this key (0: one can now). */
  blockedForMs: number;
  /** Per limit, in the order given. */
  limits: { remaining: number; resetMs: number; exceeded: boolean }[];
}

/** The wire form of `limits` (computed once per plan by the config). */
export function wireLimits(limits: readonly LimitSpec[]): WireLimits {
  const out: number[] = [];
  for (const l of limits) out.push(l.limit, l.windowMs);
  return out;
}

/**
 * The limits the object was sent, checked: pairs of numbers, at least one pair. The numbers
 * themselves are checked by the core.
 *
 * @throws RangeError for anything else
 */
export function readWireLimits(wire: unknown): LimitSpec[] {
  if (!Array.isArray(wire) || wire.length === 0 || wire.length % 2 !== 0) {
    throw new RangeError("limits: expected [limit, windowMs, …] with at least one pair");
  }
  const out: LimitSpec[] = [];
  for (let i = 0; i < wire.length; i += 2) out.push({ limit: wire[i], windowMs: wire[i + 1] });
  return out;
}

/** The fields of a decision the object sends; `limits[i]` per limit. */
export interface DecisionFields {
  readonly allowed: boolean;
  readonly neverAllowed: boolean;
  readonly now: number;
  readonly retryAfterMs: number;
  readonly blockedUntil: number;
  readonly limits: readonly { readonly remaining: number; readonly resetMs: number; readonly exceeded: boolean }[];
}

/**
 * The wire form of a decision (read once, field by field: the core computes them on read).
 * Built by pushing, never `new Array(n)`: V8 serialises an array with holes, even filled ones,
 * as a sparse array (every index a key), which costs more than the objects this replaces.
 */
export function encodeDecision(d: DecisionFields): WireDecision {
  const statuses = d.limits;
  const now = d.now;
  const out = [(d.allowed ? 1 : 0) + (d.neverAllowed ? 2 : 0), now, d.retryAfterMs, d.blockedUntil - now];
  for (let i = 0; i < statuses.length; i++) {
    const l = statuses[i] as (typeof statuses)[number];
    out.push(l.remaining, l.resetMs, l.exceeded ? 1 : 0);
  }
  return out;
}

/** The Worker's reading of a decision from the wire. */
export function decodeDecision(w: WireDecision): DecisionResult {
  const flags = w[0] as number;
  const limits: DecisionResult["limits"] = new Array((w.length - HEAD) / PER_LIMIT);
  for (let i = 0, j = HEAD; j < w.length; i++, j += PER_LIMIT) {
    limits[i] = { remaining: w[j] as number, resetMs: w[j + 1] as number, exceeded: w[j + 2] === 1 };
  }
  return {
    allowed: (flags & 1) !== 0,
    neverAllowed: (flags & 2) !== 0,
    now: w[1] as number,
    retryAfterMs: w[2] as number,
    blockedForMs: w[3] as number,
    limits,
  };
}
