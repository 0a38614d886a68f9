// The object's behaviour in memory for the client's unit tests (test/unit/client.test.ts, failure.test.ts): the real core (KeyLog) at a clock the test moves for
// both the client and the object, with failures on demand (an error with the runtime's flags, or a call that hangs).

import { type Background, LimiterClient, type LimiterNamespace } from "../../src/client/index.ts";
import type { GrantRecord, RateLimitResult } from "../../src/client/result.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig, Plan } from "../../src/config/types.ts";
import { CreditAccount } from "../../src/core/credits.ts";
import { type Decision, KeyLog, type LimitSpec, type NamedLimit, type Settlement } from "../../src/core/index.ts";
import { fitOf, giveBackUnused, type Meters, takeMetered, withMeters } from "../../src/core/meters.ts";
import { QuotaBook } from "../../src/core/quota.ts";
import { Slots } from "../../src/core/slots.ts";
import type { AloneReport, TakeAsk as Ask, MeterSpecs, RefundedGrant } from "../../src/protocol.ts";

export const T0 = 1_800_000_000_000;

/** The grant a result's handle records for its key's budget. */
export const grantOf = (r: RateLimitResult): GrantRecord => r.handle?.grants[0] as GrantRecord;

/** The object's behaviour for one key, in memory: the real core's decisions at the shared clock. */
export class Store {
  readonly logs = new Map<string, KeyLog>();
  /** An operator's block per object name: its end (ms). */
  readonly blocks = new Map<string, number>();
  /** Object names whose block is a penalty (the object says so with `blockCause`). */
  readonly penalties = new Set<string>();
  /** An operator's override per object name: the limits decided against instead. */
  readonly overrides = new Map<string, NamedLimit[]>();
  readonly calls: {
    name: string;
    method: string;
    ask?: Ask;
    units?: number;
    settle?: readonly Settlement[];
    report?: AloneReport;
    /** A settle's call id (a take's is in its `ask`). */
    call?: string;
  }[] = [];
  /** Calls made while it is set wait for it after their failure check, before the object decides (a slow round trip). */
  gate: Promise<void> | null = null;
  /** Makes the next calls fail: an Error with these flags, or a promise that never settles. */
  fail: { retryable?: boolean; overloaded?: boolean; remote?: boolean } | "hang" | null = null;
  failures = 0;
  /**
   * Makes the next calls that change state lose their answer after the object applied them (and kept the answer by
   * the call's id): they fail with an Error with these flags, as a dropped connection does.
   */
  lose: { retryable?: boolean; durableObjectReset?: boolean } | null = null;
  losses = 0;
  /** The answers kept by call id, per key (src/object/kept.ts): a call sent again gets its first answer. */
  readonly kept = new Map<string, unknown>();
  /** Grant ids refunded (the object gives each back once). */
  readonly refunded = new Set<string>();

  /** Each key's concurrency slots, as the object keeps them (src/core/slots.ts). */
  readonly slots = new Map<string, Slots>();
  /** Each key's calendar quotas and credits, as the object keeps them (src/core/meters.ts). */
  readonly meters = new Map<string, Meters>();

  constructor(readonly now: () => number) {}

  /** The key's meters for the specs sent (counts carried over from the ones before, as the object's rows); none sent: as kept. */
  book(name: string, specs: MeterSpecs | undefined): Meters | null {
    const have = this.meters.get(name) ?? null;
    if (specs === undefined || (specs.quotas === undefined && specs.credits === undefined)) return have;
    const quotas =
      specs.quotas === undefined
        ? null
        : have?.quotas?.isFor(specs.quotas)
          ? have.quotas
          : new QuotaBook(specs.quotas, have?.quotas?.rows() ?? []);
    const credits =
      specs.credits === undefined
        ? null
        : (have?.credits ?? new CreditAccount(specs.credits, have?.credits?.state() ?? null));
    const meters = { quotas, credits };
    this.meters.set(name, meters);
    return meters;
  }

  /** The key's log for the limits applied (an override's, else those sent), as the object keeps it. */
  log(name: string, limits: readonly LimitSpec[]): KeyLog {
    const applied = this.overrides.get(name) ?? limits;
    const id = `${name}\u0000${JSON.stringify(applied)}`;
    let log = this.logs.get(id);
    if (!log) {
      log = new KeyLog(applied);
      this.logs.set(id, log);
    }
    return log;
  }

