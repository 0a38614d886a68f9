// Nothing lost under faults (docs/design.md; issue 62): three isolates share one in-memory object (../support/store.ts)
// and one clock, and any send of any call between them may be dropped before the object applies it, or applied with
// its answer dropped (../support/faults.ts), within what the client promises to survive: at most MAX_SENDS − 1 faults
// on a call with an id (a release too), one retryable fault on a read. The runs are random sequences of bursts of requests (all at
// once, or one after another), clock advances, refunds, settles of costs (for less or for more, in the isolate that
// granted or another), forgotten leases, and concurrency slots taken and released, across four keys: two leasing with
// an hourly quota, one with credits, one with concurrency slots. Each property below is judged on such runs; the second
// group's runs also have a request's take or a lease settle carrying settlements fail on every send, never applied
// (the settlements then ride on with a later call: docs/design.md, "Nothing lost under faults").

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DOWN_MOST_MS } from "../../src/client/circuit.ts";
import type { LimiterClient } from "../../src/client/index.ts";
import { RESEND_WITHIN_MS } from "../../src/client/policy.ts";
import type { RateLimitResult, SlotRecord } from "../../src/client/result.ts";
import type { Plan } from "../../src/config/types.ts";
import { type Fault, fault, isolates } from "../support/faults.ts";
import { grantOf } from "../support/store.ts";
import { type Grant, sweepViolation } from "../support/window.ts";

/** The keys, by the plan each is under: two leasing with a quota, one with credits, one with concurrency slots. */
const KEYS = ["q1", "q2", "cr", "sl"] as const;
type Key = (typeof KEYS)[number];
const quoted = (k: Key) => k === "q1" || k === "q2";

/**
 * A step of a run, with the faults of its sends (one each, in turn; past the last, none), and whether its calls
 * carrying lease settlements fail on every send (where a property allows it).
 */
type Step = Action & { faults: readonly Fault[]; down: boolean };
type Action =
  | { kind: "burst"; isolate: number; key: number; n: number; cost: number; parallel: boolean }
  | { kind: "wait"; ms: number }
  | { kind: "refund"; pick: number; isolate: number }
  | { kind: "settle"; pick: number; isolate: number; share: number; over: boolean }
  | { kind: "release"; pick: number; isolate: number }
  | { kind: "forget"; isolate: number; key: number };

/** An isolate, or −1: the one that granted the grant acted on. */
const isolate = fc.integer({ min: -1, max: 2 });

const action: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("burst" as const),
      isolate: fc.integer({ min: 0, max: 2 }),
      key: fc.integer({ min: 0, max: KEYS.length - 1 }),
      n: fc.integer({ min: 1, max: 12 }),
      cost: fc.integer({ min: 1, max: 4 }),
      // All at once, or one after another (which spends from the leases the first ones brought).
      parallel: fc.boolean(),
    }),
  },
  // Pauses: most within a window or a lease's life, some past every lease's life.
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("wait" as const),
      ms: fc.oneof(fc.integer({ min: 0, max: 1_500 }), fc.constant(40_000)),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("refund" as const), pick: fc.nat(), isolate }) },
  // A grant settled to a share of its reservation, or beyond it (a debt).
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("settle" as const),
      pick: fc.nat(),
      isolate,
      share: fc.double({ min: 0, max: 1, noNaN: true }),
      over: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("release" as const), pick: fc.nat(), isolate }) },
  // An operator's change seen in an isolate: its leases of a leasing key dropped and settled in the background.
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("forget" as const),
      isolate: fc.integer({ min: 0, max: 2 }),
      key: fc.integer({ min: 0, max: 1 }),
    }),
  },
);

const faults = fc.array(fault, { maxLength: 16 });
const step: fc.Arbitrary<Step> = fc
  .tuple(action, faults, fc.boolean())
  .map(([a, f, down]) => ({ ...a, faults: f, down }));

