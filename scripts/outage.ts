/**
 * @module What `npm start -- --outage` runs (scripts/start.ts, scripts/outage-entry.mts; docs/configuration.md, "When
 * the object cannot answer"): shared with its e2e test, so the demo the docs describe is the one tested.
 */

/** How long the objects of `down_` keys play dead after the start (ms). */
export const OUTAGE_MS = 90_000;

/** Every key at 10 a minute, decided alone while its object cannot answer. */
export const OUTAGE_RATE_LIMIT = {
  limits: [{ limit: 10, window: "1m" }],
  failure_mode: "local",
  object_timeout: "300ms",
} as const;

/** The demo's Worker entry, relative to the repository. */
export const OUTAGE_ENTRY = "scripts/outage-entry.mts";
