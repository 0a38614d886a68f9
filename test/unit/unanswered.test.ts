// Calls whose every send failed (src/client/unanswered.ts), against a namespace that records each call and answers as
// the test says, at a clock the test moves: when they are sent again (a step after, at once when their key answers,
// as a probe while it is known down, never 30 s after the first send), what ends them (an answer; a refusal, logged),
// the bound on how many are kept, and what goes back of a take applied for a request that got its failure mode.
import { afterEach, describe, expect, it, vi } from "vitest";
import { Circuit } from "../../src/client/circuit.ts";
import { RESEND_WITHIN_MS } from "../../src/client/policy.ts";
import type { GrantRecord } from "../../src/client/result.ts";
import { RESEND_STEP_MS, type Unanswered, UnansweredCalls } from "../../src/client/unanswered.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig } from "../../src/config/types.ts";
import type { Decision } from "../../src/core/decision.ts";
import type { LimiterNamespace } from "../../src/protocol.ts";

const T0 = 1_800_000_000_000;
const limits = [{ limit: 10, windowMs: 60_000 }];

/** A grant as the object answers it: `cost` recorded at T0, with a lease of `lease` units. */
const grant = (cost: number, lease = 0): Decision =>
  ({
    allowed: true,
    neverAllowed: false,
    cost,
    now: T0,
    retryAfterMs: 0,
    blockedUntil: T0,
    limits: [],
    lease: lease > 0 ? { units: lease, lifetimeMs: 5_000, recordedAt: [T0 + 5_000] } : null,
    recordedAt: [T0],
  }) as Decision;

