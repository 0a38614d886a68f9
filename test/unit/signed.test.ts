// Signed keys in the isolate (src/pipeline/signed.ts, src/base/hmac.ts): minted and proven, each way a key can fail
// refused with its own code (every example of docs/configuration.md's table of refusals tried), a minted key with any
// one character dropped, added or changed refused under `optional` too, rotation with KEY_SECRET_PREVIOUS, expiry at
// its boundary on a clock passed in, the comparison left to Web Crypto's constant-time verify, a missing KEY_SECRET
// (its message and log line), minting an account only for a plan that counts it, and the `signed` and `guesses`
// settings.

import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import { base64url, fromBase64url } from "../../src/base/hmac.ts";
import { parseLimiterConfig } from "../../src/config/parse.ts";
import { ConfigError, type Plan } from "../../src/config/types.ts";
import { problemFor } from "../../src/pipeline/http.ts";
import {
  type MintOptions,
  mintFor,
  mintKey,
  NoAccountLimits,
  provenIdentity,
  verifyKey,
} from "../../src/pipeline/signed.ts";

const NOW = Date.UTC(2026, 10, 28);
const limits = [{ limit: 10, window: "1m" }];
const config = parseLimiterConfig(
  {
    plans: [
      { name: "pro", key_prefix: "live_", signed: true, limits },
      { name: "team", key_prefix: "team_", signed: true, limits },
      { name: "beta", key_prefix: "beta_", signed: "optional", limits },
      { name: "org", key_prefix: "org_", signed: true, limits, account: { limits } },
      { name: "free", key_prefix: "free_", limits },
    ],
  },
  "t",
);
const plan = (name: string) => config.plans.find((p) => p.name === name) as Plan;
const env = { KEY_SECRET: "s3cret-current" };

/**
 * The code `verifyKey` refuses `key` with (as `plan`'s key, under `e` at `now`), "ok" when proven, or "unsigned" when
 * it passes as an optional plan's unsigned key.
 */
async function codeOf(key: string, p = plan("pro"), e: object = env, now = NOW): Promise<string> {
  try {
    return (await verifyKey(config, p, key, { env: e, now })) === null ? "unsigned" : "ok";
  } catch (err) {
    if (err instanceof LimiterError) return err.code;
    throw err;
  }
}

/** `key` with its body replaced by `wire` (JSON), the signature kept. */
function withBody(key: string, prefix: string, wire: unknown): string {
  const sig = key.slice(key.lastIndexOf(".") + 1);
  return `${prefix}${base64url(new TextEncoder().encode(JSON.stringify(wire)))}.${sig}`;
}

function bodyOf(key: string, prefix: string): Record<string, unknown> {
  const body = key.slice(prefix.length, key.lastIndexOf("."));
  return JSON.parse(new TextDecoder().decode(fromBase64url(body) as Uint8Array));
}

afterEach(() => vi.restoreAllMocks());

