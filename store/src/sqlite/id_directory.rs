//! Finding a call by id (docs/storage.md#id-directory).
//!
//! Rows of `calls` are unique by `(project_key, bucket, id)`, not by `(project_key, id)`: span ids
//! are random, and in an index led by the id each new row dirtied a leaf of its own anywhere in
//! it, about one page per span once a project is large. With the bucket before the id, new
//! entries fall in the newest bucket's leaves ([`super::buckets`]).
//!
//! A lookup by id must then learn the bucket. `call_ids` maps the id of every row in the buckets
//! up to `call_ids_merged.merged` to its bucket, and the buckets after it are few and probed one
//! by one ([`by_id!`]). The writer merges sealed buckets into the directory in one sorted run once
//! [`MERGE_AFTER`] of them wait ([`bucket_for_new_rows`]): each leaf of the directory then takes
//! tens of new entries at once rather than one per commit.
//!
//! A call is in one bucket only: every write that may insert a row looks its id up first
//! ([`Known`]), in the same transaction on the one writer, and updates the row where it is.

use std::borrow::Cow;
use std::collections::HashMap;

use rusqlite::{Connection, params};

use super::buckets;

/// The rows of the calls of the project whose key is the SQL expression `$key`, with an id in the
/// JSON array of strings `$ids`, selecting `$columns` of them (`c`): the one rule every statement
/// that finds calls by id follows. The directory gives the bucket of an id merged into it; each
/// bucket of the project after the directory's is probed for the rest. `$key` and `$ids` are
/// each written twice, in the order ids, key, ids, key, for statements that bind placeholders in
/// order.
///
/// The joins are `CROSS JOIN`s, which SQLite never reorders, so that each step into an index is
/// a seek on its whole key: the directory for each id, and each unmerged bucket for each id.
/// Given the ids as an `IN` list instead, the planner read every entry of the unmerged buckets
/// through the unique index and tested each against the list.
macro_rules! by_id {
    ($columns:literal, $key:expr, $ids:expr) => {
        concat!(
            "SELECT ",
            $columns,
            " FROM json_each(",
            $ids,
            ") j CROSS JOIN call_ids d CROSS JOIN calls c WHERE d.project_key = ",
            $key,
            " AND d.id = j.value AND c.project_key = d.project_key AND c.bucket = d.bucket \
             AND c.id = d.id UNION ALL SELECT ",
            $columns,
            " FROM call_buckets b CROSS JOIN json_each(",
            $ids,
            ") j CROSS JOIN calls c WHERE b.project_key = ",
            $key,
            " AND b.bucket > (SELECT merged FROM call_ids_merged) \
             AND c.project_key = b.project_key AND c.bucket = b.bucket AND c.id = j.value"
        )
    };
}
pub(crate) use by_id;

/// Sealed buckets left out of the directory before the writer merges them: a lookup probes at
/// most this many buckets and the newest one besides the directory, and a merge writes each leaf
/// of the directory it touches once for this many buckets' ids.
const MERGE_AFTER: i64 = 4;

const NEXT_ROWID_AND_MERGED: &str =
    "SELECT IFNULL(MAX(rowid), 0) + 1, (SELECT merged FROM call_ids_merged) FROM calls";

/// Every id of the buckets after ?1 and before ?2, in the directory's order, read bucket by
/// bucket from the unique index. A duplicate, which the writer never makes, replaces the entry
/// rather than stop every later write.
const MERGE: &str = "
INSERT OR REPLACE INTO call_ids (project_key, id, bucket)
SELECT c.project_key, c.id, c.bucket FROM call_buckets b
CROSS JOIN calls c ON c.project_key = b.project_key AND c.bucket = b.bucket
WHERE b.bucket > ?1 AND b.bucket < ?2
ORDER BY c.project_key, c.id";

const SET_MERGED: &str = "UPDATE call_ids_merged SET merged = ?1";

const FIND: &str = by_id!("c.id, c.rowid, c.bucket", "?1", "?2");

