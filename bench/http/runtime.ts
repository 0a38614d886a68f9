/**
 * @module The bench's runtime: the product's bundle and the bench Worker's bundle, each built
 * by `wrangler deploy --dry-run --outdir` (exactly what `wrangler deploy` would upload), loaded
 * into one Miniflare instance, i.e. one workerd process — the runtime `wrangler dev` runs, minus
 * its dev proxy. Each Worker gets its own workerd HTTP socket (`unsafeDirectSockets`), so the
 * load client talks straight to workerd. Durable Objects use SQLite files in a temp directory.
 */

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { BENCH_WORKERS, type BenchRole, type BenchWorker, type BenchWorkerName } from "./roles.ts";

export type { BenchRole, BenchWorkerName };

/**
 * The product's bundle, loaded four times: `product` (leases on, the default), `product-off`
 * (`RATE_LIMIT.leases = false`: today's per-request path, its own objects), and `product-2`,
 * `product-3`: two more isolates of the same bundle that share `product`'s RateLimiter namespace
 * (Miniflare's `durableObjects.<binding>.scriptName`), so three isolates decide one key; and `product-gw`, the
 * gateway's forward ({@link GATEWAY}: the operator's headers from a secret, the client's key removed, the origin told
 * who is calling), its own objects.
 */
export const PRODUCT_WORKERS = ["product", "product-off", "product-2", "product-3", "product-gw"] as const;

/** What `product-gw` adds to `RATE_LIMIT`, and the secret it names. */
const GATEWAY = {
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the gateway's settings write ${NAME} in plain strings.
  rateLimit: { origin_headers: { authorization: "Bearer ${UPSTREAM_KEY}", "x-org": "bench" } },
  secrets: { UPSTREAM_KEY: "sk-bench-upstream-credential" },
};

const ROOT = resolve(import.meta.dirname, "../..");
const COMPATIBILITY_DATE = "2026-11-17";

export interface RuntimeOptions {
  origin: string;
  /** `RATE_LIMIT` for the product and the limiter roles. */
  rateLimit: unknown;
  chartLimit: number;
  chartWindowMs: number;
  /** Where the Durable Objects' SQLite files go (a temp directory under it, removed by `dispose()`). */
  stateDir: string;
  /** A git revision whose product (src/ and wrangler.toml) is built and loaded too, as `baseline`. */
  baseline?: string | undefined;
  /** The Worker secret `KEY_SECRET` of the product's Workers (its signed plans' keys). */
  keySecret?: string;
}

export interface Runtime {
  /** The workerd process (for its CPU time), or null when it cannot be told apart. */
  readonly pid: number | null;
  /** Base URLs: the product's Workers ({@link PRODUCT_WORKERS}), one per bench Worker, and `baseline` when asked for. */
  readonly urls: Record<(typeof PRODUCT_WORKERS)[number] | BenchWorkerName, string> & { baseline?: string };
  dispose(): Promise<void>;
}

/** Pids of workerd processes started by this Node process. */
function workerdChildren(): number[] {
  const out = execFileSync("ps", ["-eo", "pid=,ppid=,comm="]).toString();
  return out
    .split("\n")
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f[1] === String(process.pid) && f[2] === "workerd")
    .map((f) => Number(f[0]));
}

function build(config: string, outdir: string): string {
  execFileSync(join(ROOT, "node_modules/.bin/wrangler"), ["deploy", "--dry-run", "--outdir", outdir, "-c", config], {
    cwd: ROOT,
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", CI: "1" },
  });
  return outdir;
}

/** The product as of git revision `rev`: its src/ and wrangler.toml, exported and built; returns the bundle's directory. */
function buildRevision(rev: string, tmp: string): string {
  const src = join(tmp, "baseline-src");
  mkdirSync(src);
  const archive = execFileSync("git", ["archive", "--format=tar", rev, "src", "wrangler.toml"], {
    cwd: ROOT,
    maxBuffer: 64 * 1024 * 1024,
  });
  execFileSync("tar", ["-x", "-C", src], { input: archive });
  return build(join(src, "wrangler.toml"), join(tmp, "baseline"));
}

/** Starts the runtime; on failure removes what it made (temp dirs, workerd) before rethrowing. */
export async function startRuntime(o: RuntimeOptions): Promise<Runtime> {
  let tmp = "";
  let state = "";
  const cleanup = () => {
    for (const dir of [tmp, state]) if (dir) rmSync(dir, { recursive: true, force: true });
  };
  try {
    tmp = mkdtempSync(join(tmpdir(), "limiter-bench-"));
    state = mkdtempSync(join(o.stateDir, "limiter-bench-state-"));
    return await start(o, tmp, state, cleanup);
  } catch (e) {
    cleanup();
    throw e;
  }
}