function setup(answer: (method: string, args: unknown[]) => unknown = () => 0) {
  let now = T0;
  const sent: { method: string; args: unknown[] }[] = [];
  const refunds: GrantRecord[] = [];
  const probes: string[] = [];
  const logs: { event: string; name: string; message: string }[] = [];
  const stub = new Proxy(
    {},
    {
      get:
        (_, method: string) =>
        async (...args: unknown[]) => {
          sent.push({ method, args });
          const out = answer(method, args);
          if (out instanceof Error) throw out;
          return out;
        },
    },
  );
  const ns = { getByName: () => stub } as unknown as LimiterNamespace;
  const config = parseLimiterConfig({ limits: [{ limit: 10, window: "1m" }] }, "test") as LimiterConfig;
  const circuit = new Circuit(config.objectTimeoutMs);
  let ids = 0;
  const calls = new UnansweredCalls({
    config,
    now: () => now,
    circuit,
    callId: () => `id-${++ids}`,
    refund: async (_, g) => {
      refunds.push(g);
      return true;
    },
    probe: (u) => void probes.push(u.name),
    log: (event, name, e) => void logs.push({ event, name, message: (e as Error).message }),
  });
  const pending: Promise<unknown>[] = [];
  const bg = { waitUntil: (p: Promise<unknown>) => void pending.push(p) };
  const settled = async () => {
    while (pending.length > 0) await pending.shift();
  };
  const settle = [{ recordedAt: [T0 + 5_000], issuedAt: T0, used: 0, lastUseMs: 0, unused: 3 }];
  const of = (name: string, extra: Partial<Unanswered> = {}): Unanswered => ({
    ns,
    name,
    limits,
    settle,
    call: `call-${name}`,
    sentAt: now,
    ...extra,
  });
  return {
    calls,
    circuit,
    sent,
    refunds,
    probes,
    logs,
    bg,
    settled,
    of,
    advance: (ms: number) => {
      now += ms;
    },
    now: () => now,
  };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("when an unanswered call is sent again", () => {
  it("a step after it failed, as a settle with its own id; then never again once answered", async () => {
    const t = setup();
    t.calls.add(t.of("a"));
    t.advance(RESEND_STEP_MS - 1);
    t.calls.resend(t.bg);
    expect(t.sent).toHaveLength(0);
    t.advance(1);
    t.calls.resend(t.bg);
    await t.settled();
    expect(t.sent.map((s) => [s.method, s.args[2]])).toEqual([["settle", "call-a"]]);
    expect(t.sent[0]?.args[1]).toEqual(t.of("a").settle);
    expect(t.calls.size).toBe(0);
    t.advance(RESEND_STEP_MS);
    t.calls.resend(t.bg);
    expect(t.sent).toHaveLength(1);
  });

  it("at once, every one of a key, when its object answers; not another key's", async () => {
    const t = setup();
    t.calls.add(t.of("a"));
    t.calls.add(t.of("a", { call: "second" }));
    t.calls.add(t.of("b"));
    t.calls.resend(t.bg, "a");
    await t.settled();
    expect(t.sent.map((s) => s.args[2])).toEqual(["call-a", "second"]);
    expect(t.calls.size).toBe(1);
  });

  it("not while a send is out", async () => {
    let release: () => void = () => {};
    const t = setup(() => new Promise((resolve) => (release = () => resolve(0))));
    t.calls.add(t.of("a"));
    t.advance(RESEND_STEP_MS);
    t.calls.resend(t.bg);
    t.calls.resend(t.bg, "a");
    t.advance(RESEND_STEP_MS);
    t.calls.resend(t.bg);
    expect(t.sent).toHaveLength(1);
    release();
    await t.settled();
    expect(t.calls.size).toBe(0);
  });

  it("its key known down: probed when the probe is due, not called", async () => {
    const t = setup();
    t.circuit.failed("a", t.now(), false);
    t.calls.add(t.of("a"));
    t.advance(RESEND_STEP_MS);
    t.calls.resend(t.bg);
    expect(t.probes).toEqual(["a"]);
    expect(t.sent).toHaveLength(0);
    // The probe is out: no other.
    t.advance(RESEND_STEP_MS);
    t.calls.resend(t.bg);
    expect(t.probes).toEqual(["a"]);
  });

  it("an ambiguous failure: again a step later; a refusal: forgotten and logged", async () => {
    const lost = Object.assign(new Error("lost"), { retryable: true });
    let fail: Error = lost;
    const t = setup(() => fail);
    t.calls.add(t.of("a"));
    t.advance(RESEND_STEP_MS);
    t.calls.resend(t.bg);
    await t.settled();
    expect(t.calls.size).toBe(1);
    t.advance(RESEND_STEP_MS - 1);
    t.calls.resend(t.bg);
    expect(t.sent).toHaveLength(3);
    t.advance(1);
    fail = new RangeError("settle: expected a list of lease settlements");
    t.calls.resend(t.bg);
    await t.settled();
    expect(t.calls.size).toBe(0);
    expect(t.logs).toEqual([{ event: "settlement_lost", name: "a", message: fail.message }]);
  });

  it("never RESEND_WITHIN_MS after its first send: forgotten and logged", async () => {
    const t = setup();
    t.calls.add(t.of("a"));
    t.advance(RESEND_WITHIN_MS);
    t.calls.resend(t.bg);
    expect(t.sent).toHaveLength(0);
    expect(t.calls.size).toBe(0);
    expect(t.logs.map((l) => [l.event, l.name])).toEqual([["settlement_lost", "a"]]);
  });

  it("at most 10,000 kept: the oldest goes first, logged", () => {
    const t = setup();
    for (let i = 0; i < 10_000; i++) t.calls.add(t.of(`k${i}`));
    expect(t.logs).toHaveLength(0);
    t.calls.add(t.of("last"));
    expect(t.calls.size).toBe(10_000);
    expect(t.logs).toEqual([{ event: "settlement_lost", name: "k0", message: "too many unanswered calls" }]);
  });
});

describe("a request's take applied after all (its kept grant answers the claim)", () => {
  /** Lines logged as grant_unserved. */
  const unserved = (warn: { mock: { calls: unknown[][] } }) =>
    warn.mock.calls
      .map((c: unknown[]) => JSON.parse(String(c[0])) as Record<string, unknown>)
      .filter((l: Record<string, unknown>) => l.event === "grant_unserved");

  it("its cost refunded under the call's id, on its route; its lease's units ride back; its slot freed", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const t = setup((method) => (method === "settle" ? grant(2, 4) : true));
    const route = { name: "search", limits };
    t.calls.add(t.of("a", { take: { route, slot: "slot-1", served: false } }));
    t.calls.resend(t.bg, "a");
    await t.settled();
    expect(t.refunds).toEqual([{ id: "call-a", name: "a", limits, recordedAt: [T0], units: 2, at: T0, route }]);
    const settles = t.sent.filter((s) => s.method === "settle").map((s) => [s.args[1], s.args[2]]);
    expect(settles.at(-1)).toEqual([
      [{ recordedAt: [T0 + 5_000], issuedAt: T0, used: 0, lastUseMs: 0, unused: 4 }],
      expect.stringMatching(/^id-/),
    ]);
    expect(t.sent.filter((s) => s.method === "release").map((s) => s.args[0])).toEqual(["slot-1"]);
    await vi.waitFor(() =>
      expect(unserved(warn)).toEqual([
        { event: "grant_unserved", key_id: expect.any(String), units: 2, lease_units: 4, slot: true, failed: 0 },
      ]),
    );
  });

  it("served (failure_mode = open): its cost stays; no lease, no slot: nothing else; a failed give-back counted", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const t = setup((method) => (method === "settle" ? grant(3) : new RangeError("no")));
    t.calls.add(t.of("a", { take: { served: true } }));
    t.calls.resend(t.bg, "a");
    await t.settled();
    expect(t.refunds).toEqual([]);
    expect(t.sent.map((s) => s.method)).toEqual(["settle"]);
    await vi.waitFor(() => expect(unserved(warn)).toHaveLength(1));
    expect(unserved(warn)[0]).toMatchObject({ units: 0, lease_units: 0, slot: false, failed: 0 });
    const f = setup((method) => (method === "settle" ? grant(1) : new RangeError("no")));
    f.calls.add(f.of("b", { take: { slot: "s", served: false } }));
    f.calls.resend(f.bg, "b");
    await f.settled();
    await vi.waitFor(() => expect(unserved(warn).at(-1)).toMatchObject({ units: 1, slot: true, failed: 1 }));
  });

  it("no give-back when the answer is no grant, or the call was no take", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const refused = setup(() => ({ ...grant(2), allowed: false }));
    refused.calls.add(refused.of("a", { take: { served: false } }));
    refused.calls.resend(refused.bg, "a");
    const settled = setup(() => grant(2, 4));
    settled.calls.add(settled.of("a"));
    settled.calls.resend(settled.bg, "a");
    const count = setup(() => 3);
    count.calls.add(count.of("a", { take: { served: false } }));
    count.calls.resend(count.bg, "a");
    await Promise.all([refused.settled(), settled.settled(), count.settled()]);
    await new Promise((resolve) => setTimeout(resolve, 10));
    for (const t of [refused, settled, count]) {
      expect(t.refunds).toEqual([]);
      expect(t.sent.map((s) => s.method)).toEqual(["settle"]);
    }
    expect(unserved(warn)).toEqual([]);
  });
});
