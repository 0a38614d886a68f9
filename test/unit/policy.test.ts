// The one deadline and retry policy for object calls: what is retried, how often, and the deadline.
import { describe, expect, it } from "vitest";
import {
  callObject,
  errorName,
  isOverloaded,
  isRetryable,
  LimiterTimeout,
  withDeadline,
} from "../../src/client/policy.ts";

const marked = (flags: { retryable?: boolean; overloaded?: boolean }) => Object.assign(new Error("x"), flags);

describe("isRetryable / isOverloaded", () => {
  it("retries only what the runtime calls retryable and not an overload", () => {
    expect(isRetryable(marked({ retryable: true }))).toBe(true);
    expect(isRetryable(marked({ retryable: true, overloaded: true }))).toBe(false);
    expect(isRetryable(marked({}))).toBe(false);
    expect(isRetryable(null)).toBe(false);
    expect(isRetryable("retryable")).toBe(false);
    expect(isOverloaded(marked({ overloaded: true }))).toBe(true);
    expect(isOverloaded(undefined)).toBe(false);
  });
});

describe("callObject", () => {
  it("retries a retryable error once, with a fresh attempt, leaving a trace", async () => {
    let attempts = 0;
    const traces: unknown[] = [];
    const out = await callObject(
      async () => {
        attempts += 1;
        if (attempts === 1) throw marked({ retryable: true });
        return "ok";
      },
      1000,
      (e) => traces.push(e),
    );
    expect(out).toBe("ok");
    expect(attempts).toBe(2);
    expect(traces).toHaveLength(1);
  });

  it("gives up after the one retry, and never retries an overload or a plain error", async () => {
    for (const [error, tries] of [
      [marked({ retryable: true }), 2],
      [marked({ retryable: true, overloaded: true }), 1],
      [new Error("plain"), 1],
    ] as const) {
      let attempts = 0;
      const call = callObject(async () => {
        attempts += 1;
        throw error;
      }, 1000);
      await expect(call).rejects.toBe(error);
      expect(attempts).toBe(tries);
    }
  });

  it("rejects with LimiterTimeout at the deadline, whatever the callee does", async () => {
    const late = callObject(() => new Promise(() => {}), 5);
    await expect(late).rejects.toBeInstanceOf(LimiterTimeout);
    await expect(late).rejects.toMatchObject({
      name: "LimiterTimeout",
      message: "the limiter did not answer within 5 ms",
    });
  });
});

describe("withDeadline", () => {
  it("settles as the promise does before the deadline, else with what onLate gives", async () => {
    expect(await withDeadline(Promise.resolve(1), 1000)).toBe(1);
    await expect(withDeadline(Promise.reject(new Error("no")), 1000)).rejects.toThrow("no");
    const late = new Error("late");
    await expect(withDeadline(new Promise(() => {}), 1, () => late)).rejects.toBe(late);
  });
});

describe("errorName", () => {
  it("is the first line of the message, at most 200 characters, never a stack", () => {
    expect(errorName(new Error("one\ntwo"))).toBe("one");
    expect(errorName(new Error("x".repeat(300)))).toHaveLength(200);
    expect(errorName(new TypeError(""))).toBe("TypeError");
    expect(errorName("thrown string")).toBe("unknown error");
  });
});
