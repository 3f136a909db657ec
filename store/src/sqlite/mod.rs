//! The embedded backend: one SQLite database in WAL mode. Writes go through the group-commit
//! [`writer`]; reads use a pool of connections on blocking threads, so neither ever blocks the
//! async runtime.
//!
//! This module opens and migrates the database; each resource's statements, row mapping and
//! trait implementation live in the module named for it.

mod annotation_queues;
mod blobs;
mod borrowed;
mod buckets;
mod calls;
mod checkpointer;
mod id_directory;
mod id_filter;
// `functions` and `sql` are public for the fuzz targets, which render queries and run them on
// an in-memory database (docs/fuzzing.md).
mod compile;
mod costs;
mod feedback;
mod files;
pub mod functions;
mod keys;
pub mod migrations;
mod objects;
mod op_keys;
mod otel_logs;
mod otel_resources;
mod project_keys;
mod project_settings;
mod projects;
pub mod sql;
mod substring;
mod tables;
mod tags;
// Public for the tests, which build the index at once ([`text_index::catch_up`]).
pub mod text_index;
mod threads;
mod values;
mod writer;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::Connection;
use rusqlite::config::DbConfig;

pub use self::writer::analyze;
use self::writer::{Writer, backend};
use crate::Result;

type Pool = r2d2::Pool<SqliteConnectionManager>;

/// Tuning of the embedded store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Write jobs that may wait for the writer before requests are shed with 503.
    pub write_queue: usize,
    /// Read connections.
    pub readers: u32,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions { write_queue: 16_384, readers: 8 }
    }
}

pub struct SqliteStore {
    writer: Writer,
    /// Used by the writer's jobs only, one at a time; see [`id_filter`].
    ids: Arc<Mutex<id_filter::IdFilter>>,
    readers: Pool,
    _checkpointer: checkpointer::Checkpointer,
}

/// Page size of a new database. A call row is 1–5 KB: on 4 KiB pages two small rows fill 3 KiB
/// of a page and a large one spills into an overflow page of its own, so about a fifth of the
/// table was empty space; 16 KiB pages hold them with little left over, and each B-tree insert
/// and WAL frame moves more rows per page (docs/benchmarks.md, "16 KiB pages").
const PAGE_SIZE: u32 = 16 * 1024;

/// Page cache of the writer's connection, in KiB. SQLite's 2 MiB default is 128 pages of
/// 16 KiB, fewer than a commit touches (the last leaf of the table and of each index, their
/// parents); pages that fall out between commits must be read back from the WAL or the file
/// (docs/storage.md#the-writers-page-cache).
const WRITER_CACHE_KIB: i64 = 16 * 1024;

/// Settings every connection gets (public for the plan tests, which plan as the server does).
///
/// - `synchronous = FULL` makes a commit durable against power loss, not only a process crash:
///   an ack must mean the data survives (group commit pays for the fsync once per batch, not
///   once per call).
/// - Plans do not depend on the values bound (SQLite's query planner stability guarantee).
///   Otherwise SQLite prepares a statement a second time at its first step whenever a bound
///   value could change the plan: every `LIMIT ?`, and every indexed column with STAT4
///   samples. That doubled the parsing of every page of `calls/stream_query`, and re-parsed the
///   per-span lookups of span calls at every use (docs/storage.md#planner-statistics). The
///   filters that must use one index name it (`INDEXED BY`), so nothing here relied on values.
pub fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.set_prepared_statement_cache_capacity(64);
    functions::register(conn)
}

/// The data directory could not be created.
#[derive(Debug, thiserror::Error)]
#[error("creating data dir {dir}: {source}")]
struct DataDirError {
    dir: String,
    source: std::io::Error,
}

/// The database's file in the data directory.
pub(crate) const DB_FILE: &str = "heddle.db";

impl SqliteStore {
    /// Opens (creating if needed) `dir/heddle.db` and migrates it to the latest schema.
    pub fn open(dir: &Path, opts: SqliteOptions) -> Result<SqliteStore> {
        std::fs::create_dir_all(dir)
            .map_err(|source| backend(DataDirError { dir: dir.display().to_string(), source }))?;
        let path = dir.join(DB_FILE);
        let mut conn = Connection::open(&path).map_err(backend)?;
        // Takes effect only on a new database (docs/storage.md#page-size).
        conn.pragma_update(None, "page_size", PAGE_SIZE).map_err(backend)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(backend)?;
        configure(&conn).map_err(backend)?;
        migrations::migrate(&mut conn).map_err(backend)?;
        let page_size: i64 =
            conn.pragma_query_value(None, "page_size", |row| row.get(0)).map_err(backend)?;
        let backstop = checkpointer::WRITER_AUTOCHECKPOINT_BYTES / page_size.max(512);
        conn.pragma_update(None, "wal_autocheckpoint", backstop).map_err(backend)?;
        conn.pragma_update(None, "journal_size_limit", checkpointer::WAL_SIZE_LIMIT)
            .map_err(backend)?;
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB).map_err(backend)?;
        let checkpointer = checkpointer::Checkpointer::start(path.clone()).map_err(backend)?;
        let manager = SqliteConnectionManager::file(&path).with_init(|c| configure(c));
        let readers = r2d2::Pool::builder()
            .max_size(opts.readers.max(1))
            .min_idle(Some(1))
            .build(manager)
            .map_err(backend)?;
        Ok(SqliteStore {
            writer: Writer::start(conn, opts.write_queue.max(1), text_index::idle_work()),
            ids: Arc::new(Mutex::new(id_filter::IdFilter::new(path))),
            readers,
            _checkpointer: checkpointer,
        })
    }

    /// Runs a read on a pooled connection off the async runtime.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let pool = self.readers.clone();
        tokio::task::spawn_blocking(move || f(&*pool.get().map_err(backend)?))
            .await
            .map_err(backend)?
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::{StatementStatus, params};

    use super::*;

    /// A statement run again with other values is not prepared again: not for its `LIMIT ?`,
    /// nor for an indexed column that has STAT4 samples.
    #[test]
    fn statements_are_not_prepared_again_for_their_values() {
        let mut conn = Connection::open_in_memory().unwrap();
        configure(&conn).unwrap();
        migrations::migrate(&mut conn).unwrap();
        for i in 0..200 {
            conn.execute(
                "INSERT INTO calls (project_key, id, bucket, trace_id, op_name, started_at, \
                 attributes, inputs, summary) VALUES (1, ?1, 0, ?2, 'op', ?3, '{}', '{}', '{}')",
                params![format!("id{i}"), format!("t{}", i % 7), i],
            )
            .unwrap();
        }
        analyze(&conn);
        let mut st = conn
            .prepare(
                "SELECT id FROM calls WHERE project_key = ?1 AND trace_id = ?2 ORDER BY started_at \
                 LIMIT ?3",
            )
            .unwrap();
        for (trace, limit) in [("t1", 5i64), ("t2", 50), ("t3", 1)] {
            let ids: Vec<String> = st
                .query_map(params![1, trace, limit], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert_eq!(ids.len() as i64, limit.min(29));
        }
        assert_eq!(st.get_status(StatementStatus::RePrepare), 0);
    }
}
