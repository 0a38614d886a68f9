// The filter that keeps workerd's traces of connections the tests cut on purpose off the terminal
// (test/setup/quiet-workerd.ts): it drops those lines and their stacks, and nothing else. The samples are lines
// `npm test` printed before the filter.
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { isKnownRuntimeTrace, quietRuntimeTraces, runtimeTraceFilter } from "../support/runtime-traces.ts";

const BIN = "/work/main/node_modules/@cloudflare/workerd-linux-64/bin/workerd";
const STACK = `stack: ${BIN}@2b5edc0 ${BIN}@3fe4230 ${BIN}@3b745e0`;

const KNOWN = [
  "exception = rust/worker/ffi.rs:104: disconnected: Connection refused (os error 111)",
  "exception = rust/worker/ffi.rs:104: disconnected: HTTP body: error reading a body from connection",
  "exception = rust/worker/ffi.rs:104: disconnected: client error (SendRequest): connection closed before message completed",
  "exception = rust/worker/ffi.rs:104: disconnected: remote.worker_do_not_log; Request failed due to internal error",
  "uncaught exception; source = Uncaught (in promise); stack = Error: Network connection lost.",
  "uncaught exception; exception = workerd/jsg/value.h:1456: disconnected: jsg.Error: Network connection lost.",
  'A header value for "x-api-key" contains non-ASCII characters: "clé" (raw bytes: "\\x63\\x6c\\xc3\\xa9"). As a quirk to support Unicode, we are encoding values as UTF-8 in the header.',
];

const UNKNOWN = [
  "uncaught exception; source = Uncaught (in promise); stack = Error: boom",
  "uncaught exception; source = Uncaught (in promise); stack = Error: Network connection lost. at run (worker.js:1:1)",
  "exception = rust/worker/ffi.rs:104: disconnected: Connection reset by peer (os error 104)",
  "workerd/io/worker.c++:2050: error: Uncaught TypeError: x is not a function",
  'A header value for "x-other" contains non-ASCII characters: "é"',
  " ✓  unit  test/unit/ring.test.ts (40 tests) 120ms",
];

describe("isKnownRuntimeTrace", () => {
  it.each(KNOWN)("knows %s", (line) => {
    expect(isKnownRuntimeTrace(line)).toBe(true);
    expect(isKnownRuntimeTrace(`\u001b[31m${line}\u001b[39m`)).toBe(true);
  });
  it.each(UNKNOWN)("does not know %s", (line) => {
    expect(isKnownRuntimeTrace(line)).toBe(false);
  });
});

describe("runtimeTraceFilter", () => {
  it("drops a known trace and its stack, in one chunk or in two", () => {
    expect(runtimeTraceFilter()(`${KNOWN[0]}\n${STACK}\n`)).toBe("");
    const filter = runtimeTraceFilter();
    expect(filter(`${KNOWN[4]}\n`)).toBe("");
    expect(filter(`${KNOWN[5]}\n`)).toBe("");
    expect(filter(`${STACK}\n`)).toBe("");
  });

  it("keeps an unknown line and its stack, and what follows a dropped trace", () => {
    const filter = runtimeTraceFilter();
    expect(filter(`${UNKNOWN[0]}\n${STACK}\n`)).toBe(`${UNKNOWN[0]}\n${STACK}\n`);
    expect(filter(`${KNOWN[0]}\n${STACK}\n${UNKNOWN[3]}\n${STACK}\n`)).toBe(`${UNKNOWN[3]}\n${STACK}\n`);
  });

  it("keeps a stack line that follows no dropped trace", () => {
    const filter = runtimeTraceFilter();
    expect(filter(`${KNOWN[0]}\n`)).toBe("");
    expect(filter("plain line\n")).toBe("plain line\n");
    expect(filter(`${STACK}\n`)).toBe(`${STACK}\n`);
  });

  it("drops a rejected RPC call the test pool's wrapper reports as uncaught, keeps any other uncaught rejection", () => {
    const wrapper =
      "file:///x/node_modules/@cloudflare/vitest-plugin/dist/worker/lib/cloudflare/test-internal.mjs:369:47";
    const rejected = [
      "uncaught exception; source = Uncaught (in promise); stack = RangeError: add: 1 would take the balance past 9",
      "    at CreditAccount.add (/x/src/core/credits.ts:141:13)",
      `    at ${wrapper}`,
    ];
    const filter = runtimeTraceFilter();
    // Across chunks: the trace is held until its stack ends.
    expect(filter(`${rejected[0]}\n${rejected[1]}\n`)).toBe("");
    expect(filter(`${rejected[2]}\nnext line\n`)).toBe("next line\n");
    const ours = [
      "uncaught exception; source = Uncaught (in promise); stack = TypeError: x is undefined",
      "    at handle (/x/src/proxy/app.ts:10:1)",
    ];
    expect(runtimeTraceFilter()(`${ours.join("\n")}\nafter\n`)).toBe(`${ours.join("\n")}\nafter\n`);
  });

  it("keeps text without a final newline as it is", () => {
    expect(runtimeTraceFilter()("partial")).toBe("partial");
  });
});

describe("quietRuntimeTraces", () => {
  it("filters a stream's writes until restored, calling each write's callback", async () => {
    const seen: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        seen.push(chunk.toString("utf8"));
        done();
      },
    }) as unknown as NodeJS.WriteStream;
    const restore = quietRuntimeTraces(sink);
    await new Promise<void>((resolve) => sink.write(`${KNOWN[0]}\n${STACK}\n`, () => resolve()));
    sink.write(Buffer.from(`${KNOWN[4]}\nkept\n`));
    sink.write(`${UNKNOWN[0]}\n`);
    restore();
    sink.write(`${KNOWN[0]}\n`);
    expect(seen).toEqual(["kept\n", `${UNKNOWN[0]}\n`, `${KNOWN[0]}\n`]);
  });
});
