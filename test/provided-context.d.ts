// Values that the globalSetup file (test/setup/origin.ts) provides (read with inject()).
export {};

declare module "vitest" {
  interface ProvidedContext {
    /** Base URL (http://127.0.0.1:PORT) of the Node echo origin started by globalSetup. */
    originUrl: string;
  }
}
