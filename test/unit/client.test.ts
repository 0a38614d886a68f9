// The client in Node, against an in-memory object built on the real core (KeyLog) and one clock the test
// moves for both: leases spent here and given back, the deny cache, refunds, peek, what shadow mode and the
// failure mode make of a decision, and the one retry.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LimiterClient, type LimiterNamespace } from "../../src/client/index.ts";
import type { HeldLease, KeyLeases, LeaseCall } from "../../src/client/leases.ts";
import { MAX_SENDS } from "../../src/client/policy.ts";
import { type GrantRecord, headersOf } from "../../src/client/result.ts";
import { grantOf, setup, T0 } from "../support/store.ts";

describe("LimiterClient.limit", () => {
  it("grants from the object, then from a lease once the key is busy here: one call for many grants", async () => {
    // An ordinary key: 2 requests a second, far below 1000 a minute.
    const t = setup({ limits: [{ limit: 1000, window: "1m" }] });
    const reasons: string[] = [];
    let rampCalls = 0;
    for (let i = 0; i < 60; i++) {
      if (i === 30) rampCalls = t.store.count("take");
      const r = await t.limit();
      reasons.push(r.reason);
      await t.settle();
      t.advance(500);
    }
    expect(reasons.slice(0, 2)).toEqual(["granted", "granted"]);
    expect(reasons.filter((r) => r === "leased").length).toBeGreaterThan(40);
    // Leases grow with the time the key has been watched; after 15 s, one call serves about 8 grants.
    expect(rampCalls).toBeLessThan(15);
    expect(t.store.count("take") - rampCalls).toBeLessThanOrEqual(4);
    // Never more than the limit, counting what is leased here as used.
    const peek = await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    expect(peek.limits[0]?.remaining).toBe(1000 - 60);
    // Another isolate's first request for the key asks for no lease: it may see one of the key's requests now and
    // then. Its second soon after asks the object to size one from the key's log (test/unit/log.test.ts): none here,
    // since the units this isolate spent from its leases are not settled yet (far below the limit, a background
    // refill re-dates nothing), and the log's rate leaves out units ahead of now.
    const other = new LimiterClient(t.client.config, { clock: () => t.client.now() });
    const first = await other.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, bg: t.bg });
    expect(first.reason).toBe("granted");
    expect(t.store.calls.at(-1)?.ask?.leaseUnits).toBe(0);
    expect(other.leases.get("key:a")?.held).toEqual([]);
    t.advance(100);
    const second = await other.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, bg: t.bg });
    expect(second.reason).toBe("granted");
    expect(t.store.calls.at(-1)?.ask).toMatchObject({ leaseFromLog: true, leaseUnits: 1000 });
    expect(other.leases.get("key:a")?.held).toEqual([]);
  });

  it("gives back what an expired lease did not use with the key's next call, which then reports it exactly", async () => {
    const t = setup({ limits: [{ limit: 1000, window: "1m" }] });
    for (let i = 0; i < 10; i++) {
      await t.limit();
      await t.settle();
      t.advance(500);
    }
    const held = t.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    expect(held).toBeGreaterThan(0);
    t.advance(40_000); // a pause longer than any lease (30 s here)
    const r = await t.limit();
    await t.settle();
    expect(r.reason).toBe("granted");
    const last = t.store.calls.at(-1);
    expect(last?.method).toBe("take");
    expect(last?.ask?.settle?.reduce((n, u) => n + u.unused, 0)).toBe(held);
    expect(t.store.count("refund")).toBe(0);
    // RateLimit right after the pause: everything granted and nothing else counts (units this isolate holds
    // are what it may still grant).
    expect(r.limits[0]?.remaining).toBe(1000 - 11);
  });

  it("refuses over the limit with the exact wait, then from the deny cache until the recheck", async () => {
    const t = setup({ limits: [{ limit: 2, window: "1m" }], leases: false });
    await t.limit();
    t.advance(10);
    await t.limit();
    t.advance(10);
    const cached = await t.limit();
    expect(cached).toMatchObject({ allowed: false, reason: "cached_denial", retryAfterMs: 60_000 - 20 });
    expect(headersOf(cached, "draft-11").get("Retry-After")).toBe("60");
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
    expect(headersOf(never, "draft-11").has("Retry-After")).toBe(false);
    const free = await t.client.limit({ ns: t.ns, name: "key:b", plan: { ...t.plan, limits: null }, cost: 1 });
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
    expect(headersOf(r, "draft-11").has("Retry-After")).toBe(false);
    expect(headersOf(r, "draft-11").get("RateLimit")).toBe('"per-minute";r=0;t=60');
  });

  it("the failure mode: closed refuses with a 1 s wait, open allows; neither shows rate-limit fields", async () => {
    for (const mode of ["closed", "open"] as const) {
      const t = setup({ failure_mode: mode, leases: false });
      // Every send fails (a call is sent again after an ambiguous failure: policy.ts).
      t.store.fail = {};
      t.store.failures = MAX_SENDS;
      const r = await t.limit();
      expect(r).toMatchObject({ allowed: mode === "open", reason: "limiter_error" });
      expect(r.retryAfterMs).toBe(mode === "open" ? 0 : 1000);
      expect(headersOf(r, "draft-11").has("RateLimit-Policy")).toBe(false);
      expect(headersOf(r, "draft-11").get("Retry-After")).toBe(mode === "open" ? null : "1");
    }
    const slow = setup({ object_timeout: "5ms", leases: false });
    slow.store.fail = "hang";
    expect((await slow.limit()).reason).toBe("limiter_timeout");
  });

  it("sends a call again after an ambiguous failure, at most MAX_SENDS times; never after an overload or the object's refusal", async () => {
    const t = setup({ leases: false });
    t.store.fail = {};
    t.store.failures = MAX_SENDS - 1;
    expect((await t.limit()).reason).toBe("granted");
    expect(t.store.count("take")).toBe(MAX_SENDS);
    const all = setup({ leases: false });
    all.store.fail = { retryable: true };
    all.store.failures = MAX_SENDS;
    expect((await all.limit()).reason).toBe("limiter_error");
    expect(all.store.count("take")).toBe(MAX_SENDS);
    // Every send carried the same call id: the object applies it once.
    expect(new Set(all.store.calls.map((c) => c.ask?.call)).size).toBe(1);
    for (const flags of [{ retryable: true, overloaded: true }, { remote: true }]) {
      const o = setup({ leases: false });
      o.store.fail = flags;
      o.store.failures = 5;
      expect((await o.limit()).reason).toBe("limiter_error");
      expect(o.store.count("take")).toBe(1);
    }
  });

  it("a call whose answer was lost is sent again and answered as the first time: applied once", async () => {
    const t = setup({ limits: [{ limit: 3, window: "1m" }], leases: false });
    t.store.lose = { retryable: true };
    t.store.losses = 1;
    const r = await t.limit();
    expect(r.reason).toBe("granted");
    expect(t.store.count("take")).toBe(2);
    // One unit counted, not two: two more fit, then none.
    expect((await t.limit()).allowed).toBe(true);
    expect((await t.limit()).allowed).toBe(true);
    expect((await t.limit()).allowed).toBe(false);
  });
});

