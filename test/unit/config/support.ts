/**
 * @module What the config parser's tests (test/unit/config/) share: the minimum config of README.md, parsing it
 * under one ORIGIN, the ConfigError a call throws, and the policy header of a parsed plan.
 */

import { expect } from "vitest";
import { policyHeader as policyOf } from "../../../src/client/headers.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { type Config, ConfigError, type Plan } from "../../../src/config/types.ts";

export type Obj = Record<string, unknown>;

export const policyHeader = (plan: Plan) => policyOf(plan.limits ?? []);

export const ORIGIN = "https://api.example.com";
/** The minimum config of README.md. */
export const MINIMUM = {
  limits: [
    { limit: 100, window: "1s" },
    { limit: 1000, window: "1m" },
  ],
};

export function parse(rateLimit: unknown, origin: unknown = ORIGIN): Config {
  return parseConfig({ ORIGIN: origin, RATE_LIMIT: rateLimit });
}

/** The ConfigError `f` throws; fails the test when it throws nothing or anything else. */
export function configError(f: () => unknown): ConfigError {
  let thrown: unknown;
  try {
    f();
  } catch (e) {
    thrown = e;
  }
  expect(thrown, "expected a ConfigError").toBeInstanceOf(ConfigError);
  return thrown as ConfigError;
}

/** MINIMUM with some top-level settings replaced. */
export function rl(over: Record<string, unknown>): Record<string, unknown> {
  return { ...MINIMUM, ...over };
}
