/** @module The pure core: durations, limits and their rings, and the exact decision. No runtime imports. */
export { combine, type RouteBudget, type TakenTogether, takeTogether } from "./budgets.ts";
export type { Decision, Lease, LimitStatus, NamedLimit } from "./decision.ts";
export { type Duration, type DurationUnit, formatDuration, MAX_DURATION_MS, parseDuration } from "./duration.ts";
export { FALLBACK_NOTHING_RETRY_MS, FallbackLog } from "./fallback.ts";
export {
  defaultTickMs,
  FAR_BELOW_FREE,
  FAR_LEASE_FACTOR,
  FIRST_LEASE_UNITS,
  LEASE_HEADROOM_SHARE,
  LEASE_LIMIT_DIVISOR,
  type Limit,
  type LimitSpec,
  leaseMargin,
  leaseScale,
  MAX_KEY_SLOTS,
  MAX_LEASE_MS,
  MAX_RING_SLOTS,
  MIN_LEASE_UNITS,
  MIN_SPEND_MS,
  maxLeaseMs,
  maxLeaseUnits,
  NEAR_SPEND_DIVISOR,
  NO_LEASE_BELOW_FREE,
  normalizeLimits,
  RING_SLACK_DIVISOR,
  type RingLayout,
  ringLayout,
  ringSlackMs,
} from "./limits.ts";
export {
  type Ask,
  checkUses,
  type History,
  KeyLog,
  type Outcome,
  type Restored,
  type Settlement,
  type Use,
} from "./log.ts";
export { Ring, roundUp, type SlotRow } from "./ring.ts";
