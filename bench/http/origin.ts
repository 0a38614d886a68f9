/**
 * @module The bench's origin: a minimal Node HTTP server on its own thread (so the load
 * client's event loop does not slow it), answering every request `200 {"ok":true}`.
 */

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { isMainThread, parentPort, Worker } from "node:worker_threads";

export interface BenchOrigin {
  readonly url: string;
  close(): Promise<void>;
}

const BODY = Buffer.from('{"ok":true}');

function serve(): void {
  const port = parentPort;
  if (!port) throw new Error("origin.ts runs as a worker thread");
  const server = createServer((req, res) => {
    req.resume();
    req.once("end", () => {
      res.writeHead(200, { "content-type": "application/json", "content-length": BODY.length });
      res.end(BODY);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, "127.0.0.1", () => {
    port.postMessage({ port: (server.address() as AddressInfo).port });
  });
  port.on("message", () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}

/** Starts the origin thread; resolves once it listens. */
export async function startBenchOrigin(): Promise<BenchOrigin> {
  const worker = new Worker(new URL(import.meta.url));
  const { port } = await new Promise<{ port: number }>((resolve) => worker.once("message", resolve));
  return {
    url: `http://127.0.0.1:${port}`,
    async close() {
      const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
      worker.postMessage("close");
      await exited;
    },
  };
}

if (!isMainThread) serve();