/** The limits of a run: near them (refusals, leases settled with every call) or far (leases live their time). */
const limits = fc.record({
  perSecond: fc.oneof(fc.integer({ min: 5, max: 40 }), fc.constant(10_000)),
  // A quota that runs out (leases cut to it) and one that never does.
  perHour: fc.oneof(fc.integer({ min: 20, max: 400 }), fc.constant(100_000)),
  credits: fc.integer({ min: 0, max: 40 }),
});
type Limits = { perSecond: number; perHour: number; credits: number };

/** A grant as the test follows it. */
interface Granted {
  readonly r: RateLimitResult;
  readonly key: Key;
  readonly isolate: number;
  /** null while open (its reservation counts); 0 once refunded; its actual cost once settled. */
  final: number | null;
  /** Its concurrency slot, until released. */
  slot: SlotRecord | null;
}

/** The first breach of each property in a run (null: none). */
interface Breaches {
  /** A request answered `limiter_*`, or a grant the object decided not refunded or settled the first time asked. */
  answered: string | null;
  /** A window of use times over N, or the quota's hour over its limit. */
  windows: string | null;
  /** A quota not counting what was served once every lease is settled, or a credits balance not exact after a step. */
  meters: string | null;
  /** A slot the object holds for a request that ended, or none for one granted and not released. */
  slots: string | null;
}

/** What the runs of a property exercised. */
type Seen = Record<
  "dropped" | "lost" | "failedEverySend" | "leased" | "inLease" | "refunded" | "debt" | "released" | "forgot",
  number
>;
const nothingSeen = (): Seen => ({
  failedEverySend: 0,
  dropped: 0,
  lost: 0,
  leased: 0,
  inLease: 0,
  refunded: 0,
  debt: 0,
  released: 0,
  forgot: 0,
});

/**
 * One run, and the first breach of each property in it. With `everySend`, in the steps that say so and in the last
 * requests, a request's take or a lease settle carrying settlements fails on every send; they ride on, sent again when
 * the key's object next answers or a step later (docs/design.md, "Nothing lost under faults"): so the isolates call
 * each leasing key's object (probing it when known down) before the clock passes the time a call may be sent again.
 */
