// Settlements ride on until an answer acknowledges them (docs/design.md, "Nothing lost under faults"), against the
// in-memory object (../support/store.ts) with one clock the test moves: a call carrying lease settlements whose every
// send failed — a settle of its own, or a request's take — is sent again with the same id once its key's object answers
// or a step later, and the object applies it once, whether the lost sends had applied it or not; after the time a call
// may be sent again it is forgotten, and logged.
import { afterEach, describe, expect, it, vi } from "vitest";
import { DOWN_FIRST_MS } from "../../src/client/circuit.ts";
import { MAX_SENDS, RESEND_WITHIN_MS } from "../../src/client/policy.ts";
import { RESEND_STEP_MS } from "../../src/client/unanswered.ts";
import { setup } from "../support/store.ts";

/** A key with leases held here: five requests, each answered. */
async function leased() {
  const t = setup();
  for (let i = 0; i < 5; i++) {
    await t.limit();
    await t.settle();
  }
  const held = t.client.leases.get("key:a")?.held.reduce((n, h) => n + h.left, 0) ?? 0;
  expect(held).toBeGreaterThan(0);
  return { t, held };
}

/** What the key has left at its object (its log, as the object keeps it). */
const left = (t: ReturnType<typeof setup>) =>
  t.store.log("key:a", t.plan.limits ?? []).peek(t.store.now()).limits[0]?.remaining ?? 0;

/** The units given back by the settles sent, per send: [call id, units]. */
const settles = (t: ReturnType<typeof setup>) =>
  t.store.calls
    .filter((c) => c.method === "settle")
    .map((c) => [c.call, c.settle?.reduce((n, x) => n + x.unused, 0)] as const);

afterEach(() => {
  vi.restoreAllMocks();
});

describe("a settle whose every send failed is sent again with its id", () => {
  it("dropped before the object: applied when sent again a step later, by a request for another key", async () => {
    const { t, held } = await leased();
    const before = left(t);
    t.store.fail = { retryable: true };
    t.store.failures = MAX_SENDS;
    t.client.forget(t.ns, "key:a", t.bg);
    await t.settle();
    expect(settles(t)).toHaveLength(MAX_SENDS);
    const [[call]] = settles(t) as [[string, number]];
    // Not due yet: a request for another key sends nothing.
    t.advance(RESEND_STEP_MS - 1);
    await t.limit("key:b");
    await t.settle();
    expect(settles(t)).toHaveLength(MAX_SENDS);
    t.advance(1);
    await t.limit("key:b");
    await t.settle();
    expect(settles(t).at(-1)).toEqual([call, held]);
    expect(left(t)).toBe(before + held);
    // Answered: never sent again.
    t.advance(10 * RESEND_STEP_MS);
    await t.limit("key:b");
    await t.settle();
    expect(settles(t)).toHaveLength(MAX_SENDS + 1);
  });

  it("applied but every answer lost: sent again, the object answers from what it kept, the units given back once", async () => {
    const { t, held } = await leased();
    const before = left(t);
    t.store.lose = { retryable: true };
    t.store.losses = 1;
    t.store.fail = { retryable: true };
    t.store.failures = MAX_SENDS - 1;
    t.client.forget(t.ns, "key:a", t.bg);
    await t.settle();
    t.advance(RESEND_STEP_MS);
    await t.limit("key:b");
    await t.settle();
    const sent = settles(t);
    expect(new Set(sent.map(([call]) => call)).size).toBe(1);
    expect(sent.length).toBeGreaterThan(1);
    expect(left(t)).toBe(before + held);
  });

  it("sent again at once when its key's object answers a request", async () => {
    const { t, held } = await leased();
    t.store.fail = { retryable: true };
    t.store.failures = MAX_SENDS;
    t.client.forget(t.ns, "key:a", t.bg);
    await t.settle();
    const [[call]] = settles(t) as [[string, number]];
    await t.limit("key:a");
    await t.settle();
    expect(settles(t).at(-1)).toEqual([call, held]);
  });

  it("forgotten, and logged, once it may no longer be sent again", async () => {
    const { t } = await leased();
    const logged = vi.spyOn(console, "warn").mockImplementation(() => {});
    t.store.fail = { retryable: true };
    t.store.failures = MAX_SENDS;
    t.client.forget(t.ns, "key:a", t.bg);
    await t.settle();
    t.advance(RESEND_WITHIN_MS);
    await t.limit("key:b");
    await t.settle();
    expect(settles(t)).toHaveLength(MAX_SENDS);
    // The line names the key by its id, made asynchronously (src/base/log.ts, `keyId`).
    await vi.waitFor(() =>
      expect(logged.mock.calls.map((c) => String(c[0]))).toContainEqual(expect.stringContaining('"settlement_lost"')),
    );
  });
});

