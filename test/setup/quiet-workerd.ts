// Vitest globalSetup (workers project): drops workerd's own lines about connections the tests cut on purpose from
// the terminal (test/support/runtime-traces.ts); every other line workerd prints still shows.
import { quietRuntimeTraces } from "../support/runtime-traces.ts";

export default function setup(): () => void {
  const restore = [quietRuntimeTraces(process.stdout), quietRuntimeTraces(process.stderr)];
  return () => {
    for (const undo of restore) undo();
  };
}
