// Smoke test: the RateLimiter DO is reachable over RPC and is SQLite-backed.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { RateLimiter } from "../../src/limiter.ts";

describe("RateLimiter DO (smoke)", () => {
  it("answers ping() over RPC", async () => {
    const stub = env.LIMITER.getByName("k");
    expect(await stub.ping()).toBe("pong");
  });

  it("has SQL storage", async () => {
    const stub = env.LIMITER.getByName("k");
    const ok = await runInDurableObject(stub, (instance, state) => {
      expect(instance).toBeInstanceOf(RateLimiter);
      expect(state.storage.sql).toBeDefined();
      return state.storage.sql.exec("SELECT count(*) AS n FROM meta").one().n;
    });
    expect(ok).toBe(0);
  });
});
