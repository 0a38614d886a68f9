// The path rules match and the origin receives: RFC 3986 normalisation, the answers for encoded slashes and
// backslashes and for parameters in dot segments, and the property that equivalent spellings match alike.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import { type EscapedSlashes, normalizePath, PathError } from "../../src/base/path.ts";
import { costFor, routeFor } from "../../src/config/lookup.ts";
import { parseConfig } from "../../src/config/parse.ts";
import type { Plan } from "../../src/config/types.ts";
import { httpErrorOf, normalized } from "../../src/pipeline/http.ts";

/** What the Worker sees: the URL parser's pathname of a request target. */
const pathname = (target: string) => new URL(`https://api.example${target}`).pathname;
const normal = (target: string, mode?: EscapedSlashes) => normalizePath(pathname(target), mode);

describe("normalizePath", () => {
  it("leaves an ordinary path alone", () => {
    expect(normal("/v1/items/42")).toEqual({ path: "/v1/items/42", match: "/v1/items/42" });
    expect(normal("/")).toEqual({ path: "/", match: "/" });
  });

  it("decodes unreserved characters, upper-cases other escapes, merges slashes, removes dot segments", () => {
    expect(normal("/%76%31/search").path).toBe("/v1/search");
    expect(normal("/%7euser/%41%2d%5F").path).toBe("/~user/A-_");
    expect(normal("/caf%c3%a9/a%20b").path).toBe("/caf%C3%A9/a%20b");
    expect(normal("//v1///search/").path).toBe("/v1/search/");
    expect(normal("/v1/x/%2E%2E/search").path).toBe("/v1/search");
    expect(normal("/a/b/..").path).toBe("/a/");
    expect(normal("/a/..").path).toBe("/");
    expect(normal("/health\\..\\v1").path).toBe("/v1");
  });

  it("encoded slashes and backslashes: refused by default, decoded and resolved, or kept", () => {
    for (const target of ["/health%2F..%2Fv1/expensive", "/health%5C..%5Cv1/expensive", "/a%2fb"]) {
      expect(() => normal(target), target).toThrow(PathError);
    }
    expect(normal("/health%2F..%2Fv1/expensive", "unescape").path).toBe("/v1/expensive");
    expect(normal("/health%5c..%5cv1/expensive", "unescape").path).toBe("/v1/expensive");
    expect(normal("/health%2f..%2Fv1/expensive", "keep").path).toBe("/health%2F..%2Fv1/expensive");
  });

  it("parameters: a dot segment with them is refused; rules match without them, the origin gets them", () => {
    expect(() => normal("/health/..;/v1/expensive")).toThrow(PathError);
    expect(() => normal("/a/.;x/b")).toThrow(PathError);
    expect(normal("/v1;v=2/search;jsessionid=1")).toEqual({
      path: "/v1;v=2/search;jsessionid=1",
      match: "/v1/search",
    });
  });
});

describe("the refusals", () => {
  const refusal = (target: string) => {
    try {
      normal(target);
    } catch (e) {
      return [(e as Error).name, (e as Error).message];
    }
    return null;
  };

  it("say what was refused and why", () => {
    expect(refusal("/a%2Fb")).toEqual([
      "PathError",
      "The path holds an encoded slash (%2F), which servers read differently; send it unencoded.",
    ]);
    expect(refusal("/a%5cb")?.[1]).toBe(
      "The path holds an encoded backslash (%5C), which servers read differently; send it unencoded.",
    );
    expect(refusal("/a/..;x/b")?.[1]).toBe(
      'The path has a dot segment with parameters ("..;x"), which servers read differently.',
    );
  });

  it("normalized() follows the config and makes a refusal a 400 problem", () => {
    const config = (escaped_slashes: string) =>
      parseConfig({
        ORIGIN: "https://o.example",
        RATE_LIMIT: { limits: [{ limit: 1, window: "1s" }], paths: { escaped_slashes } },
      });
    expect(normalized("/a%2Fb", config("keep")).path).toBe("/a%2Fb");
    expect(normalized("/x%2F..%2Fb", config("unescape")).path).toBe("/b");
    let caught: unknown;
    try {
      normalized("/a%2Fb", config("reject"));
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(LimiterError);
    const http = httpErrorOf(caught as LimiterError);
    expect(http.status).toBe(400);
    expect(http.title).toBe("Bad Request");
    expect(http.message).toMatch(/^The path holds an encoded slash/);
  });
});

describe("rules match what the origin will see", () => {
  const config = parseConfig({
    ORIGIN: "https://api.example.com",
    RATE_LIMIT: {
      limits: [{ limit: 10, window: "1s" }],
      costs: [
        { path: "/health", cost: 0 },
        { method: "POST", path: "/v1/expensive", cost: 10 },
      ],
      routes: [
        { name: "expensive", method: "POST", path: "/v1/expensive", limits: [{ limit: 1, window: "1m" }] },
        { name: "a", path: "/a", limits: [{ limit: 1, window: "1m" }] },
      ],
    },
  });
  const costOf = (target: string, method = "POST") => costFor(config, method, normal(target, "unescape").match);
  const routeOf = (target: string, method = "POST") =>
    routeFor(config.defaultPlan as Plan, method, normal(target, "unescape").match)?.name ?? null;

  it("no spelling of the costly route is free", () => {
    for (const target of [
      "/v1/expensive",
      "/%76%31/expensive",
      "/health%2F..%2Fv1/expensive",
      "/health/../v1/expensive",
      "/health\\..\\v1/expensive",
      "//v1//expensive",
      "/v1;x=1/expensive",
      "/v1/%65xpensive",
    ]) {
      expect(costOf(target), target).toBe(10);
      expect(routeOf(target), target).toBe("expensive");
    }
  });

  it("property: a path and its RFC 3986 equivalents normalise alike, so they match the same rule", () => {
    // Segments often start with "a" or "v1" so that the routes' prefixes come into play.
    const segment = fc
      .oneof(fc.constantFrom("a", "v1", "expensive"), fc.stringMatching(/^[A-Za-z0-9._~-]{1,6}$/))
      .filter((s) => s !== "." && s !== "..");
    const spelling = (s: string) =>
      fc.array(fc.constantFrom("plain", "lower", "upper"), { minLength: s.length, maxLength: s.length }).map((how) =>
        [...s]
          .map((c, i) => {
            const hex = c.charCodeAt(0).toString(16).padStart(2, "0");
            return how[i] === "plain" ? c : `%${how[i] === "lower" ? hex : hex.toUpperCase()}`;
          })
          .join(""),
      );
    const equivalent = fc.array(segment, { minLength: 1, maxLength: 5 }).chain((segments) =>
      fc
        .tuple(
          fc.tuple(...segments.map(spelling)),
          fc.array(fc.constantFrom("", "/.", "/x/..", "/"), { minLength: segments.length, maxLength: segments.length }),
        )
        .map(([spelled, extra]) => ({
          canonical: `/${segments.join("/")}`,
          spelled:
            spelled
              .map((s, i) => `/${s}${extra[i]}`)
              .join("")
              .replace(/\/$/, "") || "/",
        })),
    );
    fc.assert(
      fc.property(equivalent, ({ canonical, spelled }) => {
        expect(normal(spelled).match.replace(/\/$/, "")).toBe(canonical);
        expect(costOf(spelled)).toBe(costOf(canonical));
        expect(routeOf(spelled)).toBe(routeOf(canonical));
      }),
    );
  });
});
