//! Integer keys of projects (docs/storage.md#project-keys).
//!
//! `calls` and `call_buckets` name a project by a small integer, its key in `project_keys`,
//! not by its id: every index of `calls` begins with the project, and text of a dozen to a few
//! dozen bytes in each entry made the indexes larger and every comparison in a descent slower.
//! The writer gives a project its key in the transaction that writes its first call ([`key`]).
//! Statements find the key from the id they are given with [`key_of!`], a subquery SQLite runs
//! once per statement, so no statement takes a key from outside.

use rusqlite::Connection;

use super::writer::rowid_or_insert;

/// The key of the project whose id is bound at the placeholder `$p`, as an SQL expression:
/// NULL, which matches no row, for a project that has no calls yet.
macro_rules! key_of {
    ($p:literal) => {
        concat!("(SELECT project_key FROM project_keys WHERE project_id = ", $p, ")")
    };
}
pub(crate) use key_of;

/// The id of the project of the `calls` row at hand, as an SQL expression.
pub(crate) const ID_OF_ROW: &str =
    "(SELECT project_id FROM project_keys WHERE project_key = calls.project_key)";

const SELECT: &str = "SELECT project_key FROM project_keys WHERE project_id = ?1";
const INSERT: &str = "INSERT INTO project_keys (project_id) VALUES (?1)";

/// The key of `project`, given to it now if it has none: in the caller's transaction, which
/// writes the project's calls.
pub(crate) fn key(conn: &Connection, project: &str) -> rusqlite::Result<i64> {
    rowid_or_insert(conn, SELECT, INSERT, &[&project])
}
