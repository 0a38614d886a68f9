// The client while a key's object cannot answer (docs/configuration.md, "When the object cannot answer"), against
// the in-memory object (./store.ts) with one clock the test moves: no request waits on an object known down, one
// probe at a time in the background, and with failure_mode = "local" the isolate decides alone — exactly, at its
// share of each limit — and reports what it granted when the object is back.

import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { DOWN_FIRST_MS } from "../../src/client/circuit.ts";
import { MAX_SENDS } from "../../src/client/policy.ts";
import { headersOf, type RateLimitResult } from "../../src/client/result.ts";
import type { Route } from "../../src/config/types.ts";
import { grantOf, setup, T0 } from "../support/store.ts";
import { maxInWindow } from "../support/window.ts";

/** The object fails every call until `up()`. */
function down(t: ReturnType<typeof setup>): void {
  t.store.fail = {};
  t.store.failures = Number.MAX_SAFE_INTEGER;
}

function up(t: ReturnType<typeof setup>): void {
  t.store.fail = null;
}

describe("an object known down is not called on a request's path", () => {
  it.each(["closed", "open"] as const)(
    "%s: after one failure no call for a second, then one probe in the background",
    async (mode) => {
      const t = setup({ failure_mode: mode, leases: false });
      down(t);
      expect((await t.limit()).reason).toBe("limiter_error");
      // Sent again after each failure, with its id (policy.ts): the object may have applied it.
      expect(t.store.count("take")).toBe(MAX_SENDS);
      for (let i = 0; i < 10; i++) {
        t.advance(99);
        const r = await t.limit();
        expect(r).toMatchObject({ allowed: mode === "open", reason: "limiter_error" });
      }
      expect(t.store.calls).toHaveLength(MAX_SENDS);
      t.advance(DOWN_FIRST_MS - 990);
      up(t);
      // Due a probe: it goes out in the background; this request does not wait for it.
      const r = await t.limit();
      expect(r.reason).toBe("limiter_error");
      expect(t.store.calls.map((c) => c.method)).toEqual([...Array(MAX_SENDS).fill("take"), "recover"]);
      await t.settle();
      // The probe found it up: the next request calls it.
      expect((await t.limit()).reason).toBe("granted");
      expect(t.store.count("take")).toBe(MAX_SENDS + 1);
    },
  );

  it("a hanging object: the first request waits for object_timeout, the rest not at all", async () => {
    const t = setup({ object_timeout: "20ms", leases: false });
    t.store.fail = "hang";
    expect((await t.limit()).reason).toBe("limiter_timeout");
    for (let i = 0; i < 50; i++) {
      t.advance(10);
      expect((await t.limit()).reason).toBe("limiter_timeout");
    }
    // 500 ms later: no request has called it again (a call would hang until the deadline).
    expect(t.store.calls).toHaveLength(1);
  });

  it("a failed probe doubles the interval; peek() does not call an object known down either, but probes it when due", async () => {
    const t = setup({ leases: false });
    down(t);
    await t.limit();
    t.advance(DOWN_FIRST_MS);
    await t.limit();
    await t.settle();
    // Each call to a failing object is sent MAX_SENDS times (policy.ts), the probe too.
    expect(t.store.count("recover")).toBe(MAX_SENDS);
    t.advance(2 * DOWN_FIRST_MS - 1);
    await t.limit();
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).reason).toBe("limiter_error");
    expect(t.store.calls).toHaveLength(2 * MAX_SENDS);
    t.advance(1);
    await t.limit();
    await t.settle();
    expect(t.store.count("recover")).toBe(2 * MAX_SENDS);
    // A peek due a probe sends it too (and answers without it): the object is back, and the next peek asks it.
    await t.settle();
    up(t);
    t.advance(4 * DOWN_FIRST_MS);
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).reason).toBe("limiter_error");
    expect(t.store.count("recover")).toBe(2 * MAX_SENDS + 1);
    // peek() has no waitUntil: its probe settles on its own, within the in-memory object's promise jobs.
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).reason).toBe("peek");
  });

  it("lease refills stop while the object is known down", async () => {
    const t = setup({ limits: [{ limit: 1000, window: "1m" }] });
    for (let i = 0; i < 20; i++) {
      await t.limit();
      await t.settle();
      t.advance(200);
    }
    down(t);
    const calls = t.store.calls.length;
    for (let i = 0; i < 100; i++) {
      await t.limit();
      await t.settle();
      t.advance(5);
    }
    // The lease held is spent; then one call finds the object down, and nothing more goes to it within a second.
    expect(t.store.calls.length - calls).toBeLessThanOrEqual(1);
  });
});

