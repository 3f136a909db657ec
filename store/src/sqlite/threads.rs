//! Threads on SQLite: the turn calls read through a partial index, aggregated in Rust.

use async_trait::async_trait;
use heddle_domain::thread_stats::{Turn, aggregate};
use heddle_proto::threads::{Thread, ThreadsQuery};
use heddle_proto::time::Micros;
use rusqlite::params;

use super::SqliteStore;
use super::project_keys::key_of;
use super::writer::backend;
use crate::{Result, ThreadStore};

/// The live turn calls of a project (served by the partial index `calls_turns`); ?2 is NULL or
/// a JSON array of the thread ids wanted.
const SELECT_TURNS: &str = concat!(
    "
SELECT thread_id, id, started_at, ended_at FROM calls
WHERE project_key = ",
    key_of!("?1"),
    " AND turn_id = id AND thread_id != ''
  AND deleted_at IS NULL AND started_at IS NOT NULL
  AND (?2 IS NULL OR thread_id IN (SELECT value FROM json_each(?2)))
"
);

#[async_trait]
impl ThreadStore for SqliteStore {
    /// Reads the project's turn calls through the partial index and aggregates them in Rust
    /// (SQLite has no percentile aggregate); memory grows with the project's threads.
    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>> {
        let ids = q.thread_ids.as_ref().map(serde_json::to_string).transpose().map_err(backend)?;
        self.read(move |conn| {
            let mut st = conn.prepare_cached(SELECT_TURNS).map_err(backend)?;
            let turns = st
                .query_map(params![q.project.as_str(), ids], |r| {
                    Ok(Turn {
                        thread_id: r.get(0)?,
                        id: r.get(1)?,
                        started_at: Micros(r.get(2)?),
                        ended_at: r.get::<_, Option<i64>>(3)?.map(Micros),
                    })
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)?;
            Ok(aggregate(&q, turns))
        })
        .await
    }
}
