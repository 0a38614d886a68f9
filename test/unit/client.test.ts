// The client in Node, against an in-memory object built on the real core (KeyLog) and one clock the test
// moves for both: leases spent here and given back, the deny cache, refunds, peek, what shadow mode and the
// failure mode make of a decision, and the one retry.
import { describe, expect, it } from "vitest";
import { type Background, LimiterClient, type LimiterNamespace } from "../../src/client/index.ts";
import { type LimiterConfig, type Plan, parseLimiterConfig } from "../../src/config.ts";
import { type Ask, type Decision, KeyLog, type LimitSpec } from "../../src/core/index.ts";

const T0 = 1_800_000_000_000;

/** The object's behaviour for one key, in memory: the real core's decisions at the shared clock. */
class Store {
  readonly logs = new Map<string, KeyLog>();
  readonly calls: { name: string; method: string; ask?: Ask; units?: number }[] = [];
  /** Makes the next calls fail: an Error with these flags, or a promise that never settles. */
  fail: { retryable?: boolean; overloaded?: boolean } | "hang" | null = null;
  failures = 0;

  constructor(readonly now: () => number) {}

  log(name: string, limits: readonly LimitSpec[]): KeyLog {
    let log = this.logs.get(name);
    if (!log) {
      log = new KeyLog(limits);
      this.logs.set(name, log);
    }
    return log;
  }

  async #maybeFail(): Promise<void> {
    if (this.fail === "hang") return new Promise(() => {});
    if (this.fail && this.failures-- > 0) throw Object.assign(new Error("object failed"), this.fail);
  }

  namespace(): LimiterNamespace {
    const stub = (name: string) => ({
      take: async (limits: readonly LimitSpec[], ask: Ask): Promise<Decision> => {
        this.calls.push({ name, method: "take", ask });
        await this.#maybeFail();
        return this.log(name, limits).take(this.now(), ask).decision;
      },
      giveBack: async (limits: readonly LimitSpec[], recordedAt: readonly number[], units: number) => {
        this.calls.push({ name, method: "giveBack", units });
        return this.log(name, limits).giveBack(recordedAt, units).length;
      },
      peek: async (limits: readonly LimitSpec[], cost: number): Promise<Decision> => {
        this.calls.push({ name, method: "peek" });
        await this.#maybeFail();
        return this.log(name, limits).check(this.now(), cost);
      },
    });
    return { getByName: stub } as unknown as LimiterNamespace;
  }

  count(method: string): number {
    return this.calls.filter((c) => c.method === method).length;
  }
}

function setup(settings: Record<string, unknown> = {}) {
  let now = T0;
  const clock = () => now;
  const config = parseLimiterConfig({ limits: [{ limit: 100, window: "1m" }], ...settings }, "test") as LimiterConfig;
  const client = new LimiterClient(config, { clock });
  const store = new Store(clock);
  const ns = store.namespace();
  const pending: Promise<unknown>[] = [];
  const bg: Background = { waitUntil: (p) => void pending.push(p) };
  const plan = config.defaultPlan as Plan;
  return {
    client,
    store,
    ns,
    plan,
    bg,
    advance: (ms: number) => {
      now += ms;
    },
    settle: async () => {
      while (pending.length > 0) await pending.shift();
    },
    limit: (name = "key:a", cost = 1) => client.limit(ns, name, plan, cost, bg),
  };
}