describe("signed keys", () => {
  it("a minted key carries its plan, account and expiry, starts with the plan's prefix, and is proven", async () => {
    const minted = await mintKey(env, plan("pro"), { account: "acme", expires: NOW + 60_000, now: NOW });
    expect(minted).toMatchObject({ plan: "pro", account: "acme", expires: NOW + 60_000 });
    expect(minted.key).toMatch(/^live_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
    expect(minted.key.length).toBeLessThanOrEqual(config.key.maxLength);
    expect(await verifyKey(config, plan("pro"), minted.key, { env, now: NOW })).toEqual({
      plan: "pro",
      account: "acme",
      expires: NOW + 60_000,
    });
    const plain = await mintKey(env, plan("pro"), { now: NOW });
    expect(await verifyKey(config, plan("pro"), plain.key, { env, now: NOW })).toEqual({
      plan: "pro",
      account: null,
      expires: null,
    });
    // A nonce in each: two keys minted alike are two keys.
    expect((await mintKey(env, plan("pro"))).key).not.toBe((await mintKey(env, plan("pro"))).key);
  });

  it("accepts a Date as the expiry", async () => {
    const minted = await mintKey(env, plan("pro"), { expires: new Date(NOW + 1000), now: NOW });
    expect(minted.expires).toBe(NOW + 1000);
  });

  it("refuses each kind of bad key with its own code, the message never holding the key", async () => {
    const good = (await mintKey(env, plan("pro"), { account: "acme", now: NOW })).key;
    const dot = good.lastIndexOf(".");
    const sig = good.slice(dot + 1);
    const flipped = `${good.slice(0, -2)}${good.at(-2) === "A" ? "B" : "A"}${good.at(-1)}`;
    const wire = bodyOf(good, "live_");
    const cases: [string, string][] = [
      ["live_0123456789abcdef0123456789abcdef", "key_unsigned"],
      [good.slice(0, -1), "key_malformed"],
      [good.slice(0, dot + 1), "key_malformed"],
      [`live_${good.slice(8)}`, "key_malformed"],
      [`live_.${sig}`, "key_malformed"],
      [`live_bm90IGpzb24.${sig}`, "key_malformed"],
      // JSON, but not an object: `null`, a number, a list.
      [`live_bnVsbA.${sig}`, "key_malformed"],
      [`live_NDI.${sig}`, "key_malformed"],
      [`live_WzFd.${sig}`, "key_malformed"],
      [withBody(good, "live_", { ...wire, v: 2 }), "key_malformed"],
      [withBody(good, "live_", { ...wire, e: "soon" }), "key_malformed"],
      [withBody(good, "live_", { ...wire, a: "a b" }), "key_malformed"],
      [flipped, "key_signature"],
      [withBody(good, "live_", { ...wire, a: "other" }), "key_signature"],
      [withBody(good, "live_", { ...wire, s: "AAAAAAAA" }), "key_secret_retired"],
    ];
    for (const [key, code] of cases) {
      expect([key.slice(0, 24), await codeOf(key)]).toEqual([key.slice(0, 24), code]);
      try {
        await verifyKey(config, plan("pro"), key, { env, now: NOW });
      } catch (e) {
        expect((e as Error).message).not.toContain(key.slice(5, 20));
      }
    }
  });

  it("refuses a signature respelt in base64url (another key with the same bytes) as one that does not prove it", async () => {
    const good = (await mintKey(env, plan("pro"), { now: NOW })).key;
    // The last of 43 characters carries 4 bits and 2 unused: setting one makes another spelling of the same bytes.
    const last = good.at(-1) as string;
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const respelt = `${good.slice(0, -1)}${alphabet[alphabet.indexOf(last) ^ 1]}`;
    expect(fromBase64url(respelt.slice(respelt.lastIndexOf(".") + 1))).toBeNull();
    expect(await codeOf(respelt)).toBe("key_signature");
  });

  it("names another plan or a plan that no longer exists", async () => {
    const team = (await mintKey(env, plan("team"), { now: NOW })).key;
    // team's body and signature behind pro's prefix: proven, but minted for another plan.
    expect(await codeOf(`live_${team.slice("team_".length)}`)).toBe("key_plan_mismatch");
    const gone = (await mintKey(env, { name: "gold", keyPrefix: "live_" }, { now: NOW })).key;
    expect(await codeOf(gone)).toBe("key_plan_unknown");
  });

  it("expires at its expiry: accepted 1 ms before, refused at it (also once proven and remembered)", async () => {
    const { key } = await mintKey(env, plan("pro"), { expires: NOW + 5000, now: NOW });
    expect(await codeOf(key, plan("pro"), env, NOW + 4999)).toBe("ok");
    expect(await codeOf(key, plan("pro"), env, NOW + 5000)).toBe("key_expired");
    expect(await codeOf(key, plan("pro"), env, NOW + 9000)).toBe("key_expired");
  });

  it("rotation: KEY_SECRET_PREVIOUS proves keys of the old secret; once it is gone they are refused as retired", async () => {
    const old = (await mintKey({ KEY_SECRET: "old-secret" }, plan("pro"), { now: NOW })).key;
    const rotating = { KEY_SECRET: "new-secret", KEY_SECRET_PREVIOUS: "old-secret" };
    expect(await codeOf(old, plan("pro"), rotating)).toBe("ok");
    const fresh = (await mintKey(rotating, plan("pro"), { now: NOW })).key;
    expect(await codeOf(fresh, plan("pro"), rotating)).toBe("ok");
    // Minted with the current secret, never the previous one.
    expect(await codeOf(fresh, plan("pro"), { KEY_SECRET: "old-secret" })).toBe("key_secret_retired");
    expect(await codeOf(old, plan("pro"), { KEY_SECRET: "new-secret" })).toBe("key_secret_retired");
    expect(await codeOf(fresh, plan("pro"), { KEY_SECRET: "new-secret" })).toBe("ok");
  });

  it("leaves the comparison to crypto.subtle.verify (constant time), once per key per isolate", async () => {
    const verify = vi.spyOn(crypto.subtle, "verify");
    const { key } = await mintKey({ KEY_SECRET: "spy-secret" }, plan("pro"), { now: NOW });
    for (let i = 0; i < 3; i++) expect(await codeOf(key, plan("pro"), { KEY_SECRET: "spy-secret" })).toBe("ok");
    expect(verify).toHaveBeenCalledTimes(1);
    expect(verify.mock.calls[0]?.[0]).toBe("HMAC");
    // A forged one: verified (and refused) every time it comes.
    const forged = `${key.slice(0, -2)}${key.at(-2) === "A" ? "B" : "A"}${key.at(-1)}`;
    expect(await codeOf(forged, plan("pro"), { KEY_SECRET: "spy-secret" })).toBe("key_signature");
    expect(await codeOf(forged, plan("pro"), { KEY_SECRET: "spy-secret" })).toBe("key_signature");
    expect(verify).toHaveBeenCalledTimes(3);
  });

  it("a key a verify hook gave a signed plan must still start with its prefix; the hook's account stands unless the key proves one", async () => {
    const minted = (await mintKey(env, plan("pro"), { now: NOW })).key;
    expect(await codeOf(minted.replace(/^live_/, "other_"))).toBe("key_plan_mismatch");
    expect(await verifyKey(config, plan("beta"), "other_key", { env, now: NOW })).toBeNull();
    const at = { env, now: NOW };
    const hooked = { name: "key:x", plan: plan("pro"), account: "from-hook" };
    expect((await provenIdentity(config, hooked, minted, at)).account).toBe("from-hook");
    const withAccount = (await mintKey(env, plan("pro"), { account: "acme", now: NOW })).key;
    expect((await provenIdentity(config, hooked, withAccount, at)).account).toBe("acme");
    const optional = { name: "key:y", plan: plan("beta"), account: "from-hook" };
    expect((await provenIdentity(config, optional, "beta_unsigned", at)).account).toBe("from-hook");
    expect((await provenIdentity(config, { name: "key:z", plan: plan("pro") }, minted, at)).account).toBeNull();
  });

  it("an optional plan lets keys that do not read as minted pass unsigned, and checks those that do", async () => {
    expect(await verifyKey(config, plan("beta"), "beta_legacy0123", { env, now: NOW })).toBeNull();
    const minted = (await mintKey(env, plan("beta"), { account: "acme", now: NOW })).key;
    expect(await verifyKey(config, plan("beta"), minted, { env, now: NOW })).toMatchObject({ account: "acme" });
    const flipped = `${minted.slice(0, -2)}${minted.at(-2) === "A" ? "B" : "A"}${minted.at(-1)}`;
    expect(await codeOf(flipped, plan("beta"))).toBe("key_signature");
  });

  it("without KEY_SECRET: a ConfigError saying how to set it, deployed and locally, logged once per env", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const local = {};
    await expect(verifyKey(config, plan("pro"), "live_x.y", { env: local, now: NOW })).rejects.toThrow(ConfigError);
    await expect(mintKey({ KEY_SECRET: "" }, plan("pro"))).rejects.toThrow(
      /^KEY_SECRET: not set, and plan "pro" has signed keys; set the secret with `wrangler secret put KEY_SECRET` .*, or locally a line KEY_SECRET=.* in \.dev\.vars beside wrangler\.toml, then restart wrangler dev \(it reads \.dev\.vars when it starts\)$/,
    );
    // The same env again: thrown again, not logged again.
    await expect(verifyKey(config, plan("pro"), "live_x.y", { env: local, now: NOW })).rejects.toThrow(ConfigError);
    const lines = errors.mock.calls.map(([line]) => JSON.parse(String(line)));
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      expect(line).toEqual({
        event: "config_error",
        message: expect.stringMatching(/^KEY_SECRET: not set, .*\.dev\.vars/),
      });
    }
  });

  it("mints an account only for a plan that counts accounts (its account limits), naming the field otherwise", async () => {
    const refused = mintFor(config, env, "pro", { account: "acme", now: NOW });
    await expect(refused).rejects.toThrow(NoAccountLimits);
    await expect(refused).rejects.toThrow(RangeError);
    await expect(refused).rejects.toThrow(/^account: plan "pro" has no account limits, .* or mint without an account$/);
    expect(await mintFor(config, env, "pro", { account: null, now: NOW })).toMatchObject({
      plan: "pro",
      account: null,
    });
    expect(await mintFor(config, env, "pro", { now: NOW })).toMatchObject({ plan: "pro", account: null });
    const org = await mintFor(config, env, "org", { account: "acme", now: NOW });
    expect(await verifyKey(config, plan("org"), org.key, { env, now: NOW })).toMatchObject({ account: "acme" });
  });

  it("refuses to mint for a bad account, a past expiry or a name that is no plan's, naming the field", async () => {
    await expect(mintKey(env, plan("pro"), { account: "a b" })).rejects.toThrow(/^account: /);
    await expect(mintKey(env, plan("pro"), { account: "x".repeat(65) })).rejects.toThrow(/^account: /);
    await expect(mintKey(env, plan("pro"), { expires: NOW, now: NOW })).rejects.toThrow(/^expires: /);
    await expect(mintKey(env, plan("pro"), { expires: Number.NaN, now: NOW })).rejects.toThrow(/^expires: /);
    await expect(mintKey(env, { name: "no plan", keyPrefix: "x_" })).rejects.toThrow(/^plan: /);
  });

  it("each refusal is a 401 problem with its code", async () => {
    for (const code of ["key_unsigned", "key_signature", "key_expired", "key_plan_unknown"] as const) {
      const res = problemFor(new LimiterError(code, "why"), true);
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toBe('Bearer realm="api"');
      expect(await res.json()).toMatchObject({ status: 401, detail: "why", code });
    }
    expect(await problemFor(new LimiterError("key_required", "x")).json()).not.toHaveProperty("code");
  });
});

