/**
 * @module `npm start`: the limiter under `wrangler dev` in front of a local demo origin.
 *
 *   npm start                                  # demo origin on 127.0.0.1:8788, limiter on 127.0.0.1:8787
 *   npm start -- --origin https://api.example.com   # your own origin instead of the demo
 *   npm start -- --port 8797 --origin-port 8798 --inspector-port 9239   # a second one beside the first
 *   npm start -- --outage                      # failure_mode = "local" at work: `down_` keys' objects answer nothing
 *                                              # for the first 90 s (scripts/outage-entry.mts)
 *   npm start -- --help                        # every flag (scripts/start-options.ts)
 */

import { spawn } from "node:child_process";
import type { Server } from "node:http";
import { startDemoOrigin } from "./demo-origin.ts";
import { OUTAGE_MS } from "./outage.ts";
import { HELP, type StartOptions, startOptions, WRANGLER_ENV, wranglerArgs } from "./start-options.ts";

let options: StartOptions;
try {
  options = startOptions(process.argv.slice(2));
} catch (e) {
  console.error(`${(e as Error).message}\n\n${HELP}`);
  process.exit(2);
}
if (options.help) {
  console.log(HELP);
  process.exit(0);
}

let demo: Server | null = null;
let origin = options.origin;
if (!origin) {
  try {
    demo = await startDemoOrigin(options.originPort);
  } catch (e) {
    console.error(
      `Could not start the demo origin on 127.0.0.1:${options.originPort}: ${(e as Error).message}` +
        " (another npm start? pick other ports: npm start -- --help)",
    );
    process.exit(1);
  }
  origin = `http://127.0.0.1:${options.originPort}`;
  console.log(`demo origin listening on ${origin}`);
}

const base = `http://127.0.0.1:${options.port}`;
const outageUntil = Date.now() + OUTAGE_MS;
const wrangler = spawn("wrangler", wranglerArgs(options, origin, outageUntil), {
  stdio: ["ignore", "pipe", "inherit"],
  env: { ...process.env, ...WRANGLER_ENV },
});

/** What to try once the limiter is ready. */
function tryThis(): string {
  if (!options.outage) {
    return `The limiter is in front of ${origin}. Try:

  curl -i -H "x-api-key: test_demo" ${base}/hello          # test_ keys: 10 per minute
  for i in $(seq 12); do curl -s -o /dev/null -w "%{http_code} " -H "x-api-key: test_demo" ${base}/hello; done; echo
  curl -i ${base}/hello                                      # no key: 401
  curl -i -H "Authorization: Bearer my-key" ${base}/v1/items   # other keys: 100/s and 1000/min`;
  }
  const until = new Date(outageUntil).toLocaleTimeString();
  return `The limiter is in front of ${origin}, every key at 10 per minute, failure_mode = "local". The objects of keys
starting down_ answer nothing until ${until}: requests for them are decided by this isolate alone. Try:

  for i in $(seq 12); do curl -s -o /dev/null -w "%{http_code} " -H "x-api-key: down_demo" ${base}/hello; done; echo
      # 200 ×10, then 429: the isolate's own exact log (reason limiter_fallback; a limiter_down line below)
  curl -s -H "x-api-key: down_demo" ${base}/hello           # the 429's body says it was decided alone
  curl -s -o /dev/null -w "%{http_code}\n" -H "x-api-key: up_demo" ${base}/hello   # other keys: their object decides

After ${until} the object answers again (a limiter_up line): it records the grants made alone, so the key still
waits for its window to pass.`;
}

let announced = false;
wrangler.stdout.on("data", (chunk: Buffer) => {
  process.stdout.write(chunk);
  if (!announced && chunk.toString().includes("Ready on")) {
    announced = true;
    console.log(`\n${tryThis()}\n\nCtrl-C stops both.\n`);
  }
});

function stop(code: number): void {
  wrangler.kill("SIGTERM");
  demo?.close();
  demo?.closeAllConnections();
  process.exitCode = code;
}
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));
wrangler.on("exit", (code) => {
  demo?.close();
  demo?.closeAllConnections();
  process.exit(code ?? 0);
});
