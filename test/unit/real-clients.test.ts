// Traffic as real clients send it (docs/design.md, "What real clients do"), against the client with one isolate and
// an in-memory object on the real core whose every call takes a round trip R (half before it decides, half after),
// on fake timers: parallel bursts (`Promise.all`), a burst after a quiet spell, clients in loops, paced arrivals and a
// ramp, at R = 0, 20 and 80 ms, leases on and off. Each run is judged against an exact limiter deciding each request
// at its send time, and no window of the grants' answer times (their use) may hold more than N.
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LimiterClient, type LimiterNamespace } from "../../src/client/index.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig, Plan } from "../../src/config/types.ts";
import { type Ask, KeyLog, type LimitSpec, leaseMargin, type Settlement } from "../../src/core/index.ts";
import { exactGrants, maxInWindow } from "../support/window.ts";

const T0 = 1_800_000_000_000;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A lease as the isolate got it: when it was asked and answered, until when it may be spent, and its units. */
interface Granted {
  readonly id: string;
  readonly sentAt: number;
  answeredAt: number;
  readonly expiresAt: number;
  readonly units: number;
  /** Units it gave back unused (settlements that named it). */
  unused: number;
}

/**
 * A loaded machine (two cores under busy loops): each request reaches the isolate up to `arrivalMs` after it was
 * sent, and each way of each object call takes up to `callMs` more, at random from `seed`.
 */
interface Load {
  readonly seed: number;
  readonly arrivalMs: number;
  readonly callMs: number;
}

/** Random delays of up to `ms` from a linear congruential generator seeded `seed` (0: none). */
function delays(seed: number): (ms: number) => number {
  let x = seed;
  return (ms) => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return Math.floor((x / 2_147_483_648) * ms);
  };
}

/**
 * One key's object in memory: each call waits R/2, decides at that moment, and answers R/2 later — a call carrying
 * settlements `settleDelay` ms later still (calls are not ordered: others of a burst may overtake it), and under a
 * `load` each way up to its `callMs` later. It keeps every lease it granted and what the isolate gave back of each.
 */
function remoteObject(rtt: number, settleDelay = 0, load?: Load) {
  const late = delays(load?.seed ?? 0);
  const callMs = load?.callMs ?? 0;
  let log: KeyLog | null = null;
  const of = (limits: readonly LimitSpec[]) => {
    log ??= new KeyLog(limits);
    return log;
  };
  const leases = new Map<string, Granted>();
  const idOf = (issuedAt: number, recordedAt: readonly number[]) => `${issuedAt}@${recordedAt.join(",")}`;
  const returned = (settle: readonly Settlement[] = []) => {
    for (const s of settle) {
      const l = leases.get(idOf(s.issuedAt, s.recordedAt));
      if (l) l.unused += s.unused;
    }
  };
  const remote = async <T>(decide: () => T): Promise<T> => {
    await sleep(rtt / 2 + late(callMs));
    const out = decide();
    await sleep(rtt / 2 + late(callMs));
    return out;
  };
  const stub = {
    take: async (limits: readonly LimitSpec[], ask: Ask) => {
      const sentAt = Date.now();
      returned(ask.settle);
      if (settleDelay > 0 && (ask.settle?.length ?? 0) > 0) await sleep(settleDelay);
      const d = await remote(() => of(limits).take(Date.now(), ask).decision);
      if (d.lease) {
        const id = idOf(d.now, d.lease.recordedAt);
        const expiresAt = sentAt + d.lease.lifetimeMs - leaseMargin(d.lease.lifetimeMs);
        leases.set(id, { id, sentAt, answeredAt: Date.now(), expiresAt, units: d.lease.units, unused: 0 });
      }
      return d;
    },
    refund: (limits: readonly LimitSpec[], grant: { recordedAt: readonly number[]; units: number }) => {
      return remote(() => of(limits).giveBack(grant.recordedAt, grant.units).length > 0);
    },
    settle: (limits: readonly LimitSpec[], settle: readonly Settlement[]) => {
      returned(settle);
      return remote(() => settle.flatMap((s) => of(limits).settle(Date.now(), s)).length);
    },
  };
  return { ns: { getByName: () => stub } as unknown as LimiterNamespace, leases };
}

interface Sent {
  readonly at: number;
  answeredAt: number;
  allowed: boolean;
  reason: string;
}

type Send = () => Promise<Sent>;

