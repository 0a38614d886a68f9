// Shared by the integration tests: the Worker with a chosen config, fake limiter namespaces, the origin's log.
import { env } from "cloudflare:workers";
import { inject } from "vitest";
import { type DecisionResult, encodeDecision, type WireDecision } from "../../src/wire.ts";
import type { WorkerEnv } from "../../src/worker.ts";

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

/** A decision in the object's wire form (src/wire.ts). */
export function toWire(result: DecisionResult): WireDecision {
  return encodeDecision({ ...result, blockedUntil: result.now + result.blockedForMs });
}

/** A LIMITER namespace whose objects answer what `decide` resolves to, counting calls. */
export function fakeLimiter(decide: (call: number) => Promise<DecisionResult>): {
  namespace: WorkerEnv["LIMITER"];
  calls: () => number;
} {
  let calls = 0;
  const stub = {
    decide: () => {
      calls += 1;
      return decide(calls).then(toWire);
    },
  };
  const namespace = { getByName: () => stub } as unknown as WorkerEnv["LIMITER"];
  return { namespace, calls: () => calls };
}

/** A LIMITER namespace that forwards to the real one, counting `decide` calls. */
export function countingLimiter(): { namespace: WorkerEnv["LIMITER"]; calls: () => number } {
  const real = (env as unknown as WorkerEnv).LIMITER;
  let calls = 0;
  const namespace = {
    getByName: (name: string) => {
      const stub = real.getByName(name);
      return {
        decide: (...args: Parameters<typeof stub.decide>) => {
          calls += 1;
          return stub.decide(...args);
        },
      };
    },
  } as unknown as WorkerEnv["LIMITER"];
  return { namespace, calls: () => calls };
}

/** An error shaped like the runtime's Durable Object errors. */
export function objectError(flags: { retryable?: boolean; overloaded?: boolean }): Error {
  return Object.assign(new Error("Durable Object reset because its code was updated."), flags);
}
