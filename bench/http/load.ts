/**
 * @module One autocannon run, with latencies kept exactly (autocannon's own histogram has
 * 1 ms resolution and records only 2xx by default; here every response counts, in float ms).
 */

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
        headers: typeof key === "string" ? { "x-api-key": key } : {},
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
