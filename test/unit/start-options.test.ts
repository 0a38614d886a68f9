// `npm start`'s flags (scripts/start-options.ts): what each puts on wrangler dev's command line, the errors that name a
// bad flag, and a `--help` that lists every flag the parser reads.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { HELP, startOptions, WRANGLER_ENV, wranglerArgs } from "../../scripts/start-options.ts";

/** The value after `flag` in `args`, if any. */
const valueAfter = (args: readonly string[], flag: string) => {
  const i = args.indexOf(flag);
  return i < 0 ? undefined : args[i + 1];
};

describe("npm start's options", () => {
  it("by default: the limiter on 8787, the demo origin on 8788, wrangler's own inspector port", () => {
    const options = startOptions([]);
    expect(options).toMatchObject({ origin: undefined, port: 8787, originPort: 8788, inspectorPort: undefined });
    const args = wranglerArgs(options, "http://127.0.0.1:8788", 0);
    expect(valueAfter(args, "--port")).toBe("8787");
    expect(args).not.toContain("--inspector-port");
    expect(valueAfter(args, "--var")).toBe("ORIGIN:http://127.0.0.1:8788");
  });

  it("a second one beside the first: every port its own", () => {
    const options = startOptions(["--port", "8797", "--origin-port", "8798", "--inspector-port", "9239"]);
    expect(options).toMatchObject({ port: 8797, originPort: 8798, inspectorPort: 9239 });
    const args = wranglerArgs(options, "http://127.0.0.1:8798", 0);
    expect(valueAfter(args, "--port")).toBe("8797");
    expect(valueAfter(args, "--inspector-port")).toBe("9239");
  });

  it("--origin and --outage reach wrangler dev", () => {
    const options = startOptions(["--origin", "https://api.example.com", "--outage"]);
    const args = wranglerArgs(options, options.origin as string, 1234);
    expect(args).toContain("ORIGIN:https://api.example.com");
    expect(args).toContain("DEMO_OUTAGE_UNTIL:1234");
    expect(args[1]).toBe("scripts/outage-entry.mts");
  });

  it.each([
    [["--port", "80a"], '--port: expected a port from 1 to 65535, got "80a"'],
    [["--origin-port", "0"], '--origin-port: expected a port from 1 to 65535, got "0"'],
    [["--inspector-port", "70000"], '--inspector-port: expected a port from 1 to 65535, got "70000"'],
    [["--orign", "x"], /--orign/],
  ])("refuses %j naming the flag", (args, message) => {
    expect(() => startOptions(args)).toThrow(message);
  });

  it("--help lists every flag the parser reads, and the README and operating docs name the port flags", () => {
    expect(startOptions(["--help"]).help).toBe(true);
    const source = readFileSync("scripts/start-options.ts", "utf8");
    const body = source.slice(source.indexOf("options: {"), source.indexOf("},\n  });"));
    const flags = [...body.matchAll(/^ {6}"?([a-z-]+)"?: \{/gm)].map((m) => m[1]);
    expect(flags).toEqual(["origin", "port", "origin-port", "inspector-port", "outage", "help"]);
    for (const flag of flags) expect(HELP).toContain(`--${flag}`);
    for (const doc of ["README.md", "docs/operating.md"]) {
      const text = readFileSync(doc, "utf8");
      for (const flag of ["--origin-port", "--inspector-port"]) expect(text, `${doc} names ${flag}`).toContain(flag);
    }
  });

  it("wrangler dev runs without metrics and without fetching Request.cf (offline, that fetch printed a stack)", () => {
    expect(WRANGLER_ENV).toEqual({ WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" });
    // The installed miniflare still reads that variable (a rename would bring the stack back).
    const miniflare = readFileSync("node_modules/miniflare/dist/src/index.js", "utf8");
    expect(miniflare).toContain('CF_FETCH_ENABLED_ENV_VAR = "CLOUDFLARE_CF_FETCH_ENABLED"');
  });
});
