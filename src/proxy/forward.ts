/**
 * @module The streaming proxy to the origin: its URL + path + query, hop-by-hop headers dropped, the gateway's
 * headers set (src/proxy/upstream.ts),
 * redirects passed back, WebSocket handshakes proxied as such, a deadline that holds even when the
 * fetcher ignores its abort signal.
 */

import { errorName, withDeadline } from "../client/policy.ts";
import { HOP_BY_HOP } from "../config/types.ts";
import { clientSignal, isWebSocketUpgrade, problem } from "../pipeline/http.ts";
import { gatewayLocation, type Outgoing, setGatewayHeaders, targetUrl } from "./upstream.ts";

function dropHopByHop(headers: Headers): void {
  const listed = headers.get("connection");
  if (listed) for (const name of listed.split(",")) headers.delete(name.trim());
  for (const name of HOP_BY_HOP) headers.delete(name);
}

/** Where allowed requests go: a service binding when present, else the public fetch. */
export type OriginFetcher = (request: Request) => Promise<Response>;

/** What {@link forward} sends a request with, beside the request itself: where and as whom, by what, how long. */
export interface Forwarding extends Outgoing {
  readonly send: OriginFetcher;
  readonly timeoutMs: number;
}

/**
 * Sends the request to its origin (its URL + the path past the origin's prefix + query), bodies streamed both ways,
 * redirects passed back. Resolves (never rejects for origin failures) to a problem-details `502` when the origin
 * cannot be reached or drops the connection before its response headers, or `504` when it sends no response headers
 * within the timeout — returned rather than thrown, so the caller adds `RateLimit` headers to them like to any
 * response that spent quota. A connection dropped after the headers can no longer become a `502`: the client's read
 * of the body fails instead.
 */
export async function forward(request: Request, f: Forwarding): Promise<Response> {
  const { send, incoming } = f;
  const url = targetUrl(f);

  const headers = new Headers(request.headers);
  dropHopByHop(headers);
  headers.delete("host");
  // The one hop-by-hop field that must go on, for a handshake only: workerd's fetch opens a WebSocket (a GET, its
  // body dropped) whatever the method when it carries it. The origin's `101` comes back with its socket.
  if (isWebSocketUpgrade(request)) headers.set("upgrade", "websocket");
  const clientIp = request.headers.get("cf-connecting-ip");
  if (clientIp) {
    const prior = request.headers.get("x-forwarded-for");
    headers.set("x-forwarded-for", prior ? `${prior}, ${clientIp}` : clientIp);
  }
  headers.set("x-forwarded-proto", incoming.protocol.replace(":", ""));
  headers.set("x-forwarded-host", incoming.host);
  setGatewayHeaders(headers, f);

  const abort = new AbortController();
  // The client's cancellation (workerd's `request.signal`, compatibility flag `enable_request_signal`) stops the
  // origin's request too: its response, and the request's concurrency slot, end when the client goes away.
  const left = clientSignal(request);
  let response: Response;
  try {
    const outgoing = new Request(url, {
      method: request.method,
      headers,
      // A GET or HEAD here carries no body (the app refused one): drop an empty one too.
      body: request.method === "GET" || request.method === "HEAD" ? null : request.body,
      redirect: "manual",
      signal: left ? AbortSignal.any([abort.signal, left]) : abort.signal,
    });
    // The signal asks the fetch to give up; the deadline holds even when the fetcher (an
    // ORIGIN_SERVICE binding's Worker, a test double) ignores the signal.
    response = await withDeadline(send(outgoing), f.timeoutMs, () => {
      abort.abort();
      return abort.signal.reason;
    });
  } catch (e) {
    if (left?.aborted) return problem(499, "Client Closed Request", "The client went away before the origin answered.");
    if (abort.signal.aborted) {
      return problem(504, "Gateway Timeout", `The origin sent no response within ${f.timeoutMs} ms.`);
    }
    // workerd's messages end with a period ("Network connection lost."): don't double it.
    const reason = errorName(e).replace(/\.+$/, "");
    return problem(502, "Bad Gateway", `The origin could not be reached: ${reason}.`);
  }
  // workerd's Response carries the socket of a 101 (typed structurally: the unit tests compile this file with Node's
  // Response, which has no webSocket).
  const webSocket = (response as { webSocket?: unknown }).webSocket;
  if (webSocket) {
    const init = { status: 101, webSocket, headers: response.headers };
    const upgraded = new Response(null, init as ResponseInit);
    dropHopByHop(upgraded.headers);
    return upgraded;
  }
  const out = new Response(response.body, response);
  dropHopByHop(out.headers);
  const location = out.headers.get("location");
  if (location !== null) {
    const back = gatewayLocation(location, f);
    if (back === null) {
      response.body?.cancel().catch(() => {});
      return problem(502, "Bad Gateway", "The origin redirected outside the paths this gateway serves.");
    }
    if (back !== location) out.headers.set("location", back);
  }
  return out;
}