describe("a request's call carrying settlements, every send failed", () => {
  it("its settlements go again as a settle with the request's own call id", async () => {
    const t = setup({ limits: [{ limit: 40, window: "1m" }] });
    // Near the limit, every call settles the uses of the leases held.
    let sent = 0;
    while (t.store.calls.filter((c) => c.method === "take" && (c.ask?.settle?.length ?? 0) > 0).length === 0) {
      await t.limit();
      await t.settle();
      t.advance(50);
      if (++sent > 40) throw new Error("no take carried settlements");
    }
    // The next call out carrying settlements fails on every send.
    t.store.fail = { retryable: true };
    t.store.failures = MAX_SENDS;
    const takes = () => t.store.calls.filter((c) => c.method === "take");
    const n = takes().length;
    let r = await t.limit();
    while (takes().length === n) r = await t.limit();
    await t.settle();
    const failed = takes().slice(n);
    expect(failed).toHaveLength(MAX_SENDS);
    const carried = failed[0]?.ask?.settle ?? [];
    expect(r.allowed).toBe(true);
    expect(carried.length).toBeGreaterThan(0);
    // The key's object is known down: a step later a request for another key probes it (its probe due too), and the
    // probe's answer sends them.
    t.advance(RESEND_STEP_MS - 1);
    await t.limit("key:b");
    await t.settle();
    expect(t.store.count("recover")).toBe(0);
    t.advance(1);
    await t.limit("key:b");
    await t.settle();
    expect(t.store.count("recover")).toBe(1);
    const again = t.store.calls.filter((c) => c.method === "settle" && c.call === failed[0]?.ask?.call);
    expect(again.map((c) => c.settle)).toEqual([carried]);
  });
});

describe("a request's take whose every answer was lost, applied after all", () => {
  it.each(["closed", "local"] as const)(
    "failure_mode = %s: the request did not get the grant, so its units go back once the settle with its id answers",
    async (mode) => {
      const t = setup({ limits: [{ limit: 10, window: "1h" }], leases: false, failure_mode: mode });
      const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
      vi.spyOn(console, "error").mockImplementation(() => {});
      t.store.lose = { retryable: true };
      t.store.losses = MAX_SENDS;
      const r = await t.limit("key:a", 3);
      expect(r.reason).toBe(mode === "closed" ? "limiter_error" : "limiter_fallback");
      // Applied once: 3 of 10 counted at the object, for a request that did not get them.
      expect(left(t)).toBe(7);
      const [take] = t.store.calls;
      // Known down: a peek past the first interval probes it (reporting what was granted alone); its answer sends the
      // claim, whose answer gives the grant back.
      t.advance(DOWN_FIRST_MS);
      await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
      await vi.waitFor(() => expect(t.store.count("refund")).toBe(1));
      const claim = t.store.calls.find((c) => c.method === "settle");
      expect(claim?.call).toBe(take?.ask?.call);
      // Local: the 3 granted alone are reported and count; the take's 3, applied for nothing, went back.
      expect(left(t)).toBe(mode === "closed" ? 10 : 7);
      await vi.waitFor(() =>
        expect(warn.mock.calls.map((c) => String(c[0]))).toContainEqual(expect.stringContaining('"grant_unserved"')),
      );
    },
  );

  it("failure_mode = open: the request was served, so the grant stays counted", async () => {
    const t = setup({ limits: [{ limit: 10, window: "1h" }], leases: false, failure_mode: "open" });
    vi.spyOn(console, "warn").mockImplementation(() => {});
    vi.spyOn(console, "error").mockImplementation(() => {});
    t.store.lose = { retryable: true };
    t.store.losses = MAX_SENDS;
    expect(await t.limit("key:a", 3)).toMatchObject({ allowed: true, reason: "limiter_error" });
    t.advance(DOWN_FIRST_MS);
    await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    await vi.waitFor(() => expect(t.store.count("settle")).toBe(1));
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(t.store.count("refund")).toBe(0);
    expect(left(t)).toBe(7);
  });

  it("dropped before the object on every send: the settle with its id claims it, nothing to give back", async () => {
    const t = setup({ limits: [{ limit: 10, window: "1h" }], leases: false });
    vi.spyOn(console, "warn").mockImplementation(() => {});
    vi.spyOn(console, "error").mockImplementation(() => {});
    t.store.fail = { retryable: true };
    t.store.failures = MAX_SENDS;
    expect((await t.limit("key:a", 3)).reason).toBe("limiter_error");
    expect(left(t)).toBe(10);
    t.advance(DOWN_FIRST_MS);
    await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    await vi.waitFor(() => expect(t.store.count("settle")).toBe(1));
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(t.store.count("refund")).toBe(0);
    expect(left(t)).toBe(10);
    // Claimed: the take arriving now (late) is answered with the claim's answer and applies nothing.
    const [take] = t.store.calls;
    await t.ns.getByName("key:a").take(t.plan.limits ?? [], take?.ask as NonNullable<typeof take>["ask"] & object);
    expect(left(t)).toBe(10);
  });
});

