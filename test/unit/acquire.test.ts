// A request's path in the client (src/client/acquire.ts), against the in-memory object (../support/store.ts) with one
// clock the test moves: which requests keep a lease entry (none with leases off, nor on a route with its own budget),
// a failed call's lease call cleared, and an object's grant while grants made alone wait to
// be reported.
import { describe, expect, it, vi } from "vitest";
import { MAX_SENDS } from "../../src/client/policy.ts";
import type { Route } from "../../src/config/types.ts";
import { setup } from "../support/store.ts";

describe("the requests that keep a lease entry", () => {
  it("none with leases off: every request is the object's", async () => {
    const t = setup({ leases: false });
    for (let i = 0; i < 3; i++) expect((await t.limit()).reason).toBe("granted");
    expect(t.client.leases.size).toBe(0);
    expect(t.store.count("take")).toBe(3);
  });

  it("none for a request on a route with its own budget: decided at the object with the key's limits", async () => {
    const t = setup({ routes: [{ name: "search", limits: [{ limit: 5, window: "1m" }] }] });
    const route = t.plan.routes[0] as Route;
    for (let i = 0; i < 3; i++) {
      await t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, route, bg: t.bg });
      await t.settle();
    }
    expect(t.client.leases.size).toBe(0);
    expect(t.store.count("take")).toBe(3);
    // The key's own requests lease.
    await t.limit();
    expect(t.client.leases.size).toBe(1);
  });
});

describe("a call that fails", () => {
  it("clears the key's lease call: the next request asks the object again, for a lease", async () => {
    const t = setup({ limits: [{ limit: 1_000, window: "1h" }], failure_mode: "open" });
    vi.spyOn(console, "error").mockImplementation(() => {});
    vi.spyOn(console, "warn").mockImplementation(() => {});
    for (let i = 0; i < 3; i++) {
      await t.limit();
      await t.settle();
    }
    // Spend what is held, the object failing every send meanwhile: the call out for the key fails.
    t.store.fail = { retryable: true };
    t.store.failures = Number.MAX_SAFE_INTEGER;
    const takes = () => t.store.count("take");
    const before = takes();
    while (takes() === before) {
      await t.limit();
      await t.settle();
    }
    expect(t.client.leases.get("key:a")?.call).toBeNull();
    t.store.fail = null;
    t.advance(10_000);
    await t.limit();
    await t.settle();
    await t.limit();
    await t.settle();
    const last = t.store.calls.filter((c) => c.method === "take").at(-1);
    expect(last?.ask?.leaseUnits).toBeGreaterThan(0);
  });
});

describe("failure_mode = local: an object's grant while grants made alone wait to be reported", () => {
  it("fits this isolate's log too: it is the object's grant", async () => {
    const t = setup({ failure_mode: "local", leases: false, limits: [{ limit: 10, window: "1m" }] });
    vi.spyOn(console, "error").mockImplementation(() => {});
    vi.spyOn(console, "warn").mockImplementation(() => {});
    let open: () => void = () => {};
    t.store.gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    // The first request's call is out, held at the object.
    const first = t.limit();
    t.store.gate = null;
    // The next one's every send fails: the key is down, and two requests are granted alone.
    t.store.fail = { retryable: true };
    t.store.failures = MAX_SENDS;
    expect((await t.limit()).reason).toBe("limiter_fallback");
    expect((await t.limit()).reason).toBe("limiter_fallback");
    open();
    expect(await first).toMatchObject({ allowed: true, reason: "granted" });
  });
});

describe("a refusal from the deny cache", () => {
  it("for a route's request shows the route's limits too, as the object's answer did", async () => {
    // The key's own limit refuses (the in-memory object decides a route's request on the key's log).
    const t = setup({
      leases: false,
      limits: [{ limit: 1, window: "1m" }],
      routes: [{ name: "search", limits: [{ limit: 5, window: "1m" }] }],
    });
    const route = t.plan.routes[0] as Route;
    const limit = () => t.client.limit({ ns: t.ns, name: "key:a", plan: t.plan, cost: 1, route, bg: t.bg });
    const granted = await limit();
    expect(granted.allowed).toBe(true);
    // The object's answer left nothing: the next request is refused here, without a call.
    const cached = await limit();
    expect(cached).toMatchObject({ allowed: false, reason: "cached_denial" });
    expect(t.store.count("take")).toBe(1);
    expect(cached.limits.map((l) => l.name)).toEqual(granted.limits.map((l) => l.name));
    expect(cached.limits.map((l) => l.name)).toContain("search");
  });
});
