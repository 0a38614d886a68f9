/**
 * @module The concurrency slots this isolate holds (docs/configuration.md, "Concurrency"): one per granted request
 * of a plan with `concurrency`, taken by the key's object with the decision and held until the caller releases it.
 * While held, it is renewed every third of `concurrency_timeout` (a long response, an open WebSocket keeps its
 * slot); when this isolate vanishes the renewals stop and the object frees the slot after the timeout.
 */

import type { ConcurrencySpec } from "../core/slots.ts";
import { callObject } from "./policy.ts";
import type { RateLimitResult } from "./result.ts";
import type { LimiterNamespace } from "./stub.ts";

/** A slot asked for with a decision: the request's id and the plan's `concurrency`. */
export type SlotAsk = { readonly id: string } & ConcurrencySpec;

interface Held {
  readonly ns: LimiterNamespace;
  readonly name: string;
  readonly id: string;
  readonly timeoutMs: number;
  /** The next renewal's timer. */
  timer: ReturnType<typeof setTimeout>;
  released: boolean;
}

/** Logs a failed or refused call about a slot: the event, the key's object name, the error, the level. */
export type SlotLog = (event: string, name: string, e: unknown, level: "warn" | "error") => void;

export class InFlight {
  readonly #held = new WeakMap<RateLimitResult, Held>();
  readonly #objectTimeoutMs: number;
  readonly #log: SlotLog;

  constructor(objectTimeoutMs: number, log: SlotLog) {
    this.#objectTimeoutMs = objectTimeoutMs;
    this.#log = log;
  }

  /** A new request's slot ask under `spec`. */
  ask(spec: ConcurrencySpec): SlotAsk {
    return { id: crypto.randomUUID(), limit: spec.limit, timeoutMs: spec.timeoutMs };
  }

  /** Holds the slot `slot` the key's object `name` granted with `result`, renewing it until it is released. */
  hold(ns: LimiterNamespace, result: RateLimitResult, name: string, slot: SlotAsk): void {
    // Its timer is set by #schedule, at once.
    const held = { ns, name, id: slot.id, timeoutMs: slot.timeoutMs, released: false } as Held;
    this.#held.set(result, held);
    this.#schedule(held);
  }

  /** Whether `result` holds a slot not yet released. */
  holds(result: RateLimitResult): boolean {
    return this.#held.has(result);
  }

  /**
   * Frees `result`'s slot at the key's object (once; later calls do nothing). Resolves false when it held none, or
   * when the object did not answer (logged as `slot_release_failed`; the object frees it after its timeout). Never
   * rejects.
   */
  async release(result: RateLimitResult): Promise<boolean> {
    const held = this.#held.get(result);
    if (!held) return false;
    this.#held.delete(result);
    clearTimeout(held.timer);
    held.released = true;
    try {
      await callObject(() => held.ns.getByName(held.name).release(held.id), this.#objectTimeoutMs);
      return true;
    } catch (e) {
      this.#log("slot_release_failed", held.name, e, "error");
      return false;
    }
  }

  /** Renews `held` a third of its timeout from now, and again after each renewal, until it is released. */
  #schedule(held: Held): void {
    const timer = setTimeout(
      () => {
        callObject(() => held.ns.getByName(held.name).renew(held.id, held.timeoutMs), this.#objectTimeoutMs).then(
          (kept) => {
            if (held.released) return; // released while the renewal was out
            if (kept) this.#schedule(held);
            else this.#log("slot_lapsed", held.name, new Error("the slot lapsed before it was renewed"), "warn");
          },
          (e: unknown) => {
            this.#log("slot_renew_failed", held.name, e, "warn");
            if (!held.released) this.#schedule(held);
          },
        );
      },
      Math.floor(held.timeoutMs / 3),
    );
    (timer as { unref?: () => void }).unref?.();
    held.timer = timer;
  }
}
