/**
 * @module `npm run bench:stream`: what reading a stream for its usage adds to each event's delivery (docs/llm.md).
 * The product's bundle in workerd (Miniflare's API, direct sockets, as the e2e suite and the soak run it) in front of
 * the recording origin's fake model, which writes an OpenAI chat completion's events 20 ms apart and records when it
 * wrote each one. Streams through a settled `costs` rule (read as they pass, settled at their end) and through a
 * plain one (cost 1, passed through untouched) run side by side, 40 at once (the kinds alternating, which goes first
 * swapped each round), in two shapes: started 25 ms apart as clients arrive, and all in one millisecond. For every
 * event, the time from the origin writing it to the client reading it (one clock: both in this process's machine).
 * The first event of a stream also carries the response's start (the decision, the origin's headers): it is reported
 * apart from the events passed on after it.
 *
 *   npm run bench:stream                  # ~40 s (the bundle's build included)
 *   STREAM_ROUNDS=30 npm run bench:stream
 */

import { tempDir } from "../test/support/harness.ts";
import type { LlmReport } from "../test/support/llm.ts";
import { startOrigin } from "../test/support/origin.ts";
import { buildBundle, startWorkers } from "../test/support/workers.ts";
import { quantile } from "./http/load.ts";

const ROUNDS = Number(process.env.STREAM_ROUNDS) || 5;
const STREAMS = 40;
const EVENTS = 50;
const PACE_MS = 20;
/** Between two streams' starts: 40 streams arrive over a second, as clients do; then all 40 in one millisecond. */
const SHAPES = [
  { name: "arriving 25 ms apart", arrivalMs: 25 },
  { name: "all at once", arrivalMs: 0 },
] as const;

const origin = await startOrigin();
const bundle = await buildBundle();
const state = await tempDir("limiter-stream-bench-");
const workers = await startWorkers({
  bundle,
  count: 1,
  origin: origin.url,
  persistTo: state.path,
  rateLimit: {
    limits: [{ limit: 1_000_000_000, window: "1m" }],
    leases: false,
    costs: [
      {
        method: "POST",
        path: "/__special/llm/openai-chat",
        reserve: { json: "max_tokens", input: "bytes" },
        settle: "openai",
      },
      { method: "POST", path: "/plain/", cost: 1 },
    ],
  },
});
const url = workers.urls[0] as string;

/** One stream: the times (Date.now()) at which the client had read each event. */
async function stream(key: string, path: string): Promise<number[]> {
  const body = JSON.stringify({
    model: "fake",
    max_tokens: 100,
    stream: true,
    stream_options: { include_usage: true },
  });
  const res = await fetch(`${url}${path}?tokens=${EVENTS}&pace=${PACE_MS}`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json" },
    body,
  });
  if (res.status !== 200) throw new Error(`status ${res.status}`);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  const read: number[] = [];
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return read;
    text += decoder.decode(value, { stream: true });
    const now = Date.now();
    for (let i = text.indexOf("\n\n"); i !== -1; i = text.indexOf("\n\n")) {
      read.push(now);
      text = text.slice(i + 2);
    }
  }
}

type Kind = "settled" | "plain";
/** Per shape and kind: the first event's delays (the response's start) and every later event's (passed on). */
type Delays = Record<Kind, { first: number[]; later: number[] }>;
const delays: Delays[] = SHAPES.map(() => ({ settled: { first: [], later: [] }, plain: { first: [], later: [] } }));
try {
  for (const [s, shape] of SHAPES.entries()) {
    for (let round = 0; round < ROUNDS; round++) {
      const runs = Array.from({ length: STREAMS }, async (_, i) => {
        const kind: Kind = (i + round) % 2 === 0 ? "settled" : "plain";
        const key = `bench_${s}_${round}_${i}`;
        if (shape.arrivalMs > 0) await new Promise((resolve) => setTimeout(resolve, i * shape.arrivalMs));
        const read = await stream(
          key,
          kind === "settled" ? "/__special/llm/openai-chat" : "/plain/__special/llm/openai-chat",
        );
        return { kind, key, read } as const;
      });
      const done = await Promise.all(runs);
      const reports = (await (await fetch(`${origin.url}/__special/llm-reports`)).json()) as LlmReport[];
      for (const d of done) {
        const report = reports.find((r) => r.key === d.key);
        if (!report || report.sent.length !== d.read.length)
          throw new Error(`events: ${report?.sent.length} sent, ${d.read.length} read`);
        for (const [e, at] of report.sent.entries()) {
          (delays[s] as Delays)[d.kind][e === 0 ? "first" : "later"].push((d.read[e] as number) - at);
        }
      }
    }
  }
} finally {
  await workers.stop();
  await origin.close();
  await bundle.cleanup();
  await state.cleanup();
}

const row = (name: string, xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const q = (p: number) => quantile(sorted, p);
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return `| ${name} | ${xs.length} | ${mean.toFixed(2)} | ${q(0.5)} | ${q(0.9)} | ${q(0.99)} | ${sorted[sorted.length - 1]} |`;
};
console.log(
  `Per event, origin write → client read (ms): ${STREAMS} streams (half each way), ${EVENTS + 3} events ${PACE_MS} ms apart, ${ROUNDS} rounds per shape`,
);
console.log("| streams | route, events | events | mean | p50 | p90 | p99 | max |");
console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const [s, shape] of SHAPES.entries()) {
  const d = delays[s] as Delays;
  console.log(row(`${shape.name} | settled, passed on (2nd on)`, d.settled.later));
  console.log(row(`${shape.name} | plain, passed on (2nd on)`, d.plain.later));
  console.log(row(`${shape.name} | settled, first (the response's start)`, d.settled.first));
  console.log(row(`${shape.name} | plain, first (the response's start)`, d.plain.first));
}
