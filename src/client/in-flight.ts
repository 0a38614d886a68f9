/**
 * @module The concurrency slots this isolate holds (docs/configuration.md, "Concurrency"): one per granted request
 * of a plan with `concurrency`, taken by the key's object with the decision and held until the caller releases it
 * (by the slot's record in the result's handle: a copy of the result releases it too, here or in another isolate).
 * While held, it is renewed every third of `concurrency_timeout` (a long response, an open WebSocket keeps its
 * slot); when this isolate vanishes the renewals stop and the object frees the slot after the timeout.
 */

import type { ConcurrencySpec } from "../core/slots.ts";
import type { LimiterNamespace } from "../protocol.ts";
import { callObject } from "./policy.ts";
import type { SlotRecord } from "./result.ts";

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

/** How many released slot ids an isolate remembers, so that a second release makes no call. */
const RELEASED_MAX = 10_000;

export class InFlight {
  /** Slots held here, by id. */
  readonly #held = new Map<string, Held>();
  /** Ids of slots released here lately. */
  readonly #released = new Set<string>();
  /** Slots taken alone (the key's object could not answer): their key's object name, by id; never at the object. */
  readonly #alone = new Map<string, string>();
  /** Per key: its slots taken alone here, held now. */
  readonly #aloneCount = new Map<string, number>();
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

  /** Holds the slot `slot` the key's object `name` granted, renewing it until it is released; returns its record. */
  hold(ns: LimiterNamespace, name: string, slot: SlotAsk): SlotRecord {
    // Its timer is set by #schedule, at once.
    const held = { ns, name, id: slot.id, timeoutMs: slot.timeoutMs, released: false } as Held;
    this.#held.set(slot.id, held);
    this.#schedule(held);
    return { name, id: slot.id };
  }

  /** Whether `slot` is held here and not yet released. */
  holds(slot: SlotRecord | null): boolean {
    return slot !== null && (this.#held.has(slot.id) || this.#alone.has(slot.id));
  }

  /** Whether the key of object `name` may take one more slot alone, holding at most `most` here at once. */
  fitsAlone(name: string, most: number): boolean {
    return (this.#aloneCount.get(name) ?? 0) < most;
  }

  /**
   * Holds `slot` for the key of object `name` alone, while its object cannot answer (`failure_mode = "local"`):
   * counted here until released here, never renewed, never called about.
   */
  holdAlone(name: string, slot: SlotAsk): SlotRecord {
    this.#alone.set(slot.id, name);
    this.#aloneCount.set(name, (this.#aloneCount.get(name) ?? 0) + 1);
    return { name, id: slot.id };
  }

  /**
   * Frees `slot` at the key's object, once: held here, its renewals stop; held by another isolate, the object frees
   * it and that isolate's next renewal finds it gone. Resolves false when there was none (released already), or when
   * the object did not answer (logged as `slot_release_failed`; the object frees it after its timeout). Never rejects.
   */
  async release(ns: LimiterNamespace, slot: SlotRecord | null): Promise<boolean> {
    if (slot === null || typeof slot.id !== "string" || typeof slot.name !== "string") return false;
    const alone = this.#alone.get(slot.id);
    if (alone !== undefined) {
      this.#alone.delete(slot.id);
      const left = (this.#aloneCount.get(alone) ?? 1) - 1;
      if (left > 0) this.#aloneCount.set(alone, left);
      else this.#aloneCount.delete(alone);
      return true;
    }
    if (this.#released.has(slot.id)) return false;
    const held = this.#held.get(slot.id);
    if (held) {
      this.#held.delete(slot.id);
      clearTimeout(held.timer);
      held.released = true;
    }
    if (this.#released.size >= RELEASED_MAX) this.#released.clear();
    this.#released.add(slot.id);
    try {
      const freed = await callObject(
        () => (held?.ns ?? ns).getByName(slot.name).release(slot.id),
        this.#objectTimeoutMs,
      );
      // Held here, the slot was this isolate's to free: done, whether or not it had lapsed at the object meanwhile.
      return held !== undefined || freed;
    } catch (e) {
      this.#log("slot_release_failed", slot.name, e, "error");
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
            else {
              // Lapsed, or released by another isolate holding a copy of the result: no longer this isolate's.
              this.#held.delete(held.id);
              this.#log("slot_lapsed", held.name, new Error("the slot lapsed or was released elsewhere"), "warn");
            }
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
