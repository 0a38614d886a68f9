/** The bench Worker's roles (see bench/http/worker.mts), one Worker each in the bench's runtime. */
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
] as const;

export type BenchRole = (typeof BENCH_ROLES)[number];
