// The wrangler configurations the documentation shows, taken from its fenced code blocks so the two cannot drift:
// docs/operating.md's whole files (the proxy's and a library user's Worker, each in wrangler.toml and wrangler.jsonc),
// each with the Durable Object class declared both ways that page shows (its `exports` entry, and its `[[migrations]]`
// one in that entry's place), and README's quick-start fragments put together into files. Each reads the same in TOML
// as in JSONC and passes `wrangler deploy --dry-run` without a warning; docs/operating.md's files as they stand run
// under `wrangler dev` with a class that works (SQLite-backed) and grants their limit, then refuses. The controls
// show that these checks tell the cases apart: both declarations are refused; no declaration, or
// `storage = "legacy-kv"`, builds (no declaration with wrangler's warning) and cannot run.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Limiter, startLimiter, tempDir, waitForOutput } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { problemOf } from "../support/problem.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const WRANGLER = join(ROOT, "node_modules/.bin/wrangler");
const run = promisify(execFile);

type Lang = "toml" | "jsonc";
type Kind = "proxy" | "worker";

interface Block {
  readonly lang: Lang;
  readonly text: string;
}

/**
 * The ```toml and ```jsonc blocks of `file` under `heading` (a whole heading line, e.g. "## Deploying"), up to the
 * next heading of its level or above. Lines inside code blocks are never headings (a shell block's `# 200 200 …`).
 */
function blocksUnder(file: string, heading: string): Block[] {
  const lines = readFileSync(join(ROOT, file), "utf8").split("\n");
  const level = heading.indexOf(" ");
  const blocks: Block[] = [];
  let inside = false;
  let fence: { lang: string; lines: string[] } | null = null;
  let found = false;
  for (const line of lines) {
    if (fence) {
      if (line.startsWith("```")) {
        if (inside && (fence.lang === "toml" || fence.lang === "jsonc")) {
          blocks.push({ lang: fence.lang, text: `${fence.lines.join("\n")}\n` });
        }
        fence = null;
      } else fence.lines.push(line);
      continue;
    }
    if (line.startsWith("```")) {
      fence = { lang: line.slice(3).trim(), lines: [] };
      continue;
    }
    const h = /^(#+) /.exec(line);
    if (h && inside && (h[1] as string).length <= level) break;
    if (line === heading) inside = found = true;
  }
  expect(found, `${file} has no heading "${heading}"`).toBe(true);
  return blocks;
}

/** The one block of `blocks` in `lang` that `test` picks; fails unless there is exactly one. */
function one(blocks: readonly Block[], lang: Lang, test: (text: string) => boolean, what: string): string {
  const found = blocks.filter((b) => b.lang === lang && test(b.text));
  expect(found, `exactly one ${lang} block: ${what}`).toHaveLength(1);
  return (found[0] as Block).text;
}

const isWhole = (text: string) => /^main\s*=|^\s*"main"\s*:/m.test(text);

/** `text` with `from` (which must occur exactly once) replaced by `to`. */
function swap(text: string, from: string, to: string): string {
  expect(text.split(from), `${JSON.stringify(from)} occurs once in:\n${text}`).toHaveLength(2);
  return text.replace(from, () => to);
}

/** A fragment's text as it stands inside a whole file: trimmed, without a JSONC fragment's trailing comma. */
const core = (fragment: string) => fragment.trim().replace(/,$/, "");

// docs/operating.md, "## Deploying": four whole files and the two declarations in each language.
const deploying = blocksUnder("docs/operating.md", "## Deploying");
const wholes = deploying.filter((b) => isWhole(b.text));
const declarations = deploying.filter((b) => !isWhole(b.text));
const declaration = {
  toml: {
    exports: core(one(declarations, "toml", (t) => t.includes("[exports.RateLimiter]"), "the exports entry")),
    migrations: core(one(declarations, "toml", (t) => t.includes("[[migrations]]"), "the migration")),
  },
  jsonc: {
    exports: core(one(declarations, "jsonc", (t) => t.includes('"exports"'), "the exports entry")),
    migrations: core(one(declarations, "jsonc", (t) => t.includes('"migrations"'), "the migration")),
  },
};

// README's quick start: the class's binding and declaration (both quick starts use it), the proxy's vars.
const inside = blocksUnder("README.md", "### Inside your Worker or hono app");
const inFront = blocksUnder("README.md", "### In front of your origin API");
const readme = {
  toml: {
    declared: one(inside, "toml", (t) => t.includes("[[durable_objects.bindings]]"), "the binding"),
    vars: one(inFront, "toml", (t) => t.includes("[vars]"), "the vars"),
  },
  jsonc: {
    declared: one(inside, "jsonc", (t) => t.includes('"durable_objects"'), "the binding"),
    vars: one(inFront, "jsonc", (t) => t.includes('"vars"'), "the vars"),
  },
};
const COMPATIBILITY_DATE = /^compatibility_date = "([^"]+)"/m.exec(
  readFileSync(join(ROOT, "wrangler.toml"), "utf8"),
)?.[1];

