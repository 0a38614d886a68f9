// The mutation gate's property tests run from one fixed seed (vitest.mutation.config.ts). With fast-check's random
// seed, a mutant that only some generated cases catch was killed in one run and survived the next, and the
// per-test coverage Stryker's incremental mode compares changed from run to run: CI re-tested mutants nothing had
// touched and a file could fall below its floor by chance. `npm test` keeps a fresh seed on every run.
import fc from "fast-check";

fc.configureGlobal({ seed: 20_261_128 });