/** A shape: its limits and how its clients send. */
interface Shape {
  readonly limits: readonly { limit: number; window: number }[];
  readonly run: (send: Send) => Promise<Sent[]>;
}

/** `n` requests sent at once, as `Promise.all` sends them. */
const atOnce = (send: Send, n: number) => Promise.all(Array.from({ length: n }, send));

/** Open-loop arrivals at `offsets` (ms from now), answered or not. */
async function arrivals(send: Send, offsets: readonly number[]): Promise<Sent[]> {
  const start = Date.now();
  const pending: Promise<Sent>[] = [];
  for (const o of offsets) {
    const wait = start + o - Date.now();
    if (wait > 0) await sleep(wait);
    pending.push(send());
  }
  return Promise.all(pending);
}

/** `clients` in closed loops for `ms`: each sends its next request 1 ms after its last answer. */
async function loops(send: Send, clients: number, ms: number): Promise<Sent[]> {
  const out: Sent[] = [];
  const end = Date.now() + ms;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < end) {
        out.push(await send());
        await sleep(1);
      }
    }),
  );
  return out;
}

const BURST_LIMITS = [
  { limit: 30, window: 1000 },
  { limit: 300, window: 60_000 },
];

/** `paced` requests 500 ms apart, quiet for `quietMs`, then two bursts of 90 sent at once, 1.2 s apart. */
async function burstsAfterPacing(send: Send, paced: number, quietMs: number): Promise<Sent[]> {
  const out = await arrivals(
    send,
    Array.from({ length: paced }, (_, i) => i * 500),
  );
  await sleep(quietMs);
  out.push(...(await atOnce(send, 90)));
  await sleep(1200);
  out.push(...(await atOnce(send, 90)));
  return out;
}

const SHAPES: Record<string, Shape> = {
  // 2/s for 6 s, quiet 2 s, then two bursts of 90 sent at once, 1.2 s apart.
  // 2/s for 6 s, quiet 2 s, then two bursts of 90 sent at once, 1.2 s apart.
  "parallel bursts of 90 after quiet": { limits: BURST_LIMITS, run: (send) => burstsAfterPacing(send, 12, 2000) },
  // The same after only 3 s of pacing: a lease granted then is still held, partly spent, when the first burst comes.
  "parallel bursts of 90 after 3 s of pacing": {
    limits: BURST_LIMITS,
    run: (send) => burstsAfterPacing(send, 6, 2500),
  },
  "60 at once on a fresh key": {
    limits: [
      { limit: 20, window: 1000 },
      { limit: 10_000_000, window: 86_400_000 },
    ],
    run: (send) => atOnce(send, 60),
  },
  "60 at once on a fresh key of 40 a minute": {
    limits: [{ limit: 40, window: 60_000 }],
    run: (send) => atOnce(send, 60),
  },
  "a burst of 90 after quiet, 2 ms apart": {
    limits: [
      { limit: 30, window: 1000 },
      { limit: 300, window: 60_000 },
    ],
    run: (send) => {
      const offsets = Array.from({ length: 12 }, (_, i) => i * 500);
      for (const b of [8000, 9000]) for (let i = 0; i < 90; i++) offsets.push(b + i * 2);
      return arrivals(send, offsets);
    },
  },
  "paced at 2x": {
    limits: [{ limit: 20, window: 1000 }],
    run: (send) =>
      arrivals(
        send,
        Array.from({ length: 120 }, (_, i) => i * 25),
      ),
  },
  "ramp 2 to 60/s": {
    limits: [{ limit: 25, window: 1000 }],
    run: (send) => {
      const offsets: number[] = [];
      for (let t = 0; t < 4000; ) {
        offsets.push(t);
        t += 1000 / (2 + (58 * t) / 4000);
      }
      return arrivals(send, offsets);
    },
  },
  "1 client in a loop": {
    limits: [
      { limit: 20, window: 1000 },
      { limit: 60, window: 60_000 },
    ],
    run: (send) => loops(send, 1, 3300),
  },
  "8 clients in loops": { limits: [{ limit: 25, window: 1000 }], run: (send) => loops(send, 8, 3000) },
};

