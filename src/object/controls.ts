/**
 * @module What steers a key beside its limits (docs/operating.md): a block (an operator's, or a penalty's for repeated
 * refusals; docs/configuration.md, "Penalties") and an override of its limits. Each is a `meta` row or two
 * (`block_until`, `block_cause`, `penalty`, `override`), read once when the object loads and written when it changes.
 */

import type { NamedLimit } from "../core/decision.ts";
import { NO_PENALTY, type PenaltySpec, type PenaltyState, refused } from "../core/penalty.ts";
import type { Meta } from "./meta.ts";

/**
 * The latest time an operator may give (a block's end, an override's expiry), and the latest alarm set:
 * 2100-01-01T00:00:00Z. The runtime refuses alarms a little after 2189 and `Date` ends in 275760; an alarm due later is
 * set here and re-armed when it fires.
 */
export const MAX_TIME_MS = Date.UTC(2100, 0, 1);

/** Per-key limits an operator set in place of the plan's, until `expiresAt` (ms; null: until removed). */
export interface Override {
  readonly limits: readonly NamedLimit[];
  readonly expiresAt: number | null;
}

/** What set a block. */
export type BlockCause = "operator" | "penalty";

const ROWS = ["block_until", "block_cause", "penalty", "override"] as const;

export class Controls {
  readonly #meta: Meta;
  #blockUntil: number | null = null;
  #blockCause: BlockCause = "operator";
  /** Refusals counted towards a penalty and the last penalty's length and end, with the span they were counted over. */
  #penalty: PenaltyState & { readonly withinMs?: number } = NO_PENALTY;
  #override: Override | null = null;

  constructor(meta: Meta) {
    this.#meta = meta;
    for (const [k, v] of meta.getAll(ROWS)) {
      if (k === "block_until") this.#blockUntil = Number(v);
      else if (k === "block_cause") this.#blockCause = v === "penalty" ? "penalty" : "operator";
      else if (k === "penalty") this.#penalty = JSON.parse(v) as PenaltyState & { withinMs?: number };
      else this.#override = JSON.parse(v) as Override;
    }
  }

  /** The block's end while it lasts at `now`, else null. */
  blockedAt(now: number): number | null {
    return this.#blockUntil !== null && this.#blockUntil > now ? this.#blockUntil : null;
  }

  /** What set the block (meaningful while one lasts). */
  get blockCause(): BlockCause {
    return this.#blockCause;
  }

  /** Blocks the key until `until` (capped at {@link MAX_TIME_MS}). */
  block(until: number, cause: BlockCause): void {
    this.#blockUntil = Math.min(until, MAX_TIME_MS);
    this.#blockCause = cause;
    this.#meta.set("block_until", String(this.#blockUntil));
    this.#meta.set("block_cause", cause);
  }

  /** Lifts a block, an operator's or a penalty's. */
  unblock(): void {
    this.#blockUntil = null;
    this.#blockCause = "operator";
    this.#meta.delete("block_until", "block_cause");
  }

  /**
   * Counts `count` refusals at `now` towards `spec`; when they complete the penalty, blocks the key (until `earliest`
   * at least) and returns the block's end, else null. Refusals are counted in memory (a refusal writes no row); only a
   * block, and the length a repeat doubles, are stored: an object evicted while idle forgets refusals not yet a block.
   */
  penalize(now: number, spec: PenaltySpec, count: number, earliest: number): number | null {
    const { state, blockUntil } = refused(this.#penalty, spec, now, count, earliest);
    this.#penalty = { ...state, withinMs: spec.withinMs };
    if (blockUntil === null) return null;
    this.#meta.set("penalty", JSON.stringify(this.#penalty));
    this.block(blockUntil, "penalty");
    return this.#blockUntil;
  }

  /** The refusals counted towards a penalty still within `withinMs` (the plan's span; default the stored one) at `now`. */
  refusals(now: number, withinMs = this.#penalty.withinMs ?? 0): number {
    return this.#penalty.refusals.filter((t) => t > now - withinMs).length;
  }

  /** Forgets the refusals counted towards a penalty (an operator's reset); the last block's length stays. */
  forgetRefusals(): void {
    this.#penalty = { ...this.#penalty, refusals: [] };
    this.#meta.delete("penalty");
  }

  /** The override in force at `now`; an expired one is dropped (and its row deleted when `write`). */
  override(now: number, write = true): Override | null {
    const o = this.#override;
    if (o === null || o.expiresAt === null || o.expiresAt > now) return o;
    if (!write) return null;
    this.#override = null;
    this.#meta.delete("override");
    return null;
  }

  /** Sets the override (null: removes it). */
  setOverride(override: Override | null): void {
    this.#override = override;
    if (override === null) this.#meta.delete("override");
    else this.#meta.set("override", JSON.stringify(override));
  }

  /** When the controls stop mattering: a block's end, the penalty's span after its refusals and last block, an override's expiry. */
  idleAt(): number {
    let at = this.#blockUntil ?? Number.NEGATIVE_INFINITY;
    const within = this.#penalty.withinMs ?? 0;
    for (const t of [...this.#penalty.refusals, this.#penalty.lastEnd]) if (t > 0) at = Math.max(at, t + within);
    if (this.#override) at = Math.max(at, this.#override.expiresAt ?? Number.POSITIVE_INFINITY);
    return at;
  }

  /** Forgets everything (the key went idle): in memory, and its rows unless the database is gone (`rows` false). */
  clear(rows = true): void {
    this.#blockUntil = null;
    this.#blockCause = "operator";
    this.#penalty = NO_PENALTY;
    this.#override = null;
    if (rows) this.#meta.delete(...ROWS);
  }
}
