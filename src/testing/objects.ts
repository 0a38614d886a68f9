/**
 * @module The key's objects in memory, for the test kit (src/testing/index.ts): what the `RateLimiter` object answers
 * `take`, `peek`, `refund`, `settle`, `recover`, `release`, `renew`, `reset` and `topUp` with, decided by the same pure core
 * (src/core/: the key's log, calendar quotas, credits, settlement, concurrency slots) at the clock a test moves. No
 * storage, no runtime: plain Node runs it. What the object does beyond this — routes, penalties, usage, operators'
 * blocks and overrides — the kit refuses to configure rather than approximate.
 */

import type { LimiterNamespace } from "../client/index.ts";
import { CreditAccount, type CreditSpec } from "../core/credits.ts";
import type { Decision } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import { KeyLog, type Settlement } from "../core/log.ts";
import { fitOf, giveBackUnused, type Meters, takeMetered, withMeters } from "../core/meters.ts";
import { QuotaBook } from "../core/quota.ts";
import { Slots } from "../core/slots.ts";
import type { AloneReport, MeterSpecs, RefundedGrant, TakeAsk, TopUp } from "../protocol.ts";

/** One key's state, as its object keeps it. */
interface KeyState {
  /** The key's log per limits decided against (a change of limits starts another, as the object rebuilds its rings). */
  readonly logs: Map<string, KeyLog>;
  meters: Meters | null;
  readonly slots: Slots;
  /** Grant ids given back or settled (each once). */
  readonly spent: Set<string>;
  /** Top-up ids applied (each once). */
  readonly topUps: Set<string>;
}

/** Every key's object in memory, at `now()`. */
export class MemoryObjects {
  readonly #keys = new Map<string, KeyState>();

  constructor(readonly now: () => number) {}

  /** The object names that hold state. */
  names(): string[] {
    return [...this.#keys.keys()];
  }

  /** Forgets every key (a fresh deployment). */
  clear(): void {
    this.#keys.clear();
  }

  /** The namespace the limiter reads as its `RateLimiter` binding. */
  namespace(): LimiterNamespace {
    const ns = { getByName: (name: string) => this.#stub(name), jurisdiction: () => ns };
    return ns as unknown as LimiterNamespace;
  }

  #key(name: string): KeyState {
    let k = this.#keys.get(name);
    if (!k) {
      k = { logs: new Map(), meters: null, slots: new Slots(), spent: new Set(), topUps: new Set() };
      this.#keys.set(name, k);
    }
    return k;
  }

  #log(k: KeyState, limits: readonly LimitSpec[]): KeyLog {
    const id = JSON.stringify(limits);
    let log = k.logs.get(id);
    if (!log) {
      log = new KeyLog(limits);
      k.logs.set(id, log);
    }
    return log;
  }

  /** The key's meters for the specs a call sends (counts carried over, as the object's rows); none sent: as kept. */
  #meters(k: KeyState, specs: MeterSpecs | undefined): Meters | null {
    const have = k.meters;
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
    k.meters = { quotas, credits };
    return k.meters;
  }

  #recover(k: KeyState, limits: readonly LimitSpec[], report: AloneReport | undefined): number {
    return report === undefined ? 0 : this.#log(k, limits).record(this.now(), report.uses).length;
  }

  #stub(name: string) {
    const k = this.#key(name);
    const now = () => this.now();
    return {
      take: async (limits: readonly LimitSpec[], ask: TakeAsk): Promise<Decision> => {
        this.#recover(k, limits, ask.alone);
        const meters = this.#meters(k, ask);
        const log = this.#log(k, limits);
        const slot = ask.slot;
        // As the object: a request its limits would grant is refused for its concurrency alone when every slot is held.
        if (slot !== undefined && !k.slots.fits(now(), slot.id, slot)) {
          const fits = log.check(now(), ask.cost);
          if (fits.allowed) {
            return { ...fits, allowed: false, retryAfterMs: 1000, blockedUntil: fits.now, concurrencyFull: true };
          }
        }
        const d = meters === null ? log.take(now(), ask).decision : takeMetered([log], meters, now(), ask).decision;
        if (d.allowed && slot !== undefined) k.slots.take(now(), slot.id, slot);
        return d;
      },
      peek: async (limits: readonly LimitSpec[], cost: number, _route?: unknown, specs?: MeterSpecs) => {
        const meters = this.#meters(k, specs);
        const d = this.#log(k, limits).check(now(), cost);
        return meters === null ? d : withMeters(d, meters, fitOf(meters, d.now, cost));
      },
      refund: async (limits: readonly LimitSpec[], grant: RefundedGrant): Promise<boolean> => {
        const { id, recordedAt, units, at, debt = 0 } = grant;
        // The object's checks (src/object/give-back.ts): times in ms, a settle's units from 0, a refund's from 1.
        if (!recordedAt.every((t) => Number.isSafeInteger(t))) throw new RangeError("recordedAt: expected times in ms");
        if (!Number.isSafeInteger(units) || units < (grant.settle ? 0 : 1)) throw new RangeError("units: not a count");
        if (k.spent.has(id)) return false;
        k.spent.add(id);
        const meters = k.meters;
        if (grant.quotasOnly) {
          if ((at === undefined || !meters?.quotas) && !grant.settle) return false;
          if (at !== undefined && units > 0) meters?.quotas?.giveBack(now(), at, units);
        } else if (units > 0) {
          this.#log(k, limits).giveBack(recordedAt, units);
          if (at !== undefined) meters?.quotas?.giveBack(now(), at, units);
          if (at !== undefined) meters?.credits?.giveBack(units, at, now());
        }
        // A settle's debt (src/object/debt.ts): at now, over the limits, in the quotas and the credits (down to 0).
        if (debt > 0) {
          this.#log(k, limits).record(now(), [{ ageMs: 0, units: debt }]);
          meters?.quotas?.take(now(), debt, true);
          const spent = Math.min(debt, meters?.credits?.balance(now()) ?? 0);
          if (spent > 0) meters?.credits?.take(now(), spent);
        }
        return true;
      },
      settle: async (limits: readonly LimitSpec[], settle: readonly Settlement[]): Promise<number> => {
        if (k.meters !== null) giveBackUnused(k.meters, now(), settle);
        const log = this.#log(k, limits);
        return settle.flatMap((s) => log.settle(now(), s)).length;
      },
      topUp: async (spec: CreditSpec, add: number, id?: string): Promise<TopUp> => {
        // As the object (src/object/index.ts): an id is 1 to 128 characters, a top-up with an id seen adds nothing.
        if (id !== undefined && (typeof id !== "string" || id.length === 0 || id.length > 128))
          throw new RangeError("id: expected a top-up's id (1 to 128 characters)");
        const account = k.meters?.credits ?? new CreditAccount(spec, null);
        k.meters = { quotas: k.meters?.quotas ?? null, credits: account };
        if (id !== undefined && k.topUps.has(id)) return { balance: account.balance(now()), applied: false };
        const { balance } = account.add(now(), add);
        if (id !== undefined) k.topUps.add(id);
        return { balance, applied: true };
      },
      recover: async (limits: readonly LimitSpec[], report: AloneReport) => this.#recover(k, limits, report),
      release: async (id: string) => k.slots.release(id),
      renew: async (id: string, timeoutMs: number) => k.slots.renew(now(), id, timeoutMs) !== null,
      // As the object (src/object/reads.ts): the key's grants up to now are forgotten (units leased after it still
      // count); its quotas and credits stay.
      reset: async (limits: readonly LimitSpec[]) => {
        this.#log(k, limits).forget(now());
      },
    };
  }
}
