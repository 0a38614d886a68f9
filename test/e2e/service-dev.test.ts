// One limiter shared by Workers of other projects, as a user runs three projects side by side: the limiter's Worker
// (test/e2e/worker/wrangler.service.toml, a library limiter exporting `LimiterService`) and two consumer Workers
// (consumer-entry.ts; wrangler.consumer-a.toml and wrangler.consumer-b.jsonc), each under its own `wrangler dev`. The
// consumers' `[[services]]` bindings (`entrypoint = "LimiterService"`) reach the limiter's process through wrangler's
// dev registry: each `wrangler dev` lists its Workers there and calls the others' over their workerd debug port
// (miniflare's dev-registry-proxy.worker.js). `wrangler dev -c a -c b -c c` is no substitute: only its first
// config answers HTTP. The registry here is a directory of the test's own, not the user's.
//
// Over HTTP to each consumer, every call crossing from one wrangler dev to another: the two share a key's limit
// exactly, one by one and all at once, and with the limiter's leases never beyond it; a result one got is refunded by
// the other; bad input rejects with the library's errors (a LimiterError losing its name and code on the way: below)
// and counts nothing.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RateLimitResult } from "../../src/client/result.ts";
import type { ServiceResult } from "../../src/library/limiter.ts";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";

const WORKERS = "test/e2e/worker";
const LIMITER_NAME = "strict-edge-rate-limiter-service";
/** Three wrangler dev at once on a shared 2-core machine: each may take a while to answer. */
const READY_TIMEOUT_MS = 150_000;

interface Arrived {
  readonly type: string;
  readonly name: string;
  readonly message: string;
  readonly code: string | null;
}

interface Answer<T> {
  readonly status: number;
  readonly value?: T;
  readonly error?: Arrived;
}

let registry: Awaited<ReturnType<typeof tempDir>> | undefined;
let state: Awaited<ReturnType<typeof tempDir>> | undefined;
const running: Limiter[] = [];
let a: Limiter;
let b: Limiter;

/** What consumer `at` answered for `path` (its binding's value, or the error as it arrived). */
async function ask<T>(at: Limiter, path: string, init?: RequestInit): Promise<Answer<T>> {
  const response = await fetch(`${at.url}${path}`, init);
  const body = (await response.json()) as { value?: T; error?: Arrived };
  return { status: response.status, ...body };
}

const limit = async (at: Limiter, key: string, cost?: number) =>
  ask<ServiceResult>(at, `/limit?key=${key}${cost === undefined ? "" : `&cost=${cost}`}`);
const remaining = async (at: Limiter, key: string) =>
  (await ask<RateLimitResult>(at, `/peek?key=${key}`)).value?.limits[0]?.remaining;

/**
 * Resolves once `consumer`'s binding reaches the limiter's Worker: a key of no plan is refused by the limiter itself
 * (before that, the dev registry's proxy answers that the Worker is not found). Polled, within `timeoutMs`.
 */
async function untilConnected(consumer: Limiter, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    const { error } = await ask(consumer, "/limit?key=ready");
    if (error?.message.includes("matches no plan")) return;
    last = JSON.stringify(error);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(
    `${consumer.url}: LIMITS not connected within ${timeoutMs} ms (last: ${last}):\n${consumer.output()}`,
  );
}

beforeAll(
  async () => {
    const registryDir = await tempDir("limiter-registry-");
    const stateDir = await tempDir("limiter-service-dev-");
    registry = registryDir;
    state = stateDir;
    // Each kept as soon as it runs, so that afterAll stops it whatever happens to the others.
    const start = async (config: string, name: string) => {
      const limiter = await startLimiter({
        config: join(WORKERS, config),
        persistTo: join(stateDir.path, name),
        registry: registryDir.path,
        readyTimeoutMs: READY_TIMEOUT_MS,
      });
      running.push(limiter);
      return limiter;
    };
    // All three at once, in no order, as a user starts three projects: a consumer up before the limiter finds it later.
    const started = await Promise.allSettled([
      start("wrangler.service.toml", "limiter"),
      start("wrangler.consumer-a.toml", "a"),
      start("wrangler.consumer-b.jsonc", "b"),
    ]);
    const failed = started.find((s) => s.status === "rejected");
    if (failed) throw failed.reason;
    [, a, b] = started.map((s) => (s as PromiseFulfilledResult<Limiter>).value) as [Limiter, Limiter, Limiter];
    await Promise.all([untilConnected(a, READY_TIMEOUT_MS), untilConnected(b, READY_TIMEOUT_MS)]);
  },
  2 * READY_TIMEOUT_MS + 30_000,
);

