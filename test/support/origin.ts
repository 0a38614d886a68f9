// Reusable Node echo origin on an ephemeral 127.0.0.1 port that records every arrival. Node only: the workers
// project reaches it through test/setup/origin.ts (globalSetup), the e2e tests, the soak and `npm start` directly.
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { type LlmReport, llm, provider } from "./llm-origin.ts";

/** One request that reached the origin. */
export interface Arrival {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage["headers"];
  readonly body: string;
  /** Date.now() when the request body finished arriving. */
  readonly at: number;
}

export interface Origin {
  /** Base URL, e.g. `http://127.0.0.1:40123`. */
  readonly url: string;
  /** A URL on 127.0.0.1 whose port was bound once and then closed: nothing listens there. */
  readonly closedUrl: string;
  /** Requests seen so far, oldest first (control requests to `/__arrivals` and special paths excluded). */
  readonly arrivals: Arrival[];
  /** The fake language model's answers (`/__special/llm/<form>`), oldest first. */
  readonly reports: LlmReport[];
  close(): Promise<void>;
}

/** The echo of `/__special/digest`: what arrived, with the body reduced to its length and hash. */
export interface DigestEcho {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage["headers"];
  readonly bytes: number;
  /** Lower-case hex SHA-256 of the body. */
  readonly sha256: string;
}

/** `total` deterministic pseudo-random bytes (xorshift32 seeded with `seed`) in chunks of `chunkSize`. */
function* bytesStream(total: number, chunkSize: number, seed: number): Generator<Buffer> {
  let x = seed >>> 0 || 1;
  for (let sent = 0; sent < total; ) {
    const n = Math.min(chunkSize, total - sent);
    const chunk = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      chunk[i] = x & 0xff;
    }
    sent += n;
    yield chunk;
  }
}

/** SHA-256 (hex) of the `bytesStream(total, chunkSize, seed)` stream. */
function bytesDigest(total: number, chunkSize: number, seed: number): string {
  const hash = createHash("sha256");
  for (const chunk of bytesStream(total, chunkSize, seed)) hash.update(chunk);
  return hash.digest("hex");
}

/** Writes `chunk`, resolving once the socket accepted it (waits for `drain` under backpressure). */
function write(res: ServerResponse, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    if (res.destroyed) return reject(new Error("response destroyed"));
    if (res.write(chunk)) return resolve();
    const onDrain = () => {
      res.off("close", onClose);
      resolve();
    };
    const onClose = () => {
      res.off("drain", onDrain);
      reject(new Error("response closed"));
    };
    res.once("drain", onDrain);
    res.once("close", onClose);
  });
}

/**
 * Rendezvous between requests, keyed by a test-chosen id: counters that requests raise and
 * other requests wait on (`/__special/release`, `/__special/progress`).
 */
class Counters {
  private readonly values = new Map<string, number>();
  private readonly waiters = new Map<string, { atLeast: number; resolve: () => void }[]>();

  add(id: string, n: number): void {
    const value = (this.values.get(id) ?? 0) + n;
    this.values.set(id, value);
    const list = this.waiters.get(id) ?? [];
    const ready = list.filter((w) => w.atLeast <= value);
    this.waiters.set(
      id,
      list.filter((w) => w.atLeast > value),
    );
    for (const w of ready) w.resolve();
  }

  /** Resolves once the counter `id` reaches `atLeast`. */
  reach(id: string, atLeast: number): Promise<void> {
    if ((this.values.get(id) ?? 0) >= atLeast) return Promise.resolve();
    return new Promise((resolve) => {
      const list = this.waiters.get(id) ?? [];
      list.push({ atLeast, resolve });
      this.waiters.set(id, list);
    });
  }
}

/** Consumes the request body without keeping it. */
function drain(req: IncomingMessage): Promise<void> {
  return new Promise((resolve, reject) => {
    req.on("data", () => {});
    req.once("end", resolve);
    req.once("error", reject);
  });
}