describe("what goes back of a request's take applied after all", () => {
  /** The slots held at the key's object right after the lost call. */
  let heldBefore = 0;

  /** Loses every answer of the next call, then probes the key when due: the claim's answer gives back what it may. */
  async function lostThenClaimed(t: ReturnType<typeof setup>, cost: number) {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    vi.spyOn(console, "error").mockImplementation(() => {});
    t.store.lose = { retryable: true };
    t.store.losses = MAX_SENDS;
    const r = await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost, bg: t.bg, inFlight: true });
    // Applied at the object: its slot (when it takes one) is held there, by a request that never got it.
    heldBefore = t.store.slotsOf("key:a").heldAt(t.store.now());
    t.advance(DOWN_FIRST_MS);
    await t.client.peek({ ns: t.ns, name: "key:a", plan: t.plan });
    await vi.waitFor(() => expect(t.store.count("settle")).toBeGreaterThan(0));
    await t.settle();
    await new Promise((resolve) => setTimeout(resolve, 0));
    return r;
  }

  it("a lease granted with it: its units ride on back to the object, nothing lost", async () => {
    const t = setup({ limits: [{ limit: 1_000, window: "1h" }] });
    vi.spyOn(console, "warn").mockImplementation(() => {});
    vi.spyOn(console, "error").mockImplementation(() => {});
    let granted = 0;
    const limit = async () => {
      if ((await t.limit()).allowed) granted += 1;
      await t.settle();
    };
    for (let i = 0; i < 5; i++) await limit();
    // The next call out asking for a lease loses every answer, the object having granted it.
    t.store.lose = { retryable: true };
    t.store.losses = MAX_SENDS;
    const takes = () => t.store.calls.filter((c) => c.method === "take");
    const before = takes().length;
    while (takes().length === before) await limit();
    const lost = takes()[before];
    expect(lost?.ask?.leaseUnits).toBeGreaterThan(0);
    // Known down; past the first interval a request probes it, and the probe's answer sends the claim.
    t.advance(DOWN_FIRST_MS);
    await limit();
    await limit();
    const claim = t.store.calls.find((c) => c.method === "settle" && c.call === lost?.ask?.call);
    expect(claim).toBeDefined();
    // Every lease given back: the object counts exactly what was granted.
    t.client.forget(t.ns, "key:a", t.bg);
    await t.settle();
    await vi.waitFor(() => expect(left(t)).toBe(1_000 - granted));
  });

  it.each([
    ["closed", 5],
    ["open", 4],
  ] as const)(
    "failure_mode = %s: its slot is freed (and its cost kept only where the request was served)",
    async (mode, after) => {
      const t = setup({ limits: [{ limit: 5, window: "1h" }], concurrency: 1, leases: false, failure_mode: mode });
      await lostThenClaimed(t, 1);
      expect(heldBefore).toBe(1);
      await vi.waitFor(() => expect(t.store.slotsOf("key:a").heldAt(t.store.now())).toBe(0));
      expect(left(t)).toBe(after);
    },
  );
});
