// Reusable Node echo origin on an ephemeral 127.0.0.1 port that records every arrival.
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

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
  /** Requests seen so far, oldest first (control requests to `/__arrivals` excluded). */
  readonly arrivals: Arrival[];
  close(): Promise<void>;
}

/**
 * Starts the echo origin. Any request is answered 200 with a JSON echo of method, url, headers
 * and body. Control endpoints, usable from inside workerd: `GET /__arrivals` returns the
 * recorded arrivals as JSON, `DELETE /__arrivals` clears them.
 */
export async function startOrigin(): Promise<Origin> {
  const arrivals: Arrival[] = [];
  const server = createServer((req, res) => {
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
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}