/** The keys minted while `fn` runs have a nonce of zeros: the same key for the same claims, so the cases below repeat. */
async function withFixedNonce<T>(fn: () => Promise<T>): Promise<T> {
  const random = vi.spyOn(crypto, "getRandomValues").mockImplementation((a) => a);
  try {
    return await fn();
  } finally {
    random.mockRestore();
  }
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/** The base64url character after `c` (the last of 43 characters carries 4 bits: the next one is another spelling). */
const next = (c: string) => ALPHABET[(ALPHABET.indexOf(c) + 1) % 64] as string;

/**
 * The examples of docs/configuration.md's table of refusals ("Signed keys"), each by its words there: the key it
 * describes, for the plan `p`. A key minted for `p` is `<prefix><body>.<signature>`.
 */
const EXAMPLES: Record<string, (p: Plan) => Promise<string>> = {
  "a key never minted": async (p) => `${p.keyPrefix}0123456789abcdef0123456789abcdef`,
  "a key with a `.` but no signature after it": async (p) => `${p.keyPrefix}ab.cd`,
  "a minted key cut before its `.`": async (p) => changed(p, (b) => b, ""),
  "cut after its `.`": async (p) => changed(p, (b) => `${b}.`, ""),
  "cut within its signature": async (p) => (await minted(p)).slice(0, -10),
  "with its `.` dropped": async (p) =>
    changed(
      p,
      (b) => b,
      (t) => t,
    ),
  "with a character dropped from its body": async (p) =>
    changed(
      p,
      (b) => `${b.slice(0, 20)}${b.slice(21)}.`,
      (t) => t,
    ),
  "with a character added to its body": async (p) =>
    changed(
      p,
      (b) => `${b.slice(0, 20)}A${b.slice(20)}.`,
      (t) => t,
    ),
  "with a character dropped from its signature": async (p) =>
    changed(
      p,
      (b) => `${b}.`,
      (t) => t.slice(0, 10) + t.slice(11),
    ),
  "with a character added to its signature": async (p) =>
    changed(
      p,
      (b) => `${b}.`,
      (t) => `${t.slice(0, 10)}A${t.slice(10)}`,
    ),
  "a minted key with the last character of its signature changed": async (p) =>
    changed(
      p,
      (b) => `${b}.`,
      (t) => t.slice(0, -1) + next(t.at(-1) as string),
    ),
  "with the first character of its signature changed": async (p) =>
    changed(
      p,
      (b) => `${b}.`,
      (t) => next(t[0] as string) + t.slice(1),
    ),
  "with its account changed": async (p) => {
    const key = await minted(p, { account: "acme" });
    return withBody(key, p.keyPrefix, { ...bodyOf(key, p.keyPrefix), a: "acmf" });
  },
  "a key minted with a secret since retired": async (p) =>
    (await mintKey({ KEY_SECRET: "retired" }, p, { now: NOW })).key,
  "a minted key past its expiry": async (p) => minted(p, { expires: NOW, now: NOW - 1 }),
  "another plan's minted key behind this plan's prefix": async (p) =>
    `${p.keyPrefix}${(await minted(plan("team"))).slice("team_".length)}`,
  "a key minted for a plan since removed": async (p) => minted({ name: "gone", keyPrefix: p.keyPrefix }),
};

/** A key minted for `p` with `env`'s secret, at `NOW`. */
async function minted(p: { name: string; keyPrefix: string }, options: MintOptions = {}): Promise<string> {
  return (await mintKey(env, p, { now: NOW, ...options })).key;
}

/**
 * A key minted for `p` (`<prefix><body>.<signature>`) with its body and `.` as `body` writes them and its signature as
 * `signature` does (`""`: left out).
 */
async function changed(p: Plan, body: (b: string) => string, signature: ((t: string) => string) | ""): Promise<string> {
  const key = await minted(p);
  const dot = key.lastIndexOf(".");
  const sig = key.slice(dot + 1);
  return `${p.keyPrefix}${body(key.slice(p.keyPrefix.length, dot))}${signature === "" ? "" : signature(sig)}`;
}

/** The rows of docs/configuration.md's table of refusals: each code with its examples. */
function refusalTable(): { code: string; examples: string[] }[] {
  const lines = readFileSync("docs/configuration.md", "utf8").split("\n");
  const start = lines.indexOf("| `code` | the key | for example |");
  expect(start).toBeGreaterThan(0);
  const rows: { code: string; examples: string[] }[] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith("|")) break;
    const cells = line.slice(2, -2).split(" | ");
    expect(cells).toHaveLength(3);
    rows.push({ code: (cells[0] as string).replaceAll("`", ""), examples: (cells[2] as string).split("; ") });
  }
  return rows;
}

