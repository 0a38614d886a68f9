/** @module A minimal discrete-event queue for the models in test/support: events in time, then insertion, order. */

/** A timed event. */
interface Ev {
  readonly t: number;
  readonly seq: number;
  readonly run: () => void;
}

const before = (a: Ev, b: Ev) => a.t < b.t || (a.t === b.t && a.seq < b.seq);

/** A binary heap of timed events. */
export class Events {
  #heap: Ev[] = [];
  #seq = 0;
  push(t: number, run: () => void): void {
    const h = this.#heap;
    h.push({ t, seq: this.#seq++, run });
    for (let i = h.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (!before(h[i] as Ev, h[p] as Ev)) break;
      [h[i], h[p]] = [h[p] as Ev, h[i] as Ev];
      i = p;
    }
  }
  /** Runs every event in order, those that events push included. */
  run(): void {
    for (let e = this.pop(); e; e = this.pop()) e.run();
  }

  pop(): Ev | undefined {
    const h = this.#heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last) {
      h[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && before(h[l] as Ev, h[m] as Ev)) m = l;
        if (r < h.length && before(h[r] as Ev, h[m] as Ev)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m] as Ev, h[i] as Ev];
        i = m;
      }
    }
    return top;
  }
}
