/**
 * @module The refusals of a client's keys that count towards their plans' penalties (docs/configuration.md,
 * "Penalties"; docs/design.md, "What real clients do"): those this isolate answered from its deny cache since the
 * key's last call, sent with the next, and the count the key's object had at its latest answer. Both bounded.
 */

import type { Plan } from "../config/types.ts";
import type { Decision } from "../core/decision.ts";
import type { TakeAsk } from "../protocol.ts";
import type { Blocked } from "./deny-cache.ts";

/** The most keys each count is kept for: past it, the counts start afresh. */
const KEYS_MAX = 10_000;

export class Refusals {
  /** Per key: refusals answered from the deny cache since its last call, sent with the next (a penalty counts them). */
  readonly #here = new Map<string, number>();
  /** Per key: the refusals its object had counted towards the plan's penalty at its latest answer. */
  readonly #atObject = new Map<string, number>();

  /**
   * `ask` with the plan's penalty and the refusals this isolate answered for the key from its deny cache since its
   * last call; they count at the object as its own refusals do.
   */
  penalized(name: string, plan: Plan, ask: TakeAsk): TakeAsk {
    if (!plan.penalty) return ask;
    // Net of refusals the object counted that this isolate then granted after all (they may make it negative: what is
    // left below zero is taken off the next report).
    const here = this.#here.get(name) ?? 0;
    const refused = Math.max(0, here);
    if (here < 0) this.#here.set(name, here);
    else this.#here.delete(name);
    // Counted at the object before this call's answer: until it comes (saw), a refusal sent together with this call
    // counts them as the object's, so one that completes the penalty goes there too and learns of the block.
    if (refused > 0) this.#count(this.#atObject, name, refused);
    return { ...ask, penalty: plan.penalty, refused };
  }

  /** Counts a refusal answered here by the rate limits (not by a block: refusals while blocked never count). */
  refusedHere(name: string, plan: Plan, blocked: Blocked, now: number): void {
    if (!plan.penalty || (blocked.blockedBy !== undefined && now < blocked.blockedBy)) return;
    this.#count(this.#here, name, 1);
  }

  /** Adds `n` to the key's count in `counts`, which starts afresh past {@link KEYS_MAX} keys. */
  #count(counts: Map<string, number>, name: string, n: number): void {
    if (counts.size >= KEYS_MAX && !counts.has(name)) counts.clear();
    counts.set(name, (counts.get(name) ?? 0) + n);
  }

  /**
   * A refusal the key's object counted was then granted here from a lease: one fewer of those answered here is
   * reported.
   */
  grantedHere(name: string, plan: Plan): void {
    if (plan.penalty) this.#here.set(name, (this.#here.get(name) ?? 0) - 1);
  }

  /**
   * Whether a refusal of the key answered here could complete its plan's penalty: the object's count at its latest
   * answer, the refusals answered here since, and this one. Such a refusal goes to the object, which counts them all
   * before deciding and answers with the block.
   */
  completesPenalty(name: string, plan: Plan, blocked: Blocked, now: number): boolean {
    if (!plan.penalty || (blocked.blockedBy !== undefined && now < blocked.blockedBy)) return false;
    return (this.#atObject.get(name) ?? 0) + (this.#here.get(name) ?? 0) + 1 >= plan.penalty.after;
  }

  /** Keeps the object's count of the key's refusals from its answer, when the call carried the penalty. */
  saw(name: string, d: Decision): void {
    if (d.refusalsSeen === undefined) return;
    if (this.#atObject.size >= KEYS_MAX && !this.#atObject.has(name)) this.#atObject.clear();
    this.#atObject.set(name, d.refusalsSeen);
  }
}
