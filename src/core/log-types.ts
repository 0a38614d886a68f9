/**
 * @module What a key's log (log.ts) is asked and what it answers: a call's ask and its outcome, a lease's settlement,
 * units used elsewhere — and the checks of what comes in. Pure.
 */

import type { Decision } from "./decision.ts";
import { describe } from "./duration.ts";
import type { SlotRow } from "./ring.ts";

/** A decision and the rows it changed (one per ring for a grant, none for a denial). */
export interface Outcome {
  readonly decision: Decision;
  readonly writes: readonly SlotRow[];
}

/** What `KeyLog.take` (log.ts) is asked for. */
export interface Ask {
  /** The request's own cost: a safe integer ≥ 0 (0: only a lease is asked for). */
  readonly cost: number;
  /** Units wanted ahead of use (0: a per-request decision). */
  readonly leaseUnits?: number;
  /** The lease lifetime wanted (ms); the log grants at most `maxLeaseMs` (limits.ts) of its limits, less near a limit. */
  readonly leaseMs?: number;
  /**
   * The part of `leaseMs` that passes before the lease reaches the caller (its recent round trip to the object, ms;
   * at most `leaseMs`): the rest is the time it spends the units in, which is what the log scales down.
   */
  readonly leaseLeadMs?: number;
  /**
   * The caller has no rate of its own for the key (its first request here): `leaseUnits` is only a
   * cap, and the lease is sized from the key's own recent rate — what its longest window holds,
   * spread over that window, for one lifetime.
   */
  readonly leaseFromLog?: boolean;
  /**
   * The caller's leases of this key, settled before the decision (so that it sees them): used units re-dated to
   * their last use, unused ones given back.
   */
  readonly settle?: readonly Settlement[];
}

/**
 * What a caller reports of one lease it holds (docs/design.md, "Settled leases"): `used` units spent since its
 * last report, the last of them `lastUseMs` after the lease was asked for (on the caller's clock), and `unused`
 * units it gives up. The object moves the used units from the lease's record to `issuedAt + lastUseMs` (plus the
 * clock-rate margin, `leaseMargin` in limits.ts) — never earlier than a use, since `issuedAt` came after the ask — and
 * takes the unused ones back.
 */
export interface Settlement {
  /** Where the lease was recorded, one time per ring (as the lease said). */
  readonly recordedAt: readonly number[];
  /** The object's clock when it granted the lease (the decision's `now`). */
  readonly issuedAt: number;
  /** Units spent since the lease was last settled (0: none). */
  readonly used: number;
  /** The last of those uses, in ms after the caller asked for the lease (its own clock). */
  readonly lastUseMs: number;
  /** Units the caller will never spend (0: none). */
  readonly unused: number;
}

/**
 * Units an isolate granted alone while the key's object could not answer (docs/design.md, "When the object cannot
 * answer"): `units` used `ageMs` before the call reporting them was sent (on the caller's clock).
 */
export interface Use {
  readonly ageMs: number;
  readonly units: number;
}

/**
 * Checks what {@link Ask} says: whole numbers in range, a lead within the lifetime, something asked for, and a list
 * of settlements (not yet each one: `KeyLog.settle` checks those).
 *
 * @throws RangeError naming the first bad field
 */
export function checkAsk(ask: Ask): void {
  const { cost, leaseUnits = 0, leaseMs = 0, leaseLeadMs = 0, settle = [] } = ask;
  if (!Number.isSafeInteger(cost) || cost < 0)
    throw new RangeError(`cost: expected a whole number ≥ 0, got ${describe(cost)}`);
  if (!Number.isSafeInteger(leaseUnits) || leaseUnits < 0) {
    throw new RangeError(`leaseUnits: expected a whole number ≥ 0, got ${describe(leaseUnits)}`);
  }
  if (!Number.isSafeInteger(leaseMs) || leaseMs < 0) {
    throw new RangeError(`leaseMs: expected whole milliseconds ≥ 0, got ${describe(leaseMs)}`);
  }
  if (!Number.isSafeInteger(leaseLeadMs) || leaseLeadMs < 0 || leaseLeadMs > leaseMs) {
    throw new RangeError(`leaseLeadMs: expected whole milliseconds from 0 to leaseMs, got ${describe(leaseLeadMs)}`);
  }
  if (cost === 0 && leaseUnits === 0) throw new RangeError("cost: 0 asks for nothing; ask for a cost or lease units");
  if (!Array.isArray(settle)) throw new RangeError("settle: expected a list of lease settlements");
}

/**
 * Checks a list of {@link Use}s: whole milliseconds ≥ 0 and whole units ≥ 1 each.
 *
 * @throws RangeError naming the first bad field
 */
export function checkUses(uses: readonly Use[]): void {
  if (!Array.isArray(uses)) throw new RangeError("uses: expected a list of uses");
  for (const u of uses) {
    if (!Number.isSafeInteger(u?.ageMs) || u.ageMs < 0)
      throw new RangeError(`uses[].ageMs: expected whole milliseconds ≥ 0, got ${describe(u?.ageMs)}`);
    if (!Number.isSafeInteger(u.units) || u.units < 1)
      throw new RangeError(`uses[].units: expected a positive integer, got ${describe(u.units)}`);
  }
}

/**
 * Checks a {@link Settlement}'s counts and times: `used`, `unused` and `lastUseMs` whole numbers ≥ 0, `issuedAt` a
 * time in ms.
 *
 * @throws RangeError naming the first bad field
 */
export function checkSettlement(s: Settlement): void {
  const { used, unused, issuedAt, lastUseMs } = s;
  for (const [field, n] of [
    ["used", used],
    ["unused", unused],
    ["lastUseMs", lastUseMs],
  ] as const) {
    if (!Number.isSafeInteger(n) || n < 0)
      throw new RangeError(`${field}: expected a whole number ≥ 0, got ${describe(n)}`);
  }
  if (!Number.isSafeInteger(issuedAt))
    throw new RangeError(`issuedAt: expected a time in ms, got ${describe(issuedAt)}`);
}
