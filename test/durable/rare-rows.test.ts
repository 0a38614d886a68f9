// What a key seen once in a while costs in storage (BENCHMARKS.md, "Production-shaped simulation"): every row SQLite
// reports written and every alarm set, counted at the object as the bench counts them (bench/http/counts.ts), through
// evictions and the idle alarm at a clock the test moves. A key's first grant writes its row (one per ring) and sets the
// idle alarm; a later grant writes its row only. Windows of a day or less are not stored (src/object/budgets.ts,
// UNSTORED_WINDOW_MS): the alarm reads the rows as counting a day after the newest, and the state is kept a day after
// that (src/object/key.ts, IDLE_KEEP_MS) — two days after the last grant. A key seen again within them writes no alarm
// afresh, and an alarm that finds it seen since re-arms for two days after its newest grant — about once every two days
// while the key is seen. A key seen less often than that is a first grant each time: two rows.
// The idle alarm's `deleteAll()` goes around `sql.exec`: neither this count nor the bench's sees what it deletes.

import { runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LimitSpec } from "../../src/core/index.ts";
import { UNSTORED_WINDOW_MS } from "../../src/object/budgets.ts";
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
  it("a first grant writes its row and the idle alarm, no window; a later one its row only, evicted or not, while the state is kept", async () => {
    const o = await counted();
    expect(await o.take()).toBe(true);
    // The schema's version costs no row: it is in the statement that made the meta table, made with the first row.
    // A minute's window is not stored.
    expect(o.written().sort()).toEqual(["alarm", "slot"]);
    expect(await o.stored()).toMatchObject({ schema: SCHEMA_VERSION, meta: [] });
    o.at(T0 + 5_000);
    expect(await o.take()).toBe(true);
    expect(o.written()).toEqual(["slot"]);
    // Evicted with its alarm pending: the new instance reads the alarm, and writes none.
    o.at(T0 + 10_000);
    await o.evict();
    expect(await o.take()).toBe(true);
    expect(o.written()).toEqual(["slot"]);
    // The alarm is set for a day after the first grant is read as counting: a day after it.
    expect(await o.alarmAt()).toBe(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    // Seen again an hour later: its state is kept, the grant writes its row only.
    const later = T0 + HOUR;
    o.at(later);
    await o.evict();
    expect(await o.take()).toBe(true);
    expect(o.written()).toEqual(["slot"]);
    // The alarm finds the key seen since (its last grant read as counting a day after it): it re-arms once.
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    await o.evict();
    expect(await o.runAlarm()).toBe(true);
    expect(o.written()).toEqual(["alarm"]);
    expect(await o.alarmAt()).toBe(later + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    // A day after that grant stops counting: the alarm deletes everything. The next grant is a first grant again.
    o.at(later + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    expect(await o.runAlarm()).toBe(true);
    expect(o.written()).toEqual([]);
    expect(await o.alarmAt()).toBeNull();
    o.at(later + 30_000 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    await o.evict();
    expect(await o.take()).toBe(true);
    expect(o.written().sort()).toEqual(["alarm", "slot"]);
  });

  it("the alarm is set for the time it finds when it fires, evicted or not: set once, and again only for grants since", async () => {
    const o = await counted();
    /** Every alarm row written, as the time it was set for. */
    const alarms: (number | null)[] = [];
    const written = async () => {
      for (const w of o.written()) if (w === "alarm") alarms.push(await o.alarmAt());
    };
    // Every 10 minutes for 3 days, every other grant in an instance evicted before it: the alarm set from the log in
    // memory and the one re-armed from the rows alone agree.
    let i = 0;
    for (let t = T0; t < T0 + 3 * DAY; t += 10 * MINUTE, i++) {
      for (let alarm = await o.alarmAt(); alarm !== null && alarm <= t; alarm = await o.alarmAt()) {
        o.at(alarm);
        if (i % 2 === 0) await o.evict();
        await o.runAlarm();
        await written();
      }
      o.at(t);
      if (i % 2 === 1) await o.evict();
      expect(await o.take()).toBe(true);
      await written();
    }
    // Set with the first grant for two days after it; fired then, re-armed for two days after the newest grant.
    expect(alarms).toEqual([
      T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS,
      T0 + 2 * DAY - 10 * MINUTE + UNSTORED_WINDOW_MS + IDLE_KEEP_MS,
    ]);
    // Fired early after an eviction, it finds two days after the newest grant; fired then, it deletes everything.
    const last = T0 + 3 * DAY - 10 * MINUTE;
    await o.evict();
    o.at(T0 + 3 * DAY);
    expect(await o.runAlarm()).toBe(true);
    expect(await o.alarmAt()).toBe(last + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.at(last + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    o.written();
    expect(await o.runAlarm()).toBe(true);
    expect(o.written()).toEqual([]);
    expect(await o.stored()).toMatchObject({ tables: [], alarm: null });
  });

  // [every, gap (ms), over, horizon (ms), rows and alarms, grants]
  const seen: [string, number, string, number, number, number][] = [
    // Seen again within two days of its last grant: a first grant's two rows once, then its row per grant, and an
    // alarm re-armed about once every two days.
    ["5 s", 5_000, "180 s", 180_000, 37, 36],
    ["10 s", 10_000, "180 s", 180_000, 19, 18],
    ["30 s", 30_000, "180 s", 180_000, 7, 6],
    ["70 s", 70_000, "180 s", 180_000, 4, 3],
    // 432 grants; an alarm with the first, re-armed when it fires two days later.
    ["10 min", 10 * MINUTE, "3 days", 3 * DAY, 434, 432],
    // 4 grants; an alarm with the first, re-armed when it fires at 2 and at 3.5 days.
    ["36 h", 36 * HOUR, "6 days", 6 * DAY, 7, 4],
    // Seen less often: its state is deleted two days after each grant, and each grant is a first one.
    ["3 days", 3 * DAY, "9 days", 9 * DAY, 6, 3],
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
