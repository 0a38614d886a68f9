// src/base/clock.ts: the time the library's limiters and the object read is Date.now() and the epoch 0 unless the test
// kit moved them — and nothing but the kit can (the seam is named nowhere else in src/). The kit's clock and reset
// inside workerd: test/integration/test-kit.test.ts.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { epoch, now, testSeam } from "../../src/base/clock.ts";
import { limiterOf } from "../../src/library/create.ts";
import { memoryLimiter, TestClock, useRealClock, useTestClock } from "../../src/testing/index.ts";

afterEach(() => {
  vi.useRealTimers();
  useRealClock();
});

describe("now() and epoch()", () => {
  it("read Date.now() and 0 until the kit moves them", () => {
    vi.useFakeTimers({ now: 1_234_567, toFake: ["Date"] });
    expect(now()).toBe(1_234_567);
    vi.setSystemTime(2_000_000);
    expect(now()).toBe(2_000_000);
    const clock = useTestClock(new TestClock(5_000));
    expect(now()).toBe(5_000);
    clock.advance(7);
    expect(now()).toBe(5_007);
    useRealClock();
    expect(now()).toBe(2_000_000);
  });

  it("a new epoch makes a library limiter start afresh; a limiter with its own clock keeps it", async () => {
    const limiter = memoryLimiter({ name: "e", limits: [{ limit: 1, window: "1m" }] });
    await limiter.limit({}, "k");
    expect(await limiter.limit({}, "k")).toMatchObject({ allowed: false });
    expect(await limiter.limit({}, "k")).toMatchObject({ reason: "cached_denial" });
    const before = limiter.pipeline;
    const at = epoch();
    testSeam.nextEpoch();
    expect(epoch()).toBe(at + 1);
    expect(limiter.pipeline).not.toBe(before);
    expect(limiter.pipeline).toBe(limiter.pipeline);
    // The deny cache went with the old pipeline: the refusal now comes from the (in-memory) object.
    expect(await limiter.limit({}, "k")).toMatchObject({ allowed: false, reason: "over_limit" });
    expect(limiter.pipeline.client.now()).toBe(limiter.clock.now());
  });

  it("a library limiter without a clock reads the kit's while it holds one", () => {
    const limiter = limiterOf({ name: "c", limits: [{ limit: 1, window: "1m" }] }, () => {
      throw new Error("no service in Node");
    });
    const clock = useTestClock(new TestClock(42_000));
    expect(limiter.pipeline.client.now()).toBe(42_000);
    clock.advance(1);
    expect(limiter.pipeline.client.now()).toBe(42_001);
    expect(() => useTestClock({ now: () => 0 } as unknown as TestClock)).toThrow(TypeError);
    expect(now()).toBe(42_001);
  });
});

describe("never in a production path", () => {
  /** Every .ts file under `dir`. */
  const files = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
    );

  it("only the test kit names the seam that moves the clock or the epoch", () => {
    const naming = files("src").filter((f) => /\btestSeam\b/.test(readFileSync(f, "utf8")));
    expect(naming.sort()).toEqual([
      join("src", "base", "clock.ts"),
      ...[join("src", "testing", "clock.ts"), join("src", "testing", "reset.ts")],
    ]);
  });
});