describe('failure_mode = "local": the isolate decides alone', () => {
  it("exactly N per window while the object is down, counting what the object granted before; headers sent", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: [{ limit: 5, window: "1s" }] });
    for (let i = 0; i < 3; i++) expect((await t.limit()).reason).toBe("granted");
    down(t);
    const alone = [];
    for (let i = 0; i < 4; i++) alone.push(await t.limit());
    expect(alone.map((r) => [r.allowed, r.reason])).toEqual([
      [true, "limiter_fallback"],
      [true, "limiter_fallback"],
      [false, "limiter_fallback"],
      [false, "limiter_fallback"],
    ]);
    const refused = alone[3] as RateLimitResult;
    // The oldest units are the two granted alone at T0 (those seen are recorded 2 ms after they were seen).
    expect(refused.retryAfterMs).toBe(1000);
    expect(headersOf(refused, "draft-11").get("RateLimit")).toBe('"per-second";r=0;t=1');
    expect(headersOf(refused, "draft-11").get("Retry-After")).toBe("1");
    expect(headersOf(alone[0] as RateLimitResult, "draft-11").get("RateLimit")).toBe('"per-second";r=1;t=1');
    // A window later, 5 more: N per window for as long as it lasts.
    t.advance(1002);
    let granted = 0;
    for (let i = 0; i < 8; i++) if ((await t.limit()).allowed) granted++;
    expect(granted).toBe(5);
  });

  it("reports what it granted alone with the probe; the object records it, never earlier than its use", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: [{ limit: 10, window: "1m" }] });
    await t.limit();
    down(t);
    for (let i = 0; i < 4; i++) {
      t.advance(100);
      await t.limit();
    }
    up(t);
    t.advance(DOWN_FIRST_MS);
    await t.limit(); // starts the probe, decided alone
    await t.settle();
    const probe = t.store.calls.find((c) => c.method === "recover");
    // Sent 1000 ms after the last of the four grants made alone (the first when the take failed).
    expect(probe?.report?.uses).toEqual([1300, 1200, 1100, 1000].map((ageMs) => ({ ageMs, units: 1 })));
    const peek = await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    expect(peek.limits[0]?.remaining).toBe(10 - 1 - 4);
    // The probe's own request was decided alone after the probe left: it goes with the next call.
    expect((await t.limit()).reason).toBe("granted");
    expect(t.store.calls.at(-1)?.ask?.alone?.uses).toEqual([{ ageMs: 0, units: 1 }]);
    expect((await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan })).limits[0]?.remaining).toBe(10 - 7);
  });

  it("a key filled partly by the object and partly alone stays full at the object after it recovers", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: [{ limit: 10, window: "10s" }] });
    const reasons: string[] = [];
    const send = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const r = await t.limit();
        reasons.push(`${r.reason}:${r.allowed}`);
        await t.settle();
        t.advance(10);
      }
    };
    await send(5);
    down(t);
    await send(7);
    up(t);
    t.advance(DOWN_FIRST_MS);
    await send(3);
    expect(reasons).toEqual([
      ...Array<string>(5).fill("granted:true"),
      ...Array<string>(5).fill("limiter_fallback:true"),
      "limiter_fallback:false",
      "limiter_fallback:false",
      // The probe goes out with this request, decided alone; then the object, which recorded the five.
      "limiter_fallback:false",
      "over_limit:false",
      "cached_denial:false",
    ]);
  });

  it("a call out when the object went down, granted later, must fit the grants made alone meanwhile", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: [{ limit: 2, window: "1h" }] });
    let open = () => {};
    t.store.gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    // B's call is out (slow); A's fails: the key is down, and A and C are granted alone.
    const b = t.limit();
    down(t);
    const alone = [await t.limit(), await t.limit(), await t.limit()];
    expect(alone.map((r) => r.allowed)).toEqual([true, true, false]);
    up(t);
    open();
    // The object grants B (it knew nothing of A and C); this isolate's log does not fit it.
    expect(await b).toMatchObject({ allowed: false, reason: "limiter_fallback" });
  });

  it("a retried call carries the report too: the object records it before deciding", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: [{ limit: 2, window: "1h" }] });
    down(t);
    expect((await t.limit()).allowed).toBe(true);
    expect((await t.limit()).allowed).toBe(true);
    // The object is back; its first try fails with a retryable error.
    t.advance(DOWN_FIRST_MS);
    t.store.fail = { retryable: true };
    t.store.failures = 1;
    await t.limit(); // the probe: the retryable error, then recorded with the retry
    await t.settle();
    const probes = t.store.calls.filter((c) => c.method === "recover");
    const units = (c: (typeof probes)[number]) => c.report?.uses.reduce((n, u) => n + u.units, 0);
    expect(probes.map(units)).toEqual([2, 2]);
    // Both recorded: the object refuses.
    expect((await t.limit()).reason).toBe("over_limit");
  });

  it("leases held when the object goes down are dropped: every request is then decided against the isolate's log", async () => {
    const t = setup({ failure_mode: "local", limits: [{ limit: 40, window: "1h" }] });
    for (let i = 0; i < 12; i++) {
      await t.limit();
      await t.settle();
      t.advance(100);
    }
    expect(t.client.leases.get("key:a")).toBeDefined();
    down(t);
    let granted = 12;
    for (let i = 0; i < 60; i++) {
      const r = await t.limit();
      if (r.allowed) granted++;
      await t.settle();
      t.advance(10);
    }
    expect(granted).toBe(40);
    expect(t.client.leases.get("key:a")?.held ?? []).toEqual([]);
  });

  it("a route's grants made alone are reported in the route's budget", async () => {
    const t = setup({
      failure_mode: "local",
      leases: false,
      limits: [{ limit: 10, window: "1h" }],
      routes: [{ name: "search", limits: [{ limit: 3, window: "1h" }] }],
    });
    const route = t.plan.routes[0] as Route;
    down(t);
    for (let i = 0; i < 2; i++)
      await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, route, bg: t.bg });
    up(t);
    t.advance(DOWN_FIRST_MS);
    await t.limit();
    await t.settle();
    const report = t.store.calls.find((c) => c.method === "recover")?.report;
    expect(report?.uses.map((u) => u.units)).toEqual([2]);
    expect(report?.routes.map((r) => [r.budget.name, r.uses.map((u) => u.units)])).toEqual([["search", [2]]]);
    expect(t.store.log("key:a\u0000search", route.limits).check(t.client.now(), 1).limits[0]?.remaining).toBe(1);
  });

  it("fallback_share scales each limit; peek() answers from the isolate's log", async () => {
    const t = setup({
      failure_mode: "local",
      fallback_share: 0.5,
      leases: false,
      limits: [{ limit: 10, window: "1m" }],
    });
    down(t);
    let granted = 0;
    for (let i = 0; i < 8; i++) if ((await t.limit()).allowed) granted++;
    expect(granted).toBe(5);
    const peek = await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    expect(peek).toMatchObject({ allowed: false, reason: "limiter_fallback" });
  });

  it("a route's request alone must fit the route's budget too, and is counted in both or neither", async () => {
    const t = setup({
      failure_mode: "local",
      leases: false,
      limits: [{ limit: 10, window: "1m" }],
      routes: [{ name: "search", limits: [{ limit: 2, window: "1m" }] }],
    });
    const route = t.plan.routes[0] as Route;
    down(t);
    const routed = [];
    for (let i = 0; i < 3; i++)
      routed.push(await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, route, bg: t.bg }));
    expect(routed.map((r) => r.allowed)).toEqual([true, true, false]);
    expect(routed[2]?.limits.map((l) => [l.limit, l.exceeded])).toEqual([
      [10, false],
      [2, true],
    ]);
    // The key's budget counted the two, not the refused one.
    let granted = 0;
    for (let i = 0; i < 10; i++) if ((await t.limit()).allowed) granted++;
    expect(granted).toBe(8);
  });

  it("concurrency alone: at most the share of the plan's slots, held in this isolate until released", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: [{ limit: 100, window: "1m" }], concurrency: 2 });
    down(t);
    const acquire = () => t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, bg: t.bg, inFlight: true });
    const [a, b, c] = [await acquire(), await acquire(), await acquire()];
    expect([a.allowed, b.allowed, c.allowed]).toEqual([true, true, false]);
    expect(c).toMatchObject({ reason: "limiter_fallback", retryAfterMs: 1000 });
    expect(t.client.holdsSlot(a.handle?.slot ?? null)).toBe(true);
    expect(await t.client.release(t.ns, a.handle?.slot ?? null)).toBe(true);
    expect(await t.client.release(t.ns, a.handle?.slot ?? null)).toBe(false);
    expect((await acquire()).allowed).toBe(true);
    // Released here: no call to the object.
    expect(t.store.count("release")).toBe(0);
  });

  it("concurrency across an outage: the object's slots and those taken alone never exceed concurrency together", async () => {
    const settings = { failure_mode: "local", leases: false, limits: [{ limit: 100, window: "1m" }], concurrency: 2 };
    // Both slots held at the object, then it stops answering: no slot alone while those requests still run.
    const t = setup(settings);
    const acquire = () => t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, bg: t.bg, inFlight: true });
    const [a, b] = [await acquire(), await acquire()];
    expect([a.reason, b.reason]).toEqual(["granted", "granted"]);
    down(t);
    const c = await acquire();
    expect(c).toMatchObject({ allowed: false, reason: "limiter_fallback" });
    expect(await acquire()).toMatchObject({ allowed: false, reason: "limiter_fallback" });
    // The other way round: two slots taken alone, then the object answers again while they still run.
    const u = setup(settings);
    const take = () => u.client.limit({ ns: u.ns, name: "key:a", plan: u.plan, cost: 1, bg: u.bg, inFlight: true });
    down(u);
    const [x, y] = [await take(), await take()];
    expect([x.reason, y.reason, x.allowed, y.allowed]).toEqual(["limiter_fallback", "limiter_fallback", true, true]);
    up(u);
    u.advance(DOWN_FIRST_MS);
    expect((await take()).allowed).toBe(false); // decided alone while the probe goes out: both slots are held here
    await u.settle();
    const takes = u.store.count("take");
    const z = await take();
    expect(z).toMatchObject({ allowed: false, reason: "concurrency", retryAfterMs: 1000 });
    expect(u.store.count("take")).toBe(takes); // refused here: the object is not asked for a third slot
    expect(await u.client.release(u.ns, x.handle?.slot ?? null)).toBe(true);
    const w = await take();
    expect(w).toMatchObject({ allowed: true, reason: "granted" });
    // The object was asked with the slot this isolate still holds alone counted: one left of two.
    expect(u.store.calls.at(-1)?.ask?.slot?.limit).toBe(1);
    expect(await take()).toMatchObject({ allowed: false, reason: "concurrency" });
  });

  it("a quota's leased units dropped when its object stopped answering go back when it answers again: nothing lost", async () => {
    const t = setup({
      failure_mode: "local",
      limits: [
        { limit: 1000, window: "1s" },
        { limit: 30, period: "hour" },
      ],
    });
    const used = () => t.store.meters.get("key:a")?.quotas?.rows()[0]?.used ?? 0;
    let served = 0;
    const serve = async () => {
      const r = await t.limit();
      if (r.allowed) served++;
      await t.settle();
      return r;
    };
    for (let i = 0; i < 20; i++) await serve();
    expect(served).toBe(20);
    expect(used()).toBeGreaterThan(20); // a lease's units count in the quota when it is granted
    // The object stops answering once the lease in hand is spent: the isolate drops its leases (a quota's key is
    // never decided alone) and refuses.
    down(t);
    let refused = 0;
    for (let i = 0; i < 40 && refused < 3; i++) if (!(await serve()).allowed) refused++;
    expect(refused).toBe(3);
    up(t);
    t.advance(DOWN_FIRST_MS);
    await serve(); // the probe goes out; when it answers, the dropped leases are settled
    await t.settle();
    expect(used()).toBe(served);
    // And every unit of the quota is served in the end, none more.
    for (let i = 0; i < 40; i++) await serve();
    expect(served).toBe(30);
    expect(used()).toBe(30);
  });

  it("property: slots held at the object and slots taken alone in the isolate never exceed concurrency together", async () => {
    const op = fc.oneof(
      fc.constant({ kind: "acquire" as const }),
      fc.record({ kind: fc.constant("release" as const), which: fc.nat() }),
      fc.constant({ kind: "down" as const }),
      fc.constant({ kind: "up" as const }),
      fc.record({ kind: fc.constant("advance" as const), ms: fc.integer({ min: 0, max: 1500 }) }),
      fc.constant({ kind: "settle" as const }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 3 }),
        fc.array(op, { minLength: 1, maxLength: 60 }),
        async (n, ops) => {
          const t = setup({
            failure_mode: "local",
            leases: false,
            limits: [{ limit: 100, window: "1m" }],
            concurrency: n,
          });
          const held: RateLimitResult[] = [];
          for (const o of ops) {
            if (o.kind === "acquire") {
              const r = await t.client.limit({
                ns: t.ns,
                name: "key:a",
                plan: t.plan,
                cost: 1,
                bg: t.bg,
                inFlight: true,
              });
              if (r.allowed && r.handle?.slot) held.push(r);
            } else if (o.kind === "release" && held.length > 0) {
              const [r] = held.splice(o.which % held.length, 1);
              await t.client.release(t.ns, r?.handle?.slot ?? null);
            } else if (o.kind === "down") down(t);
            else if (o.kind === "up") up(t);
            else if (o.kind === "advance") t.advance(o.ms);
            else if (o.kind === "settle") await t.settle();
            // Every slot a request still holds is one at the object or one taken alone here, and together at most n.
            const atObject = t.store.slotsOf("key:a").heldAt(t.client.now());
            const alone = held.filter((r) => r.reason === "limiter_fallback").length;
            expect(atObject + alone).toBeLessThanOrEqual(n);
            expect(held.length).toBeLessThanOrEqual(n);
          }
        },
      ),
      { numRuns: 80 },
    );
  });

  it("property: one isolate, leases on or off, requests at once, errors retried or not, a slow call out — no window of use times over N", async () => {
    const steps = fc.array(
      fc.record({
        gap: fc.integer({ min: 0, max: 150 }),
        cost: fc.integer({ min: 1, max: 2 }),
        // How many requests at once.
        at: fc.integer({ min: 1, max: 3 }),
        object: fc.constantFrom("up", "up", "down", "retryable", "slow"),
      }),
      { minLength: 1, maxLength: 100 },
    );
    await fc.assert(
      fc.asyncProperty(steps, fc.boolean(), async (seq, leases) => {
        const t = setup({
          failure_mode: "local",
          leases,
          limits: [
            { limit: 10, window: "2s" },
            { limit: 30, window: "10s" },
          ],
        });
        const uses: number[] = [];
        const used = (r: RateLimitResult, cost: number) => {
          if (r.allowed) uses.push(...Array<number>(cost).fill(t.client.now()));
        };
        // Calls held at the object until the next step's requests are decided (a slow round trip).
        let release: (() => void) | null = null;
        const slow: Promise<unknown>[] = [];
        for (const s of seq) {
          t.advance(s.gap);
          up(t);
          if (s.object === "down") down(t);
          if (s.object === "retryable") {
            t.store.fail = { retryable: true };
            t.store.failures = 1;
          }
          let open = () => {};
          if (s.object === "slow") {
            t.store.gate = new Promise<void>((resolve) => {
              open = resolve;
            });
          }
          const sent = Array.from({ length: s.at }, () => t.limit("key:a", s.cost).then((r) => used(r, s.cost)));
          t.store.gate = null;
          const before = release;
          if (s.object === "slow") {
            slow.push(...sent);
            release = open;
          } else {
            await Promise.all(sent);
            release = null;
          }
          before?.();
          await t.settle();
        }
        release?.();
        await Promise.all(slow);
        expect(maxInWindow(uses, 2000)).toBeLessThanOrEqual(10);
        expect(maxInWindow(uses, 10_000)).toBeLessThanOrEqual(30);
      }),
      { numRuns: 150 },
    );
  });
});

