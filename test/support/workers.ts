/**
 * @module Several Workers of one bundle in one workerd, each its own isolate on its own HTTP port,
 * sharing one Durable Object namespace: the first Worker defines the object class, the others bind
 * it with `scriptName` (as Workers of one account reach one class). That is how one key's object
 * serves many isolates in production, where each Cloudflare location runs its own isolate.
 *
 * The bundle is what `wrangler deploy --dry-run --outdir` builds from a wrangler config (as the
 * bench's runtime does); it is loaded through Miniflare's API, so the clients talk straight to
 * workerd (`unsafeDirectSockets`, no dev proxy). Stopping and starting again on the same
 * `persistTo` is a restart of the runtime on the same object storage. Node only; used by the e2e
 * tests and `npm run soak`.
 */

import { execFile } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { tempDir } from "./harness.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const run = promisify(execFile);

/** A built Worker bundle on disk (`cleanup()` removes it). */
export interface Bundle {
  /** The entry module. */
  readonly script: string;
  /** From the wrangler config. */
  readonly compatibilityDate: string;
  /** From the wrangler config (`compatibility_flags`, one line). */
  readonly compatibilityFlags: readonly string[];
  /** The Durable Object class bound as `LIMITER`, from the wrangler config. */
  readonly className: string;
  cleanup(): Promise<void>;
}

/** Builds the bundle of a wrangler config (absolute or relative to the repo root; default the project's). */
export async function buildBundle(config = "wrangler.toml"): Promise<Bundle> {
  const path = resolve(ROOT, config);
  const toml = await readFile(path, "utf8");
  const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(toml)?.[1];
  const flags = /^compatibility_flags\s*=\s*\[([^\]]*)\]/m.exec(toml)?.[1] ?? "";
  const compatibilityFlags = [...flags.matchAll(/"([^"]+)"/g)].map((m) => m[1] as string);
  const className = /name\s*=\s*"LIMITER"\s*\n\s*class_name\s*=\s*"([^"]+)"/.exec(toml)?.[1];
  if (!compatibilityDate || !className) throw new Error(`${config}: no compatibility_date or LIMITER class`);
  const out = await tempDir("limiter-bundle-");
  try {
    await run(join(ROOT, "node_modules/.bin/wrangler"), ["deploy", "--dry-run", "--outdir", out.path, "-c", path], {
      cwd: ROOT,
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", CI: "1" },
    });
    const entry = (await readdir(out.path)).find((f) => f.endsWith(".js"));
    if (!entry) throw new Error(`wrangler built no .js for ${config}`);
    return { script: join(out.path, entry), compatibilityDate, compatibilityFlags, className, cleanup: out.cleanup };
  } catch (e) {
    await out.cleanup();
    throw e;
  }
}

export interface WorkersOptions {
  bundle: Bundle;
  /** How many Workers (isolates) to run. */
  count: number;
  /** `ORIGIN`. */
  origin: string;
  /** `RATE_LIMIT` (as a JSON string var, as the harness passes it). */
  rateLimit: unknown;
  /** Where Durable Object state lives; reuse it to restart on the same state. */
  persistTo: string;
}

export interface Workers {
  /** `http://127.0.0.1:PORT`, one per Worker; Worker 0 hosts the object class. */
  readonly urls: readonly string[];
  /** The workerd process (for its memory), or null when it cannot be told apart. */
  readonly pid: number | null;
  /** What the Workers logged so far, one line per log call. */
  output(): string;
  /** Stops workerd (no graceful drain: in-flight work and every isolate's memory are gone); idempotent. */
  stop(): Promise<void>;
}

/** Pids of workerd processes this Node process started. */
async function workerdChildren(): Promise<number[]> {
  const { stdout } = await run("ps", ["-eo", "pid=,ppid=,comm="]);
  return stdout
    .split("\n")
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f[1] === String(process.pid) && f[2] === "workerd")
    .map((f) => Number(f[0]));
}

/** Starts `count` Workers of `bundle` in one workerd; resolves once each answers on its own port. */
export async function startWorkers(o: WorkersOptions): Promise<Workers> {
  if (!Number.isInteger(o.count) || o.count < 1) throw new Error(`count: expected at least 1, got ${o.count}`);
  const { bundle } = o;
  const names = Array.from({ length: o.count }, (_, i) => `limiter-${i}`);
  const host = names[0] as string;
  let output = "";
  const before = await workerdChildren();
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      resourcePersistencePath: o.persistTo,
      handleStructuredLogs: (log) => {
        output += `${log.message}\n`;
      },
      workers: names.map((name) => ({
        name,
        modules: true,
        scriptPath: bundle.script,
        modulesRoot: join(bundle.script, ".."),
        compatibilityDate: bundle.compatibilityDate,
        compatibilityFlags: [...bundle.compatibilityFlags],
        bindings: { ORIGIN: o.origin, RATE_LIMIT: JSON.stringify(o.rateLimit) },
        durableObjects: {
          LIMITER:
            name === host
              ? { className: bundle.className, useSQLite: true }
              : { className: bundle.className, scriptName: host, useSQLite: true },
        },
        unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
      })),
    }),
  );
  try {
    await mf.ready;
    const urls: string[] = [];
    for (const name of names) urls.push((await mf.unsafeGetDirectURL(name)).origin);
    const started = (await workerdChildren()).filter((p) => !before.includes(p));
    let stopped: Promise<void> | null = null;
    return {
      urls,
      pid: started.length === 1 ? (started[0] as number) : null,
      output: () => output,
      stop: () => {
        stopped ??= mf.dispose();
        return stopped;
      },
    };
  } catch (e) {
    await mf.dispose().catch(() => {});
    throw e;
  }
}
