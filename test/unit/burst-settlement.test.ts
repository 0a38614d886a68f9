// A burst that overtakes its isolate's settlement (src/client/acquire.ts, `#roomAfterSettling`; docs/design.md, "What
// real clients do"): the key's expired lease is settled by the burst's first call, and the others, decided at the
// object before it, are refused on the units it frees. Against the in-memory object (test/support/store.ts) on fake
// timers, every object call counted: a refusal decided before the settling call asks once more, and no more units are
// asked for again than that call's answer showed free; none when there was no settling call, when it was decided
// first, when a quota or the credits refused, or when it failed.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LimiterClient, type LimiterNamespace, type RateLimitResult } from "../../src/client/index.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig, Plan } from "../../src/config/types.ts";
import type { Decision } from "../../src/core/index.ts";
import type { TakeAsk } from "../../src/protocol.ts";
import { Store, T0 } from "../support/store.ts";

/** Each call to the object: half a round trip before it decides, half after (ms). */
const HALF_RTT_MS = 10;
const ONE_MINUTE = [{ limit: 20, window: "1m" }];
const bg = { waitUntil: () => {} };
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

beforeEach(() => {
  vi.useFakeTimers({ now: T0, toFake: ["setTimeout", "clearTimeout", "Date"] });
});
afterEach(() => {
  vi.useRealTimers();
});

/** A `take` as the object saw it: what it asked and, once decided, the decision. */
interface Take {
  readonly ask: TakeAsk;
  d?: Decision;
}

/**
 * One key's object with a round trip of 2 × {@link HALF_RTT_MS}, whose first call carrying settlements (the settling
 * call) is held until `release()` — then decided at once — or never answered (`hang`). Calls are not ordered: the
 * burst's others overtake it.
 */
function world(settings: Record<string, unknown> = {}) {
  const clock = () => Date.now();
  const store = new Store(clock);
  const ns = store.namespace();
  const config = parseLimiterConfig({ limits: ONE_MINUTE, ...settings }, "test") as LimiterConfig;
  const client = new LimiterClient(config, { clock });
  const plan = config.defaultPlan as Plan;
  const takes: Take[] = [];
  let release: () => void = () => {};
  const held = new Promise<void>((r) => {
    release = r;
  });
  let hang = false;
  let holding = true;
  const slow = {
    getByName: (name: string) => {
      const stub = ns.getByName(name);
      return {
        ...stub,
        take: async (...args: Parameters<typeof stub.take>): Promise<Decision> => {
          const take: Take = { ask: args[1] };
          takes.push(take);
          if (holding && (take.ask.settle?.length ?? 0) > 0) {
            holding = false;
            if (hang) await new Promise(() => {});
            await held;
            take.d = await stub.take(...args);
            return take.d;
          }
          await sleep(HALF_RTT_MS);
          take.d = await stub.take(...args);
          await sleep(HALF_RTT_MS);
          return take.d;
        },
      };
    },
  } as unknown as LimiterNamespace;
  const limit = (cost = 1) => client.limit({ ns: slow, name: "key:a", plan, cost, bg });
  return {
    /** A request straight to the object: no round trip, nothing held, not counted. */
    direct: () => client.limit({ ns, name: "key:a", plan, cost: 1, bg }),
    store,
    ns,
    client,
    config,
    takes,
    limit,
    release,
    /** The settling call is never answered (its deadline ends it). */
    hang: () => {
      hang = true;
    },
    /** No call is held: the settling call is answered in a round trip, as the others are. */
    unheld: () => {
      holding = false;
    },
    /** The requests' own calls (cost 1) since the `from`th take. */
    asked: (from = 0) => takes.slice(from).filter((t) => t.ask.cost > 0).length,
  };
}

type World = ReturnType<typeof world>;

/**
 * The key as a burst finds it: this isolate's leases from a paced phase (12 requests, 200 ms apart) expired with
 * `unused` units never spent, still counted at the object, and another isolate's requests (leases off) since, until
 * the object refuses.
 */
async function expiredLeaseAtLimit(w: World, other: Record<string, unknown> = {}, paced = 12) {
  for (let i = 0; i < paced; i++) {
    await w.direct();
    await vi.advanceTimersByTimeAsync(200);
  }
  const unused = w.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0) ?? 0;
  await vi.advanceTimersByTimeAsync(31_000); // past the leases' 30 s, within the limit's minute
  const config = parseLimiterConfig({ limits: ONE_MINUTE, leases: false, ...other }, "test") as LimiterConfig;
  const b = new LimiterClient(config, { clock: () => Date.now() });
  const plan = config.defaultPlan as Plan;
  while ((await b.limit({ ns: w.ns, name: "key:a", plan, cost: 1, bg })).allowed);
  return { unused, from: w.takes.length };
}

