// The model of regional lease holders that `SIM_REGIONS=3 npm run bench:sim` runs (test/support/holders.ts): its
// sweep of windows over real use times must catch a holder that dates a sub-lease at itself rather than at the object.
import { describe, expect, it } from "vitest";
import { type KeyRequest, simulateKey } from "../support/holders.ts";
import { maxInWindow } from "../support/window.ts";

const LIMITS = [
  { limit: 100, windowMs: 1000 },
  { limit: 100_000, windowMs: 60_000 },
];

/**
 * One region: 8 isolates sharing 3 requests a second for a minute, spending sub-leases slowly; from 25 s on two more
 * at 150/s each, the key at its limit while its holder's first leases end. A sub-lease that outlives its holder's
 * lease is spent uncounted in windows the object fills to N.
 */
function requests(seed: number): KeyRequest[] {
  let a = seed * 7919;
  const random = () => {
    a = (a * 16807) % 2147483647;
    return a / 2147483647;
  };
  const out: KeyRequest[] = [];
  const poisson = (rate: number, from: number, to: number, isolate: () => number) => {
    for (let t = from + 1; t < to; t += Math.ceil((-Math.log(1 - random()) * 1000) / rate))
      out.push({ at: t, isolate: isolate() });
  };
  poisson(3, 0, 60_000, () => Math.floor(random() * 8));
  poisson(300, 25_000, 60_000, () => 8 + Math.floor(random() * 2));
  return out.sort((x, y) => x.at - y.at);
}

/** The most units used in any window of each limit. */
function most(seed: number, holders: "off" | "on" | "broken"): number[] {
  const o = simulateKey({
    limits: LIMITS,
    requests: requests(seed),
    regionOf: () => 0,
    isolateHomeMs: () => 120,
    isolateHolderMs: () => 10,
    holderHomeMs: () => 120,
    isolateChurn: [],
    holderChurn: [],
    holders,
    lifetimeMs: 30_000,
    maxUnits: 1000,
  });
  return LIMITS.map((l) => maxInWindow(o.uses, l.windowMs));
}

// Whole simulations, 36 of them: seconds each on a loaded machine (a bound on time, not a claim about speed).
describe("the holder model's sweep", { timeout: 120_000 }, () => {
  const seeds = Array.from({ length: 12 }, (_, i) => i + 1);

  it("finds no window over N without holders, or with holders that date sub-leases at the object", () => {
    for (const seed of seeds) {
      for (const mode of ["off", "on"] as const) {
        expect(
          most(seed, mode).every((m, i) => m <= (LIMITS[i]?.limit ?? 0)),
          `${mode}, seed ${seed}`,
        ).toBe(true);
      }
    }
  });

  it("finds windows over N when a holder dates a sub-lease at itself (a fresh lifetime from the isolate's ask)", () => {
    const over = seeds.filter((seed) => (most(seed, "broken")[0] as number) > 100);
    expect(over.length).toBeGreaterThanOrEqual(seeds.length / 2);
  });
});
