/**
 * @module The RateLimiter Durable Object: one per key, the single writer of that key's log.
 * Loads the log from SQLite once, decides with the pure core, writes the one row per ring that a
 * grant or lease touched (nothing for a denial), and deletes the key's state once nothing in it
 * counts any more. It also keeps what operators set on the key (a block, an override of its
 * limits; docs/operating.md) and applies them to every decision.
 */

import { DurableObject } from "cloudflare:workers";
import { combine, type RouteBudget, type TakenTogether, takeTogether } from "../core/budgets.ts";
import { CreditAccount, type CreditSpec, type CreditState } from "../core/credits.ts";
import type { Decision, NamedLimit } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import { checkUses, type History, KeyLog, type Outcome, type Settlement } from "../core/log.ts";
import { fitOf, giveBackUnused, type Meters, type MeterWrites, takeMetered, withMeters } from "../core/meters.ts";
import { NO_PENALTY, type PenaltySpec, type PenaltyState, refused } from "../core/penalty.ts";
import { QuotaBook, type QuotaRow, type QuotaSpec } from "../core/quota.ts";
import type { SlotRow } from "../core/ring.ts";
import { checkSlotAsk, checkSlotTimeout, Slots } from "../core/slots.ts";
import { checkUsage, keptFrom, type UsagePeriod, type UsageSpec, usageBy, usageDay } from "../core/usage.ts";
import type { AloneReport, MeterSpecs, RefundedGrant, TakeAsk } from "../protocol.ts";

const UPSERT =
  "INSERT INTO budget_slots (budget, ring, key, ts, cost) VALUES (?, ?, ?, ?, ?) ON CONFLICT (budget, ring, key) DO UPDATE SET ts = excluded.ts, cost = excluded.cost";

/** The key's own budget in `budget_slots` and the logs; a route's budget is its route's name (never empty). */
const KEY_BUDGET = "";

/** A budget's longest window as its rows were last written under (`meta` row `window:<budget>`, ms). */
const windowKey = (budget: string) => `window:${budget}`;

/**
 * The latest time an operator may give (a block's end, an override's expiry), and the latest alarm
 * set: 2100-01-01T00:00:00Z. The runtime refuses alarms a little after 2189 and `Date` ends in
 * 275760; an alarm due later is set here and re-armed when it fires.
 */
export const MAX_TIME_MS = Date.UTC(2100, 0, 1);

/** A request being decided ({@link RateLimiter.take}): its time, what it asks, the override in force, and how its budgets refuse. */
interface Deciding {
  readonly now: number;
  readonly ask: TakeAsk;
  readonly override: Override | null;
  /** When nothing its budgets hold counts any more. */
  readonly idleAt: number;
  /** The refusal of its budgets until `until` (a block's end). */
  readonly refuse: (until: number) => Decision;
}

/** One log's outcome in {@link takeTogether}'s shape: its decision and its rows, as the first of the logs. */
function single(o: Outcome): TakenTogether {
  return { decision: o.decision, writes: [o.writes] };
}

/** The decision, saying which override's limits it applied. */
function withOverride(decision: Decision, override: Override | null): Decision {
  return override ? { ...decision, limitsOverride: override.limits } : decision;
}

/** Whether `a` and `b` are the same credits (a spec sent with each call is compared, not rebuilt). */
function sameCredits(a: CreditSpec, b: CreditSpec): boolean {
  const [r, t] = [a.refill ?? null, b?.refill ?? null];
  return (
    a.initial === b?.initial &&
    (r === null || t === null ? r === t : r.amount === t.amount && r.period === t.period && r.zone === t.zone)
  );
}

/** Whether `log` was built for these limits (same N, W and tick, in order): else it must be rebuilt. */
function builtFor(log: KeyLog, limits: readonly LimitSpec[]): boolean {
  const have = log.limits;
  if (!Array.isArray(limits) || have.length !== limits.length) return false;
  return have.every((a, i) => {
    const b = limits[i] as LimitSpec;
    return a.limit === b.limit && a.windowMs === b.windowMs && (b.tickMs === undefined || a.tickMs === b.tickMs);
  });
}

/** Per-key limits an operator set in place of the plan's, until `expiresAt` (ms; null: until removed). */
export interface Override {
  readonly limits: readonly NamedLimit[];
  readonly expiresAt: number | null;
}

/** A key as an operator sees it (`status`): nothing consumed, nothing written. */
export interface KeyStatus {
  /** The object's clock (ms). */
  readonly now: number;
  /** The key's state under the limits applied now, as a request of cost 0 would see it. */
  readonly decision: Decision;
  /** The block's end (ms), while it lasts. */
  readonly blockedUntil: number | null;
  /** What set the block: an operator, or a penalty for repeated refusals; null while none lasts. */
  readonly blockCause: "operator" | "penalty" | null;
  /** Refusals counted towards a penalty, still within its span. */
  readonly refusals: number;
  /** Requests holding a concurrency slot now (docs/configuration.md, "Concurrency"). */
  readonly inFlight: number;
  /** The override in force, if any (its limits are the ones `decision` reports). */
  readonly override: Override | null;
  /** Grants over the longest window of the limits applied (`limit` −1 and no counts: a key of quotas alone). */
  readonly history: History & { readonly limit: number };
  /** Whether the key has any stored state at all. */
  readonly stored: boolean;
  /** Each route budget asked about, as a request of that route of cost 0 would see it (its own limits only). */
  readonly routes: readonly { readonly name: string; readonly decision: Decision }[];
}

/** A refunded grant's id is kept as the `meta` row `refund:<id>` (its value: when it may be forgotten, ms). */
const REFUND_PREFIX = "refund:";
/** The first key after every `refund:` key. */
const REFUND_END = "refund;";

/**
 * How long after a grant a refund gives its units back to the key's quotas, credits and usage (ms): a day. Its id is
 * kept as long, so a refund sent again gives nothing back twice.
 */
export const METER_REFUND_MS = 86_400_000;

/** Top-ups' ids (`credit(…, id)`) are kept as `meta` rows `topup:<id>`: a top-up sent again adds nothing. */
const TOPUP_PREFIX = "topup:";

