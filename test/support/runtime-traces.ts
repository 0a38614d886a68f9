/**
 * @module workerd's own lines about connections the tests cut on purpose. `@cloudflare/vitest-plugin` (1.5.0) starts
 * workerd with `--verbose` and writes every line workerd logs straight to the Vitest process's stdout or stderr (its
 * `handleStructuredLogs`, which no option replaces), outside the `console` that `silent: "passed-only"` holds back.
 * {@link quietRuntimeTraces} drops the known lines listed here, each with the `stack:` line after it; any other line
 * workerd prints, an unexpected exception included, still reaches the terminal.
 */

/** Lines workerd prints when a subrequest's connection is refused, reset or dropped mid-body (test/support/origin.ts). */
export const KNOWN_RUNTIME_TRACES: readonly RegExp[] = [
  // The origin's closed port, its reset before a response, its drop mid-body, and the same drop seen by the caller
  // of the Worker's own fetch.
  /^exception = rust\/worker\/ffi\.rs:\d+: disconnected: (?:Connection refused \(os error 111\)|client error \(SendRequest\): connection closed before message completed|HTTP body: error reading a body from connection|remote\.worker_do_not_log; Request failed due to internal error)$/,
  // workerd reports a refused or reset subrequest as an uncaught rejection even when the fetch is awaited and its
  // error handled (a plain `try { await fetch(closedPort) } catch {}` prints both lines).
  /^uncaught exception; source = Uncaught \(in promise\); stack = Error: Network connection lost\.$/,
  /^uncaught exception; exception = workerd\/jsg\/value\.h:\d+: disconnected: jsg\.Error: Network connection lost\.$/,
  // test/integration/worker.test.ts and signed.test.ts send a non-ASCII key on purpose.
  /^A header value for "x-api-key" contains non-ASCII characters: "(?:live_)?clé" /,
];

/**
 * A rejected call to a Durable Object's RPC method that its caller handled: `@cloudflare/vitest-plugin` wraps every
 * object of the test Worker (for `runInDurableObject`), and its wrapper reports each rejection it passes on as an
 * uncaught one, with a JavaScript stack through the wrapper. In production the caller alone sees it (a top-up past
 * the ceiling, for one, is a `RangeError` the admin API answers with `400`).
 */
const REJECTED_RPC = /^uncaught exception; source = Uncaught \(in promise\); stack = \w*Error: /;
/** A JavaScript stack frame. */
const FRAME = /^\s+at /;
/** The test pool's wrapper of a Durable Object's RPC methods. */
const POOL_WRAPPER = "@cloudflare/vitest-plugin/dist/worker/lib/cloudflare/test-internal.mjs";

/** workerd's stack line: code addresses in its binary (`…/bin/workerd@2b5edc0 …`). */
const STACK = /^stack:(?: \S+@[0-9a-f]+)+$/;

// biome-ignore lint/suspicious/noControlCharactersInRegex: an ANSI escape starts with ESC.
const ANSI = /\u001b\[[0-9;]*m/g;

/** Whether `line` is one of {@link KNOWN_RUNTIME_TRACES} (colour codes ignored). */
export function isKnownRuntimeTrace(line: string): boolean {
  const plain = line.replace(ANSI, "");
  return KNOWN_RUNTIME_TRACES.some((pattern) => pattern.test(plain));
}

/**
 * A filter over successive chunks of output: returns each chunk without the known traces and the `stack:` lines
 * that follow one. It remembers across chunks whether the last line it saw was dropped, since workerd's message
 * and its stack may arrive in separate writes.
 */
export function runtimeTraceFilter(): ((chunk: string) => string) & { flush(): string } {
  let dropping = false;
  /** A rejected RPC's trace being read, held back until its stack shows whether the test pool's wrapper reported it. */
  let held: string[] | null = null;
  /** What is held back, as it would have been written (the stream is being restored: nothing more comes). */
  const flush = (): string => {
    const out = held === null || held.some((l) => l.includes(POOL_WRAPPER)) ? "" : `${held.join("\n")}\n`;
    held = null;
    return out;
  };
  const filter = (chunk: string): string => {
    const lines = chunk.split("\n");
    const kept: string[] = [];
    lines.forEach((line, i) => {
      const last = i === lines.length - 1;
      // The text after the chunk's last newline (often "") is kept as it is: it is no whole line.
      if (last) {
        kept.push(line);
        return;
      }
      const plain = line.replace(ANSI, "");
      if (held !== null) {
        if (FRAME.test(plain)) {
          held.push(line);
          return;
        }
        if (!held.some((l) => l.includes(POOL_WRAPPER))) kept.push(...held);
        held = null;
      }
      if (REJECTED_RPC.test(plain) && !isKnownRuntimeTrace(line)) {
        held = [line];
        dropping = false;
      } else if (isKnownRuntimeTrace(line)) dropping = true;
      else if (!(dropping && STACK.test(plain))) {
        dropping = false;
        kept.push(line);
      }
    });
    return kept.join("\n");
  };
  return Object.assign(filter, { flush });
}

type Write = NodeJS.WriteStream["write"];

/**
 * Drops the known traces from what is written to `stream` (see {@link runtimeTraceFilter}) until the returned
 * function restores its `write`.
 */
export function quietRuntimeTraces(stream: NodeJS.WriteStream): () => void {
  const original = stream.write;
  const filter = runtimeTraceFilter();
  const write = function (this: NodeJS.WriteStream, chunk: unknown, ...rest: unknown[]): boolean {
    const send = (...args: unknown[]) => (original as (...a: unknown[]) => boolean).apply(this, args);
    if (typeof chunk !== "string" && !(chunk instanceof Uint8Array)) return send(chunk, ...rest);
    const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    const kept = filter(text);
    if (kept === text) return send(chunk, ...rest);
    const callback = rest.find((arg) => typeof arg === "function");
    if (kept !== "") return callback ? send(kept, "utf8", callback) : send(kept, "utf8");
    if (typeof callback === "function") process.nextTick(callback);
    return true;
  };
  stream.write = write as Write;
  return () => {
    stream.write = original;
    const rest = filter.flush();
    if (rest !== "") stream.write(rest);
  };
}