describe("LimiterClient.refund", () => {
  it("gives a granted request's units back where they were recorded, once", async () => {
    const t = setup({ leases: false });
    const r = await t.limit("key:a", 3);
    expect(await t.client.refund(t.ns, grantOf(r))).toBe(true);
    expect(await t.client.refund(t.ns, grantOf(r))).toBe(false);
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).limits[0]?.remaining).toBe(100);
  });

  it("a leased grant goes back to its lease until the lease is settled (no call); a settled one stays counted", async () => {
    const t = setup();
    // Near the limit (45 of 100 left), where leases are settled.
    await t.limit("key:a", 55);
    let leased = null;
    for (let i = 0; i < 20 && !leased; i++) {
      const r = await t.limit();
      await t.settle();
      if (r.reason === "leased") leased = r;
    }
    expect(leased).not.toBeNull();
    const entry = t.client.leases.get("key:a");
    const before = entry?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    const gives = t.store.count("refund");
    expect(await t.client.refund(t.ns, grantOf(leased as NonNullable<typeof leased>))).toBe(true);
    expect(entry?.held.reduce((n, h) => n + h.left, 0)).toBe(before + 1);
    expect(t.store.count("refund")).toBe(gives);
    // Once the lease has expired, unsettled: the unit is given back with the lease's settlement.
    let late = null;
    for (let i = 0; i < 20 && !late; i++) {
      const r = await t.limit();
      await t.settle();
      if (r.reason === "leased") late = r;
    }
    const lease = entry?.held.find((h) => h.used > 0) as HeldLease;
    const [left, used] = [lease.left, lease.used];
    t.advance(60_000);
    expect(await t.client.refund(t.ns, grantOf(late as NonNullable<typeof late>))).toBe(true);
    await t.limit();
    const settled = t.store.calls.at(-1)?.ask?.settle?.find((x) => x.recordedAt === lease.recordedAt);
    expect([settled?.used, settled?.unused]).toEqual([used - 1, left + 1]);
    // Settled, its uses re-dated to when they happened: spent again later, a unit given back there would be used
    // after its record. It stays counted. (Near the limit again: the minute above emptied the window.)
    await t.limit("key:a", 55);
    let spent = null;
    for (let i = 0; i < 20 && !spent; i++) {
      const r = await t.limit();
      await t.settle();
      if (r.reason === "leased") spent = r;
    }
    const from = entry?.held.find((h) => h.used > 0) as HeldLease;
    for (const h of entry?.held ?? []) h.left = 0; // the next request asks the object, settling `from`
    expect((await t.limit()).reason).toBe("granted");
    const take = t.store.calls.filter((c) => c.method === "take").at(-1);
    expect(take?.ask?.settle?.some((x) => x.recordedAt === from.recordedAt && x.used > 0)).toBe(true);
    expect(await t.client.refund(t.ns, grantOf(spent as NonNullable<typeof spent>))).toBe(false);
    expect(t.store.count("refund")).toBe(gives);
  });

  it("a refusal has no handle; a grant not as the limiter gave it is a TypeError", async () => {
    const t = setup({ limits: [{ limit: 1, window: "1m" }], leases: false });
    await t.limit();
    const refused = await t.limit();
    expect(refused.handle).toBeNull();
    expect(
      await t.client.refund(t.ns, { ...(grantOf(await t.limit("key:b")) as GrantRecord), units: 0 }).catch((e) => e),
    ).toBeInstanceOf(TypeError);
  });
});