/** One shape through one client: what it granted, what exact grants, and the fullest window of its answer times. */
async function drive(shape: Shape, rtt: number, leases: boolean, settleDelay = 0, load?: Load) {
  const config = parseLimiterConfig({ limits: shape.limits, leases }, "test") as LimiterConfig;
  const client = new LimiterClient(config);
  const remote = remoteObject(rtt, settleDelay, load);
  const arrival = delays((load?.seed ?? 0) + 1);
  const ns = remote.ns;
  const plan = config.defaultPlan as Plan;
  /** The most units this isolate held unspent when it answered a refusal (the rule: none). */
  let heldAtRefusal = 0;
  const send: Send = async () => {
    const at = Date.now();
    if (load) await sleep(arrival(load.arrivalMs));
    const r = await client.limit({ ns, name: "key:a", plan, cost: 1, bg: {} });
    const entry = client.leases.get("key:a");
    if (!r.allowed && entry) heldAtRefusal = Math.max(heldAtRefusal, client.leases.holding(entry, Date.now(), null));
    return { at, answeredAt: Date.now(), allowed: r.allowed, reason: r.reason };
  };
  let done = false;
  const running = shape.run(send).finally(() => {
    done = true;
  });
  // Every shape ends within 60 s of its clock; a client that would never stop fails here instead of spinning.
  for (let ms = 0; !done && ms < 60_000; ms += 100) await vi.advanceTimersByTimeAsync(100);
  expect(done).toBe(true);
  await vi.runOnlyPendingTimersAsync(); // settlements and refills after the last answer
  const sent = await running;
  const specs = shape.limits.map((l) => ({ limit: l.limit, windowMs: l.window }));
  const granted = sent.filter((s) => s.allowed);
  // Units a lease left unspent (given back, or still held at the end): a refusal answered while that lease's call
  // was out (the request should have waited for it) or while it could still be spent had a unit at hand.
  const entry = client.leases.get("key:a");
  for (const h of [...(entry?.held ?? []), ...(entry?.expired ?? [])]) {
    const l = [...remote.leases.values()].find((g) => g.id === `${h.issuedAt}@${h.recordedAt.join(",")}`);
    if (l) l.unused += h.left;
  }
  const wasted = [...remote.leases.values()].filter((l) => l.unused > 0);
  const refusedWithUnit = sent.filter(
    (s) => !s.allowed && wasted.some((l) => l.sentAt <= s.answeredAt && s.answeredAt < l.expiresAt),
  ).length;
  const fullest = specs.map(
    (l) =>
      maxInWindow(
        granted.map((s) => s.answeredAt),
        // A grant's answer may take the call's way back to reach its client: windows that much shorter.
        l.windowMs - (load?.callMs ?? 0),
      ) - l.limit,
  );
  return {
    granted: granted.length,
    exact: exactGrants(
      sent.map((s) => s.at),
      specs,
    ),
    over: Math.max(...fullest),
    heldAtRefusal,
    refusedWithUnit,
    sent,
  };
}

