/**
 * @module Test-only Worker entry for the e2e fault tests (test/e2e/faults.test.ts): the real
 * fetch handler, and a `FaultyLimiter` — the real RateLimiter whose `take` fails on purpose
 * for keys that start with a fault's name and `_` (the object is named `key:<key>`), so an e2e
 * config chooses the fault by key prefix and nothing fault-related ships in src/.
 *
 * Every `take` call is logged as `{"event":"faulty_take",...}` so a test can count how
 * many calls the Worker made for one request (the retry-once policy).
 *
 * | key prefix + `_`   | what `take` does                                                              |
 * | ------------------ | ----------------------------------------------------------------------------- |
 * | `throw`            | throws a plain `Error`                                                        |
 * | `overload`         | throws an `Error` with `overloaded = true` (survives workerd's RPC)           |
 * | `retryonce`        | odd calls throw `retryable = true`, even calls decide for real                |
 * | `retryalways`      | always throws `retryable = true`                                              |
 * | `retryoverload`    | always throws `retryable = true, overloaded = true`                           |
 * | `reset`            | `ctx.abort()`: the runtime resets the object (caller sees `durableObjectReset`) |
 * | anything else      | the real `take`                                                               |
 */

import type { Decision, LimitSpec } from "../../../src/core/index.ts";
import type { Ask } from "../../../src/core/log.ts";
import { RateLimiter } from "../../../src/object/index.ts";

export { default } from "../../../src/proxy/index.ts";

const FAULTS = ["throw", "overload", "retryonce", "retryalways", "retryoverload", "reset"] as const;
type Fault = (typeof FAULTS)[number];

/** The fault an object's name asks for: `key:<fault>_…`. */
function faultOf(objectName: string | undefined): Fault | null {
  const m = /^key:([a-z]+)_/.exec(objectName ?? "");
  return FAULTS.find((f) => f === m?.[1]) ?? null;
}

function marked(message: string, flags: { retryable?: boolean; overloaded?: boolean }): Error {
  return Object.assign(new Error(message), flags);
}

export class FaultyLimiter extends RateLimiter {
  #calls = 0;

  override async take(limits: readonly LimitSpec[], ask: Ask): Promise<Decision> {
    this.#calls += 1;
    const fault = faultOf(this.ctx.id.name);
    console.log(
      JSON.stringify({
        event: "faulty_take",
        object: this.ctx.id.name ?? null,
        fault,
        call: this.#calls,
      }),
    );
    switch (fault) {
      case "throw":
        throw new Error("FaultyLimiter: take threw");
      case "overload":
        throw marked("FaultyLimiter: overloaded", { overloaded: true });
      case "retryonce":
        if (this.#calls % 2 === 1) throw marked("FaultyLimiter: transient", { retryable: true });
        return super.take(limits, ask);
      case "retryalways":
        throw marked("FaultyLimiter: transient, every time", { retryable: true });
      case "retryoverload":
        throw marked("FaultyLimiter: overloaded, retryable", { retryable: true, overloaded: true });
      case "reset":
        this.ctx.abort("FaultyLimiter: reset");
        throw new Error("unreachable: ctx.abort() returned");
      default:
        return super.take(limits, ask);
    }
  }
}
