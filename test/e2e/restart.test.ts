// The runtime restarts under real HTTP: wrangler dev (workerd) is stopped — gracefully, or killed with SIGKILL — and
// started again on the same persistence directory. Each key's log comes back from the object's SQLite storage:
// an exhausted key stays exhausted, a half-used key gets exactly the rest, and nothing is granted twice (counted at
// the recording origin and by the clients).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { crashLimiter, type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";

const RATE_LIMIT = {
  limits: [{ limit: 1000, window: "1m" }],
  plans: [
    { name: "five", key_prefix: "five_", limits: [{ limit: 5, window: "1h" }] },
    { name: "ten", key_prefix: "ten_", limits: [{ limit: 10, window: "1h" }] },
  ],
};

let origin: Origin;
const running = new Set<Limiter>();
const dirs: Awaited<ReturnType<typeof tempDir>>[] = [];

beforeAll(async () => {
  origin = await startOrigin();
});

afterAll(async () => {
  for (const limiter of running) await limiter.stop();
  await origin?.close();
  for (const dir of dirs) await dir.cleanup();
});

async function persistDir(): Promise<string> {
  const dir = await tempDir("limiter-restart-");
  dirs.push(dir);
  return dir.path;
}

async function start(persistTo: string): Promise<Limiter> {
  const limiter = await startLimiter({ origin: origin.url, rateLimit: RATE_LIMIT, persistTo });
  running.add(limiter);
  return limiter;
}

async function stop(limiter: Limiter, how: "stop" | "crash"): Promise<void> {
  if (how === "crash") await crashLimiter(limiter);
  else await limiter.stop();
  running.delete(limiter);
}

const key = (prefix: string) => `${prefix}_${crypto.randomUUID()}`;
const arrivalsFor = (k: string) => origin.arrivals.filter((a) => a.headers["x-api-key"] === k);

/** `n` requests on `k`, one after another; their statuses. */
async function sequential(limiter: Limiter, k: string, n: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = await fetch(`${limiter.url}/seq?i=${i}`, { headers: { "x-api-key": k } });
    await r.arrayBuffer();
    statuses.push(r.status);
  }
  return statuses;
}

/** `n` requests on `k`, all at once; their statuses, sorted. */
async function burst(limiter: Limiter, k: string, n: number): Promise<number[]> {
  const statuses = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const r = await fetch(`${limiter.url}/burst?i=${i}`, { headers: { "x-api-key": k } });
      await r.arrayBuffer();
      return r.status;
    }),
  );
  return statuses.sort((a, b) => a - b);
}

const times = (n: number, status: number) => Array.from({ length: n }, () => status);

describe.each([
  ["stopped (SIGTERM)", "stop"],
  ["killed (SIGKILL)", "crash"],
] as const)("wrangler dev is %s and started again on the same persist dir", (_, how) => {
  it("an exhausted key stays exhausted; a half-used key gets exactly the rest; nothing is granted twice", async () => {
    const persistTo = await persistDir();
    const [five, ten] = [key("five"), key("ten")];

    const before = await start(persistTo);
    expect(await sequential(before, five, 6)).toEqual([...times(5, 200), 429]);
    expect(await sequential(before, ten, 4)).toEqual(times(4, 200));
    await stop(before, how);

    const after = await start(persistTo);
    // A fresh isolate: no deny cache, so these reach the object, which rebuilt the log from storage.
    const denied = await fetch(`${after.url}/again`, { headers: { "x-api-key": five } });
    expect(denied.status).toBe(429);
    expect(denied.headers.get("RateLimit")).toMatch(/^"per-hour";r=0;t=\d+$/);
    const body = (await denied.json()) as { retry_after_ms: number };
    expect(body.retry_after_ms).toBeGreaterThan(0);
    expect(body.retry_after_ms).toBeLessThanOrEqual(3_600_000);
    expect(await burst(after, five, 10)).toEqual(times(10, 429));
    // The half-used key: 20 at once, exactly the 6 left pass.
    expect(await burst(after, ten, 20)).toEqual([...times(6, 200), ...times(14, 429)]);
    await stop(after, "stop");

    expect(arrivalsFor(five)).toHaveLength(5);
    expect(arrivalsFor(ten)).toHaveLength(10);
  });

  it("requests in flight at the restart (granted, response still streaming) count after it", async () => {
    const persistTo = await persistDir();
    const k = key("five");

    const before = await start(persistTo);
    expect(await sequential(before, k, 2)).toEqual([200, 200]);
    // Two grants whose responses are still open: headers and one byte arrived, the rest waits on a release
    // that never comes. The object recorded them before the Worker proxied them.
    const inFlight = await Promise.all(
      [1, 2].map(async () => {
        const r = await fetch(`${before.url}/__special/gated/${crypto.randomUUID()}?first=1`, {
          headers: { "x-api-key": k },
        });
        const reader = (r.body as ReadableStream<Uint8Array>).getReader();
        const first = await reader.read();
        return {
          status: r.status,
          firstBytes: first.value?.length ?? 0,
          rest: reader.read().then(() => "ended", String),
        };
      }),
    );
    expect(inFlight.map((f) => [f.status, f.firstBytes])).toEqual([
      [200, 1],
      [200, 1],
    ]);
    await stop(before, how);
    // The open responses die with the runtime.
    for (const f of inFlight) expect(await f.rest).toMatch(/^TypeError: terminated/);

    const after = await start(persistTo);
    expect(await burst(after, k, 6)).toEqual([200, ...times(5, 429)]);
    await stop(after, "stop");

    // 2 + 1 recorded arrivals (the gated ones are special paths the origin does not record): 5 grants in all.
    expect(arrivalsFor(k)).toHaveLength(3);
  });
});