describe("LimiterClient.peek", () => {
  it("consumes nothing, counts units held here as remaining, and says when a refused cost would pass", async () => {
    const t = setup({ limits: [{ limit: 3, window: "1m" }], leases: false });
    expect(await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).toMatchObject({
      allowed: true,
      reason: "peek",
    });
    await t.limit("key:a", 3);
    t.advance(100);
    const full = await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    expect(full).toMatchObject({ allowed: false, reason: "over_limit", retryAfterMs: 60_000 - 100 });
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan, cost: 4 })).reason).toBe("too_costly");
    expect(t.store.count("take")).toBe(1);
  });
});

describe("an idle key's units", () => {
  it("go back on their own, on another key's request, once the key has been idle a second and was near a limit", async () => {
    const t = setup({ limits: [{ limit: 400, window: "1m" }] });
    // Near the limit: 200 of 400 used, then a lease while the key is watched.
    await t.limit("key:a", 200);
    for (let i = 0; i < 12; i++) {
      await t.limit();
      await t.settle();
      t.advance(200);
    }
    const entry = t.client.leases.get("key:a");
    // Units left in its leases, valid or expired already (both go back).
    const held = [...(entry?.held ?? []), ...(entry?.expired ?? [])].reduce((n, h) => n + h.left, 0);
    expect(held).toBeGreaterThan(0);
    // The lease expires unspent; another key's request a second later sends its units back.
    t.advance(60_000);
    await t.limit("key:b");
    await t.settle();
    // One settlement call, giving back exactly what the key's leases held.
    const back = t.store.calls.filter((c) => c.method === "settle" && c.name === "key:a");
    expect(back.length).toBe(1);
    expect(back[0]?.settle?.reduce((n, x) => n + x.unused, 0)).toBe(held);
    expect(entry?.expired).toEqual([]);
  });

  it("far from every limit, wait for the key's own next call: a call of their own would cost a call for nothing", async () => {
    const t = setup({ limits: [{ limit: 1000, window: "1m" }] });
    for (let i = 0; i < 12; i++) {
      await t.limit();
      await t.settle();
      t.advance(200);
    }
    expect(t.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0)).toBeGreaterThan(0);
    t.advance(60_000);
    await t.limit("key:b");
    await t.settle();
    expect(t.store.count("settle")).toBe(0);
    // Given back with the key's next call, before its decision.
    const unused = t.client.leases.get("key:a")?.expired.reduce((n, h) => n + h.left, 0) ?? 0;
    expect(unused).toBeGreaterThan(0);
    await t.limit();
    const ask = t.store.calls.filter((c) => c.method === "take" && c.name === "key:a").at(-1)?.ask;
    expect(ask?.settle?.reduce((n, x) => n + x.unused, 0)).toBe(unused);
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
    const back = t.store.calls.filter((c) => c.method === "settle");
    expect(back.map((c) => c.settle?.reduce((n, x) => n + x.unused, 0))).toEqual([held]);
  });
});

