/**
 * @module What the test-only lease entry (test/e2e/worker/lease-entry.ts) reports about one isolate at
 * `GET /__lease-test/stats`: where its grants came from and which object calls it made. Runtime-neutral
 * (checked by both tsconfigs): the entry builds these, the e2e tests and the soak read them.
 */

/** What one isolate did for one key. */
export interface Counts {
  /** The plan of the key's last decision. */
  plan: string;
  /** Decisions by reason (`leased`: spent from a lease this isolate holds; `granted`: decided by the object; …). */
  reasons: Record<string, number>;
  /** `take` calls made to the key's object (request decisions and lease refills alike). */
  takes: number;
  /** `take` calls that asked for lease units. */
  leaseAsks: number;
  /** Leases granted, and their units. */
  leases: number;
  leasedUnits: number;
  /** The largest lease granted. */
  largestLease: number;
  /** `giveBack` calls, and the units they carried. */
  giveBacks: number;
  givenBackUnits: number;
}

/** Nothing counted yet, for a key of `plan`. */
export function emptyCounts(plan = ""): Counts {
  return {
    plan,
    reasons: {},
    takes: 0,
    leaseAsks: 0,
    leases: 0,
    leasedUnits: 0,
    largestLease: 0,
    giveBacks: 0,
    givenBackUnits: 0,
  };
}

/** `GET /__lease-test/stats?key=<key>`. */
export interface KeyReport {
  /** Drawn once per isolate: tells isolates apart. */
  readonly isolate: string;
  /** Null when this isolate never saw the key. */
  readonly counts: Counts | null;
  /** Units leased to this isolate for the key and neither spent nor given back (expired or not). */
  readonly held: number;
  /** Per limit, what the key's object says is left now (`peek`; leased units count as used there). */
  readonly remaining: number[];
}

/** `GET /__lease-test/stats`: the counts summed over the keys of each plan. */
export interface IsolateReport {
  readonly isolate: string;
  readonly plans: Record<string, Omit<Counts, "plan"> & { keys: number }>;
}
