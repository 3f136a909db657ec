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

/// The live turn calls of a project; ?2 is NULL or a JSON array of the thread ids wanted. Read
/// from the partial index `calls_turns` alone, which holds every column used here. Named,
/// because SQLite's planner preferred the time index, which reads every call of the project
/// (docs/storage.md#indexes).
const SELECT_TURNS: &str = concat!(
    "
SELECT thread_id, id, started_at, ended_at FROM calls INDEXED BY calls_turns
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

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;
    use crate::sqlite::{configure, migrations};

    /// Turns in two buckets, among calls that are not turns, one deleted and one not started.
    fn database() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        configure(&conn).unwrap();
        migrations::migrate(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO project_keys (project_key, project_id) VALUES (1, 'e/p'), (2, 'e/q');
             INSERT INTO calls (project_key, id, thread_id, turn_id, started_at, ended_at,
                                deleted_at, bucket, attributes, inputs, summary) VALUES
               (1, 'a', 't1', 'a', 10, 11, NULL, 1, '{}', '{}', '{}'),
               (1, 'b', 't1', 'a', 12, 13, NULL, 1, '{}', '{}', '{}'),
               (1, 'c', 't2', 'c', 20, NULL, NULL, 2, '{}', '{}', '{}'),
               (1, 'd', 't1', 'd', 30, 31, NULL, 2, '{}', '{}', '{}'),
               (1, 'e', 't3', 'e', 40, 41, 50, 2, '{}', '{}', '{}'),
               (1, 'f', 't3', 'f', NULL, 41, NULL, 2, '{}', '{}', '{}'),
               (1, 'g', '', 'g', 60, 61, NULL, 2, '{}', '{}', '{}'),
               (2, 'h', 't1', 'h', 70, 71, NULL, 2, '{}', '{}', '{}');",
        )
        .unwrap();
        crate::sqlite::analyze(&conn);
        conn
    }

    fn turns(conn: &Connection, ids: Option<&str>) -> Vec<(String, String, i64, Option<i64>)> {
        let mut st = conn.prepare(SELECT_TURNS).unwrap();
        let rows = st
            .query_map(params!["e/p", ids], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap();
        let mut rows: Vec<_> = rows.map(Result::unwrap).collect();
        rows.sort();
        rows
    }

    #[test]
    fn turns_are_read_from_their_index_in_every_bucket() {
        let conn = database();
        let all = turns(&conn, None);
        let expected =
            [("t1", "a", 10, Some(11)), ("t1", "d", 30, Some(31)), ("t2", "c", 20, None)]
                .map(|(t, id, s, e)| (t.to_owned(), id.to_owned(), s, e));
        assert_eq!(all, expected, "live, started turns of the project only");
        let t2 = turns(&conn, Some(r#"["t2","t9"]"#));
        assert_eq!(t2, expected[2..]);
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {SELECT_TURNS}"))
            .unwrap()
            .query_map(params!["e/p", None::<String>], |r| r.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(plan[0].contains("INDEX calls_turns (project_key=?)"), "{plan:?}");
    }
}
