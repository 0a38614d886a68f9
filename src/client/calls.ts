/**
 * @module A client's calls to its keys' objects, under the written failure policy (policy.ts: a deadline; each call
 * that may change a key's state sent with an id, and again with it after an ambiguous failure; a read tried again once
 * when the runtime says so), and what their outcomes say: an object that answers is up, one that fails is known down (circuit.ts) and,
 * with `failure_mode = "local"`, the grants this isolate made alone go with the next call until one is recorded. Every
 * stub is made here, per call: workerd binds a stub to the request that made it.
 */

import { keyId, logEvent } from "../base/log.ts";
import { routeBudget } from "../config/lookup.ts";
import type { LimiterConfig } from "../config/types.ts";
import type { RouteBudget } from "../core/budgets.ts";
import type { Decision } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { Settlement } from "../core/log.ts";
import type { AloneReport, Background, CallId, LimiterNamespace, RefundedGrant, TakeAsk } from "../protocol.ts";
import type { AloneLogs } from "./alone.ts";
import type { Circuit } from "./circuit.ts";
import type { KeySettlements, LeaseTable } from "./leases.ts";
import {
  callIds,
  callObject,
  callOnce,
  errorName,
  isAmbiguous,
  isOverloaded,
  LimiterTimeout,
  RESEND_WITHIN_MS,
} from "./policy.ts";
import type { LimitRequest, PeekRequest } from "./request.ts";
import type { GrantRecord, Reason } from "./result.ts";

/** What a client's object calls go on from. */
export interface CallParts {
  readonly config: LimiterConfig;
  readonly now: () => number;
  readonly leases: LeaseTable;
  readonly circuit: Circuit;
  readonly alone: AloneLogs | null;
}

/** What a call about a key reached: the key's object name, the namespace, and the runtime's `waitUntil`. */
type Reached = Pick<LimitRequest, "ns" | "name" | "bg">;

/** What a give-back says beside its grant (protocol.ts, {@link RefundedGrant}). */
export type GiveBackFields = Partial<Pick<RefundedGrant, "quotasOnly" | "settle" | "debt">>;

/**
 * A call carrying lease settlements whose answer never came (docs/design.md, "Nothing lost under faults"): the object
 * may or may not have applied them. Sent again with its id, as a settle of its own, until an answer comes — the
 * object applies them then, or answers that it had — within {@link RESEND_WITHIN_MS} of the first send.
 */
interface Unanswered {
  readonly ns: LimiterNamespace;
  readonly name: string;
  readonly limits: readonly LimitSpec[];
  readonly settle: readonly Settlement[];
  /** The id the call went with (a request's `take`, or a settle of its own). */
  readonly call: CallId;
  /**
   * A request's `take` the request did not get (its failure mode refused it or decided it alone): when the answer
   * shows it was applied after all, its grant — units, lease, slot — goes back. Its route, and its slot's id.
   */
  readonly unserved?: { readonly route?: RouteBudget | undefined; readonly slot?: string | undefined };
  /** Local time it was first sent. */
  readonly sentAt: number;
  /** Local time it may be sent again; +∞ while a send is out. */
  nextAt: number;
}

/** How long after a failed send unanswered settlements are sent again, unless their key's object answers first (ms). */
export const RESEND_STEP_MS = 1_000;

/** The most unanswered settlements an isolate keeps (the oldest go first, logged). */
const UNANSWERED_MAX = 10_000;

/** The probe of a key with nothing decided alone: it records nothing. */
const NO_REPORT: AloneReport = { uses: [], routes: [] };

export class ObjectCalls {
  readonly #p: CallParts;
  /**
   * Per key known down (`failure_mode = "local"`): the settlement of the leases dropped when its object stopped
   * answering, given back when it answers again — their unused units would otherwise stay counted (in a quota, for the
   * rest of its period).
   */
  readonly #stranded = new Map<string, KeySettlements>();
  /** The next call's id (protocol.ts, `CallId`). */
  readonly #callId = callIds();
  /** Settlements whose call was not answered, oldest first ({@link Unanswered}). */
  readonly #unanswered: Unanswered[] = [];

  constructor(parts: CallParts) {
    this.#p = parts;
  }