/** A README configuration as a file: its wrangler.toml, or its wrangler.jsonc fragments with a name, a main module and the project's compatibility date. */
function readmeFile(lang: Lang, kind: Kind): string {
  const { declared, vars } = readme[lang];
  const name = `readme-${kind}`;
  if (lang === "toml") {
    // README's wrangler.toml is a whole file (its own name, main and compatibility date); the proxy's adds its vars.
    return declared.replace(/^name = .*$/m, `name = "${name}"`) + (kind === "proxy" ? `\n${vars}` : "");
  }
  const head = `{\n"name": "${name}",\n"main": "src/index.ts",\n"compatibility_date": "${COMPATIBILITY_DATE}",\n`;
  return `${head}${declared}${kind === "proxy" ? vars : ""}}\n`;
}

interface Config {
  /** For test names. */
  readonly name: string;
  readonly lang: Lang;
  readonly kind: Kind;
  readonly text: string;
}

const configs: Config[] = [];
for (const { lang, text } of wholes) {
  const kind: Kind = text.includes("ORIGIN") ? "proxy" : "worker";
  configs.push({ name: `operating.md, ${kind}, wrangler.${lang} with exports`, lang, kind, text });
  const migrations = swap(text, declaration[lang].exports, declaration[lang].migrations);
  configs.push({ name: `operating.md, ${kind}, wrangler.${lang} with [[migrations]]`, lang, kind, text: migrations });
}
for (const lang of ["toml", "jsonc"] as const) {
  for (const kind of ["proxy", "worker"] as const) {
    configs.push({ name: `README, ${kind}, wrangler.${lang}`, lang, kind, text: readmeFile(lang, kind) });
  }
}

/** docs/operating.md's proxy in wrangler.toml, changed for a control. */
const proxyToml = one(wholes, "toml", (t) => t.includes("ORIGIN"), "the proxy's wrangler.toml");
const controls = {
  both: `${proxyToml}\n${declaration.toml.migrations}\n`,
  none: swap(proxyToml, declaration.toml.exports, ""),
  legacy: swap(proxyToml, declaration.toml.exports, swap(declaration.toml.exports, '"sqlite"', '"legacy-kv"')),
};

/** The library user's Worker: three requests per key in any minute, refusals as the proxy answers them. */
const WORKER_LIMIT = 3;
const WORKER = `import { createLimiter, RateLimiter, refusal } from ${JSON.stringify(join(ROOT, "src/index.ts"))};
export { RateLimiter };
const limiter = createLimiter({ name: "docs", limits: [{ limit: ${WORKER_LIMIT}, window: "1m" }] });
export default {
  async fetch(request, env, ctx) {
    const key = request.headers.get("x-api-key");
    if (!key) return new Response("API key required", { status: 401 });
    const r = await limiter.limit(env, key, { ctx });
    if (!r.allowed) return refusal(r);
    return new Response(r.reason, { headers: limiter.headers(r) });
  },
};
`;
/** The proxy, from this repository's source rather than the package (as the docs' one-line `src/index.ts`). */
const PROXY = `export { default, RateLimiter } from ${JSON.stringify(join(ROOT, "src/proxy/index.ts"))};\n`;

let temp: Awaited<ReturnType<typeof tempDir>>;
let made = 0;

/** A fresh project directory holding `text` as its wrangler config and a main module of `kind`; the config's path. */
async function project(lang: Lang, kind: Kind, text: string): Promise<string> {
  const dir = join(temp.path, String(made++));
  await mkdir(join(dir, "src"), { recursive: true });
  await writeFile(join(dir, "src/index.ts"), kind === "proxy" ? PROXY : WORKER);
  const config = join(dir, `wrangler.${lang}`);
  await writeFile(config, text);
  return config;
}

