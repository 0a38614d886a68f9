/**
 * @module The decision flow of one request at the key's object ({@link take}): the refusals the caller reports, a block,
 * concurrency slots, the logs with the meters all or nothing, usage, and the penalty — over the key's stores, which alone
 * touch storage. It says what it wrote and when the key's state stops counting; the object arms the alarm.
 */

import { combine, type RouteBudget, type TakenTogether, takeTogether } from "../core/budgets.ts";
import type { Decision } from "../core/decision.ts";
import type { LimitSpec } from "../core/limits.ts";
import type { KeyLog } from "../core/log.ts";
import { giveBackUnused, type Meters, takeMetered } from "../core/meters.ts";
import type { TakeAsk } from "../protocol.ts";
import { KEY_BUDGET } from "./budgets.ts";
import type { Override } from "./controls.ts";
import type { KeyStores } from "./key.ts";

/** A call to decide: the plan's limits, what the request asks, and its route's budget, if any. */
export interface Call {
  readonly limits: readonly LimitSpec[];
  readonly ask: TakeAsk;
  readonly route?: RouteBudget | undefined;
}

/** A decision and what the object must do after it: arm the idle alarm (from `idleAt`) when it wrote anything. */
export interface Taken {
  readonly decision: Decision;
  readonly wrote: boolean;
  readonly idleAt: number;
}

/** A request being decided: its time, what it asks, the override in force, its logs and how they refuse. */
interface Deciding {
  readonly now: number;
  readonly ask: TakeAsk;
  readonly override: Override | null;
  readonly logs: readonly KeyLog[];
  /** The refusal of its budgets until `until` (a block's end). */
  readonly refuse: (until: number) => Decision;
}

/** The decision, saying which override's limits it applied. */
export function withOverride(decision: Decision, override: Override | null): Decision {
  return override ? { ...decision, limitsOverride: override.limits } : decision;
}

/**
 * Decides `ask` at `now` for the key's own budget and, with `route`, the route's: one path for both (a route's request
 * must fit both and is recorded in both or neither). Settlements sent with a request the key's block refuses stay where
 * they are (later: safe); their unused units still go back to the meters.
 */
export function take(k: KeyStores, now: number, call: Call): Taken {
  const { limits, ask, route } = call;
  const override = k.controls.override(now);
  const log = k.budgets.log(KEY_BUDGET, override?.limits ?? limits, "decide");
  const logs = route === undefined ? [log] : [log, k.budgets.route(route)];
  const refuse = (until: number) => combine(logs.map((l) => l.refuse(now, ask.cost, until)));
  // As the alarm reads the stored rows (budgets.ts, `idleAtOf`): armed for the time it finds when it fires.
  const idleAt = () => Math.max(...logs.map((l) => k.budgets.idleAtOf(l)), k.meters.quotasIdleAt());
  // The refusals the caller answered from its deny cache count first: when they complete a penalty, this request is
  // decided under the block they start (docs/design.md, "What real clients do").
  const reported = countReported(k, now, ask);
  const meters = k.meters.forCall(ask);
  const refusing = () => meters !== null && k.meters.write(giveBackUnused(meters, now, ask.settle ?? []));
  if (reported !== null) {
    refusing();
    return { decision: blocked(k, refuse(reported), override), wrote: true, idleAt: k.idleAt() };
  }
  // Keys with credits or usage get no leases: units leased to an isolate that vanished would be spent (or billed).
  const own: TakeAsk =
    ask.credits || ask.usage
      ? { ...ask, refused: 0, leaseUnits: 0, leaseMs: 0, leaseLeadMs: 0 }
      : { ...ask, refused: 0 };
  const d: Deciding = { now, ask: own, override, logs, refuse };
  const blockedUntil = k.controls.blockedAt(now);
  if (blockedUntil !== null) {
    return { decision: blocked(k, refuse(blockedUntil), override), wrote: refusing(), idleAt: idleAt() };
  }
  const full = slotsFull(k, d);
  if (full) {
    refusing();
    return { ...refuseFull(k, d, full), idleAt: idleAt() };
  }
  const { decision, writes, wroteMeters } = takeLogs(k, d, meters);
  const [rows = [], routed = []] = writes;
  k.budgets.write(KEY_BUDGET, rows);
  if (route !== undefined) k.budgets.write(route.name, routed);
  if (decision.allowed && own.slot !== undefined) k.slots.take(now, own.slot);
  const penalized = countRefusals(k, now, own, decision);
  if (penalized !== null) {
    const out = decision.allowed ? decision : refuse(penalized);
    return { decision: blocked(k, out, override, decision.allowed), wrote: true, idleAt: idleAt() };
  }
  return { decision: withOverride(decision, override), wrote: rows.length > 0 || wroteMeters, idleAt: idleAt() };
}

