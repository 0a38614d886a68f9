/**
 * @module What one client is made of, shared by its request paths (acquire.ts, answers.ts, without.ts): its settings
 * and clock, its lease table, deny cache, concurrency slots, circuit and own logs, the penalty counts, its object
 * calls and its results. Made once per client (index.ts); two clients share nothing.
 */

import type { LimiterConfig } from "../config/types.ts";
import type { AloneLogs } from "./alone.ts";
import type { ObjectCalls } from "./calls.ts";
import type { Circuit } from "./circuit.ts";
import type { DenyCache } from "./deny-cache.ts";
import type { InFlight } from "./in-flight.ts";
import type { LeaseTable } from "./leases.ts";
import type { Outcomes } from "./outcomes.ts";
import type { Refusals } from "./refusals.ts";

export interface Parts {
  readonly config: LimiterConfig;
  /** The client's clock (ms since the epoch). */
  readonly now: () => number;
  /** Units leased ahead, per key. */
  readonly leases: LeaseTable;
  /** Keys no request can pass before a known time. */
  readonly denyCache: DenyCache;
  /** Concurrency slots held by granted requests, until released. */
  readonly inFlight: InFlight;
  /** Keys whose objects this isolate knows to be down: not called until a probe finds them up. */
  readonly circuit: Circuit;
  /** With `failure_mode = "local"`: this isolate's own logs of its keys, decided against while their objects are down. */
  readonly alone: AloneLogs | null;
  /** Refusals towards the keys' penalties. */
  readonly refusals: Refusals;
  readonly calls: ObjectCalls;
  readonly results: Outcomes;
}
