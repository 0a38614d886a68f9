// Calendar quotas through the proxy and the library, the real object and the real origin (docs/configuration.md,
// "Quotas and credits"): the quota's limit reaches the origin in its period and not one request more, with leases on
// and requests sent at once; the refusal waits for the next period's start and the headers name the quota.
import { describe, expect, it, vi } from "vitest";
import { createLimiter } from "../../src/index.ts";
import { secondsToMidnight } from "../support/calendar.ts";
import { arrivalsFor, envWith, freshKey, handle, problemBody, request } from "./helpers.ts";

describe("a daily quota through the proxy", () => {
  const CONFIG = {
    limits: [
      { limit: 1_000, window: "1m" },
      { limit: 25, period: "day", time_zone: "Asia/Tokyo" },
    ],
  };

  it("lets exactly the quota through to the origin, with requests sent at once and leases on", async () => {
    const e = envWith(CONFIG);
    const key = freshKey();
    const statuses: number[] = [];
    for (let round = 0; round < 4; round++) {
      const batch = await Promise.all(Array.from({ length: 10 }, () => handle(request(key, "/items"), e)));
      statuses.push(...batch.map((r) => r.status));
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(25);
    expect(statuses.filter((s) => s === 429)).toHaveLength(15);
    expect(await arrivalsFor(key)).toHaveLength(25);
    const refused = await handle(request(key, "/items"), e);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("RateLimit-Policy")).toBe('"per-minute";q=1000;w=60, "daily";q=25');
    const wait = Number(refused.headers.get("Retry-After"));
    // To midnight in Tokyo (DST-free): within two seconds of what Intl says now.
    expect(Math.abs(wait - secondsToMidnight("Asia/Tokyo"))).toBeLessThanOrEqual(2);
    expect(refused.headers.get("RateLimit")).toMatch(new RegExp(`"daily";r=0;t=${wait}$`));
    expect(await problemBody(refused)).toMatchObject({ violated_policies: ["daily"] });
  });

  it("a plan of a quota alone: per-request decisions at the object, the quota exact", async () => {
    const e = envWith({ plans: [{ name: "trial", key_prefix: "trial_", limits: [{ limit: 7, period: "month" }] }] });
    const key = freshKey("trial_");
    const batch = await Promise.all(Array.from({ length: 12 }, () => handle(request(key, "/"), e)));
    expect(batch.filter((r) => r.status === 200)).toHaveLength(7);
    expect(await arrivalsFor(key)).toHaveLength(7);
    const ok = batch.find((r) => r.status === 200) as Response;
    expect(ok.headers.get("RateLimit-Policy")).toBe('"monthly";q=7');
  });
});

describe("a quota through the library", () => {
  it("limit() refuses past the quota until the next period; peek() shows it; refund() gives back", async () => {
    const limiter = createLimiter({
      name: "weekly",
      limits: [{ limit: 3, period: "week", time_zone: "Europe/Berlin" }],
    });
    // Without a name the default one follows the limits: a change would leave the counts behind.
    expect(() => createLimiter({ limits: [{ limit: 3, period: "week" }] })).toThrow(/^createLimiter\.name: required/);
    const key = freshKey();
    const granted = [];
    for (let i = 0; i < 3; i++) granted.push(await limiter.limit(envWith({}), key));
    expect(granted.every((r) => r.allowed)).toBe(true);
    const refused = await limiter.limit(envWith({}), key);
    expect(refused.allowed).toBe(false);
    expect(refused.limits[0]).toMatchObject({
      name: "weekly",
      period: "week",
      timeZone: "Europe/Berlin",
      remaining: 0,
    });
    expect(refused.retryAfterMs).toBeGreaterThan(0);
    expect(refused.retryAfterMs).toBeLessThanOrEqual(7 * 86_400_000 + 3_600_000);
    expect(await limiter.refund(envWith({}), granted[0] as (typeof granted)[number])).toBe(true);
    const peek = await limiter.peek(envWith({}), key);
    expect(peek).toMatchObject({ allowed: true });
    expect(peek.limits[0]?.remaining).toBe(1);
    expect((await limiter.limit(envWith({}), key)).allowed).toBe(true);
  });
});

