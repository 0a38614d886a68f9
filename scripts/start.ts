/**
 * @module `npm start`: the limiter under `wrangler dev` in front of a local demo origin.
 *
 *   npm start                                  # demo origin on 127.0.0.1:8788, limiter on 127.0.0.1:8787
 *   npm start -- --origin https://api.example.com   # your own origin instead of the demo
 *   npm start -- --port 9000                   # another port for the limiter
 *   npm start -- --outage                      # failure_mode = "local" at work: `down_` keys' objects answer nothing
 *                                              # for the first 90 s (scripts/outage-entry.mts)
 */

import { spawn } from "node:child_process";
import type { Server } from "node:http";
import { parseArgs } from "node:util";
import { startDemoOrigin } from "./demo-origin.ts";
import { OUTAGE_ENTRY, OUTAGE_MS, OUTAGE_RATE_LIMIT } from "./outage.ts";

const DEMO_PORT = 8788;

const { values } = parseArgs({
  options: {
    origin: { type: "string" },
    port: { type: "string", default: "8787" },
    outage: { type: "boolean", default: false },
  },
});

let demo: Server | null = null;
let origin = values.origin;
if (!origin) {
  try {
    demo = await startDemoOrigin(DEMO_PORT);
  } catch (e) {
    console.error(`Could not start the demo origin on 127.0.0.1:${DEMO_PORT}: ${(e as Error).message}`);
    process.exit(1);
  }
  origin = `http://127.0.0.1:${DEMO_PORT}`;
  console.log(`demo origin listening on ${origin}`);
}

const port = values.port;
const base = `http://127.0.0.1:${port}`;
const outageUntil = Date.now() + OUTAGE_MS;
const outage = values.outage
  ? [
      OUTAGE_ENTRY,
      "--var",
      `RATE_LIMIT:${JSON.stringify(OUTAGE_RATE_LIMIT)}`,
      "--var",
      `DEMO_OUTAGE_UNTIL:${outageUntil}`,
    ]
  : [];
const wrangler = spawn(
  "wrangler",
  [
    "dev",
    ...outage,
    "--ip",
    "127.0.0.1",
    "--port",
    port,
    "--var",
    `ORIGIN:${origin}`,
    "--show-interactive-dev-session=false",
  ],
  { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, WRANGLER_SEND_METRICS: "false" } },
);

/** What to try once the limiter is ready. */
function tryThis(): string {
  if (!values.outage) {
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
