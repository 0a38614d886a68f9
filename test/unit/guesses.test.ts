// Addresses that guess (src/pipeline/guesses.ts): a request refused for its key counts one unit against its address's
// `guesses` budget; under it the key's own refusal stands, past it the budget's refusal is the answer; other errors,
// a missing address or no budget count nothing; a signed key's refusal is logged by key id, never with the key.
import { afterEach, describe, expect, it, vi } from "vitest";
import { LimiterError } from "../../src/base/errors.ts";
import { countGuess } from "../../src/pipeline/guesses.ts";
import { setup } from "../support/store.ts";

afterEach(() => vi.restoreAllMocks());

const settings = {
  plans: [{ name: "pro", key_prefix: "live_", signed: true, limits: [{ limit: 10, window: "1m" }] }],
  guesses: { limits: [{ limit: 2, window: "1m" }] },
  leases: false,
};

function guessing(over: Record<string, unknown> = {}) {
  const t = setup({ ...settings, ...over });
  const guess = (ip: string | null | undefined, key: string | null = "live_forged.sig") => ({
    config: t.client.config,
    client: t.client,
    ns: t.ns,
    scope: null,
    key,
    ip,
  });
  return { t, guess };
}

describe("countGuess", () => {
  it("counts each refused key against its address: under the budget the key's refusal, past it the budget's", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const { t, guess } = guessing();
    const e = new LimiterError("key_signature", "the key's signature does not prove it");
    expect(await countGuess({}, guess("198.51.100.7"), e)).toBeNull();
    expect(await countGuess({}, guess("198.51.100.7"), e)).toBeNull();
    const refused = await countGuess({}, guess("198.51.100.7"), e);
    // The address's budget refused it, and says so in the answer and in its `denied` line.
    expect(refused).toMatchObject({ name: "guess:198.51.100.7", result: { allowed: false, refusedBy: "ip" } });
    const denied = log.mock.calls.map((c) => JSON.parse(String(c[0]))).filter((l) => l.event === "denied");
    expect(denied).toMatchObject([{ refused_by: "ip" }]);
    expect(refused?.plan.limits?.[0]).toMatchObject({ limit: 2 });
    // Another address has its own budget. A guess under the budget is one call to its address's object; the refusal
    // past it came from the isolate's deny cache (the second grant left nothing).
    expect(await countGuess({}, guess("198.51.100.8"), e)).toBeNull();
    expect(t.store.calls.map((c) => c.name)).toEqual([
      "guess:198.51.100.7",
      "guess:198.51.100.7",
      "guess:198.51.100.8",
    ]);
  });

  it("counts every refusal of a key, and nothing else", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { t, guess } = guessing({ guesses: { limits: [{ limit: 1, window: "1m" }] } });
    for (const code of ["malformed_key", "invalid_key", "no_plan", "unknown_key", "key_expired"] as const) {
      const ip = `203.0.113.${code.length}`;
      await countGuess({}, guess(ip), new LimiterError(code, "x"));
      expect(await countGuess({}, guess(ip), new LimiterError(code, "x")), code).not.toBeNull();
    }
    const calls = t.store.calls.length;
    for (const e of [new LimiterError("key_required", "x"), new LimiterError("malformed_path", "x"), new Error("x")])
      expect(await countGuess({}, guess("203.0.113.99"), e)).toBeNull();
    expect(t.store.calls.length).toBe(calls);
  });

  it("counts nothing without an address, a readable one, or a budget", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const e = new LimiterError("invalid_key", "x");
    const { t, guess } = guessing();
    for (const ip of [undefined, null, "not an address"]) expect(await countGuess({}, guess(ip), e)).toBeNull();
    expect(t.store.calls).toEqual([]);
    const off = guessing({ guesses: false });
    expect(await countGuess({}, off.guess("198.51.100.9"), e)).toBeNull();
    expect(off.t.store.calls).toEqual([]);
  });

  it("logs a signed key's refusal by its code and key id, never the key; other refusals are not logged here", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const { guess } = guessing();
    await countGuess({}, guess("198.51.100.10", "live_secretbody.sig"), new LimiterError("key_expired", "x"));
    await countGuess({}, guess("198.51.100.10"), new LimiterError("invalid_key", "x"));
    await countGuess({}, guess("198.51.100.10", null), new LimiterError("key_malformed", "x"));
    const lines = warn.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
    expect(lines.map((l) => [l.event, l.code])).toEqual([
      ["key_refused", "key_expired"],
      ["key_refused", "key_malformed"],
    ]);
    expect(lines[0]?.key_id).toMatch(/^[0-9a-f]{12}$/);
    expect(lines[1]?.key_id).toBeNull();
    expect(JSON.stringify(lines)).not.toContain("secretbody");
  });
});
