/**
 * @module Closed-loop load on one key over real HTTP, as the e2e tests send it: every request carries
 * a unique `id` the origin records, so the window judge (./window.ts) can match what was sent to
 * what arrived. Node only.
 */
import type { Origin } from "./origin.ts";
import type { ArrivedAt } from "./window.ts";

/** One request as the client saw it. */
export interface Sent {
  readonly id: number;
  /** Date.now() before the request was sent. */
  readonly sentAt: number;
  /** Date.now() after its body was read. */
  readonly receivedAt: number;
  readonly status: number;
}

let nextId = 0;

/** One GET on key `k` (`x-api-key`) to `url`, with an id unique in this process. */
export async function send(url: string, k: string): Promise<Sent> {
  const id = nextId++;
  const sentAt = Date.now();
  const r = await fetch(`${url}/load?id=${id}`, { headers: { "x-api-key": k } });
  await r.arrayBuffer();
  return { id, sentAt, receivedAt: Date.now(), status: r.status };
}

/** `clients` concurrent loops per URL, each sending on `k` one request after another for `durationMs`. */
export async function load(urls: readonly string[], k: string, clients: number, durationMs: number): Promise<Sent[]> {
  const sent: Sent[] = [];
  const end = Date.now() + durationMs;
  const client = async (url: string) => {
    while (Date.now() < end) sent.push(await send(url, k));
  };
  await Promise.all(urls.flatMap((url) => Array.from({ length: clients }, () => client(url))));
  return sent;
}

/** `perUrl` requests on `k` to every URL, all at once. */
export function burst(urls: readonly string[], k: string, perUrl: number): Promise<Sent[]> {
  return Promise.all(urls.flatMap((url) => Array.from({ length: perUrl }, () => send(url, k))));
}

/** The requests on key `k` that reached `origin`, by the id {@link send} gave them. */
export function arrivalsOf(origin: Origin, k: string): ArrivedAt[] {
  return origin.arrivals
    .filter((a) => a.headers["x-api-key"] === k)
    .map((a) => ({ id: Number(new URL(a.url, "http://x").searchParams.get("id")), at: a.at }));
}

/** How many of `sent` were granted. */
export const granted = (sent: readonly Sent[]): number => sent.filter((s) => s.status === 200).length;
