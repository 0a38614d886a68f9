/**
 * @module The end-to-end harness: the project under `wrangler dev` (workerd, fully local) with
 * its own config and persistence directory, in front of the recording Node origin (./origin.ts).
 * Every process and temp directory it makes is removed by `stop()`. Node only; used by the e2e
 * tests and `npm run soak`.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dirname, "../..");
const WRANGLER = join(ROOT, "node_modules/.bin/wrangler");

/** A free TCP port on 127.0.0.1 (bound, read, released). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok, fail) => {
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => ok());
  });
  const address = server.address();
  await new Promise<void>((ok) => server.close(() => ok()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/** A temp directory (under `base`, default the OS's) removed by `cleanup()`. */
export async function tempDir(prefix: string, base = tmpdir()): Promise<{ path: string; cleanup(): Promise<void> }> {
  const path = await mkdtemp(join(base, prefix));
  return { path, cleanup: () => rm(path, { recursive: true, force: true }) };
}

export interface LimiterOptions {
  /** `ORIGIN` (the base URL allowed requests go to); none for a Worker that has no origin. */
  origin?: string;
  /**
   * `RATE_LIMIT`, passed as a JSON string var (as dashboards and `--var` deliver it); leave it out
   * to run with the config file's own `[vars.RATE_LIMIT]` table.
   */
  rateLimit?: unknown;
  /** Where Durable Object state lives; reuse it to restart on the same state. */
  persistTo: string;
  /** Wrangler config file, absolute or relative to the repo root (default: the project's `wrangler.toml`). */
  config?: string;
  /** Port to listen on (default: a free one). */
  port?: number;
  /** More vars or secrets, each passed as `--var NAME:value` (e.g. `ADMIN_TOKEN`). */
  vars?: Record<string, string>;
  /** Another project to run: its directory (wrangler's working directory and where `config` is found) and its own wrangler. */
  project?: { dir: string; wrangler: string };
  /** Another Worker entry than the config's `main` (relative to the project's directory). */
  main?: string;
  /**
   * The dev registry: a directory where each `wrangler dev` lists its Workers, and through which one process's service
   * bindings reach another's Workers (`WRANGLER_REGISTRY_PATH`, and `CLOUDFLARE_DEV_REGISTRY_PATH`, which Miniflare
   * reads first). Default: wrangler's own, in the user's home, shared with every `wrangler dev` on the machine.
   */
  registry?: string;
  /** How long `wrangler dev` may take to answer (default 60 s). */
  readyTimeoutMs?: number;
}

export interface Limiter {
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  readonly port: number;
  /** Process group of wrangler dev and the workerd it runs (`ps -g`, `/proc/<pid>/status` to measure memory). */
  readonly pgid: number;
  /** Everything wrangler and the Worker printed so far (stdout and stderr). */
  output(): string;
  /** Stops wrangler dev and every process it started; resolves once they have exited. */
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 60_000;

/**
 * Starts `wrangler dev` and resolves once the Worker answers HTTP on the port asked for. A free
 * port can be taken by another process between choosing and binding it; then this starts again
 * on another one (up to three times) rather than talk to whatever now listens there.
 */
export async function startLimiter(options: LimiterOptions): Promise<Limiter> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options);
    } catch (e) {
      if (!(e instanceof PortTaken) || options.port !== undefined || attempt >= 3) throw e;
    }
  }
}

class PortTaken extends Error {}

async function startOnce(options: LimiterOptions): Promise<Limiter> {
  const port = options.port ?? (await freePort());
  const inspector = await freePort();
  const args = [
    "dev",
    ...(options.main === undefined ? [] : [options.main]),
    "--config",
    resolve(options.project?.dir ?? ROOT, options.config ?? "wrangler.toml"),
    "--ip",
    "127.0.0.1",
    "--port",
    String(port),
    "--inspector-port",
    String(inspector),
    "--persist-to",
    options.persistTo,
    ...(options.origin === undefined ? [] : ["--var", `ORIGIN:${options.origin}`]),
    ...Object.entries(options.vars ?? {}).flatMap(([name, value]) => ["--var", `${name}:${value}`]),
    "--show-interactive-dev-session=false",
    "--log-level",
    "log",
  ];
  if (options.rateLimit !== undefined) args.push("--var", `RATE_LIMIT:${JSON.stringify(options.rateLimit)}`);
  const registry =
    options.registry === undefined
      ? {}
      : { WRANGLER_REGISTRY_PATH: options.registry, CLOUDFLARE_DEV_REGISTRY_PATH: options.registry };
  // Its own process group, so stop() reaches workerd and any helper wrangler starts.
  const child = spawn(options.project?.wrangler ?? WRANGLER, args, {
    cwd: options.project?.dir ?? ROOT,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0", CI: "1", ...registry },
  });
  let output = "";
  child.stdout?.on("data", (c: Buffer) => {
    output += c.toString();
  });
  child.stderr?.on("data", (c: Buffer) => {
    output += c.toString();
  });
  const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
  const url = `http://127.0.0.1:${port}`;
  const limiter: Limiter = {
    url,
    port,
    pgid: child.pid ?? -1,
    output: () => output,
    stop: () => stopGroup(child, exited),
  };
  try {
    await waitUntilReady(url, child, () => output, options.readyTimeoutMs ?? READY_TIMEOUT_MS);
  } catch (e) {
    await limiter.stop();
    throw e;
  }
  return limiter;
}

async function waitUntilReady(
  url: string,
  child: ChildProcess,
  output: () => string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      if (/EADDRINUSE|address already in use/i.test(output())) throw new PortTaken(output());
      throw new Error(`wrangler dev exited (${child.exitCode}):\n${output()}`);
    }
    const ready = /Ready on (http:\/\/\S+)/.exec(output());
    if (ready) {
      if (new URL(ready[1] as string).origin !== url) throw new PortTaken(`wrangler dev chose ${ready[1]}, not ${url}`);
      try {
        await fetch(`${url}/__ready`, { signal: AbortSignal.timeout(2000) });
        return;
      } catch {
        // not listening yet
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`wrangler dev not ready within ${timeoutMs} ms:\n${output()}`);
}

async function stopGroup(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.pid === undefined) return;
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), s);
    } catch {
      // already gone
    }
  };
  signal("SIGTERM");
  const killed = await Promise.race([exited.then(() => true), new Promise((r) => setTimeout(() => r(false), 5000))]);
  if (!killed) signal("SIGKILL");
  await exited;
  // workerd may outlive wrangler by a moment; make sure nothing of the group is left.
  signal("SIGKILL");
}

/** Resolves once `limiter.output()` contains `text` (checked every 20 ms); rejects after `timeoutMs`. */
export async function waitForOutput(limiter: Limiter, text: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!limiter.output().includes(text)) {
    if (Date.now() > deadline) throw new Error(`output has no ${JSON.stringify(text)} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Kills wrangler dev and workerd at once (SIGKILL to the process group, no graceful shutdown): a crash. */
export async function crashLimiter(limiter: Limiter): Promise<void> {
  try {
    process.kill(-limiter.pgid, "SIGKILL");
  } catch {
    // already gone
  }
  await limiter.stop();
}