/** `wrangler deploy --dry-run` of a config: its exit code and everything it printed. */
async function dryRun(config: string): Promise<{ code: number; output: string }> {
  const options = {
    cwd: dirname(config),
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0", CI: "1" },
  };
  const args = ["deploy", "--dry-run", "--outdir", join(dirname(config), "out"), "-c", config];
  try {
    const { stdout, stderr } = await run(WRANGLER, args, options);
    return { code: 0, output: stdout + stderr };
  } catch (e) {
    const failed = e as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? -1, output: `${failed.stdout ?? ""}${failed.stderr ?? ""}` };
  }
}

/** The config as wrangler reads it: the settings the documentation's forms must agree on. */
async function read(config: string): Promise<Record<string, unknown>> {
  const { unstable_readConfig } = await import("wrangler");
  const c = unstable_readConfig({ config });
  return {
    name: c.name,
    main: c.main === undefined ? undefined : relative(dirname(config), c.main),
    compatibility_date: c.compatibility_date,
    durable_objects: c.durable_objects,
    exports: c.exports,
    migrations: c.migrations,
    vars: c.vars,
  };
}

beforeAll(async () => {
  temp = await tempDir("wrangler-configs-");
});

afterAll(async () => {
  await temp?.cleanup();
});

describe("the documented configurations", () => {
  it("docs/operating.md has the proxy and a library user's Worker in both languages; README the fragments of both", () => {
    expect(wholes.map((b) => `${b.lang} ${b.text.includes("ORIGIN") ? "proxy" : "worker"}`).sort()).toEqual([
      "jsonc proxy",
      "jsonc worker",
      "toml proxy",
      "toml worker",
    ]);
    expect(declarations).toHaveLength(4);
    expect(configs).toHaveLength(12);
  });

  it("read the same in wrangler.toml as in wrangler.jsonc", async () => {
    // The project's own wrangler.toml, run by every other e2e test, declares the class with its v1 migration.
    const own = await read(join(ROOT, "wrangler.toml"));
    expect(own.migrations).toEqual([{ tag: "v1", new_sqlite_classes: ["RateLimiter"] }]);
    const pairs = new Map<string, Record<string, unknown>[]>();
    for (const c of configs) {
      const key = c.name.replace(/wrangler\.(toml|jsonc)/, "");
      pairs.set(key, [...(pairs.get(key) ?? []), await read(await project(c.lang, c.kind, c.text))]);
    }
    expect(pairs.size).toBe(6);
    for (const [name, [toml, jsonc]] of pairs) {
      expect(toml, name).toEqual(jsonc);
      expect(toml?.durable_objects, name).toEqual({ bindings: [{ name: "LIMITER", class_name: "RateLimiter" }] });
      if (name.includes("[[migrations]]")) {
        expect(toml?.exports, name).toEqual({});
        expect(toml?.migrations, name).toEqual(own.migrations);
      } else {
        expect(toml?.exports, name).toEqual({ RateLimiter: { type: "durable-object", storage: "sqlite" } });
        expect(toml?.migrations, name).toEqual([]);
      }
    }
  });
});

describe.concurrent("wrangler deploy --dry-run", () => {
  // README's Worker file is a part of its proxy file, and reads ("read the same …") as docs/operating.md's declaration.
  it.for(configs.filter((c) => !(c.name.startsWith("README") && c.kind === "worker")))(
    "$name: builds, binds LIMITER to RateLimiter, no warning",
    async (c) => {
      const { code, output } = await dryRun(await project(c.lang, c.kind, c.text));
      expect(code, output).toBe(0);
      expect(output).toMatch(/env\.LIMITER \(RateLimiter\)\s+Durable Object/);
      if (c.kind === "proxy") expect(output).toContain("env.RATE_LIMIT");
      expect(output).not.toContain("WARNING");
    },
  );

  it("control: both declarations are refused", async () => {
    const { code, output } = await dryRun(await project("toml", "proxy", controls.both));
    expect(code).not.toBe(0);
    expect(output).toContain("`migrations` and `exports` are mutually exclusive");
  });

  it("control: no declaration builds, with wrangler's warning", async () => {
    const { code, output } = await dryRun(await project("toml", "proxy", controls.none));
    expect(code, output).toBe(0);
    expect(output).toContain("WARNING");
    expect(output).toContain("no live `exports` entry");
  });
});