export class RateLimiter extends DurableObject<unknown> {
  readonly #sql: SqlStorage;
  /** The logs in memory, by budget: the key's own ({@link KEY_BUDGET}) and its routes' (docs/configuration.md, "Per-route budgets"). */
  readonly #logs = new Map<string, KeyLog>();
  /**
   * When the scheduled idle alarm fires (ms), or null when none is set; Infinity while an
   * override without expiry keeps the key's state (no alarm is needed then).
   */
  #alarmAt: number | null = null;
  /** Whether the tables exist: a key nobody has written to has none (`status` creates nothing). */
  #tables = false;
  #blockUntil: number | null = null;
  #blockCause: "operator" | "penalty" = "operator";
  /** Refusals counted towards a penalty (docs/configuration.md, "Penalties") and the last penalty's length and end. */
  #penalty: PenaltyState & { readonly withinMs?: number } = NO_PENALTY;
  #override: Override | null = null;
  /** Concurrency slots held (docs/configuration.md, "Concurrency"), each stored as a row of `inflight`. */
  #slots = new Slots();
  /** Whether the `inflight` table exists (made by the key's first slot). */
  #slotTable = false;
  /** The key's calendar quotas, for the specs last sent (docs/configuration.md, "Quotas and credits"); null: none yet. */
  #quotas: QuotaBook | null = null;
  /** The key's credits, for the spec last sent (docs/configuration.md, "Quotas and credits"); null: none yet. */
  #credits: CreditAccount | null = null;
  /** Whether the `usage` table exists (made by the key's first grant under a plan that keeps usage). */
  #usageTable = false;
  /** The usage spec last stored (JSON), so that a grant rewrites it only when it changed; and as checked. */
  #usageSpec: string | null = null;
  #usageKept: UsageSpec | null = null;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env);
    this.#sql = ctx.storage.sql;
    // Read the stored alarm once per instance (a read is ~free; each setAlarm is billed as a row
    // written), so a grant after a restart does not set an alarm that is already set.
    void ctx.blockConcurrencyWhile(async () => {
      // One look at the schema: a key's state, and its concurrency slots' table (made by its first slot).
      const tables = this.#sql
        .exec<{ name: string }>(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('budget_slots', 'grants', 'slots', 'inflight', 'usage')",
        )
        .toArray()
        .map((t) => t.name);
      this.#slotTable = tables.includes("inflight");
      this.#usageTable = tables.includes("usage");
      if (tables.some((t) => t !== "inflight")) {
        this.#createTables();
        this.#loadControls();
      }
      this.#alarmAt = await ctx.storage.getAlarm();
    });
  }

  /**
   * Decides one request of `ask.cost` against `limits` at the object's clock, after taking back
   * `ask.settle` (the caller's leases: used units re-dated, unused ones taken back), and leases up to `ask.leaseUnits` more for up to
   * `ask.leaseMs`, sized by the key's headroom. One row per ring for a grant and per given-back
   * slot, nothing else. Synchronous up to the alarm, so no other call interleaves;
   * the output gate holds the answer until the rows are durable.
   */
  take(limits: readonly LimitSpec[], ask: TakeAsk, route?: RouteBudget): Decision | Promise<Decision> {
    try {
      // No limits at all is a key limited by its calendar quotas alone; without those it is no limit.
      if (Array.isArray(limits) && limits.length === 0 && !(ask?.quotas && ask.quotas.length > 0))
        throw new RangeError("limits: expected at least one limit (or calendar quotas)");
      const now = this.clock();
      // Grants the caller made alone while this object could not answer count before anything is decided.
      const recorded = this.#recordAlone(now, limits, ask?.alone);
      const out = this.#withRefusalsSeen(now, ask, this.#take(now, limits, ask, route));
      return recorded === 0 ? out : Promise.resolve(out).then((d) => this.#armAlarm().then(() => d));
    } catch (e) {
      return Promise.reject(e); // as from an async method: invalid input is a rejection
    }
  }

  /**
   * {@link take} at `now`, for the key's own budget and, with `route`, the route's: one path for both (a route's
   * request must fit both and is recorded in both or neither, per request: a route's requests never lease).
   * Settlements sent with a request the key's block refuses stay where they are (later: safe).
   */
  #take(now: number, limits: readonly LimitSpec[], ask: TakeAsk, route?: RouteBudget): Decision | Promise<Decision> {
    const override = this.#activeOverride(now);
    const log = this.#logOf(KEY_BUDGET, override?.limits ?? limits);
    const logs = route === undefined ? [log] : [log, this.#routeLog(route)];
    const refuse = (until: number) => combine(logs.map((l) => l.refuse(now, ask.cost, until)));
    const idleAt = () => Math.max(...logs.map((l) => l.idleAt), this.#quotas?.idleAt ?? Number.NEGATIVE_INFINITY);
    // The refusals the caller answered from its deny cache count first: when they complete a penalty, this request
    // is decided under the block they start (docs/design.md, "What real clients do").
    const reported = this.#countReported(now, ask);
    const meters = this.#meters(ask);
    // Refused before the decision (a penalty completed, a block, every slot held): the unused units of leases settled
    // with it still go back to the meters (the log keeps its records where they are: later is safe).
    const refusing = () => meters !== null && this.#writeMeters(giveBackUnused(meters, now, ask.settle ?? []));
    if (reported !== null) {
      refusing();
      return this.#armAfter(true, this.#idleAt(), this.#blocked(refuse(reported), override));
    }
    // Keys with credits or usage get no leases: units leased to an isolate that vanished would be spent (or billed).
    const own =
      ask.credits || ask.usage
        ? { ...ask, refused: 0, leaseUnits: 0, leaseMs: 0, leaseLeadMs: 0 }
        : { ...ask, refused: 0 };
    if (this.#blockUntil !== null && this.#blockUntil > now) {
      const out = this.#blocked(refuse(this.#blockUntil), override);
      return refusing() ? this.#armAfter(true, idleAt(), out) : out;
    }
    const full = this.#slotsFull(now, own, logs);
    if (full) {
      refusing();
      return this.#full({ now, ask: own, override, idleAt: idleAt(), refuse }, full);
    }
    const { decision, writes, wroteMeters } = this.#takeLogs(now, own, logs, meters);
    const [rows = [], routed = []] = writes;
    this.#write(KEY_BUDGET, rows);
    if (route !== undefined) this.#write(route.name, routed);
    if (decision.allowed) this.#takeSlot(now, own);
    const penalized = this.#countRefusals(now, own, decision);
    if (penalized !== null) {
      const out = decision.allowed ? decision : refuse(penalized);
      return this.#armAfter(true, idleAt(), this.#blocked(out, override, decision.allowed));
    }
    return this.#armAfter(rows.length > 0 || wroteMeters, idleAt(), withOverride(decision, override));
  }

  /**
   * The logs' decision on `ask` (the key's, with a route's: per request), and their rows; with the key's meters
   * (calendar quotas, credits), decided with them all or nothing (src/core/meters.ts, `takeMetered`): `wroteMeters` says
   * a meter's row was written.
   */
  #takeLogs(
    now: number,
    ask: TakeAsk,
    logs: readonly KeyLog[],
    meters: Meters | null,
  ): TakenTogether & { readonly wroteMeters: boolean } {
    let taken: TakenTogether;
    let wrote = false;
    if (meters !== null) {
      const { quotaRows, credits, ...rest } = takeMetered(logs, meters, now, ask);
      wrote = this.#writeMeters({ quotaRows, credits });
      taken = rest;
    } else {
      const [log, routed] = logs as [KeyLog, KeyLog | undefined];
      taken = routed === undefined ? single(log.take(now, ask)) : takeTogether(logs, now, ask.cost);
    }
    const d = taken.decision;
    if (ask.usage === undefined || !d.allowed || d.cost === 0) return { ...taken, wroteMeters: wrote };
    this.#countUsage(ask.usage, d.now, { requests: 1, cost: d.cost });
    return { ...taken, wroteMeters: true };
  }

  /**
   * Counts a grant in the usage of the day of `t` (docs/configuration.md, "Usage"): one row per day, written with the
   * grant. The spec is kept too (a `meta` row), for the alarm's pruning.
   */
  #countUsage(spec: UsageSpec, t: number, counted: { requests: number; cost: number }): void {
    if (this.#usageSpec === null && this.#usageTable) this.#storedUsageSpec();
    const kept = this.#usageKept;
    const checked =
      kept !== null && kept.zone === spec?.zone && kept.keepDays === spec.keepDays ? kept : checkUsage(spec);
    if (!this.#usageTable) {
      this.#ensureTables();
      // One row per day of use, in a table made for keys whose plan keeps usage only.
      this.#sql.exec(
        "CREATE TABLE IF NOT EXISTS usage (day INTEGER PRIMARY KEY, requests INTEGER NOT NULL, cost INTEGER NOT NULL) WITHOUT ROWID",
      );
      this.#usageTable = true;
    }
    if (checked !== kept) {
      const text = JSON.stringify(checked);
      if (this.#usageSpec !== text) this.#setMeta("usage", text);
      this.#usageSpec = text;
      this.#usageKept = checked;
    }
    this.#sql.exec(
      "INSERT INTO usage (day, requests, cost) VALUES (?, ?, ?) ON CONFLICT (day) DO UPDATE SET requests = requests + excluded.requests, cost = cost + excluded.cost",
      usageDay(checked, t),
      counted.requests,
      counted.cost,
    );
  }

  /**
   * The key's usage per day or month overlapping `[from, to)`, under `spec` (its zone, its retention): periods without
   * use left out, nothing written (docs/operating.md, "Usage").
   *
   * @throws RangeError for a spec, a period or a range that is not one
   */
  usage(
    spec: UsageSpec,
    range: { readonly period: "day" | "month"; readonly from: number; readonly to: number },
  ): UsagePeriod[] | Promise<UsagePeriod[]> {
    try {
      const checked = checkUsage(spec);
      const rows = this.#usageTable
        ? this.#sql
            .exec<{ day: number; requests: number; cost: number }>(
              "SELECT day, requests, cost FROM usage WHERE day >= ?",
              keptFrom(checked, this.clock()),
            )
            .toArray()
        : [];
      return usageBy(checked, rows, range);
    } catch (e) {
      return Promise.reject(e); // as from an async method: invalid input is a rejection
    }
  }

  /**
   * Drops the days of usage past retention (as the stored spec keeps them); returns when the oldest day kept leaves
   * it (ms), or null when no usage is kept.
   */
  #pruneUsage(now: number): number | null {
    if (!this.#usageTable) return null;
    const kept = this.#storedUsageSpec();
    if (kept === null) return null;
    this.#sql.exec("DELETE FROM usage WHERE day < ?", keptFrom(kept, now));
    const oldest = this.#sql.exec<{ day: number | null }>("SELECT MIN(day) AS day FROM usage").one().day;
    return oldest === null ? null : oldest + (kept.keepDays + 1) * 86_400_000;
  }

  /** The key's meters for what a call sent (null: no quotas, credits or usage). */
  #meters(specs: MeterSpecs | undefined): Meters | null {
    const quotas = this.#quotaBook(specs?.quotas);
    const credits = this.#creditAccount(specs?.credits);
    return quotas === null && credits === null && specs?.usage === undefined ? null : { quotas, credits };
  }

  /** The meters the key counts in (those last sent, else those stored), for a refund or a settlement. */
  #storedMeters(): Meters {
    return { quotas: this.#storedQuotas(), credits: this.#storedCredits() };
  }

  /** Writes what a decision changed in the meters; whether it wrote anything. */
  #writeMeters(w: MeterWrites): boolean {
    if (w.quotaRows !== null) this.#writeQuotas(w.quotaRows);
    if (w.credits !== null) this.#writeCredits(w.credits);
    return w.quotaRows !== null || w.credits !== null;
  }

  /** The key's credit account for `spec` (null: none sent): the one in memory, else built from the stored row. */
  #creditAccount(spec: CreditSpec | undefined): CreditAccount | null {
    if (spec === undefined) return null;
    const have = this.#credits;
    if (have !== null && sameCredits(have.spec, spec)) return have;
    this.#credits = new CreditAccount(spec, this.#creditRow()?.state ?? null);
    return this.#credits;
  }

  /** The key's credits as last sent, else as stored; null: it has none. */
  #storedCredits(): CreditAccount | null {
    if (this.#credits !== null) return this.#credits;
    const row = this.#creditRow();
    if (row === null) return null;
    this.#credits = new CreditAccount(row.spec, row.state);
    return this.#credits;
  }

  /** The stored balance (the `meta` row `credits`) and the spec it was kept under. */
  #creditRow(): { spec: CreditSpec; state: CreditState } | null {
    if (!this.#tables) return null;
    const row = this.#sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'credits'").toArray()[0];
    return row ? (JSON.parse(row.v) as { spec: CreditSpec; state: CreditState }) : null;
  }

  /** Stores the key's balance: one `meta` row (`credits`), written with the grant (null: unchanged, nothing written). */
  #writeCredits(state: CreditState | null): void {
    if (state !== null) this.#setMeta("credits", JSON.stringify({ spec: this.#credits?.spec, state }));
  }

  /**
   * Adds `add` credits to the key's balance (an operator's top-up; docs/operating.md): a key new to credits starts
   * from the spec's `initial`. With an `id` (1 to 128 characters), once: a top-up sent again with the same id adds
   * nothing (its id is kept for good). Returns the balance.
   *
   * @throws RangeError for an add that is not a positive whole number, an id that is not one, or a spec that is not one
   */
  credit(spec: CreditSpec, add: number, id?: string): number | Promise<number> {
    try {
      if (id !== undefined && (typeof id !== "string" || id.length === 0 || id.length > 128))
        throw new RangeError("id: expected a top-up's id (1 to 128 characters)");
      const account = this.#creditAccount(spec) as CreditAccount;
      const now = this.clock();
      if (id !== undefined && this.#tables) {
        const seen = this.#sql.exec("SELECT 1 FROM meta WHERE k = ?", `${TOPUP_PREFIX}${id}`).toArray().length > 0;
        if (seen) return account.balance(now);
      }
      const state = account.add(now, add);
      this.ctx.storage.transactionSync(() => {
        this.#writeCredits(state);
        if (id !== undefined) this.#setMeta(`${TOPUP_PREFIX}${id}`, String(now));
      });
      return state.balance;
    } catch (e) {
      return Promise.reject(e); // as from an async method: invalid input is a rejection
    }
  }

  /** The key's quota book for `specs` (null: none sent): the one in memory, else built from the stored row. */
  #quotaBook(specs: readonly QuotaSpec[] | undefined): QuotaBook | null {
    if (specs === undefined || (Array.isArray(specs) && specs.length === 0)) return null;
    if (this.#quotas?.isFor(specs)) return this.#quotas;
    this.#quotas = new QuotaBook(specs, this.#quotaRows());
    return this.#quotas;
  }

  /** The quotas the key counts in (those last sent, else those stored), for a refund or a settlement; null: none. */
  #storedQuotas(): QuotaBook | null {
    if (this.#quotas !== null) return this.#quotas;
    const rows = this.#quotaRows();
    if (rows.length === 0) return null;
    this.#quotas = QuotaBook.stored(rows);
    return this.#quotas;
  }

  /** The stored quota counts (the `meta` row `quotas`). */
  #quotaRows(): QuotaRow[] {
    if (!this.#tables) return [];
    const row = this.#sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'quotas'").toArray()[0];
    return row ? (JSON.parse(row.v) as QuotaRow[]) : [];
  }

  /** Stores the quotas' counts: one `meta` row for all of them (`quotas`), written with the grant. */
  #writeQuotas(rows: readonly QuotaRow[]): void {
    if (rows.length > 0) this.#setMeta("quotas", JSON.stringify(rows));
  }

  /**
   * Counts the refusals the caller reports from its deny cache (`ask.refused`) towards the plan's penalty, before
   * the request is decided: the block's end when they complete it (it starts now, for this request too), else null.
   */
  #countReported(now: number, ask: TakeAsk): number | null {
    const local = ask.refused;
    if (ask.penalty === undefined || !Number.isSafeInteger(local) || (local as number) <= 0) return null;
    // An ask the log would reject changes nothing, a penalty's count included.
    if (!Number.isSafeInteger(ask.cost) || ask.cost < 0) throw new RangeError("cost: expected a whole number ≥ 0");
    if (this.#blockUntil !== null && this.#blockUntil > now) return null; // refusals under a block never count
    return this.#penalize(now, ask.penalty, local as number, now);
  }

  /** `out` with the refusals counted towards the penalty the request was sent with (none: as it is). */
  #withRefusalsSeen(now: number, ask: TakeAsk, out: Decision | Promise<Decision>): Decision | Promise<Decision> {
    const spec = ask.penalty;
    if (spec === undefined) return out;
    const add = (d: Decision): Decision => ({ ...d, refusalsSeen: this.#refusalsWithin(now, spec.withinMs) });
    return out instanceof Promise ? out.then(add) : add(out);
  }

  /** The refusals counted towards a penalty still within its span (`withinMs`, the plan's now) at `now`. */
  #refusalsWithin(now: number, withinMs: number): number {
    return this.#penalty.refusals.filter((t) => t > now - withinMs).length;
  }

  /**
   * When `ask` wants a concurrency slot and every one is held by other requests while its rate limits (all of
   * `logs`) would grant it, what those limits say: such a request is refused for its concurrency alone. Null
   * otherwise — one the limits refuse anyway is refused by them (a rate refusal says how long to wait, and counts
   * towards a penalty).
   */
  #slotsFull(now: number, ask: TakeAsk, logs: readonly KeyLog[]): Decision | null {
    const slot = ask.slot;
    if (slot === undefined) return null;
    checkSlotAsk(slot);
    this.#lapseSlots(now);
    if (this.#slots.fits(now, slot.id, slot)) return null;
    const fits = combine(logs.map((l) => l.check(now, ask.cost)));
    return fits.allowed ? fits : null;
  }

  /**
   * The refusal of a request that found every slot held (`fits`: what its rate limits say), nothing recorded. It is
   * no refusal towards a penalty, but the refusals the caller reports with it are: when they complete one, the
   * request is refused by the block (`c.refuse` until its end).
   */
  #full(c: Deciding, fits: Decision): Decision | Promise<Decision> {
    const { now, ask, override, idleAt, refuse } = c;
    const out: Decision = {
      ...fits,
      allowed: false,
      retryAfterMs: 1_000,
      blockedUntil: fits.now,
      lease: null,
      concurrencyFull: true,
    };
    const penalized = this.#countRefusals(now, ask, out);
    if (penalized === null) return withOverride(out, override);
    return this.#armAfter(true, idleAt, this.#blocked(refuse(penalized), override));
  }

  /** Takes the granted request's slot, when it asked for one, and stores it (#slotsFull found room). */
  #takeSlot(now: number, ask: TakeAsk): void {
    if (ask.slot === undefined) return;
    const taken = this.#slots.take(now, ask.slot.id, ask.slot);
    if (!taken.held) return;
    this.#ensureTables();
    if (!this.#slotTable) {
      // Concurrency slots held (docs/configuration.md, "Concurrency"): one row per request in flight, in a table made
      // for keys that use them only.
      this.#sql.exec(
        "CREATE TABLE IF NOT EXISTS inflight (id TEXT PRIMARY KEY, expires INTEGER NOT NULL) WITHOUT ROWID",
      );
      this.#slotTable = true;
    }
    this.#sql.exec("INSERT OR REPLACE INTO inflight (id, expires) VALUES (?, ?)", ask.slot.id, taken.expiresAt);
  }

  /** Drops the slots lapsed by `now` (their holders vanished) and their rows. */
  #lapseSlots(now: number): void {
    for (const id of this.#slots.lapse(now)) this.#sql.exec("DELETE FROM inflight WHERE id = ?", id);
  }

  /**
   * Frees the concurrency slot of the request `id` (its response ended, failed, or its client went away). Returns
   * false when it held none (released already, lapsed, or never taken).
   */
  release(id: string): boolean {
    if (typeof id !== "string") throw new RangeError("id: expected a request's slot id");
    if (!this.#slots.release(id)) return false;
    this.#sql.exec("DELETE FROM inflight WHERE id = ?", id);
    return true;
  }

  /**
   * Keeps the slot of the request `id` for `timeoutMs` more: its holder is alive (a long response, an open
   * WebSocket). Returns false when it holds none any more (lapsed, released): the request goes on without it.
   */
  renew(id: string, timeoutMs: number): boolean {
    if (typeof id !== "string") throw new RangeError("id: expected a request's slot id");
    checkSlotTimeout(timeoutMs);
    const until = this.#slots.renew(this.clock(), id, timeoutMs);
    if (until === null) return false;
    this.#sql.exec("UPDATE inflight SET expires = ? WHERE id = ?", until, id);
    return true;
  }

  /** A refusal by the block in force, saying what set it (unless `allowed`: a grant made before a penalty began). */
  #blocked(decision: Decision, override: Override | null, allowed = false): Decision {
    const out = withOverride(decision, override);
    return allowed || this.#blockCause !== "penalty" ? out : { ...out, blockCause: "penalty" };
  }

  /**
   * Counts this decision's refusal by the rate limits (a request that can never pass is no hammering) and the
   * refusals the caller answered from its deny cache since its last call (`ask.refused`) towards the plan's
   * penalty; when they complete it, blocks the key — never shorter than the window's own wait — and returns the
   * block's end. Null: no penalty, or none due.
   */
  #countRefusals(now: number, ask: TakeAsk, decision: Decision): number | null {
    const spec = ask.penalty;
    if (spec === undefined) return null;
    const local = ask.refused;
    // Nor is a refusal for want of credits hammering: only a top-up ends it, and a block must not outlast that.
    const counted = !(
      decision.allowed ||
      decision.neverAllowed ||
      decision.concurrencyFull ||
      decision.credits?.exceeded
    );
    const count = (counted ? 1 : 0) + (Number.isSafeInteger(local) ? (local as number) : 0);
    if (count === 0) return null;
    return this.#penalize(now, spec, count, now + (counted ? decision.retryAfterMs : 0));
  }

  /** Counts `count` refusals at `now`; when they complete the penalty, blocks the key (until `earliest` at least). */
  #penalize(now: number, spec: PenaltySpec, count: number, earliest: number): number | null {
    const { state, blockUntil } = refused(this.#penalty, spec, now, count, earliest);
    this.#penalty = { ...state, withinMs: spec.withinMs };
    // Refusals are counted in memory (a refusal writes no row); only a block, and the length a repeat doubles, are
    // stored. An object evicted while idle (~10 s without calls) forgets refusals not yet a block: nobody hammered.
    if (blockUntil === null) return null;
    this.#setMeta("penalty", JSON.stringify(this.#penalty));
    const until = Math.min(blockUntil, MAX_TIME_MS);
    this.#blockUntil = until;
    this.#blockCause = "penalty";
    this.#setMeta("block_until", String(until));
    this.#setMeta("block_cause", "penalty");
    return until;
  }

  /** Sets the idle alarm at `idleAt` after a write when none is set, then answers `out`. */
  #armAfter(wrote: boolean, idleAt: number, out: Decision): Decision | Promise<Decision> {
    if (!wrote || this.#alarmAt !== null) return out;
    this.#alarmAt = idleAt;
    return this.ctx.storage.setAlarm(Math.min(idleAt, MAX_TIME_MS)).then(() => out);
  }

  /**
   * Gives back a request's grant (from a result's handle: its `id`, where its units were recorded, how many), once: a
   * second refund of the same id gives back nothing and resolves false. The id is kept (a `meta` row) until the
   * grant's record has left every window it counts in, when giving it back would take nothing anyway (the alarm
   * prunes it). Resolves false, giving back nothing, for a key with no state, or one whose log is kept under other
   * limits than the grant was recorded under (a plan changed, an override came or went).
   *
   * @throws RangeError for a field that is not a grant's (an id of 1 to 128 characters, times, a positive count)
   */
  refund(limits: readonly LimitSpec[], grant: RefundedGrant, route?: RouteBudget): boolean | Promise<boolean> {
    try {
      return this.#refund(limits, grant, route);
    } catch (e) {
      return Promise.reject(e); // as from an async method: invalid input is a rejection
    }
  }

  #refund(limits: readonly LimitSpec[], grant: RefundedGrant, route?: RouteBudget): boolean | Promise<boolean> {
    const { id, recordedAt, units } = grant ?? ({} as Partial<RefundedGrant>);
    if (typeof id !== "string" || id.length === 0 || id.length > 128)
      throw new RangeError("id: expected a grant's id (1 to 128 characters)");
    if (!Array.isArray(recordedAt) || !recordedAt.every((t) => Number.isSafeInteger(t)))
      throw new RangeError("recordedAt: expected the times the grant was recorded at, in ms");
    if (!Number.isSafeInteger(units) || (units as number) < 1)
      throw new RangeError("units: expected a positive integer");
    if (route !== undefined && (typeof route.name !== "string" || route.name.length === 0))
      throw new RangeError(`route.name: expected a non-empty string, got ${JSON.stringify(route.name)}`);
    // A key with no state has nothing it recorded still counting: nothing to give back, nothing to write.
    if (!this.#tables) return false;
    const k = `${REFUND_PREFIX}${id}`;
    if (this.#sql.exec("SELECT 1 FROM meta WHERE k = ?", k).toArray().length > 0) return false;
    const now = this.clock();
    const own = this.#refundLog(KEY_BUDGET, this.#activeOverride(now)?.limits ?? limits);
    const routed = route === undefined ? null : this.#refundLog(route.name, route.limits);
    const rings = (own?.rings.length ?? 0) + (routed?.rings.length ?? 0);
    // Recorded under other limits than the key's log now keeps (a plan changed, an override came or went): its
    // units are not where the handle says; they count until they leave the window, as any grant does.
    if (own === null || (route !== undefined && routed === null) || recordedAt.length !== rings) return false;
    const split = own.rings.length;
    this.#write(KEY_BUDGET, own.giveBack(recordedAt.slice(0, split), units as number));
    if (route !== undefined && routed !== null) {
      this.#write(route.name, routed.giveBack(recordedAt.slice(split), units as number));
    }
    const metered = this.#refundMeters(now, grant.at, units as number);
    // Kept until the grant's record has left every window it counts in, and for a grant the key's meters counted, as
    // long as they take refunds of it (the idle alarm prunes it after): a refund sent again finds it.
    let longest = metered ? METER_REFUND_MS : 0;
    for (const l of [...own.limits, ...(routed?.limits ?? [])]) longest = Math.max(longest, l.windowMs);
    this.#sql.exec("INSERT INTO meta (k, v) VALUES (?, ?)", k, String(Math.max(now, ...recordedAt) + longest));
    return this.#armAlarm().then(() => true);
  }

  /**
   * Gives a refunded grant's units back to the key's meters: its quotas (the period of `at`, while it lasts), its
   * credits (unless a refill has come since), and its usage (the day of `at`) — only within {@link METER_REFUND_MS}
   * of `at`, as long as the refund's id is kept. Returns whether the grant was one the meters counted.
   */
  #refundMeters(now: number, at: number | undefined, units: number): boolean {
    if (at === undefined || !Number.isSafeInteger(at) || now - at > METER_REFUND_MS) return false;
    const meters = this.#storedMeters();
    if (meters.quotas !== null) this.#writeQuotas(meters.quotas.giveBack(now, at, units));
    if (meters.credits !== null) this.#writeCredits(meters.credits.giveBack(units, at, now));
    const spec = this.#usageTable ? this.#storedUsageSpec() : null;
    if (spec !== null) {
      this.#sql.exec(
        "UPDATE usage SET requests = MAX(0, requests - 1), cost = MAX(0, cost - ?) WHERE day = ?",
        units,
        usageDay(spec, at),
      );
    }
    return meters.quotas !== null || meters.credits !== null || spec !== null;
  }

  /** The usage spec last stored (the `meta` row `usage`), or null. */
  #storedUsageSpec(): UsageSpec | null {
    if (!this.#tables) return null;
    const row = this.#sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'usage'").toArray()[0];
    if (row === undefined) return null;
    this.#usageSpec = row.v;
    this.#usageKept = JSON.parse(row.v) as UsageSpec;
    return this.#usageKept;
  }

  /**
   * The log a refund gives back to: the budget's log in memory when it was built for `limits`; else, when the
   * rows in storage fit `limits` as they are, one built from them — not kept, so the next decision builds its own
   * (with its window). Null when the budget keeps its rows under other limits.
   */
  #refundLog(budget: string, limits: readonly LimitSpec[]): KeyLog | null {
    const have = this.#logs.get(budget);
    if (have !== undefined) return builtFor(have, limits) ? have : null;
    const { log, rewrite } = KeyLog.restore(limits, this.#rows(budget), this.clock());
    return rewrite ? null : log;
  }

  /**
   * Records the grants a caller made alone while this object could not answer (`failure_mode = "local"`; docs/design.md,
   * "When the object cannot answer"), never earlier than their use, whatever the limits say (they passed): the key
   * then waits until they leave its windows. The isolates' probe: an empty report touches nothing. Returns the rows
   * written.
   *
   * @throws RangeError for a report that is not one (uses of whole ms ≥ 0 and whole units ≥ 1, routes by name)
   */
  recover(limits: readonly LimitSpec[], report: AloneReport): number | Promise<number> {
    try {
      const written = this.#recordAlone(this.clock(), limits, report);
      return written === 0 ? 0 : this.#armAlarm().then(() => written);
    } catch (e) {
      return Promise.reject(e); // as from an async method: invalid input is a rejection
    }
  }

  /** {@link recover} at `now`, without the alarm: the rows written (0 for no report, or an empty one). */
  #recordAlone(now: number, limits: readonly LimitSpec[], report: AloneReport | undefined): number {
    if (report === undefined) return 0;
    if (typeof report !== "object" || report === null || !Array.isArray(report.uses) || !Array.isArray(report.routes))
      throw new RangeError("alone: expected a report of uses and routes");
    if (report.uses.length === 0 && report.routes.length === 0) return 0;
    for (const r of report.routes) {
      if (typeof r !== "object" || r === null || typeof r.budget !== "object" || r.budget === null)
        throw new RangeError("alone.routes[]: expected a route's budget and its uses");
      checkUses(r.uses);
    }
    checkUses(report.uses);
    const rows = this.#logOf(KEY_BUDGET, this.#activeOverride(now)?.limits ?? limits).record(now, report.uses);
    this.#write(KEY_BUDGET, rows);
    let written = rows.length;
    for (const r of report.routes) {
      const routed = this.#routeLog(r.budget).record(now, r.uses);
      this.#write(r.budget.name, routed);
      written += routed.length;
    }
    return written;
  }

  /**
   * Settles leases a caller holds of the key (docs/design.md, "Settled leases") outside a decision: their used
   * units re-dated to their last use, their unused units taken back. Leases recorded under other limits (an
   * override came or went) stay where they are and expire. Returns the rows written.
   */
  settle(limits: readonly LimitSpec[], settle: readonly Settlement[]): number {
    if (!Array.isArray(settle)) throw new RangeError("settle: expected a list of lease settlements");
    const now = this.clock();
    const log = this.#logOf(KEY_BUDGET, this.#activeOverride(now)?.limits ?? limits);
    this.#writeMeters(giveBackUnused(this.#storedMeters(), Math.max(now, log.clock), settle));
    let written = 0;
    for (const s of settle) {
      const writes = log.settle(now, s);
      this.#write(KEY_BUDGET, writes);
      written += writes.length;
    }
    return written;
  }

  /**
   * Whether a request of `cost` would be granted now, under the limits applied now (an
   * operator's override, else `limits`) and any block; consumes nothing and writes nothing.
   */
  peek(limits: readonly LimitSpec[], cost = 1, route?: RouteBudget, specs?: MeterSpecs): Decision {
    const now = this.clock();
    const override = this.#activeOverride(now, false);
    const logs = [this.#view(KEY_BUDGET, override?.limits ?? limits)];
    if (route !== undefined) logs.push(this.#view(route.name, route.limits));
    const metered = this.#meters(specs);
    const wroteMeters = (d: Decision) => (metered === null ? d : withMeters(d, metered, fitOf(metered, d.now, cost)));
    if (this.#blockUntil !== null && this.#blockUntil > now) {
      const until = this.#blockUntil;
      return withOverride(wroteMeters(combine(logs.map((log) => log.refuse(now, cost, until)))), override);
    }
    return withOverride(wroteMeters(combine(logs.map((log) => log.check(now, cost)))), override);
  }

  /**
   * The key for an operator: its state under the limits applied now (the override's, else
   * `limits`), any block and override, and the longest window's grants in `buckets` buckets.
   * Consumes nothing and writes nothing: a key never seen stays without any stored state.
   */
  status(
    limits: readonly LimitSpec[],
    buckets = 60,
    routes: readonly RouteBudget[] = [],
    specs: MeterSpecs = {},
  ): KeyStatus {
    const now = this.clock();
    const override = this.#activeOverride(now, false);
    const log = this.#view(KEY_BUDGET, override?.limits ?? limits);
    const meters = this.#meters(specs);
    const peeked = log.peek(now);
    // Its quotas' states and its balance as a request of cost 0 sees them (nothing written).
    const decision = meters === null ? peeked : withMeters(peeked, meters, { quotas: true, credits: true });
    let longest = 0;
    log.limits.forEach((l, i) => {
      if (l.windowMs > (log.limits[longest] as LimitSpec).windowMs) longest = i;
    });
    const history =
      log.limits.length === 0
        ? { startMs: decision.now, bucketMs: 0, counts: [], ahead: 0, limit: -1 }
        : { ...log.history(longest, decision.now, buckets), limit: longest };
    return {
      now: decision.now,
      decision: withOverride(decision, override),
      blockedUntil: this.#blockUntil !== null && this.#blockUntil > now ? this.#blockUntil : null,
      blockCause: this.#blockUntil !== null && this.#blockUntil > now ? this.#blockCause : null,
      refusals: this.#penalty.refusals.filter((t) => t > now - (this.#penalty.withinMs ?? 0)).length,
      inFlight: this.#slots.heldAt(now),
      override,
      history,
      stored: this.#tables,
      routes: (Array.isArray(routes) ? routes : []).map((r) => ({
        name: r.name,
        decision: this.#view(r.name, r.limits).peek(now),
      })),
    };
  }

  /**
   * Forgets the key's grants up to now (an operator's reset), and the refusals counted towards a
   * penalty. Units recorded later (leased to isolates and not expired, or rounded up to a tick)
   * still count: they may still be spent. Blocks and overrides stay.
   */
  reset(limits: readonly LimitSpec[], buckets = 60, routes: readonly RouteBudget[] = []): KeyStatus {
    this.#penalty = { ...this.#penalty, refusals: [] };
    if (this.#tables) {
      this.#sql.exec("DELETE FROM meta WHERE k = 'penalty'");
      const log = this.#logOf(KEY_BUDGET, this.#activeOverride(this.clock())?.limits ?? limits);
      const through = log.forget(this.clock());
      // Route budgets never lease: everything they recorded up to now goes (their logs are rebuilt on next use).
      for (const budget of [...this.#logs.keys()]) if (budget !== KEY_BUDGET) this.#logs.delete(budget);
      this.#sql.exec("DELETE FROM budget_slots WHERE ts <= ?", through);
    }
    return this.status(limits, buckets, routes);
  }

  /** Refuses every request of the key until `until` (ms), with `Retry-After` to then. */
  async block(until: number): Promise<void> {
    if (!Number.isSafeInteger(until) || until > MAX_TIME_MS) {
      throw new RangeError(`until: expected a time in ms up to ${MAX_TIME_MS}, got ${String(until)}`);
    }
    this.#setMeta("block_until", String(until));
    this.#setMeta("block_cause", "operator");
    this.#blockUntil = until;
    this.#blockCause = "operator";
    await this.#armAlarm();
  }

  /** Lifts a block, an operator's or a penalty's. */
  async unblock(): Promise<void> {
    this.#blockUntil = null;
    this.#blockCause = "operator";
    if (this.#tables) this.#sql.exec("DELETE FROM meta WHERE k IN ('block_until', 'block_cause')");
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
    this.#setMeta("override", JSON.stringify(override));
    this.#override = override;
    if (this.#alarmAt === Number.POSITIVE_INFINITY) this.#alarmAt = null;
    await this.#armAlarm();
  }

  /** Removes the override: the key's plan applies again from its next decision. */
  async clearOverride(): Promise<void> {
    this.#override = null;
    if (this.#tables) this.#sql.exec("DELETE FROM meta WHERE k = 'override'");
    if (this.#alarmAt === Number.POSITIVE_INFINITY) this.#alarmAt = null;
    await this.#armAlarm();
  }

  /** The object's clock in ms. The only place time is read; tests may replace it. */
  clock(): number {
    return Date.now();
  }

  /**
   * Deletes the key's state once nothing in it counts any more — but a credit balance (paid for) and usage within its
   * retention, which stay — and drops usage past retention; otherwise re-arms.
   */
  override async alarm(): Promise<void> {
    this.#alarmAt = null;
    const now = this.clock();
    const pruneAt = this.#pruneUsage(now);
    const idleAt = this.#idleAt();
    if (idleAt <= now) {
      this.#logs.clear();
      this.#blockUntil = null;
      this.#blockCause = "operator";
      this.#penalty = NO_PENALTY;
      this.#override = null;
      this.#slots = new Slots();
      this.#quotas = null;
      if (this.#creditRow() === null && pruneAt === null) {
        this.#slotTable = false;
        this.#usageTable = false;
        this.#usageSpec = null;
        this.#usageKept = null;
        await this.ctx.storage.deleteAll();
        this.#tables = false;
        return;
      }
      // Everything else goes, in one transaction.
      this.ctx.storage.transactionSync(() => {
        this.#sql.exec("DELETE FROM budget_slots");
        // Refund ids are kept while they may still be sent (a refund sent again must find them), top-up ids for good.
        this.#sql.exec(
          "DELETE FROM meta WHERE k NOT IN ('credits', 'usage') AND NOT (k > ? AND k < ? AND CAST(v AS INTEGER) > ?) AND NOT (k > 'topup:' AND k < 'topup;')",
          REFUND_PREFIX,
          REFUND_END,
          now,
        );
        this.#sql.exec("DROP TABLE IF EXISTS inflight");
      });
      this.#slotTable = false;
      if (pruneAt === null) return;
      this.#alarmAt = pruneAt;
      await this.ctx.storage.setAlarm(Math.min(pruneAt, MAX_TIME_MS));
      return;
    }
    // Refunded ids whose grants have left every window are forgotten while the key stays.
    this.#sql.exec(
      "DELETE FROM meta WHERE k > ? AND k < ? AND CAST(v AS INTEGER) <= ?",
      REFUND_PREFIX,
      REFUND_END,
      now,
    );
    const next = Math.min(idleAt, pruneAt ?? Number.POSITIVE_INFINITY);
    this.#alarmAt = next;
    if (next === Number.POSITIVE_INFINITY) return;
    await this.ctx.storage.setAlarm(Math.min(next, MAX_TIME_MS));
  }

  /** When nothing stored counts any more: the grants' last window, a block's end, an override's expiry. */
  #idleAt(): number {
    let at = (this.#tables ? this.#storedIdleAt() : null) ?? Number.NEGATIVE_INFINITY;
    for (const log of this.#logs.values()) at = Math.max(at, log.idleAt);
    if (this.#blockUntil !== null) at = Math.max(at, this.#blockUntil);
    // Refusals count towards a penalty for its span, and a block's end for the next one's doubling.
    const within = this.#penalty.withinMs ?? 0;
    for (const t of [...this.#penalty.refusals, this.#penalty.lastEnd]) if (t > 0) at = Math.max(at, t + within);
    if (this.#override) at = Math.max(at, this.#override.expiresAt ?? Number.POSITIVE_INFINITY);
    if (this.#tables) at = Math.max(at, this.#storedQuotasEnd());
    return Math.max(at, this.#slots.lastExpiry);
  }

  /** Sets the idle alarm after an operator's change, unless one is set (the alarm re-checks when it fires). */
  async #armAlarm(): Promise<void> {
    if (this.#alarmAt !== null) return;
    const at = this.#idleAt();
    if (!this.#tables) return;
    if (at === Number.POSITIVE_INFINITY) {
      this.#alarmAt = at;
      return;
    }
    this.#alarmAt = Math.max(at, this.clock());
    await this.ctx.storage.setAlarm(Math.min(this.#alarmAt, MAX_TIME_MS));
  }

  /** The override in force at `now`; an expired one is dropped (and its row deleted when `write`). */
  #activeOverride(now: number, write = true): Override | null {
    const o = this.#override;
    if (o === null || o.expiresAt === null || o.expiresAt > now) return o;
    if (!write) return null;
    this.#override = null;
    this.#sql.exec("DELETE FROM meta WHERE k = 'override'");
    return null;
  }

  #loadControls(): void {
    const rows = this.#sql
      .exec<{ k: string; v: string }>(
        "SELECT k, v FROM meta WHERE k IN ('block_until', 'block_cause', 'penalty', 'override')",
      )
      .toArray();
    for (const { k, v } of rows) {
      if (k === "block_until") this.#blockUntil = Number(v);
      else if (k === "block_cause") this.#blockCause = v === "penalty" ? "penalty" : "operator";
      else if (k === "penalty") this.#penalty = JSON.parse(v) as PenaltyState & { withinMs?: number };
      else this.#override = JSON.parse(v) as Override;
    }
    if (!this.#slotTable) return;
    const slots = this.#sql.exec<{ id: string; expires: number }>("SELECT id, expires FROM inflight").toArray();
    this.#slots = new Slots(slots.map((r) => [r.id, r.expires] as const));
  }

  #setMeta(k: string, v: string): void {
    this.#ensureTables();
    this.#sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", k, v);
  }

  #ensureTables(): void {
    if (!this.#tables) this.#createTables();
  }

  /** Writes a budget's rows (one per slot touched). */
  #write(budget: string, rows: readonly SlotRow[]): void {
    for (const w of rows) this.#sql.exec(UPSERT, budget, w.ring, w.key, w.ts, w.cost);
  }

  #createTables(): void {
    this.#tables = true;
    // One table for every budget of the key: its own (budget '') and its routes' (the route's name). WITHOUT ROWID:
    // the key is the row, so writing it writes one row, not a row and an index entry.
    this.#sql.exec(
      "CREATE TABLE IF NOT EXISTS budget_slots (budget TEXT NOT NULL, ring INTEGER NOT NULL, key INTEGER NOT NULL, ts INTEGER NOT NULL, cost INTEGER NOT NULL, PRIMARY KEY (budget, ring, key)) WITHOUT ROWID",
    );
    this.#sql.exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID");
    this.#upgrade();
  }

  /**
   * Carries the state of earlier versions over, once: 0.1.0 kept one 1ms ring in `slots (slot, ts, cost)`; 0.2.0 the
   * key's rows in `grants (ring, key, ts, cost)` and the routes' in `route_grants (route, …)`, with the key's longest
   * window in `meta` as `longest_window_ms` and the routes' longest as `route_window_ms`.
   */
  #upgrade(): void {
    const old = this.#sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('slots', 'grants', 'route_grants')",
      )
      .toArray()
      .map((t) => t.name);
    if (old.length === 0) return;
    this.ctx.storage.transactionSync(() => {
      if (old.includes("slots")) {
        this.#sql.exec(
          "INSERT OR REPLACE INTO budget_slots (budget, ring, key, ts, cost) SELECT '', 1, slot, ts, cost FROM slots",
        );
        this.#sql.exec("DROP TABLE slots");
      }
      if (old.includes("grants")) {
        this.#sql.exec(
          "INSERT OR REPLACE INTO budget_slots (budget, ring, key, ts, cost) SELECT '', ring, key, ts, cost FROM grants",
        );
        this.#sql.exec("DROP TABLE grants");
      }
      if (old.includes("route_grants")) {
        this.#sql.exec(
          "INSERT OR REPLACE INTO budget_slots (budget, ring, key, ts, cost) SELECT route, ring, key, ts, cost FROM route_grants",
        );
        // Each route's rows keep counting for the longest route window 0.2.0 knew.
        this.#sql.exec(
          "INSERT OR IGNORE INTO meta (k, v) SELECT 'window:' || route, (SELECT v FROM meta WHERE k = 'route_window_ms') FROM route_grants WHERE EXISTS (SELECT 1 FROM meta WHERE k = 'route_window_ms') GROUP BY route",
        );
        this.#sql.exec("DROP TABLE route_grants");
      }
      this.#sql.exec("INSERT OR IGNORE INTO meta (k, v) SELECT 'window:', v FROM meta WHERE k = 'longest_window_ms'");
      this.#sql.exec("DELETE FROM meta WHERE k IN ('longest_window_ms', 'route_window_ms')");
    });
  }

  /**
   * Without the logs in memory (no call since a restart): when the stored rows stop counting — each budget's newest
   * row plus the longest window it was written under.
   */
  #storedIdleAt(): number | null {
    const row = this.#sql
      .exec<{ at: number | null }>(
        "SELECT MAX(s.ts + COALESCE(CAST(m.v AS INTEGER), 0)) AS at FROM (SELECT budget, MAX(ts) AS ts FROM budget_slots GROUP BY budget) AS s LEFT JOIN meta AS m ON m.k = 'window:' || s.budget",
      )
      .one();
    return row.at;
  }

  /** When the stored quota counts stop counting: the end of the last period with units counted (−∞: none). */
  #storedQuotasEnd(): number {
    let at = Number.NEGATIVE_INFINITY;
    for (const r of this.#quotaRows()) if (r.used > 0) at = Math.max(at, r.end);
    return at;
  }

  /** A route's log, checked to be named. */
  #routeLog(route: RouteBudget): KeyLog {
    if (typeof route.name !== "string" || route.name.length === 0) {
      throw new RangeError(`route.name: expected a non-empty string, got ${JSON.stringify(route.name)}`);
    }
    return this.#logOf(route.name, route.limits);
  }

  /** A budget's stored rows. */
  #rows(budget: string): { ring: number; key: number; ts: number; cost: number }[] {
    return this.#sql
      .exec<{ ring: number; key: number; ts: number; cost: number }>(
        "SELECT ring, key, ts, cost FROM budget_slots WHERE budget = ?",
        budget,
      )
      .toArray();
  }

  /** A budget's log under these limits to read from: the one in memory, else one built from storage without writing. */
  #view(budget: string, limits: readonly LimitSpec[]): KeyLog {
    const log = this.#logs.get(budget);
    if (log !== undefined && builtFor(log, limits)) return log;
    if (!this.#tables) return new KeyLog(limits);
    return KeyLog.restore(limits, this.#rows(budget), this.clock()).log;
  }

  /** A budget's log under these limits: built from storage on first use, rebuilt when the limits change. */
  #logOf(budget: string, limits: readonly LimitSpec[]): KeyLog {
    const have = this.#logs.get(budget);
    if (have !== undefined && builtFor(have, limits)) return have;
    this.#ensureTables();
    const { log, rewrite } = KeyLog.restore(limits, this.#rows(budget), this.clock());
    if (rewrite) {
      this.ctx.storage.transactionSync(() => {
        this.#sql.exec("DELETE FROM budget_slots WHERE budget = ?", budget);
        this.#write(budget, log.rows());
      });
    }
    // The longest window its rows count for: the key's follows its limits; a route's only grows (routes of several
    // plans may share a name).
    this.#logs.set(budget, log);
    if (log.limits.length === 0) return log; // quotas alone: nothing in budget_slots
    const longest = Math.max(...log.limits.map((l) => l.windowMs));
    const stored = this.#sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = ?", windowKey(budget)).toArray()[0];
    const keep = budget !== KEY_BUDGET && stored !== undefined && Number(stored.v) >= longest;
    if (!keep && stored?.v !== String(longest)) {
      this.#sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", windowKey(budget), String(longest));
    }
    this.#logs.set(budget, log);
    return log;
  }
}
