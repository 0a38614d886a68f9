/**
 * @module The key's calendar quotas and credits (docs/configuration.md, "Quotas and credits"): each kept as one JSON
 * `meta` row (`quotas`: every quota's count; `credits`: the balance and the spec it was kept under), written with the
 * grant that changed it, built in memory for the specs a call sends, else from the stored row (a refund or a settlement
 * sends none).
 */

import { CreditAccount, type CreditSpec, type CreditState } from "../core/credits.ts";
import type { Meters, MeterWrites } from "../core/meters.ts";
import { QuotaBook, type QuotaRow, type QuotaSpec } from "../core/quota.ts";
import type { MeterSpecs } from "../protocol.ts";
import type { Meta } from "./meta.ts";

/** How a meter is built from a spec and from its stored row. */
interface MeterKind<Spec, M, Row> {
  /** Whether `m` is the meter for `spec` (compared, not rebuilt). */
  isFor(m: M, spec: Spec): boolean;
  build(spec: Spec, row: Row | null): M;
  /** The meter as stored (null: nothing worth a meter). */
  fromRow(row: Row): M | null;
}

/** One meter kept as one JSON `meta` row: the one in memory, else built from the row. */
class Kept<Spec, M, Row> {
  readonly #meta: Meta;
  readonly #key: string;
  readonly #kind: MeterKind<Spec, M, Row>;
  #have: M | null = null;

  constructor(meta: Meta, key: string, kind: MeterKind<Spec, M, Row>) {
    this.#meta = meta;
    this.#key = key;
    this.#kind = kind;
  }

  /** The meter for `spec`: the one in memory when it is for it, else one built from the stored row. */
  for(spec: Spec): M {
    if (this.#have !== null && this.#kind.isFor(this.#have, spec)) return this.#have;
    this.#have = this.#kind.build(spec, this.row());
    return this.#have;
  }

  /** The meter last sent, else as stored; null: none. */
  stored(): M | null {
    if (this.#have !== null) return this.#have;
    const row = this.row();
    this.#have = row === null ? null : this.#kind.fromRow(row);
    return this.#have;
  }

  /** The meter in memory, if any. */
  get current(): M | null {
    return this.#have;
  }

  row(): Row | null {
    return this.#meta.json<Row>(this.#key);
  }

  write(row: Row): void {
    this.#meta.set(this.#key, JSON.stringify(row));
  }

  /** Forgets the meter in memory, and its row when `rows`. */
  clear(rows: boolean): void {
    this.#have = null;
    if (rows) this.#meta.delete(this.#key);
  }
}

/** Whether `a` and `b` are the same credits (a spec sent with each call is compared, not rebuilt). */
function sameCredits(a: CreditSpec, b: CreditSpec): boolean {
  const [r, t] = [a.refill ?? null, b?.refill ?? null];
  return (
    a.initial === b?.initial &&
    (r === null || t === null ? r === t : r.amount === t.amount && r.period === t.period && r.zone === t.zone)
  );
}

type CreditRow = { spec: CreditSpec; state: CreditState };

export class MeterStore {
  readonly #quotas: Kept<readonly QuotaSpec[], QuotaBook, QuotaRow[]>;
  readonly #credits: Kept<CreditSpec, CreditAccount, CreditRow>;

  constructor(meta: Meta) {
    this.#quotas = new Kept(meta, "quotas", {
      isFor: (book, specs) => book.isFor(specs),
      build: (specs, rows) => new QuotaBook(specs, rows ?? []),
      fromRow: (rows) => (rows.length === 0 ? null : QuotaBook.stored(rows)),
    });
    this.#credits = new Kept(meta, "credits", {
      isFor: (account, spec) => sameCredits(account.spec, spec),
      build: (spec, row) => new CreditAccount(spec, row?.state ?? null),
      fromRow: (row) => new CreditAccount(row.spec, row.state),
    });
  }

  /** The key's meters for what a call sent (null: no quotas, credits or usage). */
  forCall(specs: MeterSpecs | undefined): Meters | null {
    const q = specs?.quotas;
    const quotas = q === undefined || (Array.isArray(q) && q.length === 0) ? null : this.#quotas.for(q);
    const credits = specs?.credits === undefined ? null : this.#credits.for(specs.credits);
    return quotas === null && credits === null && specs?.usage === undefined ? null : { quotas, credits };
  }

  /** The meters the key counts in (those last sent, else those stored), for a refund or a settlement. */
  stored(): Meters {
    return { quotas: this.#quotas.stored(), credits: this.#credits.stored() };
  }

  /** The credit account for `spec` (an operator's top-up). */
  account(spec: CreditSpec): CreditAccount {
    return this.#credits.for(spec);
  }

  /** Writes what a decision changed in the meters; whether it wrote anything. */
  write(w: MeterWrites): boolean {
    if (w.quotaRows !== null && w.quotaRows.length > 0) this.#quotas.write([...w.quotaRows]);
    if (w.credits !== null) this.writeCredits(w.credits);
    return w.quotaRows !== null || w.credits !== null;
  }

  /** Stores the balance with the spec it is kept under. */
  writeCredits(state: CreditState): void {
    this.#credits.write({ spec: this.#credits.stored()?.spec as CreditSpec, state });
  }

  /** Whether the key has a balance stored (paid for: it outlives the key's idle state). */
  hasCredits(): boolean {
    return this.#credits.row() !== null;
  }

  /** When the stored quota counts stop counting: the end of the last period with units counted (−∞: none). */
  quotasEnd(): number {
    let at = Number.NEGATIVE_INFINITY;
    for (const r of this.#quotas.row() ?? []) if (r.used > 0) at = Math.max(at, r.end);
    return at;
  }

  /** When the quotas in memory stop counting (−∞: none in memory). */
  quotasIdleAt(): number {
    return this.#quotas.current?.idleAt ?? Number.NEGATIVE_INFINITY;
  }

  /** Forgets the quotas (the key went idle; rows too unless the database is gone); the balance stays. */
  clear(rows = true): void {
    this.#quotas.clear(rows);
  }
}
