// Telemetry in Node: key ids, the data point layout, and denial logs throttled per key (time from the event).
import { createHash } from "node:crypto";
import { afterEach, describe, expect, it, vi } from "vitest";
import { DENIAL_LOG_INTERVAL_MS, type DecisionRecord, dataPoint, keyId, recordDecision } from "../../src/telemetry.ts";

afterEach(() => {
  vi.restoreAllMocks();
});

const NAME = "key:live_abc";

/** A decision refused by its per-second limit (`refused: []`: none refused it). */
function event(over: Partial<DecisionRecord> & { refused?: string[] } = {}): DecisionRecord {
  const { refused = ["per-second"], ...rest } = over;
  const limits = ["per-second", "per-minute"].map((name, i) => ({
    name,
    limit: 10 * (i + 1),
    windowMs: 1000 * 60 ** i,
    remaining: 0,
    resetMs: 1500,
    exceeded: refused.includes(name),
  }));
  return {
    plan: "live",
    cost: 1,
    reason: "over_limit",
    allowed: false,
    at: 1_000_000,
    retryAfterMs: 1500,
    limits,
    ...rest,
  };
}

describe("keyId", () => {
  it("is the first 12 hex digits of the SHA-256 of the object name, as README's shell line computes it", async () => {
    const expected = createHash("sha256").update("key:live_abc").digest("hex").slice(0, 12);
    expect(await keyId("key:live_abc")).toBe(expected);
    expect(await keyId("key:live_abc")).toBe(expected); // cached
  });
});

describe("dataPoint", () => {
  it("index: key id; blobs: reason, plan, outcome, violated, kind; doubles: cost, allowed, wait", () => {
    expect(dataPoint(NAME, event(), "abc")).toEqual({
      indexes: ["abc"],
      blobs: ["over_limit", "live", "denied", "per-second", "key"],
      doubles: [1, 0, 1500],
    });
    expect(
      dataPoint(NAME, event({ reason: "too_costly", retryAfterMs: Number.POSITIVE_INFINITY }), "a").doubles,
    ).toEqual([1, 0, -1]);
    expect(
      dataPoint("ip:1.2.3.4", event({ reason: "leased", allowed: true, retryAfterMs: 0, refused: [] }), "a"),
    ).toEqual({ indexes: ["a"], blobs: ["leased", "live", "allowed", "", "ip"], doubles: [1, 1, 0] });
  });
});

describe("recordDecision", () => {
  it("logs a key's denials at most once per interval, then says how many it left out", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const name = `key:${crypto.randomUUID()}`;
    const t = 5_000_000;
    for (const at of [t, t + 10, t + 500, t + DENIAL_LOG_INTERVAL_MS - 1, t + DENIAL_LOG_INTERVAL_MS]) {
      await recordDecision({}, name, event({ at }));
    }
    await recordDecision({}, name, event({ at: t + 5000, allowed: true, reason: "granted", refused: [] }));
    const lines = log.mock.calls.map((c) => JSON.parse(String(c[0])));
    expect(lines.map((l) => l.suppressed)).toEqual([0, 3]);
    expect(JSON.stringify(lines)).not.toContain(name.slice(4));
  });

  it("writes one data point per decision when a dataset is bound, and survives a failing one", async () => {
    vi.spyOn(console, "log").mockImplementation(() => {});
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const points: unknown[] = [];
    await recordDecision(
      { LIMITER_ANALYTICS: { writeDataPoint: (p) => points.push(p) } },
      NAME,
      event({ allowed: true }),
    );
    expect(points).toHaveLength(1);
    const broken = {
      writeDataPoint: () => {
        throw new Error("quota");
      },
    };
    await recordDecision({ LIMITER_ANALYTICS: broken }, NAME, event({ allowed: true }));
    expect(JSON.parse(String(error.mock.calls[0]?.[0]))).toEqual({ event: "analytics_error", message: "quota" });
  });
});