describe("operators' changes seen by the client", () => {
  it("a block: refused with the block's wait and no limit blamed, then from the deny cache; leases dropped", async () => {
    const t = setup();
    for (let i = 0; i < 5; i++) {
      await t.limit();
      await t.settle();
    }
    const held = t.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    expect(held).toBeGreaterThan(0);
    t.store.blocks.set("key:a", T0 + 90_000);
    // Spend what is held; the next request asks the object and sees the block.
    let r = await t.limit();
    while (r.reason === "leased") r = await t.limit();
    await t.settle();
    expect(r).toMatchObject({ allowed: false, reason: "blocked", retryAfterMs: 90_000 });
    expect(r.limits.map((l) => [l.remaining, l.exceeded])).toEqual([[0, false]]);
    const takes = t.store.count("take");
    t.advance(10);
    const cached = await t.limit();
    expect(cached).toMatchObject({ allowed: false, reason: "blocked", retryAfterMs: 90_000 - 10 });
    expect(t.store.count("take")).toBe(takes);
  });

  it("an override: the result and headers show its limits; leases granted under the plan's are given back", async () => {
    const t = setup();
    for (let i = 0; i < 5; i++) {
      await t.limit();
      await t.settle();
    }
    t.store.overrides.set("key:a", [{ limit: 7, windowMs: 10_000, tickMs: 1, name: "vip" }]);
    let r = await t.limit();
    while (r.reason === "leased") r = await t.limit();
    await t.settle();
    expect(r.reason).toBe("granted");
    expect(r.limits.map((l) => [l.name, l.limit, l.windowMs])).toEqual([["vip", 7, 10_000]]);
    expect(headersOf(r, "draft-11").get("RateLimit-Policy")).toBe('"vip";q=7;w=10');
    // What this isolate still holds was granted under the override: nothing of the plan's is spent any more.
    const held = t.client.leases.get("key:a")?.held ?? [];
    expect(held.every((h) => h.applied?.[0]?.name === "vip")).toBe(true);
  });
});

describe("the deny cache's detail", () => {
  it("knows which limit refuses and learns the exact wait of each other cost", async () => {
    const t = setup({
      limits: [
        { limit: 5, window: "1s" },
        { limit: 50, window: "1m" },
      ],
      leases: false,
    });
    await t.limit("key:a", 5);
    t.advance(100);
    // A cost the cache has no wait for yet: the object answers, and the cache learns it.
    expect(await t.limit("key:a", 2)).toMatchObject({ reason: "over_limit", retryAfterMs: 900 });
    t.advance(10);
    const first = await t.limit("key:a", 2);
    expect(first).toMatchObject({ reason: "cached_denial", retryAfterMs: 890 });
    // The per-second limit refuses; the per-minute one is not known here.
    expect(first.limits.map((l) => [l.name, l.remaining, l.resetMs, l.exceeded])).toEqual([
      ["per-second", 0, 890, true],
      ["per-minute", null, null, false],
    ]);
    expect(headersOf(first, "draft-11").get("RateLimit")).toBe('"per-second";r=0;t=1');
  });
});