function intParam(params: URLSearchParams, name: string, fallback: number): number {
  const v = params.get(name);
  if (v === null) return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`bad ${name}: ${v}`);
  return n;
}

/**
 * Special paths: any path containing `/__special/<name>` (so an ORIGIN with a path prefix
 * still reaches them). They are not recorded in `arrivals`.
 *
 * - `redirect?status=302&location=/x` — that status with `Location`, body `redirecting`.
 * - `status/<code>` — that status, text body `origin says <code>`, header `x-origin-status`.
 * - `bytes/<n>?chunk=65536&seed=1&length=1` — `n` pseudo-random bytes written chunk by chunk
 *   under backpressure; `x-bytes` and `x-sha256` headers announce them; `length=1` sends a
 *   `Content-Length`, else chunked.
 * - `hang` — reads the body, then never answers (until the socket closes).
 * - `drop?after=1000&length=1` — status 200 and `after` bytes of `a`, then the socket is
 *   closed mid-response; `length=1` declares `Content-Length: after * 2`, else chunked.
 * - `reset` — reads the body, then closes the connection without any response.
 * - `hop` — a 200 JSON response carrying hop-by-hop headers (`Connection: x-foo, x-bar`,
 *   `Keep-Alive`, `x-foo`, `x-bar`, `Proxy-Authenticate`, `Trailer`) and end-to-end `x-kept`
 *   and two `Set-Cookie`.
 * - `digest?id=<id>` — streams the request body through SHA-256 without buffering it and
 *   answers a `DigestEcho` (method, url, headers, byte count, hash); with `id`, every byte
 *   received raises the counter `upload:<id>` as it arrives.
 * - `progress/<id>?atLeast=<n>` — answers `{ "ok": true }` once `n` bytes of the upload
 *   `digest?id=<id>` have arrived (never, if they don't: proof that an upload streams).
 * - `gated/<id>?first=<n>` — status 200 and `n` bytes of `a`, then nothing more until
 *   `release/<id>` is requested, then `n` bytes of `z` and the end (proof that a response streams).
 * - `release/<id>` — releases `gated/<id>` (before or after it started); answers 204.
 * - `closed-port` — `{ "url": closedUrl }`, for tests inside workerd.
 * - `llm/<form>` — a fake language model answering as OpenAI chat completions (`openai-chat`), the responses API
 *   (`openai-responses`) or Anthropic messages (`anthropic`), streamed or JSON (test/support/llm-origin.ts); each
 *   answer's reported usage is recorded.
 * - `provider/<openai|anthropic>/v1/…` — the fake model at a provider's real paths, accepting only the operator's
 *   credential and answering with the provider's own rate-limit fields (test/support/llm-origin.ts, `provider`).
 * - `llm-reports?key=<key>` — those records (`LlmReport[]`), of one key's requests (`x-api-key`) or all.
 */