async function run(
  lim: Limits,
  steps: readonly Step[],
  last: readonly Fault[],
  seen: Seen,
  everySend: boolean,
): Promise<Breaches> {
  const breaches: Breaches = { answered: null, windows: null, meters: null, slots: null };
  const breach = (kind: keyof Breaches, what: string) => {
    breaches[kind] ??= what;
  };
  const per = (limit: number) => [{ limit, window: "1s" }];
  const t = isolates({
    limits: [...per(lim.perSecond), { limit: lim.perHour, period: "hour" }],
    plans: [
      { name: "credits", key_prefix: "cr", limits: per(lim.perSecond), credits: { initial: lim.credits } },
      // A timeout longer than any run: a slot never lapses, so one held is held because nobody released it.
      { name: "slots", key_prefix: "sl", limits: per(lim.perSecond), concurrency: 2, concurrency_timeout: "1h" },
    ],
  });
  // Inside one hour with time to spare: the quota's period never ends during a run.
  t.advance(Date.UTC(2026, 6, 1, 10) - t.clients[0].now());
  const { defaultPlan, plans } = t.clients[0].config;
  const planOf: Record<Key, Plan> = {
    q1: defaultPlan as Plan,
    q2: defaultPlan as Plan,
    cr: plans[0] as Plan,
    sl: plans[1] as Plan,
  };
  const client = (i: number) => t.clients[i] as LimiterClient;
  const grants: Granted[] = [];
  /** The credits balance the object should hold. */
  let credits = lim.credits;

  /** A request to `key` from isolate `i`, followed as a grant when granted. */
  const limit = async (i: number, key: Key, cost: number) => {
    const r = await client(i).limit({ ns: t.ns, name: key, plan: planOf[key], cost, bg: t.bg, inFlight: key === "sl" });
    if (r.reason.startsWith("limiter_")) breach("answered", `a request to ${key} answered ${r.reason}`);
    if (r.allowed) grants.push({ r, key, isolate: i, final: null, slot: r.handle?.slot ?? null });
    if (r.allowed && key === "cr") credits -= cost;
    if (r.reason === "leased") seen.leased++;
    return r;
  };
  /** The grant `pick` names among those `which` keeps, if any. */
  const pickOf = (pick: number, which: (g: Granted) => boolean) => {
    const some = grants.filter(which);
    return some.length === 0 ? undefined : some[pick % some.length];
  };
  const acting = (g: Granted, i: number) => client(i === -1 ? g.isolate : i);
  /** When the isolates last sent their settlements not answered again. */
  let flushed = t.clients[0].now();
  /**
   * Past every isolate's wait before it probes a key known down, a request to each leasing key in each isolate, with
   * no faults: a key known down is probed, and its answer sends that key's settlements not answered again; those of a
   * key not known down go with the request.
   */
  const flush = async () => {
    t.faults.plan([]);
    t.advance(DOWN_MOST_MS);
    for (let i = 0; i < t.clients.length; i++) for (const key of ["q1", "q2"] as const) await limit(i, key, 1);
    await t.settle();
    flushed = t.clients[0].now();
  };

  for (const s of steps) {
    // Sent again within the time a call may be: a flush ends before then.
    if (everySend && s.kind === "wait" && t.clients[0].now() + s.ms - flushed >= RESEND_WITHIN_MS - DOWN_MOST_MS)
      await flush();
    t.faults.plan(s.faults, everySend && s.down);
    if (s.kind === "wait") t.advance(s.ms);
    else if (s.kind === "burst") {
      const key = KEYS[s.key] as Key;
      if (s.parallel) await Promise.all(Array.from({ length: s.n }, () => limit(s.isolate, key, s.cost)));
      else for (let i = 0; i < s.n; i++) await limit(s.isolate, key, s.cost);
    } else if (s.kind === "forget") {
      client(s.isolate).forget(t.ns, KEYS[s.key] as Key, t.bg);
      seen.forgot++;
    } else if (s.kind === "release") {
      const g = pickOf(s.pick, (x) => x.slot !== null);
      if (g?.slot) {
        await acting(g, s.isolate).release(t.ns, g.slot);
        g.slot = null;
        seen.released++;
      }
    } else {
      const g = pickOf(s.pick, (x) => x.final === null);
      if (g === undefined) continue;
      const grant = grantOf(g.r);
      const { cost } = g.r;
      const actual = s.kind === "refund" ? 0 : s.over ? cost + Math.ceil(s.share * 5) : Math.floor(s.share * cost);
      const by = acting(g, s.isolate);
      const ok = s.kind === "refund" ? await by.refund(t.ns, grant) : await by.settle(t.ns, grant, actual);
      // The object gives back or settles each grant it decided once: the first time it is asked, whatever the faults.
      if (!ok && grant.lease === undefined) breach("answered", `a ${s.kind} of a grant of ${g.key} the object decided`);
      // A leased grant refunded or settled in another isolate keeps its reservation (it may still be, where granted).
      if (ok) {
        g.final = actual;
        if (grant.lease !== undefined) seen.inLease++;
        if (s.kind === "refund") seen.refunded++;
        if (actual > cost) seen.debt++;
        // Unused credits come back; a debt spends them down to 0.
        if (g.key === "cr") credits += Math.max(0, cost - actual) - Math.min(Math.max(0, actual - cost), credits);
      }
    }
    await t.settle();
    // No leases for a plan with credits: its balance is exact after every step.
    const balance = t.store.meters.get("cr")?.credits?.balance(t.store.now()) ?? lim.credits;
    if (balance !== credits) breach("meters", `a credits balance of ${balance}, not ${credits}, after a ${s.kind}`);
    // The object holds a slot for exactly the granted requests not yet released.
    const slots = t.store.slotsOf("sl");
    const asked = new Set(t.store.calls.flatMap((c) => (c.ask?.slot ? [c.ask.slot.id] : [])));
    const held = [...asked].filter((id) => slots.fits(t.store.now(), id, { limit: 0, timeoutMs: 1 }));
    const live = new Set(grants.flatMap((g) => (g.slot ? [g.slot.id] : [])));
    if (held.length !== live.size || held.some((id) => !live.has(id)))
      breach("slots", `${held.length} slots held, ${live.size} requests holding one, after a ${s.kind}`);
  }

  // Before the clock passes the time a call may be sent again.
  if (everySend) await flush();
  // Every lease expires; each isolate's next request to each leasing key settles its own (with `everySend`, those
  // requests fail on every send, and their settlements ride on).
  t.advance(60_000);
  t.faults.plan(last, everySend);
  for (let i = 0; i < t.clients.length; i++) {
    for (const key of ["q1", "q2"] as const) await limit(i, key, 1);
    await t.settle();
  }
  // The settlements of those requests whose every send failed go again.
  if (everySend) await flush();
  // Leases still held (an isolate that found its key known down probed it instead of calling) are given back.
  t.faults.plan([]);
  for (const c of t.clients) for (const key of ["q1", "q2"]) c.forget(t.ns, key, t.bg);
  await t.settle();

  for (const key of KEYS) {
    const counted = grants.filter((g) => g.key === key && g.final !== 0);
    // Each grant at its use, at its final cost up to its reservation (a debt goes over N, as documented).
    const uses: Grant[] = counted.map((g) => ({ t: g.r.at, cost: Math.min(g.final ?? g.r.cost, g.r.cost) }));
    const over = sweepViolation(uses, [{ limit: lim.perSecond, windowMs: 1_000 }]);
    if (over !== null) breach("windows", `${key}: ${over}`);
    if (!quoted(key)) continue;
    const hour = uses.reduce((n, u) => n + u.cost, 0);
    if (hour > lim.perHour) breach("windows", `${key}: ${hour} in the hour's quota of ${lim.perHour}`);
    // The quota counts exactly what was served: each grant at its final cost, debts included.
    const served = counted.reduce((n, g) => n + (g.final ?? g.r.cost), 0);
    const used = t.store.meters.get(key)?.quotas?.rows()[0]?.used ?? 0;
    if (used !== served) breach("meters", `${key}'s quota counts ${used}, ${served} served`);
  }
  seen.dropped += t.faults.injected.dropped;
  seen.lost += t.faults.injected.lost;
  seen.failedEverySend += t.faults.injected.failedEverySend;
  return breaches;
}

