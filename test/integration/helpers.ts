// Shared by the integration tests: the Worker with a chosen config, fake limiter namespaces, the origin's log.

import { env } from "cloudflare:workers";
import { inject } from "vitest";
import type { Decision } from "../../src/core/index.ts";
import type { Ask, Settlement } from "../../src/core/log.ts";
import { createProxy, type WorkerEnv } from "../../src/proxy/app.ts";

export type { WorkerEnv };

import { type Problem, problemOf } from "../support/problem.ts";

/** The proxy under test: its own clients (leases, deny caches), one per configuration. */
export const proxy = createProxy();
/** Handles one request through {@link proxy}. */
export const handle = proxy.handle;

/** Base URL of the Node origin started by test/setup/origin.ts. */
export const originUrl = inject("originUrl");

/** The Worker's env with `RATE_LIMIT` replaced (a new object, so the Worker parses it afresh). */
export function envWith(rateLimit: unknown, extra: Partial<WorkerEnv> = {}): WorkerEnv {
  return { ...(env as unknown as WorkerEnv), ORIGIN: originUrl, RATE_LIMIT: rateLimit, ...extra };
}

/** A key no other test uses, so its object and deny-cache entry start empty. */
export function freshKey(prefix = "k_"): string {
  return `${prefix}${crypto.randomUUID()}`;
}

/** A request to the Worker with an API key header (none when `key` is null). */
export function request(key: string | null, path = "/", init: RequestInit = {}): Request {
  const headers = new Headers(init.headers);
  if (key !== null) headers.set("x-api-key", key);
  return new Request(`https://limiter.example${path}`, { ...init, headers });
}

/** The origin's arrivals that carried `key` in x-api-key. */
export async function arrivalsFor(key: string): Promise<{ url: string; method: string; at: number }[]> {
  const all = (await (await fetch(`${originUrl}/__arrivals`)).json()) as {
    url: string;
    method: string;
    at: number;
    headers: Record<string, string>;
  }[];
  return all.filter((a) => a.headers["x-api-key"] === key);
}

/** A LIMITER namespace whose objects answer what `take` resolves to, recording every call. */
export function fakeLimiter(take: (call: number, ask: Ask) => Promise<Decision>): {
  namespace: WorkerEnv["LIMITER"];
  calls: () => number;
  /** The `ask` of every `take` call, in order. */
  asks: Ask[];
  /** Every unit given back, by a refund or a lease's settlement: the record times and the units. */
  returns: { recordedAt: readonly number[]; units: number }[];
} {
  const asks: Ask[] = [];
  const returns: { recordedAt: readonly number[]; units: number }[] = [];
  const stub = {
    take: (_limits: unknown, ask: Ask) => {
      asks.push(ask);
      for (const x of ask.settle ?? []) if (x.unused > 0) returns.push({ recordedAt: x.recordedAt, units: x.unused });
      return take(asks.length, ask);
    },
    refund: (_limits: unknown, grant: { id: string; recordedAt: readonly number[]; units: number }) => {
      returns.push({ recordedAt: grant.recordedAt, units: grant.units });
      return Promise.resolve(true);
    },
    settle: (_limits: unknown, settle: readonly Settlement[]) => {
      for (const x of settle) if (x.unused > 0) returns.push({ recordedAt: x.recordedAt, units: x.unused });
      return Promise.resolve(settle.length);
    },
  };
  const namespace = { getByName: () => stub } as unknown as WorkerEnv["LIMITER"];
  return { namespace, calls: () => asks.length, asks, returns };
}

/** A decision as the object sends it, with defaults for what a test does not care about. */
export function decision(d: Partial<Decision> & Pick<Decision, "allowed">): Decision {
  // One clock reading for both: two could straddle a millisecond, and a `blockedUntil` 1 ms after `now` is a denial
  // the deny cache keeps (for ever, on a test's stopped clock).
  const now = d.now ?? Date.now();
  return {
    neverAllowed: false,
    cost: 1,
    now,
    retryAfterMs: 0,
    blockedUntil: now,
    limits: [],
    lease: null,
    ...d,
  };
}

/** A LIMITER namespace that forwards to the real one, counting `take` calls (leases and requests). */
export function countingLimiter(): { namespace: WorkerEnv["LIMITER"]; calls: () => number } {
  const real = (env as unknown as WorkerEnv).LIMITER;
  let calls = 0;
  const namespace = {
    getByName: (name: string) => {
      const stub = real.getByName(name);
      return {
        take: (...args: Parameters<typeof stub.take>) => {
          calls += 1;
          return stub.take(...args);
        },
        refund: (...args: Parameters<typeof stub.refund>) => stub.refund(...args),
      };
    },
  } as unknown as WorkerEnv["LIMITER"];
  return { namespace, calls: () => calls };
}

/** An error shaped like the runtime's Durable Object errors. */
export function objectError(flags: {
  retryable?: boolean;
  overloaded?: boolean;
  remote?: boolean;
  durableObjectReset?: boolean;
}): Error {
  return Object.assign(new Error("Durable Object reset because its code was updated."), flags);
}

/** The problem+json body of a response, checked by the one assertion in test/support (any status). */
export function problemBody(response: Response): Promise<Problem> {
  return problemOf(response, response.status);
}

/**
 * A LIMITER namespace that records every method called on any of its objects and forwards to the real one — unless
 * `instead` answers the call itself (a promise; undefined: forwarded).
 */
export function spyLimiter(instead: () => Promise<unknown> | undefined = () => undefined): {
  namespace: WorkerEnv["LIMITER"];
  calls: string[];
  /** The same calls as `<object name> <method>`. */
  byObject: string[];
} {
  const calls: string[] = [];
  const byObject: string[] = [];
  const real = (env as unknown as WorkerEnv).LIMITER;
  const namespace = {
    getByName: (name: string) =>
      new Proxy(real.getByName(name), {
        get(target, prop) {
          const value = Reflect.get(target, prop);
          if (typeof value !== "function") return value;
          return (...args: unknown[]) => {
            calls.push(String(prop));
            byObject.push(`${name} ${String(prop)}`);
            // Reflect.apply: `.apply` on an RPC method would itself be an RPC property.
            return instead() ?? Reflect.apply(value as (...a: unknown[]) => unknown, target, args);
          };
        },
      }),
  } as unknown as WorkerEnv["LIMITER"];
  return { namespace, calls, byObject };
}

/** Hooks that keep the Worker's background work (refills, give-backs, a slot's release) so a test can wait for it. */
export function background(): { waitUntil: (p: Promise<unknown>) => void; settled: () => Promise<unknown> } {
  const pending: Promise<unknown>[] = [];
  return { waitUntil: (p) => void pending.push(p), settled: () => Promise.all(pending) };
}

/** The next message on `ws` (a string), or a rejection when it closes first. */
export function nextMessage(ws: WebSocket): Promise<string> {
  return new Promise((resolve, reject) => {
    ws.addEventListener("message", (e) => resolve(String(e.data)), { once: true });
    ws.addEventListener("close", () => reject(new Error("closed before a message")), { once: true });
  });
}

/** Accepts a socket relayed to the origin's echo at `/v1/stream`: its greeting, then a ping echoed back. */
export async function openEcho(ws: WebSocket): Promise<{ greeting: string; echo: string }> {
  const greeting = nextMessage(ws);
  ws.accept();
  const hello = await greeting;
  const echo = nextMessage(ws);
  ws.send("ping");
  return { greeting: hello, echo: await echo };
}
