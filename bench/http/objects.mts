/**
 * @module Comparison Durable Objects for the HTTP bench: a token bucket and a fixed window,
 * written the way such objects usually are (state in memory, one SQLite row upserted per
 * grant, nothing written for a denial), so they cost the same kind of storage as the limiter.
 */

import { DurableObject } from "cloudflare:workers";

/** A token bucket of `limit` tokens refilled at `limit / windowMs` per ms; one row per key. */
export class TokenBucket extends DurableObject {
  #tokens = -1;
  #last = 0;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS bucket (id INTEGER PRIMARY KEY, tokens REAL, last INTEGER)");
    const row = ctx.storage.sql.exec<{ tokens: number; last: number }>("SELECT tokens, last FROM bucket").toArray()[0];
    if (row) {
      this.#tokens = row.tokens;
      this.#last = row.last;
    }
  }

  /** The decision time (ms) when granted, else 0. */
  take(limit: number, windowMs: number): number {
    const now = Date.now();
    if (this.#tokens < 0) {
      this.#tokens = limit;
      this.#last = now;
    }
    this.#tokens = Math.min(limit, this.#tokens + ((now - this.#last) * limit) / windowMs);
    this.#last = now;
    if (this.#tokens < 1) return 0;
    this.#tokens -= 1;
    this.ctx.storage.sql.exec(
      "INSERT INTO bucket (id, tokens, last) VALUES (0, ?, ?) ON CONFLICT (id) DO UPDATE SET tokens = excluded.tokens, last = excluded.last",
      this.#tokens,
      this.#last,
    );
    return now;
  }
}

/** A fixed window aligned to the clock: at most `limit` per `[k·W, (k+1)·W)`; one row per key. */
export class FixedWindow extends DurableObject {
  #window = -1;
  #count = 0;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS win (id INTEGER PRIMARY KEY, w INTEGER, n INTEGER)");
    const row = ctx.storage.sql.exec<{ w: number; n: number }>("SELECT w, n FROM win").toArray()[0];
    if (row) {
      this.#window = row.w;
      this.#count = row.n;
    }
  }

  /** The decision time (ms) when granted, else 0. */
  take(limit: number, windowMs: number): number {
    const now = Date.now();
    const w = Math.floor(now / windowMs);
    if (w !== this.#window) {
      this.#window = w;
      this.#count = 0;
    }
    if (this.#count >= limit) return 0;
    this.#count += 1;
    this.ctx.storage.sql.exec(
      "INSERT INTO win (id, w, n) VALUES (0, ?, ?) ON CONFLICT (id) DO UPDATE SET w = excluded.w, n = excluded.n",
      this.#window,
      this.#count,
    );
    return now;
  }
}

/**
 * A Durable Object that does nothing: its one method takes the limiter's arguments and returns
 * at once, with no storage. Any limiter that calls an object per request costs at least this.
 */
export class Noop extends DurableObject {
  decide(_limits: unknown, _cost: number): number {
    return 0;
  }
}
