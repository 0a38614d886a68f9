// docs/http.md's samples against the Worker's real answers: the draft-11 RateLimit fields, the older forms' table
// and the sample 429 body are what the proxy sends for the state they describe (100 a second and 1,000 a minute, a
// request of cost 58, another 588 ms later), on an object whose clock the test holds — field for field, value for value.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import http from "../../docs/http.md?raw";
import type { RateLimiter } from "../../src/object/index.ts";
import { envWith, freshKey, handle, request, type WorkerEnv } from "./helpers.ts";

beforeEach(() => {
  vi.spyOn(console, "log").mockImplementation(() => {});
});
afterEach(() => vi.restoreAllMocks());

/** The state the samples describe: these limits, and a request of cost 58 on /v1/batch. */
const settings = (headers: string) => ({
  limits: [
    { limit: 100, window: "1s" },
    { limit: 1000, window: "1m" },
  ],
  costs: [{ path: "/v1/batch", cost: 58 }],
  leases: false,
  headers,
});

/**
 * Sends `key`'s request of cost 58, then (588 ms later on the key's object's clock) another: their answers. The
 * object's clock is the test's: every `t`, `reset` and wait is exact.
 */
async function twoBatches(headers: string): Promise<[Response, Response]> {
  const key = freshKey();
  let now = 1_800_000_000_000;
  await runInDurableObject((env as unknown as WorkerEnv).LIMITER.getByName(`key:${key}`), (o: RateLimiter) => {
    o.clock = () => now;
  });
  const e = envWith(settings(headers));
  const first = await handle(request(key, "/v1/batch"), e);
  now += 588;
  const second = await handle(request(key, "/v1/batch"), e);
  return [first, second];
}

/** The rate-limit fields of a response (`ratelimit…`, `x-ratelimit-…`), by lower-case name. */
function rateLimitFields(res: Response): Map<string, string> {
  return new Map([...res.headers].filter(([name]) => name.includes("ratelimit")));
}

/** The first fenced block of docs/http.md that holds `RateLimit-Policy:` lines, as header → value. */
function sampleFields(): Map<string, string> {
  const block = [...http.matchAll(/```\n([\s\S]*?)```/g)]
    .map((m) => m[1] ?? "")
    .find((b) => /^RateLimit-Policy: /m.test(b));
  if (!block) throw new Error("no RateLimit sample in docs/http.md");
  return new Map(
    block
      .trim()
      .split("\n")
      .map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]),
  );
}

/** The `headers` table's rows: form → the fields it lists, by lower-case name, with a value where the row gives one. */
function formRows(): Map<string, Map<string, string | null>> {
  const rows = [...http.matchAll(/^\| `"([\w-]+)"` \| (.*) \|$/gm)];
  return new Map(
    rows.map((m) => {
      const fields = [...(m[2] ?? "").matchAll(/`([^`]+)`/g)]
        .map((f) => f[1] ?? "")
        .filter((f) => /^(X-)?RateLimit[\w-]*(: |$)/.test(f))
        .map((f): [string, string | null] =>
          f.includes(": ")
            ? [f.slice(0, f.indexOf(": ")).toLowerCase(), f.slice(f.indexOf(": ") + 2)]
            : [f.toLowerCase(), null],
        );
      return [m[1] ?? "", new Map(fields)];
    }),
  );
}

describe("docs/http.md's samples", () => {
  it("the draft-11 RateLimit fields are the proxy's after a request of cost 58", async () => {
    const [first] = await twoBatches("draft-11");
    expect(first.status).toBe(200);
    expect(rateLimitFields(first)).toEqual(sampleFields());
  });

  it("the sample 429 body is the proxy's, every member in order, for the request 588 ms later", async () => {
    const [, second] = await twoBatches("draft-11");
    expect(second.status).toBe(429);
    expect(second.headers.get("retry-after")).toBe("1");
    const sample = [...http.matchAll(/```json\n([\s\S]*?)```/g)]
      .map((m) => JSON.parse(m[1] ?? "") as Record<string, unknown>)
      .find((b) => b.status === 429);
    const real = (await second.json()) as Record<string, unknown>;
    expect(Object.keys(real)).toEqual(Object.keys(sample ?? {}));
    expect(real).toEqual(sample);
  });

  it("the older forms' table lists each form's fields, with the values the proxy sends where it gives them", async () => {
    const rows = formRows();
    expect([...rows.keys()]).toEqual(["draft-7", "draft-6", "legacy", "none"]);
    for (const [form, listed] of rows) {
      const [first] = await twoBatches(form);
      const real = rateLimitFields(first);
      expect([form, [...real.keys()].sort()]).toEqual([form, [...listed.keys()].sort()]);
      for (const [name, value] of listed)
        if (value !== null) expect([form, name, real.get(name)]).toEqual([form, name, value]);
    }
  });
});
