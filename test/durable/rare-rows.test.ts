// What a key seen once in a while costs in storage (BENCHMARKS.md, "Production-shaped simulation": rare keys cost
// about two rows per grant): every row SQLite reports written and every alarm set, counted at the object as the bench
// counts them (bench/http/counts.ts), through evictions and the idle alarm at a clock the test moves. A grant writes
// its row (one per ring); a key's first grant after a quiet spell also writes its longest window (`meta`, read by the
// idle alarm after an eviction) and sets the idle alarm; an alarm that finds the key still active re-arms once.
// The idle alarm's `deleteAll()` goes around `sql.exec`: neither this count nor the bench's sees what it deletes.

import { runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LimitSpec } from "../../src/core/index.ts";
import { SCHEMA_VERSION } from "../../src/object/index.ts";
import type { TakeAsk } from "../../src/protocol.ts";
import { object, T0 } from "./object.ts";

/** One ring: both limits tick by the millisecond. */
const LIMITS: LimitSpec[] = [
  { limit: 100, windowMs: 1000 },
  { limit: 1000, windowMs: 60_000 },
];
/**
 * A rare key's ask from an isolate that has seen it again within ~5 s: a first lease sized from the log, which a key
 * seen this rarely does not get (at first sight an isolate asks for none: the same rows).
 */
const ASK: TakeAsk = { cost: 1, leaseUnits: 8, leaseMs: 2000, leaseLeadMs: 20, leaseFromLog: true, settle: [] };

/** A fresh key's object (test/durable/object.ts) counting its rows and alarms, asked as a rare key's isolate asks. */
async function counted() {
  const o = await object();
  return {
    at: o.at,
    evict: o.evict,
    stored: o.stored,
    take: async () => (await o.take(LIMITS, ASK.cost, ASK)).allowed,
    /** What was written since the last look. */
    written: o.writes,
    alarmAt: o.alarm,
    runAlarm: () => runDurableObjectAlarm(o.stub),
  };
}

describe("a rare key's rows", () => {
  it("a first grant writes its row, its window and the idle alarm; a later one its row only, evicted or not", async () => {
    const o = await counted();
    expect(await o.take()).toBe(true);
    // The schema's version costs no row: it is in the statement that made the meta table.
    expect(o.written().sort()).toEqual(["alarm", "meta", "slot"]);
    expect((await o.stored()).schema).toBe(SCHEMA_VERSION);
    o.at(T0 + 5_000);
    expect(await o.take()).toBe(true);
    expect(o.written()).toEqual(["slot"]);
    // Evicted with its alarm pending: the new instance reads the alarm and the window, and writes neither.
    o.at(T0 + 10_000);
    await o.evict();
    expect(await o.take()).toBe(true);
    expect(o.written()).toEqual(["slot"]);
    // The alarm at the first grant + 60 s finds the key active (its last grant counts until 70 s): it re-arms once.
    expect(await o.alarmAt()).toBe(T0 + 60_000);
    o.at(T0 + 60_000);
    await o.evict();
    expect(await o.runAlarm()).toBe(true);
    expect(o.written()).toEqual(["alarm"]);
    expect(await o.alarmAt()).toBe(T0 + 70_000);
    // Idle at 70 s: the alarm deletes everything. The next grant is a first grant again.
    o.at(T0 + 70_000);
    expect(await o.runAlarm()).toBe(true);
    expect(o.written()).toEqual([]);
    o.at(T0 + 100_000);
    await o.evict();
    expect(await o.take()).toBe(true);
    expect(o.written().sort()).toEqual(["alarm", "meta", "slot"]);
  });

  it.each([
    // [gap between requests (ms), rows and alarms over 180 s, grants]
    [5_000, 41, 36],
    [10_000, 23, 18],
    [30_000, 12, 6],
    [70_000, 9, 3],
  ])("every %i ms for 180 s: %i rows and alarms for %i grants", async (gap, rows, grants) => {
    const o = await counted();
    let granted = 0;
    let written = 0;
    for (let t = T0; t < T0 + 180_000; t += gap) {
      // The idle alarm runs at its time (between requests), in an instance evicted if it sat idle 10 s.
      const alarm = await o.alarmAt();
      if (alarm !== null && alarm <= t) {
        o.at(alarm);
        await o.evict();
        await o.runAlarm();
      }
      o.at(t);
      if (gap > 10_000) await o.evict();
      if (await o.take()) granted++;
      written += o.written().length;
    }
    expect(granted).toBe(grants);
    expect(written).toBe(rows);
  });
});
