// The verify hook's verifier (src/pipeline/verify-hook.ts) on a clock the test moves: answers read as plans and
// accounts, known and unknown keys cached apart for their own times, one call for the lookups of a key in flight at
// once, a bounded table that drops the least recently used key, failures and bad answers, and its options' errors.
import { afterEach, describe, expect, it, vi } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import { keyId } from "../../src/base/log.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import { ConfigError, type LimiterConfig } from "../../src/config/types.ts";
import {
  KeyVerifier,
  VERIFY_CACHE_DEFAULTS,
  type VerifyAnswer,
  type VerifyCacheSettings,
  verifierOf,
} from "../../src/pipeline/verify-hook.ts";

afterEach(() => vi.restoreAllMocks());

const config = parseLimiterConfig(
  {
    limits: [{ limit: 5, window: "1m" }],
    plans: [
      { name: "free", key_prefix: "free_", limits: [{ limit: 1, window: "1m" }] },
      { name: "pro", key_prefix: "pro_", limits: [{ limit: 100, window: "1m" }] },
    ],
    key: { pattern: "[a-z_0-9]+" },
  },
  "t",
) as LimiterConfig;
const ENV = { KEYS: "kv" };

/** A verifier over `answers` (by key; missing: null) that counts its calls per key, on a clock the test moves. */
function setup(answers: Record<string, VerifyAnswer | Error> = {}, settings: Partial<VerifyCacheSettings> = {}) {
  let now = 1_000_000;
  const calls: string[] = [];
  const envs: unknown[] = [];
  const hook = async (key: string, env: object) => {
    calls.push(key);
    envs.push(env);
    const a = answers[key];
    if (a instanceof Error) throw a;
    return a ?? null;
  };
  const v = new KeyVerifier(config, hook, { ...VERIFY_CACHE_DEFAULTS, ...settings }, () => now);
  return {
    v,
    calls,
    envs,
    answers,
    tick: (ms: number) => {
      now += ms;
    },
    id: (key: string) => v.identify(ENV, key, null),
  };
}

const codeOf = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    return e instanceof LimiterError ? e.code : (e as Error).name;
  }
  return "none";
};

describe("KeyVerifier: answers", () => {
  it("a plan's name, { plan, account }, or the default plan: the key's object name, that plan, that account", async () => {
    const s = setup({
      a: "pro",
      b: { plan: "free", account: "acme" },
      c: "default",
      d: { plan: "pro", account: null },
    });
    expect(await s.id("a")).toEqual({ name: "key:a", plan: config.plans[1], account: null });
    expect(await s.id("b")).toEqual({ name: "key:b", plan: config.plans[0], account: "acme" });
    expect((await s.id("c")).plan).toBe(config.defaultPlan);
    expect((await s.id("d")).account).toBeNull();
    // The hook's plan wins over the key's prefix; the Worker's env is passed through; a named limiter's scope.
    const p = setup({ free_x: "pro" });
    expect((await p.v.identify(ENV, "free_x", "api")).plan.name).toBe("pro");
    expect((await p.v.identify(ENV, "free_x", "api")).name).toBe("api/key:free_x");
    expect(p.envs).toEqual([ENV]);
  });

  it("null (or undefined): unknown_key, and nothing else is asked", async () => {
    const s = setup();
    expect(await codeOf(s.id("nobody"))).toBe("unknown_key");
    expect(s.calls).toEqual(["nobody"]);
  });

  it("a key that is not key.pattern: invalid_key, and the hook is not asked", async () => {
    const s = setup({ "BAD-KEY": "pro" });
    expect(await codeOf(s.id("BAD-KEY"))).toBe("invalid_key");
    expect(s.calls).toEqual([]);
  });

  it.each([
    [
      "gold",
      'verify: the hook answered the plan "gold", which this limiter does not have (its plans: "default", "free", "pro")',
    ],
    [{ plan: 7 }, "verify: expected a plan's name, { plan, account? } or null, got object"],
    [42, "verify: expected a plan's name, { plan, account? } or null, got number"],
    [
      { plan: "pro", account: "a b" },
      "verify: the answer's account: expected an account name of 1 to 128 printable ASCII characters without spaces or commas",
    ],
  ])("answer %j: a ConfigError naming what is wrong (never the key), not cached", async (answer, message) => {
    const s = setup({ k: answer as VerifyAnswer });
    await expect(s.id("k")).rejects.toThrow(new ConfigError(message));
    await expect(s.id("k")).rejects.toThrow(ConfigError);
    expect(s.calls).toEqual(["k", "k"]);
  });
});

