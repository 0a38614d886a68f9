/**
 * @module One autocannon run, with latencies kept exactly (autocannon's own histogram has
 * 1 ms resolution and records only 2xx by default; here every response counts, in float ms).
 */

import { Agent, request } from "node:http";
import autocannon from "autocannon";

export interface LoadOptions {
  url: string;
  /** Seconds (ignored when `amount` is given). */
  duration?: number;
  /** Stop after this many requests instead. */
  amount?: number;
  connections: number;
  /** Requests per second over all connections (unset: as fast as the server answers). */
  rate?: number;
  /** The key sent in `x-api-key`: a fixed key, or a function of the request number. */
  key?: string | ((i: number) => string);
  /** More request headers. */
  headers?: Record<string, string>;
}

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  /** Responses by status code; `errors` counts connection errors and timeouts. */
  statuses: Record<string, number>;
  errors: number;
  total: number;
  /** Every response's latency (ms), in arrival order. */
  samples: number[];
}

/** The `q`-quantile of ascending `sorted` (nearest rank). */
export function quantile(sorted: Float64Array | number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i] as number;
}

export function load(o: LoadOptions): Promise<LoadResult> {
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  const key = o.key;
  let n = 0;
  const requests =
    typeof key === "function"
      ? [
          {
            setupRequest: (req: { headers?: Record<string, string> }) => {
              req.headers = { ...req.headers, "x-api-key": key(n++) };
              return req;
            },
          },
        ]
      : undefined;
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const instance = autocannon(
      {
        url: o.url,
        connections: o.connections,
        ...(o.amount ? { amount: o.amount } : { duration: o.duration ?? 1 }),
        timeout: 10,
        ...(o.rate ? { overallRate: o.rate } : {}),
        headers: { ...o.headers, ...(typeof key === "string" ? { "x-api-key": key } : {}) },
        ...(requests ? { requests } : {}),
      },
      (err, result) => {
        if (err) return reject(err);
        const seconds = (performance.now() - started) / 1000;
        const sorted = Float64Array.from(latencies).sort();
        resolve({
          rps: latencies.length / seconds,
          p50: quantile(sorted, 0.5),
          p99: quantile(sorted, 0.99),
          statuses,
          errors: result.errors + result.timeouts,
          total: latencies.length,
          samples: latencies,
        });
      },
    );
    instance.on("response", (_client, status, _bytes, ms) => {
      latencies.push(ms);
      statuses[status] = (statuses[status] ?? 0) + 1;
    });
  });
}

/**
 * The same load spread over several URLs at once (several isolates of one Worker): connections
 * and rate are split between them; the results are merged (req/s summed, latencies pooled).
 */
export async function loadAll(urls: readonly string[], o: Omit<LoadOptions, "url">): Promise<LoadResult> {
  if (urls.length === 1) return load({ ...o, url: urls[0] as string });
  const n = urls.length;
  const share = (x: number, i: number) => Math.floor(x / n) + (i < x % n ? 1 : 0);
  const parts = await Promise.all(
    urls.map((url, i) =>
      load({
        ...o,
        url,
        connections: Math.max(1, share(o.connections, i)),
        ...(o.amount ? { amount: share(o.amount, i) } : {}),
        ...(o.rate ? { rate: o.rate / n } : {}),
      }),
    ),
  );
  const samples = parts.flatMap((p) => p.samples);
  const sorted = Float64Array.from(samples).sort();
  const statuses: Record<string, number> = {};
  for (const p of parts) for (const [k, v] of Object.entries(p.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
  return {
    rps: parts.reduce((a, p) => a + p.rps, 0),
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    statuses,
    errors: parts.reduce((a, p) => a + p.errors, 0),
    total: samples.length,
    samples,
  };
}

/** Options of {@link paced}. */
export interface PacedOptions {
  /** Requests go to these URLs in turn (several isolates of one Worker). */
  urls: readonly string[];
  /** Requests per second, sent at even intervals whatever the answers (open loop). */
  rate: number;
  /** Seconds. */
  duration: number;
  key: string;
  headers?: Record<string, string>;
}

/**
 * An open-loop load at an even pace: request `i` is sent at `i / rate` s, on a keep-alive
 * connection pool with as many connections as are busy. Unlike autocannon's `overallRate`, which
 * sends each connection's share of a second back to back at the start of the second, this neither
 * bursts nor waits for answers, so a latency is the request's own (no queueing behind the load's
 * own bursts). Resolves once every answer is in.
 */
export async function paced(o: PacedOptions): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1024 });
  const targets = o.urls.map((u) => new URL(u));
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  let errors = 0;
  const n = Math.round(o.duration * o.rate);
  const started = performance.now();
  const pending: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    const wait = started + (i * 1000) / o.rate - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const u = targets[i % targets.length] as URL;
    pending.push(
      new Promise<void>((resolve) => {
        const t0 = performance.now();
        const req = request(
          {
            host: u.hostname,
            port: u.port,
            path: "/",
            method: "GET",
            agent,
            headers: { ...o.headers, "x-api-key": o.key },
          },
          (res) => {
            res.resume();
            res.on("end", () => {
              latencies.push(performance.now() - t0);
              statuses[res.statusCode ?? 0] = (statuses[res.statusCode ?? 0] ?? 0) + 1;
              resolve();
            });
          },
        );
        req.on("error", () => {
          errors += 1;
          resolve();
        });
        req.end();
      }),
    );
  }
  await Promise.all(pending);
  agent.destroy();
  const seconds = (performance.now() - started) / 1000;
  const sorted = Float64Array.from(latencies).sort();
  return {
    rps: latencies.length / seconds,
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    statuses,
    errors,
    total: latencies.length,
    samples: latencies,
  };
}
