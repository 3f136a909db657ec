//! Buckets of the trace and parent indexes (docs/storage.md#buckets).
//!
//! Span, trace and parent ids are random, so in an index keyed by them each new row lands on a
//! leaf of its own, anywhere in the index, and a commit writes one whole page per new row and
//! index. `calls.bucket` puts the rowid's stretch at insert after `project_id` in both indexes:
//! new rows then only touch the leaves of the newest bucket, a few dozen pages however large the
//! table grows. A lookup by trace or parent probes every bucket of its project instead of one
//! place: a descent per bucket, one per 8,192 rows written.
//!
//! Every row's bucket is listed in `call_buckets` for its project, in the transaction that
//! writes the row ([`list`]), except bucket 0, which a lookup always probes: rows from before
//! migration 16 (the column's default) and rows inserted by a display-name update are there.

use rusqlite::{Connection, params};

/// Rows per bucket, as a shift of the rowid: 8,192. One bucket's entries in one index fill
/// about fifty 16 KiB leaves; a million calls are 122 buckets.
const SHIFT: u32 = 13;

/// `bucket IN (...)` of the buckets of the project whose id is bound at the placeholder `$p`: the
/// one rule every statement using the bucketed indexes follows.
macro_rules! in_project {
    ($p:literal) => {
        concat!(
            "bucket IN (SELECT bucket FROM call_buckets WHERE project_key = ",
            $crate::sqlite::project_keys::key_of!($p),
            " UNION ALL SELECT 0)"
        )
    };
}
pub(crate) use in_project;

const NEXT_ROWID: &str = "SELECT IFNULL(MAX(rowid), 0) + 1 FROM calls";
const LIST: &str = "INSERT OR IGNORE INTO call_buckets (project_key, bucket) VALUES (?1, ?2)";

/// The bucket of a row inserted now: the stretch of the next rowid. A batch writes all its new
/// rows into the bucket it started in, so a bucket may hold a batch more than 8,192 rows.
pub(crate) fn current(conn: &Connection) -> rusqlite::Result<i64> {
    let next: i64 = conn.prepare_cached(NEXT_ROWID)?.query_row([], |r| r.get(0))?;
    Ok(next >> SHIFT)
}

/// Lists `bucket` for the project of key `project`, in the caller's transaction: before any of
/// the project's rows is written into it, or lookups would not find that row.
pub(crate) fn list(conn: &Connection, project: i64, bucket: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(LIST)?.execute(params![project, bucket])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_follows_the_rowid_in_steps_of_the_shift() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE calls (v)").unwrap();
        assert_eq!(current(&conn).unwrap(), 0);
        for (rowid, bucket) in [(8_190, 0), (8_191, 1), (16_383, 2), (1_000_000, 122)] {
            conn.execute("INSERT INTO calls (rowid, v) VALUES (?1, 0)", [rowid]).unwrap();
            assert_eq!(current(&conn).unwrap(), bucket, "after rowid {rowid}");
        }
    }
}
