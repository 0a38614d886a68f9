/**
 * @module Regions for `npm run bench:sim` (issue 51): the same arrivals as the simulation, its isolates placed in
 * regions, each key's object in one of them, and the bound any lease design can reach there — per-isolate leases, or
 * a lease holder per region that leases from the key's object exactly as an isolate does and sub-leases to its
 * region's isolates. Pure: no runtime, the arrivals and the churn passed in.
 */

import { quantile } from "./http/load.ts";

/** One arrival of the simulation's plan (bench/sim.bench.ts `Planned`). */
export interface Arrival {
  readonly at: number;
  readonly key: string;
  readonly isolate: number;
}

/** Where things are: isolates by region, and the round trips between them. */
export interface Geography {
  readonly regions: number;
  readonly isolates: number;
  /** The isolate's region. */
  regionOf(isolate: number): number;
  /** The key's object's region (its home). */
  homeOf(key: string): number;
  /** Round trip (ms) from an isolate to anything in its own region: its holder, or a home there. */
  readonly regionalMs: readonly number[];
  /** Round trip (ms) between two regions (`[a][b]`, symmetric); within one region, that region's own. */
  readonly betweenMs: readonly (readonly number[])[];
}

/** Builds a geography: regional round trips of 5–20 ms, 80–150 ms between regions, from `random`. */
export function geography(
  regions: number,
  isolates: number,
  homeOf: (key: string) => number,
  random: () => number,
): Geography {
  const regionalMs = Array.from({ length: isolates }, () => Math.round(5 + 15 * random()));
  const within = Array.from({ length: regions }, () => Math.round(5 + 15 * random()));
  const betweenMs = within.map((w) => within.map(() => w));
  for (let a = 0; a < regions; a++) {
    for (let b = a + 1; b < regions; b++) {
      const rtt = Math.round(80 + 70 * random());
      (betweenMs[a] as number[])[b] = rtt;
      (betweenMs[b] as number[])[a] = rtt;
    }
  }
  return { regions, isolates, regionOf: (i) => i % regions, homeOf, regionalMs, betweenMs };
}

/** Round trip (ms) from isolate `i` straight to the key's home object. */
export function toHomeMs(g: Geography, i: number, key: string): number {
  const r = g.regionOf(i);
  const home = g.homeOf(key);
  return r === home ? (g.regionalMs[i] as number) : (g.betweenMs[r]?.[home] as number);
}

/** Vanishings: `at` the isolate (or the region's holder) `index` loses everything it holds. */
export interface Churn {
  readonly at: number;
  readonly index: number;
}

/** One vanishing every `everyMs` over `count` things for `endMs` (none when `everyMs` is 0). */
export function churnPlan(everyMs: number, count: number, endMs: number, random: () => number): Churn[] {
  const out: Churn[] = [];
  if (everyMs > 0)
    for (let t = everyMs; t < endMs; t += everyMs) out.push({ at: t, index: Math.floor(random() * count) });
  return out;
}

/** A design the bound is computed for. */
export interface BoundDesign {
  readonly name: string;
  /** Lease lifetime (ms; `Infinity`: only vanishing ends a lease). */
  readonly lifetimeMs: number;
  /** Per-region holders between the isolates and the key's object; otherwise isolates call the object. */
  readonly holders: boolean;
  /**
   * The most units a lease carries (default: as many as needed). A lease used up is replaced by a call made ahead
   * of need (no request waits for it).
   */
  readonly maxUnits?: number;
}

/** Per request of the bound: the calls it caused and what it waited for. */
export interface BoundRequest {
  readonly key: string;
  readonly at: number;
  readonly isolate: number;
  readonly homeCalls: number;
  readonly holderCalls: number;
  readonly addedMs: number;
  /** Its region saw the key within the minute before. */
  readonly seenInRegion: boolean;
}

/**
 * The fewest calls at the key's home any design of this shape could make on these arrivals, and what its requests
 * wait for then. As `SIM_BOUND` does for one region: a lease is taken at the first request that finds none alive and
 * is as large as every request it could serve needs; it lives `lifetimeMs`, or until its holder vanishes. With
 * holders an isolate's sub-lease ends with its holder's lease (a sub-lease may not outlive the lease it comes from),
 * and an isolate with nothing asks its region's holder (a regional round trip), which asks the key's home only when
 * it holds nothing alive (the holder's round trip to the home on top). Refills, settlements and give-backs cost
 * nothing and nobody waits for them; near a limit no lease is that free (keys at the limit are the caller's to leave
 * out).
 */
