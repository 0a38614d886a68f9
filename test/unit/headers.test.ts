// The rate-limit header forms: what each writes for one and for several limits, and which limit the
// single-valued forms report.
import { describe, expect, it } from "vitest";
import { closest, type HeaderState, policyHeader, setRateLimitHeaders } from "../../src/client/headers.ts";
import { HEADER_FORMS, type HeaderForm } from "../../src/config/types.ts";

const limits = [
  { name: "per-second", limit: 10, windowMs: 1000 },
  { name: 'burst "b"', limit: 100, windowMs: 60_000 },
];
const states: (HeaderState | null)[] = [
  { remaining: 7, resetMs: 400 },
  { remaining: 3, resetMs: 30_500 },
];
const NOW = 1_700_000_000_250;

function written(form: HeaderForm, s: readonly (HeaderState | null)[] = states): Record<string, string> {
  const h = new Headers();
  setRateLimitHeaders(h, form, { limits, states: s, at: NOW });
  return Object.fromEntries(h);
}

describe("setRateLimitHeaders", () => {
  it("draft-11 and draft-8: every limit named, in order; t left out while a window is empty", () => {
    for (const form of ["draft-11", "draft-8"] as const) {
      expect(written(form)).toEqual({
        "ratelimit-policy": '"per-second";q=10;w=1, "burst \\"b\\"";q=100;w=60',
        ratelimit: '"per-second";r=7;t=1, "burst \\"b\\"";r=3;t=31',
      });
    }
    expect(written("draft-11", [null, { remaining: 100, resetMs: 0 }]).ratelimit).toBe('"burst \\"b\\"";r=100');
  });

  it("draft-7: the policies unnamed, one combined field for the limit closest to refusing", () => {
    expect(written("draft-7")).toEqual({
      "ratelimit-policy": "10;w=1, 100;w=60",
      ratelimit: "limit=100, remaining=3, reset=31",
    });
  });

  it("draft-6: separate Limit, Remaining and Reset fields", () => {
    expect(written("draft-6")).toEqual({
      "ratelimit-policy": "10;w=1, 100;w=60",
      "ratelimit-limit": "100",
      "ratelimit-remaining": "3",
      "ratelimit-reset": "31",
    });
  });

  it("legacy: X-RateLimit-* with the reset as a Unix time in seconds", () => {
    expect(written("legacy")).toEqual({
      "x-ratelimit-limit": "100",
      "x-ratelimit-remaining": "3",
      "x-ratelimit-reset": String(Math.ceil((NOW + 30_500) / 1000)),
    });
  });

  it("none writes nothing; no known state writes only the policy; no limits (unlimited) write nothing", () => {
    expect(written("none")).toEqual({});
    expect(written("draft-6", [null, null])).toEqual({ "ratelimit-policy": "10;w=1, 100;w=60" });
    expect(Object.keys(written("draft-11", [null, null]))).toEqual(["ratelimit-policy"]);
    expect(written("legacy", [null, null])).toEqual({});
    for (const form of HEADER_FORMS) {
      const h = new Headers();
      setRateLimitHeaders(h, form, { limits: [], states: [], at: NOW });
      expect([...h], form).toEqual([]);
    }
  });

  it("every form is listed, the default first", () => {
    expect(HEADER_FORMS[0]).toBe("draft-11");
    expect(new Set(HEADER_FORMS).size).toBe(6);
  });
});

describe("closest", () => {
  it("is the known state with the fewest remaining, the later reset on a tie (else the first), -1 with none", () => {
    const st = (remaining: number, resetMs: number) => ({ remaining, resetMs });
    expect(closest([st(2, 5), null, st(2, 9)])).toBe(2);
    expect(closest([st(2, 9), st(2, 5)])).toBe(0);
    expect(closest([st(2, 5), st(2, 5)])).toBe(0);
    expect(closest([st(1, 5), st(2, 9)])).toBe(0);
    expect(closest([st(5, 1), st(1, 1), st(3, 1)])).toBe(1);
    expect(closest([null, null])).toBe(-1);
  });
});

describe("policyHeader", () => {
  it("is built once per limit list and form", () => {
    expect(policyHeader(limits, "draft-7")).toBe(policyHeader(limits, "draft-7"));
    expect(policyHeader(limits, "legacy")).toBe("");
  });
});
