// Values that the globalSetup files (test/setup/origin.ts, test/node/global-setup.ts) provide() (read with inject()).
export {};

declare module "vitest" {
  interface ProvidedContext {
    /** Base URL (http://127.0.0.1:PORT) of the Node echo origin started by globalSetup. */
    originUrl: string;
    /** wrangler.toml's vars as JSON (the Node stand-in only: test/node/global-setup.ts). */
    wranglerVars: string;
  }
}
