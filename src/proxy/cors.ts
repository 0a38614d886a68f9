/**
 * @module Browsers calling the proxy from other origins (docs/configuration.md, "Browsers (CORS)"):
 * which requests are preflights, and the headers a listed origin's responses get. The origin answers
 * preflights itself; the limiter only lets them through (without a key, within their own budget) and
 * makes its own answers and its rate-limit fields readable to the listed origins' scripts.
 */

import type { CorsSettings, HeaderForm } from "../config/types.ts";

/** A CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method`. It never carries the API key. */
export function isPreflight(request: Request): boolean {
  return (
    request.method === "OPTIONS" &&
    request.headers.has("origin") &&
    request.headers.has("access-control-request-method")
  );
}

/** The fields of each header form a script may read (with the retry fields, for every form). */
const EXPOSED: Readonly<Record<HeaderForm, readonly string[]>> = {
  "draft-11": ["RateLimit", "RateLimit-Policy"],
  "draft-8": ["RateLimit", "RateLimit-Policy"],
  "draft-7": ["RateLimit", "RateLimit-Policy"],
  "draft-6": ["RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"],
  legacy: ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"],
  none: [],
};

/** The fields a refusal tells a client when to retry with (src/client/result.ts, `setHeadersOf`). */
const RETRY_FIELDS = ["Retry-After", "retry-after-ms", "x-should-retry"];

/** What a listed origin's responses get: null when the request has no `Origin` or it is not listed. */
export interface CorsAnswer {
  /** `Access-Control-Allow-Origin` for the limiter's own answers: the origin, or `*`. */
  readonly allowOrigin: string;
  /** `Access-Control-Expose-Headers` to append. */
  readonly expose: string;
}

/** The CORS headers for `request`'s origin under `cors`, or null when it gets none. */
export function corsFor(request: Request, cors: CorsSettings, form: HeaderForm): CorsAnswer | null {
  const origin = request.headers.get("origin");
  if (origin === null) return null;
  if (cors.origins !== "*" && !cors.origins.has(origin)) return null;
  return { allowOrigin: cors.origins === "*" ? "*" : origin, expose: [...EXPOSED[form], ...RETRY_FIELDS].join(", ") };
}

/**
 * Adds the CORS headers to a response for a listed origin: every response exposes the rate-limit fields
 * (appended to the origin's own `Access-Control-Expose-Headers`); the limiter's own answers (`own`: its 400,
 * 401, 429, 503) also allow the origin, since the origin never saw the request. Returns the response, copied
 * first when its headers are immutable.
 */
export function withCors(response: Response, answer: CorsAnswer, own: boolean): Response {
  let r = response;
  try {
    r.headers.append("Access-Control-Expose-Headers", answer.expose);
  } catch {
    r = new Response(response.body, response);
    r.headers.append("Access-Control-Expose-Headers", answer.expose);
  }
  if (own) {
    r.headers.set("Access-Control-Allow-Origin", answer.allowOrigin);
    if (answer.allowOrigin !== "*") r.headers.append("Vary", "Origin");
  }
  return r;
}
