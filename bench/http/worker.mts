/**
 * @module The bench-only Worker (never deployed): one bundle, loaded several times by
 * bench/http.bench.ts with a different `BENCH_ROLE` var each time.
 *
 * - `pass`: the pass-through — the limiter's own config parse and `proxy()`, no limiter.
 * - `nocache`: the limiter's `handle()` with the deny cache bypassed (every request reaches the object).
 * - `count`: as `nocache`, with `CountingRateLimiter` bound as the object; `GET /__bench/stats?name=…`
 *   returns what that object wrote.
 * - `tokenbucket`, `fixedwindow`: a classic Durable Object limiter in front of the same `proxy()`.
 * - `native`: Cloudflare's rate-limit binding (`env.NATIVE.limit({ key })`), as Miniflare simulates it.
 * - `chart`: the limiter's `handle()` unchanged (deny cache on), observing its decisions: grant
 *   times of `chart_` keys, and every decision (time, allowed, reason) of `util_` keys
 *   (`GET /__bench/decisions` returns them and forgets them).
 * - `far`: the limiter's `handle()` with its LIMITER namespace wrapped so that every object call
 *   (`take`, `refund` and `settle`) takes a simulated Worker→object round trip longer: half of the
 *   `x-bench-rtt` header's milliseconds before the call, half after its answer. The wrapper counts
 *   the calls and `onDecision` the reasons (`GET /__bench/far` returns them and resets them).
 * - `floor`: one call to a Durable Object that does nothing (`Noop`), then `proxy()`: what any
 *   limiter that asks an object per request costs at least.
 * - `stand-in`: the limiter's `handle()` with an in-isolate stand-in for the object (always allows,
 *   no RPC): what the Worker's own limiter work (key, plan, headers, deny cache) costs.
 * - `hono-bare`, `hono-ours`, `hono-peer`: a hono app with no limiter, this package's middleware, and
 *   hono-rate-limiter's Durable Object store (bench/http/hono.mts).
 * - `outage` (`npm run bench:outage`): bench/http/outage.mts — the product's proxy per failure mode in front of
 *   objects that can be made to hang or fail.
 * - `sim` (`npm run bench:sim`): several simulated isolates in one Worker, each the product's own
 *   proxy app with its own lease table and deny cache (`x-sim-isolate` picks one), in front of
 *   `CountingRateLimiter` at the simulated round trip of `x-bench-rtt`. `POST /__sim/churn?i=…`
 *   drops isolate `i` as a vanished isolate would (its leases are never given back; the next
 *   request makes a fresh one); `GET /__bench/stats?name=…` reads an object's counts.
 *
 * Every role but `pass` records the decision time of each grant to a `chart_` key (the object's
 * clock for this limiter and the two objects, the Worker's right after the answer for the
 * native binding); `GET /__bench/grants` returns them and forgets them.
 *
 * Keys starting with `chart_` use the chart's limit (`CHART_LIMIT` per `CHART_WINDOW_MS`; the
 * native binding `NATIVE_CHART`), other keys a limit high enough that everything passes.
 */

import type { Config } from "../../src/config/types.ts";
import type { Ask, Decision } from "../../src/core/index.ts";
import { RateLimiter } from "../../src/object/index.ts";
import { createProxy, type Hooks, type WorkerEnv } from "../../src/proxy/app.ts";
import { forward } from "../../src/proxy/forward.ts";
import { type Target, targetsOf } from "../../src/proxy/upstream.ts";
import { emptyCounts, type StorageCounts } from "./counts.ts";
import { HONO_ROLES, type HonoRole, honoApp } from "./hono.mts";
import type { FixedWindow, Noop, TokenBucket } from "./objects.mts";
import { outage } from "./outage.mts";
import type { BenchRole } from "./roles.ts";
import { SERVICE_ROLES, type ServiceRole, serviceAnswer } from "./service.mts";

export { DurableObjectRateLimiter } from "./hono.mts";
export { FixedWindow, Noop, TokenBucket } from "./objects.mts";
export { BenchLimiterService } from "./service.mts";
export { RateLimiter };

interface RateLimitBinding {
  limit(options: { key: string }): Promise<{ success: boolean }>;
}

