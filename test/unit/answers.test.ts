// What a call to a key's object asks and what its answer leaves in the isolate (src/client/answers.ts), on its own:
// the ask's lease and settlement fields, the deny cache entry a refusal leaves (kept, replaced, its retry times per
// cost, a block's end in local time, an override's limits), the object's count of refusals, and a block dropping the
// key's leases here. Decisions are written by hand; the object behind the calls is the in-memory one.
import { describe, expect, it } from "vitest";
import { Answers } from "../../src/client/answers.ts";
import { ObjectCalls } from "../../src/client/calls.ts";
import { Circuit } from "../../src/client/circuit.ts";
import { type Blocked, DenyCache } from "../../src/client/deny-cache.ts";
import { InFlight } from "../../src/client/in-flight.ts";
import { LeaseTable } from "../../src/client/leases.ts";
import { Outcomes } from "../../src/client/outcomes.ts";
import type { Parts } from "../../src/client/parts.ts";
import { Refusals } from "../../src/client/refusals.ts";
import type { LimitRequest } from "../../src/client/request.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig, Plan } from "../../src/config/types.ts";
import type { Decision, NamedLimit } from "../../src/core/decision.ts";
import { Store, T0 } from "../support/store.ts";

/** Answers over real parts at a clock the test sets, the in-memory object behind their calls. */
function setup(settings: Record<string, unknown> = {}) {
  const clock = { now: T0 };
  const now = () => clock.now;
  const config = parseLimiterConfig({ limits: [{ limit: 10, window: "1m" }], ...settings }, "test") as LimiterConfig;
  const leases = new LeaseTable();
  const circuit = new Circuit(config.objectTimeoutMs);
  const parts: Parts = {
    config,
    now,
    leases,
    denyCache: new DenyCache(),
    inFlight: new InFlight(config.objectTimeoutMs, () => {}, now),
    circuit,
    alone: null,
    refusals: new Refusals(),
    calls: new ObjectCalls({ config, now, leases, circuit, alone: null }),
    results: new Outcomes(config),
  };
  const store = new Store(now);
  const plan = config.defaultPlan as Plan;
  const pending: Promise<unknown>[] = [];
  const r = (cost = 1): LimitRequest => ({
    ns: store.namespace(),
    name: "key:a",
    plan,
    cost,
    bg: { waitUntil: (p) => void pending.push(p) },
  });
  const entry = () => leases.touch("key:a", plan.limits ?? [], clock.now, []);
  const settled = async () => {
    while (pending.length > 0) await pending.shift();
  };
  return { answers: new Answers(parts), parts, store, plan, r, entry, clock, settled };
}

/** A decision at `now` (T0 by default): granted with 5 left unless told otherwise. */
function decision(more: Partial<Decision> = {}): Decision {
  const now = more.now ?? T0;
  return {
    allowed: true,
    neverAllowed: false,
    cost: 1,
    now,
    retryAfterMs: 0,
    blockedUntil: now,
    limits: [{ remaining: 5, resetMs: 60_000, exceeded: false }],
    lease: null,
    ...more,
  };
}

/** A refusal by the limit at `now`: free again in `waitMs` (for a cost of 1: `blockedUntil`). */
function refusal(waitMs: number, more: Partial<Decision> = {}): Decision {
  const now = more.now ?? T0;
  return decision({
    allowed: false,
    retryAfterMs: waitMs,
    blockedUntil: now + waitMs,
    limits: [{ remaining: 0, resetMs: waitMs, exceeded: true }],
    ...more,
  });
}

const sent = (sentAt = T0) => ({ entry: undefined, call: null, ask: { cost: 1, settle: [] }, sentAt });

describe("Answers.ask", () => {
  it("without the key's lease entry: the cost alone, no lease, nothing to settle", () => {
    const t = setup();
    expect(t.answers.ask(undefined, undefined, 2, T0)).toEqual({
      cost: 2,
      leaseUnits: 0,
      leaseMs: 0,
      leaseLeadMs: 0,
      leaseFromLog: false,
      settle: [],
    });
  });

  it("a lease sized from the key's log only when one is asked for", () => {
    const t = setup();
    const e = t.entry();
    // A key new here has no rate of its own: a lease asked for is sized by the object from its log.
    expect(t.parts.leases.fromLog(e)).toBe(true);
    expect(t.answers.ask(e, undefined, 1, T0)).toMatchObject({ leaseUnits: 0, leaseFromLog: false });
    expect(t.answers.ask(e, { units: 0, lifetimeMs: 0, leadMs: 0 }, 1, T0)).toMatchObject({ leaseFromLog: false });
    expect(t.answers.ask(e, { units: 4, lifetimeMs: 9_000, leadMs: 20 }, 1, T0)).toMatchObject({
      leaseUnits: 4,
      leaseMs: 9_000,
      leaseLeadMs: 20,
      leaseFromLog: true,
    });
  });
});

