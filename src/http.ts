/**
 * @module HTTP at the edge: problem-details errors, RateLimit headers
 * (draft-ietf-httpapi-ratelimit-headers-11) and the streaming proxy to the origin.
 */

import type { Config, Plan } from "./config.ts";

/** An error that is an HTTP response: thrown inside the Worker, turned into JSON at the edge. */
export class HttpError extends Error {
  readonly status: number;
  readonly title: string;
  readonly headers: Record<string, string>;
  readonly extra: Record<string, unknown>;

  constructor(
    status: number,
    title: string,
    detail: string,
    options: { headers?: Record<string, string>; extra?: Record<string, unknown> } = {},
  ) {
    super(detail);
    this.status = status;
    this.title = title;
    this.headers = options.headers ?? {};
    this.extra = options.extra ?? {};
  }

  /** An RFC 9457 problem-details response; never a stack trace. */
  toResponse(): Response {
    return problem(this.status, this.title, this.message, this.extra, this.headers);
  }
}

/** A JSON problem-details response (RFC 9457). */
export function problem(
  status: number,
  title: string,
  detail: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Response {
  const body = JSON.stringify({ type: "about:blank", title, status, detail, ...extra });
  return new Response(body, {
    status,
    headers: { "content-type": "application/problem+json", "cache-control": "no-store", ...headers },
  });
}

/** One limit's state for the `RateLimit` field. */
export interface LimitState {
  readonly remaining: number;
  readonly resetMs: number;
}

/** Whole seconds, rounded up (Retry-After, `t`). */
export function seconds(ms: number): number {
  return Math.max(0, Math.ceil(ms / 1000));
}

/** Serialises a structured-field string (RFC 9651 §4.1.6). */
export function sfString(s: string): string {
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/** What the headers of a plan need, built once per plan. */
interface PlanHeaders {
  /** Each limit's name as a structured-field string. */
  readonly names: readonly string[];
  /** `"per-second";q=100;w=1, "per-minute";q=1000;w=60` (draft-ietf-httpapi-ratelimit-headers). */
  readonly policy: string;
}

const planHeaders = new WeakMap<Plan, PlanHeaders>();

function headersFor(plan: Plan): PlanHeaders {
  let h = planHeaders.get(plan);
  if (!h) {
    const limits = plan.limits ?? [];
    const names = limits.map((l) => sfString(l.name));
    const policy = limits.map((l, i) => `${names[i]};q=${l.limit};w=${Math.ceil(l.windowMs / 1000)}`).join(", ");
    h = { names, policy };
    planHeaders.set(plan, h);
  }
  return h;
}

/** The `RateLimit-Policy` field value of a plan (empty when unlimited). */
export function policyHeader(plan: Plan): string {
  return headersFor(plan).policy;
}

/** `"per-second";r=42;t=1, …` — `t` omitted for a limit with nothing in its window; a null state is left out. */
export function rateLimitHeader(plan: Plan, states: readonly (LimitState | null)[]): string {
  const { names } = headersFor(plan);
  let out = "";
  for (let i = 0; i < names.length; i++) {
    const s = states[i];
    if (!s) continue;
    out += `${out ? ", " : ""}${names[i]};r=${s.remaining}${s.resetMs > 0 ? `;t=${seconds(s.resetMs)}` : ""}`;
  }
  return out;
}

/** Adds `RateLimit-Policy` and `RateLimit` to a header set. */
export function setRateLimitHeaders(headers: Headers, plan: Plan, states: readonly (LimitState | null)[]): void {
  if (!plan.limits) return;
  headers.set("RateLimit-Policy", policyHeader(plan));
  const value = rateLimitHeader(plan, states);
  if (value) headers.set("RateLimit", value);
}

/** The `429` for a request over a limit. `retryAfterMs` is exact; `Infinity` means never. */
export function tooManyRequests(
  plan: Plan,
  states: readonly (LimitState | null)[],
  violated: readonly string[],
  retryAfterMs: number,
  detail?: string,
): Response {
  const never = !Number.isFinite(retryAfterMs);
  const headers = new Headers({ "content-type": "application/problem+json", "cache-control": "no-store" });
  setRateLimitHeaders(headers, plan, states);
  if (!never) headers.set("Retry-After", String(seconds(retryAfterMs)));
  const body = {
    type: "about:blank",
    title: "Too Many Requests",
    status: 429,
    detail:
      detail ??
      (never
        ? `This request costs more than the ${violated.join(", ")} limit allows; it can never pass.`
        : `Rate limit exceeded (${violated.join(", ")}); retry after ${seconds(retryAfterMs)} s.`),
    violated_policies: violated,
    retry_after: never ? null : seconds(retryAfterMs),
    retry_after_ms: never ? null : retryAfterMs,
  };
  return new Response(JSON.stringify(body), { status: 429, headers });
}

/** Hop-by-hop headers (RFC 9110 §7.6.1): never forwarded in either direction. */
const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

function dropHopByHop(headers: Headers): void {
  const listed = headers.get("connection");
  if (listed) for (const name of listed.split(",")) headers.delete(name.trim());
  for (const name of HOP_BY_HOP) headers.delete(name);
}

/** Where allowed requests go: a service binding when present, else the public fetch. */
export type OriginFetcher = (request: Request) => Promise<Response>;

/**
 * Sends the request to ORIGIN + path + query, bodies streamed both ways, redirects passed
 * back. Resolves (never rejects for origin failures) to a problem-details `502` when the origin
 * cannot be reached or drops the connection before its response headers, or `504` when it
 * sends no response headers within the timeout — returned rather than thrown, so the caller
 * adds `RateLimit` headers to them like to any response that spent quota. A connection dropped
 * after the headers can no longer become a `502`: the client's read of the body fails instead.
 * `incoming` is `request.url` parsed, when the caller already has it.
 */
export async function proxy(
  request: Request,
  config: Config,
  send: OriginFetcher,
  incoming: URL = new URL(request.url),
): Promise<Response> {
  const target = new URL(config.origin);
  target.pathname = joinPath(config.origin.pathname, incoming.pathname);
  target.search = incoming.search;

  const headers = new Headers(request.headers);
  dropHopByHop(headers);
  headers.delete("host");
  const clientIp = request.headers.get("cf-connecting-ip");
  if (clientIp) {
    const prior = request.headers.get("x-forwarded-for");
    headers.set("x-forwarded-for", prior ? `${prior}, ${clientIp}` : clientIp);
  }
  headers.set("x-forwarded-proto", incoming.protocol.replace(":", ""));
  headers.set("x-forwarded-host", incoming.host);

  const abort = new AbortController();
  let timer: ReturnType<typeof setTimeout> | null = null;
  // The signal asks the fetch to give up; the race makes the timeout hold even when the
  // fetcher (an ORIGIN_SERVICE binding's Worker, a test double) ignores the signal.
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      abort.abort();
      reject(abort.signal.reason);
    }, config.originTimeoutMs);
  });
  let response: Response;
  try {
    const outgoing = new Request(target, {
      method: request.method,
      headers,
      body: request.body,
      redirect: "manual",
      signal: abort.signal,
    });
    response = await Promise.race([send(outgoing), timeout]);
  } catch (e) {
    if (abort.signal.aborted) {
      return problem(504, "Gateway Timeout", `The origin sent no response within ${config.originTimeoutMs} ms.`);
    }
    // workerd's messages end with a period ("Network connection lost."): don't double it.
    const reason = errorName(e).replace(/\.+$/, "");
    return problem(502, "Bad Gateway", `The origin could not be reached: ${reason}.`);
  } finally {
    if (timer !== null) clearTimeout(timer);
  }
  const out = new Response(response.body, response);
  dropHopByHop(out.headers);
  return out;
}

/** ORIGIN's own path prefix joined with the request path: `/api` + `/v1/x` → `/api/v1/x`. */
function joinPath(base: string, path: string): string {
  if (base === "/" || base === "") return path;
  return base.replace(/\/+$/, "") + path;
}

/** A short, safe description of an error for a response or a log line: no stack. */
export function errorName(e: unknown): string {
  if (e instanceof Error) return e.message.split("\n")[0]?.slice(0, 200) || e.name;
  return "unknown error";
}
