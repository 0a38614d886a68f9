/**
 * @module `SIM_REGIONS=3 npm run bench:sim` (issue 51): no workerd run. The simulation's own arrivals and isolate
 * churn, its isolates spread over regions, each key's object in the region of the key's home isolate; first the
 * bound (bench/regions.ts) for per-isolate leases and for regional holders, then the model
 * (test/support/holders.ts: the real `KeyLog` as the key's object, the client's lease sizing in the isolates) with
 * holders off and on, side by side on the same arrivals, per class.
 */

import { FAR_LEASE_FACTOR, type LimitSpec, maxLeaseUnits } from "../src/core/index.ts";
import { simulateKey } from "../test/support/holders.ts";
import { exactGrants, maxInWindow } from "../test/support/window.ts";
import { quantile } from "./http/load.ts";
import {
  type Arrival,
  type BoundDesign,
  type BoundFigures,
  type BoundRequest,
  boundRequests,
  type Churn,
  figures,
  type Geography,
  toHomeMs,
} from "./regions.ts";

export interface RegionsRun {
  readonly plan: readonly Arrival[];
  readonly geo: Geography;
  readonly isolateChurn: readonly Churn[];
  readonly holderChurn: readonly Churn[];
  readonly limits: readonly LimitSpec[];
  readonly lifetimeMs: number;
  readonly maxUnits: number;
  readonly seconds: number;
  readonly reproduce: string;
}

const RARE = "rare (< 0.5/s)";
const RARE_AGAIN = "rare, away from home, seen in its region < 1 min before";
const ORDINARY = "ordinary (0.5–5/s)";
const HOT = "hot (≥ 5/s)";
const AT_LIMIT = "at the limit";
const BURST = "burst after quiet";
const ORDER = [RARE, RARE_AGAIN, ORDINARY, HOT, AT_LIMIT, BURST];
/** After the first 30 s: each key's first calls left out (in production a key's life is hours, not a run). */
const WARM_MS = 30_000;
const warm = (c: string) => `${c}, from ${WARM_MS / 1000} s`;
/** The bound is for keys far from their limits (near one no lease is free): its rows. */
const BOUND_ORDER = [RARE, RARE_AGAIN, ORDINARY, HOT].flatMap((c) => (c === RARE_AGAIN ? [c] : [c, warm(c)]));

const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : "-");

/** A key's class, by its requests over the run (bench/sim.bench.ts `rateClass`). */
function classOf(key: string, times: readonly number[], limits: readonly LimitSpec[], seconds: number): string {
  if (key.startsWith("b_")) return BURST;
  if (exactGrants(times, limits) < times.length) return AT_LIMIT;
  const perSecond = times.length / seconds;
  return perSecond >= 5 ? HOT : perSecond >= 0.5 ? ORDINARY : RARE;
}

/** Per request (in plan order): its region saw the key within the minute before. */
function seenInRegion(plan: readonly Arrival[], g: Geography): boolean[] {
  const last = new Map<string, number>();
  return plan.map((p) => {
    const k = `${p.key}|${g.regionOf(p.isolate)}`;
    const before = last.get(k);
    last.set(k, p.at);
    return before !== undefined && p.at - before <= 60_000;
  });
}

