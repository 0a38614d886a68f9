// Vitest globalSetup (workers project): starts the echo origin in Node and provides its URL.
import type { TestProject } from "vitest/node";
import { startOrigin } from "../support/origin.ts";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const origin = await startOrigin();
  project.provide("originUrl", origin.url);
  return () => origin.close();
}