describe("LimiterClient.limit", () => {
  it("grants from the object, then from a lease once the key is busy here: one call for many grants", async () => {
    const t = setup();
    const reasons: string[] = [];
    for (let i = 0; i < 60; i++) {
      const r = await t.limit();
      reasons.push(r.reason);
      await t.settle();
    }
    expect(reasons.slice(0, 2)).toEqual(["granted", "granted"]);
    expect(reasons.filter((r) => r === "leased").length).toBeGreaterThan(40);
    expect(t.store.count("take")).toBeLessThan(15);
    // Never more than the limit, counting what is leased here as used.
    const peek = await t.client.peek(t.ns, "key:a", t.plan);
    expect(peek.limits[0]?.remaining).toBe(100 - 60);
  });

  it("gives back exactly what an expired lease did not use, and asks the object again", async () => {
    const t = setup();
    for (let i = 0; i < 5; i++) {
      await t.limit();
      await t.settle();
    }
    const held = t.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    expect(held).toBeGreaterThan(0);
    t.advance(1000);
    const r = await t.limit();
    await t.settle();
    expect(r.reason).toBe("granted");
    expect(t.store.calls.filter((c) => c.method === "giveBack").map((c) => c.units)).toEqual([held]);
    expect((await t.client.peek(t.ns, "key:a", t.plan)).limits[0]?.remaining).toBe(100 - 6);
  });

  it("refuses over the limit with the exact wait, then from the deny cache until the recheck", async () => {
    const t = setup({ limits: [{ limit: 2, window: "1m" }], leases: false });
    await t.limit();
    t.advance(10);
    await t.limit();
    t.advance(10);
    const cached = await t.limit();
    expect(cached).toMatchObject({ allowed: false, reason: "cached_denial", retryAfterMs: 60_000 - 20 });
    expect(cached.headers.get("Retry-After")).toBe("60");
    expect(t.store.count("take")).toBe(2);
    t.advance(1000);
    const asked = await t.limit();
    expect(asked).toMatchObject({ reason: "over_limit", retryAfterMs: 60_000 - 1020 });
    expect(asked.limits[0]).toMatchObject({ remaining: 0, exceeded: true });
    expect(t.store.count("take")).toBe(3);
  });

  it("a cost above a limit never passes and asks nothing; an unlimited plan asks nothing", async () => {
    const t = setup({ limits: [{ limit: 5, window: "1s" }] });
    const never = await t.limit("key:a", 6);
    expect(never).toMatchObject({ allowed: false, reason: "too_costly", retryAfterMs: Number.POSITIVE_INFINITY });
    expect(never.headers.has("Retry-After")).toBe(false);
    const free = await t.client.limit(t.ns, "key:b", { ...t.plan, limits: null }, 1);
    expect(free).toMatchObject({ allowed: true, reason: "unlimited", limits: [] });
    expect(t.store.calls).toEqual([]);
    await expect(t.limit("key:a", 0)).rejects.toThrow(RangeError);
  });

  it("shadow mode lets a refused request through, saying why, without Retry-After", async () => {
    const t = setup({ limits: [{ limit: 1, window: "1m" }], shadow: true, leases: false });
    await t.limit();
    const r = await t.limit();
    expect(r).toMatchObject({ allowed: true, reason: "shadow", retryAfterMs: 60_000 });
    expect(r.limits[0]?.exceeded).toBe(true);
    expect(r.headers.has("Retry-After")).toBe(false);
    expect(r.headers.get("RateLimit")).toBe('"per-minute";r=0;t=60');
  });

  it("the failure mode: closed refuses with a 1 s wait, open allows; neither shows rate-limit fields", async () => {
    for (const mode of ["closed", "open"] as const) {
      const t = setup({ failure_mode: mode, leases: false });
      t.store.fail = {};
      t.store.failures = 1;
      const r = await t.limit();
      expect(r).toMatchObject({ allowed: mode === "open", reason: "limiter_error" });
      expect(r.retryAfterMs).toBe(mode === "open" ? 0 : 1000);
      expect(r.headers.has("RateLimit-Policy")).toBe(false);
      expect(r.headers.get("Retry-After")).toBe(mode === "open" ? null : "1");
    }
    const slow = setup({ object_timeout: "5ms", leases: false });
    slow.store.fail = "hang";
    expect((await slow.limit()).reason).toBe("limiter_timeout");
  });

  it("retries a retryable error once, never an overload", async () => {
    const t = setup({ leases: false });
    t.store.fail = { retryable: true };
    t.store.failures = 1;
    expect((await t.limit()).reason).toBe("granted");
    expect(t.store.count("take")).toBe(2);
    const o = setup({ leases: false });
    o.store.fail = { retryable: true, overloaded: true };
    o.store.failures = 5;
    expect((await o.limit()).reason).toBe("limiter_error");
    expect(o.store.count("take")).toBe(1);
  });
});

describe("LimiterClient.refund", () => {
  it("gives a granted request's units back where they were recorded, once", async () => {
    const t = setup({ leases: false });
    const r = await t.limit("key:a", 3);
    expect(await t.client.refund(t.ns, r)).toBe(true);
    expect(await t.client.refund(t.ns, r)).toBe(false);
    expect((await t.client.peek(t.ns, "key:a", t.plan)).limits[0]?.remaining).toBe(100);
  });

  it("a leased grant goes back to its lease while it lasts (no call), else to the object", async () => {
    const t = setup();
    let leased = null;
    for (let i = 0; i < 20 && !leased; i++) {
      const r = await t.limit();
      await t.settle();
      if (r.reason === "leased") leased = r;
    }
    expect(leased).not.toBeNull();
    const entry = t.client.leases.get("key:a");
    const before = entry?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    const gives = t.store.count("giveBack");
    expect(await t.client.refund(t.ns, leased as NonNullable<typeof leased>)).toBe(true);
    expect(entry?.held.reduce((n, h) => n + h.left, 0)).toBe(before + 1);
    expect(t.store.count("giveBack")).toBe(gives);
    // Once the lease has expired, a refund goes to the object.
    let late = null;
    for (let i = 0; i < 20 && !late; i++) {
      const r = await t.limit();
      await t.settle();
      if (r.reason === "leased") late = r;
    }
    t.advance(1000);
    expect(await t.client.refund(t.ns, late as NonNullable<typeof late>)).toBe(true);
    expect(t.store.count("giveBack")).toBe(gives + 1);
  });

  it("a refusal has nothing to give back", async () => {
    const t = setup({ limits: [{ limit: 1, window: "1m" }], leases: false });
    await t.limit();
    expect(await t.client.refund(t.ns, await t.limit())).toBe(false);
  });
});

describe("LimiterClient.peek", () => {
  it("consumes nothing, counts units held here as remaining, and says when a refused cost would pass", async () => {
    const t = setup({ limits: [{ limit: 3, window: "1m" }], leases: false });
    expect(await t.client.peek(t.ns, "key:a", t.plan)).toMatchObject({ allowed: true, reason: "peek" });
    await t.limit("key:a", 3);
    t.advance(100);
    const full = await t.client.peek(t.ns, "key:a", t.plan);
    expect(full).toMatchObject({ allowed: false, reason: "over_limit", retryAfterMs: 60_000 - 100 });
    expect((await t.client.peek(t.ns, "key:a", t.plan, 4)).reason).toBe("too_costly");
    expect(t.store.count("take")).toBe(1);
  });
});

describe("LimiterClient.forget", () => {
  it("drops the key's leases (giving their units back) and its cached denial", async () => {
    const t = setup();
    for (let i = 0; i < 5; i++) {
      await t.limit();
      await t.settle();
    }
    const held = t.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    expect(held).toBeGreaterThan(0);
    t.client.forget(t.ns, "key:a", t.bg);
    await t.settle();
    expect(t.client.leases.get("key:a")).toBeUndefined();
    expect(t.store.calls.filter((c) => c.method === "giveBack").map((c) => c.units)).toEqual([held]);
  });
});
