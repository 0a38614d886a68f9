// The code's shape (scripts/function-shape.ts, `npm run shape`): few functions in src/ take more than four
// positional parameters, none is longer than 80 lines.
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { MAX_LINES, MAX_WIDE_FUNCTIONS, shapeOf } from "../../scripts/function-shape.ts";

describe("src/'s functions", () => {
  const { wide, long } = shapeOf(resolve(import.meta.dirname, "../.."));

  it(`at most ${MAX_WIDE_FUNCTIONS} take more than four parameters`, () => {
    expect(wide.length, wide.join("\n")).toBeLessThanOrEqual(MAX_WIDE_FUNCTIONS);
  });

  it(`none is longer than ${MAX_LINES} lines`, () => {
    expect(long).toEqual([]);
  });
});