async function special(
  name: string,
  url: URL,
  req: IncomingMessage,
  res: ServerResponse,
  context: { closedUrl: string; counters: Counters; reports: LlmReport[] },
) {
  const json = (status: number, value: unknown, headers: Record<string, string | string[]> = {}) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(JSON.stringify(value));
  };
  const params = url.searchParams;
  if (name === "digest") {
    const hash = createHash("sha256");
    const id = params.get("id");
    let bytes = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      hash.update(chunk);
      if (id !== null) context.counters.add(`upload:${id}`, chunk.length);
    }
    const echo: DigestEcho = {
      method: req.method ?? "GET",
      url: req.url ?? "/",
      headers: req.headers,
      bytes,
      sha256: hash.digest("hex"),
    };
    return json(200, echo);
  }
  if (name.startsWith("provider/")) {
    const released = (id: string) => context.counters.reach(`release:${id}`, 1);
    return provider(name.slice("provider/".length), url, req, res, { reports: context.reports, released });
  }
  if (name.startsWith("llm/")) {
    const released = (id: string) => context.counters.reach(`release:${id}`, 1);
    return llm(name.slice("llm/".length), url, req, res, { reports: context.reports, released });
  }
  if (name === "llm-reports") {
    await drain(req);
    const key = params.get("key");
    return json(
      200,
      context.reports.filter((r) => key === null || r.key === key),
    );
  }
  await drain(req);
  if (name === "redirect") {
    res.writeHead(intParam(params, "status", 302), {
      location: params.get("location") ?? "/elsewhere",
      "content-type": "text/plain",
    });
    return res.end("redirecting");
  }
  if (name.startsWith("status/")) {
    const code = Number(name.slice("status/".length));
    res.writeHead(code, { "content-type": "text/plain", "x-origin-status": String(code) });
    return res.end(`origin says ${code}`);
  }
  if (name.startsWith("bytes/")) {
    const total = Number(name.slice("bytes/".length));
    const chunk = intParam(params, "chunk", 65536) || 65536;
    const seed = intParam(params, "seed", 1);
    const headers: Record<string, string> = {
      "content-type": "application/octet-stream",
      "x-bytes": String(total),
      "x-sha256": bytesDigest(total, chunk, seed),
    };
    if (params.get("length") === "1") headers["content-length"] = String(total);
    res.writeHead(200, headers);
    try {
      for (const c of bytesStream(total, chunk, seed)) await write(res, c);
    } catch {
      return; // the client went away
    }
    return res.end();
  }
  if (name === "hang") return; // never answers; close() or the client ends the socket
  if (name === "drop") {
    const after = intParam(params, "after", 1000);
    const headers: Record<string, string> = { "content-type": "application/octet-stream" };
    if (params.get("length") === "1") headers["content-length"] = String(after * 2);
    res.writeHead(200, headers);
    // The request body was read completely, so closing sends FIN after the data (no RST that
    // could discard what the client has not read yet): headers and `after` bytes always arrive.
    res.write(Buffer.alloc(after, 0x61), () => res.socket?.destroy());
    return;
  }
  if (name === "reset") {
    req.socket.destroy(); // no response at all
    return;
  }
  if (name === "hop") {
    return json(
      200,
      { hop: true },
      {
        connection: "x-foo, x-bar",
        "keep-alive": "timeout=5",
        "x-foo": "1",
        "x-bar": "2",
        "proxy-authenticate": 'Basic realm="origin"',
        trailer: "x-trailer",
        "x-kept": "yes",
        "set-cookie": ["a=1; Path=/", "b=2; Path=/"],
      },
    );
  }
  if (name.startsWith("progress/")) {
    await context.counters.reach(`upload:${name.slice("progress/".length)}`, intParam(params, "atLeast", 1));
    return json(200, { ok: true });
  }
  if (name.startsWith("gated/")) {
    const first = intParam(params, "first", 1000);
    res.writeHead(200, { "content-type": "application/octet-stream" });
    try {
      await write(res, Buffer.alloc(first, 0x61));
      await context.counters.reach(`release:${name.slice("gated/".length)}`, 1);
      await write(res, Buffer.alloc(first, 0x7a));
    } catch {
      return; // the client went away
    }
    return res.end();
  }
  if (name.startsWith("release/")) {
    context.counters.add(`release:${name.slice("release/".length)}`, 1);
    res.writeHead(204);
    return res.end();
  }
  if (name === "closed-port") return json(200, { url: context.closedUrl });
  return json(404, { error: `no special path ${name}` });
}

/** Binds port 0 on 127.0.0.1, reads the port, closes it: a port where nothing listens. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve, reject) => {
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/**
 * Starts the echo origin. Any request is answered 200 with a JSON echo of method, url, headers
 * and body. Control endpoints, usable from inside workerd: `GET /__arrivals` returns the
 * recorded arrivals as JSON, `DELETE /__arrivals` clears them. Paths containing `/__special/`
 * behave as described at `special` above. `maxHeaderSize`: the largest request head accepted (default 16 KiB).
 */
