// The isolate's own logs of its keys for failure_mode = "local" (src/client/alone.ts): a key's budget and its routes'
// decided together, one report per key out at a time, and the bounds on how many logs an isolate keeps.

import { describe, expect, it } from "vitest";
import { type AloneBudgets, AloneLogs } from "../../src/client/alone.ts";
import type { LimitSpec } from "../../src/core/index.ts";

const T0 = 1_800_000_000_000;
const LIMITS: LimitSpec[] = [{ limit: 5, windowMs: 60_000 }];
const SEARCH = { name: "search", limits: [{ limit: 2, windowMs: 60_000 }] };
const key = (name = "key:a", route: AloneBudgets["route"] = null): AloneBudgets => ({ name, limits: LIMITS, route });

describe("AloneLogs", () => {
  it("a route's request fits the key's budget and the route's, and is counted in both or neither", () => {
    const logs = new AloneLogs(1);
    expect(logs.take(key("key:a", SEARCH), T0, 1).decision.allowed).toBe(true);
    expect(logs.take(key("key:a", SEARCH), T0, 1).decision.allowed).toBe(true);
    const refused = logs.take(key("key:a", SEARCH), T0, 1).decision;
    expect(refused.limits.map((l) => [l.remaining, l.exceeded])).toEqual([
      [3, false],
      [0, true],
    ]);
    // The refused one was counted in neither: 3 more fit the key's budget alone.
    expect(logs.check(key(), T0, 3).allowed).toBe(true);
    expect(logs.check(key(), T0, 4).allowed).toBe(false);
  });

  it("saw counts grants made with the object's word in the key's budget and the route's, never reported", () => {
    const logs = new AloneLogs(1);
    logs.saw(key("key:a", SEARCH), T0, 2);
    expect(logs.check(key("key:a", SEARCH), T0 + 10, 1).allowed).toBe(false);
    expect(logs.pending("key:a")).toBe(false);
    expect(logs.report("key:a", T0 + 10)).toBeNull();
  });

  it("reports a key's grants made alone per budget, only budgets with some, one report out at a time", () => {
    const logs = new AloneLogs(1);
    expect(logs.pending("key:a")).toBe(false);
    expect(logs.report("key:a", T0)).toBeNull();
    logs.take(key("key:a", SEARCH), T0, 1);
    logs.take(key("key:a", { name: "other", limits: LIMITS }), T0 + 5, 2);
    expect(logs.pending("key:a")).toBe(true);
    const report = logs.report("key:a", T0 + 10);
    expect(report).toEqual({
      uses: [
        { ageMs: 10, units: 1 },
        { ageMs: 5, units: 2 },
      ],
      routes: [
        { budget: SEARCH, uses: [{ ageMs: 10, units: 1 }] },
        { budget: { name: "other", limits: LIMITS }, uses: [{ ageMs: 5, units: 2 }] },
      ],
    });
    // Out: none more, even for grants made since.
    logs.take(key(), T0 + 11, 1);
    expect(logs.report("key:a", T0 + 12)).toBeNull();
    logs.answered("key:a", true);
    // Only the one made since is left, in the key's budget alone.
    expect(logs.report("key:a", T0 + 20)).toEqual({ uses: [{ ageMs: 9, units: 1 }], routes: [] });
    logs.answered("key:a", false);
    expect(logs.pending("key:a")).toBe(true);
    logs.answered("key:b", true); // a key with no logs: nothing happens
  });

  it("settles a grant made alone once: unused units back in its key's budget and its route's, its debt queued in both", () => {
    const logs = new AloneLogs(1);
    const { reportedAt } = logs.take(key("key:a", SEARCH), T0, 2);
    expect(reportedAt).toEqual([T0, T0]);
    const grant = { id: "g1", name: "key:a", limits: LIMITS, route: SEARCH, alone: reportedAt };
    expect(logs.settle(grant, { unused: 1, debt: 0, queue: true }, T0 + 5)).toEqual({ returned: 1, owed: false });
    expect(logs.settle(grant, { unused: 1, debt: 3, queue: true }, T0 + 6)).toBeNull();
    const other = { ...grant, id: "g2" };
    expect(logs.settle(other, { unused: 0, debt: 3, queue: true }, T0 + 7)).toEqual({ returned: 0, owed: true });
    expect(logs.report("key:a", T0 + 10)).toEqual({
      uses: [
        { ageMs: 10, units: 1 },
        { ageMs: 3, units: 3 },
      ],
      routes: [
        {
          budget: SEARCH,
          uses: [
            { ageMs: 10, units: 1 },
            { ageMs: 3, units: 3 },
          ],
        },
      ],
    });
    // The debt counts here at once, in the route's budget too: its 2 reserved and 3 more, over its limit of 2.
    expect(logs.check(key("key:a", SEARCH), T0 + 10, 1).allowed).toBe(false);
  });

  it("a settle without queue leaves the debt to the caller; a key with no log here gives nothing back, queues nothing", () => {
    const logs = new AloneLogs(1);
    const { reportedAt } = logs.take(key(), T0, 2);
    const grant = { id: "g1", name: "key:a", limits: LIMITS, alone: reportedAt };
    expect(logs.settle(grant, { unused: 0, debt: 4, queue: false }, T0 + 1)).toEqual({ returned: 0, owed: false });
    expect(logs.report("key:a", T0 + 1)).toEqual({ uses: [{ ageMs: 1, units: 2 }], routes: [] });
    logs.answered("key:a", true);
    expect(logs.owe(grant, 4, T0 + 2)).toBe(true);
    expect(logs.report("key:a", T0 + 2)).toEqual({ uses: [{ ageMs: 0, units: 4 }], routes: [] });
    const elsewhere = { ...grant, id: "g2", name: "key:b" };
    expect(logs.settle(elsewhere, { unused: 1, debt: 4, queue: true }, T0 + 3)).toEqual({ returned: 0, owed: false });
    expect(logs.owe(elsewhere, 4, T0 + 3)).toBe(false);
    expect(logs.pending("key:b")).toBe(false);
  });

  it("forgets a settled grant's id once its longest window has passed since the settle", () => {
    const logs = new AloneLogs(1);
    const grant = { id: "g1", name: "key:a", limits: LIMITS, alone: [T0] };
    expect(logs.settle(grant, { unused: 0, debt: 0, queue: false }, T0)).not.toBeNull();
    expect(logs.settle(grant, { unused: 0, debt: 0, queue: false }, T0 + 59_999)).toBeNull();
    expect(logs.settle({ ...grant, id: "g2" }, { unused: 0, debt: 0, queue: false }, T0 + 60_000)).not.toBeNull();
    expect(logs.settle(grant, { unused: 0, debt: 0, queue: false }, T0 + 60_000)).not.toBeNull();
  });

  it("a report of a route's grants alone, the key's own having none", () => {
    const logs = new AloneLogs(1);
    logs.take(key("key:a", SEARCH), T0, 1);
    logs.report("key:a", T0);
    logs.answered("key:a", true);
    logs.take(key("key:a", SEARCH), T0 + 1, 1);
    logs.answered("key:a", true);
    expect(logs.pending("key:a")).toBe(true);
  });

  it("limits that change start the key's log afresh (a route's too)", () => {
    const logs = new AloneLogs(1);
    for (let i = 0; i < 5; i++) logs.take(key("key:a", SEARCH), T0, 1);
    const other: LimitSpec[] = [{ limit: 5, windowMs: 60_000 }];
    expect(logs.check({ name: "key:a", limits: other, route: null }, T0, 5).allowed).toBe(true);
    const route = { name: "search", limits: [{ limit: 2, windowMs: 60_000 }] };
    expect(logs.check({ name: "key:a", limits: other, route }, T0, 2).allowed).toBe(true);
  });

  it("keeps at most its bound of keys: the idle go first, then the least recently used, to half the bound", () => {
    const logs = new AloneLogs(1, { keys: 8, slots: 1_000_000 });
    for (let i = 0; i < 8; i++) logs.take(key(`key:${i}`), T0, 1);
    // key:0 used again: the most recent.
    logs.take(key("key:0"), T0, 1);
    expect(logs.size).toBe(8);
    logs.take(key("key:new"), T0, 1);
    // Over the bound, nothing idle: the least recently used go until half (4), then the new key.
    expect(logs.size).toBe(5);
    expect(["key:0", "key:5", "key:6", "key:7", "key:new"].map((k) => logs.pending(k))).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
    expect(logs.pending("key:1")).toBe(false);
    // A minute later every log is idle: all go before the next key is made.
    const later = new AloneLogs(1, { keys: 3, slots: 1_000_000 });
    for (let i = 0; i < 3; i++) later.saw(key(`key:${i}`), T0, 1);
    later.take(key("key:x"), T0 + 60_002, 1);
    expect(later.size).toBe(1);
  });

  it("keeps at most its bound of slots, counted every 256 new keys", () => {
    const logs = new AloneLogs(1, { keys: 100_000, slots: 200 });
    for (let i = 0; i < 255; i++) logs.take(key(`key:${i}`), T0, 1);
    expect(logs.size).toBe(255);
    logs.take(key("key:255"), T0, 1);
    // 255 logs of 9 slots each (a ring of 8 for a limit of 5, one grant made alone), over 200: the least recently
    // used go until at most 100 slots (11 logs), then the new key's is made.
    expect(logs.size).toBe(12);
    expect(logs.pending("key:255")).toBe(true);
    expect(logs.pending("key:254")).toBe(true);
  });
});