describe("the docs' table of refusals, against the code", () => {
  it("names every refusal of a signed key once, as docs/http.md lists them, and each example is tried here", () => {
    const rows = refusalTable();
    const codes = rows.map((r) => r.code);
    expect(codes).toEqual([
      "key_unsigned",
      "key_malformed",
      "key_signature",
      "key_secret_retired",
      "key_expired",
      "key_plan_mismatch",
      "key_plan_unknown",
    ]);
    const http =
      readFileSync("docs/http.md", "utf8")
        .split("\n")
        .find((l) => l.includes("`key_unsigned`")) ?? "";
    expect([...http.matchAll(/`(key_[a-z_]+)`/g)].map((m) => m[1])).toEqual(codes);
    // Every example in the table has its key here, and every key here is an example in the table.
    expect(rows.flatMap((r) => r.examples).sort()).toEqual(Object.keys(EXAMPLES).sort());
    for (const row of rows) expect(row.examples.length).toBeGreaterThan(0);
  });

  it("signed = true: each example gets its row's code", async () => {
    await withFixedNonce(async () => {
      for (const { code, examples } of refusalTable()) {
        for (const example of examples) {
          const key = await (EXAMPLES[example] as (p: Plan) => Promise<string>)(plan("pro"));
          expect([example, await codeOf(key)]).toEqual([example, code]);
        }
      }
    });
  });

  it("signed = \"optional\": the first row's examples pass unsigned, every other gets its row's code", async () => {
    await withFixedNonce(async () => {
      for (const { code, examples } of refusalTable()) {
        for (const example of examples) {
          const key = await (EXAMPLES[example] as (p: Plan) => Promise<string>)(plan("beta"));
          const expected = code === "key_unsigned" ? "unsigned" : code;
          expect([example, await codeOf(key, plan("beta"))]).toEqual([example, expected]);
        }
      }
    });
  });
});

