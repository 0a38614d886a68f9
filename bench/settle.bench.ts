/**
 * @module `npm run bench:settle`: settled costs (docs/llm.md) in a simulation on the pure core — the key's log
 * (`KeyLog`) deciding at simulated times, with no runtime: closed-loop clients streaming a language model's answers on
 * one key of 2,000 tokens / 10 s. A client sends its next request as soon as its stream ends, or waits the exact
 * `Retry-After` when refused. Each answer takes 300 ms to its first token and 20 ms per output token.
 *
 * 1. **Reserve, then settle** (the product): granted for its reservation (`max_tokens` + the prompt's bytes), settled
 *    to its actual cost when the stream ends (`reserved − actual` given back where it was recorded).
 * 2. **Charge when the stream closes** (what other limiters do): a request passes while the window holds less than N;
 *    its actual cost is recorded when its stream ends.
 *
 * Both are judged on the tokens the origin served: every window `(t − 10 s, t]` by settled cost at the requests'
 * grant times (the product's own guarantee) and at their end times (when the tokens were spent). Then utilisation —
 * tokens served per window ÷ N — for a client at its limit whose actual cost is a fixed share of its reservation, by
 * that share and by the number of streams it keeps open.
 *
 *   npm run bench:settle                 # ~5 s
 *   SETTLE_SECONDS=600 npm run bench:settle
 */

import { KeyLog, type LimitSpec } from "../src/core/index.ts";

const N = 2000;
const W = 10_000;
const SPECS: LimitSpec[] = [{ limit: N, windowMs: W }];
const SECONDS = Number(process.env.SETTLE_SECONDS) || 300;
const TTFT_MS = 300;
const MS_PER_TOKEN = 20;

/** One request a client sends: its reservation and what it will cost. */
interface Job {
  readonly reserved: number;
  readonly actual: number;
}

/** A granted request as the origin served it: when it was granted and ended, what it reserved and cost. */
interface Served {
  readonly grantedAt: number;
  readonly endedAt: number;
  readonly reserved: number;
  readonly actual: number;
}

/** xorshift32: the same traffic for every limiter. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

/** A limiter under test: decides at `now`, and hears when a granted stream ends. */
interface Limiter {
  /** Granted: a token to pass to `ended`; refused: the wait (ms). */
  ask(now: number, job: Job): { granted: true; token: unknown } | { granted: false; waitMs: number };
  ended(now: number, token: unknown, job: Job): void;
}

/** The product: the reservation recorded at the decision, `reserved − actual` given back at the stream's end. */
function reserveThenSettle(specs: LimitSpec[] = SPECS): Limiter {
  const log = new KeyLog(specs);
  return {
    ask(now, job) {
      const { decision } = log.take(now, { cost: job.reserved });
      if (!decision.allowed) return { granted: false, waitMs: Math.max(1, decision.retryAfterMs) };
      return { granted: true, token: decision.recordedAt };
    },
    ended(now, token, job) {
      if (job.actual < job.reserved) log.giveBack(token as number[], job.reserved - job.actual);
      // Debt (never here: the reservation bounds every cost) would be recorded now, over the limit if need be.
      if (job.actual > job.reserved) log.record(now, [{ ageMs: 0, units: job.actual - job.reserved }]);
    },
  };
}

/** The reference: an exact limiter that knew each request's cost when it decided it (no reservation). */
function knownUpFront(specs: LimitSpec[] = SPECS): Limiter {
  const log = new KeyLog(specs);
  return {
    ask(now, job) {
      const { decision } = log.take(now, { cost: job.actual });
      return decision.allowed
        ? { granted: true, token: null }
        : { granted: false, waitMs: Math.max(1, decision.retryAfterMs) };
    },
    ended() {},
  };
}

/** Charge when the stream closes: passes while the window holds less than N, records the cost at the end. */
function chargeAtClose(): Limiter {
  const log = new KeyLog(SPECS);
  return {
    ask(now) {
      const decision = log.check(now, 1);
      if (!decision.allowed) return { granted: false, waitMs: Math.max(1, decision.retryAfterMs) };
      return { granted: true, token: null };
    },
    ended(now, _token, job) {
      log.record(now, [{ ageMs: 0, units: job.actual }]);
    },
  };
}

/**
 * Runs `clients` closed-loop clients for `SECONDS` against `limiter`, each drawing its jobs from `next`; a refused
 * client waits the limiter's wait, or at most `maxWaitMs` (a client that polls).
 */
function run(
  limiter: Limiter,
  clients: number,
  next: (client: number) => Job,
  maxWaitMs = Infinity,
  seconds = SECONDS,
): Served[] {
  const served: Served[] = [];
  const end = seconds * 1000;
  // Each client's next event: an ask (job pending) or a stream's end.
  const state = Array.from({ length: clients }, (_, c) => ({
    at: c, // staggered by a millisecond
    job: next(c),
    streaming: null as null | { token: unknown; grantedAt: number },
  }));
  for (;;) {
    let i = 0;
    for (let c = 1; c < clients; c++)
      if ((state[c] as (typeof state)[0]).at < (state[i] as (typeof state)[0]).at) i = c;
    const s = state[i] as (typeof state)[0];
    const now = s.at;
    if (now >= end) break;
    if (s.streaming) {
      limiter.ended(now, s.streaming.token, s.job);
      served.push({ grantedAt: s.streaming.grantedAt, endedAt: now, reserved: s.job.reserved, actual: s.job.actual });
      s.streaming = null;
      s.job = next(i);
      continue;
    }
    const answer = limiter.ask(now, s.job);
    if (answer.granted) {
      s.streaming = { token: answer.token, grantedAt: now };
      s.at = now + TTFT_MS + MS_PER_TOKEN * s.job.actual;
    } else s.at = now + Math.min(answer.waitMs, maxWaitMs);
  }
  return served;
}