  /**
   * A request's call to its key's object (`take`), with an id: sent again after an ambiguous failure, the same call —
   * its settlements, refusal count and grants made alone too — is applied once (the object keeps its answer).
   */
  take(r: LimitRequest, ask: TakeAsk): Promise<Decision> {
    const { ns, name } = r;
    const limits = r.plan.limits ?? [];
    const route = r.route ? routeBudget(r.route) : undefined;
    const start = this.#p.now();
    return this.#reporting(r, start, (report) => {
      const quoted = r.plan.meters ? { ...ask, ...r.plan.meters } : ask;
      const sent: TakeAsk = { ...quoted, ...(report ? { alone: report } : {}), call: this.#callId() };
      return callOnce(
        () => {
          const stub = ns.getByName(name);
          return (route ? stub.take(limits, sent, route) : stub.take(limits, sent)).then((d) => {
            this.#p.leases.observeRtt(this.#p.now() - start);
            return d;
          });
        },
        this.#p.config.objectTimeoutMs,
        (e) => this.log("limiter_retry", name, e, "warn"),
      ).catch((e: unknown) => {
        // Applied or not? Its settlements ride on, and its id is claimed (a settle with it): a grant it made after all
        // goes back where the request did not get it.
        if (isAmbiguous(e)) {
          const settle = sent.settle ?? [];
          const unserved = this.#p.config.failureMode === "open" ? undefined : { route, slot: sent.slot?.id };
          const call = sent.call as CallId;
          this.#unansweredOf({ ns, name, limits, settle, call, sentAt: start, ...(unserved ? { unserved } : {}) });
        }
        throw e;
      });
    });
  }

  /** `peek()`'s call to the key's object: its state for a request of `r.cost`, consuming nothing. */
  peek(r: PeekRequest & { readonly cost: number }): Promise<Decision> {
    const { ns, name, plan, cost } = r;
    const limits = plan.limits ?? [];
    const route = r.route ?? null;
    return callObject(
      () => {
        const stub = ns.getByName(name);
        if (plan.meters) return stub.peek(limits, cost, route ? routeBudget(route) : undefined, plan.meters);
        return route ? stub.peek(limits, cost, routeBudget(route)) : stub.peek(limits, cost);
      },
      this.#p.config.objectTimeoutMs,
      (e) => this.log("limiter_retry", name, e, "warn"),
    ).then(
      (d) => {
        this.#up(r);
        return d;
      },
      (e: unknown) => {
        this.#down(name, e);
        throw e;
      },
    );
  }

  /**
   * Gives back `grant`'s units at its key's object (which gives back or settles each grant id once): whether it did.
   * `settle` and `debt` make it a settle (protocol.ts, {@link RefundedGrant}): `units` are then the unused ones.
   */
  refund(ns: LimiterNamespace, grant: GrantRecord & GiveBackFields): Promise<boolean> {
    const { id, name, limits, recordedAt, units, route, at, quotasOnly, settle, debt } = grant;
    const refunded: RefundedGrant = {
      id,
      recordedAt,
      units,
      ...(at === undefined ? {} : { at }),
      ...(quotasOnly ? { quotasOnly } : {}),
      ...(settle ? { settle } : {}),
      ...(debt ? { debt } : {}),
      call: this.#callId(),
    };
    return callOnce(
      () => (route ? ns.getByName(name).refund(limits, refunded, route) : ns.getByName(name).refund(limits, refunded)),
      this.#p.config.objectTimeoutMs,
      (e) => this.log("limiter_retry", name, e, "warn"),
    );
  }

  /**
   * Probes the key's object of `r`, known down, in the background: the grants this isolate made alone go with it
   * (the object records them); when it answers, the key is up and its requests call it again.
   */
  probe(r: Pick<LimitRequest, "ns" | "name" | "plan" | "bg">): void {
    const { ns, name } = r;
    const limits = r.plan.limits ?? [];
    const probe = this.#reporting(r, this.#p.now(), (report) => {
      const sent: AloneReport = { ...(report ?? NO_REPORT), call: this.#callId() };
      return callOnce(() => ns.getByName(name).recover(limits, sent), this.#p.config.objectTimeoutMs);
    }).catch(() => {}); // a failed probe: #reporting has marked the key down again
    r.bg?.waitUntil?.(probe);
  }

  /**
   * Settles leases of keys a request is not about (dropped or idle ones) with their objects, in the background, each
   * call with an id; and sends again the settlements of calls not answered that are due ({@link Unanswered}).
   */
  settle(ns: LimiterNamespace, out: readonly KeySettlements[], bg: Background): void {
    for (const k of out) {
      const call = this.#callId();
      const sentAt = this.#p.now();
      const sending = callOnce(
        () => ns.getByName(k.name).settle(k.limits, k.settle, call),
        this.#p.config.objectTimeoutMs,
      ).catch((e: unknown) => {
        this.log("lease_return_failed", k.name, e);
        this.#unansweredOf({ ns, name: k.name, limits: k.limits, settle: k.settle, call, sentAt });
      });
      bg.waitUntil?.(sending);
    }
    if (this.#unanswered.length > 0) this.#resend(bg);
  }

  /** Keeps the settlements of a call not answered, to send again from {@link RESEND_STEP_MS} on. */
  #unansweredOf(u: Omit<Unanswered, "nextAt">): void {
    if (this.#unanswered.length >= UNANSWERED_MAX) {
      const lost = this.#unanswered.shift() as Unanswered;
      this.log("settlement_lost", lost.name, new Error("too many unanswered settlements"), "warn");
    }
    this.#unanswered.push({ ...u, nextAt: this.#p.now() + RESEND_STEP_MS });
  }

  /**
   * Sends again, each with its own id, the unanswered settlements due — a step after their last send, their key's
   * object not known down (`of`: every one of that key not out, its object having just answered); forgets those first sent {@link RESEND_WITHIN_MS} ago or more (the object forgets answers
   * after that: sent again, they could be applied twice), logged as `settlement_lost`.
   */
  #resend(bg: Background, of?: string): void {
    const now = this.#p.now();
    for (const u of [...this.#unanswered]) {
      // Not while the key's object is known down: its probe finds it back, and its answer sends them ({@link #up}).
      const due = of === undefined ? now >= u.nextAt && this.#p.circuit.failures(u.name) === 0 : u.name === of;
      if (u.nextAt === Number.POSITIVE_INFINITY || !due) continue;
      if (now - u.sentAt >= RESEND_WITHIN_MS) {
        this.#unanswered.splice(this.#unanswered.indexOf(u), 1);
        this.log("settlement_lost", u.name, new Error("no answer within the time a call may be sent again"), "warn");
        continue;
      }
      u.nextAt = Number.POSITIVE_INFINITY;
      const sending = callOnce(
        () => u.ns.getByName(u.name).settle(u.limits, u.settle, u.call),
        this.#p.config.objectTimeoutMs,
      ).then(
        (answer: unknown) => {
          const i = this.#unanswered.indexOf(u);
          if (i >= 0) this.#unanswered.splice(i, 1);
          // The kept answer of a request's take: applied after all.
          const d = answer as Decision | null;
          if (u.unserved && typeof d === "object" && d?.allowed === true) this.#giveBackUnserved(u, d, bg);
        },
        () => {
          u.nextAt = this.#p.now() + RESEND_STEP_MS;
        },
      );
      bg.waitUntil?.(sending);
    }
  }

  /**
   * A request's take whose every send failed was applied after all (its kept answer came back to the settle sent
   * with its id), while the request got its failure mode, not this grant: its units go back (a refund, the call's id
   * as the grant's), its lease's units too, and its slot is freed. Logged `grant_unserved`.
   */
  #giveBackUnserved(u: Unanswered, d: Decision, bg: Background): void {
    const { ns, name, limits } = u;
    const route = u.unserved?.route;
    const sends: Promise<unknown>[] = [];
    if (d.cost > 0 && d.recordedAt !== undefined) {
      const grant = { id: u.call, name, limits, recordedAt: d.recordedAt, units: d.cost, at: d.now };
      sends.push(this.refund(ns, route ? { ...grant, route } : grant));
    }
    if (d.lease !== null && d.lease.units > 0) {
      const unused = [
        { recordedAt: d.lease.recordedAt, issuedAt: d.now, used: 0, lastUseMs: 0, unused: d.lease.units },
      ];
      const call = this.#callId();
      sends.push(callOnce(() => ns.getByName(name).settle(limits, unused, call), this.#p.config.objectTimeoutMs));
    }
    const slot = u.unserved?.slot;
    if (slot !== undefined)
      sends.push(callObject(() => ns.getByName(name).release(slot), this.#p.config.objectTimeoutMs));
    const done = Promise.allSettled(sends).then((out) => {
      const failed = out.filter((o) => o.status === "rejected").length;
      const fields = { units: d.cost, lease_units: d.lease?.units ?? 0, slot: slot !== undefined, failed };
      void keyId(name).then((id) => logEvent("grant_unserved", { key_id: id, ...fields }, "warn"));
    });
    bg.waitUntil?.(done);
  }

  /** Logs a request's call to its key's object that failed with `e` (`limiter_unavailable`). */
  unavailable(e: unknown): void {
    const reason: Reason = e instanceof LimiterTimeout ? "limiter_timeout" : "limiter_error";
    const fields = {
      reason,
      failure_mode: this.#p.config.failureMode,
      overloaded: isOverloaded(e),
      message: errorName(e),
    };
    logEvent("limiter_unavailable", fields, "error");
  }

  /**
   * Logs a settled grant made alone whose `kept` unused units stay counted (`reservation_kept`, reason
   * `reported_alone`): they were reported to the key's object before the settle came.
   */
  kept(name: string, units: { reserved: number; kept: number }): void {
    const detail = "decided alone while the key's object could not answer, and reported to it before the settle";
    void keyId(name).then((id) =>
      logEvent("reservation_kept", { key_id: id, reason: "reported_alone", detail, ...units }, "warn"),
    );
  }

  /** A log line about a key's object call: the key only as its `key_id`. */
  log(event: string, name: string, e: unknown, level: "warn" | "error" = "error"): void {
    void keyId(name).then((id) => logEvent(event, { key_id: id, message: errorName(e) }, level));
  }

  /**
   * Runs `call` to `name`'s object at `now` with the key's grants made alone (one report out per key at a time; null:
   * none), and keeps what its outcome says: answered, the report is recorded and the object is up; failed, the report
   * goes again and the object is known down.
   */
  #reporting<T>(r: Reached, now: number, call: (report: AloneReport | null) => Promise<T>): Promise<T> {
    const { name } = r;
    const report = this.#p.alone?.report(name, now) ?? null;
    return call(report).then(
      (out) => {
        if (report) this.#p.alone?.answered(name, true);
        this.#up(r);
        return out;
      },
      (e: unknown) => {
        if (report) this.#p.alone?.answered(name, false);
        this.#down(name, e);
        throw e;
      },
    );
  }

  /**
   * A call to `r.name`'s object answered: when it was known down, it is up again (logged), and the leases dropped when
   * it went down are given back now (in the background).
   */
  #up(r: Reached): void {
    const { name } = r;
    const stranded = this.#stranded.get(name);
    if (stranded !== undefined) {
      this.#stranded.delete(name);
      this.settle(r.ns, [stranded], r.bg ?? {});
    }
    if (this.#unanswered.length > 0) this.#resend(r.bg ?? {}, name);
    if (!this.#p.circuit.answered(name)) return;
    void keyId(name).then((id) => logEvent("limiter_up", { key_id: id, failure_mode: this.#p.config.failureMode }));
  }

  /**
   * A call to `name`'s object failed with `e`: it is known down (logged when it was up). With `failure_mode =
   * "local"`, this isolate's leases of the key are dropped — from now on every request for the key is decided against
   * this isolate's own log, which counts units only when used — and their settlement waits for the object to answer
   * again ({@link #up}): their used units re-dated to their uses, their unused ones given back (to a quota too).
   */
  #down(name: string, e: unknown): void {
    const late = e instanceof LimiterTimeout;
    if (!this.#p.circuit.failed(name, this.#p.now(), late)) return;
    if (this.#p.alone !== null) {
      const out: KeySettlements[] = [];
      this.#p.leases.drop(name, out);
      const [dropped] = out;
      const had = this.#stranded.get(name);
      if (dropped !== undefined) {
        this.#stranded.set(name, had ? { ...dropped, settle: [...had.settle, ...dropped.settle] } : dropped);
      }
    }
    const fields = {
      failure_mode: this.#p.config.failureMode,
      late,
      overloaded: isOverloaded(e),
      message: errorName(e),
    };
    void keyId(name).then((id) => logEvent("limiter_down", { key_id: id, ...fields }, "error"));
  }
}
