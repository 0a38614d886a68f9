// Several identifiers, all or nothing: the request pipeline (src/pipeline/index.ts) decides a request with a key by its
// key's object and its client address's object at once, against an in-memory namespace built on the real core and
// a clock the test moves. Properties over random traffic from several keys and addresses, at real use times: no
// window of either budget is ever over its limit (leases on), and every request ends counted in both budgets or in
// neither (leases off, so that what the objects hold is exactly what was granted). The same with an account's budget
// over two keys as a third (docs/configuration.md, "Accounts").

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type Background, LimiterClient, type LimiterNamespace } from "../../src/client/index.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig } from "../../src/config/types.ts";
import { type Ask, KeyLog, type LimitSpec, type Settlement } from "../../src/core/index.ts";
import { Pipeline } from "../../src/pipeline/index.ts";

const T0 = 1_800_000_000_000;

/** Every object's log in memory, decided at the shared clock. */
function memoryNamespace(now: () => number) {
  const logs = new Map<string, KeyLog>();
  const log = (name: string, limits: readonly LimitSpec[]) => {
    let l = logs.get(name);
    if (!l) {
      l = new KeyLog(limits);
      logs.set(name, l);
    }
    return l;
  };
  /** Grant ids given back (the object gives each back once). */
  const refunded = new Set<string>();
  const ns = {
    getByName: (name: string) => ({
      take: async (limits: readonly LimitSpec[], ask: Ask) => log(name, limits).take(now(), ask).decision,
      refund: async (
        limits: readonly LimitSpec[],
        grant: { id: string; recordedAt: readonly number[]; units: number },
      ) => {
        const { id, recordedAt, units } = grant;
        if (refunded.has(id)) return false;
        refunded.add(id);
        log(name, limits).giveBack(recordedAt, units);
        return true;
      },
      settle: async (limits: readonly LimitSpec[], settle: readonly Settlement[]) =>
        settle.flatMap((s) => log(name, limits).settle(now(), s)).length,
      peek: async (limits: readonly LimitSpec[], cost: number) => log(name, limits).check(now(), cost),
    }),
  } as unknown as LimiterNamespace;
  return { ns, logs };
}

interface Step {
  readonly key: number;
  readonly address: number;
  readonly dt: number;
}

const steps = fc.array(
  fc.record({ key: fc.nat(2), address: fc.nat(1), dt: fc.oneof(fc.constant(0), fc.nat(40), fc.nat(400)) }),
  { minLength: 1, maxLength: 120 },
);

/** Keys 0 and 1 belong to account 0, key 2 to account 1. */
const accountOf = (key: number) => (key < 2 ? 0 : 1);

async function run(settings: Record<string, unknown>, plan: readonly Step[], accounts = false) {
  let now = T0;
  const clock = () => now;
  const config = parseLimiterConfig(settings, "test") as LimiterConfig;
  const pipeline = new Pipeline(new LimiterClient(config, { clock }), null);
  const { ns, logs } = memoryNamespace(clock);
  const pending: Promise<unknown>[] = [];
  const bg: Background = { waitUntil: (p) => void pending.push(p) };
  const grants: { key: number; address: number; at: number }[] = [];
  for (const s of plan) {
    now += s.dt;
    const account = accounts ? { account: `a${accountOf(s.key)}` } : {};
    const asking = { key: `k${s.key}`, ip: `192.0.2.${s.address + 1}`, cost: 1, bg, ...account };
    const decided = await pipeline.decide({}, ns, asking);
    if (decided?.result.allowed) grants.push({ key: s.key, address: s.address, at: now });
    while (pending.length > 0) await pending.shift();
  }
  return { grants, logs, now, config };
}

/** The most grants in any window of `windowMs` among these use times. */
function most(times: readonly number[], windowMs: number): number {
  let best = 0;
  for (const t of times) best = Math.max(best, times.filter((u) => u > t - windowMs && u <= t).length);
  return best;
}