describe("credits through the proxy and the operators' API", () => {
  const TOKEN = "credits-admin-token";
  const CONFIG = {
    limits: [{ limit: 1_000, window: "1m" }],
    plans: [
      { name: "prepaid", key_prefix: "pp_", limits: [{ limit: 1_000, window: "1m" }], credits: { initial: 4 } },
      { name: "free", key_prefix: "free_", limits: [{ limit: 10, window: "1m" }] },
    ],
    costs: [{ method: "POST", path: "/v1/render", cost: 3 }],
  };
  const admin = (e: ReturnType<typeof envWith>, body: unknown, token: string | null = TOKEN) =>
    handle(
      new Request("https://limiter.example/__limiter/credits", {
        method: "POST",
        headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify(body),
      }),
      e,
    );

  it("spends by cost, refuses with 402 and spends nothing, and a top-up counts at once", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey("pp_");
    expect((await handle(request(key, "/v1/render", { method: "POST", body: "{}" }), e)).status).toBe(200);
    const refused = await handle(request(key, "/v1/render", { method: "POST", body: "{}" }), e);
    expect(refused.status).toBe(402);
    expect(refused.headers.get("Retry-After")).toBeNull();
    expect(await problemBody(refused)).toMatchObject({ reason: "credits", balance: 1, cost: 3 });
    // A cheaper request still fits the balance: nothing was spent by the refusal.
    expect((await handle(request(key, "/v1/items"), e)).status).toBe(200);
    expect(await arrivalsFor(key)).toHaveLength(2);

    const topped = await admin(e, { key, add: 10 });
    expect(topped.status).toBe(200);
    expect(await topped.json()).toMatchObject({ plan: "prepaid", credits: { balance: 10 } });
    expect((await handle(request(key, "/v1/render", { method: "POST", body: "{}" }), e)).status).toBe(200);
    const status = await handle(
      new Request("https://limiter.example/__limiter/status", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ key }),
      }),
      e,
    );
    expect(await status.json()).toMatchObject({ credits: { balance: 7 }, quotas: [] });
  });

  it("the top-up call: 401 without the token, 400 for anything but a positive integer, 409 for a plan without credits", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey("pp_");
    expect((await admin(e, { key, add: 5 }, null)).status).toBe(401);
    expect((await admin(e, { key, add: 5 }, "wrong")).status).toBe(401);
    for (const add of [0, -3, 1.5, "5", null]) {
      const r = await admin(e, { key, add });
      expect(r.status).toBe(400);
      expect(await problemBody(r)).toMatchObject({
        detail: expect.stringMatching(/^"add": expected a positive whole number/),
      });
    }
    expect((await admin(e, { key })).status).toBe(400);
    expect((await admin(e, { key, add: 1, extra: true })).status).toBe(400);
    const none = await admin(e, { key: freshKey("free_"), add: 5 });
    expect(none.status).toBe(409);
    expect(await problemBody(none)).toMatchObject({ detail: expect.stringMatching(/has no credits/) });
    // Nothing was added by the refused calls: the first real one starts from initial.
    expect(await (await admin(e, { key, add: 1 })).json()).toMatchObject({ credits: { balance: 5 } });
  });

  it("a top-up past the largest safe integer is bad input: 400 naming add and the ceiling, nothing changed", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey("pp_");
    // initial 4 + (MAX − 4): exactly the most a balance holds.
    const full = await admin(e, { key, add: Number.MAX_SAFE_INTEGER - 4, id: "big" });
    expect(await full.json()).toMatchObject({ credits: { balance: Number.MAX_SAFE_INTEGER }, applied: true });
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const over = await admin(e, { key, add: 1, id: "one-more" });
    expect(over.status).toBe(400);
    expect((await problemBody(over)).detail).toBe(
      `"add": 1 would take the balance of ${Number.MAX_SAFE_INTEGER} past ${Number.MAX_SAFE_INTEGER}, the most it holds; nothing was added`,
    );
    // 1e400 reads as Infinity (JSON.stringify spells it null): said as what it is.
    const huge = await handle(
      new Request("https://limiter.example/__limiter/credits", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: `{"key": ${JSON.stringify(key)}, "add": 1e400}`,
      }),
      e,
    );
    expect(huge.status).toBe(400);
    expect((await problemBody(huge)).detail).toBe(
      `"add": expected a positive whole number of credits up to ${Number.MAX_SAFE_INTEGER}, got a number too large to hold`,
    );
    expect(error).not.toHaveBeenCalled();
    expect(log.mock.calls.map(([line]) => JSON.parse(String(line)).event)).toEqual([]);
    log.mockRestore();
    error.mockRestore();
    // Nothing changed, and the refused top-up's id was not kept: with room again it applies.
    const spend = await handle(request(key, "/v1/items"), e);
    expect(spend.status).toBe(200);
    const again = await admin(e, { key, add: 1, id: "one-more" });
    expect(await again.json()).toMatchObject({
      credits: { balance: Number.MAX_SAFE_INTEGER },
      applied: true,
      added: 1,
    });
  });

  it("a top-up's id sent again changes nothing, and the answer and the audit log say so", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey("pp_");
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const answers = await Promise.all(
      Array.from({ length: 50 }, async () => (await admin(e, { key, add: 7, id: "payment-50" })).json()),
    );
    const applied = answers.filter((a) => (a as { applied: boolean }).applied);
    expect(applied).toHaveLength(1);
    expect(applied[0]).toMatchObject({ added: 7, credits: { balance: 11 } });
    // The 49 others saw the balance after the one top-up, or after it: never a second 7.
    for (const a of answers) if (a !== applied[0]) expect(a).toMatchObject({ applied: false, added: 0 });
    const repeat = await admin(e, { key, add: 500, id: "payment-50" });
    expect(await repeat.json()).toMatchObject({ applied: false, added: 0, credits: { balance: 11 } });
    const lines = log.mock.calls
      .map(([line]) => JSON.parse(String(line)) as Record<string, unknown>)
      .filter((l) => l.event === "admin");
    expect(lines).toHaveLength(51);
    expect(lines.filter((l) => l.added === 7)).toEqual([expect.objectContaining({ action: "credits", balance: 11 })]);
    expect(lines.filter((l) => l.repeat === true && l.added === 0)).toHaveLength(50);
    expect(lines.some((l) => l.added === 500)).toBe(false);
    log.mockRestore();
  });

  it("the library: credit() adds, peek() shows the balance, refund() gives it back", async () => {
    const limiter = createLimiter({ name: "prepaid", limits: [{ limit: 100, window: "1m" }], credits: { initial: 1 } });
    const key = freshKey();
    const granted = await limiter.limit(envWith({}), key);
    expect(granted.credits).toEqual({ balance: 0, refuseWith: 402 });
    expect(await limiter.limit(envWith({}), key)).toMatchObject({ allowed: false, reason: "credits" });
    expect(await limiter.refund(envWith({}), granted)).toBe(true);
    expect((await limiter.peek(envWith({}), key)).credits).toEqual({ balance: 1, refuseWith: 402 });
    expect(await limiter.credit(envWith({}), key, 2, { id: "payment-1" })).toBe(3);
    // Sent again (say after a timeout): added once.
    expect(await limiter.credit(envWith({}), key, 2, { id: "payment-1" })).toBe(3);
    // topUp() says what the call did.
    expect(await limiter.topUp(envWith({}), key, 2, { id: "payment-1" })).toEqual({ balance: 3, applied: false });
    expect(await limiter.topUp(envWith({}), key, 2, { id: "payment-2" })).toEqual({ balance: 5, applied: true });
    const past = limiter.topUp(envWith({}), key, Number.MAX_SAFE_INTEGER);
    await expect(past).rejects.toBeInstanceOf(RangeError);
    await expect(past).rejects.toThrow(
      `add: ${Number.MAX_SAFE_INTEGER} would take the balance of 5 past ${Number.MAX_SAFE_INTEGER}, the most it holds`,
    );
    expect((await limiter.peek(envWith({}), key)).credits).toEqual({ balance: 5, refuseWith: 402 });
    await expect(limiter.credit(envWith({}), key, 0)).rejects.toThrow(/^add: /);
    const none = createLimiter({ limits: [{ limit: 100, window: "1m" }] });
    await expect(none.credit(envWith({}), key, 1)).rejects.toThrow(/has no credits/);
  });
});

