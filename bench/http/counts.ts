/**
 * @module The storage counts the bench Worker reports (shared by the Worker and the Node runner).
 */

/** What one object's storage saw, counted at the SQL and alarm APIs. */
export interface StorageCounts {
  decides: number;
  grants: number;
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
