// test/index.test.ts
// The app's limit, tested without sleeping: the kit's clock is what the app's limiter and the key's object read.
import { env, exports } from "cloudflare:workers";
import { resetLimiters, useTestClock } from "strict-edge-rate-limiter/testing";
import { afterEach, expect, it } from "vitest";

const clock = useTestClock();
afterEach(() => resetLimiters(env.LIMITER)); // every key fresh for the next test

const hello = (key: string) =>
  exports.default.fetch("https://app.example/api/hello", { headers: { "x-api-key": key } });

it("allows 10 calls a minute, then answers 429 until the minute has passed", async () => {
  for (let remaining = 9; remaining >= 0; remaining--) {
    expect(await (await hello("alice")).json()).toEqual({ remaining });
    clock.advance(1_000);
  }
  const refused = await hello("alice");
  expect(refused.status).toBe(429);
  expect(refused.headers.get("Retry-After")).toBe("50"); // the first call leaves the window at 60 s
  clock.advance(50_000);
  expect(await (await hello("alice")).json()).toEqual({ remaining: 0 });
  clock.advance(1_000);
  expect(await (await hello("alice")).json()).toEqual({ remaining: 0 });
});

it("starts every test with every key fresh", async () => {
  expect(await (await hello("alice")).json()).toEqual({ remaining: 9 });
});
