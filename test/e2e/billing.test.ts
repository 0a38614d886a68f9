// Calendar quotas, prepaid credits and exact usage through the proxy under `wrangler dev`, in front of the recording
// origin (docs/configuration.md, "Quotas and credits", "Usage"; docs/operating.md): a daily quota refused until
// midnight in its zone, a balance refused with 402 until an operator tops it up, usage equal to what the origin
// saw, and the operators' page in headless Chromium showing the key's quota, balance and month.
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
  ],
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
      await page.waitForFunction("document.getElementById('month').textContent.includes('requests')");
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
