// The window judge that e2e tests, the soak and the bench share (test/support/window.ts).
import { describe, expect, it } from "vitest";
import { judgeWindows, maxInWindow, maxSendToArrival, unjustifiedDenials } from "../support/window.ts";

describe("maxInWindow", () => {
  it("counts the most times in any window (t − w, t], in any order", () => {
    expect(maxInWindow([], 100)).toBe(0);
    expect(maxInWindow([300, 0, 100, 99, 200], 100)).toBe(2);
    expect(maxInWindow([0, 100], 100)).toBe(1);
    expect(maxInWindow([0, 99], 100)).toBe(2);
  });
});

describe("judgeWindows", () => {
  it("shrinks each window by the largest send-to-arrival time", () => {
    const sent = [
      { id: 1, sentAt: 0 },
      { id: 2, sentAt: 10 },
    ];
    const arrivals = [
      { id: 1, at: 5 },
      { id: 2, at: 40 },
    ];
    expect(maxSendToArrival(sent, arrivals)).toBe(30);
    expect(judgeWindows(sent, arrivals, [{ limit: 1, windowMs: 100 }])).toEqual({
      jitter: 30,
      windows: [{ limit: 1, windowMs: 100, shrunkMs: 70, max: 2 }],
    });
  });

  it("an arrival nobody sent is an error", () => {
    expect(() => maxSendToArrival([], [{ id: 7, at: 1 }])).toThrow("never sent");
  });
});

describe("unjustifiedDenials", () => {
  const limits = [{ limit: 2, windowMs: 1000 }];
  const req = (sentAt: number, receivedAt: number, status: number) => ({ sentAt, receivedAt, status });

  it("a 429 with the window full is justified", () => {
    const run = [req(0, 5, 200), req(10, 15, 200), req(20, 25, 429)];
    expect(unjustifiedDenials(run, limits)).toEqual([]);
  });

  it("a 429 with room in every window whatever the timing is flagged (an under-granting limiter)", () => {
    const run = [req(0, 5, 200), req(10, 15, 429)];
    expect(unjustifiedDenials(run, limits)).toEqual([run[1]]);
  });

  it("a 429 after the window moved on is flagged; a slow round trip that spans it is not", () => {
    const fast = [req(0, 5, 200), req(10, 15, 200), req(1100, 1105, 429)];
    expect(unjustifiedDenials(fast, limits)).toEqual([fast[2]]);
    // Both grants may have been decided as late as 900 and 950, so at 1100 both may still count.
    const slow = [req(0, 900, 200), req(10, 950, 200), req(1100, 1105, 429)];
    expect(unjustifiedDenials(slow, limits)).toEqual([]);
  });

  it("with several limits, one full limit is enough", () => {
    const two = [
      { limit: 1, windowMs: 100 },
      { limit: 5, windowMs: 1000 },
    ];
    expect(unjustifiedDenials([req(0, 1, 200), req(50, 51, 429)], two)).toEqual([]);
    expect(unjustifiedDenials([req(0, 1, 200), req(150, 151, 429)], two)).toHaveLength(1);
  });
});
