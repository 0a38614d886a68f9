/**
 * @module A granted request's reservation settled to what its response reports (docs/llm.md): the origin's body goes
 * to the client chunk for chunk, each chunk passed on before it is read for its usage (src/pipeline/usage-report.ts),
 * and when the body ends the grant is settled to the reported cost, in the background. A body that reports nothing,
 * or nothing readable, or is cut short, or a client that leaves before the usage was reported: the reservation
 * stands, and a `reservation_kept` line says why. A client that leaves cancels the origin's body (and its request).
 */

import { keyId, logEvent } from "../base/log.ts";
import type { Background } from "../client/index.ts";
import type { RateLimitResult } from "../client/result.ts";
import type { Settle } from "../config/types.ts";
import { type Report, usageReader } from "../pipeline/usage-report.ts";

/** How a body ended: read to its end, failed (the origin cut it short), or cancelled (the client went away). */
export type Ending = "complete" | "cut_short" | "client_left";

/** What settling one response needs. */
export interface Settling {
  /** Where the actual cost is read from (the matching `costs` rule's `settle`). */
  readonly settle: Settle;
  /** The grant to settle. */
  readonly result: RateLimitResult;
  /** Settles the grant to `actual` units (the pipeline's `settle`). */
  readonly settleTo: (actual: number) => Promise<unknown>;
  /** The runtime's `waitUntil`: the settlement outlives the response. */
  readonly bg: Background;
  /**
   * The client's signal (`request.signal`): aborted when it went away, which cancels the origin's request
   * (src/proxy/forward.ts) — a body failing then ended because the client left, not because the origin cut it.
   */
  readonly left?: AbortSignal | null;
}

/**
 * What a body that ended `how` settles to: the whole body's report when it was read to its end; else the usage it had
 * already reported in full, or none.
 */
export function reportAt(how: Ending, whole: () => Report, reported: number | null): Report {
  if (how === "complete") return whole();
  if (reported !== null) return { actual: reported };
  return {
    none: how,
    detail:
      how === "client_left"
        ? "the client went away before the usage was reported"
        : "the origin's body ended before the usage was reported",
  };
}

/**
 * `response` with its body passed through to be read for its usage; when the body ends, the grant is settled to it
 * (or its reservation kept, logged) in `s.bg.waitUntil`.
 */
export function settledResponse(response: Response, s: Settling): Response {
  const usage = usageReader(s.settle, response.headers);
  let ended = false;
  const end = (how: Ending) => {
    if (ended) return;
    ended = true;
    let report: Report;
    try {
      report = reportAt(how, () => usage.end(), usage.reported());
    } catch {
      report = { none: "unreadable", detail: "the usage could not be read" };
    }
    const done = "actual" in report ? s.settleTo(report.actual).catch(() => {}) : kept(s.result, report);
    s.bg.waitUntil?.(done);
  };
  if (response.body === null) {
    // No body (a HEAD, a 204): what a header reported, else nothing was — not a body that could not be read.
    const reported = usage.reported();
    const done =
      reported === null
        ? kept(s.result, { none: "no_usage", detail: "the response has no body" })
        : s.settleTo(reported).catch(() => {});
    s.bg.waitUntil?.(done);
    return response;
  }
  const left = s.left ?? null;
  if (left !== null && isEventStream(response)) return teed(response, response.body, { left, usage, end, bg: s.bg });
  const source = response.body.getReader();
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let read: Awaited<ReturnType<typeof source.read>>;
        try {
          read = await source.read();
        } catch (e) {
          end(s.left?.aborted ? "client_left" : "cut_short");
          controller.error(e);
          return;
        }
        if (read.done) {
          end("complete");
          controller.close();
          return;
        }
        // Passed on first: reading it for its usage never holds it back.
        controller.enqueue(read.value);
        try {
          usage.push(read.value);
        } catch {
          // A fault in reading the usage never stops the body: it reports nothing then.
        }
      },
      cancel(reason) {
        end("client_left");
        return source.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
  return new Response(body, response);
}

/** Whether `response` is a server-sent event stream (a model's tokens as they come). */
function isEventStream(response: Response): boolean {
  return /^text\/event-stream\b/i.test(response.headers.get("content-type") ?? "");
}

/** What {@link teed} reads a stream's copy with. */
interface Teeing {
  /** The client's signal: when it aborts, the origin's request is cancelled (src/proxy/forward.ts) and so the copy. */
  readonly left: AbortSignal;
  readonly usage: { push(chunk: Uint8Array): void };
  readonly end: (how: Ending) => void;
  readonly bg: Background;
}

/**
 * An event stream passed on by the runtime itself, no JavaScript between the origin's chunks and the client (a tee's
 * first branch), while its copy is read for the usage in the background (`bg.waitUntil`): no delay added to a token.
 * Only with the client's signal, which cancels the origin's request when the client leaves (a tee's branch cancelled
 * alone would not); and only for event streams, whose tokens come slower than a client reads them, so the client's
 * branch holds next to nothing (a slow client on a large body would make it hold the body).
 */
function teed(response: Response, source: ReadableStream<Uint8Array>, t: Teeing): Response {
  const [body, copy] = source.tee();
  const reader = copy.getReader();
  // The client's branch goes on through a pipe the runtime runs (still no JavaScript per chunk), so that its leaving is
  // seen: workerd cancels the body of a response whose client went away (a reset, or a write to a closed connection)
  // but does not abort `request.signal` once the response has been returned, and a tee's branch cancelled alone would
  // leave the origin's request running for the other. The pipe failing cancels the copy too, and so the origin's body.
  const { readable, writable } = new (identityStream())();
  let gone = false;
  const piped = body.pipeTo(writable).catch(() => {
    gone = true;
    return reader.cancel().catch(() => {});
  });
  t.bg.waitUntil?.(piped);
  const read = async (): Promise<void> => {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch {
        return t.end(t.left.aborted ? "client_left" : "cut_short");
      }
      if (chunk.done) return t.end(gone || t.left.aborted ? "client_left" : "complete");
      try {
        t.usage.push(chunk.value);
      } catch {
        // A fault in reading the usage never stops the body: it reports nothing then.
      }
    }
  };
  t.bg.waitUntil?.(read());
  return new Response(readable, response);
}

/** workerd's `IdentityTransformStream` (its pipes run in the runtime), else the standard `TransformStream` (in Node). */
function identityStream(): new () => TransformStream<Uint8Array, Uint8Array> {
  const runtime = globalThis as { IdentityTransformStream?: new () => TransformStream<Uint8Array, Uint8Array> };
  return runtime.IdentityTransformStream ?? TransformStream;
}

/** Logs a reservation kept (`reservation_kept`): why, and for which key. */
async function kept(result: RateLimitResult, report: Exclude<Report, { actual: number }>): Promise<void> {
  const name = result.handle?.grants[0]?.name;
  const key_id = name === undefined ? null : await keyId(name);
  logEvent("reservation_kept", { key_id, reason: report.none, detail: report.detail, reserved: result.cost }, "warn");
}
