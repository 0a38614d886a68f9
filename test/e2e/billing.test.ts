// Calendar quotas, prepaid credits and exact usage through the proxy under `wrangler dev`, in front of the recording
// origin (docs/configuration.md, "Quotas and credits", "Usage"; docs/operating.md): a daily quota refused until
// midnight in its zone, a balance refused with 402 until an operator tops it up, usage equal to what the origin
// saw, and the operators' page in headless Chromium showing the key's quota, balance and month. Issue 53: a top-up past
// the largest safe integer (400, not 503), one id sent 50 times at once (added once, logged as what happened), usage's
// Accept, from and refunded days, zones as configured, and the page's Add double-clicked (one top-up).
import { execFileSync } from "node:child_process";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { secondsToMidnight } from "../support/calendar.ts";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const TOKEN = "e2e-billing-token-0123456789";
const RATE_LIMIT = {
  limits: [{ limit: 100, window: "1m" }],
  plans: [
    {
      name: "daily",
      key_prefix: "d_",
      limits: [
        { limit: 50, window: "1s" },
        { limit: 8, period: "day", time_zone: "Asia/Tokyo" },
      ],
    },
    {
      name: "prepaid",
      key_prefix: "p_",
      limits: [
        { limit: 50, window: "1s" },
        { limit: 1000, period: "month", time_zone: "America/New_York" },
      ],
      credits: { initial: 3 },
      usage: true,
    },
    {
      // Top-ups near the ceiling, repeated ids, refunded days and a zone ICU renames (issue 53).
      name: "nepal",
      key_prefix: "n_",
      limits: [
        { limit: 50, window: "1s" },
        { limit: 1000, period: "day", time_zone: "Asia/Kolkata", name: "daily" },
      ],
      credits: { initial: 5 },
      usage: { time_zone: "Asia/Kathmandu" },
    },
  ],
  refund: { status: [500] },
};

let origin: Origin;
let limiter: Limiter;
let state: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  origin = await startOrigin();
  state = await tempDir("limiter-e2e-billing-");
  limiter = await startLimiter({
    origin: origin.url,
    rateLimit: RATE_LIMIT,
    persistTo: state.path,
    vars: { ADMIN_TOKEN: TOKEN },
  });
});

afterAll(async () => {
  await limiter?.stop();
  await origin?.close();
  await state?.cleanup();
});

const send = (k: string, path = "/v1/items") => fetch(`${limiter.url}${path}`, { headers: { "x-api-key": k } });
const arrivals = (k: string) => origin.arrivals.filter((a) => a.headers["x-api-key"] === k);
const admin = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${limiter.url}/__limiter/${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });

/** The Worker's JSON log lines so far (console.error lines arrive inside wrangler's own prefix and suffix). */
function jsonLines(): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = [];
  for (const line of limiter.output().split("\n")) {
    const at = line.indexOf('{"event":');
    if (at < 0) continue;
    try {
      lines.push(JSON.parse(line.slice(at, line.lastIndexOf("}") + 1)) as Record<string, unknown>);
    } catch {
      // not one of ours
    }
  }
  return lines;
}

