/**
 * @module The one deadline and retry policy for calls to a key's object (and the proxy's origin
 * deadline): every call has a deadline that holds even when the callee ignores cancellation, and is
 * retried once, with a fresh stub, only when the runtime says the error is retryable and not an
 * overload.
 */

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
 * Runs `attempt` (which must get a fresh stub each time: workerd binds a stub to the request that
 * made it) under a deadline of `timeoutMs` for both tries together; retries once when
 * {@link isRetryable}, calling `onRetry` first so that the retry leaves a trace.
 */
export function callObject<T>(
  attempt: () => Promise<T>,
  timeoutMs: number,
  onRetry: (e: unknown) => void = () => {},
): Promise<T> {
  // A try that throws at once (a stub that cannot be made) rejects as one that fails later.
  const call = new Promise<T>((resolve) => resolve(attempt())).catch((e: unknown) => {
    if (!isRetryable(e)) throw e;
    onRetry(e);
    return attempt();
  });
  return withDeadline(call, timeoutMs);
}

/** A short, safe description of an error for a response or a log line: no stack. */
export function errorName(e: unknown): string {
  if (e instanceof Error) return e.message.split("\n")[0]?.slice(0, 200) || e.name;
  return "unknown error";
}
