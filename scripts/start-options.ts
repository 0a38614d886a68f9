/**
 * @module What `npm start` (scripts/start.ts) takes: its flags and `--help`, and the `wrangler dev` command line and
 * environment they make. Pure, so `test/unit/start-options.test.ts` checks them without starting anything.
 */

import { parseArgs } from "node:util";
import { OUTAGE_ENTRY, OUTAGE_RATE_LIMIT } from "./outage.ts";

export const HELP = `npm start [-- options]: the limiter under wrangler dev, in front of a demo origin or yours

  --origin <url>          your origin instead of the demo (then no demo origin starts)
  --port <n>              the limiter's port on 127.0.0.1 (default 8787)
  --origin-port <n>       the demo origin's port on 127.0.0.1 (default 8788)
  --inspector-port <n>    wrangler's debugger port (default: 9229, or the next free one)
  --outage                failure_mode = "local" at work: down_ keys' objects answer nothing for 90 s
  --help                  this text

Two at once on one machine: npm start -- --port 8797 --origin-port 8798 --inspector-port 9239`;

export interface StartOptions {
  /** Your origin; none: the demo origin on `originPort`. */
  readonly origin: string | undefined;
  readonly port: number;
  readonly originPort: number;
  /** Wrangler's inspector port; none: wrangler's default. */
  readonly inspectorPort: number | undefined;
  readonly outage: boolean;
  readonly help: boolean;
}

/** A TCP port given to `flag`, 1–65535; throws a message naming the flag otherwise. */
function portOf(flag: string, value: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port < 1 || port > 65535) {
    throw new Error(`--${flag}: expected a port from 1 to 65535, got ${JSON.stringify(value)}`);
  }
  return port;
}

/** `npm start`'s flags, read from `args` (`process.argv.slice(2)`); throws on an unknown flag or a bad port. */
export function startOptions(args: readonly string[]): StartOptions {
  const { values } = parseArgs({
    args: [...args],
    options: {
      origin: { type: "string" },
      port: { type: "string", default: "8787" },
      "origin-port": { type: "string", default: "8788" },
      "inspector-port": { type: "string" },
      outage: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  const inspector = values["inspector-port"];
  return {
    origin: values.origin,
    port: portOf("port", values.port),
    originPort: portOf("origin-port", values["origin-port"]),
    inspectorPort: inspector === undefined ? undefined : portOf("inspector-port", inspector),
    outage: values.outage,
    help: values.help,
  };
}

/** The arguments of `wrangler dev` for `options`, with the origin it proxies to and, with `--outage`, its end. */
export function wranglerArgs(options: StartOptions, origin: string, outageUntil: number): string[] {
  const outage = options.outage
    ? [
        OUTAGE_ENTRY,
        "--var",
        `RATE_LIMIT:${JSON.stringify(OUTAGE_RATE_LIMIT)}`,
        "--var",
        `DEMO_OUTAGE_UNTIL:${outageUntil}`,
      ]
    : [];
  const inspector = options.inspectorPort === undefined ? [] : ["--inspector-port", String(options.inspectorPort)];
  return [
    "dev",
    ...outage,
    "--ip",
    "127.0.0.1",
    "--port",
    String(options.port),
    ...inspector,
    "--var",
    `ORIGIN:${origin}`,
    "--show-interactive-dev-session=false",
  ];
}

/**
 * What wrangler dev runs with beside the caller's environment: no usage metrics (nor the notice about them), and no
 * fetch of the `Request.cf` sample from workers.cloudflare.com, which offline printed a `getaddrinfo ENOTFOUND` stack
 * twice at every start (the limiter reads nothing from `request.cf`; workerd gets miniflare's placeholder).
 */
export const WRANGLER_ENV = {
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
} as const;
