//! OTLP log records on SQLite: the `otel_logs` table (migrations/0013_otel_logs.sql), written
//! through the group-commit writer, read on the reader pool.

use std::sync::Arc;

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::limits::MAX_LOG_RECORDS_PER_CALL;
use heddle_proto::otlp::logs::{LogsQuery, OtelLog};
use rusqlite::{Connection, Row, params};

use super::writer::backend;
use super::{Pool, SqliteStore};
use crate::otel_logs::SpanLogsLookup;
use crate::{OtelLogStore, Result};

const INSERT_LOG: &str = "
INSERT INTO otel_logs (project_id, trace_id, span_id, id, time_unix_nano, seq, event_name,
    severity_number, severity_text, body, attributes, dump, wb_user_id)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
ON CONFLICT (project_id, trace_id, span_id, id) DO NOTHING
";

/// The columns [`row_to_log`] reads, in its order.
const COLUMNS: &str = "trace_id, span_id, id, time_unix_nano, seq, event_name, severity_number, \
                       severity_text, body, attributes, dump, wb_user_id";

const ORDER: &str = " ORDER BY time_unix_nano, seq, id";

fn row_to_log(project: &ProjectId, r: &Row) -> rusqlite::Result<OtelLog> {
    Ok(OtelLog {
        project: project.clone(),
        trace_id: r.get(0)?,
        span_id: r.get(1)?,
        id: r.get(2)?,
        time_unix_nano: r.get(3)?,
        seq: r.get(4)?,
        event_name: r.get(5)?,
        severity_number: r.get(6)?,
        severity_text: r.get(7)?,
        body: r.get(8)?,
        attributes: r.get(9)?,
        dump: r.get(10)?,
        wb_user_id: r.get(11)?,
    })
}

/// The records of the spans, at most [`MAX_LOG_RECORDS_PER_CALL`] each, oldest first: one
/// statement for all of them, each span read through the primary key's prefix. It was one
/// statement per span, which SQLite prepared again at every run for its `LIMIT ?` (see
/// `super::configure`): that parsing was a third of the server's CPU while it streamed span
/// calls back (docs/benchmarks.md, "Members written directly, span logs in one read, bodies
/// joined once").
fn span_logs(
    conn: &Connection,
    project: &ProjectId,
    spans: &[(String, String)],
) -> rusqlite::Result<Vec<OtelLog>> {
    let spans = serde_json::to_string(spans).expect("strings always serialise");
    let limit = MAX_LOG_RECORDS_PER_CALL as i64;
    let mut st = conn.prepare_cached(&span_logs_sql())?;
    let rows = st.query_map(params![project.as_str(), spans, limit], |r| row_to_log(project, r))?;
    rows.collect()
}

/// [`span_logs`]' statement: ?1 the project, ?2 the spans as a JSON list of `[trace_id,
/// span_id]`, ?3 the records per span.
fn span_logs_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM (SELECT {COLUMNS}, row_number() OVER (PARTITION BY trace_id, \
         span_id{ORDER}) AS nth FROM otel_logs WHERE project_id = ?1 AND (trace_id, span_id) \
         IN (SELECT value ->> 0, value ->> 1 FROM json_each(?2))) WHERE nth <= ?3{ORDER}"
    )
}

impl SqliteStore {
    /// The lookup `query_calls` merges span calls with (`crate::otel_logs`).
    pub(super) fn span_logs_lookup(&self) -> SpanLogsLookup {
        let pool: Pool = self.readers.clone();
        Arc::new(move |project, spans| {
            let pool = pool.clone();
            Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    let conn = pool.get().map_err(backend)?;
                    span_logs(&conn, &project, &spans).map_err(backend)
                })
                .await
                .map_err(backend)?
            })
        })
    }
}

