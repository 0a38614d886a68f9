/**
 * @module The bench Worker's `outage` role (`npm run bench:outage`): the product's proxy app, one per failure mode
 * (`x-outage-mode`: closed, open, local), in front of the real objects behind a switch. Up, every object call takes
 * the simulated round trip of `x-bench-rtt` (half before the call, half after its answer); `POST /__outage/hang`
 * makes every call to a `down_` key's object hang (never answer), `POST /__outage/fail` fail at once after half the
 * round trip (as an overloaded object), `POST /__outage/up` ends the outage. `GET /__outage/stats` returns, and
 * resets, the object calls made and each grant's decision time (`e.at`: the object's clock, or this isolate's for
 * a lease or a decision made alone) per key.
 */

import { createProxy, type Hooks, type WorkerEnv } from "../../src/proxy/app.ts";

type State = "up" | "hang" | "fail";
type Mode = "closed" | "open" | "local";

let state: State = "up";
let calls = 0;
let grants: Record<string, number[]> = {};
const reasons: Record<string, Record<string, number>> = {};

/** One proxy app per failure mode: its own leases, deny cache and objects known down. */
const apps = new Map<Mode, ReturnType<typeof createProxy>>();
/** Envs per failure mode and round trip, made once (spreading env is not the Worker's work). */
const envs = new Map<string, WorkerEnv>();

const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());

/** The namespace behind the switch: every method of every stub, delayed by the round trip, or hanging, or failing. */
function switched(ns: WorkerEnv["LIMITER"], rttMs: number): WorkerEnv["LIMITER"] {
  const half = rttMs / 2;
  return {
    getByName(name: string) {
      const stub = ns.getByName(name);
      const down = name.startsWith("key:down_");
      return new Proxy(
        {},
        {
          get(_, method) {
            return async (...args: unknown[]) => {
              calls += 1;
              if (down && state === "hang") return new Promise(() => {});
              await sleep(half);
              if (down && state === "fail")
                throw Object.assign(new Error("Durable Object is overloaded."), { overloaded: true });
              const f = Reflect.get(stub, method) as (...a: unknown[]) => Promise<unknown>;
              const out = await Reflect.apply(f, stub, args);
              await sleep(half);
              return out;
            };
          },
        },
      );
    },
  } as unknown as WorkerEnv["LIMITER"];
}

function envFor(env: WorkerEnv, mode: Mode, rttMs: number): WorkerEnv {
  const id = `${mode}/${rttMs}`;
  let e = envs.get(id);
  if (!e) {
    const base = typeof env.RATE_LIMIT === "string" ? JSON.parse(env.RATE_LIMIT) : env.RATE_LIMIT;
    e = { ...env, RATE_LIMIT: { ...(base as object), failure_mode: mode }, LIMITER: switched(env.LIMITER, rttMs) };
    envs.set(id, e);
  }
  return e;
}

function observe(ctx: ExecutionContext): Hooks {
  return {
    waitUntil: (p) => ctx.waitUntil(p),
    onDecision: (e, name) => {
      const byReason = reasons[name] ?? {};
      byReason[e.reason] = (byReason[e.reason] ?? 0) + 1;
      reasons[name] = byReason;
      if (!e.allowed) return;
      const at = grants[name] ?? [];
      at.push(e.at);
      grants[name] = at;
    },
  };
}

export function outage(request: Request, env: WorkerEnv, ctx: ExecutionContext): Promise<Response> | Response {
  const url = new URL(request.url);
  if (url.pathname.startsWith("/__outage/")) {
    const what = url.pathname.slice("/__outage/".length);
    if (what === "stats") {
      const out = Response.json({ calls, grants, reasons });
      calls = 0;
      grants = {};
      for (const k of Object.keys(reasons)) delete reasons[k];
      return out;
    }
    if (what === "up" || what === "hang" || what === "fail") {
      state = what;
      return new Response(null, { status: 204 });
    }
    return new Response("unknown", { status: 404 });
  }
  const mode = (request.headers.get("x-outage-mode") ?? "closed") as Mode;
  const rtt = Number(request.headers.get("x-bench-rtt") ?? 0);
  let app = apps.get(mode);
  if (!app) {
    app = createProxy();
    apps.set(mode, app);
  }
  return app.handle(request, envFor(env, mode, rtt), observe(ctx));
}
