// The operators' API and page over real HTTP: wrangler dev (workerd) with ADMIN_TOKEN passed as a var, in front of
// the recording origin. Wrong tokens, no token configured, bad JSON, huge bodies, unknown keys, concurrent traffic
// on the key; then the page in a real headless Chromium (Debian's, installed by scripts/install-chromium.sh when
// missing): look a key up, reset it, check what it shows, and keep a screenshot in artifacts/ (git-ignored).
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { readdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { type Browser, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { type Header, rawRequest, sendRaw } from "./raw-http.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const TOKEN = "e2e-admin-token-0123456789";
// Leases off: counts are then exact per request, so the page's numbers can be checked to the unit (how operators'
// changes meet leases is tested in test/integration/admin.test.ts).
const RATE_LIMIT = {
  leases: false,
  limits: [{ limit: 100, window: "1m" }],
  plans: [
    {
      name: "small",
      key_prefix: "small_",
      limits: [{ limit: 20, window: "1m" }],
      routes: [{ name: "search", method: "POST", path: "/v1/search", limits: [{ limit: 5, window: "1m" }] }],
    },
  ],
};

let origin: Origin;
let limiter: Limiter;
let state: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  origin = await startOrigin();
  state = await tempDir("limiter-e2e-admin-");
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

/** The limiter's objects on disk (Miniflare keeps one SQLite database each): file → its tables, sorted. */
async function objectTables(): Promise<Map<string, string[]>> {
  const dir = join(state.path, "v3/do/strict-edge-rate-limiter-RateLimiter");
  const names = await readdir(dir).catch(() => [] as string[]);
  const out = new Map<string, string[]>();
  for (const n of names) {
    if (!n.endsWith(".sqlite") || n === "metadata.sqlite") continue;
    const db = new DatabaseSync(join(dir, n), { readOnly: true });
    try {
      const rows = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all();
      out.set(
        n,
        rows.map((r) => String(r.name)).filter((t) => !t.startsWith("_cf_") && !t.startsWith("__miniflare_")),
      );
    } finally {
      db.close();
    }
  }
  return out;
}

const key = (prefix = "small_") => `${prefix}${crypto.randomUUID()}`;
const arrivals = (k: string) => origin.arrivals.filter((a) => a.headers["x-api-key"] === k);
const traffic = (k: string) => fetch(`${limiter.url}/v1/items`, { headers: { "x-api-key": k } });

function post(path: string, body: string, token: string | null = TOKEN, headers: Record<string, string> = {}) {
  return fetch(`${limiter.url}/__limiter/${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(token === null ? {} : { authorization: `Bearer ${token}` }),
      ...headers,
    },
    body,
  });
}

async function ok(path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await post(path, JSON.stringify(body));
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

describe("the admin API over HTTP", () => {
  it("wrong or missing tokens: 401 and nothing happens", async () => {
    const k = key();
    await traffic(k);
    for (const token of [null, "wrong", `${TOKEN}0`, TOKEN.slice(0, -1)]) {
      const res = await post("reset", JSON.stringify({ key: k }), token);
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toBe('Bearer realm="limiter-admin"');
    }
    expect((await ok("status", { key: k })).limits).toMatchObject([{ used: 1 }]);
    expect(arrivals(k)).toHaveLength(1);
  });

  it("bad JSON → 400, huge bodies → 413 (declared and chunked)", async () => {
    const bad = await post("status", "{not json");
    expect(bad.status).toBe(400);
    expect(bad.headers.get("content-type")).toBe("application/problem+json");
    expect(((await bad.json()) as { detail: string }).detail).toMatch(/^body: not valid JSON/);
    const huge = await post("status", JSON.stringify({ key: "k", pad: "x".repeat(1 << 20) }));
    expect(huge.status).toBe(413);
    // Chunked, on a raw socket: the limiter may answer 413 and close before the client has written every chunk, and a
    // fetch client then reports its failed write (EPIPE) instead of the answer it had already received.
    const chunks = Buffer.concat([
      ...Array.from({ length: 16 }, () => Buffer.from(`400\r\n${"x".repeat(1024)}\r\n`, "latin1")),
      Buffer.from("0\r\n\r\n", "latin1"),
    ]);
    const head: Header[] = [
      ["host", `127.0.0.1:${limiter.port}`],
      ["connection", "close"],
      ["authorization", `Bearer ${TOKEN}`],
      ["transfer-encoding", "chunked"],
    ];
    const chunked = await sendRaw(limiter.port, rawRequest("POST", "/__limiter/status", head, chunks));
    expect(chunked.status).toBe(413);
  });

  it("unknown keys: status answers with nothing used, the key is never in the answer, no table is created", async () => {
    const before = new Set((await objectTables()).keys());
    for (let i = 0; i < 3; i++) {
      const k = key();
      const s = await ok("status", { key: k });
      expect(s).toMatchObject({ plan: "small", stored: false, limits: [{ used: 0, remaining: 20 }], block: null });
      expect(JSON.stringify(s)).not.toContain(k);
    }
    // Locally every object woken gets a database file, whatever it does: workerd opens one and Miniflare records
    // the object's name in it (`__miniflare_do_name`, left out here with workerd's own `_cf_` tables). What matters
    // is that the object wrote nothing into it: none of its tables, so no row and no alarm.
    const added = [...(await objectTables())].filter(([f]) => !before.has(f));
    expect(added.map(([, tables]) => tables)).toEqual([[], [], []]);
    // The check bites: one request creates the tables.
    await traffic(key());
    expect([...(await objectTables()).values()]).toContainEqual(["budget_slots", "meta"]);
  });

  it("block → 429 with Retry-After from every request; override shows in the headers; both undone", async () => {
    const k = key();
    await ok("block", { key: k, for: "30s" });
    const blocked = await traffic(k);
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get("retry-after"))).toBeGreaterThanOrEqual(29);
    expect(Number(blocked.headers.get("retry-after"))).toBeLessThanOrEqual(30);
    await ok("unblock", { key: k });
    await new Promise((r) => setTimeout(r, 1000)); // a cached denial is re-asked within DENY_RECHECK_MS
    expect((await traffic(k)).status).toBe(200);
    await ok("override", { key: k, limits: [{ limit: 500, window: "1m", name: "vip" }] });
    expect((await traffic(k)).headers.get("ratelimit-policy")).toBe('"vip";q=500;w=60');
    await ok("override/delete", { key: k });
    expect((await traffic(k)).headers.get("ratelimit-policy")).toBe('"per-minute";q=20;w=60');
    expect(arrivals(k)).toHaveLength(3);
  });

  it("concurrent traffic on the key with a reset in the middle: never more than the limit on each side of it", async () => {
    const k = key();
    const burst = () => Array.from({ length: 30 }, () => traffic(k).then((r) => r.status));
    const before = await Promise.all(burst());
    expect(before.filter((s) => s === 200)).toHaveLength(20);
    const [after, reset] = await Promise.all([Promise.all(burst()), post("reset", JSON.stringify({ key: k }))]);
    expect(reset.status).toBe(200);
    const granted = after.filter((s) => s === 200).length;
    // Requests decided before the reset were refused, those after it see a fresh window: at most 20 of them pass.
    expect(granted).toBeLessThanOrEqual(20);
    expect(arrivals(k)).toHaveLength(20 + granted);
    expect(((await ok("status", { key: k })).limits as { used: number }[])[0]?.used).toBe(granted);
  });
});

describe("without ADMIN_TOKEN", () => {
  it("the admin paths are ordinary traffic", async () => {
    const dir = await tempDir("limiter-e2e-noadmin-");
    const plain = await startLimiter({ origin: origin.url, rateLimit: RATE_LIMIT, persistTo: dir.path });
    try {
      const k = key();
      const res = await fetch(`${plain.url}/__limiter/status`, {
        method: "POST",
        headers: { "x-api-key": k },
        body: JSON.stringify({ key: k }),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get("ratelimit-policy")).toBe('"per-minute";q=20;w=60');
      expect(arrivals(k).map((a) => a.url)).toEqual(["/__limiter/status"]);
    } finally {
      await plain.stop();
      await dir.cleanup();
    }
  });
});

describe("the page in headless Chromium", () => {
  let browser: Browser;

  beforeAll(async () => {
    const executablePath = execFileSync(join(ROOT, "scripts/install-chromium.sh"), { encoding: "utf8" }).trim();
    browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-gpu"] });
  });

  afterAll(async () => {
    await browser?.close();
  });

  it("looks a key up (bars and chart, its route's too), resets it, and shows the reset; a wrong token shows the 401", async () => {
    const k = key();
    for (let i = 0; i < 5; i++) expect((await traffic(k)).status).toBe(200);
    for (let i = 0; i < 2; i++) {
      const searched = await fetch(`${limiter.url}/v1/search`, { method: "POST", headers: { "x-api-key": k } });
      await searched.arrayBuffer();
      expect(searched.status).toBe(200);
    }
    const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
    const requests: string[] = [];
    page.on("request", (r) => requests.push(new URL(r.url()).pathname));
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    await page.goto(`${limiter.url}/__limiter/`);

    await page.fill("input[name=token]", "not-the-token");
    await page.fill("input[name=key]", k);
    await page.click("button[type=submit]");
    await page.waitForSelector("#message.error");
    expect(await page.textContent("#message")).toMatch(/Unauthorized/);
    errors.length = 0; // the browser reports the 401 fetch as a console error

    await page.fill("input[name=token]", TOKEN);
    await page.click("button[type=submit]");
    await page.waitForSelector("#result:not([hidden])");
    expect(await page.textContent("#plan")).toBe("small");
    expect(await page.textContent(".limit[data-limit='per-minute'] .usage")).toMatch(/^7 used · 13 left/);
    expect(await page.getAttribute(".limit[data-limit='per-minute'] .bar", "aria-valuenow")).toBe("7");
    expect(await page.textContent(".limit[data-limit='search'] strong")).toBe(
      "search · 5 per 60 s (route POST /v1/search)",
    );
    expect(await page.textContent(".limit[data-limit='search'] .usage")).toMatch(/^2 used · 3 left/);
    const bars = await page.$$eval("#chart rect", (rs) => rs.map((r) => Number(r.getAttribute("data-count"))));
    expect(bars.reduce((a, b) => a + b, 0)).toBe(7);
    expect(await page.textContent("#chart-caption")).toMatch(/^7 granted in the window/);
    mkdirSync(join(ROOT, "artifacts"), { recursive: true });
    await page.screenshot({ path: join(ROOT, "artifacts/admin-page-before-reset.png"), fullPage: true });

    await page.click("#reset");
    await page.waitForSelector("#message.ok");
    expect(await page.textContent("#message")).toBe("Windows reset.");
    expect(await page.textContent(".limit[data-limit='per-minute'] .usage")).toMatch(/^0 used · 20 left/);
    expect(await page.textContent(".limit[data-limit='search'] .usage")).toMatch(/^0 used · 5 left/);
    expect(await page.$$("#chart rect")).toHaveLength(0);
    await page.screenshot({ path: join(ROOT, "artifacts/admin-page.png"), fullPage: true });

    // The reset is real: the key gets its whole limit again.
    const statuses = await Promise.all(Array.from({ length: 21 }, () => traffic(k).then((r) => r.status)));
    expect(statuses.filter((s) => s === 200)).toHaveLength(20);
    // The page asked the admin API and nothing else.
    expect([...new Set(requests)].sort()).toEqual(["/__limiter/", "/__limiter/reset", "/__limiter/status"]);
    expect(errors).toEqual([]);
    await page.close();
  });
});