#[async_trait]
impl OtelLogStore for SqliteStore {
    async fn put_otel_logs(&self, logs: Vec<OtelLog>) -> Result<()> {
        if logs.is_empty() {
            return Ok(());
        }
        self.writer
            .exec(move |conn| {
                let mut st = conn.prepare_cached(INSERT_LOG).map_err(backend)?;
                for l in &logs {
                    st.execute(params![
                        l.project.as_str(),
                        l.trace_id,
                        l.span_id,
                        l.id,
                        l.time_unix_nano,
                        l.seq,
                        l.event_name,
                        l.severity_number,
                        l.severity_text,
                        l.body,
                        l.attributes,
                        l.dump,
                        l.wb_user_id,
                    ])
                    .map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn query_otel_logs(&self, q: LogsQuery) -> Result<Vec<OtelLog>> {
        self.read(move |conn| {
            // Only fixed fragments are appended; every value is a parameter.
            let mut sql = format!("SELECT {COLUMNS} FROM otel_logs WHERE project_id = ?1");
            let mut values: Vec<rusqlite::types::Value> =
                vec![q.project.as_str().to_owned().into()];
            for (column, value) in
                [(" AND trace_id = ?", &q.trace_id), (" AND span_id = ?", &q.span_id)]
            {
                if let Some(v) = value {
                    values.push(v.clone().into());
                    sql.push_str(column);
                    sql.push_str(&values.len().to_string());
                }
            }
            sql.push_str(ORDER);
            values.push((q.limit as i64).into());
            sql.push_str(&format!(" LIMIT ?{}", values.len()));
            values.push((q.offset as i64).into());
            sql.push_str(&format!(" OFFSET ?{}", values.len()));
            let mut st = conn.prepare(&sql).map_err(backend)?;
            st.query_map(rusqlite::params_from_iter(values), |r| row_to_log(&q.project, r))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(conn: &Connection, trace: &str, span: &str, id: usize, time: i64) {
        conn.execute(
            INSERT_LOG,
            params![
                "e/p",
                trace,
                span,
                format!("{span}-{id}"),
                time,
                0,
                "",
                9,
                "INFO",
                "b",
                "{}",
                "{}",
                None::<String>
            ],
        )
        .unwrap();
    }

    #[test]
    fn the_records_of_the_asked_spans_oldest_first_at_most_the_limit_each() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        // Written out of time order; span c is not asked for, span d has no records.
        for (id, time) in [(0, 30), (1, 10), (2, 20)] {
            insert(&conn, "t1", "a", id, time);
        }
        let many = MAX_LOG_RECORDS_PER_CALL + 5;
        for id in 0..many {
            insert(&conn, "t2", "b", id, (many - id) as i64);
        }
        insert(&conn, "t1", "c", 0, 15);
        let project = ProjectId::parse("e/p").unwrap();
        let asked = [("t1", "a"), ("t2", "b"), ("t1", "d"), ("t2", "a")]
            .map(|(t, s)| (t.to_owned(), s.to_owned()));
        let logs = span_logs(&conn, &project, &asked).unwrap();
        let of = |span: &str| -> Vec<i64> {
            logs.iter().filter(|l| l.span_id == span).map(|l| l.time_unix_nano).collect()
        };
        assert_eq!(of("a"), [10, 20, 30]);
        assert!(logs.iter().all(|l| l.span_id != "a" || l.trace_id == "t1"));
        let b = of("b");
        assert_eq!(b.len(), MAX_LOG_RECORDS_PER_CALL);
        assert_eq!((b[0], b[b.len() - 1]), (1, MAX_LOG_RECORDS_PER_CALL as i64));
        assert!(of("c").is_empty() && of("d").is_empty());
        assert_eq!(logs.len(), 3 + MAX_LOG_RECORDS_PER_CALL);
    }

    #[test]
    fn each_span_is_read_through_the_primary_key() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", span_logs_sql()))
            .unwrap()
            .query_map(params!["e/p", "[]", 1], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let by_key = "SEARCH otel_logs USING INDEX sqlite_autoindex_otel_logs_1 \
                      (project_id=? AND trace_id=? AND span_id=?)";
        assert!(plan.iter().any(|step| step == by_key), "{plan:#?}");
    }
}
