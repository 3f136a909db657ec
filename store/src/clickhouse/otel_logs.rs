//! OTLP log records on ClickHouse: rows of `otel_logs` (migrations/0013_otel_logs.sql). A record
//! stored twice is one row per id on read (`LIMIT 1 BY`), before merges remove the copy.

use std::sync::Arc;

use async_trait::async_trait;
use clickhouse::{Client, Row};
use heddle_proto::ProjectId;
use heddle_proto::limits::MAX_LOG_RECORDS_PER_CALL;
use heddle_proto::otlp::logs::{LogsQuery, OtelLog};
use serde::{Deserialize, Serialize};

use super::sql::{Param, Sql};
use super::{ClickHouseStore, backend};
use crate::otel_logs::SpanLogsLookup;
use crate::{OtelLogStore, Result};

const OTEL_LOGS: &str = "otel_logs";

/// A row of `otel_logs`, written and read alike.
#[derive(Debug, Row, Serialize, Deserialize)]
struct LogRow {
    project_id: String,
    trace_id: String,
    span_id: String,
    id: String,
    time_unix_nano: i64,
    seq: i64,
    event_name: String,
    severity_number: i32,
    severity_text: String,
    body: String,
    attributes: String,
    dump: String,
    wb_user_id: Option<String>,
}

impl From<OtelLog> for LogRow {
    fn from(l: OtelLog) -> Self {
        LogRow {
            project_id: l.project.as_str().to_owned(),
            trace_id: l.trace_id,
            span_id: l.span_id,
            id: l.id,
            time_unix_nano: l.time_unix_nano,
            seq: l.seq,
            event_name: l.event_name,
            severity_number: l.severity_number,
            severity_text: l.severity_text,
            body: l.body,
            attributes: l.attributes,
            dump: l.dump,
            wb_user_id: l.wb_user_id,
        }
    }
}

impl LogRow {
    fn into_log(self, project: &ProjectId) -> OtelLog {
        OtelLog {
            project: project.clone(),
            trace_id: self.trace_id,
            span_id: self.span_id,
            id: self.id,
            time_unix_nano: self.time_unix_nano,
            seq: self.seq,
            event_name: self.event_name,
            severity_number: self.severity_number,
            severity_text: self.severity_text,
            body: self.body,
            attributes: self.attributes,
            dump: self.dump,
            wb_user_id: self.wb_user_id,
        }
    }
}

const SELECT: &str = "SELECT project_id, trace_id, span_id, id, time_unix_nano, seq, event_name, \
                      severity_number, severity_text, body, attributes, dump, wb_user_id \
                      FROM otel_logs WHERE project_id = ";

/// The records of the given spans: the traces and spans are bound as two lists (the key's
/// prefix narrows the read to them) and the exact pairs kept by a tuple match. A record stored
/// twice may take two of a span's places until a merge; the merge into the call counts it once.
fn select_span_logs(project: &str, spans: &[(String, String)]) -> Sql {
    let mut sql = Sql::new(SELECT);
    let (traces, ids): (Vec<String>, Vec<String>) = spans.iter().cloned().unzip();
    sql.bind_str(project)
        .push(" AND trace_id IN ")
        .bind(Param::StrList(traces.clone()))
        .push(" AND span_id IN ")
        .bind(Param::StrList(ids.clone()))
        .push(" AND has(arrayZip(")
        .bind(Param::StrList(traces))
        .push(", ")
        .bind(Param::StrList(ids))
        .push("), (trace_id, span_id)) ORDER BY trace_id, span_id, time_unix_nano, seq, id")
        // A constant of ours, not a user value.
        .push(&format!(" LIMIT {MAX_LOG_RECORDS_PER_CALL} BY trace_id, span_id"));
    sql
}

fn select_logs(q: &LogsQuery) -> Sql {
    let mut sql = Sql::new(SELECT);
    sql.bind_str(q.project.as_str());
    if let Some(t) = &q.trace_id {
        sql.push(" AND trace_id = ").bind_str(t);
    }
    if let Some(s) = &q.span_id {
        sql.push(" AND span_id = ").bind_str(s);
    }
    sql.push(" ORDER BY time_unix_nano, seq, id LIMIT 1 BY id LIMIT ")
        .bind(Param::UInt(q.limit))
        .push(" OFFSET ")
        .bind(Param::UInt(q.offset));
    sql
}

impl ClickHouseStore {
    /// The lookup `query_calls` merges span calls with (`crate::otel_logs`).
    pub(super) fn span_logs_lookup(&self) -> SpanLogsLookup {
        let client: Client = self.client.clone();
        Arc::new(move |project, spans| {
            let client = client.clone();
            Box::pin(async move {
                let rows: Vec<LogRow> = select_span_logs(project.as_str(), &spans)
                    .query(&client)
                    .fetch_all()
                    .await
                    .map_err(backend)?;
                Ok(rows.into_iter().map(|r| r.into_log(&project)).collect())
            })
        })
    }
}

#[async_trait]
impl OtelLogStore for ClickHouseStore {
    async fn put_otel_logs(&self, logs: Vec<OtelLog>) -> Result<()> {
        let rows: Vec<LogRow> = logs.into_iter().map(LogRow::from).collect();
        self.insert::<LogRow>(OTEL_LOGS, &rows).await
    }

    async fn put_otel_logs_once(&self, logs: Vec<OtelLog>, token: &str) -> Result<()> {
        let rows: Vec<LogRow> = logs.into_iter().map(LogRow::from).collect();
        self.insert_once::<LogRow>(OTEL_LOGS, &rows, Some(token)).await
    }

    async fn query_otel_logs(&self, q: LogsQuery) -> Result<Vec<OtelLog>> {
        let rows: Vec<LogRow> =
            select_logs(&q).query(&self.client).fetch_all().await.map_err(backend)?;
        Ok(rows.into_iter().map(|r| r.into_log(&q.project)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn lookups_bind_user_values() {
        let evil = "x'); DROP TABLE otel_logs; --";
        let sql = select_span_logs(evil, &[(evil.into(), evil.into())]);
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        check_placeholders(&sql);
        let q = LogsQuery {
            project: ProjectId::parse("e/p").unwrap(),
            trace_id: Some(evil.into()),
            span_id: Some(evil.into()),
            limit: 10,
            offset: 0,
        };
        let sql = select_logs(&q);
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        check_placeholders(&sql);
    }
}