/**
 * The logs' decision (the key's, with a route's) and their rows; with the key's meters, decided with them all or
 * nothing (src/core/meters.ts, `takeMetered`); a grant counted in usage. `wroteMeters`: a meter's row was written.
 */
function takeLogs(k: KeyStores, d: Deciding, meters: Meters | null): TakenTogether & { readonly wroteMeters: boolean } {
  const { now, ask, logs } = d;
  let taken: TakenTogether;
  let wrote = false;
  if (meters !== null) {
    const { quotaRows, credits, ...rest } = takeMetered(logs, meters, now, ask);
    wrote = k.meters.write({ quotaRows, credits });
    taken = rest;
  } else {
    const [log, routed] = logs as [KeyLog, KeyLog | undefined];
    const single = () => {
      const o = log.take(now, ask);
      return { decision: o.decision, writes: [o.writes] };
    };
    taken = routed === undefined ? single() : takeTogether(logs, now, ask.cost);
  }
  const decision = taken.decision;
  if (ask.usage === undefined || !decision.allowed || decision.cost === 0) return { ...taken, wroteMeters: wrote };
  k.usage.count(ask.usage, decision.now, { requests: 1, cost: decision.cost });
  return { ...taken, wroteMeters: true };
}

/**
 * Counts the refusals the caller reports from its deny cache (`ask.refused`) towards the plan's penalty, before the
 * request is decided: the block's end when they complete it (it starts now, for this request too), else null.
 */
function countReported(k: KeyStores, now: number, ask: TakeAsk): number | null {
  const local = ask.refused;
  if (ask.penalty === undefined || !Number.isSafeInteger(local) || (local as number) <= 0) return null;
  // An ask the log would reject changes nothing, a penalty's count included.
  if (!Number.isSafeInteger(ask.cost) || ask.cost < 0) throw new RangeError("cost: expected a whole number ≥ 0");
  if (k.controls.blockedAt(now) !== null) return null; // refusals under a block never count
  return k.controls.penalize(now, ask.penalty, local as number, now);
}

/**
 * Counts this decision's refusal by the rate limits (a request that can never pass is no hammering, nor one refused
 * for want of credits: only a top-up ends that) and the refusals the caller reports with it towards the plan's
 * penalty; when they complete it, blocks the key — never shorter than the window's own wait — and returns the block's
 * end. Null: no penalty, or none due.
 */
function countRefusals(k: KeyStores, now: number, ask: TakeAsk, decision: Decision): number | null {
  const spec = ask.penalty;
  if (spec === undefined) return null;
  const local = ask.refused;
  const counted = !(
    decision.allowed ||
    decision.neverAllowed ||
    decision.concurrencyFull ||
    decision.credits?.exceeded
  );
  const count = (counted ? 1 : 0) + (Number.isSafeInteger(local) ? (local as number) : 0);
  if (count === 0) return null;
  return k.controls.penalize(now, spec, count, now + (counted ? decision.retryAfterMs : 0));
}

/**
 * When the request wants a concurrency slot and every one is held by others while its rate limits would grant it,
 * what those limits say: it is refused for its concurrency alone. Null otherwise — one the limits refuse anyway is
 * refused by them (a rate refusal says how long to wait, and counts towards a penalty).
 */
function slotsFull(k: KeyStores, d: Deciding): Decision | null {
  const slot = d.ask.slot;
  if (slot === undefined || k.slots.fits(d.now, slot)) return null;
  const fits = combine(d.logs.map((l) => l.check(d.now, d.ask.cost)));
  return fits.allowed ? fits : null;
}

/**
 * The refusal of a request that found every slot held (`fits`: what its rate limits say), nothing recorded. It is no
 * refusal towards a penalty, but the refusals the caller reports with it are: when they complete one, the request is
 * refused by the block.
 */
function refuseFull(k: KeyStores, d: Deciding, fits: Decision): Omit<Taken, "idleAt"> {
  const out: Decision = {
    ...fits,
    allowed: false,
    retryAfterMs: 1_000,
    blockedUntil: fits.now,
    lease: null,
    concurrencyFull: true,
  };
  const penalized = countRefusals(k, d.now, d.ask, out);
  if (penalized === null) return { decision: withOverride(out, d.override), wrote: false };
  return { decision: blocked(k, d.refuse(penalized), d.override), wrote: true };
}

/** A refusal by the block in force, saying what set it (unless `allowed`: a grant made before a penalty began). */
function blocked(k: KeyStores, decision: Decision, override: Override | null, allowed = false): Decision {
  const out = withOverride(decision, override);
  return allowed || k.controls.blockCause !== "penalty" ? out : { ...out, blockCause: "penalty" };
}
