// Concurrency on the isolate's side (src/client/in-flight.ts, the client, the pipeline, src/pipeline/response-end.ts) in
// Node, against an in-memory object built on the real core (KeyLog and Slots) at a clock the test moves: a granted
// request holds a slot until released (once), renewed every third of the timeout meanwhile; a full key's refusal;
// keys with concurrency never lease; shadow mode; a response's end, failure or cancellation releases its slot.

import { afterEach, describe, expect, it, vi } from "vitest";
import { InFlight } from "../../src/client/in-flight.ts";
import { type Background, LimiterClient, type LimiterNamespace, type RateLimitResult } from "../../src/client/index.ts";
import { headersOf, type SlotRecord } from "../../src/client/result.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import type { LimiterConfig, Plan } from "../../src/config/types.ts";
import { type Decision, KeyLog, type LimitSpec } from "../../src/core/index.ts";
import { Slots } from "../../src/core/slots.ts";
import { Pipeline } from "../../src/pipeline/index.ts";
import { join, type Socket, untilEnd } from "../../src/pipeline/response-end.ts";
import type { TakeAsk as Ask } from "../../src/protocol.ts";

const T0 = 1_800_000_000_000;

/** The concurrency slot a result's handle records, if any. */
const slotOf = (r: RateLimitResult): SlotRecord | null => r.handle?.slot ?? null;

/** Every object's log and slots in memory, as the object decides: a full key refused while its limits fit. */
function memoryObjects(now: () => number) {
  const logs = new Map<string, KeyLog>();
  const slots = new Map<string, Slots>();
  const calls: { name: string; method: string; ask?: Ask; id?: string }[] = [];
  let failRelease = false;
  const log = (name: string, limits: readonly LimitSpec[]) => {
    if (!logs.has(name)) logs.set(name, new KeyLog(limits));
    return logs.get(name) as KeyLog;
  };
  const slotsOf = (name: string) => {
    if (!slots.has(name)) slots.set(name, new Slots());
    return slots.get(name) as Slots;
  };
  const ns = {
    getByName: (name: string) => ({
      take: async (limits: readonly LimitSpec[], ask: Ask): Promise<Decision> => {
        calls.push({ name, method: "take", ask });
        const l = log(name, limits);
        const s = slotsOf(name);
        if (ask.slot && !s.fits(now(), ask.slot.id, ask.slot) && l.check(now(), ask.cost).allowed) {
          const fits = l.check(now(), ask.cost);
          return { ...fits, allowed: false, retryAfterMs: 1000, blockedUntil: fits.now, concurrencyFull: true };
        }
        const d = l.take(now(), ask).decision;
        if (d.allowed && ask.slot) s.take(now(), ask.slot.id, ask.slot);
        return d;
      },
      refund: async (
        limits: readonly LimitSpec[],
        grant: { id: string; recordedAt: readonly number[]; units: number },
      ) => {
        const { recordedAt, units } = grant;
        calls.push({ name, method: "refund" });
        log(name, limits).giveBack(recordedAt, units);
        return true;
      },
      settle: async () => 0,
      release: async (id: string) => {
        calls.push({ name, method: "release", id });
        if (failRelease) throw new Error("object gone");
        return slotsOf(name).release(id);
      },
      renew: async (id: string, timeoutMs: number) => {
        calls.push({ name, method: "renew", id });
        return slotsOf(name).renew(now(), id, timeoutMs) !== null;
      },
    }),
  } as unknown as LimiterNamespace;
  return {
    ns,
    calls,
    held: (name: string) => slotsOf(name).heldAt(now()),
    count: (method: string) => calls.filter((c) => c.method === method).length,
    failReleases: () => {
      failRelease = true;
    },
  };
}