/// The bucket a row inserted now goes into, in the caller's transaction: the stretch of the next
/// rowid ([`buckets::SHIFT`]), but never a bucket already merged into the directory, where no
/// lookup would probe for it (the newest rows may have been purged). Merges the sealed buckets
/// into the directory first once [`MERGE_AFTER`] of them wait.
pub(crate) fn bucket_for_new_rows(conn: &Connection) -> rusqlite::Result<i64> {
    let (next, merged): (i64, i64) = conn
        .prepare_cached(NEXT_ROWID_AND_MERGED)?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let current = (next >> buckets::SHIFT).max(merged + 1);
    if current - 1 - merged >= MERGE_AFTER {
        conn.prepare_cached(MERGE)?.execute(params![merged, current])?;
        conn.prepare_cached(SET_MERGED)?.execute([current - 1])?;
    }
    Ok(current)
}

/// A call's row, found by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    pub rowid: i64,
    pub bucket: i64,
}

/// Where the calls a write job names are, by project key and id: looked up for the whole job in
/// one statement per project ([`Known::look_up`]), whose seeks SQLite makes in the ids' order, and
/// kept as the job inserts rows ([`Known::inserted`]), so that a later part of the same call
/// updates the row an earlier one inserted. An id the job inserts is the job's own string,
/// borrowed: the writer thread bounds every write's throughput, and a copy of each new id with
/// its hashing by SipHash and the map's growth were 2–3% of its time on a calls batch.
#[derive(Default)]
pub(crate) struct Known<'a> {
    by_project: Vec<(i64, Ids<'a>)>,
}

type Ids<'a> = HashMap<Cow<'a, str>, Found, foldhash::fast::RandomState>;

impl<'a> Known<'a> {
    /// Looks up every `(project key, id)` of `ids`, in the caller's transaction.
    pub fn look_up(
        conn: &Connection,
        ids: impl IntoIterator<Item = (i64, &'a str)>,
    ) -> rusqlite::Result<Known<'a>> {
        let mut wanted: Vec<(i64, Vec<&str>)> = Vec::new();
        for (project, id) in ids {
            match wanted.iter_mut().find(|(p, _)| *p == project) {
                Some((_, ids)) => ids.push(id),
                None => wanted.push((project, vec![id])),
            }
        }
        let mut st = conn.prepare_cached(FIND)?;
        let mut known = Known::default();
        for (project, mut ids) in wanted {
            // Room for every id the job names: those found, and those it will insert.
            let mut map = Ids::with_capacity_and_hasher(ids.len(), Default::default());
            // In order, the seeks walk each index's leaves once.
            ids.sort_unstable();
            let ids = serde_json::to_string(&ids).expect("strings serialise");
            let rows = st.query_map(params![project, ids], |r| {
                Ok((Cow::Owned(r.get(0)?), Found { rowid: r.get(1)?, bucket: r.get(2)? }))
            })?;
            for row in rows {
                let (id, found) = row?;
                map.insert(id, found);
            }
            known.by_project.push((project, map));
        }
        Ok(known)
    }

    /// Where the call `id` of the project of key `project` is, if it was found or inserted.
    pub fn get(&self, project: i64, id: &str) -> Option<Found> {
        let (_, ids) = self.by_project.iter().find(|(p, _)| *p == project)?;
        ids.get(id).copied()
    }

