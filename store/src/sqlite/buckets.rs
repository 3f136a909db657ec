//! Buckets of the trace and parent indexes (docs/storage.md#buckets).
//!
//! Span, trace and parent ids are random, so in an index keyed by them each new row lands on a
//! leaf of its own, anywhere in the index, and a commit writes one whole page per new row and
//! index. `calls.bucket` puts the rowid's stretch at insert after the project in the trace,
//! parent and turns indexes and in the unique one: new rows then only touch the leaves of the
//! newest bucket, a few dozen pages however large the table grows. A lookup by trace or parent
//! probes every bucket of its project instead of one place: a descent per bucket, one per 8,192
//! rows written.
//!
//! Every row's bucket is listed in `call_buckets` for its project, in the transaction that
//! writes the row ([`list`]). Which bucket a new row goes into is the id directory's to say
//! ([`super::id_directory::bucket_for_new_rows`]): the unique index is bucketed too.

use rusqlite::{Connection, params};

/// Rows per bucket, as a shift of the rowid: 8,192. One bucket's entries in one index fill
/// about fifty 16 KiB leaves; a million calls are 122 buckets.
pub(crate) const SHIFT: u32 = 13;

/// `bucket IN (...)` of the buckets of the project whose id is bound at the placeholder `$p`: the
/// one rule every statement using the bucketed indexes follows.
macro_rules! in_project {
    ($p:literal) => {
        concat!(
            "bucket IN (SELECT bucket FROM call_buckets WHERE project_key = ",
            $crate::sqlite::project_keys::key_of!($p),
            ")"
        )
    };
}
pub(crate) use in_project;

const LIST: &str = "INSERT OR IGNORE INTO call_buckets (project_key, bucket) VALUES (?1, ?2)";

/// Lists `bucket` for the project of key `project`, in the caller's transaction: before any of
/// the project's rows is written into it, or lookups would not find that row.
pub(crate) fn list(conn: &Connection, project: i64, bucket: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(LIST)?.execute(params![project, bucket])?;
    Ok(())
}
