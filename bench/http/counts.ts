/**
 * @module The storage counts the bench Worker reports (shared by the Worker and the Node runner).
 */

/** What one object's storage saw, counted at the SQL and alarm APIs. */
export interface StorageCounts {
  /** `take` calls (per-request decisions, with or without a lease, and lease-only refills). */
  decides: number;
  /** `take` calls that granted a request's own cost. */
  grants: number;
  /** `take` calls that came with a lease, and the units they leased. */
  leases: number;
  leasedUnits: number;
  /**
   * `giveBack` and `settle` calls (calls that decide nothing), and the units given back: by those calls and by the
   * settlements riding on decisions.
   */
  giveBacks: number;
  returnedUnits: number;
  /** `sql.exec` calls that wrote (INSERT/UPDATE/DELETE), and the rows they reported written. */
  writeStatements: number;
  rowsWritten: number;
  /** The parts of `rowsWritten` that went to `budget_slots` (the logs' ring slots), `meta` and `kept_answers`. */
  slotRowsWritten: number;
  metaRowsWritten: number;
  keptRowsWritten: number;
  setAlarms: number;
  /** Instances of the object a `take` or `giveBack` started: the key's first call, and every call after an eviction (idle ~10 s). */
  starts: number;
  /** At rest, after the run: rows in `budget_slots` and `meta`, and the object's SQLite file size. */
  slotRows: number;
  metaRows: number;
  databaseSize: number;
}

/** Every count at zero: an object's start, and the start of a sum. */
export function emptyCounts(): StorageCounts {
  return {
    decides: 0,
    grants: 0,
    leases: 0,
    leasedUnits: 0,
    giveBacks: 0,
    returnedUnits: 0,
    writeStatements: 0,
    rowsWritten: 0,
    slotRowsWritten: 0,
    metaRowsWritten: 0,
    keptRowsWritten: 0,
    setAlarms: 0,
    starts: 0,
    slotRows: 0,
    metaRows: 0,
    databaseSize: 0,
  };
}