describe.concurrent("wrangler dev", () => {
  let origin: Origin;
  beforeAll(async () => {
    origin = await startOrigin();
  });
  afterAll(async () => {
    await origin?.close();
  });

  /** Runs `body` against the config under wrangler dev (the proxy in front of the recording origin). */
  async function underDev(
    c: Pick<Config, "lang" | "kind" | "text">,
    body: (limiter: Limiter, config: string) => Promise<void>,
  ): Promise<void> {
    const config = await project(c.lang, c.kind, c.text);
    const limiter = await startLimiter({
      persistTo: join(dirname(config), ".state"),
      project: { dir: dirname(config), wrangler: WRANGLER },
      config,
      ...(c.kind === "proxy" ? { origin: origin.url } : {}),
    });
    try {
      await body(limiter, config);
    } catch (e) {
      throw new Error(`${e}\nwrangler dev:\n${limiter.output()}`);
    } finally {
      await limiter.stop();
    }
  }

  /** The smallest limit the documented `RATE_LIMIT` gives `key`: its plan's (by key prefix), else the default limits. */
  function documentedLimit(vars: unknown, key: string): number {
    type Limits = { limit: number }[];
    const rl = (vars as { RATE_LIMIT: { limits?: Limits; plans?: { key_prefix: string; limits: Limits }[] } })
      .RATE_LIMIT;
    const plan = rl.plans?.find((p) => key.startsWith(p.key_prefix));
    return Math.min(...(plan?.limits ?? rl.limits ?? []).map((l) => l.limit));
  }

  // docs/operating.md's files as they stand. Their [[migrations]] forms are built above, and read as the project's own
  // wrangler.toml does ("read the same …"), which every other e2e test runs under wrangler dev.
  it.for(configs.filter((c) => c.name.startsWith("operating.md") && c.name.endsWith("with exports")))(
    "$name: the class works and the limit holds",
    async (c) => {
      await underDev(c, async ({ url }, config) => {
        const key = `test_${crypto.randomUUID()}`;
        const get = () => fetch(`${url}/v1/items`, { headers: { "x-api-key": key } });
        const first = await get();
        expect(first.status, await first.clone().text()).toBe(200);
        const policy = first.headers.get("RateLimit-Policy") ?? "";
        const items = [...policy.matchAll(/;q=(\d+);w=(\d+)/g)].map((m) => ({ q: Number(m[1]), w: Number(m[2]) }));
        expect(items.length, policy).toBeGreaterThan(0);
        // Limits over a minute or longer: the test's requests all fall in one window.
        for (const { w } of items) expect(w, policy).toBeGreaterThanOrEqual(60);
        const limit = Math.min(...items.map((i) => i.q));
        expect(limit, policy).toBe(
          c.kind === "worker" ? WORKER_LIMIT : documentedLimit((await read(config)).vars, key),
        );
        for (let i = 1; i < limit; i++) expect((await get()).status).toBe(200);
        const refused = await problemOf(await get(), 429);
        expect(refused.reason).toMatch(/^(over_limit|cached_denial)$/);
        if (c.kind === "proxy") {
          expect(origin.arrivals.filter((a) => a.headers["x-api-key"] === key)).toHaveLength(limit);
        }
      });
    },
  );

  /** A control: the proxy starts, and its first request gets the failure mode's 503 from a class that cannot run. */
  const cannotRun = async (text: string) =>
    underDev({ lang: "toml", kind: "proxy", text }, async (limiter) => {
      const key = crypto.randomUUID();
      await problemOf(await fetch(`${limiter.url}/v1/items`, { headers: { "x-api-key": key } }), 503);
      await waitForOutput(limiter, "SQL is not enabled for this Durable Object class");
      expect(origin.arrivals.filter((a) => a.headers["x-api-key"] === key)).toEqual([]);
    });

  it("control: with storage legacy-kv the class cannot run; its requests get the failure mode's 503", async () => {
    await cannotRun(controls.legacy);
  });

  it("control: without a declaration the same", async () => {
    await cannotRun(controls.none);
  });

  it("control: with both declarations wrangler dev does not start", async () => {
    await expect(underDev({ lang: "toml", kind: "proxy", text: controls.both }, async () => {})).rejects.toThrow(
      "`migrations` and `exports` are mutually exclusive",
    );
  });
});