describe("RateLimit's remaining with one isolate", () => {
  it("never says more than would be granted, and is exact for the first request after any pause", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            gap: fc.oneof(fc.nat(300), fc.integer({ min: 30_000, max: 90_000 })),
            cost: fc.integer({ min: 1, max: 3 }),
          }),
          {
            minLength: 1,
            maxLength: 60,
          },
        ),
        async (steps) => {
          const t = setup({ limits: [{ limit: 200, window: "1m" }] });
          for (const { gap, cost } of steps) {
            t.advance(gap);
            const r = await t.limit("key:a", cost);
            await t.settle();
            const now = t.client.now();
            const entry = t.client.leases.get("key:a");
            const held = entry ? t.client.leases.holding(entry, now, null) : 0;
            const truth = (t.store.log("key:a", t.plan.limits ?? []).peek(now).limits[0]?.remaining ?? 0) + held;
            const shown = r.limits[0]?.remaining ?? 0;
            expect(shown).toBeLessThanOrEqual(truth);
            // A pause longer than any lease (30 s at most): the request asks the object, settling what was held.
            if (gap >= 30_000 && r.allowed) expect(shown).toBe(truth);
          }
        },
      ),
      { numRuns: 100 },
    );
  });
});

describe("RateLimit's remaining after a pause", () => {
  it("three bursts of 40 a 1.3 s pause apart: every response's r is what is left (the first after a pause too)", async () => {
    // Within an hour nothing leaves the window: what is left is the limit less what was granted.
    const t = setup({ limits: [{ limit: 200, window: "1h" }] });
    let granted = 0;
    const wrong: string[] = [];
    for (let burst = 0; burst < 3; burst++) {
      for (let i = 0; i < 40; i++) {
        const r = await t.limit();
        await t.settle();
        if (r.allowed) granted++;
        const shown = r.limits[0]?.remaining;
        if (shown !== 200 - granted) wrong.push(`burst ${burst} #${i}: r=${shown}, ${200 - granted} left`);
        t.advance(2);
      }
      t.advance(1300);
    }
    expect(granted).toBe(120);
    expect(wrong).toEqual([]);
  });

  it("property: with one isolate, r is exact on every granted response, whatever the pauses and costs", async () => {
    await fc.assert(
      fc.asyncProperty(
        // Bursts of requests a few ms apart, each after a pause.
        fc.array(
          fc.record({
            pause: fc.oneof(fc.integer({ min: 300, max: 5_000 }), fc.integer({ min: 20_000, max: 40_000 })),
            requests: fc.integer({ min: 1, max: 40 }),
            gap: fc.integer({ min: 1, max: 20 }),
            cost: fc.integer({ min: 1, max: 3 }),
          }),
          { minLength: 1, maxLength: 6 },
        ),
        async (bursts) => {
          const t = setup({ limits: [{ limit: 150, window: "1h" }] });
          let granted = 0;
          for (const { pause, requests, gap, cost } of bursts) {
            t.advance(pause);
            for (let i = 0; i < requests; i++) {
              const r = await t.limit("key:a", cost);
              await t.settle();
              if (r.allowed) granted += cost;
              if (r.allowed) expect(r.limits[0]?.remaining).toBe(150 - granted);
              t.advance(gap);
            }
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe("what a result says", () => {
  it("a cost above one limit blames only that limit", async () => {
    const t = setup({
      limits: [
        { limit: 5, window: "1s" },
        { limit: 15, window: "1m" },
      ],
    });
    const r = await t.limit("key:a", 6);
    expect(r.limits.map((l) => [l.name, l.exceeded])).toEqual([
      ["per-second", true],
      ["per-minute", false],
    ]);
    expect(headersOf(r, "draft-11").get("RateLimit-Policy")).toBe('"per-second";q=5;w=1, "per-minute";q=15;w=60');
  });

  it("a leased grant: the object's remaining plus what the lease still holds, resets counted down on this clock", async () => {
    const t = setup();
    let leased = null;
    for (let i = 0; i < 20 && !leased; i++) {
      const r = await t.limit();
      await t.settle();
      if (r.reason === "leased") leased = r;
    }
    expect(leased).not.toBeNull();
    const held = t.client.leases.get("key:a")?.held[0];
    expect(held).toBeDefined();
    t.advance(100);
    const next = await t.limit();
    expect(next.reason).toBe("leased");
    const h = t.client.leases.get("key:a")?.held.find((x) => x.limits === held?.limits) ?? held;
    expect(next.limits[0]?.remaining).toBe((h?.limits[0]?.remaining ?? 0) + (h?.left ?? 0));
    expect(next.limits[0]?.resetMs).toBe(
      Math.max(0, (h?.limits[0]?.resetMs ?? 0) - (t.client.now() - (h?.sentAt ?? 0))),
    );
  });

  it("peek counts units held here, and an expired lease's unused units until the key's next call gives them back", async () => {
    const t = setup();
    for (let i = 0; i < 5; i++) {
      await t.limit();
      await t.settle();
    }
    const held = t.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0) ?? 0;
    expect(held).toBeGreaterThan(0);
    const atObject = 100 - 5 - held;
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).limits[0]?.remaining).toBe(atObject + held);
    t.advance(11_000); // expired, not given back yet (no request has seen it): the key's next call gives them back
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).limits[0]?.remaining).toBe(atObject + held);
    // Far from every limit, an idle key's expired units wait for its own next call (no call for them): still counted.
    await t.client.limit({ ns: t.ns, name: "key:b", plan: t.plan, cost: 1, bg: t.bg });
    await t.settle();
    expect(t.store.count("settle")).toBe(0);
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).limits[0]?.remaining).toBe(atObject + held);
  });
});

/**
 * A namespace whose `take`s that `hold` picks (by their number, from 1; the first by default) wait for the next
 * `release()`; `takes` counts every `take` that reached it.
 */
function gated(ns: LimiterNamespace, hold: (n: number) => boolean = (n) => n === 1) {
  let open: () => void = () => {};
  let opened = new Promise<void>((r) => (open = r));
  const gate = {
    takes: 0,
    release: () => {
      const now = open;
      opened = new Promise<void>((r) => (open = r));
      now();
    },
  };
  const slow = {
    getByName: (name: string) => {
      const stub = ns.getByName(name);
      return {
        ...stub,
        take: async (...args: Parameters<typeof stub.take>) => {
          gate.takes += 1;
          if (hold(gate.takes)) await opened;
          return stub.take(...args);
        },
      };
    },
  } as unknown as LimiterNamespace;
  return { slow, gate };
}

/** Lets every promise callback and zero-delay timer queued so far run. */
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setTimeout(r, 0));
};

