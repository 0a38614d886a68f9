/**
 * @module When a response has ended (docs/configuration.md, "Concurrency"): its body streamed to the end, failed,
 * or cancelled by a client that went away — or, for a WebSocket, the socket closed. A request's concurrency slot is
 * freed then. A WebSocket is relayed by the Worker to see it close: the Worker stays in the path while it is open.
 */

import type { Background } from "../protocol.ts";

/** workerd's socket as this module uses it (typed structurally: the unit tests compile with Node's types). */
export interface Socket {
  accept(): void;
  send(data: unknown): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: string, listener: (event: { data?: unknown; code?: number; reason?: string }) => void): void;
}

/**
 * `response` as it should be sent, calling `onEnd` once when it has ended. Its body is passed on unchanged through
 * a stream whose end, error or cancellation calls `onEnd`; a response without a body ends at once; a `101` with a
 * socket is relayed (see {@link relay}). `bg.waitUntil` keeps `onEnd`'s work alive after the response.
 */
export function untilEnd(response: Response, onEnd: () => Promise<unknown>, bg: Background): Response {
  let ended: Promise<unknown> | null = null;
  const end = (): Promise<unknown> => {
    ended ??= onEnd().catch(() => {});
    return ended;
  };
  const socket = (response as { webSocket?: Socket | null }).webSocket;
  if (socket) return relay(response, socket, end, bg);
  // Each promise is made before it is handed to `waitUntil`: `bg.waitUntil?.(end())` would not call `end` without one.
  if (response.body === null) {
    const done = end();
    bg.waitUntil?.(done);
    return response;
  }
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  // pipeTo settles when the body has been read to the end, when the origin's stream fails, or when the client's
  // side is cancelled (it went away): each ends the request.
  const piped = response.body
    .pipeTo(writable)
    .catch(() => {})
    .then(end);
  bg.waitUntil?.(piped);
  return new Response(readable, response);
}

/** Close codes a socket may not send (RFC 6455 §7.4.1): reported only. */
const RESERVED = new Set([1004, 1005, 1006, 1015]);

/**
 * A `101` whose socket the Worker relays: the client gets a new socket whose frames go to the origin's and back
 * ({@link join}); when either closes, `end` is called.
 */
function relay(response: Response, origin: Socket, end: () => Promise<unknown>, bg: Background): Response {
  const Pair = (globalThis as unknown as { WebSocketPair: new () => Record<0 | 1, Socket> }).WebSocketPair;
  const pair = new Pair();
  const server = pair[1];
  origin.accept();
  server.accept();
  join(server, origin, () => {
    const done = end();
    bg.waitUntil?.(done);
  });
  return new Response(null, { status: 101, headers: response.headers, webSocket: pair[0] } as ResponseInit);
}

/**
 * Joins two accepted sockets: each one's messages are sent on the other while both are open; the first close (or
 * error) on either closes the other — with its code, or 1000 for one a socket may not send, 1011 for an error —
 * after which nothing more is relayed. `closed` is called on every close or error seen.
 */
export function join(a: Socket, b: Socket, closed: () => void): void {
  let open = true;
  const link = (from: Socket, to: Socket) => {
    from.addEventListener("message", (e) => {
      if (open) to.send(e.data);
    });
    const close = (e: { code?: number; reason?: string }) => {
      if (open) {
        open = false;
        const code = e.code === undefined || RESERVED.has(e.code) ? 1000 : e.code;
        try {
          to.close(code, e.reason ?? "");
        } catch {
          // already closing
        }
      }
      closed();
    };
    from.addEventListener("close", close);
    from.addEventListener("error", () => close({ code: 1011, reason: "relay error" }));
  };
  link(a, b);
  link(b, a);
}
