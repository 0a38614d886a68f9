/**
 * @module Calendar helpers for tests that check a quota's reset over real time (integration and e2e): runtime-neutral
 * (the runtime's own `Intl`).
 */

/** Seconds from now to the next midnight in `zone`, by the runtime's `Intl` (what a daily quota's wait must be). */
export function secondsToMidnight(zone: string): number {
  const parts = new Intl.DateTimeFormat("en-US", {
    timeZone: zone,
    hourCycle: "h23",
    hour: "numeric",
    minute: "numeric",
    second: "numeric",
  }).formatToParts(Date.now());
  const n = (type: string) => Number(parts.find((p) => p.type === type)?.value);
  return 86_400 - (n("hour") * 3600 + n("minute") * 60 + n("second"));
}