function setup(settings: Record<string, unknown> = {}) {
  let now = T0;
  const clock = () => now;
  const config = parseLimiterConfig(
    { limits: [{ limit: 100, window: "1m" }], concurrency: 2, ...settings },
    "test",
  ) as LimiterConfig;
  const client = new LimiterClient(config, { clock });
  const objects = memoryObjects(clock);
  const pending: Promise<unknown>[] = [];
  const bg: Background = { waitUntil: (p) => void pending.push(p) };
  const plan = config.defaultPlan as Plan;
  return {
    client,
    objects,
    plan,
    bg,
    advance: (ms: number) => {
      now += ms;
    },
    settled: () => Promise.all(pending),
    acquire: (name = "key:a") => client.limit({ ns: objects.ns, name, plan, cost: 1, bg, inFlight: true }),
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("the client's concurrency slots", () => {
  it("a grant holds a slot, asked with the decision (no lease); the third is refused at once; a release frees one, once", async () => {
    const t = setup();
    const a = await t.acquire();
    const b = await t.acquire();
    expect([a.reason, b.reason]).toEqual(["granted", "granted"]);
    const asks = t.objects.calls.map((c) => c.ask);
    expect(asks.every((x) => x?.slot?.limit === 2 && x.slot.timeoutMs === 60_000 && !x.leaseUnits)).toBe(true);
    expect(new Set(asks.map((x) => x?.slot?.id)).size).toBe(2);
    expect(t.client.holdsSlot(slotOf(a))).toBe(true);
    const c = await t.acquire();
    expect(c).toMatchObject({ allowed: false, reason: "concurrency", retryAfterMs: 1000 });
    expect(headersOf(c, "draft-11").get("Retry-After")).toBe("1");
    expect(c.limits[0]).toMatchObject({ remaining: 98, exceeded: false });
    expect(t.client.holdsSlot(slotOf(c))).toBe(false);
    // Not remembered as a denial: once a slot is free the next request asks the object and is granted.
    expect(await t.client.release(t.objects.ns, slotOf(a))).toBe(true);
    expect(await t.client.release(t.objects.ns, slotOf(a))).toBe(false);
    expect(t.objects.count("release")).toBe(1);
    expect((await t.acquire()).reason).toBe("granted");
    expect(t.objects.held("key:a")).toBe(2);
  });

  it("limit() without a slot decides the rate limits alone and leases as usual; a plan without concurrency takes none", async () => {
    const t = setup();
    for (let i = 0; i < 5; i++)
      await t.client.limit({ ns: t.objects.ns, name: "key:a", plan: t.plan, cost: 1, bg: t.bg });
    expect(t.objects.calls.some((c) => c.ask?.slot)).toBe(false);
    expect(t.objects.held("key:a")).toBe(0);
    const u = setup({ concurrency: undefined });
    const r = await u.acquire();
    expect(r.allowed).toBe(true);
    expect(u.objects.calls[0]?.ask?.slot).toBeUndefined();
    expect(await u.client.release(u.objects.ns, slotOf(r))).toBe(false);
  });

  it("a held slot is renewed every third of the timeout until released; a lapsed one stops renewing", async () => {
    vi.useFakeTimers();
    const t = setup({ concurrency_timeout: "3s" });
    const a = await t.acquire();
    await vi.advanceTimersByTimeAsync(999);
    expect(t.objects.count("renew")).toBe(0);
    t.advance(1000);
    await vi.advanceTimersByTimeAsync(1);
    expect(t.objects.count("renew")).toBe(1);
    t.advance(1000);
    await vi.advanceTimersByTimeAsync(1000);
    expect(t.objects.count("renew")).toBe(2);
    expect(t.objects.held("key:a")).toBe(1);
    await t.client.release(t.objects.ns, slotOf(a));
    await vi.advanceTimersByTimeAsync(5000);
    expect(t.objects.count("renew")).toBe(2);
    // A slot that lapsed at the object (renewals lost) is not renewed again.
    const b = await t.acquire();
    t.advance(10_000);
    await vi.advanceTimersByTimeAsync(1000);
    expect(t.objects.count("renew")).toBe(3);
    await vi.advanceTimersByTimeAsync(5000);
    expect(t.objects.count("renew")).toBe(3);
    expect(t.client.holdsSlot(slotOf(b))).toBe(false); // lapsed: forgotten here
    await t.client.release(t.objects.ns, slotOf(b));
  });

  it("shadow mode reports a full key and lets the request through without a slot", async () => {
    const t = setup({ shadow: true, concurrency: 1 });
    const a = await t.acquire();
    const b = await t.acquire();
    expect(b).toMatchObject({ allowed: true, reason: "shadow" });
    expect(t.client.holdsSlot(slotOf(b))).toBe(false);
    await t.client.release(t.objects.ns, slotOf(a));
  });

  it("a release the object does not answer resolves false (the slot lapses at the object)", async () => {
    const t = setup();
    const a = await t.acquire();
    t.objects.failReleases();
    expect(await t.client.release(t.objects.ns, slotOf(a))).toBe(false);
    expect(t.client.holdsSlot(slotOf(a))).toBe(false);
  });
});

describe("the pipeline's slots", () => {
  it("a key granted and its address refused: the key's grant is given back and its slot released", async () => {
    const t = setup({ ip: { limits: [{ limit: 1, window: "1m" }] }, leases: false });
    const pipeline = new Pipeline(t.client, null);
    const asking = { key: "k1", ip: "192.0.2.1", bg: t.bg, inFlight: true };
    const first = await pipeline.decide({}, t.objects.ns, asking);
    expect(first?.result.allowed).toBe(true);
    const second = await pipeline.decide({}, t.objects.ns, { ...asking, key: "k2" });
    expect(second?.result).toMatchObject({ allowed: false, refusedBy: "ip" });
    expect(t.objects.held("key:k2")).toBe(0);
    expect(t.objects.count("refund")).toBe(1);
    // The first request's slot, held by its key's part, is released when its response ends.
    expect(t.objects.held("key:k1")).toBe(1);
    const sent = pipeline.sent(t.objects.ns, first?.result as never, new Response("ok"), t.bg);
    expect(await sent.text()).toBe("ok");
    await t.settled();
    expect(t.objects.held("key:k1")).toBe(0);
  });

  it("a response without a slot is sent as it is", async () => {
    const t = setup({ concurrency: undefined });
    const pipeline = new Pipeline(t.client, null);
    const d = await pipeline.decide({}, t.objects.ns, { key: "k", bg: t.bg, inFlight: true });
    const response = new Response("x");
    expect(pipeline.sent(t.objects.ns, d?.result as never, response, t.bg)).toBe(response);
  });
});

describe("untilEnd", () => {
  const ended = () => {
    let n = 0;
    const pending: Promise<unknown>[] = [];
    return {
      onEnd: async () => {
        n++;
      },
      bg: { waitUntil: (p: Promise<unknown>) => void pending.push(p) },
      count: async () => {
        await Promise.all(pending);
        return n;
      },
    };
  };

  it("ends once the body has been read to the end, with the body, status and headers unchanged", async () => {
    const e = ended();
    const r = untilEnd(new Response("hello", { status: 201, headers: { "x-a": "1" } }), e.onEnd, e.bg);
    expect(r.status).toBe(201);
    expect(r.headers.get("x-a")).toBe("1");
    expect(await r.text()).toBe("hello");
    expect(await e.count()).toBe(1);
  });

  it("ends when the reader cancels, when the body fails, and at once without a body, even without waitUntil", async () => {
    const cancelled = ended();
    let origin: ReadableStreamDefaultController<Uint8Array> | null = null;
    const body = new ReadableStream<Uint8Array>({
      start: (c) => {
        origin = c;
      },
    });
    const r = untilEnd(new Response(body), cancelled.onEnd, cancelled.bg);
    const reader = (r.body as ReadableStream<Uint8Array>).getReader();
    (origin as unknown as ReadableStreamDefaultController<Uint8Array>).enqueue(new Uint8Array([1]));
    expect((await reader.read()).value).toEqual(new Uint8Array([1]));
    await reader.cancel("gone");
    expect(await cancelled.count()).toBe(1);

    const failed = ended();
    const broken = new ReadableStream({
      pull: (c) => c.error(new Error("origin failed")),
    });
    await expect(untilEnd(new Response(broken), failed.onEnd, failed.bg).text()).rejects.toThrow();
    expect(await failed.count()).toBe(1);

    let n = 0;
    const empty = untilEnd(new Response(null, { status: 204 }), async () => void n++, {});
    expect(empty.status).toBe(204);
    await Promise.resolve();
    expect(n).toBe(1);
  });
});

describe("InFlight alone", () => {
  /** A namespace whose renewals answer as `renew` says, counting every call, and a log that keeps its events. */
  function rig(renew: () => Promise<boolean>) {
    const calls: string[] = [];
    const ns = {
      getByName: () => ({
        renew: () => {
          calls.push("renew");
          return renew();
        },
        release: async () => {
          calls.push("release");
          return true;
        },
      }),
    } as unknown as LimiterNamespace;
    const events: { event: string; message: string; level: string }[] = [];
    const slots = new InFlight(5_000, (event, _name, e, level) =>
      events.push({ event, message: (e as Error).message, level }),
    );
    const slot = slots.hold(ns, "key:a", { id: "r1", limit: 1, timeoutMs: 3_000 });
    return { calls, events, slots, slot, ns };
  }

  it("a release of what holds no slot does nothing: no call, no log", async () => {
    const r = rig(async () => true);
    expect(await r.slots.release(r.ns, null)).toBe(false);
    expect(await r.slots.release(r.ns, r.slot)).toBe(true);
    expect(await r.slots.release(r.ns, r.slot)).toBe(false);
    expect(r.calls).toEqual(["release"]);
    expect(r.events).toEqual([]);
  });

  it("a slot held by another isolate (its record, copied) is released at its object, once; its holder stops renewing", async () => {
    vi.useFakeTimers();
    // The object keeps the slot until it is released: renewals before that find it, after it do not.
    let released = false;
    const r = rig(async () => !released);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(r.calls).toEqual(["renew"]);
    r.calls.length = 0;
    const elsewhere = new InFlight(5_000, () => {});
    const copy = structuredClone(r.slot);
    expect(elsewhere.holds(copy)).toBe(false);
    released = true;
    expect(await elsewhere.release(r.ns, copy)).toBe(true);
    expect(await elsewhere.release(r.ns, copy)).toBe(false);
    expect(r.calls).toEqual(["release"]);
    // The holder's next renewal finds it gone (the object says so): logged, forgotten, and not renewed again.
    expect(r.slots.holds(r.slot)).toBe(true);
    await vi.advanceTimersByTimeAsync(1_000);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(r.calls).toEqual(["release", "renew"]);
    expect(r.events.map((e) => e.event)).toEqual(["slot_lapsed"]);
    expect(r.slots.holds(r.slot)).toBe(false);
  });

  it("release: true for a slot held here whatever the object says; elsewhere the object's answer; a bad record, no call", async () => {
    const answers: boolean[] = [];
    const calls: string[] = [];
    const ns = {
      getByName: () => ({
        renew: async () => true,
        release: async (id: string) => {
          calls.push(id);
          return answers.shift() ?? true;
        },
      }),
    } as unknown as LimiterNamespace;
    const slots = new InFlight(5_000, () => {});
    const here = slots.hold(ns, "key:a", { id: "h", limit: 1, timeoutMs: 3_000 });
    answers.push(false); // lapsed at the object meanwhile: still this isolate's to free
    expect(await slots.release(ns, here)).toBe(true);
    answers.push(false); // another isolate's, already gone at the object
    expect(await slots.release(ns, { name: "key:a", id: "gone" })).toBe(false);
    for (const bad of [{ name: "key:a", id: 7 }, { name: 7, id: "x" }, null]) {
      expect(await slots.release(ns, bad as never)).toBe(false);
    }
    expect(calls).toEqual(["h", "gone"]);
  });

  it("remembers the slots it released lately, at most RELEASED_MAX, so a second release makes no call", async () => {
    const calls: string[] = [];
    const ns = {
      getByName: () => ({
        release: async (id: string) => {
          calls.push(id);
          return true;
        },
      }),
    } as unknown as LimiterNamespace;
    const slots = new InFlight(5_000, () => {});
    const record = (i: number) => ({ name: "key:a", id: String(i) });
    for (let i = 0; i < 10_000; i++) await slots.release(ns, record(i));
    expect(await slots.release(ns, record(0))).toBe(false);
    expect(calls).toHaveLength(10_000);
    // The 10,001st release forgets the older ones: a release of the first again asks the object.
    await slots.release(ns, record(10_000));
    expect(await slots.release(ns, record(0))).toBe(true);
    expect(calls).toHaveLength(10_002);
  });

  it("a renewal that fails is logged and tried again a period later; one refused (lapsed) is logged and not", async () => {
    vi.useFakeTimers();
    let answer: () => Promise<boolean> = async () => {
      throw new Error("object gone");
    };
    const r = rig(() => answer());
    await vi.advanceTimersByTimeAsync(1_000);
    expect(r.events).toEqual([{ event: "slot_renew_failed", message: "object gone", level: "warn" }]);
    answer = async () => false;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(r.calls).toEqual(["renew", "renew"]);
    expect(r.events[1]).toEqual({
      event: "slot_lapsed",
      message: "the slot lapsed or was released elsewhere",
      level: "warn",
    });
    await vi.advanceTimersByTimeAsync(5_000);
    expect(r.calls).toEqual(["renew", "renew"]);
    // Forgotten here: nothing of it is left to release or renew.
    expect(r.slots.holds(r.slot)).toBe(false);
  });

  it("released while a renewal is out: its answer schedules nothing more, failed or not", async () => {
    vi.useFakeTimers();
    for (const outcome of [true, false]) {
      let settle: (ok: boolean) => void = () => {};
      const r = rig(
        () =>
          new Promise<boolean>((resolve, reject) => {
            settle = (ok) => (ok ? resolve(true) : reject(new Error("late")));
          }),
      );
      await vi.advanceTimersByTimeAsync(1_000);
      expect(r.calls).toEqual(["renew"]);
      await r.slots.release(r.ns, r.slot);
      settle(outcome);
      await vi.advanceTimersByTimeAsync(10_000);
      expect(r.calls).toEqual(["renew", "release"]);
    }
  });

  it("a release the object does not answer resolves false and is logged as slot_release_failed, at error", async () => {
    const events: unknown[][] = [];
    const slots = new InFlight(5_000, (event, name, e, level) =>
      events.push([event, name, (e as Error).message, level]),
    );
    const ns = {
      getByName: () => ({
        release: async () => {
          throw new Error("object gone");
        },
      }),
    } as unknown as LimiterNamespace;
    const slot = slots.hold(ns, "key:a", { id: "r1", limit: 1, timeoutMs: 3_000 });
    expect(await slots.release(ns, slot)).toBe(false);
    expect(events).toEqual([["slot_release_failed", "key:a", "object gone", "error"]]);
    expect(slots.holds(slot)).toBe(false);
  });

  it("no renewal after a release", async () => {
    vi.useFakeTimers();
    const r = rig(async () => true);
    await vi.advanceTimersByTimeAsync(1_000);
    await r.slots.release(r.ns, r.slot);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(r.calls).toEqual(["renew", "release"]);
  });
});

describe("join (a relayed WebSocket)", () => {
  /** A socket that records what is sent and closed on it, and lets the test fire its events. */
  function fake(throwOnClose = false) {
    const listeners = new Map<string, ((e: { data?: unknown; code?: number; reason?: string }) => void)[]>();
    const sent: unknown[] = [];
    const closes: [number | undefined, string | undefined][] = [];
    const socket: Socket = {
      accept() {},
      send: (data) => void sent.push(data),
      close: (code, reason) => {
        closes.push([code, reason]);
        if (throwOnClose) throw new Error("already closing");
      },
      addEventListener: (type, listener) => void listeners.set(type, [...(listeners.get(type) ?? []), listener]),
    };
    const fire = (type: string, e: { data?: unknown; code?: number; reason?: string } = {}) => {
      for (const l of listeners.get(type) ?? []) l(e);
    };
    return { socket, sent, closes, fire };
  }

  it("relays messages both ways until the first close, which closes the other side with its code", () => {
    const a = fake();
    const b = fake();
    let closed = 0;
    join(a.socket, b.socket, () => void closed++);
    a.fire("message", { data: "to b" });
    b.fire("message", { data: "to a" });
    expect(b.sent).toEqual(["to b"]);
    expect(a.sent).toEqual(["to a"]);
    a.fire("close", { code: 4001, reason: "bye" });
    expect(b.closes).toEqual([[4001, "bye"]]);
    expect(closed).toBe(1);
    // Closed: nothing more is relayed, and the other side's close (its echo) closes nothing again.
    a.fire("message", { data: "late" });
    b.fire("close", { code: 4001, reason: "bye" });
    expect(b.sent).toEqual(["to b"]);
    expect(a.closes).toEqual([]);
    expect(closed).toBe(2);
  });

  it("a code a socket may not send becomes 1000, a close without one too; an error closes with 1011", () => {
    for (const [code, sent] of [
      [1005, 1000],
      [1006, 1000],
      [1015, 1000],
      [1004, 1000],
      [undefined, 1000],
      [1001, 1001],
    ] as const) {
      const a = fake();
      const b = fake();
      join(a.socket, b.socket, () => {});
      b.fire("close", code === undefined ? {} : { code });
      expect(a.closes).toEqual([[sent, ""]]);
    }
    const a = fake();
    const b = fake(true);
    let closed = 0;
    join(a.socket, b.socket, () => void closed++);
    a.fire("error");
    expect(b.closes).toEqual([[1011, "relay error"]]);
    expect(closed).toBe(1);
  });
});

describe("slots taken alone (failure_mode local, the key's object down)", () => {
  it("are counted per key in this isolate, up to the most given, and freed by a release here, once, with no call", async () => {
    const calls: string[] = [];
    const inFlight = new InFlight(100, () => {});
    const ns = {
      getByName: () => new Proxy({}, { get: (_, m) => () => calls.push(String(m)) }),
    } as unknown as LimiterNamespace;
    const spec = { limit: 2, timeoutMs: 60_000 };
    expect([inFlight.fitsAlone("key:a", 2, T0), inFlight.fitsAlone("key:a", 0, T0)]).toEqual([true, false]);
    const a = inFlight.holdAlone("key:a", inFlight.ask(spec), T0);
    const b = inFlight.holdAlone("key:a", inFlight.ask(spec), T0);
    expect([inFlight.fitsAlone("key:a", 2, T0), inFlight.fitsAlone("key:b", 2, T0), inFlight.holds(a)]).toEqual([
      false,
      true,
      true,
    ]);
    expect(await inFlight.release(ns, a)).toBe(true);
    expect(inFlight.fitsAlone("key:a", 2, T0)).toBe(true);
    expect(inFlight.fitsAlone("key:a", 1, T0)).toBe(false);
    expect(await inFlight.release(ns, b)).toBe(true);
    expect(inFlight.fitsAlone("key:a", 1, T0)).toBe(true);
    expect(inFlight.holds(a)).toBe(false);
    // Released twice: nothing, and still no call.
    expect(await inFlight.release(ns, a)).toBe(false);
    expect(calls).toEqual([]);
  });

  it("a slot taken alone and never released lapses after the plan's concurrency_timeout", () => {
    const inFlight = new InFlight(100, () => {});
    const slot = inFlight.holdAlone("key:a", inFlight.ask({ limit: 1, timeoutMs: 60_000 }), T0);
    expect(inFlight.fitsAlone("key:a", 1, T0 + 59_999)).toBe(false);
    expect(inFlight.holds(slot)).toBe(true);
    expect(inFlight.fitsAlone("key:a", 1, T0 + 60_000)).toBe(true);
    expect(inFlight.holds(slot)).toBe(false);
  });
});
