// What a key seen once in a while costs in storage (BENCHMARKS.md, "Production-shaped simulation"): every row SQLite
// reports written and every alarm set, counted at the object as the bench counts them (bench/http/counts.ts), through
// evictions and the idle alarm at a clock the test moves. A key's first grant writes its row (one per ring), its
// longest window (`meta`, read by the idle alarm after an eviction) and sets the idle alarm; a later grant writes its
// row only. The state is kept a day after nothing in it counts (src/object/key.ts, IDLE_KEEP_MS): a key seen again
// within that day writes neither its window nor its alarm afresh, and an alarm that finds it seen since re-arms for a
// day after it stops counting — about once a day while the key is seen. A key seen less often than that is a first
// grant each time: three rows.
// The idle alarm's `deleteAll()` goes around `sql.exec`: neither this count nor the bench's sees what it deletes.

import { runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LimitSpec } from "../../src/core/index.ts";
import { SCHEMA_VERSION } from "../../src/object/index.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
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

/** Ms in a minute, an hour and a day, for the table below. */
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

describe("a rare key's rows", () => {
  it("a first grant writes its row, its window and the idle alarm; a later one its row only, evicted or idle for less than a day", async () => {
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
    // The alarm is set for a day after the first grant's window.
    expect(await o.alarmAt()).toBe(T0 + 60_000 + IDLE_KEEP_MS);
    // Idle from 70 s on, seen again an hour later: its state is kept, the grant writes its row only.
    const later = T0 + HOUR;
    o.at(later);
    await o.evict();
    expect(await o.take()).toBe(true);
    expect(o.written()).toEqual(["slot"]);
    // The alarm finds the key seen since (its last grant counted until an hour and 60 s): it re-arms once.
    o.at(T0 + 60_000 + IDLE_KEEP_MS);
    await o.evict();
    expect(await o.runAlarm()).toBe(true);
    expect(o.written()).toEqual(["alarm"]);
    expect(await o.alarmAt()).toBe(later + 60_000 + IDLE_KEEP_MS);
    // A day after it went idle: the alarm deletes everything. The next grant is a first grant again.
    o.at(later + 60_000 + IDLE_KEEP_MS);
    expect(await o.runAlarm()).toBe(true);
    expect(o.written()).toEqual([]);
    expect(await o.alarmAt()).toBeNull();
    o.at(later + 90_000 + IDLE_KEEP_MS);
    await o.evict();
    expect(await o.take()).toBe(true);
    expect(o.written().sort()).toEqual(["alarm", "meta", "slot"]);
  });

  // [every, gap (ms), over, horizon (ms), rows and alarms, grants]
  const seen: [string, number, string, number, number, number][] = [
    // Seen again within a day of its last grant: a first grant's three rows once, then its row per grant, and an
    // alarm re-armed about once a day.
    ["5 s", 5_000, "180 s", 180_000, 38, 36],
    ["10 s", 10_000, "180 s", 180_000, 20, 18],
    ["30 s", 30_000, "180 s", 180_000, 8, 6],
    ["70 s", 70_000, "180 s", 180_000, 5, 3],
    // 432 grants; a meta row and an alarm with the first; an alarm re-armed a day after each of the first two days.
    ["10 min", 10 * MINUTE, "3 days", 3 * DAY, 436, 432],
    // Seen less often: its state is deleted a day after each grant stops counting, and each grant is a first one.
    ["2 days", 2 * DAY, "6 days", 6 * DAY, 9, 3],
  ];
  for (const [every, gap, over, horizon, rows, grants] of seen) {
    it(`every ${every} for ${over}: ${rows} rows and alarms for ${grants} grants`, async () => {
      const o = await counted();
      let granted = 0;
      let written = 0;
      for (let t = T0; t < T0 + horizon; t += gap) {
        // Every idle alarm due runs at its time (between requests), in an instance evicted if it sat idle 10 s.
        for (let alarm = await o.alarmAt(); alarm !== null && alarm <= t; alarm = await o.alarmAt()) {
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
  }
});
