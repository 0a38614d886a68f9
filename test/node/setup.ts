// Vitest setupFile for the Node stand-in (vitest.stryker.config.ts): fills `cloudflare:workers`' env and exports as
// workerd would for wrangler.toml, with ORIGIN pointing at the echo origin (as vitest.config.ts does).

import { inject } from "vitest";
import { RateLimiter } from "../../src/object/index.ts";
import proxy from "../../src/proxy/index.ts";
import { Namespace } from "./runtime.ts";
import { env, exports } from "./workers.ts";

if (env.LIMITER === undefined) {
  Object.assign(env, JSON.parse(inject("wranglerVars")) as Record<string, unknown>, {
    ORIGIN: inject("originUrl"),
    LIMITER: new Namespace(RateLimiter as never),
  });
  const ctx = { waitUntil: () => {}, passThroughOnException: () => {}, props: {} };
  exports.default = { fetch: (request: Request) => proxy.fetch(request as never, env as never, ctx as never) };
}

// workerd streams a request body without being asked; Node's fetch and Request want `duplex: "half"` for it.
if (!(globalThis.Request as { standIn?: boolean }).standIn) {
  const NodeRequest = globalThis.Request;
  const NodeFetch = globalThis.fetch;
  const halfDuplex = (init?: RequestInit) => (init?.body != null ? { duplex: "half", ...init } : init);
  globalThis.Request = class Request extends NodeRequest {
    static standIn = true;
    constructor(input: RequestInfo | URL, init?: RequestInit) {
      super(input, halfDuplex(init));
    }
  } as typeof NodeRequest;
  globalThis.fetch = (input, init) => NodeFetch(input, halfDuplex(init));
}