interface BenchEnv extends WorkerEnv {
  BENCH_ROLE: BenchRole;
  CHART_LIMIT: number;
  CHART_WINDOW_MS: number;
  TOKEN_BUCKET?: DurableObjectNamespace<TokenBucket>;
  FIXED_WINDOW?: DurableObjectNamespace<FixedWindow>;
  NOOP?: DurableObjectNamespace<Noop>;
  NATIVE?: RateLimitBinding;
  NATIVE_CHART?: RateLimitBinding;
}

/**
 * Each object's counts, by object id, in the isolate's memory rather than the instance's: workerd evicts an object
 * idle for ~10 s (an ordinary key's object between its leases), and a new instance must go on counting, not start at
 * zero (the counts would go backwards between two reads).
 */
const countsById = new Map<string, StorageCounts>();

/** The limiter's object with its storage calls counted (a bench-only subclass; behaviour unchanged). */
export class CountingRateLimiter extends RateLimiter {
  #counts = emptyCounts();
  /** No `take` or `giveBack` has reached this instance yet (a `stats` read does not count as its start). */
  #fresh = true;

  /** Counts this instance's start at its first object call. */
  #started(): void {
    if (!this.#fresh) return;
    this.#fresh = false;
    this.#counts.starts += 1;
  }

  constructor(ctx: DurableObjectState, env: Env) {
    const id = ctx.id.toString();
    const counts = countsById.get(id) ?? emptyCounts();
    countsById.set(id, counts);
    const sql = ctx.storage.sql;
    const exec = sql.exec.bind(sql);
    Object.defineProperty(sql, "exec", {
      value: (query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        if (/^\s*(INSERT|UPDATE|DELETE|REPLACE)/i.test(query)) {
          counts.writeStatements += 1;
          counts.rowsWritten += cursor.rowsWritten;
          if (/\bbudget_slots\b/.test(query)) counts.slotRowsWritten += cursor.rowsWritten;
          else if (/\bkept_answers\b/.test(query)) counts.keptRowsWritten += cursor.rowsWritten;
          else if (/\bmeta\b/.test(query)) counts.metaRowsWritten += cursor.rowsWritten;
        }
        return cursor;
      },
    });
    const setAlarm = ctx.storage.setAlarm.bind(ctx.storage);
    Object.defineProperty(ctx.storage, "setAlarm", {
      value: (...args: Parameters<DurableObjectStorage["setAlarm"]>) => {
        counts.setAlarms += 1;
        return setAlarm(...args);
      },
    });
    super(ctx, env);
    this.#counts = counts;
  }

  override async take(...args: Parameters<RateLimiter["take"]>): Promise<Decision> {
    this.#started();
    // Settlements riding on the call give units back as a settle call's do.
    for (const x of args[1].settle ?? []) this.#counts.returnedUnits += x.unused;
    const result = await super.take(...args);
    this.#counts.decides += 1;
    if (result.allowed && result.cost > 0) this.#counts.grants += 1;
    if (result.lease) {
      this.#counts.leases += 1;
      this.#counts.leasedUnits += result.lease.units;
    }
    return result;
  }

  override refund(...args: Parameters<RateLimiter["refund"]>): boolean | Promise<boolean> {
    this.#started();
    // A refund counts with the give-backs: a call that is no decision.
    this.#counts.giveBacks += 1;
    this.#counts.returnedUnits += args[1].units;
    return super.refund(...args);
  }

  override settle(...args: Parameters<RateLimiter["settle"]>): number | Promise<number> {
    this.#started();
    // A settlement call counts with the give-backs: a call that is no decision.
    this.#counts.giveBacks += 1;
    for (const x of args[1]) this.#counts.returnedUnits += x.unused;
    return super.settle(...args);
  }

  stats(): StorageCounts {
    const sql = this.ctx.storage.sql;
    // An object whose state the idle alarm deleted has no tables any more: nothing in them.
    const count = (table: string) => {
      const exists = sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", table).toArray();
      return exists.length === 0 ? 0 : Number(sql.exec<{ n: number }>(`SELECT count(*) AS n FROM ${table}`).one().n);
    };
    return {
      ...this.#counts,
      slotRows: count("budget_slots"),
      metaRows: count("meta"),
      databaseSize: sql.databaseSize,
    };
  }
}

const product = createProxy();
const handle = product.handle;

/** Bypasses the deny cache: the entry the client just made is dropped before any other request can read it. */
function noDenyCache(env: WorkerEnv): Hooks {
  return { onDecision: (_, name) => product.clientFor(env)?.denyCache.delete(name) };
}

