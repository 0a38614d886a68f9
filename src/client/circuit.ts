/**
 * @module Which keys' objects this isolate knows to be down (docs/design.md, "When the object cannot answer"): after
 * a call to a key's object fails (an error, an overload, `object_timeout`), no request calls it for an interval that
 * doubles while it stays down; when the interval is over, one call probes it in the background while requests go
 * on without it. Its clock is an input.
 */

/** How long a key's object is left alone after its first failure (ms). */
export const DOWN_FIRST_MS = 1_000;

/** The longest it is left alone between probes (ms). */
export const DOWN_MOST_MS = 10_000;

/** How many keys' failures an isolate remembers: beyond, it forgets them all (a forgotten key is simply called). */
const KEYS_MAX = 10_000;

/** What a request does about its key's object. */
export type CallState =
  /** Call it. */
  | "up"
  /** Known down: do not call it. */
  | "down"
  /** Known down, and due a probe: start one in the background, do not wait for it. */
  | "probe";

interface Down {
  /** Failures in a row. */
  failures: number;
  /** Until when no call is made (ms). */
  until: number;
  /** While a probe is out: when it counts as failed if it has not come back (ms). */
  probeEndsAt: number | null;
  /** What the last failure was: a late answer, or an error. */
  readonly late: boolean;
}

export class Circuit {
  readonly #down = new Map<string, Down>();
  /** How long a probe may take before it counts as failed (ms): the object's deadline, and a margin. */
  readonly #probeMs: number;
  readonly #keysMax: number;

  /** @param keysMax how many keys' failures it remembers (default {@link KEYS_MAX}) */
  constructor(objectTimeoutMs: number, keysMax = KEYS_MAX) {
    this.#probeMs = objectTimeoutMs + DOWN_FIRST_MS;
    this.#keysMax = keysMax;
  }

  /**
   * What a request for `name` at `now` does about its object: calls it (`"up"`), leaves it alone (`"down"`), or
   * probes it (`"probe"`, which marks the probe out: the caller sends it and reports its outcome with {@link failed}
   * or {@link answered}). A probe not back after the object's deadline (its background work cut short) counts as
   * failed: a later request probes again.
   */
  admit(name: string, now: number): CallState {
    const d = this.#down.get(name);
    if (d === undefined) return "up";
    if (d.probeEndsAt !== null && now >= d.probeEndsAt) this.#fail(d, d.probeEndsAt);
    if (now < d.until || d.probeEndsAt !== null) return "down";
    d.probeEndsAt = now + this.#probeMs;
    return "probe";
  }

  /** Whether the last failure of `name`'s object was a late answer (else an error); false when it is not down. */
  late(name: string): boolean {
    return this.#down.get(name)?.late === true;
  }

  /** The failures in a row of `name`'s object (0: not down). */
  failures(name: string): number {
    return this.#down.get(name)?.failures ?? 0;
  }

  /**
   * A call to `name`'s object failed at `now` (`late`: it did not answer in time). Known down already, calls sent
   * before that was known change nothing; a failed probe doubles the interval (up to {@link DOWN_MOST_MS}).
   *
   * @returns whether `name` was up until now (it is down from now on)
   */
  failed(name: string, now: number, late: boolean): boolean {
    const d = this.#down.get(name);
    if (d !== undefined) {
      if (d.probeEndsAt !== null || now >= d.until) this.#down.set(name, this.#fail({ ...d, late }, now));
      return false;
    }
    if (this.#down.size >= this.#keysMax) this.#down.clear();
    this.#down.set(name, { failures: 1, until: now + DOWN_FIRST_MS, probeEndsAt: null, late });
    return true;
  }

  /**
   * A call to `name`'s object answered: it is up.
   *
   * @returns whether it was known down until now
   */
  answered(name: string): boolean {
    return this.#down.delete(name);
  }

  #fail(d: Down, at: number): Down {
    d.failures++;
    d.until = at + Math.min(DOWN_MOST_MS, DOWN_FIRST_MS * 2 ** Math.min(d.failures - 1, 30));
    d.probeEndsAt = null;
    return d;
  }
}
