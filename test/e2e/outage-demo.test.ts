// `npm start -- --outage` as docs/configuration.md ("When the object cannot answer", "See it on your machine")
// describes it: the demo's Worker entry and settings (scripts/outage.ts) under wrangler dev, in front of a recording
// origin. A `down_` key's object answers nothing, so its requests are decided alone at its limit; another key's object
// decides as usual.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OUTAGE_ENTRY, OUTAGE_RATE_LIMIT } from "../../scripts/outage.ts";
import { type Limiter, startLimiter, tempDir, waitForOutput } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";
import { problemOf } from "../support/problem.ts";

let origin: Origin;
let limiter: Limiter;
let temp: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  origin = await startOrigin();
  temp = await tempDir("outage-demo-");
  limiter = await startLimiter({
    persistTo: temp.path,
    origin: origin.url,
    main: OUTAGE_ENTRY,
    rateLimit: OUTAGE_RATE_LIMIT,
    // Down for longer than the test runs: what a user sees in the demo's first 90 s.
    vars: { DEMO_OUTAGE_UNTIL: String(Date.now() + 600_000) },
  });
}, 120_000);

afterAll(async () => {
  await limiter?.stop();
  await origin?.close();
  await temp?.cleanup();
});

describe("npm start -- --outage", () => {
  it("a down_ key: ten 200s and two 429s decided alone (limiter_fallback), and a limiter_down line", async () => {
    const get = (key: string) => fetch(`${limiter.url}/hello`, { headers: { "x-api-key": key } });
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const res = await get("down_demo");
      statuses.push(res.status);
      if (res.status === 429) {
        const body = await problemOf(res, 429);
        expect(body).toMatchObject({ reason: "limiter_fallback", violated_policies: ["per-minute"] });
      } else await res.arrayBuffer();
    }
    expect(statuses).toEqual([...new Array(10).fill(200), 429, 429]);
    await waitForOutput(limiter, '"event":"limiter_down"');
    // Another key's object answers: decided there, not alone.
    const up = await get("up_demo");
    expect(up.status).toBe(200);
    expect(up.headers.get("RateLimit")).toBe('"per-minute";r=9;t=60');
  });
});
