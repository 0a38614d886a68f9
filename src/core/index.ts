/** @module The pure core: durations and the exact sliding log. No runtime imports. */
export {
  type Duration,
  type DurationUnit,
  formatDuration,
  MAX_DURATION_MS,
  parseDuration,
} from "./duration.ts";
export {
  capacityFor,
  type Decision,
  type LimitSpec,
  type LimitStatus,
  MAX_CAPACITY,
  normalizeLimits,
  type Restored,
  SlidingLog,
  type SlotRow,
} from "./sliding-log.ts";
