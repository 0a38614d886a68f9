/** @module The bench Worker's roles (see bench/http/worker.mts) and the Workers that run them in the bench's runtime. */
export const BENCH_ROLES = [
  "pass",
  "floor",
  "stand-in",
  "nocache",
  "count",
  "tokenbucket",
  "fixedwindow",
  "native",
  "chart",
  "far",
  "sim",
  "outage",
  "hono-bare",
  "hono-ours",
  "hono-peer",
  "svc-inproc",
  "svc-remote",
  "svc-host",
] as const;

export type BenchRole = (typeof BENCH_ROLES)[number];

/** One Worker of the bench bundle: its role, whether leases are on, and whose RateLimiter namespace it shares. */
export interface BenchWorker {
  readonly name: string;
  readonly role: BenchRole;
  /** `false`: `RATE_LIMIT.leases = false` (today's per-request path). Default: on. */
  readonly leases?: boolean;
  /** Share this Worker's RateLimiter objects (another isolate deciding the same keys). */
  readonly limiterOf?: string;
  /** Bind this Worker's `BenchLimiterService` entrypoint as `LIMITER_SVC` (the service roles). */
  readonly serviceOf?: string;
  /** Bind `CountingRateLimiter` as the object (as the `count` and `sim` roles do): `GET /__bench/stats?name=…`. */
  readonly counting?: boolean;
}

/**
 * One Worker per role (named after it), plus: `count-off` and `far-off` (leases off), `chart-2`,
 * `chart-3` (two more isolates on `chart`'s objects, for utilisation with three isolates),
 * `sim-2` … `sim-4` (three more Workers on `sim`'s objects, for `npm run bench:sim`), and two pairs of consumer
 * Workers on the same keys, their objects counted: `svc-remote-1`, `svc-remote-2` bound to one `LimiterService`
 * (`svc-host-count`), and `svc-inproc-1`, `svc-inproc-2`, each with its own library limiter on `svc-inproc-1`'s objects.
 */
export const BENCH_WORKERS = [
  ...BENCH_ROLES.filter((role) => role !== "svc-remote").map((role) => ({ name: role, role }) as const),
  { name: "svc-remote", role: "svc-remote", serviceOf: "svc-host" },
  { name: "count-off", role: "count", leases: false },
  { name: "hono-ours-off", role: "hono-ours", leases: false },
  { name: "far-off", role: "far", leases: false },
  { name: "chart-2", role: "chart", limiterOf: "chart" },
  { name: "chart-3", role: "chart", limiterOf: "chart" },
  { name: "sim-2", role: "sim", limiterOf: "sim" },
  { name: "sim-3", role: "sim", limiterOf: "sim" },
  { name: "sim-4", role: "sim", limiterOf: "sim" },
  { name: "svc-host-count", role: "svc-host", counting: true },
  { name: "svc-remote-1", role: "svc-remote", serviceOf: "svc-host-count" },
  { name: "svc-remote-2", role: "svc-remote", serviceOf: "svc-host-count" },
  { name: "svc-inproc-1", role: "svc-inproc", counting: true },
  { name: "svc-inproc-2", role: "svc-inproc", counting: true, limiterOf: "svc-inproc-1" },
] as const satisfies readonly BenchWorker[];

export type BenchWorkerName = (typeof BENCH_WORKERS)[number]["name"];