/** Runs the property that `kind` is never breached, then checks that its runs reached every path they are for. */
async function holds(kind: keyof Breaches, everySend = false): Promise<void> {
  const seen = nothingSeen();
  await fc.assert(
    fc.asyncProperty(
      limits,
      fc.array(step, { minLength: 1, maxLength: 30, size: "large" }),
      faults,
      async (lim, steps, last) => {
        expect((await run(lim, steps, last, seen, everySend))[kind]).toBeNull();
      },
    ),
    { numRuns: 100 },
  );
  // Both kinds of fault (and calls failing on every send where they may), grants spent from leases and given back into
  // them, refunds, debts, releases, forgotten leases.
  for (const [what, n] of Object.entries(seen))
    if (everySend || what !== "failedEverySend") expect(n, what).toBeGreaterThan(0);
}

describe("nothing lost under faults: three isolates, calls dropped before or after the object applies them (property)", () => {
  it("every request is answered, and a grant the object decided is refunded or settled the first time asked", async () => {
    await holds("answered");
  });

  it("no window of use times holds more than N, nor a quota's hour more than its limit", async () => {
    await holds("windows");
  });

  it("each quota counts exactly what was served once every lease is settled; the credits balance is exact after every step", async () => {
    await holds("meters");
  });

  it("the object holds a concurrency slot for exactly the granted requests not yet released", async () => {
    await holds("slots");
  });
});

describe("nothing lost when a request's take or a lease settle fails on every send: its settlements ride on (property)", () => {
  // A request whose every send failed got the failure mode (`limiter_error`): only the other properties hold.
  it("no window of use times holds more than N, nor a quota's hour more than its limit", async () => {
    await holds("windows", true);
  });

  it("each quota counts exactly what was served once every lease is settled; the credits balance is exact after every step", async () => {
    await holds("meters", true);
  });

  it("the object holds a concurrency slot for exactly the granted requests not yet released", async () => {
    await holds("slots", true);
  });
});
