/**
 * @module Test-only Worker entry for the lease e2e tests (test/e2e/leases.test.ts) and `npm run soak`: the
 * product's `handle()` and `RateLimiter` unchanged, with what happens counted in this isolate, so a test can
 * see where grants came from without anything test-related in src/.
 *
 * - Every decision is counted by reason per key (`leased`: spent from a lease this isolate holds; `granted`:
 *   the object decided the request itself; `over_limit`, `cached_denial`, …).
 * - Every call this isolate makes to an object is counted: `take` (a request's decision, a lease, or both;
 *   background refills included), `refund` and `settle`, with the lease units granted and given back (by either,
 *   or settled with a `take`).
 *
 * `GET /__lease-test/stats?key=<key>` answers a `KeyReport` (test/support/lease-report.ts): this isolate's counts for the key, the units
 * its lease table still holds for it, and what the key's object says is left (`peek`: no consumption, no
 * write, not counted). Without `key`: an `IsolateReport`, the counts summed per plan. Both carry `isolate`,
 * an id drawn once per isolate, so a test can tell isolates apart.
 */

import { planForKey } from "../../../src/config/lookup.ts";
import type { Decision } from "../../../src/core/index.ts";
import type { RateLimiter } from "../../../src/object/index.ts";
import { createProxy, type WorkerEnv } from "../../../src/proxy/app.ts";
import { type Counts, emptyCounts, type IsolateReport, type KeyReport } from "../../support/lease-report.ts";

export { RateLimiter } from "../../../src/object/index.ts";

const proxy = createProxy();

let isolate = "";
const perKey = new Map<string, Counts>();

function countsOf(name: string): Counts {
  let c = perKey.get(name);
  if (!c) {
    c = emptyCounts();
    perKey.set(name, c);
  }
  return c;
}

type Namespace = WorkerEnv["LIMITER"];
type Stub = ReturnType<Namespace["getByName"]>;

/** The namespace with `take`, `refund` and `settle` counted; every other method goes straight to the stub. */
function observed(ns: Namespace): Namespace {
  const getByName = (name: string): Stub => {
    const stub = ns.getByName(name);
    const take: RateLimiter["take"] = (limits, ask) => {
      const c = countsOf(name);
      c.takes += 1;
      if ((ask.leaseUnits ?? 0) > 0) c.leaseAsks += 1;
      // Unused units of leases settled with the call are given back too.
      for (const x of ask.settle ?? []) c.givenBackUnits += x.unused;
      return (stub.take(limits, ask) as Promise<Decision>).then((d) => {
        if (d.lease) {
          c.leases += 1;
          c.leasedUnits += d.lease.units;
          c.largestLease = Math.max(c.largestLease, d.lease.units);
        }
        return d;
      });
    };
    const refund: RateLimiter["refund"] = (limits, grant, route) => {
      const c = countsOf(name);
      c.giveBacks += 1;
      c.givenBackUnits += grant.units;
      return stub.refund(limits, grant, route) as unknown as boolean;
    };
    const settle: RateLimiter["settle"] = (limits, settlements) => {
      const c = countsOf(name);
      c.giveBacks += 1;
      for (const x of settlements) c.givenBackUnits += x.unused;
      return stub.settle(limits, settlements) as unknown as number;
    };
    return new Proxy(stub, {
      get: (target, prop) => {
        if (prop === "take") return take;
        if (prop === "refund") return refund;
        if (prop === "settle") return settle;
        const value = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  };
  return new Proxy(ns, {
    get: (target, prop) => {
      if (prop === "getByName") return getByName;
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

const envs = new WeakMap<object, WorkerEnv>();

function observedEnv(env: WorkerEnv): WorkerEnv {
  let e = envs.get(env);
  if (!e) {
    e = { ...env, LIMITER: observed(env.LIMITER) };
    envs.set(env, e);
  }
  return e;
}

async function keyReport(env: WorkerEnv, key: string): Promise<Response> {
  const client = proxy.clientFor(env);
  if (!client) return new Response("invalid RATE_LIMIT", { status: 500 });
  const name = `key:${key}`;
  const limits = planForKey(client.config, key)?.limits ?? [];
  const entry = client.leases.get(name);
  // Units this isolate holds that the object counts: leases being spent, and expired ones whose unused units wait
  // to go back with the key's next call.
  const held = entry ? [...entry.held, ...entry.expired].reduce((sum, h) => sum + h.left, 0) : 0;
  const peeked = limits.length > 0 ? await env.LIMITER.getByName(name).peek(limits) : null;
  const report: KeyReport = {
    isolate,
    counts: perKey.get(name) ?? null,
    held,
    remaining: peeked ? peeked.limits.map((l) => l.remaining) : [],
  };
  return Response.json(report);
}

function isolateReport(): Response {
  const plans: IsolateReport["plans"] = {};
  for (const c of perKey.values()) {
    const { plan: _, ...zero } = emptyCounts();
    const p = plans[c.plan] ?? { keys: 0, ...zero };
    plans[c.plan] = p;
    p.keys += 1;
    for (const [r, n] of Object.entries(c.reasons)) p.reasons[r] = (p.reasons[r] ?? 0) + n;
    p.takes += c.takes;
    p.leaseAsks += c.leaseAsks;
    p.leases += c.leases;
    p.leasedUnits += c.leasedUnits;
    p.largestLease = Math.max(p.largestLease, c.largestLease);
    p.giveBacks += c.giveBacks;
    p.givenBackUnits += c.givenBackUnits;
  }
  const report: IsolateReport = { isolate, plans };
  return Response.json(report);
}

export default {
  async fetch(request, env, ctx): Promise<Response> {
    if (isolate === "") isolate = crypto.randomUUID();
    const url = new URL(request.url);
    if (url.pathname === "/__lease-test/stats") {
      const key = url.searchParams.get("key");
      return key === null ? isolateReport() : keyReport(env, key);
    }
    return proxy.handle(request, observedEnv(env), {
      waitUntil: (p) => ctx.waitUntil(p),
      onDecision: (result, name) => {
        const c = countsOf(name);
        c.plan = result.plan;
        c.reasons[result.reason] = (c.reasons[result.reason] ?? 0) + 1;
      },
    });
  },
} satisfies ExportedHandler<WorkerEnv>;