/** Decision times of grants to `chart_` keys, in this isolate. */
let grants: number[] = [];
/** Every decision on a `util_` key in this isolate: [object name, time, allowed (1/0), reason]. */
let decisions: [string, number, number, string][] = [];
const observeGrants: Hooks = {
  onDecision: (e, name) => {
    if (e.allowed && name.startsWith("key:chart_")) grants.push(e.at);
    if (name.startsWith("key:util_")) decisions.push([name, e.at, e.allowed ? 1 : 0, e.reason]);
  },
};

/** The `far` role's counts in this isolate: object calls made through the delayed namespace, and decisions by reason. */
let far = { take: 0, giveBack: 0, settle: 0, release: 0, renew: 0, reasons: {} as Record<string, number> };
const observeFar: Hooks = {
  onDecision: (e) => {
    far.reasons[e.reason] = (far.reasons[e.reason] ?? 0) + 1;
  },
};

/** The hooks plus the runtime's `waitUntil`, as src/index.ts passes it (lease refills and returns run after the response). */
function withCtx(hooks: Hooks, ctx: ExecutionContext): Hooks {
  return { ...hooks, waitUntil: (p) => ctx.waitUntil(p) };
}

const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());

/**
 * The real namespace behind a simulated distance: every `take`, `refund`, `settle`, `release` and `renew` waits `rttMs / 2`
 * before it reaches the object and `rttMs / 2` after its answer, and is counted.
 */
function distant(ns: WorkerEnv["LIMITER"], rttMs: number): WorkerEnv["LIMITER"] {
  const half = rttMs / 2;
  return {
    getByName(name: string) {
      const stub = ns.getByName(name);
      return {
        async take(...args: Parameters<RateLimiter["take"]>): Promise<Decision> {
          far.take += 1;
          const sentAt = Date.now();
          await sleep(half);
          const d = (await stub.take(...args)) as Decision;
          await sleep(half);
          if (name.startsWith(TRACED)) traceTake(name, rttMs, sentAt, args[1], d);
          return d;
        },
        async refund(...args: Parameters<RateLimiter["refund"]>): Promise<boolean> {
          far.giveBack += 1;
          await sleep(half);
          const done = (await stub.refund(...args)) as boolean;
          await sleep(half);
          return done;
        },
        async settle(...args: Parameters<RateLimiter["settle"]>): Promise<number> {
          far.settle += 1;
          await sleep(half);
          const n = await stub.settle(...args);
          await sleep(half);
          return n;
        },
        async release(...args: Parameters<RateLimiter["release"]>): Promise<boolean> {
          far.release += 1;
          await sleep(half);
          const done = await stub.release(...args);
          await sleep(half);
          return done;
        },
        async renew(...args: Parameters<RateLimiter["renew"]>): Promise<boolean> {
          far.renew += 1;
          await sleep(half);
          const kept = await stub.renew(...args);
          await sleep(half);
          return kept;
        },
      };
    },
  } as unknown as WorkerEnv["LIMITER"];
}

/** Object names whose calls the `sim` role records (`SIM_TRACE`): the burst keys'. */
const TRACED = "key:b_";

/** One call of a traced key to its object, as the simulated isolate (by its round trip) made it. */
interface TracedCall {
  readonly key: string;
  readonly rttMs: number;
  /** Wall clock when the isolate sent it. */
  readonly sentAt: number;
  readonly cost: number;
  readonly leaseUnits: number;
  readonly leaseMs: number;
  readonly fromLog: boolean;
  /** Units its settlements reported used, and given back unused. */
  readonly settledUsed: number;
  readonly settledUnused: number;
  readonly allowed: boolean;
  /** The lease granted (units 0: none). */
  readonly units: number;
  readonly lifetimeMs: number;
  /** Each limit's remaining after the decision. */
  readonly remaining: readonly number[];
}

/** Traced calls in this isolate since the last read (bounded: a long run keeps its first 200,000). */
const traced: TracedCall[] = [];

