/**
 * @module `npm run bench:rpc`: what the shape of a call to a key's object costs in workerd, beside the call itself
 * (issue 48, "an object call no dearer than the peer's"). One Worker and its Durable Object in one workerd (Miniflare's
 * API); the Worker awaits calls one after another to one object, whose methods do no work, and the time per call is
 * read from outside. Three shapes, interleaved round by round:
 *
 * - `ping`: nothing sent, a number back — the floor of an object call (what any peer pays);
 * - `packed`: only the cost sent, the same decision back as numbers in a `Float64Array` (the least a redrawn call
 *   could carry);
 * - `minimal`: only the cost sent, a `Decision` back (what the object already knows left at home);
 * - `ours`: what the client sends with leases off — the limits and the ask (src/client/answers.ts) — a `Decision`
 *   back (src/core/decision.ts), as the middleware and the proxy call it.
 *
 *   npm run bench:rpc                       # ~40 s
 *   RPC_CALLS=50000 RPC_ROUNDS=7 npm run bench:rpc
 */

import { convertV4MiniflareOptions, Miniflare } from "miniflare";

const CALLS = Number(process.env.RPC_CALLS) || 20_000;
const ROUNDS = Number(process.env.RPC_ROUNDS) || 9;
const SHAPES = ["ping", "packed", "minimal", "ours"] as const;

/** The Worker: its object answers each shape with fixed values, so only the call and its values are timed. */
const script = `
import { DurableObject } from "cloudflare:workers";
const DECISION = {
  allowed: true, neverAllowed: false, cost: 1, now: 1764300000000, retryAfterMs: 0, blockedUntil: 1764300000000,
  limits: [{ remaining: 99, resetMs: 1000, exceeded: false }, { remaining: 999, resetMs: 60000, exceeded: false }],
  lease: null, recordedAt: [1764300000000, 1764300000000],
};
// The same decision as numbers in a row: allowed, cost, now, retryAfterMs, blockedUntil, then each limit's
// remaining, resetMs, and where each ring recorded the cost.
const PACKED = new Float64Array([1, 1, 1764300000000, 0, 1764300000000, 99, 1000, 999, 60000, 1764300000000, 1764300000000]);
export class Key extends DurableObject {
  ping() { return 1; }
  minimal(cost) { return DECISION; }
  ours(limits, ask) { return DECISION; }
  packed(cost) { return PACKED; }
}
// The limits and ask of a key of "100/1s + 1000/1m" with leases off, as the client sends them.
const LIMITS = [
  { limit: 100, windowMs: 1000, tickMs: 10, name: "per-second" },
  { limit: 1000, windowMs: 60000, tickMs: 600, name: "per-minute" },
];
const ASK = { cost: 1, leaseUnits: 0, leaseMs: 0, leaseLeadMs: 0, leaseFromLog: false, settle: [] };
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const n = Number(url.searchParams.get("n"));
    const stub = env.KEY.getByName("hot");
    let seen = 0;
    for (let i = 0; i < n; i++) {
      if (url.pathname === "/ping") seen += await stub.ping();
      else if (url.pathname === "/minimal") seen += (await stub.minimal(1)).cost;
      else if (url.pathname === "/packed") seen += (await stub.packed(1))[1];
      else seen += (await stub.ours(LIMITS, ASK)).cost;
    }
    return new Response(String(seen));
  },
};
`;

const mf = new Miniflare(
  convertV4MiniflareOptions({
    workers: [
      {
        name: "rpc",
        modules: [{ type: "ESModule", path: "rpc.js", contents: script }],
        compatibilityDate: "2026-11-17",
        durableObjects: { KEY: "Key" },
      },
    ],
  }),
);
const perCall: Record<(typeof SHAPES)[number], number[]> = { ping: [], packed: [], minimal: [], ours: [] };
try {
  const url = await mf.ready;
  // Warm-up: every shape once, compiled and the object started.
  for (const shape of SHAPES) await (await fetch(`${url}${shape}?n=${CALLS / 10}`)).text();
  for (let round = 0; round < ROUNDS; round++) {
    for (const shape of round % 2 === 0 ? SHAPES : [...SHAPES].reverse()) {
      const start = performance.now();
      const seen = Number(await (await fetch(`${url}${shape}?n=${CALLS}`)).text());
      if (seen !== CALLS) throw new Error(`${shape}: ${seen} of ${CALLS} calls answered`);
      perCall[shape].push(((performance.now() - start) * 1000) / CALLS);
    }
  }
} finally {
  await mf.dispose();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const fmt = (x: number) => x.toFixed(1);
console.log(
  `An object call awaited in a loop, µs per call (${CALLS} calls a round, ${ROUNDS} rounds, medians [rounds]):`,
);
console.log("| shape | µs per call | − ping |");
console.log("| --- | ---: | ---: |");
const ping = median(perCall.ping);
for (const shape of SHAPES) {
  const m = median(perCall[shape]);
  console.log(`| ${shape} | ${fmt(m)} [${perCall[shape].map(fmt).join(", ")}] | ${fmt(m - ping)} |`);
}
console.log(
  `ours − minimal: ${fmt(median(perCall.ours) - median(perCall.minimal))} µs a call; minimal − packed: ${fmt(median(perCall.minimal) - median(perCall.packed))}`,
);
