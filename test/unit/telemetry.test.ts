// Telemetry in Node: key ids, the data point layout, and denial logs throttled per key (time from the event).
import { createHash } from "node:crypto";
import { afterEach, describe, expect, it, vi } from "vitest";
import { keyId } from "../../src/base/log.ts";
import {
  type DataPoint,
  DENIAL_LOG_INTERVAL_MS,
  type DecisionRecord,
  dataPoint,
  recordDecision,
} from "../../src/pipeline/telemetry.ts";

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
    route: null,
    refusedBy: "key",
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
  it("index: key id; blobs: reason, plan, outcome, violated, kind, route, refused by; doubles: cost, allowed, wait", () => {
    expect(dataPoint(NAME, event(), "abc")).toEqual({
      indexes: ["abc"],
      blobs: ["over_limit", "live", "denied", "per-second", "key", "", "key"],
      doubles: [1, 0, 1500],
    });
    expect(dataPoint(NAME, event({ route: "search", refusedBy: "ip" }), "abc").blobs).toEqual([
      "over_limit",
      "live",
      "denied",
      "per-second",
      "key",
      "search",
      "ip",
    ]);
    // The kind of a named limiter's object, and of a plan's own address budget.
    expect(dataPoint("api/key:k", event(), "a").blobs[4]).toBe("key");
    expect(dataPoint("api/addr.team:192.0.2.1", event(), "a").blobs[4]).toBe("addr");
    expect(dataPoint("preflight:2001:db8::/56", event(), "a").blobs[4]).toBe("preflight");
    expect(
      dataPoint(NAME, event({ reason: "too_costly", retryAfterMs: Number.POSITIVE_INFINITY }), "a").doubles,
    ).toEqual([1, 0, -1]);
    expect(
      dataPoint(
        "ip:1.2.3.4",
        event({ reason: "leased", allowed: true, retryAfterMs: 0, refused: [], refusedBy: null }),
        "a",
      ),
    ).toEqual({ indexes: ["a"], blobs: ["leased", "live", "allowed", "", "ip", "", ""], doubles: [1, 1, 0] });
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

describe("recordDecision: what is logged", () => {
  const linesOf = (spy: { mock: { calls: unknown[][] } }) => spy.mock.calls.map((c) => JSON.parse(String(c[0])));

  it("a refusal: one denied line with the key only as its key_id, every refusing limit named", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const name = `key:${crypto.randomUUID()}`;
    await recordDecision(
      {},
      name,
      event({ refused: ["per-second", "per-minute"], retryAfterMs: Number.POSITIVE_INFINITY }),
    );
    expect(linesOf(log)).toEqual([
      {
        event: "denied",
        reason: "over_limit",
        plan: "live",
        key_id: await keyId(name),
        cost: 1,
        violated: ["per-second", "per-minute"],
        retry_after_ms: null,
        suppressed: 0,
      },
    ]);
  });

  it("a refusal by the address or the account budget says which (refused_by); the key's own says nothing", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    for (const refusedBy of ["ip", "account", "key"] as const) {
      await recordDecision({}, `key:${crypto.randomUUID()}`, event({ refusedBy }));
    }
    expect(linesOf(log).map((l) => l.refused_by)).toEqual(["ip", "account", undefined]);
  });

  it("shadow mode's pass over the limits is a shadow_deny line; grants and the limiter's own failures are none", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const points: DataPoint[] = [];
    const dataset = { LIMITER_ANALYTICS: { writeDataPoint: (p: DataPoint) => void points.push(p) } };
    const name = () => `key:${crypto.randomUUID()}`;
    await recordDecision({}, name(), event({ allowed: true, reason: "shadow" }));
    await recordDecision(dataset, name(), event({ allowed: true, reason: "granted", refused: [] }));
    await recordDecision(dataset, name(), event({ reason: "limiter_timeout", refused: [] }));
    await recordDecision(dataset, name(), event({ reason: "limiter_error", refused: [] }));
    expect(linesOf(log).map((l) => [l.event, l.reason])).toEqual([["shadow_deny", "shadow"]]);
    expect(points.map((p) => [p.blobs[0], p.blobs[2], p.blobs[3]])).toEqual([
      ["granted", "allowed", ""],
      ["limiter_timeout", "denied", ""],
      ["limiter_error", "denied", ""],
    ]);
  });

  it("nothing to log and no dataset: the key is not even hashed", async () => {
    const digest = vi.spyOn(crypto.subtle, "digest");
    await recordDecision({}, `key:${crypto.randomUUID()}`, event({ allowed: true, reason: "granted", refused: [] }));
    expect(digest).not.toHaveBeenCalled();
  });

  it("an analytics failure that is not an Error is logged as unknown", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const broken = {
      writeDataPoint: () => {
        throw "quota";
      },
    };
    await recordDecision({ LIMITER_ANALYTICS: broken }, NAME, event({ allowed: true, reason: "granted", refused: [] }));
    expect(JSON.parse(String(error.mock.calls[0]?.[0]))).toEqual({
      event: "analytics_error",
      message: "unknown error",
    });
  });
});

describe("bounded memory", () => {
  it("keyId hashes a name once while it is cached; the cache empties when full", async () => {
    const digest = vi.spyOn(crypto.subtle, "digest");
    const first = `key:${crypto.randomUUID()}`;
    await keyId(first);
    await keyId(first);
    expect(digest).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 10_000; i++) await keyId(`key:fill-${i}`);
    digest.mockClear();
    await keyId(first);
    expect(digest).toHaveBeenCalledTimes(1);
  });

  it("the denial log's per-key memory empties when full: a key logs again", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const name = `key:${crypto.randomUUID()}`;
    const t = 9_000_000;
    await recordDecision({}, name, event({ at: t }));
    for (let i = 0; i < 10_000; i++) await recordDecision({}, `key:flood-${i}`, event({ at: t }));
    log.mockClear();
    await recordDecision({}, name, event({ at: t + 1 }));
    expect(log).toHaveBeenCalledTimes(1);
  });
});
