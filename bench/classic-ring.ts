/**
 * @module The classic per-request sliding log, for comparison: one `Float64Array` slot per
 * granted request (capacity `N`), one limit. A grant overwrites the oldest slot with `now`.
 *
 * Same window semantics as the core: a grant at `t` counts at `now` iff `t > now - W`.
 */

export class ClassicRing {
  readonly limit: number;
  readonly windowMs: number;
  readonly ring: Float64Array;
  /** Slots used so far (stops growing at `limit`). */
  count = 0;
  /** Index of the oldest slot once full; always the next slot to write. */
  next = 0;

  constructor(limit: number, windowMs: number) {
    this.limit = limit;
    this.windowMs = windowMs;
    this.ring = new Float64Array(limit);
  }

  /** Whether a request at `now` fits, without recording it. */
  allows(now: number): boolean {
    return this.count < this.limit || (this.ring[this.next] as number) <= now - this.windowMs;
  }

  /** Records a grant at `now` (overwrites the oldest slot). */
  record(now: number): void {
    this.ring[this.next] = now;
    const n = this.next + 1;
    this.next = n === this.limit ? 0 : n;
    if (this.count < this.limit) this.count++;
  }

  /** `if count < N or ring[oldest] <= now - W → overwrite oldest with now, grant; else deny`. */
  tryAcquire(now: number): boolean {
    if (this.count < this.limit || (this.ring[this.next] as number) <= now - this.windowMs) {
      this.ring[this.next] = now;
      const n = this.next + 1;
      this.next = n === this.limit ? 0 : n;
      if (this.count < this.limit) this.count++;
      return true;
    }
    return false;
  }
}

/** Several classic rings for one key: granted only when every ring allows; then all record. */
export class ClassicRings {
  readonly rings: readonly ClassicRing[];

  constructor(limits: readonly { limit: number; windowMs: number }[]) {
    this.rings = limits.map((l) => new ClassicRing(l.limit, l.windowMs));
  }

  tryAcquire(now: number): boolean {
    const rings = this.rings;
    for (let i = 0; i < rings.length; i++) {
      if (!(rings[i] as ClassicRing).allows(now)) return false;
    }
    for (let i = 0; i < rings.length; i++) (rings[i] as ClassicRing).record(now);
    return true;
  }
}