afterAll(async () => {
  await Promise.all(running.map((l) => l.stop()));
  await state?.cleanup();
  await registry?.cleanup();
});

describe("a LimiterService shared by two Workers, each under its own wrangler dev", () => {
  it("finds the limiter's Worker through the dev registry, where each process lists its own", async () => {
    const listed = await readdir(registry?.path ?? "");
    expect(listed.sort()).toEqual(["limits-consumer-a", "limits-consumer-b", LIMITER_NAME]);
  });

  it("grants a key's limit exactly once across both, one by one, whichever Worker asks", async () => {
    const key = `team_${crypto.randomUUID()}`;
    const successes: (boolean | undefined)[] = [];
    for (let i = 0; i < 4; i++) {
      successes.push((await limit(a, key)).value?.success);
      successes.push((await limit(b, key)).value?.success);
    }
    expect(successes).toEqual([true, true, true, true, true, false, false, false]);
    const refused = (await limit(b, key)).value;
    expect(refused).toMatchObject({ success: false, allowed: false, plan: "team" });
    expect(refused?.retryAfterMs).toBeGreaterThan(0);
    expect(await remaining(a, key)).toBe(0);
  });

  it("grants exactly N of many requests sent through both at once", async () => {
    // team_: 5 a minute, too few units to lease: every grant is the key's object's decision.
    const key = `team_${crypto.randomUUID()}`;
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => limit(i % 2 === 0 ? a : b, key)));
    expect(answers.filter((x) => x.error !== undefined)).toEqual([]);
    expect(answers.filter((x) => x.value?.success === true).length).toBe(5);
    expect(await remaining(b, key)).toBe(0);
  });

  it("grants what exact grants or one fewer with leases, never more, many requests through both at once", async () => {
    // crowd_: 40 a minute; 30 requests through each consumer, all in flight together. The limiter's Worker leases
    // under this load, one lease table for both consumers. A lease that expired while the burst's calls were out is
    // given back by the next refusal, which asks once more (docs/design.md, "What real clients do"): before, one in
    // ten to twenty such bursts on this shared machine got 34–38.
    const key = `crowd_${crypto.randomUUID()}`;
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => limit(i % 2 === 0 ? a : b, key)));
    expect(answers.filter((x) => x.error !== undefined)).toEqual([]);
    const granted = answers.filter((x) => x.value?.success === true).length;
    const refused = answers.filter((x) => x.value?.success === false);
    expect(granted).toBeLessThanOrEqual(40);
    expect(granted).toBeGreaterThanOrEqual(39);
    expect(granted + refused.length).toBe(60);
    expect(refused.every((x) => (x.value?.retryAfterMs ?? 0) > 0)).toBe(true);
    // What the key has left (its object's, and units the limiter's isolate holds on lease) leaves no room beyond N.
    expect(granted + ((await remaining(a, key)) ?? 40)).toBeLessThanOrEqual(40);
  });

  it("refunds a result one Worker got through the other, once", async () => {
    const key = `team_${crypto.randomUUID()}`;
    const got = (await limit(a, key, 2)).value;
    expect(got?.success).toBe(true);
    expect(await remaining(b, key)).toBe(3);
    const refund = (at: Limiter) => ask<boolean>(at, "/refund", { method: "POST", body: JSON.stringify(got) });
    expect((await refund(b)).value).toBe(true);
    expect((await refund(a)).value).toBe(false);
    expect(await remaining(a, key)).toBe(5);
  });

  it("rejects bad input with the library's errors and counts nothing", async () => {
    const key = `team_${crypto.randomUUID()}`;
    expect(await ask(a, "/limit")).toMatchObject({
      status: 400,
      error: { type: "TypeError", message: "key: expected a non-empty string" },
    });
    expect((await limit(b, key, 1.5)).error).toMatchObject({
      type: "RangeError",
      message: "cost: expected a whole number ≥ 1, got 1.5",
    });
    expect((await limit(a, key, 0)).error).toMatchObject({ type: "RangeError" });
    // From one wrangler dev to another, a LimiterError arrives as a plain Error: its name is only in the message and
    // its code is lost (in one workerd it keeps both: test/e2e/service.test.ts). A change here means wrangler changed;
    // docs/configuration.md says so.
    expect((await limit(b, `free_${key}`)).error).toEqual({
      type: "Error",
      name: "Error",
      message: "LimiterError: This API key matches no plan.",
      code: null,
    });
    expect(await remaining(b, key)).toBe(5);
  });
});
