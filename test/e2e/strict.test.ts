// Strictness judged where it matters, at the origin: real HTTP clients → wrangler dev (workerd) → the recording
// Node origin. Every sliding window of the origin's arrival times holds at most N (allowing only the measured
// send-to-arrival latency), grants reach ≥ 95% of what an exact limiter allows, bursts grant exactly N, keys are
// isolated, and Retry-After is honest.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SlidingLog } from "../../src/core/index.ts";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { maxInWindow } from "../support/window.ts";

let origin: Origin;
let limiter: Limiter;
let state: Awaited<ReturnType<typeof tempDir>>;

// One config for the file; each test uses its own plan (by key prefix) and fresh keys.
const RATE_LIMIT = {
  limits: [{ limit: 1000, window: "1m" }],
  plans: [
    {
      name: "seq",
      key_prefix: "seq_",
      limits: [
        { limit: 10, window: "500ms" },
        { limit: 40, window: "3s" },
      ],
    },
    { name: "conc", key_prefix: "conc_", limits: [{ limit: 20, window: "1s" }] },
    { name: "burst", key_prefix: "burst_", limits: [{ limit: 25, window: "1m" }] },
    { name: "iso", key_prefix: "iso_", limits: [{ limit: 5, window: "1m" }] },
    { name: "retry", key_prefix: "retry_", limits: [{ limit: 3, window: "2s" }] },
  ],
};
const SPECS = {
  seq: [
    { limit: 10, windowMs: 500 },
    { limit: 40, windowMs: 3000 },
  ],
  conc: [{ limit: 20, windowMs: 1000 }],
};

beforeAll(async () => {
  origin = await startOrigin();
  state = await tempDir("limiter-e2e-");
  limiter = await startLimiter({ origin: origin.url, rateLimit: RATE_LIMIT, persistTo: state.path });
});

afterAll(async () => {
  await limiter?.stop();
  await origin?.close();
  await state?.cleanup();
});

const key = (prefix: string) => `${prefix}_${crypto.randomUUID()}`;

interface Sent {
  id: number;
  sentAt: number;
  status: number;
}

/** Sends requests on `k` from `clients` concurrent loops for `durationMs`; each request has a unique id. */
async function load(k: string, clients: number, durationMs: number): Promise<Sent[]> {
  const sent: Sent[] = [];
  let next = 0;
  const end = Date.now() + durationMs;
  const client = async () => {
    while (Date.now() < end) {
      const id = next++;
      const sentAt = Date.now();
      const response = await fetch(`${limiter.url}/load?id=${id}`, { headers: { "x-api-key": k } });
      await response.arrayBuffer();
      sent.push({ id, sentAt, status: response.status });
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  return sent;
}

/**
 * Judges a load run at the origin. A grant decided at d arrives at a ≥ d, and d ≥ its send time s, so
 * d ∈ [a − J, a] with J = max(a − s). Arrivals in any window of length W − J were therefore decided inside
 * one window of length W: at most N of them, if the limiter is exact.
 */
function judge(k: string, sent: Sent[], specs: { limit: number; windowMs: number }[]) {
  const arrivals = origin.arrivals.filter((a) => a.headers["x-api-key"] === k);
  const sentById = new Map(sent.map((s) => [s.id, s]));
  let jitter = 0;
  for (const a of arrivals) {
    const id = Number(new URL(a.url, "http://x").searchParams.get("id"));
    const s = sentById.get(id);
    if (!s) throw new Error(`arrival without a request: ${a.url}`);
    jitter = Math.max(jitter, a.at - s.sentAt);
  }
  const exact = new SlidingLog(specs);
  let ideal = 0;
  for (const s of [...sent].sort((x, y) => x.sentAt - y.sentAt)) if (exact.decide(s.sentAt, 1).allowed) ideal += 1;
  const windows = specs.map((l) => ({
    ...l,
    shrunk: l.windowMs - jitter,
    max: maxInWindow(
      arrivals.map((a) => a.at),
      l.windowMs - jitter,
    ),
  }));
  return { arrivals: arrivals.length, granted: sent.filter((s) => s.status === 200).length, jitter, ideal, windows };
}

describe("strictness at the origin", () => {
  it.each([
    ["sequential load well above the limits", "seq", 1, SPECS.seq],
    ["concurrent load from 8 clients on one key", "conc", 8, SPECS.conc],
  ] as const)("%s: no window over N, ≥ 95% of an exact limiter", async (label, prefix, clients, specs) => {
    const k = key(prefix);
    const sent = await load(k, clients, 4000);
    const j = judge(k, sent, [...specs]);
    console.info(label, JSON.stringify({ requests: sent.length, ...j }));
    expect(sent.every((s) => s.status === 200 || s.status === 429)).toBe(true);
    expect(sent.length).toBeGreaterThan(j.ideal * 2);
    expect(j.arrivals).toBe(j.granted);
    for (const w of j.windows) expect(w.max).toBeLessThanOrEqual(w.limit);
    expect(j.granted).toBeGreaterThanOrEqual(Math.floor(0.95 * j.ideal));
  });

  it("a concurrent burst inside one window grants exactly N", async () => {
    const k = key("burst");
    const statuses = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const r = await fetch(`${limiter.url}/burst?id=${i}`, { headers: { "x-api-key": k } });
        await r.arrayBuffer();
        return r.status;
      }),
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(25);
    expect(statuses.filter((s) => s === 429)).toHaveLength(75);
    expect(origin.arrivals.filter((a) => a.headers["x-api-key"] === k)).toHaveLength(25);
  });

  it("keys are isolated: exhausting one leaves another untouched", async () => {
    const [a, b] = [key("iso"), key("iso")];
    const statusOf = async (k: string) => {
      const r = await fetch(`${limiter.url}/iso`, { headers: { "x-api-key": k } });
      await r.arrayBuffer();
      return r.status;
    };
    const aStatuses = [];
    for (let i = 0; i < 8; i++) aStatuses.push(await statusOf(a));
    expect(aStatuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    const bStatuses = [];
    for (let i = 0; i < 6; i++) bStatuses.push(await statusOf(b));
    expect(bStatuses).toEqual([200, 200, 200, 200, 200, 429]);
  });
});

describe("Retry-After is honest", () => {
  it("retrying before retry_after_ms still fails; waiting Retry-After succeeds; it overstates by < 1 s", async () => {
    const k = key("retry");
    const get = () => fetch(`${limiter.url}/retry`, { headers: { "x-api-key": k } });
    for (let i = 0; i < 3; i++) expect((await get()).status).toBe(200);
    const denied = await get();
    const receivedAt = Date.now();
    expect(denied.status).toBe(429);
    const retryAfter = Number(denied.headers.get("Retry-After"));
    const body = (await denied.json()) as { retry_after_ms: number };
    expect(retryAfter).toBe(Math.ceil(body.retry_after_ms / 1000));
    expect(retryAfter * 1000 - body.retry_after_ms).toBeLessThan(1000);

    // Shortly before the exact time the request still fails: the wait was needed.
    await new Promise((r) => setTimeout(r, Math.max(0, body.retry_after_ms - 300)));
    const early = await get();
    await early.arrayBuffer();
    expect(early.status).toBe(429);

    // After the advertised whole seconds it passes.
    await new Promise((r) => setTimeout(r, Math.max(0, receivedAt + retryAfter * 1000 - Date.now())));
    const later = await get();
    await later.arrayBuffer();
    expect(later.status).toBe(200);
  });
});
