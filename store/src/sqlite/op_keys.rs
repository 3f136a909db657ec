//! Integer keys of ops (docs/storage.md#op-keys).
//!
//! A call's op name is a ref such as `weave:///entity/project/op/name:digest`, 80 to 110 bytes
//! whose first 30 or so are the same for every call of a project. `calls_by_op` indexes a small
//! integer instead, the op's key in `call_ops`: with the name, it was the largest index of
//! `calls`, and every step of every descent compared the shared prefix. The row keeps its name
//! as well, which reads and query expressions use.
//!
//! The writer gives an op its key in the transaction that writes its first call ([`key`]); keys
//! are never reused or removed. A filter on op names finds their keys with [`op_keys_of!`].

use rusqlite::Connection;

use super::writer::rowid_or_insert;

/// A query for the keys of the ops of the project whose key is the SQL expression `$key`; the
/// caller adds its condition on the ops' `name` with `AND`.
macro_rules! op_keys_of {
    ($key:expr) => {
        concat!("SELECT op_key FROM call_ops WHERE project_key = ", $key)
    };
}
pub(crate) use op_keys_of;

const SELECT: &str = "SELECT op_key FROM call_ops WHERE project_key = ?1 AND name = ?2";
const INSERT: &str = "INSERT INTO call_ops (project_key, name) VALUES (?1, ?2)";

/// The key of the op `name` of the project whose key is `project`, given to it now if it has
/// none: in the caller's transaction, which writes the op's calls.
pub(crate) fn key(conn: &Connection, project: i64, name: &str) -> rusqlite::Result<i64> {
    rowid_or_insert(conn, SELECT, INSERT, &[&project, &name])
}