    /// Records a row the job inserted.
    pub fn inserted(&mut self, project: i64, id: &'a str, found: Found) {
        match self.by_project.iter_mut().find(|(p, _)| *p == project) {
            Some((_, ids)) => {
                ids.insert(Cow::Borrowed(id), found);
            }
            None => self.by_project.push((project, Ids::from_iter([(Cow::Borrowed(id), found)]))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::migrations;
    use super::*;

    fn insert(conn: &Connection, rowid: i64, id: &str, bucket: i64) {
        conn.execute(
            "INSERT INTO calls (rowid, project_key, id, bucket) VALUES (?1, 1, ?2, ?3)",
            params![rowid, id, bucket],
        )
        .unwrap();
        buckets::list(conn, 1, bucket).unwrap();
    }

    fn merged(conn: &Connection) -> i64 {
        conn.query_row("SELECT merged FROM call_ids_merged", [], |r| r.get(0)).unwrap()
    }

    /// New rows follow the rowid in steps of a bucket; sealed buckets are merged once
    /// [`MERGE_AFTER`] of them wait, and every id is found, merged or not, in its own bucket.
    #[test]
    fn ids_are_found_before_and_after_their_bucket_is_merged() {
        let dir = tempfile::tempdir().unwrap();
        let conn = migrations::database_at(dir.path(), migrations::LATEST);
        assert_eq!(bucket_for_new_rows(&conn).unwrap(), 0);
        insert(&conn, 8_190, "a", 0);
        assert_eq!(bucket_for_new_rows(&conn).unwrap(), 0);
        insert(&conn, 8_191, "b", 0);
        assert_eq!(bucket_for_new_rows(&conn).unwrap(), 1);
        for (rowid, id, bucket) in [(16_384, "c", 2), (30_000, "d", 3)] {
            insert(&conn, rowid, id, bucket);
        }
        // Buckets 0 to 2 are sealed, and 3 is the newest: under MERGE_AFTER, nothing merged.
        assert_eq!(bucket_for_new_rows(&conn).unwrap(), 3);
        assert_eq!(merged(&conn), -1);
        let find = |project, id| Known::look_up(&conn, [(project, id)]).unwrap().get(project, id);
        let found = |id| find(1, id).map(|f| f.bucket);
        for (id, bucket) in [("a", 0), ("b", 0), ("c", 2), ("d", 3)] {
            assert_eq!(found(id), Some(bucket), "{id} unmerged");
        }
        insert(&conn, 41_000, "e", 5);
        assert_eq!(bucket_for_new_rows(&conn).unwrap(), 5);
        assert_eq!(merged(&conn), 4);
        let entries: i64 =
            conn.query_row("SELECT count(*) FROM call_ids", [], |r| r.get(0)).unwrap();
        assert_eq!(entries, 4);
        for (id, bucket) in [("a", 0), ("b", 0), ("c", 2), ("d", 3), ("e", 5)] {
            assert_eq!(found(id), Some(bucket), "{id} merged");
        }
        assert_eq!(found("z"), None);
        assert_eq!(find(2, "a"), None, "another project's id");
        // The newest rows purged: new rows still go after the merged buckets.
        conn.execute("DELETE FROM calls WHERE rowid >= 30000", []).unwrap();
        assert_eq!(bucket_for_new_rows(&conn).unwrap(), 5);
        assert_eq!(found("d"), None);
        let entries: i64 =
            conn.query_row("SELECT count(*) FROM call_ids", [], |r| r.get(0)).unwrap();
        assert_eq!(entries, 3, "a deleted row's entry goes with it");
    }

    /// The lookup seeks on whole keys: the directory by id, and each unmerged bucket by bucket
    /// and id, for many ids at once, with the statistics the writer takes at open of an empty
    /// database, which say every table is empty.
    #[test]
    fn a_lookup_seeks_the_directory_and_each_unmerged_bucket() {
        let dir = tempfile::tempdir().unwrap();
        let conn = migrations::database_at(dir.path(), migrations::LATEST);
        super::super::writer::analyze(&conn);
        for rowid in 1..3_000 {
            insert(&conn, rowid, &format!("{rowid:x}"), rowid >> buckets::SHIFT);
        }
        conn.execute("INSERT INTO call_ids SELECT project_key, id, bucket FROM calls", []).unwrap();
        let ids: Vec<String> = (1..200).map(|i| format!("{:x}", i * 7)).collect();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {FIND}"))
            .unwrap()
            .query_map(params![1, serde_json::to_string(&ids).unwrap()], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let seeks = |step: &str| plan.iter().filter(|s| s.as_str() == step).count();
        let whole_key = "SEARCH c USING COVERING INDEX sqlite_autoindex_calls_1 \
                         (project_key=? AND bucket=? AND id=?)";
        assert_eq!(seeks("SEARCH d USING PRIMARY KEY (project_key=? AND id=?)"), 1, "{plan:#?}");
        assert_eq!(
            seeks("SEARCH b USING PRIMARY KEY (project_key=? AND bucket>?)"),
            1,
            "{plan:#?}"
        );
        assert_eq!(seeks(whole_key), 2, "{plan:#?}");

        let merge: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {MERGE}"))
            .unwrap()
            .query_map(params![-1, 5], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let bucket_by_bucket = "SEARCH c USING COVERING INDEX sqlite_autoindex_calls_1 \
                                (project_key=? AND bucket=?)";
        assert!(merge.iter().any(|s| s == bucket_by_bucket), "{merge:#?}");
    }
}