describe("usage through the proxy, compared with what the origin saw", () => {
  const TOKEN = "usage-admin-token";
  const CONFIG = {
    limits: [
      { limit: 16, window: "1m" },
      { limit: 30, period: "day" },
    ],
    usage: { keep: "30d" },
    costs: [{ method: "POST", path: "/v1/heavy", cost: 2 }],
    refund: { status: [500] },
  };
  const usageCall = (e: ReturnType<typeof envWith>, body: unknown, accept = "application/json") =>
    handle(
      new Request("https://limiter.example/__limiter/usage", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", accept },
        body: JSON.stringify(body),
      }),
      e,
    );

  it("counts exactly the requests that reached the origin and were not refunded, with their cost", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey();
    const send = async (n: number, make: () => Request) =>
      (await Promise.all(Array.from({ length: n }, () => handle(make(), e)))).map((r) => r.status);
    // 6 + 3 × 2 units at once; then 2 the origin answers 500 (refunded: served, not counted); then 8 more at once,
    // 4 of them over the per-minute limit of 16 (those refused are not counted either).
    const statuses = [
      ...(await send(6, () => request(key, "/v1/items"))),
      ...(await send(3, () => request(key, "/v1/heavy", { method: "POST", body: "{}" }))),
    ];
    expect(await send(2, () => request(key, "/__special/status/500"))).toEqual([500, 500]);
    statuses.push(...(await send(8, () => request(key, "/v1/items"))));
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
    const arrivals = await arrivalsFor(key);
    const cost = arrivals.reduce((n, a) => n + (a.method === "POST" ? 2 : 1), 0);
    const r = await usageCall(e, { key, period: "day" });
    expect(r.status).toBe(200);
    const body = (await r.json()) as {
      periods: { requests: number; cost: number; start: string }[];
      time_zone: string;
    };
    expect(body.time_zone).toBe("UTC");
    // Summed over days (a run across midnight UTC has two).
    const sum = (ps: { requests: number; cost: number }[]) =>
      ps.reduce((a, p) => ({ requests: a.requests + p.requests, cost: a.cost + p.cost }), { requests: 0, cost: 0 });
    expect(arrivals.length).toBeGreaterThan(0);
    expect(sum(body.periods)).toEqual({ requests: arrivals.length, cost });
    const month = (await (await usageCall(e, { key, period: "month" })).json()) as typeof body;
    expect(sum(month.periods)).toEqual({ requests: arrivals.length, cost });
    const csv = await usageCall(e, { key, period: "day" }, "text/csv");
    expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
    const [head, ...lines] = (await csv.text()).trim().split("\n");
    expect(head).toBe("start,end,requests,cost");
    for (const line of lines) expect(line).toMatch(/^\d{4}-\d\d-\d\dT00:00:00\.000Z,\d{4}-[^,]+,\d+,\d+$/);
    const rows = lines
      .map((l) => l.split(","))
      .map(([, , requests, c]) => ({ requests: Number(requests), cost: Number(c) }));
    expect(sum(rows)).toEqual({ requests: arrivals.length, cost });
  });

  it("the usage call: 401 without the token, 400 for a bad period or range, 409 for a plan without usage", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey();
    const noToken = await handle(
      new Request("https://limiter.example/__limiter/usage", {
        method: "POST",
        body: JSON.stringify({ key, period: "day" }),
      }),
      e,
    );
    expect(noToken.status).toBe(401);
    for (const body of [
      { key },
      { key, period: "week" },
      { key, period: "day", from: "yesterday" },
      { key, period: "day", from: 5, to: 1 },
    ]) {
      expect((await usageCall(e, body)).status).toBe(400);
    }
    expect(await (await usageCall(e, { key, period: "day", from: "2020-01-01T00:00:00Z" })).json()).toMatchObject({
      periods: [],
    });
    const plain = envWith({ limits: [{ limit: 5, window: "1m" }] }, { ADMIN_TOKEN: TOKEN });
    expect((await usageCall(plain, { key, period: "day" })).status).toBe(409);
  });

  it("CSV for an Accept naming text/csv in any case, with parameters, not at q=0; not for another type", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey();
    expect((await handle(request(key, "/v1/items"), e)).status).toBe(200);
    const typeFor = async (accept: string) =>
      (await usageCall(e, { key, period: "day" }, accept)).headers.get("content-type");
    const CSV = "text/csv; charset=utf-8";
    for (const accept of ["text/csv", "TEXT/CSV", "Text/Csv; charset=UTF-8", "application/json, text/csv;q=0.5"]) {
      expect(await typeFor(accept), accept).toBe(CSV);
    }
    for (const accept of ["text/csvx", "text/csv;q=0", "text/csv; q=0.0", "application/json", "*/*", "text/*"]) {
      expect(await typeFor(accept), accept).toBe("application/json");
    }
  });

  it("from and to: ISO 8601 dates and times or ms; any other spelling is 400 naming the field", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey();
    for (const [field, value] of [
      ["from", "Nov 1 2026"],
      ["to", "Nov 1 2026"],
      ["from", "2026-11-01 00:00:00"],
      ["from", "2026-02-30"],
      ["to", "1 November 2026"],
      ["from", "2026-11-01T00:00:00ZZ"],
    ]) {
      const r = await usageCall(e, { key, period: "day", [field as string]: value });
      expect(r.status, `${field}: ${value}`).toBe(400);
      expect((await problemBody(r)).detail).toBe(
        `"${field}": expected an ISO 8601 time like "2026-11-01T00:00:00Z" (or a date, "2026-11-01") or ms since the epoch, got ${JSON.stringify(value)}`,
      );
    }
    for (const from of ["2026-11-01", "2026-11-01T00:00", "2026-11-01T05:45:00+05:45", "2026-11-01T00:00:00.5Z", 0]) {
      expect((await usageCall(e, { key, period: "day", from })).status, String(from)).toBe(200);
    }
  });

  it("a day whose every request was refunded is left out, as a day without use", async () => {
    const e = envWith(CONFIG, { ADMIN_TOKEN: TOKEN });
    const key = freshKey();
    expect(
      await Promise.all([0, 1].map(async () => (await handle(request(key, "/__special/status/500"), e)).status)),
    ).toEqual([500, 500]);
    for (const period of ["day", "month"]) {
      expect(await (await usageCall(e, { key, period })).json(), period).toMatchObject({ periods: [] });
    }
    expect(await (await usageCall(e, { key, period: "day" }, "text/csv")).text()).toBe("start,end,requests,cost\n");
    // One request that stays: the day is listed with it alone.
    expect((await handle(request(key, "/v1/items"), e)).status).toBe(200);
    expect(await (await usageCall(e, { key, period: "day" })).json()).toMatchObject({
      periods: [{ requests: 1, cost: 1 }],
    });
  });

  it("shows a time zone as configured, not as the runtime renames it (Asia/Kathmandu, Asia/Kolkata)", async () => {
    const e = envWith(
      {
        limits: [
          { limit: 100, window: "1m" },
          { limit: 50, period: "day", time_zone: "Asia/Kolkata", name: "daily" },
        ],
        usage: { time_zone: "Asia/Kathmandu" },
      },
      { ADMIN_TOKEN: TOKEN },
    );
    const key = freshKey();
    expect((await handle(request(key, "/v1/items"), e)).status).toBe(200);
    expect(await (await usageCall(e, { key, period: "day" })).json()).toMatchObject({
      time_zone: "Asia/Kathmandu",
      periods: [{ requests: 1 }],
    });
    const status = await handle(
      new Request("https://limiter.example/__limiter/status", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ key }),
      }),
      e,
    );
    expect(await status.json()).toMatchObject({
      usage: { time_zone: "Asia/Kathmandu" },
      quotas: [{ name: "daily", time_zone: "Asia/Kolkata", used: 1 }],
    });
  });

  it("the library's usage()", async () => {
    const limiter = createLimiter({ name: "metered", limits: [{ limit: 100, window: "1m" }], usage: true });
    const key = freshKey();
    const granted = [];
    for (let i = 0; i < 3; i++) granted.push(await limiter.limit(envWith({}), key, { cost: 2 }));
    expect(await limiter.refund(envWith({}), granted[0] as (typeof granted)[number])).toBe(true);
    const days = await limiter.usage(envWith({}), key, { period: "day" });
    expect(days).toEqual([expect.objectContaining({ requests: 2, cost: 4 })]);
    // Every request refunded: the day is left out.
    for (const g of granted.slice(1)) expect(await limiter.refund(envWith({}), g)).toBe(true);
    expect(await limiter.usage(envWith({}), key, { period: "day" })).toEqual([]);
    await expect(limiter.usage(envWith({}), key, { period: "year" as never })).rejects.toThrow(/^period: /);
    await expect(
      createLimiter({ limits: [{ limit: 100, window: "1m" }] }).usage(envWith({}), key, { period: "day" }),
    ).rejects.toThrow(/keeps no usage/);
  });
});