describe("a minted key with one character dropped, added or changed", () => {
  it("is refused wherever the change is, under optional too: never taken as an unsigned key", async () => {
    await withFixedNonce(async () => {
      for (const p of [plan("pro"), plan("beta")]) {
        const key = await minted(p, { account: "acme", expires: NOW + 60_000 });
        expect(await codeOf(key, p)).toBe("ok");
        const changed = new Set<string>();
        for (let i = p.keyPrefix.length; i <= key.length; i++) {
          const [before, after] = [key.slice(0, i), key.slice(i)];
          if (i < key.length) changed.add(before + after.slice(1));
          for (const c of ["A", "z", "-", "."]) {
            changed.add(before + c + after);
            if (i < key.length) changed.add(before + c + after.slice(1));
          }
        }
        changed.delete(key);
        for (const k of changed) {
          const code = await codeOf(k, p);
          expect([k, code]).toEqual([k, expect.stringMatching(/^key_(malformed|signature|secret_retired)$/)]);
        }
      }
    });
  });
});

describe("base64url", () => {
  it("round-trips any bytes, and reads only its own spelling", () => {
    for (let n = 0; n < 40; n++) {
      const bytes = crypto.getRandomValues(new Uint8Array(n));
      expect(fromBase64url(base64url(bytes))).toEqual(bytes);
    }
    expect(fromBase64url("A")).toBeNull();
    expect(fromBase64url("AB+/")).toBeNull();
    expect(fromBase64url("AB==")).toBeNull();
    expect(fromBase64url("AB")).toBeNull();
    expect(fromBase64url("AA")).toEqual(new Uint8Array([0]));
  });
});