describe("no waiting behind other requests", () => {
  /** A key busy here with its held units spent, so that its next request asks the object for a lease. */
  async function busyKey(settings: Record<string, unknown> = {}) {
    const t = setup(settings);
    for (let i = 0; i < 3; i++) {
      await t.limit();
      await t.settle();
    }
    for (const h of t.client.leases.get("key:a")?.held ?? []) h.left = 0;
    return t;
  }

  it("requests wait for the key's lease call out while the units it asked for cover them, then spend from it", async () => {
    const t = await busyKey();
    // Their own timers: the answer is due a round trip (50 ms) after the call went out, late after two.
    t.client.leases.observeRtt(50);
    const { slow, gate } = gated(t.ns);
    const first = t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg });
    const others = Array.from({ length: 3 }, () =>
      t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg }),
    );
    await flush();
    expect(gate.takes).toBe(1);
    const call = t.client.leases.get("key:a")?.call as LeaseCall;
    gate.release();
    const results = await Promise.all([first, ...others]);
    expect(results.map((r) => r.reason)).toEqual(["granted", "leased", "leased", "leased"]);
    // The three promised themselves three of the units the call asked for.
    const asked = t.store.calls.filter((c) => c.method === "take" && (c.ask?.leaseUnits ?? 0) > 0).at(-1)?.ask;
    expect(call.spare).toBe((asked?.leaseUnits ?? 0) - 3);
    // Any call since is a background refill (cost 0), none a request's own.
    const takes = t.store.calls.filter((c) => c.method === "take");
    expect(takes.slice(takes.length - (gate.takes - 1)).map((c) => c.ask?.cost)).toEqual(Array(gate.takes - 1).fill(0));
  });

  it("a request the lease call out cannot cover asks for itself at once: several calls for one key may be out", async () => {
    const t = await busyKey({ leases: { max_units: 3 } });
    t.client.leases.observeRtt(50);
    const { slow, gate } = gated(t.ns, () => true);
    const first = t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg });
    await flush();
    const asked = t.store.calls.at(-1)?.ask;
    expect(asked?.leaseUnits).toBe(3);
    // Three units asked for: three requests wait for them, the fourth and fifth ask for themselves (with no lease ask).
    const others = Array.from({ length: 5 }, () =>
      t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg }),
    );
    await flush();
    expect(gate.takes).toBe(3);
    expect(t.client.leases.get("key:a")?.call?.spare).toBe(0);
    gate.release();
    const results = await Promise.all([first, ...others]);
    expect(results.map((r) => r.reason).sort()).toEqual([
      "granted",
      "granted",
      "granted",
      "leased",
      "leased",
      "leased",
    ]);
    expect(
      t.store.calls
        .filter((c) => c.method === "take")
        .slice(-2)
        .map((c) => c.ask?.leaseUnits),
    ).toEqual([0, 0]);
  });

  it("under 1/4 of a limit free in the object's latest answer, requests ask for no lease and so wait for no call", async () => {
    const t = await busyKey(); // 100 a minute
    t.client.leases.observeRtt(50);
    const e = t.client.leases.get("key:a") as KeyLeases;
    const latest = e.view?.decidedAt ?? 0;
    // The latest answer: 24 of 100 left (no unit held here). The object would grant no lease.
    t.client.leases.saw(e, {
      limits: [{ remaining: 24, resetMs: 60_000, exceeded: false }],
      decidedAt: latest,
      sentAt: latest,
      applied: null,
    });
    const { slow, gate } = gated(t.ns, () => true);
    const all = Array.from({ length: 3 }, () =>
      t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg }),
    );
    await flush();
    expect(gate.takes).toBe(3); // each asked at once
    gate.release();
    expect((await Promise.all(all)).map((r) => r.reason)).toEqual(["granted", "granted", "granted"]);
    const takes = t.store.calls.filter((c) => c.method === "take").slice(-3);
    expect(takes.map((c) => [c.ask?.cost, c.ask?.leaseUnits])).toEqual([
      [1, 0],
      [1, 0],
      [1, 0],
    ]);
  });

  it("a lease call whose answer is late: the requests waiting for it ask for themselves after its round trip", async () => {
    const t = await busyKey();
    t.client.leases.observeRtt(1); // two round trips of at least 5 ms
    const { slow, gate } = gated(t.ns);
    void t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg }); // never answered
    await flush();
    const others = await Promise.all(
      Array.from({ length: 3 }, () => t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg })),
    );
    expect(others.map((r) => r.reason)).toEqual(["granted", "granted", "granted"]);
    expect(gate.takes).toBe(4);
  });

  it("at a limit, once the cached denial lapses, every request asks for itself: the object serialises them", async () => {
    const t = setup({ limits: [{ limit: 2, window: "1s" }], leases: { enabled: false } });
    await t.limit();
    t.advance(500);
    expect((await t.limit()).reason).toBe("granted");
    t.advance(100);
    expect((await t.limit()).reason).toBe("cached_denial");
    t.advance(400); // the first unit frees
    const { slow, gate } = gated(t.ns);
    const all = Array.from({ length: 4 }, () =>
      t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg }),
    );
    await flush();
    expect(gate.takes).toBe(4);
    gate.release();
    const results = await Promise.all(all);
    // The three calls not held reach the object first: one of them gets the unit that freed.
    expect(results.map((r) => r.reason)).toEqual(["over_limit", "granted", "over_limit", "over_limit"]);
    expect(results[0]?.retryAfterMs).toBe(500);
  });

  it("a key never refused here does not wait: concurrent requests ask at once", async () => {
    const t = setup({ limits: [{ limit: 4, window: "1s" }], leases: { enabled: false } });
    const { slow, gate } = gated(t.ns);
    const all = Array.from({ length: 4 }, () =>
      t.client.limit({ ns: slow, name: "key:a", plan: t.plan, cost: 1, bg: t.bg }),
    );
    await flush();
    expect(gate.takes).toBe(4);
    gate.release();
    expect((await Promise.all(all)).map((r) => r.reason)).toEqual(Array(4).fill("granted"));
  });
});

