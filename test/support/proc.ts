/**
 * @module What a process costs, read from Linux's /proc: the pids of a process group, resident
 * memory split by kind, CPU time. Node only; every reader answers "nothing" (empty, zero, null)
 * for a process that has gone or on a system without /proc.
 */

import { readdirSync, readFileSync } from "node:fs";

/** Resident memory of one process in KiB, from `/proc/<pid>/status`. */
export interface Memory {
  /** `VmRSS`: everything resident. */
  readonly rss: number;
  /** `RssAnon`: heap, stacks, anonymous mappings (V8's heap, malloc, SQLite's page caches). */
  readonly anon: number;
  /** `RssFile`: pages of mapped files (the binary, its libraries, mmapped databases). */
  readonly file: number;
  /** `RssShmem`: shared memory (tmpfs, memfd). */
  readonly shmem: number;
}

const NONE: Memory = { rss: 0, anon: 0, file: 0, shmem: 0 };

/** Resident memory of `pid` (all zero once the process is gone). */
export function memoryOf(pid: number): Memory {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, "latin1");
  } catch {
    return NONE;
  }
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0);
  return { rss: kib("VmRSS"), anon: kib("RssAnon"), file: kib("RssFile"), shmem: kib("RssShmem") };
}

/** The sum of several processes' memory. */
export function sumMemory(all: readonly Memory[]): Memory {
  return all.reduce(
    (a, m) => ({ rss: a.rss + m.rss, anon: a.anon + m.anon, file: a.file + m.file, shmem: a.shmem + m.shmem }),
    NONE,
  );
}

/** The pids in process group `pgid`, or only those whose command name is `comm`. */
export function groupPids(pgid: number, comm?: string): number[] {
  const pids: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return pids;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "latin1");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      // Fields after "(comm) ": state, ppid, pgrp, …
      const pgrp = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
      if (pgrp === pgid && (comm === undefined || name === comm)) pids.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return pids;
}

const CLOCK_TICKS = 100;

/** CPU time (user + system) a process has used, in ms; null when unknown. */
export function cpuMs(pid: number | null): number | null {
  if (pid === null) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime and stime are fields 14 and 15 of stat, i.e. 11 and 12 after "(comm) ".
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return null;
  }
}