function traceTake(key: string, rttMs: number, sentAt: number, ask: Ask, d: Decision): void {
  if (traced.length >= 200_000) return;
  let settledUsed = 0;
  let settledUnused = 0;
  for (const x of ask.settle ?? []) {
    settledUsed += x.used;
    settledUnused += x.unused;
  }
  traced.push({
    key,
    rttMs,
    sentAt,
    cost: ask.cost,
    leaseUnits: ask.leaseUnits ?? 0,
    leaseMs: ask.leaseMs ?? 0,
    fromLog: ask.leaseFromLog === true,
    settledUsed,
    settledUnused,
    allowed: d.allowed,
    units: d.lease?.units ?? 0,
    lifetimeMs: d.lease?.lifetimeMs ?? 0,
    remaining: d.limits.map((l) => l.remaining),
  });
}

/** Envs with the delayed namespace, one per env and round trip (made once: spreading env is not the Worker's work). */
const farEnvs = new WeakMap<BenchEnv, Map<number, WorkerEnv>>();

/** The env of `env` whose object calls take `rtt` ms longer. */
function farEnv(env: BenchEnv, rtt: number): WorkerEnv {
  let byRtt = farEnvs.get(env);
  if (!byRtt) {
    byRtt = new Map();
    farEnvs.set(env, byRtt);
  }
  let e = byRtt.get(rtt);
  if (!e) {
    e = { ...env, LIMITER: distant(env.LIMITER, rtt) };
    byRtt.set(rtt, e);
  }
  return e;
}

/** The `sim` role's simulated isolates: each the product's proxy app with its own lease table and deny cache. */
const sims = new Map<number, ReturnType<typeof createProxy>>();

/**
 * Per object name, the units this Worker's simulated isolates still hold unspent: in leases alive, and in expired ones
 * whose units go back with the key's next call here.
 */
function heldUnits(env: BenchEnv): Record<string, number> {
  const out: Record<string, number> = {};
  for (const app of sims.values()) {
    for (const [name, units] of app.clientFor(env as unknown as WorkerEnv)?.leases.unspent() ?? []) {
      out[name] = (out[name] ?? 0) + units;
    }
  }
  return out;
}

/** An object's counts (`count` and `sim` roles and the counting service Workers, whose LIMITER is `CountingRateLimiter`). */
async function objectStats(env: BenchEnv, url: URL): Promise<Response> {
  const stub = env.LIMITER.getByName(
    url.searchParams.get("name") ?? "",
  ) as unknown as DurableObjectStub<CountingRateLimiter>;
  return Response.json(await stub.stats());
}

/** An object namespace whose every object allows at once, in the isolate (no RPC, no storage). */
const standInObject = {
  getByName: () => ({
    // A promise, as an RPC stub's method returns (the Worker chains `.catch` on it).
    take: async (limits: readonly unknown[]): Promise<Decision> => {
      const now = Date.now();
      return {
        allowed: true,
        neverAllowed: false,
        cost: 1,
        now,
        retryAfterMs: 0,
        blockedUntil: now,
        limits: limits.map(() => ({ remaining: 1000, resetMs: 1000, exceeded: false })),
        lease: null,
      };
    },
  }),
} as unknown as WorkerEnv["LIMITER"];

const standInEnvs = new WeakMap<BenchEnv, WorkerEnv>();

/** The origin of each config, its headers read (once: the proxy app does so when it loads a config). */
const targets = new WeakMap<Config, Target>();

/** The product's forward alone, as the proxy app calls it: the pass-through, and what the classic limiters front. */
function proxy(request: Request, config: Config, env: BenchEnv): Promise<Response> {
  let target = targets.get(config);
  if (!target) {
    target = targetsOf(config, env)[0] as Target;
    targets.set(config, target);
  }
  const incoming = new URL(request.url);
  const send = (r: Request) => fetch(r);
  const { key: keySource, originTimeoutMs: timeoutMs } = config;
  return forward(request, { target, send, incoming, path: incoming.pathname, keySource, caller: null, timeoutMs });
}

const denied = () =>
  new Response('{"title":"Too Many Requests"}', { status: 429, headers: { "content-type": "application/json" } });

