/**
 * @module The time the library's limiters and the `RateLimiter` object read, and the isolate's epoch: `Date.now()`
 * and 0, unless the test kit (src/testing/, package export `./testing`) moved them. Only the kit calls
 * {@link testSeam}: nothing else in src/ names it (test/unit/clock.test.ts), and no other package entry reaches
 * src/testing/ (`.dependency-cruiser.cjs`, "testing-is-a-leaf"), so in a Worker built from the package time is
 * `Date.now()` and the epoch stays 0.
 */

/** The kit's clock while it holds one; null: `Date.now()`. */
let source: (() => number) | null = null;
/** Bumped by the kit's reset: a library limiter made in an earlier epoch starts afresh (src/library/create.ts). */
let current = 0;

/** The time (ms since the epoch): `Date.now()`, or the test kit's clock while it holds one. */
export function now(): number {
  return source === null ? Date.now() : source();
}

/** The isolate's epoch: 0, or how many times the test kit has reset every limiter. */
export function epoch(): number {
  return current;
}

/** For the test kit alone (src/testing/workerd.ts). */
export const testSeam = {
  /** Makes `clock` the time {@link now} reads (null: `Date.now()` again). */
  setClock(clock: (() => number) | null): void {
    source = clock;
  },
  /** Starts a new {@link epoch}. */
  nextEpoch(): void {
    current += 1;
  },
};