export async function startOrigin(options: { maxHeaderSize?: number } = {}): Promise<Origin> {
  const arrivals: Arrival[] = [];
  const closedUrl = `http://127.0.0.1:${await closedPort()}`;
  const sockets = new Set<Socket>();
  const counters = new Counters();
  const reports: LlmReport[] = [];
  // Node's default head limit is 16 KiB (beyond it: its own 431); `maxHeaderSize` raises it.
  const limits = options.maxHeaderSize === undefined ? {} : { maxHeaderSize: options.maxHeaderSize };
  const server = createServer(limits, (req, res) => {
    // Concatenated, not resolved: a target like "///" is a valid path, but as a relative reference an empty host.
    const url = new URL(`http://origin.invalid${req.url ?? "/"}`);
    const at = url.pathname.indexOf("/__special/");
    if (at >= 0) {
      special(url.pathname.slice(at + "/__special/".length), url, req, res, { closedUrl, counters, reports }).catch(
        (e: unknown) => {
          if (!res.headersSent) {
            res.writeHead(500, { "content-type": "text/plain" });
            res.end(String(e));
          } else res.destroy();
        },
      );
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const json = (status: number, value: unknown) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(value));
      };
      if (req.url === "/__arrivals") {
        if (req.method === "DELETE") arrivals.length = 0;
        return json(200, arrivals);
      }
      const arrival: Arrival = {
        method: req.method ?? "GET",
        url: req.url ?? "/",
        headers: req.headers,
        body,
        at: Date.now(),
      };
      arrivals.push(arrival);
      return json(200, arrival);
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  // WebSocket handshakes: recorded as arrivals, then an echo socket (see {@link echoWebSocket}).
  server.on("upgrade", (req: IncomingMessage, socket: Socket) => {
    arrivals.push({ method: req.method ?? "GET", url: req.url ?? "/", headers: req.headers, body: "", at: Date.now() });
    echoWebSocket(req, socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    closedUrl,
    arrivals,
    reports,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        // Hanging and keep-alive connections would otherwise hold close() open.
        server.closeAllConnections();
        for (const socket of sockets) socket.destroy();
      }),
  };
}

/**
 * A WebSocket echo for the proxy's tests (RFC 6455, small frames only): answers the handshake, greets with a
 * text frame `hello <path>`, then sends every text frame back as it came and closes when the client closes.
 */
function echoWebSocket(req: IncomingMessage, socket: Socket): void {
  const key = req.headers["sec-websocket-key"];
  if (req.headers.upgrade?.toLowerCase() !== "websocket" || typeof key !== "string") {
    socket.end("HTTP/1.1 400 Bad Request\r\n\r\n");
    return;
  }
  const accept = createHash("sha1").update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest("base64");
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\nx-origin: echo\r\n\r\n`,
  );
  const frame = (opcode: number, payload: Buffer) =>
    Buffer.concat([Buffer.from([0x80 | opcode, payload.length]), payload]);
  socket.write(frame(0x1, Buffer.from(`hello ${req.url ?? "/"}`)));
  let pending = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    // Client frames are masked: FIN/opcode, MASK|length (< 126 here), 4 mask bytes, payload.
    while (pending.length >= 6) {
      const opcode = (pending[0] as number) & 0x0f;
      const length = (pending[1] as number) & 0x7f;
      if (length >= 126 || pending.length < 6 + length) return;
      const mask = pending.subarray(2, 6);
      const payload = Buffer.from(
        pending.subarray(6, 6 + length).map((b: number, i: number) => b ^ (mask[i % 4] as number)),
      );
      pending = pending.subarray(6 + length);
      if (opcode === 0x8) {
        socket.end(frame(0x8, payload));
        return;
      }
      if (opcode === 0x1) socket.write(frame(0x1, payload));
    }
  });
  socket.on("error", () => socket.destroy());
}
