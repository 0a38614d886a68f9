/**
 * @module Penalties for repeat offenders (docs/configuration.md, "Penalties"): a key refused by its rate
 * limits `after` times within `withinMs` is blocked for `blockMs`; with `maxBlockMs`, a block that starts within
 * `withinMs` of the last one's end lasts twice as long as that one, up to `maxBlockMs`. Pure: time passed in.
 */

/** A plan's `penalty` as the key's object is sent it. */
export interface PenaltySpec {
  /** Refusals that trigger a block (≥ 1). */
  readonly after: number;
  /** The span they are counted over (ms). */
  readonly withinMs: number;
  /** The first block's length (ms). */
  readonly blockMs: number;
  /** The longest a repeated block grows to (ms); null: blocks do not grow. */
  readonly maxBlockMs: number | null;
}

/** What a key's object remembers between refusals. */
export interface PenaltyState {
  /** Times of the latest refusals still within the span (at most `after`, oldest first). */
  readonly refusals: readonly number[];
  /** The last block's length (ms; 0: none yet) and end. */
  readonly lastBlockMs: number;
  readonly lastEnd: number;
}

export const NO_PENALTY: PenaltyState = { refusals: [], lastBlockMs: 0, lastEnd: 0 };

/**
 * Counts `count` refusals at `now`. Returns the state after them and, when they complete `after` within the span,
 * the block to impose: its end (ms), at least `earliest` (the window's own wait: a block never shortens it). The
 * refusals that triggered a block are forgotten.
 *
 * @throws RangeError for a spec that is not a penalty (`after` < 1, a span or block < 1 ms)
 */
export function refused(
  state: PenaltyState,
  spec: PenaltySpec,
  now: number,
  count: number,
  earliest = now,
): { state: PenaltyState; blockUntil: number | null } {
  checkSpec(spec);
  if (count <= 0) return { state, blockUntil: null };
  const times = state.refusals.filter((t) => t > now - spec.withinMs);
  for (let i = 0; i < Math.min(count, spec.after); i++) times.push(now);
  if (times.length < spec.after) return { state: { ...state, refusals: times.slice(-spec.after) }, blockUntil: null };
  const repeat = spec.maxBlockMs !== null && state.lastBlockMs > 0 && now - state.lastEnd <= spec.withinMs;
  const blockMs = repeat ? Math.min(2 * state.lastBlockMs, spec.maxBlockMs as number) : spec.blockMs;
  const blockUntil = Math.max(now + blockMs, earliest);
  return { state: { refusals: [], lastBlockMs: blockMs, lastEnd: blockUntil }, blockUntil };
}

function checkSpec(s: PenaltySpec): void {
  const ok = (n: number, min: number) => Number.isSafeInteger(n) && n >= min;
  if (!ok(s.after, 1) || !ok(s.withinMs, 1) || !ok(s.blockMs, 1) || (s.maxBlockMs !== null && !ok(s.maxBlockMs, 1))) {
    throw new RangeError(`penalty: expected after ≥ 1 and spans of at least 1 ms, got ${JSON.stringify(s)}`);
  }
}