/** The `admin` lines of `keyId`, once `n` of them have reached the output (workerd writes its logs in order). */
async function adminLines(keyId: string, n: number): Promise<Record<string, unknown>[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const lines = jsonLines().filter((l) => l.event === "admin" && l.key_id === keyId);
    if (lines.length >= n || Date.now() > deadline) return lines;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("billing-grade counts under wrangler dev", () => {
  it("a daily quota: exactly its limit reaches the origin, sent at once; then 429 until midnight in Tokyo", async () => {
    const k = `d_${crypto.randomUUID()}`;
    const statuses = await Promise.all(
      Array.from({ length: 14 }, () =>
        send(k).then(async (r) => {
          await r.arrayBuffer();
          return r.status;
        }),
      ),
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(8);
    expect(arrivals(k)).toHaveLength(8);
    const refused = await send(k);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("ratelimit-policy")).toBe('"per-second";q=50;w=1, "daily";q=8');
    expect(Math.abs(Number(refused.headers.get("retry-after")) - secondsToMidnight("Asia/Tokyo"))).toBeLessThanOrEqual(
      3,
    );
  });

  it("credits: 402 once spent, nothing spent by the refusal; a top-up through the admin API; usage equals what the origin saw", async () => {
    const k = `p_${crypto.randomUUID()}`;
    for (let i = 0; i < 3; i++) expect((await send(k)).status).toBe(200);
    const refused = await send(k);
    expect(refused.status).toBe(402);
    expect(await refused.json()).toMatchObject({ reason: "credits", balance: 0, cost: 1 });
    const topped = await admin("credits", { key: k, add: 2 });
    expect(topped.status).toBe(200);
    expect(await topped.json()).toMatchObject({ credits: { balance: 2 } });
    expect((await send(k)).status).toBe(200);
    expect((await send(k)).status).toBe(200);
    expect((await send(k)).status).toBe(402);
    const seen = arrivals(k).length;
    expect(seen).toBe(5);
    const usage = await admin("usage", { key: k, period: "month" });
    expect(await usage.json()).toMatchObject({ time_zone: "UTC", periods: [{ requests: seen, cost: seen }] });
    const csv = await (await admin("usage", { key: k, period: "day" }, { accept: "text/csv" })).text();
    expect(csv.trim().split("\n")).toEqual([
      "start,end,requests,cost",
      expect.stringMatching(new RegExp(`,${seen},${seen}$`)),
    ]);
    const status = (await (await admin("status", { key: k })).json()) as Record<string, unknown>;
    expect(status).toMatchObject({ credits: { balance: 0 }, usage: { time_zone: "UTC", keep_days: 400 } });
    expect(status.quotas).toEqual([expect.objectContaining({ name: "monthly", used: seen, remaining: 1000 - seen })]);
  });

  it("a top-up past the largest safe integer: 400 naming add and the ceiling, nothing changed (was 503)", async () => {
    const k = `n_${crypto.randomUUID()}`;
    const full = await admin("credits", { key: k, add: 9007199254740986 });
    expect(await full.json()).toMatchObject({ credits: { balance: Number.MAX_SAFE_INTEGER }, applied: true });
    const over = await admin("credits", { key: k, add: 1 });
    expect(over.status).toBe(400);
    expect(over.headers.get("content-type")).toBe("application/problem+json");
    expect(((await over.json()) as { detail: string }).detail).toBe(
      `"add": 1 would take the balance of ${Number.MAX_SAFE_INTEGER} past ${Number.MAX_SAFE_INTEGER}, the most it holds; nothing was added`,
    );
    const huge = await fetch(`${limiter.url}/__limiter/credits`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: `{"key": ${JSON.stringify(k)}, "add": 1e400}`,
    });
    expect(huge.status).toBe(400);
    expect(((await huge.json()) as { detail: string }).detail).toMatch(/got a number too large to hold$/);
    expect(await (await admin("status", { key: k })).json()).toMatchObject({
      credits: { balance: Number.MAX_SAFE_INTEGER },
    });
    expect(jsonLines().filter((l) => l.event === "admin_error")).toEqual([]);
  });

  it("50 top-ups at once with one id add once; the answers and the audit log say what happened", async () => {
    const k = `n_${crypto.randomUUID()}`;
    const answers = (await Promise.all(
      Array.from({ length: 50 }, async () => (await admin("credits", { key: k, add: 7, id: "pay-7" })).json()),
    )) as { key_id: string; applied: boolean; added: number; credits: { balance: number } }[];
    expect(answers.filter((a) => a.applied).map((a) => [a.added, a.credits.balance])).toEqual([[7, 12]]);
    expect(answers.filter((a) => !a.applied).map((a) => a.added)).toEqual(Array(49).fill(0));
    const again = await admin("credits", { key: k, add: 500, id: "pay-7" });
    expect(await again.json()).toMatchObject({ applied: false, added: 0, credits: { balance: 12 } });
    const lines = await adminLines((answers[0] as { key_id: string }).key_id, 51);
    expect(lines).toHaveLength(51);
    expect(lines.filter((l) => l.added === 7)).toEqual([expect.objectContaining({ action: "credits", balance: 12 })]);
    expect(lines.filter((l) => l.added === 0 && l.repeat === true)).toHaveLength(50);
  });

  it("usage: TEXT/CSV is CSV, text/csvx is not; from must be ISO; refunded days left out; the zone as configured", async () => {
    const k = `n_${crypto.randomUUID()}`;
    for (let i = 0; i < 2; i++) expect((await send(k, "/v1/__special/status/500")).status).toBe(500);
    const empty = (await (await admin("usage", { key: k, period: "day" })).json()) as Record<string, unknown>;
    expect(empty).toMatchObject({ time_zone: "Asia/Kathmandu", periods: [] });
    expect((await send(k)).status).toBe(200);
    const csv = await admin("usage", { key: k, period: "day" }, { accept: "TEXT/CSV" });
    expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
    expect((await csv.text()).trim().split("\n")).toEqual([
      "start,end,requests,cost",
      expect.stringMatching(/T18:15:00\.000Z,.*,1,1$/),
    ]);
    const notCsv = await admin("usage", { key: k, period: "day" }, { accept: "text/csvx" });
    expect(notCsv.headers.get("content-type")).toBe("application/json");
    const from = await admin("usage", { key: k, period: "day", from: "Nov 1 2026" });
    expect(from.status).toBe(400);
    expect(((await from.json()) as { detail: string }).detail).toMatch(/^"from": expected an ISO 8601 time/);
    expect(await (await admin("status", { key: k })).json()).toMatchObject({
      usage: { time_zone: "Asia/Kathmandu" },
      quotas: [{ name: "daily", time_zone: "Asia/Kolkata" }],
    });
  });

  it("the page's Add: a double click adds once, each top-up carries its own id", async () => {
    const k = `p_${crypto.randomUUID()}`;
    const executablePath = execFileSync(join(ROOT, "scripts/install-chromium.sh"), { encoding: "utf8" }).trim();
    const browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-gpu"] });
    try {
      const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      const sent: { add: number; id?: string }[] = [];
      page.on("request", (r) => {
        if (r.url().endsWith("/__limiter/credits")) sent.push(r.postDataJSON() as { add: number; id?: string });
      });
      await page.goto(`${limiter.url}/__limiter/`);
      await page.fill("input[name=token]", TOKEN);
      await page.fill("input[name=key]", k);
      await page.click("button[type=submit]");
      await page.waitForSelector("#result:not([hidden])");
      expect(await page.textContent("#credits")).toBe("3 left");
      await page.fill("#credit-add", "100");
      await page.dblclick("#do-credit");
      await page.waitForSelector("#message.ok");
      await page.waitForSelector("#do-credit:not([disabled])");
      expect(await page.textContent("#credits")).toBe("103 left");
      expect(await (await admin("status", { key: k })).json()).toMatchObject({ credits: { balance: 103 } });
      // Whatever reached the API carried one id: one top-up.
      expect(sent.length).toBeGreaterThanOrEqual(1);
      expect(new Set(sent.map((b) => b.id)).size).toBe(1);
      expect(sent[0]?.id).toMatch(/^page-[0-9a-f]{32}$/);
      // A second top-up is a new one, with an id of its own.
      await page.click("#do-credit");
      await page.waitForSelector("#credits:text-is('203 left')");
      expect(new Set(sent.map((b) => b.id)).size).toBe(2);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("the operators' page shows the key's quota, balance and month", async () => {
    const k = `p_${crypto.randomUUID()}`;
    for (let i = 0; i < 2; i++) expect((await send(k)).status).toBe(200);
    const executablePath = execFileSync(join(ROOT, "scripts/install-chromium.sh"), { encoding: "utf8" }).trim();
    const browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-gpu"] });
    try {
      const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      await page.goto(`${limiter.url}/__limiter/`);
      await page.fill("input[name=token]", TOKEN);
      await page.fill("input[name=key]", k);
      await page.click("button[type=submit]");
      await page.waitForSelector("#result:not([hidden])");
      // A selector, not a string predicate: the page's Content-Security-Policy forbids the eval Playwright polls it with.
      await page.waitForSelector("#month:has-text('requests')");
      expect(await page.textContent("#month")).toBe("2 requests, cost 2 (UTC)");
      expect(await page.textContent("#credits")).toBe("1 left");
      expect(await page.textContent(".limit[data-limit='monthly'] strong")).toBe(
        "monthly · 1000 per month (America/New_York)",
      );
      expect(await page.textContent(".limit[data-limit='monthly'] .usage")).toMatch(/^2 used · 998 left · resets /);
      await page.fill("#credit-add", "5");
      await page.click("#do-credit");
      await page.waitForSelector("#message.ok");
      expect(await page.textContent("#credits")).toBe("6 left");
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
