// docs/operating.md's status examples against the Worker's real answers: the example for `test_demo` under the
// repo's wrangler.toml has every field the status has, in the same order and shape, with the values the config and
// 7 requests decide; the billing example's `starter` and `pp_` fragments match a status under those plans.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import configuration from "../../docs/configuration.md?raw";
import operating from "../../docs/operating.md?raw";
import { keyId } from "../../src/base/log.ts";
import { envWith, freshKey, handle, request, type WorkerEnv } from "./helpers.ts";

const TOKEN = "docs-token";

/** docs/configuration.md's billing example ("Quotas and credits"), as the JSON the dashboard would hold. */
const BILLING = {
  usage: true,
  plans: [
    {
      name: "starter",
      key_prefix: "st_",
      limits: [
        { limit: 20, window: "1s" },
        { limit: 10000, period: "month", time_zone: "America/New_York" },
      ],
    },
    {
      name: "prepaid",
      key_prefix: "pp_",
      limits: [{ limit: 50, window: "1s" }],
      credits: { initial: 1000, refill: { amount: 1000, period: "month" } },
    },
  ],
};

/** The JSON code blocks of docs/operating.md, parsed. */
const examples = [...operating.matchAll(/```json\n([\s\S]*?)```/g)].map(
  (m) => JSON.parse(m[1] ?? "") as Record<string, unknown>,
);

function example(test: (e: Record<string, unknown>) => boolean): Record<string, unknown> {
  const found = examples.find(test);
  if (!found) throw new Error("no such example in docs/operating.md");
  return found;
}

/** The shape of a JSON value: its keys in order, each with its shape (an array by its first element's). */
function shape(value: unknown): unknown {
  if (Array.isArray(value)) return value.length === 0 ? [] : [shape(value[0])];
  if (value === null || typeof value !== "object") return value === null ? null : typeof value;
  return Object.entries(value).map(([k, v]) => [k, shape(v)]);
}

async function status(e: WorkerEnv, key: string): Promise<Record<string, unknown>> {
  const res = await handle(
    new Request("https://limiter.example/__limiter/status", {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ key }),
    }),
    e,
  );
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

async function send(e: WorkerEnv, key: string, times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const res = await handle(request(key, "/x"), e);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  }
}

describe("docs/operating.md's status examples", () => {
  it("test_demo under the repo's wrangler.toml: every field, in order, with the values 7 requests leave", async () => {
    const doc = example((e) => e.key_id !== undefined);
    const e = envWith((env as unknown as WorkerEnv).RATE_LIMIT, { ADMIN_TOKEN: TOKEN });
    const key = freshKey("test_demo_");
    await send(e, key, 7);
    const real = await status(e, key);

    expect(shape(doc)).toEqual(shape(real));
    expect(doc.key_id).toBe(await keyId("test_demo"));
    expect(doc.now_ms).toBe(Date.parse(doc.now as string));
    const history = doc.history as Record<string, unknown>;
    expect(history.start_ms).toBe((doc.now_ms as number) - (history.window_ms as number));
    const { key_id, now, now_ms, limits, history: h, ...rest } = real;
    const { key_id: _i, now: _n, now_ms: _m, limits: docLimits, history: docHistory, ...docRest } = doc;
    expect(docRest).toEqual(rest);
    const withoutReset = (ls: unknown) => (ls as Record<string, unknown>[]).map(({ reset_ms, ...l }) => l);
    expect(withoutReset(docLimits)).toEqual(withoutReset(limits));
    const { start_ms, counts, ...hRest } = h as Record<string, unknown>;
    const { start_ms: _s, counts: docCounts, ...docHRest } = docHistory as Record<string, unknown>;
    expect(docHRest).toEqual(hRest);
    expect((docCounts as unknown[]).at(-1)).toBe((counts as unknown[]).at(-1));
  });

  it("the billing example's plans: quotas, credits and usage as documented", async () => {
    // BILLING is docs/configuration.md's example, written as JSON.
    for (const line of [
      "usage = true                                   # every plan below keeps exact usage per day",
      '{ name = "starter", key_prefix = "st_", limits = [',
      '{ limit = 20, window = "1s" },',
      '{ limit = 10000, period = "month", time_zone = "America/New_York" },',
      '{ name = "prepaid", key_prefix = "pp_", limits = [ { limit = 50, window = "1s" } ],',
      'credits = { initial = 1000, refill = { amount = 1000, period = "month" } } },',
    ]) {
      expect(configuration).toContain(line);
    }
    const e = envWith(BILLING, { ADMIN_TOKEN: TOKEN });
    for (const [plan, prefix] of [
      ["starter", "st_"],
      ["prepaid", "pp_"],
    ] as const) {
      const doc = example((x) => x.plan === plan);
      const key = freshKey(prefix);
      await send(e, key, 1);
      const real = await status(e, key);
      const part = Object.fromEntries(Object.keys(doc).map((k) => [k, real[k]]));
      expect(shape(doc), plan).toEqual(shape(part));
      // A quota's reset depends on the day the test runs: the rest is what the plan and one request decide.
      const noReset = (x: Record<string, unknown>) => ({
        ...x,
        quotas: (x.quotas as Record<string, unknown>[]).map(({ resets_at, resets_at_ms, ...q }) => q),
      });
      expect(noReset(doc), plan).toEqual(noReset(part));
    }
  });
});