export default {
  async fetch(request, env, ctx): Promise<Response> {
    if ((SERVICE_ROLES as readonly string[]).includes(env.BENCH_ROLE)) {
      const url = new URL(request.url);
      // The service Workers whose LIMITER is `CountingRateLimiter` (bench/http/roles.ts): their objects' counts.
      if (url.pathname === "/__bench/stats") return objectStats(env, url);
      return serviceAnswer(env.BENCH_ROLE as ServiceRole, request, env as never, ctx);
    }
    if ((HONO_ROLES as readonly string[]).includes(env.BENCH_ROLE)) {
      return honoApp(env.BENCH_ROLE as HonoRole, env as never).fetch(request, env, ctx);
    }
    const config = product.clientFor(env)?.config;
    if (!config) return new Response("invalid RATE_LIMIT", { status: 500 });
    const role = env.BENCH_ROLE;
    if (role === "pass") return proxy(request, config, env);
    if (role === "chart") {
      if (new URL(request.url).pathname === "/__bench/grants") {
        const out = Response.json(grants);
        grants = [];
        return out;
      }
      if (new URL(request.url).pathname === "/__bench/decisions") {
        const out = Response.json(decisions);
        decisions = [];
        return out;
      }
      return handle(request, env, withCtx(observeGrants, ctx));
    }
    if (role === "far") {
      if (new URL(request.url).pathname === "/__bench/far") {
        const out = Response.json(far);
        far = { take: 0, giveBack: 0, settle: 0, release: 0, renew: 0, reasons: {} };
        return out;
      }
      const rtt = Number(request.headers.get("x-bench-rtt") ?? 0);
      return handle(request, farEnv(env, rtt), withCtx(observeFar, ctx));
    }
    if (role === "sim") {
      const url = new URL(request.url);
      if (url.pathname === "/__bench/stats") return objectStats(env, url);
      if (url.pathname === "/__sim/trace") return Response.json(traced.splice(0));
      if (url.pathname === "/__sim/held") return Response.json(heldUnits(env));
      if (url.pathname === "/__sim/churn") {
        sims.delete(Number(url.searchParams.get("i")));
        return new Response(null, { status: 204 });
      }
      const i = Number(request.headers.get("x-sim-isolate") ?? 0);
      let app = sims.get(i);
      if (!app) {
        app = createProxy();
        sims.set(i, app);
      }
      const rtt = Number(request.headers.get("x-bench-rtt") ?? 0);
      return app.handle(request, farEnv(env, rtt), { waitUntil: (p) => ctx.waitUntil(p) });
    }
    if (role === "outage") return outage(request, env, ctx);
    if (role === "nocache") return handle(request, env, withCtx(noDenyCache(env), ctx));
    if (role === "floor") {
      const key = request.headers.get("x-api-key") ?? "";
      await (env.NOOP as DurableObjectNamespace<Noop>)
        .getByName(`key:${key}`)
        .decide(config.defaultPlan?.limits ?? [], 1);
      return proxy(request, config, env);
    }
    if (role === "stand-in") {
      // Made once per env: spreading env reads every binding, which is not the Worker's work.
      let e = standInEnvs.get(env);
      if (!e) {
        e = { ...env, LIMITER: standInObject };
        standInEnvs.set(env, e);
      }
      return handle(request, e, { waitUntil: (p) => ctx.waitUntil(p) });
    }
    if (role === "count") {
      const url = new URL(request.url);
      if (url.pathname === "/__bench/stats") return objectStats(env, url);
      return handle(request, env, withCtx(noDenyCache(env), ctx));
    }
    const key = request.headers.get("x-api-key") ?? "";
    const chart = key.startsWith("chart_");
    const limit = chart ? env.CHART_LIMIT : 1_000_000_000;
    const windowMs = chart ? env.CHART_WINDOW_MS : 10_000;
    if (new URL(request.url).pathname === "/__bench/grants") {
      const out = Response.json(grants);
      grants = [];
      return out;
    }
    let grantedAt: number;
    if (role === "tokenbucket") {
      grantedAt = await (env.TOKEN_BUCKET as DurableObjectNamespace<TokenBucket>).getByName(key).take(limit, windowMs);
    } else if (role === "fixedwindow") {
      grantedAt = await (env.FIXED_WINDOW as DurableObjectNamespace<FixedWindow>).getByName(key).take(limit, windowMs);
    } else {
      const { success } = await ((chart ? env.NATIVE_CHART : env.NATIVE) as RateLimitBinding).limit({ key });
      grantedAt = success ? Date.now() : 0;
    }
    if (grantedAt === 0) return denied();
    if (chart) grants.push(grantedAt);
    return proxy(request, config, env);
  },
} satisfies ExportedHandler<BenchEnv>;
