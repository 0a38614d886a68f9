/**
 * @module Calls whose every send failed, which may or may not have been applied (docs/design.md, "Nothing lost under
 * faults"): the lease settlements they carried ride on — sent again on their own, as a settle with the call's own id,
 * until an answer comes; the object applies them then, or answers that it had. A request's take among them has its id
 * claimed that way: when the answer is the take's kept decision, the grant was made after all, and what the request
 * did not get of it goes back.
 */

import { keyId, logEvent } from "../base/log.ts";
import type { LimiterConfig } from "../config/types.ts";
import type { RouteBudget } from "../core/budgets.ts";
import type { Decision } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { Settlement } from "../core/log.ts";
import type { Background, CallId, LimiterNamespace } from "../protocol.ts";
import type { Circuit } from "./circuit.ts";
import { callOnce, isAmbiguous, RESEND_WITHIN_MS } from "./policy.ts";
import type { GrantRecord } from "./result.ts";

/** A call not answered: its settlements (maybe none), sent again with its id until an answer comes. */
export interface Unanswered {
  readonly ns: LimiterNamespace;
  readonly name: string;
  readonly limits: readonly LimitSpec[];
  readonly settle: readonly Settlement[];
  /** The id the call went with (a request's `take`, or a settle of its own). */
  readonly call: CallId;
  /**
   * A request's `take`: when the answer shows it was applied after all, what its request did not get goes back — its
   * lease's units and its slot, and its cost too unless the request was `served` (`failure_mode = "open"`).
   */
  readonly take?: {
    readonly route?: RouteBudget | undefined;
    readonly slot?: string | undefined;
    readonly served: boolean;
  };
  /** Local time it was first sent. */
  readonly sentAt: number;
}

/** How long after a failed send an unanswered call is sent again, unless its key's object answers first (ms). */
export const RESEND_STEP_MS = 1_000;

/** The most unanswered calls an isolate keeps (the oldest go first, logged). */
const UNANSWERED_MAX = 10_000;

/** What the unanswered calls go on from: the client's config, clock, circuit, call ids, refunds and log. */
export interface UnansweredParts {
  readonly config: LimiterConfig;
  readonly now: () => number;
  readonly circuit: Circuit;
  readonly callId: () => CallId;
  readonly refund: (ns: LimiterNamespace, grant: GrantRecord) => Promise<boolean>;
  /** Probes a key's object known down (its answer sends that key's unanswered calls: {@link UnansweredCalls.resend}). */
  readonly probe: (u: Unanswered, bg: Background) => void;
  readonly log: (event: string, name: string, e: unknown, level?: "warn" | "error") => void;
}

export class UnansweredCalls {
  readonly #p: UnansweredParts;
  /** Oldest first, each with the local time it may be sent again (+∞ while a send is out). */
  readonly #calls: (Unanswered & { nextAt: number })[] = [];

  constructor(parts: UnansweredParts) {
    this.#p = parts;
  }

  get size(): number {
    return this.#calls.length;
  }

  /** Keeps a call not answered, to send again from {@link RESEND_STEP_MS} on. */
  add(u: Unanswered): void {
    if (this.#calls.length >= UNANSWERED_MAX) {
      const lost = this.#calls.shift() as Unanswered;
      this.#p.log("settlement_lost", lost.name, new Error("too many unanswered calls"), "warn");
    }
    this.#calls.push({ ...u, nextAt: this.#p.now() + RESEND_STEP_MS });
  }

  /**
   * Sends again, each as a settle with its own id, the calls due: a step after their last send — their key's object
   * probed instead while it is known down — or (`of`) every one of that key not out, its object having just answered. Forgets those
   * first sent {@link RESEND_WITHIN_MS} ago or more — the object forgets answers after that, and sent again they could
   * be applied twice — and those the object refused, logged as `settlement_lost`.
   */
  resend(bg: Background, of?: string): void {
    const now = this.#p.now();
    for (const u of [...this.#calls]) {
      if (u.nextAt === Number.POSITIVE_INFINITY || (of === undefined ? now < u.nextAt : u.name !== of)) continue;
      // A key known down is probed when due, not called: the probe's answer sends its calls.
      if (of === undefined && this.#p.circuit.failures(u.name) > 0) {
        if (this.#p.circuit.admit(u.name, now) === "probe") this.#p.probe(u, bg);
        continue;
      }
      if (now - u.sentAt >= RESEND_WITHIN_MS) {
        this.#forget(u, new Error("no answer within the time a call may be sent again"));
        continue;
      }
      u.nextAt = Number.POSITIVE_INFINITY;
      const since = { at: u.sentAt, now: this.#p.now };
      const sending = callOnce(() => u.ns.getByName(u.name).settle(u.limits, u.settle, u.call), this.#timeoutMs, {
        since,
      }).then(
        (answer: unknown) => {
          this.#forget(u, null);
          // The take's kept decision: it was applied after all.
          const d = answer as Decision | null;
          if (u.take !== undefined && typeof d === "object" && d?.allowed === true) this.#giveBack(u, d, bg);
        },
        (e: unknown) => {
          if (isAmbiguous(e)) u.nextAt = this.#p.now() + RESEND_STEP_MS;
          else this.#forget(u, e);
        },
      );
      bg.waitUntil?.(sending);
    }
  }

  get #timeoutMs(): number {
    return this.#p.config.objectTimeoutMs;
  }

  /** No longer kept: answered (`e` null), or lost to `e` (logged `settlement_lost`). */
  #forget(u: Unanswered, e: unknown): void {
    const i = this.#calls.indexOf(u as Unanswered & { nextAt: number });
    if (i >= 0) this.#calls.splice(i, 1);
    if (e !== null) this.#p.log("settlement_lost", u.name, e, "warn");
  }

  /**
   * A request's take whose every send failed was applied after all (its kept decision answered the settle sent with
   * its id), while the request got its failure mode, not this grant: what the request did not get goes back — its
   * cost unless it was served (a refund, the call's id as the grant's), its lease's units (riding on as any
   * settlement), and its slot (freed). Logged `grant_unserved`.
   */
  #giveBack(u: Unanswered, d: Decision, bg: Background): void {
    const { ns, name, limits, take } = u;
    const sends: Promise<unknown>[] = [];
    const cost = take?.served === true ? 0 : d.cost;
    if (cost > 0 && d.recordedAt !== undefined) {
      const grant = { id: u.call, name, limits, recordedAt: d.recordedAt, units: cost, at: d.now };
      sends.push(this.#p.refund(ns, take?.route ? { ...grant, route: take.route } : grant));
    }
    const lease = d.lease?.units ?? 0;
    if (d.lease && lease > 0) {
      const unused = [{ recordedAt: d.lease.recordedAt, issuedAt: d.now, used: 0, lastUseMs: 0, unused: lease }];
      this.add({ ns, name, limits, settle: unused, call: this.#p.callId(), sentAt: this.#p.now() });
      this.resend(bg, name);
    }
    const slot = take?.slot;
    if (slot !== undefined) {
      const call = this.#p.callId();
      sends.push(callOnce(() => ns.getByName(name).release(slot, call), this.#timeoutMs));
    }
    const done = Promise.allSettled(sends).then((out) => {
      const failed = out.filter((o) => o.status === "rejected").length;
      const fields = { units: cost, lease_units: lease, slot: slot !== undefined, failed };
      void keyId(name).then((id) => logEvent("grant_unserved", { key_id: id, ...fields }, "warn"));
    });
    bg.waitUntil?.(done);
  }
}
