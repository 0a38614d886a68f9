// A flood of random unknown keys: what it costs without a defence (one Durable Object per key, counted on disk in
// wrangler dev's state directory), and that the shipped defences answer 401 without creating any object.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";

const FLOOD = 200;
// A window longer than the test: an object idle for its longest window has its alarm delete its state (and its
// database file), which with a 1 s window could happen to the flood's first keys before they are counted.
const LIMITS = [{ limit: 100, window: "1h" }];

let origin: Origin;
let limiter: Limiter | null = null;
let state: Awaited<ReturnType<typeof tempDir>> | null = null;

beforeAll(async () => {
  origin = await startOrigin();
});
afterEach(async () => {
  await limiter?.stop();
  await state?.cleanup();
  limiter = null;
  state = null;
});
afterAll(async () => {
  await origin.close();
});

/** The limiter's objects on disk: one SQLite database each in Miniflare's DO directory (its metadata.sqlite aside). */
async function objectsOnDisk(dir: string): Promise<number> {
  const entries = await readdir(join(dir, "v3/do/strict-edge-rate-limiter-RateLimiter")).catch(() => [] as string[]);
  return entries.filter((e) => e.endsWith(".sqlite") && e !== "metadata.sqlite").length;
}

async function flood(rateLimit: unknown): Promise<{ statuses: Map<number, number>; objects: number }> {
  state = await tempDir("limiter-flood-");
  limiter = await startLimiter({ origin: origin.url, rateLimit, persistTo: state.path });
  const statuses = new Map<number, number>();
  const url = limiter.url;
  await Promise.all(
    Array.from({ length: FLOOD }, async () => {
      const r = await fetch(`${url}/flood`, { headers: { "x-api-key": `live_${crypto.randomUUID()}` } });
      await r.arrayBuffer();
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    }),
  );
  await limiter.stop();
  return { statuses, objects: await objectsOnDisk(state.path) };
}

describe("a flood of random keys", () => {
  it("without a defence: every invented key is granted and costs one object", async () => {
    const { statuses, objects } = await flood({ limits: LIMITS });
    expect(Object.fromEntries(statuses)).toEqual({ 200: FLOOD });
    expect(objects).toBe(FLOOD);
  });

  it("key.pattern: keys of the wrong shape get 401 and no object is created", async () => {
    const { statuses, objects } = await flood({ limits: LIMITS, key: { pattern: "live_[0-9a-f]{32}" } });
    expect(Object.fromEntries(statuses)).toEqual({ 401: FLOOD });
    expect(objects).toBe(0);
  });

  it("plans only: keys whose prefix matches no plan get 401 and no object is created", async () => {
    const { statuses, objects } = await flood({ plans: [{ name: "paid", key_prefix: "paid_", limits: LIMITS }] });
    expect(Object.fromEntries(statuses)).toEqual({ 401: FLOOD });
    expect(objects).toBe(0);
  });
});
