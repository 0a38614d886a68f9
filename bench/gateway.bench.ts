// biome-ignore-all lint/suspicious/noTemplateCurlyInString: the gateway's settings write ${NAME} in plain strings.
/**
 * @module `npm run bench:gateway`: what the gateway adds to the proxy's forward, measured alone. The product's own
 * `forward()` (src/proxy/forward.ts) runs against a fetcher that answers at once, interleaved in slices: once to an
 * origin without headers (the key forwarded, nobody told who calls: today's proxy), once through the gateway (the
 * operator's header from a secret, the client's key removed from its header and Authorization, the three identity
 * fields set). Each prints its µs per forwarded request (the median of the slices) and the difference, to be read
 * against the product's workerd CPU per request in `npm run bench` (BENCHMARKS.md): an in-process difference is the
 * JavaScript the gateway adds, which `npm run bench`'s per-round noise (±20 % on a shared VM) cannot resolve.
 */

import { parseConfig } from "../src/config/parse.ts";
import { type Forwarding, forward } from "../src/proxy/forward.ts";
import { type Caller, type Target, targetsOf } from "../src/proxy/upstream.ts";

const SLICES = Number(process.env.GATEWAY_SLICES) || 21;
const PER_SLICE = Number(process.env.GATEWAY_PER_SLICE) || 5_000;

const LIMITS = { limits: [{ limit: 100, window: "1s" }] };
const plainConfig = parseConfig({ ORIGIN: "https://api.example.com", RATE_LIMIT: LIMITS });
const gatewayConfig = parseConfig({
  ORIGIN: "https://api.example.com",
  RATE_LIMIT: { ...LIMITS, origin_headers: { authorization: "Bearer ${UPSTREAM_KEY}", "x-org": "bench" } },
});
const plain = targetsOf(plainConfig, {})[0] as Target;
const gateway = targetsOf(gatewayConfig, { UPSTREAM_KEY: "sk-bench-upstream-credential" })[0] as Target;
const caller: Caller = { keyId: "5d41402abc4b", plan: "pro", account: "acme" };

const answer = new Response(null, { status: 204 });
const send = async (_r: Request) => answer;

/** A request as an SDK sends one: its key as a bearer token and in x-api-key, a few ordinary headers. */
function incoming(): Request {
  return new Request("https://gw.example.com/v1/chat/completions?x=1", {
    method: "GET",
    headers: {
      authorization: "Bearer sk_live_bench_customer_key",
      "x-api-key": "sk_live_bench_customer_key",
      "content-type": "application/json",
      "user-agent": "OpenAI/JS 7.60.0",
      "x-stainless-retry-count": "0",
      "cf-connecting-ip": "203.0.113.9",
    },
  });
}

function forwarding(target: Target, config: typeof plainConfig, who: Caller | null, url: URL): Forwarding {
  return { target, send, incoming: url, path: url.pathname, keySource: config.key, caller: who, timeoutMs: 30_000 };
}

async function slice(target: Target, config: typeof plainConfig, who: Caller | null): Promise<number> {
  const start = process.hrtime.bigint();
  for (let i = 0; i < PER_SLICE; i++) {
    const request = incoming();
    await forward(request, forwarding(target, config, who, new URL(request.url)));
  }
  return Number(process.hrtime.bigint() - start) / 1000 / PER_SLICE;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1] as number;

// Warm both paths (the JIT, keyId's cache), then interleave.
await slice(plain, plainConfig, null);
await slice(gateway, gatewayConfig, caller);
const times = { plain: [] as number[], gateway: [] as number[], added: [] as number[] };
for (let s = 0; s < SLICES; s++) {
  const order = s % 2 === 0 ? (["plain", "gateway"] as const) : (["gateway", "plain"] as const);
  const got: Record<string, number> = {};
  for (const which of order) {
    got[which] =
      which === "plain" ? await slice(plain, plainConfig, null) : await slice(gateway, gatewayConfig, caller);
  }
  times.plain.push(got.plain as number);
  times.gateway.push(got.gateway as number);
  times.added.push((got.gateway as number) - (got.plain as number));
}
const fmt = (x: number) => x.toFixed(2);
console.log(
  `forward() per request, µs (median of ${SLICES} interleaved slices of ${PER_SLICE}; Node ${process.version}):`,
);
console.log(`  to an origin without headers (today's proxy):      ${fmt(median(times.plain))}`);
console.log(`  through the gateway (header, key removed, identity): ${fmt(median(times.gateway))}`);
console.log(`  added by the gateway, per slice's pair (median):     ${fmt(median(times.added))}`);
console.log("Read against the product's workerd CPU per request in `npm run bench` (its pass-through row).");