describe('failure_mode = "local": a grant made alone is settled (docs/llm.md, "Settled costs")', () => {
  const LIMITS = [{ limit: 10_000, window: "1m" }];
  const used = (t: ReturnType<typeof setup>) => t.store.log("key:a", t.plan.limits ?? []).peek(t.store.now()).limits[0];
  /** The `reservation_kept` lines logged while `run` runs. */
  async function keptLines(run: () => Promise<void>): Promise<Record<string, unknown>[]> {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      await run();
      await new Promise((resolve) => setTimeout(resolve, 0));
      return warn.mock.calls
        .map((c) => JSON.parse(String(c[0])) as Record<string, unknown>)
        .filter((l) => l.event === "reservation_kept");
    } finally {
      warn.mockRestore();
    }
  }

  it("four requests reserving 104, settled to 900 while the object is down: after it recovers the key holds 3,600", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: LIMITS });
    vi.spyOn(console, "error").mockImplementation(() => {});
    down(t);
    const alone = [];
    for (let i = 0; i < 4; i++) {
      t.advance(10);
      alone.push(await t.limit("key:a", 104));
    }
    expect(alone.map((r) => [r.allowed, r.reason])).toEqual(Array(4).fill([true, "limiter_fallback"]));
    for (const r of alone) {
      t.advance(50);
      expect(await t.client.settle(t.ns, grantOf(r), 900)).toBe(true);
    }
    // Settled once: a second settle of the same grant does nothing.
    expect(await t.client.settle(t.ns, grantOf(alone[0] as RateLimitResult), 900)).toBe(false);
    // Counted here at once: 3,600 of 10,000, so 6,400 still fit alone and 6,401 do not.
    const budgets = { ns: t.ns, name: "key:a", plan: t.plan };
    expect((await t.client.peek({ ...budgets, cost: 6400 })).allowed).toBe(true);
    expect((await t.client.peek({ ...budgets, cost: 6401 })).allowed).toBe(false);
    up(t);
    t.advance(DOWN_FIRST_MS);
    await t.limit("key:a", 1); // due a probe: it carries the report
    await t.settle();
    const probe = t.store.calls.find((c) => c.method === "recover");
    const units = (probe?.report?.uses ?? []).map((u) => u.units);
    expect(units.reduce((a, b) => a + b, 0)).toBe(3600);
    // No use reported earlier than it happened: the debt as used when each settle came, the reservations before.
    const reportedAt = (probe?.report?.uses ?? []).map((u) => t.store.now() - u.ageMs);
    const lastSettle = T0 + 4 * 10 + 4 * 50;
    expect(Math.max(...reportedAt)).toBeGreaterThanOrEqual(lastSettle);
    expect(used(t)?.remaining).toBe(10_000 - 3600);
    expect(t.store.calls.filter((c) => c.method === "refund")).toEqual([]);
  });

  it("settled for less before it is reported: the unused units are given back, never reported", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: LIMITS });
    vi.spyOn(console, "error").mockImplementation(() => {});
    down(t);
    const a = await t.limit("key:a", 500);
    const b = await t.limit("key:a", 300);
    t.advance(5);
    expect(await t.client.settle(t.ns, grantOf(a), 120)).toBe(true);
    expect(await t.client.settle(t.ns, grantOf(b), 300)).toBe(true);
    up(t);
    t.advance(DOWN_FIRST_MS);
    await t.limit("key:a", 1);
    await t.settle();
    const probe = t.store.calls.find((c) => c.method === "recover");
    expect((probe?.report?.uses ?? []).reduce((n, u) => n + u.units, 0)).toBe(120 + 300);
    expect(used(t)?.remaining).toBe(10_000 - 420);
  });

  it("settled after its report was recorded: the debt is recorded at the object; unused units stay counted, logged", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: LIMITS });
    vi.spyOn(console, "error").mockImplementation(() => {});
    vi.spyOn(console, "log").mockImplementation(() => {});
    down(t);
    const over = await t.limit("key:a", 104);
    const under = await t.limit("key:a", 104);
    up(t);
    t.advance(DOWN_FIRST_MS);
    await t.limit("key:a", 1); // due a probe, decided alone itself
    await t.settle();
    // The next call carries the probe's own request: nothing made alone waits to be reported any more.
    expect((await t.limit("key:a", 1)).reason).toBe("granted");
    expect(used(t)?.remaining).toBe(10_000 - 210);
    expect(await t.client.settle(t.ns, grantOf(over), 900)).toBe(true);
    expect(t.store.calls.at(-1)).toMatchObject({ method: "refund", units: 0 });
    expect(used(t)?.remaining).toBe(10_000 - 210 - 796);
    const lines = await keptLines(async () => {
      expect(await t.client.settle(t.ns, grantOf(under), 4)).toBe(true);
    });
    expect(lines).toEqual([expect.objectContaining({ reason: "reported_alone", reserved: 104, kept: 100 })]);
    expect(used(t)?.remaining).toBe(10_000 - 210 - 796);
  });

  it("a debt whose settle call fails goes with the key's next call; a grant made alone is never refunded", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: LIMITS });
    vi.spyOn(console, "error").mockImplementation(() => {});
    vi.spyOn(console, "log").mockImplementation(() => {});
    down(t);
    const r = await t.limit("key:a", 104);
    up(t);
    t.advance(DOWN_FIRST_MS);
    await t.limit("key:a", 1);
    await t.settle();
    expect(await t.client.refund(t.ns, grantOf(r))).toBe(false);
    expect(t.store.calls.some((c) => c.method === "refund")).toBe(false);
    down(t);
    expect(await t.client.settle(t.ns, grantOf(r), 900)).toBe(true);
    up(t);
    t.advance(2 * DOWN_FIRST_MS);
    await t.limit("key:a", 1);
    await t.settle();
    expect(used(t)?.remaining).toBe(10_000 - 104 - 1 - 796 - 1);
  });
});