/** `n` requests of the same burst, sent at once; `done` counts those answered. */
function burst(w: World, n: number) {
  const state = { done: 0 };
  const all = Promise.all(
    Array.from({ length: n }, () =>
      w.limit().then((r) => {
        state.done += 1;
        return r;
      }),
    ),
  );
  return { state, all };
}

const reasons = (rs: readonly RateLimitResult[]) =>
  rs
    .map((r) => r.reason)
    .sort()
    .join(",");

describe("a burst that overtakes its isolate's settlement", () => {
  it("asks once more for the refusals decided before it, within the room its answer showed, and no more", async () => {
    const w = world();
    const { unused, from } = await expiredLeaseAtLimit(w);
    expect(unused).toBe(3);
    const b = burst(w, 6);
    // The settling call is held; the burst's five others are decided and refused, and wait for it.
    await vi.advanceTimersByTimeAsync(100);
    expect(w.asked(from)).toBe(6);
    expect(w.takes.slice(from).filter((t) => t.d?.allowed === false).length).toBe(5);
    expect(b.state.done).toBe(0);
    w.release();
    await vi.advanceTimersByTimeAsync(100);
    const rs = await b.all;
    // Its three units freed, one its own request's: two left, which two of the five refused ask for again.
    const settling = w.takes[from] as Take;
    expect(settling.ask.settle?.reduce((n, s) => n + s.unused, 0)).toBe(3);
    expect(settling.d?.limits[0]?.remaining).toBe(2);
    expect(w.asked(from)).toBe(6 + 2);
    expect(reasons(rs)).toBe("granted,granted,granted,over_limit,over_limit,over_limit");
    // Nothing waits or is asked for after: the key is at its limit, exactly.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(w.asked(from)).toBe(8);
    expect((await w.direct()).allowed).toBe(false);
  });

  it("takes the refusal it asks again for off those reported towards a penalty", async () => {
    const penalty = { penalty: { after: 100, within: "10m", block: "15m", max_block: "1d" } };
    const w = world(penalty);
    const { from } = await expiredLeaseAtLimit(w, penalty);
    const b = burst(w, 2);
    await vi.advanceTimersByTimeAsync(100);
    // While the refused one waits, three more are answered here.
    for (let i = 0; i < 3; i++) expect((await w.direct()).reason).toBe("cached_denial");
    w.release();
    await vi.advanceTimersByTimeAsync(100);
    expect(reasons(await b.all)).toBe("granted,granted");
    // Asked again with the three: the object counted its first refusal, so two are reported.
    expect(w.asked(from)).toBe(3);
    expect(w.takes.at(-1)?.ask).toMatchObject({ cost: 1, refused: 2 });
  });

  it("asks again for no more units than the room: a request costing more than is left asks nothing", async () => {
    const w = world();
    const { from } = await expiredLeaseAtLimit(w);
    const first = w.limit();
    await vi.advanceTimersByTimeAsync(1);
    const big = w.limit(3);
    await vi.advanceTimersByTimeAsync(100);
    expect(w.asked(from)).toBe(2);
    w.release();
    await vi.advanceTimersByTimeAsync(100);
    // The room is 2: the request of 3 is refused without another call.
    expect((await big).reason).toBe("over_limit");
    expect((await first).reason).toBe("granted");
    expect(w.asked(from)).toBe(2);
  });

  it("asks nothing more when the settling call was decided first", async () => {
    const w = world();
    const { from } = await expiredLeaseAtLimit(w);
    w.unheld();
    const b = burst(w, 6);
    await vi.advanceTimersByTimeAsync(200);
    const rs = await b.all;
    // Decided after the settlement, the others were refused on the units it left: one call each.
    expect(w.asked(from)).toBe(6);
    expect(rs.filter((r) => r.allowed).length).toBe(3);
  });

  it("asks nothing more when no call carried a settlement", async () => {
    const w = world();
    // Another isolate fills the key; this one has never leased it.
    const config = parseLimiterConfig({ limits: ONE_MINUTE, leases: false }, "test") as LimiterConfig;
    const b = new LimiterClient(config, { clock: () => Date.now() });
    for (let i = 0; i < 20; i++)
      await b.limit({ ns: w.ns, name: "key:a", plan: config.defaultPlan as Plan, cost: 1, bg });
    const refused = w.limit();
    await vi.advanceTimersByTimeAsync(100);
    expect((await refused).reason).toBe("over_limit");
    expect(w.asked()).toBe(1);
    expect(w.client.leases.get("key:a")?.settling).toBeUndefined();
  });

  it("asks nothing more for a refusal by a quota, and answers it without waiting for the settling call", async () => {
    // A quota of 17 a day beside 20 a minute: the other isolate fills the quota, the minute keeps room.
    const quota = { limits: [...ONE_MINUTE, { limit: 17, period: "day" }] };
    const w = world(quota);
    // Paced 9 times: a key with a quota leases less, and its last lease keeps 2 units unused.
    const { from, unused } = await expiredLeaseAtLimit(w, quota, 9);
    expect(unused).toBe(2);
    const b = burst(w, 4);
    await vi.advanceTimersByTimeAsync(100);
    // The settling call is still held; the three refused by the quota are answered.
    expect(w.asked(from)).toBe(4);
    expect(b.state.done).toBe(3);
    w.release();
    await vi.advanceTimersByTimeAsync(100);
    const rs = await b.all;
    expect(w.asked(from)).toBe(4);
    const refused = w.takes.slice(from).filter((t) => t.d?.allowed === false);
    expect(refused.map((t) => [t.d?.limits[0]?.exceeded, t.d?.quotas?.[0]?.exceeded])).toEqual(
      Array(3).fill([false, true]),
    );
    expect(rs.filter((r) => r.allowed).length).toBe(1);
  });

  it("asks nothing more when the settling call fails: its refusals wait at most until its deadline", async () => {
    const w = world();
    const { from } = await expiredLeaseAtLimit(w);
    w.hang();
    const b = burst(w, 6);
    await vi.advanceTimersByTimeAsync(100);
    expect(w.asked(from)).toBe(6);
    expect(b.state.done).toBe(0);
    // The settling call was sent at the burst's start: its deadline is the object timeout after.
    await vi.advanceTimersByTimeAsync(w.config.objectTimeoutMs - 100);
    expect(b.state.done).toBe(6);
    const rs = await b.all;
    expect(w.asked(from)).toBe(6);
    expect(rs.filter((r) => r.reason === "over_limit").length).toBe(5);
  });
});

