/**
 * @module The concurrency slots this isolate holds (docs/configuration.md, "Concurrency"): one per granted request
 * of a plan with `concurrency`, taken by the key's object with the decision and held until the caller releases it
 * (by the slot's record in the result's handle: a copy of the result releases it too, here or in another isolate).
 * While held, it is renewed every third of `concurrency_timeout` (a long response, an open WebSocket keeps its
 * slot); when this isolate vanishes the renewals stop and the object frees the slot after the timeout.
 */

import type { ConcurrencySpec } from "../core/slots.ts";
import type { LimiterNamespace } from "../protocol.ts";
import { callIds, callObject, callOnce } from "./policy.ts";
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
  /** Per key: its slots taken alone here and held, by id, with when each lapses (ms, the client's clock). */
  readonly #aloneByKey = new Map<string, Map<string, number>>();
  readonly #objectTimeoutMs: number;
  /** The next release's call id (protocol.ts, `CallId`). */
  readonly #callId = callIds();
  readonly #log: SlotLog;

  /**
   * Slots held here whose release the key's object did not answer: still counted as held at the object (by key's
   * object name) until it frees them itself, a `concurrency_timeout` after the release at the latest (client's clock).
   */
  readonly #unreleased = new Map<string, { readonly name: string; readonly until: number }>();
  readonly #clock: () => number;

  /** @param clock the client's clock (ms) */
  constructor(objectTimeoutMs: number, log: SlotLog, clock: () => number = Date.now) {
    this.#objectTimeoutMs = objectTimeoutMs;
    this.#log = log;
    this.#clock = clock;
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

  /**
   * Whether the key of object `name` may take one more slot alone at `now`, holding at most `most` here at once: its
   * slots taken alone and those its object granted this isolate before it stopped answering (their requests still run).
   * Slots taken alone that were never released lapse after the plan's `concurrency_timeout`, as at the object.
   */
  fitsAlone(name: string, most: number, now: number): boolean {
    return this.heldAlone(name, now) + this.#heldAtObject(name) < most;
  }

  /**
   * The key of object `name`'s slots taken alone here and still held at `now` (unreleased ones lapse after the plan's
   * `concurrency_timeout`): its object, answering again, counts them with its own (docs/configuration.md, "When the
   * object cannot answer").
   */
  heldAlone(name: string, now: number): number {
    const held = this.#aloneByKey.get(name);
    if (held === undefined) return 0;
    for (const [id, lapsesAt] of held) {
      if (lapsesAt > now) continue;
      held.delete(id);
      this.#alone.delete(id);
    }
    if (held.size === 0) this.#aloneByKey.delete(name);
    return held.size;
  }

  /**
   * The key of object `name`'s slots its object granted this isolate: held here, or released here while the object did
   * not answer (it frees them itself after their timeout).
   */
  #heldAtObject(name: string): number {
    let n = 0;
    for (const h of this.#held.values()) if (h.name === name) n++;
    const now = this.#clock();
    for (const [id, u] of this.#unreleased) {
      if (u.until <= now) this.#unreleased.delete(id);
      else if (u.name === name) n++;
    }
    return n;
  }

  /**
   * Holds `slot` for the key of object `name` alone from `now`, while its object cannot answer (`failure_mode =
   * "local"`): counted here until released here or lapsed, never renewed, never called about.
   */
  holdAlone(name: string, slot: SlotAsk, now: number): SlotRecord {
    this.#alone.set(slot.id, name);
    const held = this.#aloneByKey.get(name) ?? new Map<string, number>();
    held.set(slot.id, now + slot.timeoutMs);
    this.#aloneByKey.set(name, held);
    return { name, id: slot.id };
  }

  /**
   * Frees `slot` at the key's object, once: held here, its renewals stop; held by another isolate, the object frees
   * it and that isolate's next renewal finds it gone. A slot taken alone here is freed here, with no call. Resolves false when there was none (released already), or when
   * the object did not answer (logged as `slot_release_failed`; the object frees it after its timeout). Never rejects.
   */
  async release(ns: LimiterNamespace, slot: SlotRecord | null): Promise<boolean> {
    if (slot === null || typeof slot.id !== "string" || typeof slot.name !== "string") return false;
    if (this.#released.has(slot.id)) return false;
    if (this.#released.size >= RELEASED_MAX) this.#released.clear();
    const alone = this.#alone.get(slot.id);
    if (alone !== undefined) {
      this.#alone.delete(slot.id);
      this.#released.add(slot.id);
      this.#aloneByKey.get(alone)?.delete(slot.id);
      return true;
    }
    const held = this.#held.get(slot.id);
    if (held) {
      this.#held.delete(slot.id);
      clearTimeout(held.timer);
      held.released = true;
    }
    this.#released.add(slot.id);
    try {
      // With an id, sent again after a failure that may have been applied (policy.ts, `callOnce`): answered as the
      // first time, so a slot freed by a send whose answer was lost still says so.
      const call = this.#callId();
      const freed = await callOnce(
        () => (held?.ns ?? ns).getByName(slot.name).release(slot.id, call),
        this.#objectTimeoutMs,
      );
      // Held here, the slot was this isolate's to free: done, whether or not it had lapsed at the object meanwhile.
      return held !== undefined || freed;
    } catch (e) {
      this.#log("slot_release_failed", slot.name, e, "error");
      if (held) this.#unreleased.set(slot.id, { name: slot.name, until: this.#clock() + held.timeoutMs });
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