describe("penalties (the client's part)", () => {
  const penalty = { after: 5, within: "1m", block: "10m" };

  it("every call carries the plan's penalty and the refusals answered from the deny cache since the last call", async () => {
    const t = setup({ limits: [{ limit: 1, window: "1m" }], leases: { enabled: false }, penalty });
    expect((await t.limit()).reason).toBe("granted");
    for (let i = 0; i < 3; i++) expect((await t.limit()).reason).toBe("cached_denial");
    t.advance(1_001);
    await t.limit();
    const asks = t.store.calls.filter((c) => c.method === "take").map((c) => c.ask);
    const spec = { after: 5, withinMs: 60_000, blockMs: 600_000, maxBlockMs: null };
    expect(asks).toEqual([
      expect.objectContaining({ penalty: spec, refused: 0 }),
      expect.objectContaining({ penalty: spec, refused: 3 }),
    ]);
    // Reported once: the next call starts from none.
    t.advance(1_001);
    await t.limit();
    expect(t.store.calls.filter((c) => c.method === "take").at(-1)?.ask).toMatchObject({ refused: 0 });
  });

  it("without a penalty the asks carry none; refusals while blocked are not counted", async () => {
    const t = setup({ limits: [{ limit: 1, window: "1m" }], leases: { enabled: false } });
    await t.limit();
    await t.limit();
    t.advance(1_001);
    await t.limit();
    for (const c of t.store.calls) expect(c.ask).not.toHaveProperty("penalty");

    const p = setup({ limits: [{ limit: 5, window: "1m" }], leases: { enabled: false }, penalty });
    p.store.blocks.set("key:a", T0 + 90_000);
    await p.limit();
    for (let i = 0; i < 4; i++) expect((await p.limit()).reason).toBe("blocked");
    p.advance(1_001);
    await p.limit();
    expect(p.store.calls.filter((c) => c.method === "take").at(-1)?.ask).toMatchObject({ refused: 0 });
  });

  it("a block the object calls a penalty is answered as one, also from the deny cache", async () => {
    const t = setup({ limits: [{ limit: 5, window: "1m" }], leases: { enabled: false }, penalty });
    t.store.blocks.set("key:a", T0 + 600_000);
    t.store.penalties.add("key:a");
    const first = await t.limit();
    expect(first).toMatchObject({ allowed: false, reason: "penalty", retryAfterMs: 600_000 });
    expect(headersOf(first, "draft-11").get("Retry-After")).toBe("600");
    expect((await t.limit()).reason).toBe("penalty");
    expect(t.store.count("take")).toBe(1);
  });

  it("answers from the deny cache only refusals that cannot complete the count; the one that could goes to the object", async () => {
    const t = setup({
      limits: [{ limit: 1, window: "1m" }],
      leases: { enabled: false },
      penalty: { ...penalty, after: 3 },
    });
    // The object's count of refusals, as it says with every answer to a call with a penalty.
    let seen = 0;
    const counting = {
      getByName: (name: string) => {
        const stub = t.ns.getByName(name);
        return {
          ...stub,
          take: async (...args: Parameters<typeof stub.take>) => {
            const d = await stub.take(...args);
            seen += (args[1].refused ?? 0) + (d.allowed ? 0 : 1);
            return { ...d, refusalsSeen: seen };
          },
        };
      },
    } as unknown as LimiterNamespace;
    const limit = () => t.client.limit({ ns: counting, name: "key:a", plan: t.plan, cost: 1, bg: t.bg });
    expect((await limit()).reason).toBe("granted"); // the object has seen no refusal
    expect((await limit()).reason).toBe("cached_denial"); // 0 + 0 + 1 < 3
    expect((await limit()).reason).toBe("cached_denial"); // 0 + 1 + 1 < 3
    expect(t.store.count("take")).toBe(1);
    // 0 + 2 + 1 = 3: this refusal could complete the count, so it goes to the object with the two answered here.
    expect((await limit()).reason).toBe("over_limit");
    expect(t.store.calls.filter((c) => c.method === "take").at(-1)?.ask).toMatchObject({ refused: 2 });
    expect(seen).toBe(3);
    // Without a penalty, a cached denial never goes to the object.
    const free = setup({ limits: [{ limit: 1, window: "1m" }], leases: { enabled: false } });
    await free.limit();
    for (let i = 0; i < 5; i++) expect((await free.limit()).reason).toBe("cached_denial");
    expect(free.store.count("take")).toBe(1);
  });

  it("a call sent again carries its refusal count with the same id (the object counts them once)", async () => {
    const t = setup({ limits: [{ limit: 1, window: "1m" }], leases: { enabled: false }, penalty });
    await t.limit();
    await t.limit();
    await t.limit();
    t.advance(1_001);
    t.store.fail = { retryable: true };
    t.store.failures = 1;
    await t.limit();
    const takes = t.store.calls.filter((c) => c.method === "take").slice(-2);
    expect(takes.map((c) => c.ask?.refused)).toEqual([2, 2]);
    expect(takes[0]?.ask?.call).toBeDefined();
    expect(takes[1]?.ask?.call).toBe(takes[0]?.ask?.call);
  });
});
