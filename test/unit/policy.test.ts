// The one deadline and resend policy for object calls: what is sent again (with its id) or retried, how often, and the
// deadline.
import { describe, expect, it } from "vitest";
import {
  callIds,
  callObject,
  callOnce,
  errorName,
  isAmbiguous,
  isOverloaded,
  isRetryable,
  LimiterTimeout,
  MAX_SENDS,
  RESEND_WITHIN_MS,
  withDeadline,
} from "../../src/client/policy.ts";

const marked = (flags: { retryable?: boolean; overloaded?: boolean; remote?: boolean; durableObjectReset?: boolean }) =>
  Object.assign(new Error("x"), flags);

describe("isAmbiguous", () => {
  it("is every failure but the object's refusal of its input and an overload", () => {
    for (const e of [
      marked({}),
      marked({ retryable: true }),
      marked({ durableObjectReset: true }),
      // Thrown in the object but marked by the runtime as a reset or a disconnect: it may have applied it.
      marked({ remote: true, retryable: true }),
      marked({ remote: true, durableObjectReset: true }),
      new LimiterTimeout("late"),
      "a string",
      null,
    ]) {
      expect(isAmbiguous(e)).toBe(true);
    }
    for (const e of [
      marked({ remote: true }),
      new RangeError("cost"),
      new TypeError("limits"),
      marked({ overloaded: true }),
      marked({ retryable: true, overloaded: true }),
    ]) {
      expect(isAmbiguous(e)).toBe(false);
    }
  });
});

describe("callOnce", () => {
  it("sends again after each ambiguous failure, at most MAX_SENDS times in all, leaving a trace each time", async () => {
    for (const failing of [0, 1, MAX_SENDS - 1, MAX_SENDS, MAX_SENDS + 2]) {
      let sends = 0;
      const traces: unknown[] = [];
      const error = marked({ retryable: true });
      const call = callOnce(
        async () => {
          sends += 1;
          if (sends <= failing) throw error;
          return "ok";
        },
        1000,
        { onResend: (e) => traces.push(e) },
      );
      if (failing < MAX_SENDS) {
        expect(await call).toBe("ok");
        expect(sends).toBe(failing + 1);
      } else {
        await expect(call).rejects.toBe(error);
        expect(sends).toBe(MAX_SENDS);
      }
      expect(traces).toHaveLength(Math.min(failing, MAX_SENDS - 1));
    }
  });

  it("never sends again after the object's refusal or an overload", async () => {
    for (const error of [new RangeError("cost"), marked({ remote: true }), marked({ overloaded: true })]) {
      let sends = 0;
      const call = callOnce(async () => {
        sends += 1;
        throw error;
      }, 1000);
      await expect(call).rejects.toBe(error);
      expect(sends).toBe(1);
    }
  });

  it("rejects with an ambiguous failure when a later send failed otherwise: the call may have been applied", async () => {
    const lost = marked({ retryable: true });
    const overloaded = marked({ overloaded: true });
    let sends = 0;
    const call = callOnce(async () => {
      sends += 1;
      throw sends === 1 ? lost : overloaded;
    }, 1000);
    await expect(call).rejects.toBe(lost);
    expect(sends).toBe(2);
  });

  it("sends nothing again RESEND_WITHIN_MS after the first send, on the clock given", async () => {
    let now = 1_000;
    let sends = 0;
    const error = marked({ retryable: true });
    const call = callOnce(
      async () => {
        sends += 1;
        now += RESEND_WITHIN_MS / 2;
        throw error;
      },
      60_000,
      { since: { at: 1_000, now: () => now } },
    );
    await expect(call).rejects.toBe(error);
    // Sent at 0 and 15 s after the first send; at 30 s it may no longer go.
    expect(sends).toBe(2);
  });

  it("a send that throws at once is a failed send; none goes after the deadline", async () => {
    let sends = 0;
    const thrown = callOnce(() => {
      sends += 1;
      if (sends === 1) throw marked({});
      return Promise.resolve("second");
    }, 1000);
    expect(await thrown).toBe("second");
    let late = 0;
    let fail: (e: unknown) => void = () => {};
    const hanging = callOnce(() => {
      late += 1;
      return new Promise((_, reject) => {
        fail = reject;
      });
    }, 5);
    await expect(hanging).rejects.toBeInstanceOf(LimiterTimeout);
    // The first send fails after the deadline: nothing is sent again.
    fail(marked({ retryable: true }));
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(late).toBe(1);
  });
});

describe("callIds", () => {
  it("gives ids unique to the maker: its own prefix, then a count", () => {
    const a = callIds();
    const b = callIds();
    const [a1, a2, b1] = [a(), a(), b()];
    expect(a1).toMatch(/^[0-9a-f-]{36}:1$/);
    expect(a2).toBe(`${a1.split(":")[0]}:2`);
    expect(b1.split(":")[0]).not.toBe(a1.split(":")[0]);
    expect(b1.length).toBeLessThanOrEqual(128);
  });
});

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