describe("a key and its address, all or nothing", () => {
  it("property: with leases, no window of a key's budget or an address's is ever over its limit at real use times", async () => {
    await fc.assert(
      fc.asyncProperty(steps, fc.integer({ min: 2, max: 6 }), fc.integer({ min: 2, max: 8 }), async (plan, nk, na) => {
        const settings = {
          limits: [{ limit: nk, window: "1s" }],
          ip: { limits: [{ limit: na, window: "1s" }] },
          leases: { max_lifetime: "500ms" },
        };
        const { grants } = await run(settings, plan);
        for (const k of [0, 1, 2]) {
          expect(
            most(
              grants.filter((g) => g.key === k).map((g) => g.at),
              1000,
            ),
          ).toBeLessThanOrEqual(nk);
        }
        for (const a of [0, 1]) {
          expect(
            most(
              grants.filter((g) => g.address === a).map((g) => g.at),
              1000,
            ),
          ).toBeLessThanOrEqual(na);
        }
      }),
      { numRuns: 60 },
    );
  });

  it("property: every request ends counted in both budgets or in neither", async () => {
    await fc.assert(
      fc.asyncProperty(steps, fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 8 }), async (plan, nk, na) => {
        // Windows longer than the run: what each object holds is everything it ever counted.
        const settings = {
          limits: [{ limit: nk, window: "1h" }],
          ip: { limits: [{ limit: na, window: "1h" }] },
          leases: false,
        };
        const { grants, logs, now } = await run(settings, plan);
        const held = (name: string, n: number) => {
          const log = logs.get(name);
          return log ? n - (log.check(now, 1).limits[0]?.remaining ?? n) : 0;
        };
        for (const k of [0, 1, 2]) {
          expect(held(`key:k${k}`, nk)).toBe(grants.filter((g) => g.key === k).length);
        }
        for (const a of [0, 1]) {
          expect(held(`addr:192.0.2.${a + 1}`, na)).toBe(grants.filter((g) => g.address === a).length);
        }
      }),
      { numRuns: 80 },
    );
  });
});

describe("a key, its address and its account, all or nothing", () => {
  /** One plan for keys `k…`: its own limits, its address's and its account's, all `n` a `window`. */
  const plans = (nk: number, na: number, nc: number, window: string, leases: unknown) => ({
    plans: [
      {
        name: "p",
        key_prefix: "k",
        limits: [{ limit: nk, window }],
        ip: { limits: [{ limit: na, window }] },
        account: { limits: [{ limit: nc, window }] },
      },
    ],
    leases,
  });
  const sizes = [
    fc.integer({ min: 1, max: 6 }),
    fc.integer({ min: 1, max: 8 }),
    fc.integer({ min: 1, max: 8 }),
  ] as const;

  it("property: with leases, no window of a key's, an address's or an account's budget is ever over", async () => {
    await fc.assert(
      fc.asyncProperty(steps, ...sizes, async (plan, nk, na, nc) => {
        const { grants } = await run(plans(nk, na, nc, "1s", { max_lifetime: "500ms" }), plan, true);
        const at = (f: (g: { key: number; address: number }) => boolean) => grants.filter(f).map((g) => g.at);
        for (const k of [0, 1, 2])
          expect(
            most(
              at((g) => g.key === k),
              1000,
            ),
          ).toBeLessThanOrEqual(nk);
        for (const a of [0, 1])
          expect(
            most(
              at((g) => g.address === a),
              1000,
            ),
          ).toBeLessThanOrEqual(na);
        for (const c of [0, 1])
          expect(
            most(
              at((g) => accountOf(g.key) === c),
              1000,
            ),
          ).toBeLessThanOrEqual(nc);
      }),
      { numRuns: 60 },
    );
  });

  it("property: every request ends counted in all three budgets or in none", async () => {
    await fc.assert(
      fc.asyncProperty(steps, ...sizes, async (plan, nk, na, nc) => {
        const { grants, logs, now } = await run(plans(nk, na, nc, "1h", false), plan, true);
        const held = (name: string, n: number) => {
          const log = logs.get(name);
          return log ? n - (log.check(now, 1).limits[0]?.remaining ?? n) : 0;
        };
        for (const k of [0, 1, 2]) expect(held(`key:k${k}`, nk)).toBe(grants.filter((g) => g.key === k).length);
        for (const a of [0, 1]) {
          expect(held(`addr.p:192.0.2.${a + 1}`, na)).toBe(grants.filter((g) => g.address === a).length);
        }
        for (const c of [0, 1]) {
          expect(held(`acct.p:a${c}`, nc)).toBe(grants.filter((g) => accountOf(g.key) === c).length);
        }
      }),
      { numRuns: 80 },
    );
  });
});