describe("a refusal on units this isolate's leases left unspent", () => {
  /**
   * This isolate's leases from a paced phase (3 units unspent: 1 in the first, expiring at `first`, 2 in the second, at
   * `last`), and other isolates' requests (leases off) since, until the key has `free` units left at the object beside
   * the leases'.
   */
  async function unspentLeases(w: World, free: number, settings: Record<string, unknown> = {}) {
    for (let i = 0; i < 12; i++) {
      await w.direct();
      await vi.advanceTimersByTimeAsync(200);
    }
    const held = w.client.leases.get("key:a")?.held ?? [];
    expect(held.map((h) => h.left)).toEqual([1, 2]);
    const config = parseLimiterConfig({ limits: ONE_MINUTE, ...settings, leases: false }, "test") as LimiterConfig;
    const plan = config.defaultPlan as Plan;
    // Each from an isolate of its own: none answers from a deny cache.
    const other = () =>
      new LimiterClient(config, { clock: () => Date.now() }).limit({ ns: w.ns, name: "key:a", plan, cost: 1, bg });
    while ((await other()).limits[0]?.remaining !== free);
    const [first, last] = held.map((h) => h.expiresAt) as [number, number];
    expect(last - first).toBeGreaterThan(200);
    return { first, last, other, from: w.takes.length };
  }

  /** The units the object's takes from the `from`th on were given back. */
  const givenBack = (w: World, from: number) =>
    w.takes.slice(from).map((t) => t.ask.settle?.reduce((n, s) => n + s.unused, 0) ?? 0);

  it("asks once more when a lease expired while the refused call was out, carrying its units back", async () => {
    const w = world();
    w.unheld();
    const { last, from } = await unspentLeases(w, 1);
    // A request of 4, 5 ms before the second lease expires: 2 units here (not enough). Its call gives back the first
    // lease's 1; the object has 2 free: refused. The second lease expires while the call is out.
    await vi.advanceTimersByTimeAsync(last - Date.now() - 5);
    const r = w.limit(4);
    await vi.advanceTimersByTimeAsync(100);
    expect((await r).reason).toBe("granted");
    const asked = w.takes.slice(from);
    expect(asked.map((t) => [t.ask.cost, t.d?.allowed])).toEqual([
      [4, false],
      [4, true],
    ]);
    // The second call carries the second lease's 2 back: with the 2 free, 4; the key is full after.
    expect(givenBack(w, from)).toEqual([1, 2]);
    expect(asked[1]?.d?.limits[0]?.remaining).toBe(0);
  });

  it("asks nothing more when the units coming back and the room left do not cover the cost", async () => {
    const w = world();
    w.unheld();
    const { last, from } = await unspentLeases(w, 1);
    await vi.advanceTimersByTimeAsync(last - Date.now() - 5);
    const r = w.limit(5);
    await vi.advanceTimersByTimeAsync(100);
    // 2 free after the first lease's unit, and 2 coming back: not 5.
    expect((await r).reason).toBe("over_limit");
    expect(w.asked(from)).toBe(1);
  });

  it("a request the deny cache would refuse goes to the object instead, carrying the expired lease's units back", async () => {
    const w = world();
    w.unheld();
    const { first, last, other } = await unspentLeases(w, 0);
    // The first lease expired: a request of 3 (2 units here) gives its unit back, and is refused on the 1 free. The
    // other isolate takes that one.
    await vi.advanceTimersByTimeAsync(Math.max(0, first - Date.now() + 5));
    const from = w.takes.length;
    const three = () => {
      const r = w.limit(3);
      return vi.advanceTimersByTimeAsync(50).then(() => r);
    };
    expect((await three()).reason).toBe("over_limit");
    expect((await other()).allowed).toBe(true);
    // Refused again with none free: the key is in this isolate's deny cache. A request of 1 is served from the second
    // lease, nothing asked; then it expires with 1 unspent.
    expect((await three()).reason).toBe("over_limit");
    expect((await w.limit()).reason).toBe("leased");
    expect(w.asked(from)).toBe(2);
    await vi.advanceTimersByTimeAsync(last - Date.now() + 5);
    // The next is not refused from the cache: its call gives the unit back and it is granted on it.
    const next = w.limit();
    await vi.advanceTimersByTimeAsync(50);
    expect((await next).reason).toBe("granted");
    expect(w.asked(from)).toBe(3);
    expect(givenBack(w, from)).toEqual([1, 0, 1]);
    // Nothing more comes back: the next is refused from the cache, as before.
    const again = w.limit();
    await vi.advanceTimersByTimeAsync(50);
    expect((await again).reason).toBe("cached_denial");
    expect(w.asked(from)).toBe(3);
  });
  it("counts the room by the fullest limit: units coming back that cover the cost under a roomier one ask nothing", async () => {
    // 20 a minute and 40 an hour: after the first lease's unit comes back, 2 left in the minute, 22 in the hour.
    const limits = { limits: [...ONE_MINUTE, { limit: 40, window: "1h" }] };
    const w = world(limits);
    w.unheld();
    const { last, from } = await unspentLeases(w, 1, limits);
    await vi.advanceTimersByTimeAsync(last - Date.now() - 5);
    const r = w.limit(5);
    await vi.advanceTimersByTimeAsync(100);
    expect((await r).reason).toBe("over_limit");
    expect(w.takes[from]?.d?.limits.map((l) => l.remaining)).toEqual([2, 22]);
    // The second lease's 2 coming back make 4 in the minute: not 5, though the hour would have room.
    expect(w.asked(from)).toBe(1);
  });

  it("takes the refusal it asks again for off the refusals it next reports towards a penalty", async () => {
    const penalty = { penalty: { after: 100, within: "10m", block: "15m", max_block: "1d" } };
    const w = world(penalty);
    w.unheld();
    const { last, from } = await unspentLeases(w, 1, penalty);
    await vi.advanceTimersByTimeAsync(last - Date.now() - 5);
    const r = w.limit(4);
    await vi.advanceTimersByTimeAsync(100);
    expect((await r).reason).toBe("granted");
    // The key is full: three answered from the deny cache; the next call reports them less the refusal the object
    // counted and this isolate then granted.
    for (let i = 0; i < 3; i++) expect((await w.limit()).reason).toBe("cached_denial");
    await vi.advanceTimersByTimeAsync(1_100);
    const next = w.limit();
    await vi.advanceTimersByTimeAsync(50);
    await next;
    expect(w.asked(from)).toBe(3);
    expect(w.takes.at(-1)?.ask).toMatchObject({ cost: 1, refused: 2 });
  });

  it("an operator's block drops the leases at its answer: nothing left unspent, later requests refused from the cache", async () => {
    const w = world();
    w.unheld();
    const { first, last, other } = await unspentLeases(w, 0);
    await vi.advanceTimersByTimeAsync(Math.max(0, first - Date.now() + 5));
    w.store.blocks.set("key:a", Date.now() + 60_000);
    // A request of 3 (2 units here) goes to the object, which refuses it under the block.
    const refused = w.limit(3);
    await vi.advanceTimersByTimeAsync(50);
    expect((await refused).reason).toBe("blocked");
    // The block's answer dropped the second lease here, its 2 units settled at once: none left to go back later.
    expect(w.client.leases.get("key:a")?.held ?? []).toEqual([]);
    await vi.advanceTimersByTimeAsync(last - Date.now() + 5);
    const from = w.takes.length;
    expect((await w.limit()).reason).toBe("blocked");
    expect(w.takes.length).toBe(from);
    expect((await other()).allowed).toBe(false);
  });
});