export function regionsReport(r: RegionsRun): void {
  const { plan, geo } = r;
  const limited = plan.filter((p) => !p.key.startsWith("free_"));
  const byKey = new Map<string, number[]>();
  limited.forEach((p, n) => {
    const list = byKey.get(p.key);
    if (list) list.push(n);
    else byKey.set(p.key, [n]);
  });
  const cls = new Map<string, string>();
  for (const [key, idx] of byKey)
    cls.set(
      key,
      classOf(
        key,
        idx.map((n) => (limited[n] as Arrival).at),
        r.limits,
        r.seconds,
      ),
    );
  const again = seenInRegion(limited, geo);
  /** The classes a request counts in: its key's, and for a rare key seen in its region lately, that one too. */
  const classesOf = (n: number) => {
    const p = limited[n] as Arrival;
    const c = cls.get(p.key) as string;
    return c === RARE && again[n] && geo.regionOf(p.isolate) !== geo.homeOf(p.key) ? [c, RARE_AGAIN] : [c];
  };
  const boundClassesOf = (n: number) => {
    const out = classesOf(n);
    const c = out[0] as string;
    return (limited[n] as Arrival).at >= WARM_MS && c !== AT_LIMIT && c !== BURST ? [...out, warm(c)] : out;
  };
  const regional = (n: number) => geo.regionalMs[(limited[n] as Arrival).isolate] as number;
  console.log(
    `regions: ${geo.regions}, ${geo.isolates} isolates (isolate i in region i mod ${geo.regions}); round trips within a region ${geo.regionalMs.join("/")} ms by isolate, between regions ${geo.betweenMs.map((row) => row.join("/")).join(" | ")} ms; each key's object in its home isolate's region; ${r.isolateChurn.length} isolates and ${r.holderChurn.length} holders vanish`,
  );
  const keysIn = (c: string) => [...cls.values()].filter((x) => x === c).length;

  // The bound: per design, per class.
  // The most units the object leases at once far below every limit.
  const cap = FAR_LEASE_FACTOR * maxLeaseUnits(r.limits);
  const designs: BoundDesign[] = [
    { name: "per-isolate, 30 s", lifetimeMs: 30_000, holders: false },
    { name: "per-isolate, 60 s", lifetimeMs: 60_000, holders: false },
    { name: "holders, 30 s", lifetimeMs: 30_000, holders: true },
    { name: "holders, 60 s", lifetimeMs: 60_000, holders: true },
    { name: `holders, 60 s, ≤ ${cap} units a lease`, lifetimeMs: 60_000, holders: true, maxUnits: cap },
    { name: "holders, leases ended only by vanishing", lifetimeMs: Number.POSITIVE_INFINITY, holders: true },
  ];
  const persistent: BoundDesign = { name: "holders that never vanish, 60 s", lifetimeMs: 60_000, holders: true };
  console.log(
    "\nBOUND (as SIM_BOUND: a lease at the first request finding none alive, as large as needed, lasting its lifetime or until its holder vanishes; refills, settlement free; keys at the limit and bursts left out, as there). Home calls / grant, holder calls / grant, added p50 / p99 ms; for rare keys away from home seen lately, p50 also less the request's own regional round trip:",
  );
  console.log(`\n| class | keys | requests | ${[...designs, persistent].map((d) => d.name).join(" | ")} |`);
  console.log(`| --- | ---: | ---: |${" --- |".repeat(designs.length + 1)}`);
  const boundRuns = [...designs, persistent].map((d) =>
    boundRequests(limited, geo, d, r.isolateChurn, d === persistent ? [] : r.holderChurn),
  );
  /** The bound's figures by class and design, for the targets below. */
  const bound = new Map<string, BoundFigures[]>();
  for (const c of BOUND_ORDER) {
    const idx = limited.map((_, n) => n).filter((n) => boundClassesOf(n).includes(c));
    if (idx.length === 0) continue;
    bound.set(
      c,
      boundRuns.map((run) => figures(idx.map((n) => run[n] as BoundRequest))),
    );
    const cells = boundRuns.map((run) => {
      const f = figures(idx.map((n) => run[n] as BoundRequest));
      const excess =
        c === RARE_AGAIN
          ? ` (−own ${fmt(
              quantile(
                idx.map((n) => (run[n] as BoundRequest).addedMs - regional(n)).sort((a, b) => a - b),
                0.5,
              ),
              0,
            )})`
          : "";
      return `${fmt(f.homePerGrant, 3)}, ${fmt(f.holderPerGrant, 3)}; ${fmt(f.p50, 0)}${excess} / ${fmt(f.p99, 0)}`;
    });
    console.log(`| ${c} | ${keysIn(c) || ""} | ${idx.length} | ${cells.join(" | ")} |`);
  }

  // The model: holders off and on, per class.
  interface Tally {
    requests: number;
    grants: number;
    exact: number;
    home: number;
    holder: number;
    rows: number;
    added: number[];
    excess: number[];
    leased: number;
    stranded: number;
    overN: number;
  }
  const modes = ["off", "on"] as const;
  const tallies = modes.map(() => new Map<string, Tally>());
  const tally = (m: number, c: string) => {
    const map = tallies[m] as Map<string, Tally>;
    let t = map.get(c);
    if (!t) {
      t = {
        requests: 0,
        grants: 0,
        exact: 0,
        home: 0,
        holder: 0,
        rows: 0,
        added: [],
        excess: [],
        leased: 0,
        stranded: 0,
        overN: 0,
      };
      map.set(c, t);
    }
    return t;
  };
  const regionsOfIsolate = (i: number) => geo.regionOf(i);
  for (const [key, idx] of byKey) {
    const requests = idx.map((n) => ({
      at: Math.ceil((limited[n] as Arrival).at),
      isolate: (limited[n] as Arrival).isolate,
    }));
    const home = geo.homeOf(key);
    const exact = exactGrants(
      requests.map((q) => q.at),
      r.limits,
    );
    modes.forEach((mode, m) => {
      const o = simulateKey({
        limits: r.limits,
        requests,
        regionOf: regionsOfIsolate,
        isolateHomeMs: (i) => toHomeMs(geo, i, key),
        isolateHolderMs: (i) => geo.regionalMs[i] as number,
        holderHomeMs: (region) => geo.betweenMs[region]?.[home] as number,
        isolateChurn: r.isolateChurn,
        holderChurn: r.holderChurn,
        holders: mode,
        lifetimeMs: r.lifetimeMs,
        maxUnits: r.maxUnits,
      });
      const over = r.limits.filter((l) => maxInWindow(o.uses, l.windowMs) > l.limit).length;
      const own = tally(m, cls.get(key) as string);
      own.exact += exact;
      own.home += o.homeCalls;
      own.holder += o.holderCalls;
      own.rows += o.rows;
      own.leased += o.leased;
      own.stranded += o.stranded;
      own.overN += over;
      idx.forEach((n, j) => {
        for (const c of classesOf(n)) {
          const t = c === cls.get(key) ? own : tally(m, c);
          t.requests++;
          if (!o.granted[j]) continue;
          t.grants++;
          t.added.push(o.addedMs[j] as number);
          if (c === RARE_AGAIN) t.excess.push((o.addedMs[j] as number) - regional(n));
        }
      });
    });
  }
  console.log(
    `\nMODEL (leases of ${r.lifetimeMs / 1000} s, the object's own KeyLog, the client's lease sizing; every unit judged at its real use). Per class: holders off → on:`,
  );
  console.log(
    "\n| class | requests | utilisation (÷ exact) | home calls / grant | home rows / grant | holder calls / grant | added p50 / p99 ms | units stranded (of leased) | windows over N |",
  );
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |");
  for (const c of ORDER) {
    const [off, on] = modes.map((_, m) => (tallies[m] as Map<string, Tally>).get(c));
    if (!off || !on) continue;
    const both = (f: (t: Tally) => string) => `${f(off)} → ${f(on)}`;
    const lat = (t: Tally) => {
      const s = [...t.added].sort((a, b) => a - b);
      const e = [...t.excess].sort((a, b) => a - b);
      return `${fmt(quantile(s, 0.5), 0)}${e.length ? ` (−own ${fmt(quantile(e, 0.5), 0)})` : ""} / ${fmt(quantile(s, 0.99), 0)}`;
    };
    const perKey = c !== RARE_AGAIN;
    const line = [
      c,
      String(off.requests),
      perKey ? both((t) => fmt(t.grants / t.exact, 3)) : "",
      perKey ? both((t) => fmt(t.home / t.grants, 3)) : "",
      perKey ? both((t) => fmt(t.rows / t.grants, 3)) : "",
      perKey ? both((t) => fmt(t.holder / t.grants, 3)) : "",
      both(lat),
      perKey ? both((t) => `${t.stranded} (${fmt((100 * t.stranded) / Math.max(1, t.leased), 0)}%)`) : "",
      perKey ? both((t) => String(t.overN)) : "",
    ];
    console.log(`| ${line.join(" | ")} |`);
  }
  const overAll = tallies.map((map) => [...map.values()].reduce((n, t) => n + t.overN, 0));

  // The issue's targets with holders on, side by side: the bound (any design of the shape) and the model.
  const [offT, onT] = tallies as [Map<string, Tally>, Map<string, Tally>];
  const sorted = (xs: readonly number[]) => [...xs].sort((a, b) => a - b);
  const p = (t: Tally | undefined, q: number) => (t ? quantile(sorted(t.added), q) : Number.NaN);
  const per = (t: Tally | undefined, f: (t: Tally) => number) => (t ? f(t) : Number.NaN);
  const floor = (c: string, d: number) => bound.get(c)?.[d]?.homePerGrant ?? Number.NaN;
  const vanishing = designs.length - 1;
  const never = designs.length;
  console.log(
    "\nTargets with holders on (bound: the fewest any holder of this shape could make; model: the one above):",
  );
  console.log(
    `- ordinary keys ≤ 0.05 home calls / grant: bound ${fmt(floor(ORDINARY, vanishing), 3)} with holders vanishing as isolates do (${fmt(floor(warm(ORDINARY), vanishing), 3)} from ${WARM_MS / 1000} s), ${fmt(floor(ORDINARY, never), 3)} with holders that never vanish (${fmt(floor(warm(ORDINARY), never), 3)}); model ${fmt(
      per(onT.get(ORDINARY), (t) => t.home / t.grants),
      3,
    )}. Added p50 ≤ 2 ms: model ${fmt(p(onT.get(ORDINARY), 0.5), 0)} ms`,
  );
  const lately = onT.get(RARE_AGAIN);
  const boundAgain = bound.get(RARE_AGAIN)?.[2];
  console.log(
    `- rare keys away from home seen in the region < 1 min before, p50 ≤ regional round trip + 5 ms: bound p50 ${fmt(boundAgain?.p50 ?? Number.NaN, 0)} ms (holders, 30 s); model p50 ${fmt(p(lately, 0.5), 0)} ms, ${fmt(lately ? quantile(sorted(lately.excess), 0.5) : Number.NaN, 0)} ms over the request's own regional round trip`,
  );
  for (const c of [AT_LIMIT, BURST]) {
    const util = (t: Tally | undefined) =>
      fmt(
        per(t, (x) => x.grants / x.exact),
        3,
      );
    console.log(
      `- ${c}: utilisation ≥ 0.97: model ${util(offT.get(c))} → ${util(onT.get(c))}; p99 no worse than holders off: ${fmt(p(offT.get(c), 0.99), 0)} → ${fmt(p(onT.get(c), 0.99), 0)} ms`,
    );
  }
  console.log(`- windows over N: holders off ${overAll[0]}, on ${overAll[1]}`);
  console.log(`\nReproduce: ${r.reproduce}`);
}
