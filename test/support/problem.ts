/**
 * @module The one assertion for the limiter's own error answers (RFC 9457 problem details, src/pipeline/http.ts).
 * Runtime-neutral (checked by both tsconfigs): integration tests call it inside workerd, e2e tests in Node.
 */

import { expect } from "vitest";

/** A problem-details body as the limiter sends it. */
export interface Problem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  /** A 429's reason: `over_limit`, `cached_denial`, `blocked`, `penalty`, `too_costly`. */
  readonly reason?: string;
  readonly violated_policies?: string[];
  /** The route whose budget applied (docs/configuration.md, "Per-route budgets"). */
  readonly route?: string;
  readonly retry_after?: number | null;
  readonly retry_after_ms?: number | null;
  readonly [member: string]: unknown;
}

/** The members the limiter ever puts in a problem body; anything else is a leak or a change to review. */
const MEMBERS = new Set([
  "type",
  "title",
  "status",
  "detail",
  "reason",
  "violated_policies",
  "route",
  "retry_after",
  "retry_after_ms",
  // A refusal for want of credits (docs/http.md): the key's balance and the request's cost.
  "balance",
  "cost",
  // A signed key's refusal (docs/http.md): which check it failed.
  "code",
]);

/**
 * What must never appear in a body sent to a client: a stack frame (`\n    at f (file:1:2)` or
 * `at file:1:2`), a source location (`x.ts:12`), an error's `Name:` prefix, a serialised `stack`,
 * or the runtime's internals (`kj/` paths, the word workerd).
 */
const LEAK = /\n\s*at |\bat \S+ \(|\bat \S+:\d+:\d+|\.(?:[cm]?js|ts):\d|\b\w*Error:|"stack"|\bkj\/|workerd/;

/** The parts of a response the check reads; `problemOfParts` takes them from any HTTP client. */
export interface ResponseParts {
  readonly status: number | null;
  readonly contentType: string | null | undefined;
  readonly cacheControl: string | null | undefined;
  readonly text: string;
}

/**
 * Asserts the limiter's own problem answer with HTTP status `status`: `application/problem+json`,
 * `no-store`, a JSON object with `type: "about:blank"`, a non-empty `title`, `status` equal to the
 * HTTP status, a string `detail`, no member the limiter does not send, and nothing that looks
 * like a stack trace or the runtime's internals. Returns the body.
 */
export function problemOfParts(parts: ResponseParts, status: number): Problem {
  expect(parts.status).toBe(status);
  expect(parts.contentType).toBe("application/problem+json");
  expect(parts.cacheControl).toBe("no-store");
  expect(parts.text).not.toMatch(LEAK);
  const body = JSON.parse(parts.text) as Problem;
  expect(body).toMatchObject({ type: "about:blank", status });
  expect(typeof body.title === "string" && body.title.length > 0).toBe(true);
  expect(typeof body.detail).toBe("string");
  expect(Object.keys(body).filter((m) => !MEMBERS.has(m))).toEqual([]);
  return body;
}

/** `problemOfParts` for a fetch `Response` (reads its body). */
export async function problemOf(response: Response, status: number): Promise<Problem> {
  return problemOfParts(
    {
      status: response.status,
      contentType: response.headers.get("content-type"),
      cacheControl: response.headers.get("cache-control"),
      text: await response.text(),
    },
    status,
  );
}
