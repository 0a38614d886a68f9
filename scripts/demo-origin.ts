/**
 * @module A tiny demo origin for `npm start`: answers every request with JSON describing it.
 */

import { createServer, type Server } from "node:http";

/** Starts the demo origin on `host:port`; resolves once it listens. */
export function startDemoOrigin(port: number, host = "127.0.0.1"): Promise<Server> {
  const server = createServer((req, res) => {
    let bytes = 0;
    req.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
    });
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        `${JSON.stringify({ origin: "demo", method: req.method, url: req.url, bodyBytes: bytes, at: new Date().toISOString() })}\n`,
      );
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}
