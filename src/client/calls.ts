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
import type { Decision } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { AloneReport, Background, LimiterNamespace, RefundedGrant, TakeAsk } from "../protocol.ts";
import type { AloneLogs } from "./alone.ts";
import type { Circuit } from "./circuit.ts";
import type { KeySettlements, LeaseTable } from "./leases.ts";
import { callIds, callObject, callOnce, errorName, isAmbiguous, isOverloaded, LimiterTimeout } from "./policy.ts";
import type { LimitRequest, PeekRequest } from "./request.ts";
import type { GrantRecord, Reason } from "./result.ts";
import { UnansweredCalls } from "./unanswered.ts";

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
  /** Calls whose every send failed: their settlements ride on, a take's id is claimed (unanswered.ts). */
  readonly #unanswered: UnansweredCalls;

  constructor(parts: CallParts) {
    this.#p = parts;
    this.#unanswered = new UnansweredCalls({
      ...parts,
      callId: this.#callId,
      refund: (ns, grant) => this.refund(ns, grant),
      probe: (u, bg) => this.#probe({ ns: u.ns, name: u.name, bg }, u.limits),
      log: (event, name, e, level) => this.log(event, name, e, level),
    });
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
      const call = this.#callId();
      const sent: TakeAsk = { ...quoted, ...(report ? { alone: report } : {}), call };
      return callOnce(
        () => {
          const stub = ns.getByName(name);
          return (route ? stub.take(limits, sent, route) : stub.take(limits, sent)).then((d) => {
            this.#p.leases.observeRtt(this.#p.now() - start);
            return d;
          });
        },
        this.#p.config.objectTimeoutMs,
        { onResend: (e) => this.log("limiter_retry", name, e, "warn"), since: { at: start, now: this.#p.now } },
      ).catch((e: unknown) => {
        // Applied or not? Its settlements ride on and its id is claimed, with a settle of its own (unanswered.ts).
        if (isAmbiguous(e)) {
          const take = { route, slot: sent.slot?.id, served: this.#p.config.failureMode === "open" };
          this.#unanswered.add({ ns, name, limits, settle: sent.settle ?? [], call, sentAt: start, take });
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
      { onResend: (e) => this.log("limiter_retry", name, e, "warn") },
    );
  }

  /**
   * Probes the key's object of `r`, known down, in the background: the grants this isolate made alone go with it
   * (the object records them); when it answers, the key is up and its requests call it again.
   */
  probe(r: Pick<LimitRequest, "ns" | "name" | "plan" | "bg">): void {
    this.#probe(r, r.plan.limits ?? []);
  }

  /** {@link probe} under `limits`. */
  #probe(r: Reached, limits: readonly LimitSpec[]): void {
    const { ns, name } = r;
    const probe = this.#reporting(r, this.#p.now(), (report) => {
      const sent: AloneReport = { ...(report ?? NO_REPORT), call: this.#callId() };
      return callOnce(() => ns.getByName(name).recover(limits, sent), this.#p.config.objectTimeoutMs);
    }).catch(() => {}); // a failed probe: #reporting has marked the key down again
    r.bg?.waitUntil?.(probe);
  }

  /**
   * Settles leases of keys a request is not about (dropped or idle ones) with their objects, in the background, each
   * call with an id (one that fails in a way that may have been applied rides on: unanswered.ts); and sends again the
   * unanswered calls that are due.
   */
  settle(ns: LimiterNamespace, out: readonly KeySettlements[], bg: Background): void {
    for (const k of out) {
      const call = this.#callId();
      const sentAt = this.#p.now();
      const sending = callOnce(
        () => ns.getByName(k.name).settle(k.limits, k.settle, call),
        this.#p.config.objectTimeoutMs,
        {
          since: { at: sentAt, now: this.#p.now },
        },
      ).catch((e: unknown) => {
        this.log("lease_return_failed", k.name, e);
        if (isAmbiguous(e))
          this.#unanswered.add({ ns, name: k.name, limits: k.limits, settle: k.settle, call, sentAt });
      });
      bg.waitUntil?.(sending);
    }
    if (this.#unanswered.size > 0) this.#unanswered.resend(bg);
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
    if (this.#unanswered.size > 0) this.#unanswered.resend(r.bg ?? {}, name);
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
