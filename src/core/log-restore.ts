/**
 * @module Rebuilding a key's log (log.ts) from its stored rows after a restart, or after its limits changed between
 * deploys: what still matters is kept, rounded up to a new tick where one changed (later is safe). Pure.
 */

import { longestWindow, type Rings } from "./log-settle.ts";
import { type Ring, roundUp, type SlotRow } from "./ring.ts";

/**
 * Loads stored rows (any order) into the empty rings of `log` at time `now`. With the same limits the log behaves
 * exactly as before the restart. With changed limits it keeps what still matters: a ring whose tick changed is seeded
 * from an old ring's rows rounded up to the new tick (later is safe), and a ring that shrank keeps its newest slots.
 *
 * @returns true when the stored rows do not fit this layout: delete every stored row and write the log's rows instead
 */
export function loadRows(log: Rings, rows: Iterable<SlotRow>, now: number): boolean {
  const t = Math.floor(now);
  const byRing = new Map<number, SlotRow[]>();
  // A ring whose every row was given back (cost 0) is stored, and empty: not a new tick to seed.
  const stored = new Set<number>();
  for (const r of rows) {
    if (!Number.isSafeInteger(r.ts) || !Number.isSafeInteger(r.cost) || r.cost < 0) continue;
    stored.add(r.ring);
    if (r.cost === 0) continue;
    const list = byRing.get(r.ring);
    if (list) list.push(r);
    else byRing.set(r.ring, [r]);
  }
  const current = new Set(log.rings.map((r) => r.tickMs));
  // Rows of a ring that no longer exists must go (a rewrite deletes them).
  let rewrite = [...byRing.keys()].some((tick) => !current.has(tick));
  for (const ring of log.rings) {
    const own = stored.has(ring.tickMs) ? (byRing.get(ring.tickMs) ?? []) : undefined;
    const window = longestWindow(ring, log);
    let slots: SlotRow[];
    if (own) {
      slots = own.filter((r) => r.ts > t - window).sort((a, b) => a.ts - b.ts);
    } else {
      // A new tick (no stored ring has it): every ring records every grant, so seed it from the
      // stored ring that holds the most units (the most history), rounded up to the new tick
      // (later is safe).
      let seed: SlotRow[] = [];
      for (const list of byRing.values()) if (total(list) > total(seed)) seed = list;
      slots = seed
        .filter((r) => r.ts > t - window)
        .map((r) => ({ ...r, ts: roundUp(r.ts, ring.tickMs) }))
        .sort((a, b) => a.ts - b.ts);
    }
    const fitted = toLayout(slots, ring);
    // Seeded rows, and rows that had to be merged or renumbered, are not stored as they are now.
    if (own ? fitted !== slots : fitted.length > 0) rewrite = true;
    ring.load(fitted);
    ring.evict(t);
  }
  return rewrite;
}

function total(rows: readonly SlotRow[]): number {
  let sum = 0;
  for (const r of rows) sum += r.cost;
  return sum;
}

/**
 * Rows as the ring can hold them: distinct times (merged), distinct keys below the capacity, at
 * most `capacity` slots (the newest). Returns `slots` itself when it already fits.
 */
function toLayout(slots: readonly SlotRow[], ring: Ring): SlotRow[] {
  const keys = new Set<number>();
  let ok = slots.length <= ring.capacity;
  for (let i = 0; ok && i < slots.length; i++) {
    const r = slots[i] as SlotRow;
    const prev = slots[i - 1];
    if (
      r.key < 0 ||
      r.key >= ring.capacity ||
      keys.has(r.key) ||
      r.ts % ring.tickMs !== 0 ||
      (prev && prev.ts === r.ts)
    ) {
      ok = false;
    }
    keys.add(r.key);
  }
  if (ok) return slots as SlotRow[];
  const merged: SlotRow[] = [];
  for (const r of slots) {
    const ts = roundUp(r.ts, ring.tickMs);
    const last = merged.at(-1);
    if (last && last.ts === ts) merged[merged.length - 1] = { ...last, cost: last.cost + r.cost };
    else merged.push({ ring: ring.tickMs, key: 0, ts, cost: r.cost });
  }
  return merged.slice(-ring.capacity).map((r, k) => ({ ...r, key: k }));
}
