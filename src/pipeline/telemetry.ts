/**
 * @module What the Worker tells operators: structured JSON log lines, and one Analytics Engine data
 * point per decision when a dataset is bound as `LIMITER_ANALYTICS` (docs/operating.md).
 * Keys never appear in clear: `key_id` is the first 12 hex digits of the SHA-256 of the key's
 * object name (`key:<key>`, or `ip:<address>` for anonymous requests; `<name>/key:<key>` in a
 * named limiter).
 */

import { keyId, logEvent } from "../base/log.ts";
import { type RateLimitResult, violated } from "../client/result.ts";

/** What telemetry reads of a decision (a {@link RateLimitResult}). */
export type DecisionRecord = Pick<
  RateLimitResult,
  "plan" | "route" | "cost" | "reason" | "allowed" | "at" | "retryAfterMs" | "limits" | "refusedBy"
>;

/** One data point, as Analytics Engine's `writeDataPoint` takes it. */
export interface DataPoint {
  readonly indexes: string[];
  readonly blobs: string[];
  readonly doubles: number[];
}

/** The part of an `AnalyticsEngineDataset` binding used here. */
export interface Dataset {
  writeDataPoint(point: DataPoint): void;
}

/** The bindings telemetry reads. */
export interface TelemetryEnv {
  /** An Analytics Engine dataset (`[[analytics_engine_datasets]]`); unbound: no data points. */
  readonly LIMITER_ANALYTICS?: Dataset;
}

/**
 * Denials are logged at most once per key per this many ms in an isolate (a flood is the deny
 * cache's work, not the log's); the next line says how many were left out (`suppressed`).
 * Analytics Engine gets every one.
 */
export const DENIAL_LOG_INTERVAL_MS = 1000;
const lastLogged = new Map<string, { at: number; suppressed: number }>();
/** The most keys whose last denial line is remembered (then forgotten all at once). */
const MAX_LOGGED = 10_000;

/**
 * The data point of one decision, made at the object named `name`. `index1`: key_id. Blobs: reason, plan,
 * `"allowed"`/`"denied"` (whether the request was served), the refusing limits' names joined by `,`, the kind of the
 * object's name ({@link kindOf}: `key`, `ip` for a request without a key, `guess`, `preflight`), the route whose budget
 * applied (`""`: none), the budget that refused it (`key`, `ip`, `account`; `""`: allowed). Doubles: cost, 1 when
 * allowed else 0, the exact wait in ms (0 when the limits fit, −1 when it can never pass). docs/operating.md's table
 * says the same, held to it by test/integration/telemetry-doc.test.ts.
 */
export function dataPoint(name: string, e: DecisionRecord, id: string): DataPoint {
  const retry = Number.isFinite(e.retryAfterMs) ? e.retryAfterMs : -1;
  return {
    indexes: [id],
    blobs: [
      e.reason,
      e.plan,
      e.allowed ? "allowed" : "denied",
      violated(e).join(","),
      kindOf(name),
      e.route ?? "",
      e.refusedBy ?? "",
    ],
    doubles: [e.cost, e.allowed ? 1 : 0, retry],
  };
}

/**
 * Logs a decision worth a line — a refusal, or a shadow-mode pass over the limits — and writes its
 * data point; does nothing else (no hashing) otherwise. `name` is the key's object name: only its
 * `key_id` leaves this function.
 */
export async function recordDecision(env: TelemetryEnv, name: string, e: DecisionRecord): Promise<void> {
  const noteworthy =
    (!e.allowed || e.reason === "shadow") && e.reason !== "limiter_timeout" && e.reason !== "limiter_error";
  const log = noteworthy && shouldLog(name, e.at);
  if (log === false && !env.LIMITER_ANALYTICS) return;
  const id = await keyId(name);
  if (log !== false) {
    logEvent(e.reason === "shadow" ? "shadow_deny" : "denied", {
      reason: e.reason,
      plan: e.plan,
      ...(e.route === null ? {} : { route: e.route }),
      ...(e.refusedBy === "ip" || e.refusedBy === "account" ? { refused_by: e.refusedBy } : {}),
      key_id: id,
      cost: e.cost,
      violated: violated(e),
      retry_after_ms: Number.isFinite(e.retryAfterMs) ? e.retryAfterMs : null,
      suppressed: log,
    });
  }
  try {
    env.LIMITER_ANALYTICS?.writeDataPoint(dataPoint(name, e, id));
  } catch (err) {
    // Analytics must never fail a request.
    logEvent("analytics_error", { message: err instanceof Error ? err.message : "unknown error" }, "error");
  }
}

/** False when a denial of `name` was logged less than {@link DENIAL_LOG_INTERVAL_MS} ago; else how many were left out since. */
function shouldLog(name: string, now: number): number | false {
  const last = lastLogged.get(name);
  if (last && now - last.at < DENIAL_LOG_INTERVAL_MS) {
    last.suppressed++;
    return false;
  }
  if (!last && lastLogged.size >= MAX_LOGGED) lastLogged.clear();
  lastLogged.set(name, { at: now, suppressed: 0 });
  return last?.suppressed ?? 0;
}

/**
 * The kind of an object name (`key`, `ip`, `addr`, `acct` or `preflight`): what precedes its first `:`, after a
 * limiter's `<name>/`, without a plan's `.<plan>`.
 */
function kindOf(name: string): string {
  const head = name.slice(0, name.indexOf(":"));
  const kind = head.slice(head.lastIndexOf("/") + 1);
  const dot = kind.indexOf(".");
  return dot === -1 ? kind : kind.slice(0, dot);
}
