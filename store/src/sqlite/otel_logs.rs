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

/// The records of each span, by the primary key's prefix: one indexed read per span.
fn span_logs(
    conn: &Connection,
    project: &ProjectId,
    spans: &[(String, String)],
) -> rusqlite::Result<Vec<OtelLog>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM otel_logs WHERE project_id = ?1 AND trace_id = ?2 AND span_id = ?3 \
         {ORDER} LIMIT ?4"
    );
    let mut st = conn.prepare_cached(&sql)?;
    let mut out = Vec::new();
    for (trace, span) in spans {
        let limit = MAX_LOG_RECORDS_PER_CALL as i64;
        let rows = st
            .query_map(params![project.as_str(), trace, span, limit], |r| row_to_log(project, r))?;
        for row in rows {
            out.push(row?);
        }
    }
    Ok(out)
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