beforeEach(() => {
  vi.useFakeTimers({ now: T0, toFake: ["setTimeout", "clearTimeout", "Date"] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe("one isolate, real clients: no refusal while a unit is at hand", () => {
  for (const rtt of [0, 20, 80]) {
    for (const [name, shape] of Object.entries(SHAPES)) {
      it(`${name}, R = ${rtt} ms: leases on grant 97 % of what exact grants or one fewer, never a window over N`, async () => {
        const on = await drive(shape, rtt, true);
        const off = await drive(shape, rtt, false);
        expect(on.over).toBeLessThanOrEqual(0);
        expect(off.over).toBeLessThanOrEqual(0);
        // Open-loop shapes send the same arrivals both ways: leases on grant at least what leases off grant.
        if (!name.includes("loop")) expect(on.granted).toBeGreaterThanOrEqual(off.granted - 1);
        expect(on.granted).toBeGreaterThanOrEqual(Math.min(on.exact - 1, Math.ceil(0.97 * on.exact)));
      });
    }
  }
});

describe("a burst whose calls overtake its isolate's settlement", () => {
  // The burst's first call carries the settlement of the paced phase's expired lease (its units recorded at the
  // lease's end until then); held back at the object, the burst's other calls are decided before it. Refused on the
  // units it frees, they ask once more within the room its answer shows (acquire.ts, `#roomAfterSettling`).
  for (const name of ["parallel bursts of 90 after quiet", "parallel bursts of 90 after 3 s of pacing"]) {
    for (const settleDelay of [40, 100]) {
      it(`${name}, R = 20 ms, the settling call ${settleDelay} ms late: what exact grants or one fewer, never over N`, async () => {
        const r = await drive(SHAPES[name] as Shape, 20, true, settleDelay);
        expect(r.over).toBeLessThanOrEqual(0);
        // Without asking once more: 67 and 72 of 72, 57 and 62 of 66.
        expect(r.granted).toBeGreaterThanOrEqual(r.exact - 1);
      });
    }
  }
});

describe("parallel bursts on a loaded machine: arrivals spread, object calls slow at random", () => {
  // Arrivals up to 400 ms late and each way of an object call up to 150 ms late (the e2e case under three busy loops
  // saw 450 ms of jitter): a lease led by the mean round trip alone arrived with its spending time gone, its units
  // counted at the object until the next burst (57 of 66 at seed 14); its lead is now the round trip and four
  // deviations. A lease's use settled after it left the second's window counts in the minute's alone (ring.ts). And a
  // refusal on units a lease left unspent asks once more carrying them back (60 at once on a fresh key of 40 a
  // minute: 37 of 40 before).
  const LOAD = { arrivalMs: 400, callMs: 150 };
  for (const name of [
    "parallel bursts of 90 after quiet",
    "parallel bursts of 90 after 3 s of pacing",
    "60 at once on a fresh key",
    "60 at once on a fresh key of 40 a minute",
  ]) {
    for (const settleDelay of [0, 40]) {
      it(`${name}, R = 20 ms, settling calls ${settleDelay} ms late: what exact grants or one fewer, never over N`, async () => {
        for (let seed = 1; seed <= 20; seed++) {
          const r = await drive(SHAPES[name] as Shape, 20, true, settleDelay, { seed: seed * 7_919, ...LOAD });
          expect({ seed, over: r.over }).toEqual({ seed, over: Math.min(r.over, 0) });
          expect({ seed, granted: r.granted }).toEqual({ seed, granted: Math.max(r.granted, r.exact - 1) });
        }
      });
    }
  }
});

describe("property: a client looping at its limit with pauses, uses settled in groups", () => {
  it("no window of the grants' answer times (their use) is over N", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          rtt: fc.constantFrom(0, 4, 20, 80),
          limit: fc.integer({ min: 16, max: 60 }),
          // After each answer the client sends again at once, or after a pause long enough to end a group of uses.
          pauses: fc.array(fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 126, max: 600 })), {
            minLength: 20,
            maxLength: 30,
          }),
        }),
        async ({ rtt, limit, pauses }) => {
          const shape: Shape = {
            limits: [{ limit, window: 1000 }],
            run: async (send) => {
              const out: Sent[] = [];
              for (let round = 0; round < 2; round++) {
                for (const pause of pauses) {
                  out.push(await send());
                  await sleep(pause + 1);
                }
              }
              return out;
            },
          };
          const r = await drive(shape, rtt, true);
          expect(r.over).toBeLessThanOrEqual(0);
        },
      ),
      { numRuns: Number(process.env.REAL_CLIENTS_RUNS ?? 40) },
    );
  }, 30_000);
});

describe("property: many requests at once, a lease call in flight, refusals racing its return", () => {
  it("one isolate: no refusal answered while it holds a unit, and no window of answer times over N", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          rtt: fc.constantFrom(0, 4, 20, 80),
          limit: fc.integer({ min: 1, max: 40 }),
          // Waves of requests sent at once, a gap apart: some gaps inside a round trip, some past the window.
          waves: fc.array(fc.record({ n: fc.integer({ min: 1, max: 60 }), gap: fc.nat(1500) }), {
            minLength: 1,
            maxLength: 5,
          }),
        }),
        async ({ rtt, limit, waves }) => {
          const shape: Shape = {
            limits: [{ limit, window: 1000 }],
            run: async (send) => {
              const pending: Promise<Sent[]>[] = [];
              for (const w of waves) {
                pending.push(atOnce(send, w.n));
                await sleep(w.gap);
              }
              return (await Promise.all(pending)).flat();
            },
          };
          const on = await drive(shape, rtt, true);
          const off = await drive(shape, rtt, false);
          expect(on.over).toBeLessThanOrEqual(0);
          expect(on.heldAtRefusal).toBe(0);
          expect(on.refusedWithUnit).toBe(0);
          // Not "as many as leases off": a settlement re-dates a lease's used units to the last of their uses
          // (docs/design.md, "Settled leases"), so a unit used early in a lease may count a little longer than its own
          // use would; the named shapes above bound what that costs.
          expect(off.over).toBeLessThanOrEqual(0);
        },
      ),
      { numRuns: Number(process.env.REAL_CLIENTS_RUNS ?? 60) },
    );
  });
});