/** The most tokens in any window `(t − W, t]` by cost at `time` of each served request, and how many windows (one per start) are over N. */
function judge(served: readonly Served[], time: (s: Served) => number): { max: number; over: number } {
  const sorted = [...served].sort((a, b) => time(a) - time(b));
  let max = 0;
  let over = 0;
  let head = 0;
  let sum = 0;
  for (const s of sorted) {
    sum += s.actual;
    while (time(sorted[head] as Served) <= time(s) - W) sum -= (sorted[head++] as Served).actual;
    max = Math.max(max, sum);
    if (sum > N) over++;
  }
  return { max, over };
}

const fmt = (n: number, d = 2) => n.toFixed(d);

/** Realistic traffic: prompts of 50–250 tokens (4 bytes each), answers of 20–200 tokens, max_tokens 400. */
function realistic(seed: number): (client: number) => Job {
  const r = rng(seed);
  return () => {
    const prompt = 50 + Math.floor(r() * 201);
    const output = 20 + Math.floor(r() * 181);
    return { reserved: 400 + 4 * prompt, actual: prompt + output };
  };
}

/** Jobs of 60–180 tokens each, reserving `share⁻¹` times their cost. */
function sharing(seed: number, share: number): (client: number) => Job {
  const r = rng(seed);
  return () => {
    const actual = 60 + Math.floor(r() * 121);
    return { reserved: Math.ceil(actual / share), actual };
  };
}

const shares = [1, 1 / 2, 1 / 3, 1 / 5, 1 / 10];
const started = performance.now();
console.log(
  `Settled costs: one key, ${N} tokens / ${W / 1000} s, closed-loop streaming clients, ${SECONDS} s simulated`,
);
console.log(
  `(pure core in Node: KeyLog deciding at simulated times; ${TTFT_MS} ms to the first token, ${MS_PER_TOKEN} ms per token)\n`,
);

console.log(
  "1. 40 concurrent streams, realistic traffic (prompt 50–250 tokens as 4 bytes each, answer 20–200, max_tokens 400):",
);
console.log(
  "| limiter | requests served | tokens served | windows over N (grant times) | max window ÷ N (grant) | windows over N (end times) | max window ÷ N (end) |",
);
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const [name, limiter] of [
  ["reserve, then settle", reserveThenSettle()],
  ["charge when the stream closes", chargeAtClose()],
] as const) {
  const served = run(limiter, 40, realistic(7));
  const byGrant = judge(served, (s) => s.grantedAt);
  const byEnd = judge(served, (s) => s.endedAt);
  const tokens = served.reduce((a, s) => a + s.actual, 0);
  console.log(
    `| ${name} | ${served.length} | ${tokens} | ${byGrant.over} | ${fmt(byGrant.max / N)} | ${byEnd.over} | ${fmt(byEnd.max / N)} |`,
  );
}

const utilisation = (limiter: () => Limiter, streams: number, share: number, maxWaitMs: number) => {
  const served = run(limiter(), streams, sharing(11, share), maxWaitMs);
  const byGrant = judge(served, (s) => s.grantedAt);
  if (limiter === reserveThenSettle && byGrant.max > N) throw new Error(`over N: ${byGrant.max}`);
  return served.reduce((a, s) => a + s.actual, 0) / ((SECONDS * 1000) / W) / N;
};
for (const [part, title, maxWaitMs] of [
  ["2a", "refused clients wait the exact Retry-After", Infinity],
  ["2b", "refused clients retry within 250 ms (the Retry-After or less)", 250],
] as const) {
  console.log(
    `\n${part}. Utilisation (tokens served per window ÷ N), ${title}; requests of 60–180 tokens whose cost is a share of their reservation:`,
  );
  console.log(
    `| streams open | limiter | ${shares.map((s) => (s === 1 ? "actual = reservation" : `actual = 1/${Math.round(1 / s)}`)).join(" | ")} |`,
  );
  console.log(`| ---: | --- | ${shares.map(() => "---:").join(" | ")} |`);
  for (const streams of [10, 40]) {
    for (const [name, limiter] of [
      ["reserve, then settle", reserveThenSettle],
      ["cost known up front (reference)", knownUpFront],
    ] as const) {
      const cells = shares.map((share) => fmt(utilisation(limiter, streams, share, maxWaitMs)));
      console.log(`| ${streams} | ${name} | ${cells.join(" | ")} |`);
    }
  }
}
console.log(
  "\n3. The same at actual = 1/3 of the reservation, 40 streams, by window (same rate: 200 tokens/s), 600 s simulated:",
);
console.log("| limit | reserve, then settle | cost known up front | W ÷ (W + 2 × mean stream time) |");
console.log("| --- | ---: | ---: | ---: |");
for (const [n, w, label] of [
  [2000, 10_000, "2,000 / 10 s"],
  [12_000, 60_000, "12,000 / 1 min"],
  [60_000, 300_000, "60,000 / 5 min"],
] as const) {
  const specs: LimitSpec[] = [{ limit: n, windowMs: w }];
  const cells = [reserveThenSettle, knownUpFront].map((make) => {
    const served = run(make(specs), 40, sharing(11, 1 / 3), Infinity, 600);
    return fmt(served.reduce((a, s) => a + s.actual, 0) / (600_000 / w) / n);
  });
  // Mean stream: 300 ms + 20 ms × 120 tokens.
  const d = TTFT_MS + MS_PER_TOKEN * 120;
  console.log(`| ${label} | ${cells.join(" | ")} | ${fmt(w / (w + 2 * d))} |`);
}
console.log(`\n${fmt((performance.now() - started) / 1000, 1)} s`);
