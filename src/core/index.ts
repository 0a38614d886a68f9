/** @module The pure core: durations, limits and their rings, and the exact decision. No runtime imports. */
export { combine, type RouteBudget, type TakenTogether, takeTogether } from "./budgets.ts";
export type { Decision, Lease, LimitStatus, NamedLimit } from "./decision.ts";
export { type Duration, type DurationUnit, formatDuration, MAX_DURATION_MS, parseDuration } from "./duration.ts";
export {
  defaultTickMs,
  LEASE_LIMIT_DIVISOR,
  LEASE_WINDOW_DIVISOR,
  type Limit,
  type LimitSpec,
  MAX_KEY_SLOTS,
  MAX_RING_SLOTS,
  maxLeaseMs,
  maxLeaseUnits,
  normalizeLimits,
  type RingLayout,
  ringLayout,
} from "./limits.ts";
export { type Ask, type History, KeyLog, type Outcome, type Restored } from "./log.ts";
export { Ring, roundUp, type SlotRow } from "./ring.ts";