async function start(o: RuntimeOptions, tmp: string, state: string, cleanup: () => void): Promise<Runtime> {
  const product = join(build(join(ROOT, "wrangler.toml"), join(tmp, "product")), "index.js");
  const baseline = o.baseline ? join(buildRevision(o.baseline, tmp), "index.js") : null;
  const bench = join(build(join(ROOT, "bench/http/wrangler.toml"), join(tmp, "bench")), "worker.js");
  const socket = [{ host: "127.0.0.1", port: 0 }];
  const secret: Record<string, string> = o.keySecret ? { KEY_SECRET: o.keySecret } : {};
  const vars = { ORIGIN: o.origin, RATE_LIMIT: o.rateLimit as never, ...secret };
  const leasesOff = { ORIGIN: o.origin, RATE_LIMIT: { ...(o.rateLimit as object), leases: false } as never, ...secret };
  const sqlite = (className: string, scriptName?: string, keep = false) => ({
    className,
    useSQLite: true,
    ...(scriptName ? { scriptName } : {}),
    // The simulation reads each object's counts at the end: none may be evicted (and forget them) before.
    ...(keep ? { unsafePreventEviction: true } : {}),
  });
  /** The product's bundle as Worker `name`; `limiterOf`: share that Worker's RateLimiter namespace (another isolate, same objects). */
  const productWorker = (name: string, path: string, bindings: typeof vars, limiterOf?: string) => ({
    name,
    modules: true as const,
    scriptPath: path,
    modulesRoot: dirname(path),
    compatibilityDate: COMPATIBILITY_DATE,
    bindings,
    durableObjects: { LIMITER: sqlite("RateLimiter", limiterOf) },
    unsafeDirectSockets: socket,
  });
  const benchWorker = (w: BenchWorker) => ({
    name: w.name,
    modules: true as const,
    scriptPath: bench,
    modulesRoot: dirname(bench),
    compatibilityDate: COMPATIBILITY_DATE,
    bindings: {
      ...(w.leases === false ? leasesOff : vars),
      BENCH_ROLE: w.role,
      CHART_LIMIT: o.chartLimit,
      CHART_WINDOW_MS: o.chartWindowMs,
    },
    durableObjects: {
      LIMITER: sqlite(
        w.role === "count" || w.role === "sim" || ("counting" in w && w.counting)
          ? "CountingRateLimiter"
          : "RateLimiter",
        w.limiterOf,
        w.role === "sim",
      ),
      TOKEN_BUCKET: sqlite("TokenBucket"),
      FIXED_WINDOW: sqlite("FixedWindow"),
      NOOP: sqlite("Noop"),
      PEER: sqlite("DurableObjectRateLimiter"),
    },
    ...("serviceOf" in w && w.serviceOf
      ? { serviceBindings: { LIMITER_SVC: { name: w.serviceOf, entrypoint: "BenchLimiterService" } } }
      : {}),
    ratelimits: {
      NATIVE: { namespace_id: `${w.name}-1`, simple: { limit: 1_000_000_000, period: 10 as const } },
      NATIVE_CHART: { namespace_id: `${w.name}-2`, simple: { limit: o.chartLimit, period: 10 as const } },
    },
    unsafeDirectSockets: socket,
  });
  const benchWorkers = BENCH_WORKERS;
  // Miniflare 5 takes wrangler-shaped configs; its converter accepts the v4 options used here.
  // Every Worker is its own isolate; those given `scriptName` share another Worker's objects.
  const before = workerdChildren();
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      resourcePersistencePath: state,
      // `BENCH_INSPECT=9229`: workerd's inspector on that port (bench/profile.ts reads CPU profiles through it).
      ...(process.env.BENCH_INSPECT ? { inspectorPort: Number(process.env.BENCH_INSPECT) } : {}),
      workers: [
        productWorker("product", product, vars),
        productWorker("product-off", product, leasesOff),
        productWorker("product-2", product, vars, "product"),
        productWorker("product-3", product, vars, "product"),
        productWorker("product-gw", product, {
          ...vars,
          ...GATEWAY.secrets,
          RATE_LIMIT: { ...(o.rateLimit as object), ...GATEWAY.rateLimit } as never,
        }),
        ...(baseline ? [productWorker("baseline", baseline, vars)] : []),
        ...benchWorkers.map(benchWorker),
      ],
    }),
  );
  const urls = {} as Runtime["urls"];
  let started: number[];
  try {
    await mf.ready;
    started = workerdChildren().filter((p) => !before.includes(p));
    for (const name of PRODUCT_WORKERS) urls[name] = (await mf.unsafeGetDirectURL(name)).origin;
    for (const w of benchWorkers) urls[w.name] = (await mf.unsafeGetDirectURL(w.name)).origin;
    if (baseline) urls.baseline = (await mf.unsafeGetDirectURL("baseline")).origin;
  } catch (e) {
    await mf.dispose().catch(() => {});
    throw e;
  }
  return {
    pid: started.length === 1 ? (started[0] as number) : null,
    urls,
    async dispose() {
      await mf.dispose();
      cleanup();
    },
  };
}