  /** A decision as the object returns it: a block refuses, an override says it applied. */
  #decide(name: string, limits: readonly LimitSpec[], decide: (log: KeyLog) => Decision, cost: number): Decision {
    const log = this.log(name, limits);
    const until = this.blocks.get(name);
    const blocked = until !== undefined && until > this.now();
    const refused = blocked ? log.refuse(this.now(), cost, until) : decide(log);
    const d: Decision = blocked && this.penalties.has(name) ? { ...refused, blockCause: "penalty" } : refused;
    const override = this.overrides.get(name);
    return override ? { ...d, limitsOverride: override } : d;
  }

  /** Records what an isolate granted alone, as the object does: in the key's own budget and its routes'. */
  #recover(name: string, limits: readonly LimitSpec[], report: AloneReport | undefined): number {
    if (report === undefined) return 0;
    let rows = this.log(name, limits).record(this.now(), report.uses).length;
    for (const r of report.routes)
      rows += this.log(`${name}\u0000${r.budget.name}`, r.budget.limits).record(this.now(), r.uses).length;
    return rows;
  }

  /**
   * A call that may change state, once per call id (src/object/kept.ts): sent again, it is answered as the first
   * time; applied or answered from what was kept, its answer may be lost ({@link lose}).
   */
  async #once<T>(name: string, call: string | undefined, apply: () => T | Promise<T>): Promise<T> {
    const id = call === undefined ? undefined : `${name}\u0000${call}`;
    const kept = id !== undefined && this.kept.has(id);
    const answer = kept ? (this.kept.get(id) as T) : await apply();
    if (id !== undefined) this.kept.set(id, answer);
    if (this.lose && this.losses-- > 0) throw Object.assign(new Error("answer lost"), this.lose);
    return answer;
  }

  /** A request's decision at the object, as src/object/flow.ts makes it. */
  #take(name: string, limits: readonly LimitSpec[], ask: Ask): Decision {
    this.#recover(name, limits, ask.alone);
    const book = this.book(name, ask);
    const slots = this.slotsOf(name);
    const slot = ask.slot;
    // As the object: a request its limits would grant is refused for its concurrency alone when every slot is held.
    if (slot !== undefined && !slots.fits(this.now(), slot.id, slot)) {
      const fits = this.log(name, limits).check(this.now(), ask.cost);
      if (fits.allowed) {
        return { ...fits, allowed: false, retryAfterMs: 1000, blockedUntil: fits.now, concurrencyFull: true };
      }
    }
    const take = (log: KeyLog) =>
      book === null ? log.take(this.now(), ask).decision : takeMetered([log], book, this.now(), ask).decision;
    const d = this.#decide(name, limits, take, ask.cost);
    if (d.allowed && slot !== undefined) slots.take(this.now(), slot.id, slot);
    return d;
  }

  /** A refund or settle at the object, once per grant id, as src/object/give-back.ts makes it. */
  #refund(name: string, limits: readonly LimitSpec[], grant: RefundedGrant): boolean {
    const { id, recordedAt, units, at, debt = 0 } = grant;
    if (this.refunded.has(id)) return false;

    this.refunded.add(id);
    const meters = this.book(name, undefined);
    // A settled leased grant: its quota units only (src/object/give-back.ts, refundQuotas); a settle spends its id
    // and records its debt even so.
    if (grant.quotasOnly) {
      if ((at === undefined || !meters?.quotas) && !grant.settle) return false;
      if (at !== undefined && units > 0) meters?.quotas?.giveBack(this.now(), at, units);
    } else if (units > 0) {
      this.log(name, limits).giveBack(recordedAt, units);
      if (at !== undefined) meters?.quotas?.giveBack(this.now(), at, units);
      if (at !== undefined) meters?.credits?.giveBack(units, at, this.now());
    }
    // A settle's debt (src/object/debt.ts): at now, over the limits, in the quotas and the credits (down to 0).
    if (debt > 0) {
      this.log(name, limits).record(this.now(), [{ ageMs: 0, units: debt }]);
      meters?.quotas?.take(this.now(), debt, true);
      const spent = Math.min(debt, meters?.credits?.balance(this.now()) ?? 0);
      if (spent > 0) meters?.credits?.take(this.now(), spent);
    }
    return true;
  }

  async #maybeFail(): Promise<void> {
    if (this.fail === "hang") return new Promise(() => {});
    if (this.fail && this.failures-- > 0) throw Object.assign(new Error("object failed"), this.fail);
  }

  namespace(): LimiterNamespace {
    const stub = (name: string) => ({
      take: async (limits: readonly LimitSpec[], ask: Ask): Promise<Decision> => {
        this.calls.push({ name, method: "take", ask });
        const gate = this.gate;
        await this.#maybeFail();
        if (gate) await gate;
        return this.#once(name, ask.call, () => this.#take(name, limits, ask));
      },
      release: async (id: string, call?: string): Promise<boolean> => {
        this.calls.push({ name, method: "release", call });
        await this.#maybeFail();
        return this.#once(name, call, () => this.slotsOf(name).release(id));
      },
      renew: async (id: string, timeoutMs: number): Promise<boolean> => {
        this.calls.push({ name, method: "renew" });
        await this.#maybeFail();
        return this.slotsOf(name).renew(this.now(), id, timeoutMs) !== null;
      },
      refund: async (limits: readonly LimitSpec[], grant: RefundedGrant) => {
        const { recordedAt, units } = grant;
        // The object's checks (src/object/give-back.ts): times in ms, a settle's units from 0, a refund's from 1.
        if (!recordedAt.every((t) => Number.isSafeInteger(t))) throw new RangeError("recordedAt: expected times in ms");
        if (!Number.isSafeInteger(units) || units < (grant.settle ? 0 : 1)) throw new RangeError("units: not a count");
        this.calls.push({ name, method: "refund", units });
        return this.#once(name, grant.call, () => this.#refund(name, limits, grant));
      },
      settle: async (limits: readonly LimitSpec[], settle: readonly Settlement[], call?: string) => {
        this.calls.push({ name, method: "settle", settle, call });
        await this.#maybeFail();
        return this.#once(name, call, () => {
          const log = this.log(name, limits);
          const meters = this.book(name, undefined);
          if (meters !== null) giveBackUnused(meters, this.now(), settle);
          return settle.flatMap((x) => log.settle(this.now(), x)).length;
        });
      },
      recover: async (limits: readonly LimitSpec[], report: AloneReport): Promise<number> => {
        this.calls.push({ name, method: "recover", report });
        await this.#maybeFail();
        return this.#once(name, report.call, () => this.#recover(name, limits, report));
      },
      peek: async (
        limits: readonly LimitSpec[],
        cost: number,
        _route?: unknown,
        specs?: MeterSpecs,
      ): Promise<Decision> => {
        this.calls.push({ name, method: "peek" });
        await this.#maybeFail();
        const meters = this.book(name, specs);
        const check = (log: KeyLog) => {
          const d = log.check(this.now(), cost);
          return meters === null ? d : withMeters(d, meters, fitOf(meters, d.now, cost));
        };
        return this.#decide(name, limits, check, cost);
      },
    });
    return { getByName: stub } as unknown as LimiterNamespace;
  }

  /** The key's slots at the object (held until released or lapsed). */
  slotsOf(name: string): Slots {
    let slots = this.slots.get(name);
    if (!slots) {
      slots = new Slots();
      this.slots.set(name, slots);
    }
    return slots;
  }

  count(method: string): number {
    return this.calls.filter((c) => c.method === method).length;
  }
}

export function setup(settings: Record<string, unknown> = {}) {
  let now = T0;
  const clock = () => now;
  const config = parseLimiterConfig({ limits: [{ limit: 100, window: "1m" }], ...settings }, "test") as LimiterConfig;
  const client = new LimiterClient(config, { clock });
  const store = new Store(clock);
  const ns = store.namespace();
  const pending: Promise<unknown>[] = [];
  const bg: Background = { waitUntil: (p) => void pending.push(p) };
  const plan = config.defaultPlan as Plan;
  return {
    client,
    store,
    ns,
    plan,
    bg,
    advance: (ms: number) => {
      now += ms;
    },
    settle: async () => {
      while (pending.length > 0) await pending.shift();
    },
    limit: (name = "key:a", cost = 1) => client.limit({ ns, name, plan, cost, bg }),
  };
}
