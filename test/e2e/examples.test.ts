// The package as a newcomer gets it, by README's library quick start as written: a clone of this repository (its
// files as they stand), `npm install && npm pack` there, and a new project beside it that installs the tarball, hono,
// wrangler and Node 22 by README's command lines, with README's wrangler.toml and its hono app. Then each project in
// examples/, in the clone, installed as it stands (its package.json names the clone's tarball), typechecked against
// its `wrangler types` Env (examples/worker with README's Worker code beside it), run under its own `wrangler dev`
// with its own config — a wrangler.toml (examples/worker, examples/proxy) or a wrangler.jsonc (examples/hono-app),
// each declaring the class in `exports` — and driven over HTTP; examples/hono-app's own @cloudflare/vitest-plugin test,
// which moves the test kit's clock and resets every key, typechecked and run by `npm test` there. Last, a newcomer's next steps with the packed proxy:
// docs/llm.md's OpenAI configuration and configuration.md's signed plan as written, a key minted by the admin API, a
// chat completion settled to what a fake model reported, a forged key refused before the model.
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { cp, mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { problemOf } from "../support/problem.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const VERSION = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;
const run = promisify(execFile);
/** npm as in CI: from the cache when it can, without the audit and funding notes. */
const NPM_ENV = {
  ...process.env,
  npm_config_prefer_offline: "true",
  npm_config_audit: "false",
  npm_config_fund: "false",
};
/** A command line run by the shell in `cwd`, as a user types it. */
const sh = (line: string, cwd: string) => run("sh", ["-c", line], { cwd, env: NPM_ENV, maxBuffer: 32 << 20 });

let temp: Awaited<ReturnType<typeof tempDir>>;
/** The clone of this repository, where README's commands pack the package. */
let clone = "";
/** The new project beside the clone that README's commands set up. */
let readmeApp = "";

/** README's section "### Inside your Worker or hono app". */
function quickStartSection(): string {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const start = readme.indexOf("### Inside your Worker or hono app");
  return readme.slice(start, readme.indexOf("\n### ", start + 1));
}

/** README's quick-start code blocks (```ts): the hono app, then the Worker. */
function quickStart(): string[] {
  return [...quickStartSection().matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");
}

/** The first fenced block of README's quick start in `lang`. */
function quickStartBlock(lang: "sh" | "toml"): string {
  return quickStartSection().match(new RegExp(`\`\`\`${lang}\n([\\s\\S]*?)\`\`\``))?.[1] ?? "";
}

/** A project in the clone's examples/, installed as it stands and typechecked (with `extra` files written first). */
async function project(name: string, extra: Record<string, string> = {}, origin?: string): Promise<Limiter> {
  const dir = join(clone, "examples", name);
  for (const [file, text] of Object.entries(extra)) await writeFile(join(dir, file), text);
  await sh("npm install", dir);
  const bin = (tool: string) => join(dir, "node_modules/.bin", tool);
  await run(bin("wrangler"), ["types"], { cwd: dir });
  // The user's generated Env and the library's types fit without casts.
  await run(bin("tsc"), ["-p", "."], { cwd: dir });
  const configs = ["wrangler.toml", "wrangler.jsonc"].filter((f) => existsSync(join(dir, f)));
  expect(configs, `examples/${name} has one wrangler config`).toHaveLength(1);
  return startLimiter({
    persistTo: join(dir, ".state"),
    config: configs[0] as string,
    project: { dir, wrangler: bin("wrangler") },
    ...(origin === undefined ? {} : { origin }),
  });
}

beforeAll(async () => {
  temp = await tempDir("examples-");
  // The clone: this repository's files as they stand (committed or not, ignored ones left out), nothing built.
  clone = join(temp.path, "strict-edge-rate-limiter");
  const { stdout } = await run("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
    cwd: ROOT,
    maxBuffer: 32 << 20,
  });
  for (const file of stdout.split("\0")) {
    if (file !== "" && existsSync(join(ROOT, file))) await cp(join(ROOT, file), join(clone, file), { recursive: true });
  }
  // README's library quick start: every command line as written, in a new project beside the clone.
  readmeApp = join(temp.path, "readme-app");
  await mkdir(join(readmeApp, "src"), { recursive: true });
  await sh("npm init -y", readmeApp);
  const block = quickStartBlock("sh");
  expect(block).toContain(
    "\n# once published, instead of the two lines above: npm install strict-edge-rate-limiter hono\n",
  );
  const lines = block
    .split("\n")
    .map((l) => l.replace(/\s+#.*$/, "").trim())
    .filter((l) => l.length > 0 && !l.startsWith("#"));
  expect(lines.slice(0, 2)).toEqual([
    "(cd ../strict-edge-rate-limiter && npm install && npm pack)",
    `npm install ../strict-edge-rate-limiter/strict-edge-rate-limiter-${VERSION}.tgz hono`,
  ]);
  for (const line of lines) await sh(line, readmeApp);
}, 900_000);

afterAll(async () => {
  await temp?.cleanup();
});

describe("README's library quick start, run as written in a new project beside a clone", () => {
  let app: Limiter;
  beforeAll(async () => {
    const [hono] = quickStart();
    await writeFile(join(readmeApp, "src/index.ts"), hono as string);
    const toml = quickStartBlock("toml");
    expect(toml).toMatch(/^name = "[^"]+"\nmain = "src\/index\.ts"\ncompatibility_date = "\d{4}-\d\d-\d\d"/);
    await writeFile(join(readmeApp, "wrangler.toml"), toml);
    await sh("npx wrangler types", readmeApp);
    app = await startLimiter({
      persistTo: join(readmeApp, ".state"),
      config: "wrangler.toml",
      project: { dir: readmeApp, wrangler: join(readmeApp, "node_modules/.bin/wrangler") },
    });
  }, 300_000);
  afterAll(async () => {
    await app?.stop();
  });

  it("installs what it runs (the package from the clone's tarball, wrangler from the project), and the hono app limits: 10 a minute, then 429", async () => {
    const installed = JSON.parse(readFileSync(join(readmeApp, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    };
    expect(installed.dependencies["strict-edge-rate-limiter"]).toBe(
      `file:../strict-edge-rate-limiter/strict-edge-rate-limiter-${VERSION}.tgz`,
    );
    const key = crypto.randomUUID();
    const get = () => fetch(`${app.url}/api/hello`, { headers: { "x-api-key": key } });
    const first = await get();
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ remaining: 9 });
    expect(first.headers.get("RateLimit")).toBe('"per-minute";r=9;t=60');
    for (let i = 0; i < 9; i++) expect((await get()).status).toBe(200);
    await problemOf(await get(), 429);
    await problemOf(await fetch(`${app.url}/api/hello`), 401);
  });
});

describe("examples/hono-app (README's hono app): the hono middleware from the packed package", () => {
  let app: Limiter;
  beforeAll(async () => {
    const [hono] = quickStart();
    expect(readFileSync(join(clone, "examples/hono-app/src/index.ts"), "utf8")).toBe(hono);
    app = await project("hono-app");
  }, 300_000);
  afterAll(async () => {
    await app?.stop();
  });
  const get = (path: string, key?: string) =>
    fetch(`${app.url}${path}`, { headers: key === undefined ? {} : { "x-api-key": key } });

  it("allowed: the handler runs with c.get('rateLimit'), headers on its response; at the limit: 429 with the exact Retry-After", async () => {
    const key = crypto.randomUUID();
    const t0 = Date.now();
    const first = await get("/api/hello", key);
    const t1 = Date.now();
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ remaining: 9 });
    expect(first.headers.get("RateLimit-Policy")).toBe('"per-minute";q=10;w=60');
    expect(first.headers.get("RateLimit")).toBe('"per-minute";r=9;t=60');
    for (let i = 0; i < 9; i++) expect((await get("/api/hello", key)).status).toBe(200);
    const t2 = Date.now();
    const refused = await get("/api/hello", key);
    const t3 = Date.now();
    const body = await problemOf(refused, 429);
    expect(body.violated_policies).toEqual(["per-minute"]);
    // Exact: the first grant (decided between t0 and t1) leaves the window 60 s later.
    const waitMs = body.retry_after_ms as number;
    expect(waitMs).toBeGreaterThanOrEqual(t0 + 60_000 - t3);
    expect(waitMs).toBeLessThanOrEqual(t1 + 60_000 - t2);
    expect(refused.headers.get("Retry-After")).toBe(String(Math.ceil(waitMs / 1000)));
    expect(refused.headers.get("RateLimit")).toMatch(/^"per-minute";r=0;t=\d+$/);
  });

  it("a request without a key gets 401 problem+json; routes outside the middleware are not limited", async () => {
    const body = await problemOf(await get("/api/hello"), 401);
    expect(body.detail).toBe("This API needs an API key.");
    const free = await get("/");
    expect(free.status).toBe(200);
    expect(free.headers.has("RateLimit")).toBe(false);
  });

  it("refund: a 500 from the handler gives its unit back", async () => {
    const key = crypto.randomUUID();
    for (let i = 0; i < 3; i++) expect((await get("/api/fail", key)).status).toBe(500);
    const next = await get("/api/hello", key);
    expect(await next.json()).toEqual({ remaining: 9 });
  });

  it("its own @cloudflare/vitest-plugin test passes with the test kit: the clock advanced past the minute, every key reset between tests", async () => {
    const dir = join(clone, "examples", "hono-app");
    const test = readFileSync(join(dir, "test/index.test.ts"), "utf8");
    expect(test).toContain('from "strict-edge-rate-limiter/testing"');
    expect(test).toMatch(/clock\.advance\(/);
    expect(test).toMatch(/resetLimiters\(env\.LIMITER\)/);
    // Typechecked as the user's tests are, then `npm test` as written: vitest inside workerd, the kit from the tarball.
    await run(join(dir, "node_modules/.bin/tsc"), ["-p", "test"], { cwd: dir });
    const report = join(temp.path, "hono-app-vitest.json");
    await sh(`npm test -- --reporter=json --outputFile=${report}`, dir);
    const results = JSON.parse(readFileSync(report, "utf8")) as {
      numPassedTests: number;
      numFailedTests: number;
      testResults: { assertionResults: { title: string; status: string }[] }[];
    };
    expect(results.testResults.flatMap((f) => f.assertionResults.map((a) => [a.title, a.status]))).toEqual([
      ["allows 10 calls a minute, then answers 429 until the minute has passed", "passed"],
      ["starts every test with every key fresh", "passed"],
    ]);
    expect(results.numFailedTests).toBe(0);
  });
});

describe("examples/worker: limit(), peek(), refund() and two limiters from the packed package", () => {
  let worker: Limiter;
  beforeAll(async () => {
    const [, plain] = quickStart();
    expect(plain).toContain("createLimiter(");
    worker = await project("worker", { "src/readme.ts": plain as string });
  }, 300_000);
  afterAll(async () => {
    await worker?.stop();
  });
  const call = async (path: string, key: string) => {
    const res = await fetch(`${worker.url}${path}?key=${encodeURIComponent(key)}`);
    return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
  };

  it("limit(): three grants, then 429 with Retry-After and the RateLimit headers", async () => {
    const key = crypto.randomUUID();
    const remaining = [];
    for (let i = 0; i < 3; i++) remaining.push((await call("/api", key)).body.remaining);
    expect(remaining).toEqual([2, 1, 0]);
    const refused = await call("/api", key);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("Retry-After")).toBe(String(Math.ceil((refused.body.retryAfterMs as number) / 1000)));
    expect(refused.headers.get("RateLimit-Policy")).toBe('"per-minute";q=3;w=60');
  });

  it("peek() consumes nothing", async () => {
    const key = crypto.randomUUID();
    for (let i = 0; i < 5; i++) {
      expect((await call("/api/peek", key)).body).toEqual({ allowed: true, reason: "peek", remaining: 3 });
    }
    expect((await call("/api", key)).body.remaining).toBe(2);
    expect((await call("/api/peek", key)).body).toEqual({ allowed: true, reason: "peek", remaining: 2 });
  });

  it("refund() gives exactly the grant's unit back", async () => {
    const key = crypto.randomUUID();
    for (let i = 0; i < 4; i++) expect((await call("/api/fail", key)).body.refunded).toBe(true);
    expect((await call("/api/peek", key)).body.remaining).toBe(3);
  });

  it("two limiters in one Worker are independent", async () => {
    const user = crypto.randomUUID();
    expect((await call("/login", user)).status).toBe(200);
    expect((await call("/login", user)).status).toBe(200);
    const third = await call("/login", user);
    expect(third.status).toBe(429);
    expect(third.headers.get("RateLimit-Policy")).toBe('"logins";q=2;w=60');
    // The same key on the other limiter still has its own three.
    for (let i = 0; i < 3; i++) expect((await call("/api", user)).status).toBe(200);
  });
});

describe("examples/proxy: the ready proxy from the packed package", () => {
  let proxy: Limiter;
  let origin: Origin;
  beforeAll(async () => {
    origin = await startOrigin();
    proxy = await project("proxy", {}, origin.url);
  }, 300_000);
  afterAll(async () => {
    await proxy?.stop();
    await origin?.close();
  });
  const get = (path: string, key: string) => fetch(`${proxy.url}${path}`, { headers: { "x-api-key": key } });

  it("proxies what fits, refuses the rest, refunds the listed statuses, leaves free routes alone", async () => {
    const key = `k_${crypto.randomUUID()}`;
    for (let i = 0; i < 3; i++) expect((await get("/__special/status/503", key)).status).toBe(503); // refunded
    for (let i = 0; i < 3; i++) expect((await get("/v1/items", key)).status).toBe(200);
    const refused = await get("/v1/items", key);
    await problemOf(refused, 429);
    expect(refused.headers.get("RateLimit-Policy")).toBe('"per-minute";q=3;w=60');
    expect((await get("/health", key)).status).toBe(200);
    const seen = origin.arrivals.filter((a) => a.headers["x-api-key"] === key).map((a) => a.url);
    expect(seen).toEqual(["/v1/items", "/v1/items", "/v1/items", "/health"]);
  });
});

/** The first ```toml block of a doc after `heading`. */
function tomlAfter(file: string, heading: string): string {
  const text = readFileSync(join(ROOT, file), "utf8");
  const start = text.indexOf(heading);
  expect(start, `${file} has ${heading}`).toBeGreaterThanOrEqual(0);
  return /```toml\n([\s\S]*?)```/.exec(text.slice(start))?.[1] ?? "";
}

describe("a newcomer's next steps with the packed proxy: docs/llm.md's OpenAI configuration and a signed plan, as written", () => {
  const ADMIN_TOKEN = `admin-${crypto.randomUUID()}`;
  let proxy: Limiter;
  let origin: Origin;
  beforeAll(async () => {
    origin = await startOrigin();
    const dir = join(clone, "examples/proxy");
    await sh("npm install", dir);
    // examples/proxy's file up to its vars, then docs/llm.md's vars, then configuration.md's signed plan in them.
    const own = readFileSync(join(dir, "wrangler.toml"), "utf8");
    const llm = tomlAfter("docs/llm.md", "## An OpenAI-compatible origin");
    const signed = tomlAfter("docs/configuration.md", "#### Signed keys");
    expect(llm).toMatch(/\[vars\.RATE_LIMIT\][\s\S]*settle = "openai"/);
    expect(signed.startsWith("[vars.RATE_LIMIT]\nplans = [")).toBe(true);
    const config = `${own.slice(0, own.indexOf("\n[vars]\n"))}\n${llm}${signed.replace("[vars.RATE_LIMIT]\n", "")}`;
    await writeFile(join(dir, "newcomer.toml"), config);
    proxy = await startLimiter({
      persistTo: join(dir, ".newcomer-state"),
      config: "newcomer.toml",
      project: { dir, wrangler: join(dir, "node_modules/.bin/wrangler") },
      // The fake model answers chat completions under this prefix, as api.openai.com does at its root.
      origin: `${origin.url}/__special/llm/openai-chat`,
      vars: { KEY_SECRET: `secret-${crypto.randomUUID()}`, ADMIN_TOKEN },
    });
  }, 300_000);
  afterAll(async () => {
    await proxy?.stop();
    await origin?.close();
  });
  const admin = (call: string, body: unknown) =>
    fetch(`${proxy.url}/__limiter/${call}`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const chat = (key: string) =>
    fetch(`${proxy.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }),
    });

  it("a minted key's chat completion is settled to the tokens the model reported; a forged one never reaches it", async () => {
    const minted = await admin("keys", { plan: "pro" });
    expect(minted.status).toBe(200);
    const { key } = (await minted.json()) as { key: string };
    expect(key).toMatch(/^live_[\w-]+\.[\w-]+$/);

    const answer = await chat(key);
    expect(answer.status).toBe(200);
    const { usage } = (await answer.json()) as { usage: { total_tokens: number } };
    expect(origin.reports.map((r) => r.reported)).toEqual([usage.total_tokens]);

    // The signature's first character changed: refused in the isolate, nothing more reaches the model.
    const forged = key.replace(/\.(.)/, (_, c: string) => `.${c === "A" ? "B" : "A"}`);
    expect((await chat(forged)).status).toBe(401);
    expect((await chat("live_never-minted")).status).toBe(401);
    expect(origin.reports).toHaveLength(1);

    // Settled once the answer has ended: the key's usage shows what the model reported, not the reservation.
    const deadline = Date.now() + 10_000;
    let periods: { requests: number; cost: number }[] = [];
    while (Date.now() < deadline) {
      const res = await admin("usage", { key, period: "day" });
      expect(res.status).toBe(200);
      ({ periods } = (await res.json()) as { periods: typeof periods });
      if (periods[0]?.cost === usage.total_tokens) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(periods).toEqual([expect.objectContaining({ requests: 1, cost: usage.total_tokens })]);
  });
});
