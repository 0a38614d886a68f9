/** @module Duration parsing: every unit, numbers, and errors that name the field. */

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { formatDuration, MAX_DURATION_MS, parseDuration } from "../../src/core/index.ts";

describe("parseDuration", () => {
  it.each([
    ["250ms", 250],
    ["1s", 1_000],
    ["10s", 10_000],
    ["1m", 60_000],
    ["1h", 3_600_000],
    ["1d", 86_400_000],
    [" 2s ", 2_000],
    [1500, 1_500],
  ])("reads %j as %i ms", (input, ms) => {
    expect(parseDuration(input)).toBe(ms);
  });

  it.each([
    ["1 sec", /RATE_LIMIT\.limits\[1\]\.window: expected a duration like "250ms".*got "1 sec"/],
    ["", /got ""/],
    ["1.5s", /got "1\.5s"/],
    ["-1s", /got "-1s"/],
    ["1w", /got "1w"/],
    ["0s", /≥ 1, got "0s"/],
    [0, /≥ 1, got 0/],
    [2.5, /whole number/],
    [Number.NaN, /got NaN/],
    ["367d", /at most 366d/],
    [true, /got true/],
    [null, /got null/],
    [undefined, /got nothing/],
    [{}, /got a object/],
  ])("rejects %j naming the field", (input, message) => {
    expect(() => parseDuration(input, "RATE_LIMIT.limits[1].window")).toThrow(message);
  });

  it("round-trips through formatDuration for any valid duration", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: MAX_DURATION_MS }), (ms) => {
        expect(parseDuration(formatDuration(ms))).toBe(ms);
      }),
    );
    expect(formatDuration(60_000)).toBe("1m");
    expect(formatDuration(1_500)).toBe("1500ms");
  });
});

describe("parseDuration messages", () => {
  it("names the field 'duration' when none is given, and says what a duration looks like for a non-string", () => {
    expect(() => parseDuration("soon")).toThrow(/^duration: expected a duration like "250ms"/);
    expect(() => parseDuration(true, "f")).toThrow(
      new RangeError('f: expected a duration like "1s" or a number of milliseconds, got true'),
    );
    expect(() => parseDuration([1], "f")).toThrow(/^f: expected a duration like "1s" .*got an array$/);
  });
});
