/**
 * @module The one deadline and resend policy for calls to a key's object (and the proxy's origin deadline), as
 * docs/design.md, "Nothing lost under faults", has it: every call has a deadline that holds even when the callee
 * ignores cancellation. A call that may change the key's state carries an id ({@link callIds}) and is sent again, the
 * same id, after any failure that leaves it unknown whether the object applied it ({@link callOnce}): the object answers
 * a repeat with the answer it kept. A call that reads is tried again once when the runtime says the error is
 * retryable and not an overload ({@link callObject}).
 */

import type { CallId } from "../protocol.ts";

/** A call took longer than its deadline. */
export class LimiterTimeout extends Error {
  override readonly name = "LimiterTimeout";
}

/**
 * Resolves or rejects as `promise` does, or rejects with `onLate()` (default: a
 * {@link LimiterTimeout}) after `ms`. The timer is cleared either way.
 */
export function withDeadline<T>(promise: Promise<T>, ms: number, onLate?: () => unknown): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | null = null;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(onLate ? onLate() : new LimiterTimeout(`the limiter did not answer within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([promise, deadline]).finally(() => {
    if (timer !== null) clearTimeout(timer);
  });
}

/** A Durable Object error worth one retry: the runtime says `retryable`, and it is not an overload. */
export function isRetryable(e: unknown): boolean {
  const err = e as { retryable?: unknown; overloaded?: unknown } | null;
  return err?.retryable === true && err.overloaded !== true;
}

/** Whether the runtime says the object is overloaded (never retried: a retry adds to the load). */
export function isOverloaded(e: unknown): boolean {
  return (e as { overloaded?: unknown } | null)?.overloaded === true;
}

/**
 * Runs `attempt` (which must get a fresh stub each time: workerd binds a stub to the request that made it) under a
 * deadline of `timeoutMs` for both tries together; tries once more when {@link isRetryable}, calling `onRetry` first
 * so that the retry leaves a trace. For reads and calls that change nothing twice: a call that may change a key's state
 * goes with an id, through {@link callOnce}.
 */
export function callObject<T>(
  attempt: () => Promise<T>,
  timeoutMs: number,
  onRetry: (e: unknown) => void = () => {},
): Promise<T> {
  return send(attempt, timeoutMs, { again: isRetryable, most: 2, onAgain: onRetry, until: null });
}

/** How long after its first send a call may still be sent again (ms): the object keeps answers twice as long. */
export const RESEND_WITHIN_MS = 30_000;

/** The most times a call is sent within its deadline: the first send and two more. */
export const MAX_SENDS = 3;

/**
 * Whether a failed call may have been applied, its answer lost, so that it may be sent again with its id: any failure
 * (a dropped connection, an object reset, an internal error, the deadline) but three. The object's refusal of its input
 * — an error its own code threw (workerd marks it `remote`), or a `RangeError` or `TypeError` — which the same input
 * meets again and which comes before any change; and an overload, which the runtime answers before the call runs (sent
 * again, it adds to the load).
 */
export function isAmbiguous(e: unknown): boolean {
  const err = e as { remote?: unknown; retryable?: unknown; durableObjectReset?: unknown } | null;
  const thrownByObject = err?.remote === true && err.retryable !== true && err.durableObjectReset !== true;
  return !(thrownByObject || e instanceof RangeError || e instanceof TypeError || isOverloaded(e));
}

/** How a call that may change a key's state is sent again ({@link callOnce}). */
export interface Resending {
  /** Called before each send again, so that it leaves a trace. */
  readonly onResend?: (e: unknown) => void;
  /**
   * When the call was first sent, on the clock `now` reads (ms): no send goes {@link RESEND_WITHIN_MS} after it (the
   * object keeps answers twice as long). Default: when `callOnce` is called, on `Date.now`.
   */
  readonly since?: { readonly at: number; readonly now: () => number };
}

/**
 * Runs a call that may change a key's state under a deadline of `timeoutMs` for all its sends together: `attempt`
 * sends it with the same id each time (from a fresh stub: workerd binds a stub to the request that made it), again at
 * once after an ambiguous failure ({@link isAmbiguous}), at most {@link MAX_SENDS} times, never after the deadline
 * nor {@link RESEND_WITHIN_MS} after its first send. When every send failed and one of them ambiguously, it rejects
 * with that one's error — the call may have been applied — even when a later send failed otherwise.
 */
export function callOnce<T>(attempt: () => Promise<T>, timeoutMs: number, how: Resending = {}): Promise<T> {
  const since = how.since ?? { at: Date.now(), now: Date.now };
  const until = { at: since.at + RESEND_WITHIN_MS, now: since.now };
  return send(attempt, timeoutMs, { again: isAmbiguous, most: MAX_SENDS, onAgain: how.onResend, until });
}

/** How {@link send} tries again: after which failures, how many sends at most, and until when (null: the deadline). */
interface Again {
  readonly again: (e: unknown) => boolean;
  readonly most: number;
  readonly onAgain?: ((e: unknown) => void) | undefined;
  readonly until: { readonly at: number; readonly now: () => number } | null;
}

/**
 * Sends `attempt` under a deadline of `timeoutMs` for all sends together, again after a failure `how.again` allows,
 * within `how.most` sends, before the deadline and `how.until`. A send that throws at once (a stub that cannot be made)
 * fails as one that fails later. Rejects with the last failure, unless it is one `how.again` does not allow and an
 * earlier one was: then with that earlier one.
 */
function send<T>(attempt: () => Promise<T>, timeoutMs: number, how: Again): Promise<T> {
  let late = false;
  let allowed: { readonly error: unknown } | null = null;
  const go = (sends: number): Promise<T> =>
    new Promise<T>((resolve) => resolve(attempt())).catch((e: unknown) => {
      const again = how.again(e);
      allowed ??= again ? { error: e } : null;
      const past = how.until !== null && how.until.now() >= how.until.at;
      if (!again) throw allowed === null ? e : allowed.error;
      if (late || past || sends >= how.most) throw e;
      how.onAgain?.(e);
      return go(sends + 1);
    });
  return withDeadline(go(1), timeoutMs, () => {
    late = true;
    return new LimiterTimeout(`the limiter did not answer within ${timeoutMs} ms`);
  });
}

/**
 * Makes the ids of one client's calls (protocol.ts, {@link CallId}): a prefix unique to it, made on first use (workerd
 * allows no random values at module level), and a count.
 */
export function callIds(): () => CallId {
  let prefix: string | null = null;
  let count = 0;
  return () => {
    prefix ??= crypto.randomUUID();
    return `${prefix}:${++count}`;
  };
}

/** A short, safe description of an error for a response or a log line: no stack. */
export function errorName(e: unknown): string {
  if (e instanceof Error) return e.message.split("\n")[0]?.slice(0, 200) || e.name;
  return "unknown error";
}
