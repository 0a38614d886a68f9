/**
 * @module The RateLimiter Durable Object: one per key, the single writer of that key's log. It receives the calls and
 * delegates: the decision flow (flow.ts), give-backs (give-back.ts) and reads (reads.ts) run over the key's stores
 * (key.ts), each of which alone runs its table's SQL (docs/design.md, "Architecture"). It reads the clock and keeps the
 * idle alarm, which deletes the key's state a day after nothing in it counts any more (key.ts, `IDLE_KEEP_MS`).
 */

import { retryable } from "cloudflare:durable-objects";
import { DurableObject } from "cloudflare:workers";
import { now } from "../base/clock.ts";
import type { RouteBudget } from "../core/budgets.ts";
import type { CreditSpec } from "../core/credits.ts";
import type { Decision, NamedLimit } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import { KeyLog, type Settlement } from "../core/log.ts";
import type { UsagePeriod, UsageSpec } from "../core/usage.ts";
import type { AloneReport, MeterSpecs, RefundedGrant, TakeAsk, TopUp } from "../protocol.ts";
import { MAX_TIME_MS, type Override } from "./controls.ts";
import { type Taken, take } from "./flow.ts";
import { recordAlone, refund, settle } from "./give-back.ts";
import type { KeptMethod } from "./kept.ts";
import { KeyStores, sweepAt } from "./key.ts";
import { checkId } from "./once.ts";
import { type KeyStatus, peek, reset, status } from "./reads.ts";
import { rejecting } from "./sql.ts";
import type { UsageRange } from "./usage.ts";

export { MAX_TIME_MS, type Override } from "./controls.ts";
export { METER_REFUND_MS } from "./give-back.ts";
export type { KeyStatus } from "./reads.ts";
export { SCHEMA_VERSION } from "./schema.ts";

/** What a call that may change the key's state did (see `#once`): its answer, and what comes after it. */
interface Applied<T> {
  readonly answer: T;
  /** Sets the idle alarm, knowing until when the call's answer is kept (ms). */
  readonly arm?: ((keptUntil: number) => Promise<void> | void) | undefined;
  /**
   * Where its answer is kept: by default in storage when the call wrote rows, else in memory; `storage` always (a
   * settle's: it may claim a take's id); `memory` always — a call whose repeat after a restart could only count a
   * grant twice (units lost, never over a limit, never billed twice) or that is once by an id of its own.
   */
  readonly keep?: "storage" | "memory";
}

export class RateLimiter extends DurableObject<unknown> {
  static {
    // Reads change nothing: the runtime may run them again after a disconnect (docs/design.md, "Nothing lost under
    // faults"). The calls that change state are applied once by their id instead (kept.ts), and sent again by the
    // isolate (src/client/policy.ts, `callOnce`).
    retryable(RateLimiter.prototype.peek, RateLimiter.prototype.status, RateLimiter.prototype.usage);
  }