describe("Answers.took: the deny cache entry a refusal leaves", () => {
  it("is in local time from the call's send, with the wait for its own cost when that is not 1", () => {
    const t = setup();
    // The object's clock runs 30 ms ahead of this isolate's: durations are what carry over.
    t.answers.took(t.r(3), refusal(700, { now: T0 + 30, retryAfterMs: 900 }), sent(T0 - 10));
    const blocked = t.parts.denyCache.get("key:a", T0) as Blocked;
    expect(blocked).toMatchObject({ until: T0 - 10 + 700, freeAt: [T0 - 10 + 700], recheckAt: T0 - 10 + 1_000 });
    expect(blocked.blockedBy).toBeUndefined();
    expect(blocked.applied).toBeNull();
    expect([...blocked.retryAt]).toEqual([[3, T0 - 10 + 900]]);
  });

  it("keeps an entry for the limits, learning other costs' waits; a block replaces it, and a refusal by the limits a block's", () => {
    const t = setup();
    t.answers.took(t.r(2), refusal(700, { retryAfterMs: 800 }), sent());
    const first = t.parts.denyCache.get("key:a", T0) as Blocked;
    t.answers.took(t.r(3), refusal(600, { retryAfterMs: 900 }), sent(T0 + 5));
    const kept = t.parts.denyCache.get("key:a", T0 + 5) as Blocked;
    expect(kept).toBe(first);
    expect(kept.until).toBe(T0 + 700);
    expect([...kept.retryAt]).toEqual([
      [2, T0 + 800],
      [3, T0 + 5 + 900],
    ]);
    // An operator's block: a new entry, its end in local time.
    t.answers.took(t.r(2), refusal(60_000, { now: T0 + 40, blockedBy: T0 + 40 + 60_000 }), sent(T0 + 10));
    const block = t.parts.denyCache.get("key:a", T0 + 10) as Blocked;
    expect(block).not.toBe(first);
    expect(block.blockedBy).toBe(T0 + 10 + 60_000);
    expect(block.until).toBe(T0 + 10 + 60_000);
    expect([...block.retryAt]).toEqual([[2, T0 + 10 + 60_000]]);
    // A refusal by the limits does not keep the block's entry either.
    t.answers.took(t.r(1), refusal(500), sent(T0 + 20));
    const limits = t.parts.denyCache.get("key:a", T0 + 20) as Blocked;
    expect(limits).not.toBe(block);
    expect(limits.blockedBy).toBeUndefined();
    expect(limits.until).toBe(T0 + 20 + 500);
  });

  it("learns no wait for a grant that leaves the key full, nor for a cost that can never pass", () => {
    const t = setup();
    t.answers.took(
      t.r(3),
      decision({ blockedUntil: T0 + 400, limits: [{ remaining: 0, resetMs: 400, exceeded: false }] }),
      sent(),
    );
    const full = t.parts.denyCache.get("key:a", T0) as Blocked;
    expect(full.until).toBe(T0 + 400);
    expect([...full.retryAt]).toEqual([]);
    t.parts.denyCache.delete("key:a");
    t.answers.took(t.r(30), refusal(400, { neverAllowed: true, retryAfterMs: Number.POSITIVE_INFINITY }), sent());
    expect([...(t.parts.denyCache.get("key:a", T0) as Blocked).retryAt]).toEqual([]);
  });

  it("keeps the limits an operator's override applied", () => {
    const t = setup();
    const override: NamedLimit[] = [{ limit: 2, windowMs: 60_000, tickMs: 1, name: "1m" }];
    t.answers.took(t.r(), refusal(300, { limitsOverride: override }), sent());
    expect(t.parts.denyCache.get("key:a", T0)?.applied).toEqual(override);
  });

  it("a request's grant clears the entry; a lease call's answer never does, and counts as a cost of 1", () => {
    const t = setup();
    t.answers.took(t.r(2), refusal(700), sent());
    t.answers.took(t.r(2), decision(), { ...sent(), leaseOnly: true });
    expect(t.parts.denyCache.get("key:a", T0)).toBeDefined();
    t.parts.denyCache.delete("key:a");
    // A lease call made beside a request of 2 learns no wait for 2 from its refusal.
    t.answers.took(t.r(2), refusal(700, { retryAfterMs: 900 }), { ...sent(), leaseOnly: true });
    expect([...(t.parts.denyCache.get("key:a", T0) as Blocked).retryAt]).toEqual([]);
    t.answers.took(t.r(2), decision(), sent());
    expect(t.parts.denyCache.get("key:a", T0)).toBeUndefined();
  });
});

describe("Answers.took: what else an answer leaves", () => {
  it("keeps the object's count of the key's refusals towards its penalty", () => {
    const t = setup({ penalty: { after: 5, within: "10m", block: "15m", max_block: "1d" } });
    const blocked: Blocked = { until: T0 + 100, freeAt: [T0 + 100], retryAt: new Map() };
    expect(t.parts.refusals.completesPenalty("key:a", t.plan, blocked, T0)).toBe(false);
    t.answers.took(t.r(), refusal(100, { refusalsSeen: 4 }), sent());
    // Four at the object and this one: the penalty's fifth.
    expect(t.parts.refusals.completesPenalty("key:a", t.plan, blocked, T0)).toBe(true);
  });

  it("a block drops the key's leases here and gives their units back to its object", async () => {
    const t = setup();
    const e = t.entry();
    const lease = { units: 4, lifetimeMs: 10_000, recordedAt: [T0 + 10_000] };
    const ask = { cost: 1, settle: [], leaseUnits: 4 };
    expect(t.answers.took(t.r(), decision({ lease }), { entry: e, call: null, ask, sentAt: T0 })).not.toBeNull();
    expect(t.parts.leases.get("key:a")?.held.map((h) => h.left)).toEqual([4]);
    t.answers.took(t.r(), refusal(60_000, { blockedBy: T0 + 60_000 }), { entry: e, call: null, ask, sentAt: T0 });
    expect(t.parts.leases.get("key:a")).toBeUndefined();
    await t.settled();
    expect(t.store.calls.filter((c) => c.method === "settle").map((c) => c.settle?.[0]?.unused)).toEqual([4]);
  });
});