describe("KeyVerifier: the cache", () => {
  it("a known key is asked once per hit time, an unknown one once per miss time, each apart", async () => {
    const s = setup({ known: "pro" }, { hitMs: 300_000, missMs: 30_000 });
    for (let i = 0; i < 5; i++) {
      await s.id("known");
      await codeOf(s.id("forged"));
    }
    expect(s.calls).toEqual(["known", "forged"]);
    s.tick(29_999);
    await codeOf(s.id("forged"));
    expect(s.calls).toHaveLength(2);
    s.tick(1);
    await codeOf(s.id("forged"));
    expect(s.calls).toEqual(["known", "forged", "forged"]);
    s.tick(300_000 - 30_000 - 1);
    await s.id("known");
    expect(s.calls).toHaveLength(3);
    s.tick(1);
    await s.id("known");
    expect(s.calls).toEqual(["known", "forged", "forged", "known"]);
  });

  it("a key that became known is found after its miss time, and one revoked after its hit time", async () => {
    const s = setup({}, { hitMs: 10_000, missMs: 1_000 });
    expect(await codeOf(s.id("k"))).toBe("unknown_key");
    s.answers.k = "free";
    expect(await codeOf(s.id("k"))).toBe("unknown_key");
    s.tick(1_000);
    expect((await s.id("k")).plan.name).toBe("free");
    s.answers.k = null;
    s.tick(9_999);
    expect((await s.id("k")).plan.name).toBe("free");
    s.tick(1);
    expect(await codeOf(s.id("k"))).toBe("unknown_key");
  });

  it("a flood of one forged key at once costs one lookup; so does one of a known key", async () => {
    let release = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let calls = 0;
    const v = new KeyVerifier(
      config,
      async (key) => {
        calls++;
        await gate;
        return key === "good" ? "pro" : null;
      },
      VERIFY_CACHE_DEFAULTS,
      () => 0,
    );
    const forged = Array.from({ length: 200 }, () => codeOf(v.identify(ENV, "forged", null)));
    const good = Array.from({ length: 200 }, () => v.identify(ENV, "good", null));
    release();
    expect(new Set(await Promise.all(forged))).toEqual(new Set(["unknown_key"]));
    expect(new Set((await Promise.all(good)).map((i) => i.plan.name))).toEqual(new Set(["pro"]));
    expect(calls).toBe(2);
  });

  it("holds at most max keys, dropping the least recently used", async () => {
    const s = setup({ a: "pro", b: "pro", c: "pro" }, { max: 2 });
    await s.id("a");
    await s.id("b");
    await s.id("a"); // a is now the most recently used
    await s.id("c"); // drops b
    expect(s.v.size).toBe(2);
    await s.id("a");
    await s.id("c");
    expect(s.calls).toEqual(["a", "b", "c"]);
    await s.id("b");
    expect(s.calls).toEqual(["a", "b", "c", "b"]);
    expect(s.v.size).toBe(2);
  });

  it("a hook that throws: verify_failed for every request waiting on it, logged by key id, not cached", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const s = setup({ k: new Error("KV is down, k not read") });
    const codes = await Promise.all([codeOf(s.id("k")), codeOf(s.id("k")), codeOf(s.id("k"))]);
    expect(codes).toEqual(["verify_failed", "verify_failed", "verify_failed"]);
    expect(s.calls).toEqual(["k"]);
    expect(error.mock.calls.map((c) => JSON.parse(String(c[0])))).toEqual([
      { event: "verify_failed", key_id: await keyId("key:k"), message: "KV is down, <key> not read" },
    ]);
    // The next request asks again: the store may be back.
    s.answers.k = "free";
    expect((await s.id("k")).plan.name).toBe("free");
    expect(s.calls).toEqual(["k", "k"]);
  });
});

describe("KeyVerifier: a hook that hangs", () => {
  it("fails after object_timeout (verify_failed for every request waiting on it), and is asked again after", async () => {
    vi.useFakeTimers();
    try {
      vi.spyOn(console, "error").mockImplementation(() => {});
      const quick = parseLimiterConfig({ limits: [{ limit: 5, window: "1m" }], object_timeout: "2s" }, "t");
      let calls = 0;
      const v = new KeyVerifier(
        quick,
        (key) => {
          calls++;
          return calls === 1 ? new Promise<VerifyAnswer>(() => {}) : key === "k" ? "default" : null;
        },
        VERIFY_CACHE_DEFAULTS,
        () => 0,
      );
      const waiting = [codeOf(v.identify(ENV, "k", null)), codeOf(v.identify(ENV, "k", null))];
      await vi.advanceTimersByTimeAsync(1999);
      expect(calls).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(await Promise.all(waiting)).toEqual(["verify_failed", "verify_failed"]);
      expect((await v.identify(ENV, "k", null)).plan.name).toBe("default");
      expect(calls).toBe(2);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("verifierOf: createLimiter's verify and verifyCache", () => {
  const hook = () => null;
  it("null without a hook; the defaults (5m, 30s, 10,000 keys) and durations as every duration is read", () => {
    expect(verifierOf(config, {}, Date.now, "createLimiter")).toBeNull();
    expect(VERIFY_CACHE_DEFAULTS).toEqual({ hitMs: 300_000, missMs: 30_000, max: 10_000 });
    expect(verifierOf(config, { verify: hook }, Date.now, "createLimiter")).toBeInstanceOf(KeyVerifier);
    expect(
      verifierOf(config, { verify: hook, verifyCache: { hit: "1h", miss: 500, max: 3 } }, Date.now, "createLimiter"),
    ).toBeInstanceOf(KeyVerifier);
  });

  it.each([
    [{ verify: "kv" }, "createLimiter.verify: expected a function (key, env) => plan name, { plan, account } or null"],
    [{ verifyCache: { hit: "1m" } }, "createLimiter.verifyCache: only with createLimiter.verify"],
    [
      { verify: hook, verifyCache: { hits: "1m" } },
      "createLimiter.verifyCache.hits: unknown setting; expected one of hit, miss, max",
    ],
    [{ verify: hook, verifyCache: { miss: "soon" } }, /^createLimiter\.verifyCache\.miss: /],
    [{ verify: hook, verifyCache: { max: 0 } }, "createLimiter.verifyCache.max: expected a positive integer, got 0"],
  ])("%j: %s", (options, message) => {
    expect(() => verifierOf(config, options, Date.now, "createLimiter")).toThrow(message);
  });
});
