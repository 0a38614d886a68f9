/**
 * @module `npm run test:mutation`: Stryker with the arguments given, then every
 * mutated file's score against its floor (./mutation-floors.ts). Fails when Stryker fails or a file
 * is below its floor. The gate (stryker.config.mjs, CI) is incremental: only mutants whose code or covering tests
 * changed since the kept results run again. They are kept gzipped in test/mutation/incremental.json.gz (committed: 0.9
 * MB, not the 18 MB of JSON that filled every `git grep`), written out as test/mutation/incremental.json (git-ignored)
 * for Stryker before the run and gzipped back after it; commit the `.gz` it rewrites. The gzip is deterministic (no
 * time or name in its header): the same results give the same bytes.
 *
 *   npm run test:mutation                              # the gate, incremental, one test process at a time
 *   npm run test:mutation -- --concurrency 2           # as CI runs it, on a machine of its own
 *   npm run test:mutation -- --force                   # every mutant of the gate again (rewrites the baseline)
 *   npm run test:mutation -- --mutate src/client/leases.ts   # one file, judged alone
 */

import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { gunzipSync, gzipSync } from "node:zlib";
import { problems, type Report, scores } from "./mutation-floors.ts";

const REPORT = "reports/mutation/mutation.json";
/** Stryker's incremental file (stryker.config.mjs, `incrementalFile`), and the gzip of it that is committed. */
const INCREMENTAL = "test/mutation/incremental.json";
const KEPT = `${INCREMENTAL}.gz`;

// The kept results, for Stryker to read (a missing file: every mutant runs, and the run writes it).
if (existsSync(KEPT)) writeFileSync(INCREMENTAL, gunzipSync(readFileSync(KEPT)));

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
// Kept for the next run, whatever the floors say: the results are the run's either way.
writeFileSync(KEPT, gzipSync(readFileSync(INCREMENTAL), { level: 9 }));

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
