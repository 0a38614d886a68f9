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
  /** `giveBack` calls, and the units they gave back. */
  giveBacks: number;
  returnedUnits: number;
  /** `sql.exec` calls that wrote (INSERT/UPDATE/DELETE), and the rows they reported written. */
  writeStatements: number;
  rowsWritten: number;
  /** The part of `rowsWritten` that went to the `slots` table. */
  slotRowsWritten: number;
  setAlarms: number;
  /** At rest, after the run: rows in `slots` and `meta`, and the object's SQLite file size. */
  slotRows: number;
  metaRows: number;
  databaseSize: number;
}
