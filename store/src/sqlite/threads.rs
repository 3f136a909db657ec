//! Threads on SQLite: the turn calls read through a partial index, aggregated in Rust.

use async_trait::async_trait;
use heddle_domain::thread_stats::{Turn, aggregate};
use heddle_proto::threads::{Thread, ThreadsQuery};
use heddle_proto::time::Micros;
use rusqlite::{Connection, ToSql};

use super::SqliteStore;
use super::buckets::in_project;
use super::project_keys::key_of;
use super::writer::backend;
use crate::{Result, ThreadStore};

/// The live turn calls of a project, read from the partial index `calls_turns` alone, which
/// holds every column used here. The index is named because SQLite's planner preferred the time
/// index, which reads every call of the project (docs/storage.md#indexes).
macro_rules! select_turns {
    ($($filter:expr),*) => {
        concat!(
            "
SELECT thread_id, id, started_at, ended_at FROM calls INDEXED BY calls_turns
WHERE project_key = ",
            key_of!("?1"),
            $($filter,)*
            " AND turn_id = id AND thread_id != ''
  AND deleted_at IS NULL AND started_at IS NOT NULL"
        )
    };
}

/// Every turn of the project.
const SELECT_TURNS: &str = select_turns!();

/// The turns of the threads listed in ?2 (a JSON array): one seek per thread and bucket, since
/// the index is partitioned by bucket (docs/storage.md#buckets), rather than every turn read.
const SELECT_THREAD_TURNS: &str = select_turns!(
    " AND ",
    in_project!("?1"),
    " AND thread_id IN (SELECT value FROM json_each(?2))"
);

#[async_trait]
impl ThreadStore for SqliteStore {
    /// Reads the project's turn calls through the partial index and aggregates them in Rust
    /// (SQLite has no percentile aggregate); memory grows with the project's threads.
    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>> {
        let ids = q.thread_ids.as_ref().map(serde_json::to_string).transpose().map_err(backend)?;
        self.read(move |conn| {
            let turns = turns(conn, q.project.as_str(), ids.as_deref()).map_err(backend)?;
            Ok(aggregate(&q, turns))
        })
        .await
    }
}

/// The live turns of `project`: of the threads listed in `ids` (a JSON array), or all of them.
fn turns(conn: &Connection, project: &str, ids: Option<&str>) -> rusqlite::Result<Vec<Turn>> {
    let (sql, params): (_, Vec<&dyn ToSql>) = match &ids {
        Some(ids) => (SELECT_THREAD_TURNS, vec![&project, ids]),
        None => (SELECT_TURNS, vec![&project]),
    };
    let mut st = conn.prepare_cached(sql)?;
    let rows = st.query_map(params.as_slice(), |r| {
        Ok(Turn {
            thread_id: r.get(0)?,
            id: r.get(1)?,
            started_at: Micros(r.get(2)?),
            ended_at: r.get::<_, Option<i64>>(3)?.map(Micros),
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, params};

    use super::*;
    use crate::sqlite::{configure, migrations};

    /// Turns in two buckets, among calls that are not turns, one deleted and one not started, and
    /// 500 turns of other threads.
    fn database() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        configure(&conn).unwrap();
        migrations::migrate(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO project_keys (project_key, project_id) VALUES (1, 'e/p'), (2, 'e/q');
             INSERT INTO call_buckets (project_key, bucket) VALUES (1, 1), (1, 2), (2, 2);
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
        // Other threads, enough for the planner to seek one thread rather than read them all.
        for i in 0..500 {
            conn.execute(
                "INSERT INTO calls (project_key, id, thread_id, turn_id, started_at, bucket, \
                 attributes, inputs, summary) VALUES (1, ?1, ?1, ?1, 100, 2, '{}', '{}', '{}')",
                [format!("x{i}")],
            )
            .unwrap();
        }
        crate::sqlite::analyze(&conn);
        conn
    }

    fn read(conn: &Connection, ids: Option<&str>) -> Vec<(String, String, i64, Option<i64>)> {
        let turns = turns(conn, "e/p", ids).unwrap();
        let mut rows: Vec<_> = turns
            .into_iter()
            .map(|t| (t.thread_id, t.id, t.started_at.0, t.ended_at.map(|e| e.0)))
            .collect();
        rows.sort();
        rows
    }

    #[test]
    fn turns_are_read_from_their_index_in_every_bucket() {
        let conn = database();
        let all = read(&conn, None);
        let expected =
            [("t1", "a", 10, Some(11)), ("t1", "d", 30, Some(31)), ("t2", "c", 20, None)]
                .map(|(t, id, s, e)| (t.to_owned(), id.to_owned(), s, e));
        assert_eq!(all.len(), 503);
        assert_eq!(all[..3], expected, "live, started turns of the project only");
        let t2 = read(&conn, Some(r#"["t2","t9"]"#));
        assert_eq!(t2, expected[2..]);
        let t1 = read(&conn, Some(r#"["t1"]"#));
        assert_eq!(t1, expected[..2], "a thread's turns in both buckets");
        let plan = |sql: &str, params: &[&dyn ToSql]| -> String {
            let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = st.query_map(params, |r| r.get::<_, String>(3)).unwrap();
            rows.map(Result::unwrap).next().unwrap()
        };
        assert_eq!(
            plan(SELECT_TURNS, params!["e/p"]),
            "SEARCH calls USING INDEX calls_turns (project_key=?)"
        );
        assert_eq!(
            plan(SELECT_THREAD_TURNS, params!["e/p", r#"["t1"]"#]),
            "SEARCH calls USING INDEX calls_turns (project_key=? AND bucket=? AND thread_id=?)"
        );
    }
}