  /** The key's stores, opened (and migrated) when the object loads. */
  #key!: KeyStores;
  /** When the idle alarm fires (ms); null: none set; +∞ while an override without expiry keeps the state. */
  #alarmAt: number | null = null;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      this.#key = new KeyStores(ctx.storage, () => this.clock());
      // Read once per instance (a read is ~free; each setAlarm is billed as a row written).
      this.#alarmAt = await ctx.storage.getAlarm();
    });
  }

  /**
   * Decides one request of `ask.cost` against `limits` at the object's clock (docs/design.md): after the grants the
   * caller made alone and the leases it settles, all or nothing with the key's route, meters, slots and penalty;
   * leasing up to `ask.leaseUnits` more when the key is far from its limits. One row per ring for a grant, nothing for
   * a denial; the output gate holds the answer until the rows are durable.
   */
  take(limits: readonly LimitSpec[], ask: TakeAsk, route?: RouteBudget): Decision | Promise<Decision> {
    return rejecting(() =>
      this.#once(ask?.call, "take", (now) => {
        // No limits at all is a key limited by its calendar quotas alone; without those it is no limit.
        if (Array.isArray(limits) && limits.length === 0 && !(ask?.quotas && ask.quotas.length > 0))
          throw new RangeError("limits: expected at least one limit (or calendar quotas)");
        // Grants the caller made alone while this object could not answer count before anything is decided.
        const recorded = recordAlone(this.#key, now, limits, ask?.alone);
        const taken = take(this.#key, now, { limits, ask, route });
        const answer = this.#seen(now, ask, taken.decision);
        const arm = recorded === 0 ? (kept: number) => this.#armAfter(taken, kept) : () => this.#armAlarm();
        // Applied twice, settlements would move units twice, and meters would bill twice: kept in storage. A plain
        // grant applied twice after a restart only counts twice (never over): kept in memory, no row.
        const settles = (ask?.settle?.length ?? 0) > 0;
        const metered = ask?.quotas !== undefined || ask?.credits !== undefined || ask?.usage !== undefined;
        return { answer, arm, ...(settles || metered ? {} : { keep: "memory" as const }) };
      }),
    );
  }

  /** The key's usage per day or month overlapping `[from, to)`, under `spec`: nothing written. */
  usage(spec: UsageSpec, range: UsageRange): UsagePeriod[] | Promise<UsagePeriod[]> {
    return rejecting(() => this.#key.usage.query(spec, range, this.clock()));
  }

  /**
   * Adds `add` credits to the key's balance (an operator's top-up): a key new to credits starts from the spec's
   * `initial`. With an `id`, once: a top-up sent again with it adds nothing (its id is kept for good). The balance, and
   * whether this call added the credits (false: the id was seen before, nothing changed).
   *
   * @throws RangeError for an `add` that is not a positive whole number, or one that would take the balance past
   *   `MAX_CREDITS` (nothing changes then, and the id is not kept)
   */
  topUp(spec: CreditSpec, add: number, id?: string, call?: string): TopUp | Promise<TopUp> {
    return rejecting(() =>
      this.#once<TopUp>(call, "topUp", (now) => {
        if (id !== undefined) checkId(id, "a top-up");
        const account = this.#key.meters.account(spec);
        if (id !== undefined && this.#key.once.seen("topup", id))
          return { answer: { balance: account.balance(now), applied: false } };
        const state = account.add(now, add);
        this.#key.db.transaction(() => {
          this.#key.meters.writeCredits(state);
          if (id !== undefined) this.#key.once.remember("topup", id, null);
        });
        return { answer: { balance: state.balance, applied: true } };
      }),
    );
  }

  /** {@link topUp}'s balance alone (the call of 0.3.0 and before). */
  credit(spec: CreditSpec, add: number, id?: string): number | Promise<number> {
    const out = this.topUp(spec, add, id);
    return out instanceof Promise ? out.then((t) => t.balance) : out.balance;
  }

  /**
   * Frees the concurrency slot of the request `id`; false when it held none (released, lapsed, never taken). Once per
   * `call` (its id): sent again, it answers as the first time.
   */
  release(id: string, call?: string): boolean | Promise<boolean> {
    // A slot's id frees it once: the answer in memory.
    return rejecting(() =>
      this.#once(call, "release", () => ({ answer: this.#key.slots.release(id), keep: "memory" as const })),
    );
  }

  /** Keeps the slot of the request `id` for `timeoutMs` more; false when it holds none any more. */
  renew(id: string, timeoutMs: number): boolean {
    return this.#key.slots.renew(this.clock(), id, timeoutMs);
  }

  /**
   * Gives back a request's grant from its handle, once per id (a second refund resolves false); false too for a key
   * with no state or one kept under other limits than the grant was recorded under. With `grant.settle`, a settle
   * instead (give-back.ts): its unused units given back, its `debt` recorded now; the same id settles once and is
   * refunded never after.
   *
   * @throws RangeError for a field that is not a grant's (an id of 1 to 128 characters, times, a positive count — 0 or
   *   more for a settle — and a debt of 0 or more)
   */
  refund(limits: readonly LimitSpec[], grant: RefundedGrant, route?: RouteBudget): boolean | Promise<boolean> {
    return rejecting(() =>
      this.#once(grant?.call, "refund", (now) => {
        const done = refund(this.#key, now, { limits, grant, route });
        // The grant's own id gives it back once (once.ts, in storage): the answer in memory.
        return { answer: done, arm: done ? () => this.#armAlarm() : undefined, keep: "memory" as const };
      }),
    );
  }

  /** Records the grants a caller made alone while this object could not answer; the rows written. */
  recover(limits: readonly LimitSpec[], report: AloneReport): number | Promise<number> {
    return rejecting(() =>
      this.#once(report?.call, "recover", (now) => {
        const written = recordAlone(this.#key, now, limits, report);
        // Recorded twice after a restart, grants made alone only count twice, later: the answer in memory.
        return { answer: written, arm: written === 0 ? undefined : () => this.#armAlarm(), keep: "memory" as const };
      }),
    );
  }

  /**
   * Settles leases a caller holds of the key outside a decision; the rows written. Once per `call` (its id), whose
   * answer is kept even when nothing changed: a settle sent with the id of a take whose answer never came claims it
   * (the take, arriving late, applies nothing), or answers with the take's kept decision.
   */
  settle(limits: readonly LimitSpec[], settled: readonly Settlement[], call?: string): number | Promise<number> {
    return rejecting(() =>
      this.#once(call, "settle", (now) => ({ answer: settle(this.#key, now, limits, settled), keep: "storage" })),
    );
  }

  /** Whether a request of `cost` would be granted now; consumes nothing and writes nothing. */
  peek(limits: readonly LimitSpec[], cost = 1, route?: RouteBudget, specs?: MeterSpecs): Decision {
    return peek(this.#key, this.clock(), limits, { cost, route, specs });
  }

  /** The key for an operator (reads.ts, {@link KeyStatus}): consumes nothing and writes nothing. */
  status(
    limits: readonly LimitSpec[],
    buckets = 60,
    routes: readonly RouteBudget[] = [],
    specs: MeterSpecs = {},
  ): KeyStatus {
    return status(this.#key, this.clock(), limits, { buckets, routes, specs });
  }

  /** Forgets the key's grants up to now and its refusals (an operator's reset); answers the status after it. */
  reset(limits: readonly LimitSpec[], buckets = 60, routes: readonly RouteBudget[] = []): KeyStatus {
    reset(this.#key, this.clock(), limits);
    return this.status(limits, buckets, routes);
  }

  /** Refuses every request of the key until `until` (ms), with `Retry-After` to then. */
  async block(until: number): Promise<void> {
    if (!Number.isSafeInteger(until) || until > MAX_TIME_MS) {
      throw new RangeError(`until: expected a time in ms up to ${MAX_TIME_MS}, got ${String(until)}`);
    }
    this.#key.controls.block(until, "operator");
    await this.#armAlarm();
  }

  /** Lifts a block, an operator's or a penalty's. */
  async unblock(): Promise<void> {
    this.#key.controls.unblock();
    await this.#armAlarm();
  }

  /** Decides the key's next requests against `limits` instead of the ones sent, until `expiresAt` (null: until removed). */
  async override(limits: readonly NamedLimit[], expiresAt: number | null): Promise<void> {
    new KeyLog(limits); // throws a RangeError naming the bad field
    if (expiresAt !== null && (!Number.isSafeInteger(expiresAt) || expiresAt > MAX_TIME_MS)) {
      throw new RangeError(`expiresAt: expected a time in ms up to ${MAX_TIME_MS} or null, got ${String(expiresAt)}`);
    }
    const override: Override = {
      limits: limits.map((l) => ({ limit: l.limit, windowMs: l.windowMs, tickMs: l.tickMs, name: l.name })),
      expiresAt,
    };
    await this.#setOverride(override);
  }

  /** Removes the override: the key's plan applies again from its next decision. */
  async clearOverride(): Promise<void> {
    await this.#setOverride(null);
  }

  /**
   * The object's clock in ms: `Date.now()`, or the test kit's clock while a test holds one (src/base/clock.ts). The
   * only place time is read; tests may replace it.
   */
  clock(): number {
    return now();
  }

  /**
   * Forgets what no longer counts (key.ts, `sweep`) and sets the alarm for the next time something needs it: a usage
   * day to drop, or the key a day idle.
   */
  override async alarm(): Promise<void> {
    this.#alarmAt = null;
    const next = await this.#key.sweep(this.clock());
    this.#alarmAt = next;
    if (next === null || next === Number.POSITIVE_INFINITY) return;
    await this.ctx.storage.setAlarm(Math.min(next, MAX_TIME_MS));
  }

  async #setOverride(override: Override | null): Promise<void> {
    this.#key.controls.setOverride(override);
    if (this.#alarmAt === Number.POSITIVE_INFINITY) this.#alarmAt = null;
    await this.#armAlarm();
  }

  /**
   * Applies a call that may change the key's state, once per `call` id (kept.ts; none: no id, applied each time it
   * comes). A call sent again with its id is answered with the answer kept for it, nothing applied — from the same
   * method, or a settle (which answers for a request's take whose every send failed); any other method finds the id
   * spent (a `RangeError`). Else `apply` runs at the object's clock, all of it synchronously, and its answer is kept in
   * the same turn as its change: in storage when a repeat after a restart could break a limit or bill twice (see
   * {@link Applied.keep}), else in memory (a penalty's refusal count is in memory too). Then `arm` — or, for a kept row alone, the idle alarm — is set before
   * the answer goes.
   */
  #once<T>(call: string | undefined, method: KeptMethod, apply: (now: number) => Applied<T>): T | Promise<T> {
    if (call !== undefined) checkId(call, "a call");
    const now = this.clock();
    const seen = call === undefined ? undefined : this.#key.kept.answer(call, now);
    if (seen !== undefined) {
      if (seen.method === method || method === "settle") return seen.answer as T;
      throw new RangeError(`call: the id ${call} was spent by a ${seen.method}`);
    }
    const before = this.#key.db.written;
    const { answer, arm, keep } = apply(now);
    const durable = keep === "storage" || (keep === undefined && this.#key.db.written !== before);
    if (call !== undefined) this.#key.kept.keep(call, now, { method, answer }, durable);
    const armed = arm ? arm(this.#key.kept.keptUntil()) : call !== undefined && durable ? this.#armAlarm() : undefined;
    return armed instanceof Promise ? armed.then(() => answer) : answer;
  }

  /** The decision with the refusals counted towards the penalty it was sent with (none: as it is). */
  #seen(now: number, ask: TakeAsk, decision: Decision): Decision {
    const spec = ask.penalty;
    if (spec === undefined) return decision;
    return { ...decision, refusalsSeen: this.#key.controls.refusals(now, spec.withinMs) };
  }

  /**
   * Sets the idle alarm after a decision that wrote, when none is set: a day after its `idleAt`, or after its answer
   * stops being kept, whichever is later (key.ts, {@link sweepAt}).
   */
  #armAfter({ wrote, idleAt }: Taken, keptUntil: number): Promise<void> | undefined {
    if (!wrote || this.#alarmAt !== null) return undefined;
    this.#alarmAt = sweepAt(Math.max(idleAt, keptUntil));
    return this.ctx.storage.setAlarm(Math.min(this.#alarmAt, MAX_TIME_MS));
  }

  /** Sets the idle alarm after a change outside a decision, unless one is set (the alarm re-checks when it fires). */
  async #armAlarm(): Promise<void> {
    if (this.#alarmAt !== null) return;
    const at = this.#key.idleAt();
    if (this.#key.db.empty) return;
    if (at === Number.POSITIVE_INFINITY) {
      this.#alarmAt = at;
      return;
    }
    this.#alarmAt = Math.max(sweepAt(at), this.clock());
    await this.ctx.storage.setAlarm(Math.min(this.#alarmAt, MAX_TIME_MS));
  }
}
