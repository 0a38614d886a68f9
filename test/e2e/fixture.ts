/**
 * @module One limiter for a test file: a recording origin and `wrangler dev` in front of it on a
 * fresh state directory, started before the file's tests and stopped (state removed) after them.
 */
import { afterAll, beforeAll } from "vitest";
import { type Limiter, type LimiterOptions, startLimiter, tempDir } from "../support/harness.ts";
import { type Origin, startOrigin } from "../support/origin.ts";

export interface FileLimiterOptions extends Omit<LimiterOptions, "origin" | "persistTo"> {
  /** Prefix of the temp state directory's name. */
  readonly statePrefix: string;
  /** Options for the recording origin. */
  readonly origin?: Parameters<typeof startOrigin>[0];
}

/** Registers the file's `beforeAll`/`afterAll`; `started` receives the origin and limiter once both run. */
export function limiterForFile(options: FileLimiterOptions, started: (origin: Origin, limiter: Limiter) => void): void {
  const { statePrefix, origin: originOptions, ...limiterOptions } = options;
  let origin: Origin | undefined;
  let limiter: Limiter | undefined;
  let state: Awaited<ReturnType<typeof tempDir>> | undefined;
  beforeAll(async () => {
    origin = await startOrigin(originOptions);
    state = await tempDir(statePrefix);
    limiter = await startLimiter({ ...limiterOptions, origin: origin.url, persistTo: state.path });
    started(origin, limiter);
  });
  afterAll(async () => {
    await limiter?.stop();
    await origin?.close();
    await state?.cleanup();
  });
}
