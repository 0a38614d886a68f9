/**
 * @module The clock a test moves ({@link TestClock}), and in `@cloudflare/vitest-plugin` tests the one every limiter of
 * the isolate and every `RateLimiter` object read ({@link useTestClock}): the plugin runs the main Worker's objects in
 * the tests' own isolate and module graph, so one module-level clock (src/base/clock.ts) serves both.
 */

import { testSeam } from "../base/clock.ts";

/** 2030-01-01T00:00:00Z: where a {@link TestClock} starts unless told. */
const START = Date.UTC(2030, 0, 1);

/** A clock a test moves: it stands still until {@link advance} moves it. */
export class TestClock {
  #now: number;

  /** @param start the time it reads (ms since the epoch; default 2030-01-01T00:00:00Z) */
  constructor(start = START) {
    this.#now = TestClock.#checked(start, "start");
  }

  /** The time it reads (ms since the epoch); bound, so `clock.now` can be passed as a `clock` option. */
  readonly now = (): number => this.#now;

  /**
   * Moves the clock `ms` forward, and answers the time it then reads.
   *
   * @throws RangeError for a step that is not a whole number of ms ≥ 0 (time never goes back)
   */
  advance(ms: number): number {
    if (!Number.isSafeInteger(ms) || ms < 0) {
      throw new RangeError(`advance(ms): expected a whole number of ms ≥ 0, got ${String(ms)}`);
    }
    this.#now = TestClock.#checked(this.#now + ms, "advance(ms)");
    return this.#now;
  }

  static #checked(t: number, what: string): number {
    if (!Number.isSafeInteger(t) || t < 0) throw new RangeError(`${what}: expected a time in ms ≥ 0, got ${String(t)}`);
    return t;
  }
}

/**
 * Makes `clock` the time read, from now on, by every library limiter of this isolate that was made without its own
 * `clock` option (`createLimiter()`, its `binding()` and `LimiterService`) and by every `RateLimiter` object of the
 * isolate — in `@cloudflare/vitest-plugin` tests, the main Worker's objects and the test's code alike. `clock.advance(61_000)`
 * then lets a key through again without sleeping. Call it once per test file (at its top, or in `beforeAll`), and
 * {@link resetLimiters} between tests; {@link useRealClock} undoes it. Deadlines on object calls stay in real time.
 *
 * @param clock the clock to read (default: a new one, at 2030-01-01T00:00:00Z)
 * @returns `clock`
 */
export function useTestClock(clock: TestClock = new TestClock()): TestClock {
  if (!(clock instanceof TestClock)) throw new TypeError("useTestClock(clock): expected a TestClock");
  testSeam.setClock(clock.now);
  return clock;
}

/** Undoes {@link useTestClock}: limiters and objects read `Date.now()` again. */
export function useRealClock(): void {
  testSeam.setClock(null);
}
