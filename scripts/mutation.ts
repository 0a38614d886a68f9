/**
 * @module `npm run test:mutation`: Stryker with the arguments given, then every
 * mutated file's score against its floor (./mutation-floors.ts). Fails when Stryker fails or a file
 * is below its floor. The gate (stryker.config.mjs, CI) is incremental: only mutants whose code or covering tests
 * changed since test/mutation/incremental.json run again; commit the file it rewrites.
 *
 *   npm run test:mutation                              # the gate, incremental, one test process at a time
 *   npm run test:mutation -- --concurrency 2           # as CI runs it, on a machine of its own
 *   npm run test:mutation -- --force                   # every mutant of the gate again (rewrites the baseline)
 *   npm run test:mutation -- --mutate src/client/leases.ts   # one file, judged alone
 */

import { spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { problems, type Report, scores } from "./mutation-floors.ts";

const REPORT = "reports/mutation/mutation.json";

// A report left by an earlier run must not be judged as this one's.
rmSync(REPORT, { force: true });
const args = process.argv.slice(2);
const run = spawnSync("npx", ["--no-install", "stryker", "run", "stryker.config.mjs", ...args], {
  stdio: "inherit",
});
if (run.status !== 0) {
  console.error(`stryker exited with ${run.status ?? run.signal}`);
  process.exit(1);
}

const report = JSON.parse(readFileSync(REPORT, "utf8")) as Report;
for (const s of scores(report)) {
  console.log(
    `${s.file.padEnd(22)} ${s.score.toFixed(2).padStart(6)}%  ${String(s.detected).padStart(4)} of ${String(s.mutants).padStart(4)}  floor ${s.floor ?? "none"}%`,
  );
}
const wrong = problems(report);
if (wrong.length > 0) {
  for (const w of wrong) console.error(w);
  process.exit(1);
}
console.log("every mutated file keeps its floor");
