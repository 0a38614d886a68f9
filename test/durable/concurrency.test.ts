// Concurrency slots inside the key's object: taken with a grant (same call), a full key refused at once with
// nothing recorded, released, renewed, lapsed after the timeout, never more than N held, kept across an eviction,
// freed with the key's state by the idle alarm. Time is the object's `clock()`.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LimitSpec } from "../../src/core/limits.ts";
import type { PenaltySpec } from "../../src/core/penalty.ts";
import { MAX_SLOT_TIMEOUT_MS } from "../../src/core/slots.ts";
import { UNSTORED_WINDOW_MS } from "../../src/object/budgets.ts";
import type { RateLimiter } from "../../src/object/index.ts";
import { IDLE_KEEP_MS } from "../../src/object/key.ts";
import { object, T0 } from "./object.ts";

const limits: LimitSpec[] = [{ limit: 100, windowMs: 1000, tickMs: 1 }];
const spec = { limit: 2, timeoutMs: 60_000 };
const slot = (id: string, s = spec) => ({ slot: { id, ...s } });

describe("concurrency slots", () => {
  it("a grant takes a slot; the N+1th request is refused at once, recorded nowhere; a release frees one", async () => {
    const o = await object();
    expect((await o.take(limits, 1, slot("a"))).allowed).toBe(true);
    expect((await o.take(limits, 1, slot("b"))).allowed).toBe(true);
    expect(o.written()).toBe(2);
    const full = await o.take(limits, 1, slot("c"));
    expect(full).toMatchObject({ allowed: false, concurrencyFull: true, retryAfterMs: 1_000, blockedUntil: T0 });
    // Nothing recorded: the rate limits still show two used.
    expect(full.limits[0]).toMatchObject({ remaining: 98, exceeded: false });
    expect(o.written()).toBe(0);
    expect((await o.status(limits)).inFlight).toBe(2);
    expect(await o.stub.release("a")).toBe(true);
    expect(await o.stub.release("a")).toBe(false);
    expect((await o.take(limits, 1, slot("c"))).allowed).toBe(true);
    expect((await o.status(limits)).inFlight).toBe(2);
  });

  it("a retried take (same id) holds one slot, not two; a request without a slot ask is not limited by them", async () => {
    const o = await object();
    await o.take(limits, 1, slot("a"));
    await o.take(limits, 1, slot("a"));
    expect((await o.status(limits)).inFlight).toBe(1);
    expect((await o.take(limits, 1, slot("b"))).allowed).toBe(true);
    expect((await o.take(limits, 1)).allowed).toBe(true);
  });

  it("a request its rate limits refuse is refused by them (and counts towards a penalty); a full one does not", async () => {
    const o = await object();
    const one: LimitSpec[] = [{ limit: 2, windowMs: 1000, tickMs: 1 }];
    const penalty: PenaltySpec = { after: 1, withinMs: 10_000, blockMs: 60_000, maxBlockMs: null };
    await o.take(one, 1, slot("a"));
    // Full, and the limits would still fit it: a concurrency refusal, no penalty.
    const full = await o.take(one, 1, { ...slot("b", { limit: 1, timeoutMs: 60_000 }), penalty });
    expect(full).toMatchObject({ allowed: false, concurrencyFull: true });
    expect((await o.status(one)).refusals).toBe(0);
    await o.take(one, 1);
    // Full and over the limit: the limits' refusal, with their wait; it counts and blocks.
    const over = await o.take(one, 1, { ...slot("c", { limit: 1, timeoutMs: 60_000 }), penalty });
    expect(over.concurrencyFull).toBeUndefined();
    expect(over).toMatchObject({ allowed: false, blockCause: "penalty" });
  });

  it("a slot lapses `timeoutMs` after it was taken unless renewed; a lapsed one is not renewed", async () => {
    const o = await object();
    const short = { limit: 1, timeoutMs: 1_000 };
    await o.take(limits, 1, slot("a", short));
    o.at(T0 + 999);
    expect((await o.take(limits, 1, slot("b", short))).concurrencyFull).toBe(true);
    expect(await o.stub.renew("a", 1_000)).toBe(true);
    o.at(T0 + 1_998);
    expect((await o.take(limits, 1, slot("b", short))).concurrencyFull).toBe(true);
    o.at(T0 + 1_999);
    expect(await o.stub.renew("a", 1_000)).toBe(false);
    expect((await o.take(limits, 1, slot("b", short))).allowed).toBe(true);
    expect((await o.status(limits)).inFlight).toBe(1);
  });

  it("slots are kept across an eviction; the idle alarm frees them only a day after they have lapsed", async () => {
    const o = await object();
    await o.take(limits, 1, slot("a"));
    await o.take(limits, 1, slot("b"));
    await o.evict();
    expect((await o.status(limits)).inFlight).toBe(2);
    expect((await o.take(limits, 1, slot("c"))).concurrencyFull).toBe(true);
    // Renewed for a day, slot a lapses after the grants stop counting (read as a day after them): the alarm keeps the
    // key until a day after it does.
    o.at(T0 + 5_000);
    expect(await o.stub.renew("a", MAX_SLOT_TIMEOUT_MS)).toBe(true);
    await o.evict();
    await runDurableObjectAlarm(o.stub);
    expect((await o.status(limits)).inFlight).toBe(2);
    expect(await o.alarm()).toBe(T0 + 5_000 + MAX_SLOT_TIMEOUT_MS + IDLE_KEEP_MS);
    // When the grants alone would let the key go, the lapsed slot keeps it.
    o.at(T0 + UNSTORED_WINDOW_MS + IDLE_KEEP_MS);
    await runDurableObjectAlarm(o.stub);
    expect((await o.stored()).tables).toContain("inflight");
    o.at(T0 + 5_000 + MAX_SLOT_TIMEOUT_MS + IDLE_KEEP_MS);
    await runDurableObjectAlarm(o.stub);
    expect((await o.stored()).tables).toEqual([]);
    expect((await o.take(limits, 1, slot("c"))).allowed).toBe(true);
  });

  it("refuses a malformed slot ask, release or renewal with a RangeError, recording nothing", async () => {
    const o = await object();
    // Called on the instance (as admin.test.ts does): a rejection over RPC is also reported as unhandled.
    await runInDurableObject(o.stub, async (instance: RateLimiter) => {
      const take = (s: object) => instance.take(limits, { cost: 1, slot: s as never });
      await expect(take({ id: "", ...spec })).rejects.toThrow("slot.id");
      await expect(take({ id: "a", limit: 0, timeoutMs: 60_000 })).rejects.toThrow("slot.limit");
      await expect(take({ id: "a", limit: 1, timeoutMs: 10 })).rejects.toThrow("slot.timeoutMs");
      await expect(Promise.resolve(instance.release(7 as unknown as string))).rejects.toThrow("id:");
      expect(() => instance.renew("a", 0)).toThrow("timeoutMs");
    });
    expect(o.written()).toBe(0);
    expect((await o.status(limits)).inFlight).toBe(0);
  });

  it("property: any interleaving of takes, releases, renewals and time never holds more than N", async () => {
    const o = await object();
    const n = 3;
    const s = { limit: n, timeoutMs: 2_000 };
    const held = new Map<string, number>(); // id → lapse, as the test reckons it
    let now = T0;
    let seed = 7;
    const rand = (k: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % k;
    };
    for (let i = 0; i < 300; i++) {
      now += rand(4) === 0 ? rand(1_500) : rand(50);
      o.at(now);
      for (const [id, t] of held) if (t <= now) held.delete(id);
      const id = `r${rand(8)}`;
      const op = rand(3);
      if (op === 0) {
        const d = await o.take(limits, 1, slot(id, s));
        if (d.allowed) held.set(id, now + s.timeoutMs);
        expect(d.allowed || d.concurrencyFull === true || !d.limits[0]?.remaining).toBe(true);
      } else if (op === 1) {
        expect(await o.stub.release(id)).toBe(held.delete(id));
      } else if (await o.stub.renew(id, s.timeoutMs)) held.set(id, now + s.timeoutMs);
      const status = await o.status(limits);
      expect(status.inFlight).toBe(held.size);
      expect(status.inFlight).toBeLessThanOrEqual(n);
    }
  });
});