describe("settings", () => {
  const parse = (extra: Record<string, unknown>, planExtra: Record<string, unknown> = {}) =>
    parseLimiterConfig({ plans: [{ name: "p", key_prefix: "p_", limits, ...planExtra }], ...extra }, "t");

  it("signed: true, optional or false; anything else names the field", () => {
    expect(parse({}, { signed: true }).plans[0]?.signed).toBe("required");
    expect(parse({}, { signed: "optional" }).plans[0]?.signed).toBe("optional");
    expect(parse({}, { signed: false }).plans[0]?.signed).toBeUndefined();
    expect(() => parse({}, { signed: "yes" })).toThrow(/^t\.plans\[0\]\.signed: expected true/);
  });

  it("guesses: on by default with a signed plan, off without; its own limits and penalty; false turns it off", () => {
    const on = parse({}, { signed: true }).guesses;
    expect(on?.kind).toBe("guess");
    expect(on?.plan.limits).toMatchObject([{ name: "guess-per-minute", limit: 10, windowMs: 60_000 }]);
    expect(on?.plan.penalty).toEqual({ after: 3, withinMs: 600_000, blockMs: 900_000, maxBlockMs: 86_400_000 });
    expect(parse({}).guesses).toBeUndefined();
    expect(parse({ guesses: false }, { signed: true }).guesses).toBeUndefined();
    const own = parse({ guesses: { limits: [{ limit: 3, window: "1h" }] } }).guesses;
    expect(own?.plan.limits).toMatchObject([{ name: "guess-per-hour", limit: 3 }]);
    expect(own?.plan.penalty).toBeNull();
    expect(() => parse({ guesses: true })).toThrow(/^t\.guesses: expected/);
    expect(() => parse({ guesses: {} })).toThrow(/^t\.guesses\.limits: required/);
    expect(() => parse({ guesses: { limits, x: 1 } })).toThrow(/^t\.guesses\.x/);
    expect(() => parse({ guesses: { limits, penalty: { after: 0 } } })).toThrow(/^t\.guesses\.penalty\.after/);
  });
});
