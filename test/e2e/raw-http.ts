/**
 * @module Raw HTTP/1.1 over `node:net`, for requests Node's fetch refuses to send: non-UTF-8 or
 * control bytes in a header, a header given twice, methods fetch does not know, huge headers.
 */

import { connect } from "node:net";
import type { ResponseParts } from "../support/problem.ts";

/** What came back on the socket. `status` is null when the connection ended before a status line. */
export interface RawResponse {
  readonly status: number | null;
  /** The status line as sent, e.g. `HTTP/1.1 400 Bad Request`. */
  readonly statusLine: string;
  /** Header names lower-cased; repeated headers joined with `, `. */
  readonly headers: Record<string, string>;
  /** The body, de-chunked when `transfer-encoding: chunked`. */
  readonly body: Buffer;
  /** Everything the server sent, as received. */
  readonly raw: Buffer;
  /** A socket error (e.g. `ECONNRESET`), if the connection failed. */
  readonly error: string | null;
}

/** What test/support/problem.ts reads from a response. */
export function partsOf(r: RawResponse): ResponseParts {
  return {
    status: r.status,
    contentType: r.headers["content-type"],
    cacheControl: r.headers["cache-control"],
    text: r.body.toString("utf8"),
  };
}

/** One header line; a Buffer value is sent as it is (any bytes). */
export type Header = [name: string, value: string | Buffer];

/** `s` as Latin-1 bytes: one byte per code point below 256. */
export const latin1 = (s: string): Buffer => Buffer.from(s, "latin1");

/** Builds an HTTP/1.1 request byte for byte; header values may be Buffers (any bytes, sent as they are). */
export function rawRequest(method: string, target: string, headers: readonly Header[], body?: Buffer): Buffer {
  const parts: Buffer[] = [Buffer.from(`${method} ${target} HTTP/1.1\r\n`, "latin1")];
  for (const [name, value] of headers) {
    parts.push(Buffer.from(`${name}: `, "latin1"), typeof value === "string" ? Buffer.from(value, "latin1") : value);
    parts.push(Buffer.from("\r\n", "latin1"));
  }
  parts.push(Buffer.from("\r\n", "latin1"));
  if (body) parts.push(body);
  return Buffer.concat(parts);
}

/**
 * Writes `request` to `host:port` and reads until the server closes the connection (send
 * `Connection: close`) or `timeoutMs` passes (a guard against a hung test, not a wait).
 */
export function sendRaw(port: number, request: Buffer, timeoutMs = 30_000, host = "127.0.0.1"): Promise<RawResponse> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let error: string | null = null;
    const socket = connect({ host, port });
    socket.setTimeout(timeoutMs, () => {
      error = "timeout";
      socket.destroy();
    });
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", (e: NodeJS.ErrnoException) => {
      error = e.code ?? e.message;
    });
    socket.on("close", () => resolve(parse(Buffer.concat(chunks), error)));
    socket.on("connect", () => socket.end(request));
  });
}

function parse(raw: Buffer, error: string | null): RawResponse {
  const end = raw.indexOf("\r\n\r\n");
  if (end < 0) return { status: null, statusLine: "", headers: {}, body: Buffer.alloc(0), raw, error };
  const [statusLine = "", ...lines] = raw.subarray(0, end).toString("latin1").split("\r\n");
  const m = /^HTTP\/\d\.\d (\d{3})/.exec(statusLine);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(":");
    const name = line.slice(0, i).trim().toLowerCase();
    const value = line.slice(i + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  let body = raw.subarray(end + 4);
  if (headers["transfer-encoding"]?.toLowerCase() === "chunked") body = dechunk(body);
  return { status: m ? Number(m[1]) : null, statusLine, headers, body, raw, error };
}

function dechunk(data: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  while (at < data.length) {
    const lineEnd = data.indexOf("\r\n", at);
    if (lineEnd < 0) break;
    const size = Number.parseInt(data.subarray(at, lineEnd).toString("latin1"), 16);
    if (!Number.isFinite(size) || size === 0) break;
    out.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(out);
}

/**
 * One request to `127.0.0.1:port` on its own connection, written byte for byte: `Host` and
 * `Connection: close` first, then `headers`, and `Content-Length` when there is a body.
 */
export function rawTo(port: number, method: string, target: string, headers: readonly Header[], body?: Buffer) {
  const all: Header[] = [["host", `127.0.0.1:${port}`], ["connection", "close"], ...headers];
  if (body) all.push(["content-length", String(body.length)]);
  return sendRaw(port, rawRequest(method, target, all, body));
}