export function boundRequests(
  plan: readonly Arrival[],
  g: Geography,
  design: BoundDesign,
  isolateChurn: readonly Churn[],
  holderChurn: readonly Churn[],
): BoundRequest[] {
  const isoGen = new Array<number>(g.isolates).fill(0);
  const holderGen = new Array<number>(g.regions).fill(0);
  /** Until when a lease is alive, by key|place|generation. */
  const until = new Map<string, number>();
  const left = new Map<string, number>();
  /** The holder lease (by key|place|generation) an isolate's sub-lease came from. */
  const subOf = new Map<string, string>();
  const most = design.maxUnits ?? Number.POSITIVE_INFINITY;
  /** Takes a unit of the lease `held`: false when it is used up (a refill call, counted, waited for by nobody). */
  const spend = (held: string) => {
    const n = left.get(held) ?? 0;
    if (n > 0) {
      left.set(held, n - 1);
      return true;
    }
    left.set(held, most - 1);
    return false;
  };
  const lastInRegion = new Map<string, number>();
  const out: BoundRequest[] = [];
  let c = 0;
  let h = 0;
  for (const p of plan) {
    for (; c < isolateChurn.length && (isolateChurn[c] as Churn).at <= p.at; c++) {
      const i = (isolateChurn[c] as Churn).index;
      isoGen[i] = (isoGen[i] as number) + 1;
    }
    for (; h < holderChurn.length && (holderChurn[h] as Churn).at <= p.at; h++) {
      const r = (holderChurn[h] as Churn).index;
      holderGen[r] = (holderGen[r] as number) + 1;
    }
    const region = g.regionOf(p.isolate);
    const seenKey = `${p.key}|${region}`;
    const last = lastInRegion.get(seenKey);
    lastInRegion.set(seenKey, p.at);
    const seenInRegion = last !== undefined && p.at - last <= 60_000;
    const iso = `${p.key}|i${p.isolate}|${isoGen[p.isolate]}`;
    let homeCalls = 0;
    let holderCalls = 0;
    let addedMs = 0;
    const holder = `${p.key}|h${region}|${holderGen[region]}`;
    if (p.at < (until.get(iso) ?? Number.NEGATIVE_INFINITY)) {
      // Spent from the isolate's own lease (or sub-lease): no call but a refill when the units ran out.
      const from = design.holders ? (subOf.get(iso) as string) : iso;
      if (!spend(from)) {
        homeCalls = 1;
        until.set(from, p.at + design.lifetimeMs);
      }
    } else if (!design.holders) {
      homeCalls = 1;
      addedMs = toHomeMs(g, p.isolate, p.key);
      until.set(iso, p.at + design.lifetimeMs);
      left.set(iso, most - 1);
    } else {
      holderCalls = 1;
      addedMs = g.regionalMs[p.isolate] as number;
      let holderUntil = until.get(holder) ?? Number.NEGATIVE_INFINITY;
      if (p.at >= holderUntil) {
        homeCalls = 1;
        addedMs += g.betweenMs[region]?.[g.homeOf(p.key)] as number;
        holderUntil = p.at + design.lifetimeMs;
        until.set(holder, holderUntil);
        left.set(holder, most - 1);
      } else if (!spend(holder)) {
        // Used up: the holder's refill was asked ahead of need (counted; the request waits only for the holder).
        homeCalls = 1;
        holderUntil = p.at + design.lifetimeMs;
        until.set(holder, holderUntil);
      }
      until.set(iso, holderUntil);
      subOf.set(iso, holder);
    }
    out.push({ key: p.key, at: p.at, isolate: p.isolate, homeCalls, holderCalls, addedMs, seenInRegion });
  }
  return out;
}

/** Figures of a set of requests: calls per grant (every request a grant here) and added latency. */
export interface BoundFigures {
  readonly requests: number;
  readonly homePerGrant: number;
  readonly holderPerGrant: number;
  readonly p50: number;
  readonly p99: number;
}

/** Sums a class's requests. */
export function figures(list: readonly BoundRequest[]): BoundFigures {
  let home = 0;
  let holder = 0;
  const added = list.map((r) => r.addedMs).sort((a, b) => a - b);
  for (const r of list) {
    home += r.homeCalls;
    holder += r.holderCalls;
  }
  const n = Math.max(1, list.length);
  return {
    requests: list.length,
    homePerGrant: home / n,
    holderPerGrant: holder / n,
    p50: quantile(added, 0.5),
    p99: quantile(added, 0.99),
  };
}
