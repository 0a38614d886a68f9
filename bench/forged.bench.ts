/**
 * @module `npm run bench:forged` (issue 50.6): what a flood of forged keys costs, under `wrangler dev` with a
 * persistence directory, signed keys on and off side by side. 10,000 keys in the signed format (`live_` + a base64url
 * body + `.` + 43 signature characters, none minted) from 500 client addresses (`CF-Connecting-IP`), 20 each, against
 * a plan with `ip` limits: the Durable Objects created (SQLite files in the state directory, sorted by the kind of
 * object name Miniflare records in each) and the requests that reach the origin.
 *
 *   npm run bench:forged                        # both sides (unsigned: an object per key, minutes under wrangler dev)
 *   FORGED_SIDES=signed npm run bench:forged    # one side: signed or unsigned
 *   FORGED_KEYS=2000 npm run bench:forged
 */

import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { startLimiter, tempDir } from "../test/support/harness.ts";
import { startOrigin } from "../test/support/origin.ts";

const KEYS = Number(process.env.FORGED_KEYS) || 10_000;
const ADDRESSES = Number(process.env.FORGED_ADDRESSES) || 500;
/** Requests in flight at once: a flood from many clients, within what one wrangler dev answers without errors. */
const PARALLEL = 32;
/** A window longer than the run: no object's alarm deletes its state (and its file) before the count. */
const LIMITS = [{ limit: 100, window: "1h" }];
const IP = { limits: [{ limit: 1000, window: "1h" }] };

/** The two sides: the same plan and `ip` limits, its keys signed (guesses on, by default) or not. */
const ALL_SIDES = [
  {
    name: "signed",
    label: "signed = true",
    rateLimit: { plans: [{ name: "pro", key_prefix: "live_", signed: true, limits: LIMITS }], ip: IP },
  },
  {
    name: "unsigned",
    label: "unsigned",
    rateLimit: { plans: [{ name: "pro", key_prefix: "live_", limits: LIMITS }], ip: IP },
  },
] as const;
const SIDES = ALL_SIDES.filter(
  (s) => !process.env.FORGED_SIDES || process.env.FORGED_SIDES.split(",").includes(s.name),
);

/** A forged key in the signed format: random bytes where the body and the signature go. */
function forgedKey(): string {
  const b64 = (n: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(n))).toString("base64url");
  return `live_${b64(60)}.${b64(32)}`;
}

/** The client address of request `i`: one of {@link ADDRESSES}, each sending KEYS / ADDRESSES keys. */
function addressOf(i: number): string {
  const a = i % ADDRESSES;
  return `198.18.${a >> 8}.${a & 255}`;
}

/**
 * The objects on disk: one SQLite database each in Miniflare's directory for the class (its metadata.sqlite aside), by
 * the kind of name recorded in it (`key`, `addr` for `ip` limits, `guess`; `?` when none is found).
 */
async function objectsOnDisk(dir: string): Promise<Record<string, number>> {
  const at = join(dir, "v3/do/strict-edge-rate-limiter-RateLimiter");
  const files = (await readdir(at).catch(() => [] as string[])).filter(
    (f) => f.endsWith(".sqlite") && f !== "metadata.sqlite",
  );
  const kinds: Record<string, number> = {};
  for (const f of files) {
    const text = (await readFile(join(at, f))).toString("latin1");
    const kind = /(guess|addr|key):[0-9A-Za-z._:-]/.exec(text)?.[1] ?? "?";
    kinds[kind] = (kinds[kind] ?? 0) + 1;
  }
  return kinds;
}

interface SideResult {
  readonly name: string;
  readonly statuses: Record<number, number>;
  readonly objects: Record<string, number>;
  readonly originHits: number;
  readonly seconds: number;
}

async function side(name: string, rateLimit: unknown): Promise<SideResult> {
  const origin = await startOrigin();
  const state = await tempDir("limiter-forged-");
  const limiter = await startLimiter({
    origin: origin.url,
    rateLimit,
    persistTo: state.path,
    vars: { KEY_SECRET: "bench-forged-secret" },
  });
  const statuses: Record<number, number> = {};
  try {
    const started = performance.now();
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < KEYS; i = next++) {
        const r = await fetch(`${limiter.url}/forged`, {
          headers: { "x-api-key": forgedKey(), "cf-connecting-ip": addressOf(i) },
        });
        await r.arrayBuffer();
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: PARALLEL }, worker));
    const seconds = (performance.now() - started) / 1000;
    await limiter.stop();
    const originHits = origin.arrivals.length;
    return { name, statuses, objects: await objectsOnDisk(state.path), originHits, seconds };
  } finally {
    await limiter.stop();
    await origin.close();
    await state.cleanup();
  }
}

async function main(): Promise<void> {
  console.log(
    `${KEYS} forged keys in the signed format from ${ADDRESSES} addresses, ${PARALLEL} in flight, wrangler dev`,
  );
  console.log("");
  console.log("| side | statuses | objects (SQLite files) by kind | origin hits | s |");
  console.log("| --- | --- | --- | --- | --- |");
  // Each side's row as soon as it is measured.
  for (const s of SIDES) {
    const r = await side(s.label, s.rateLimit);
    const total = Object.values(r.objects).reduce((a, b) => a + b, 0);
    const kinds = Object.entries(r.objects)
      .map(([k, n]) => `${k} ${n}`)
      .join(", ");
    const statuses = Object.entries(r.statuses)
      .map(([code, n]) => `${code}×${n}`)
      .join(", ");
    console.log(
      `| ${r.name} | ${statuses} | ${total} (${kinds || "none"}) | ${r.originHits} | ${r.seconds.toFixed(1)} |`,
    );
  }
}

await main();
