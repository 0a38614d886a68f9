// `cloudflare:workers` for the Node stand-in (test/node/runtime.ts): the base class, and the `env` and `exports` that
// test/node/setup.ts fills in before each test file (the object's module imports this one, so it cannot import the object).
export { DurableObject } from "./runtime.ts";

/** The Worker's bindings and vars, as wrangler.toml and vitest.config.ts give them to the workers project. */
export const env: Record<string, unknown> = {};

/** The main module's handlers, called with {@link env}, as workerd's `exports` calls them. */
export const exports: Record<string, unknown> = {};
