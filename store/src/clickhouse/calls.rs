//! Calls on ClickHouse: append-only rows in `call_parts` (a start, an end, a rename or a
//! delete), aggregated per call at read time ([`sql::CALLS_AGG`]); queries rendered by
//! [`super::compile`].

use async_trait::async_trait;
use clickhouse::Row;
use futures::StreamExt;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallPart, CallsQuery, OtelDump, derive_summary};
use heddle_proto::time::Micros;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::json::index_json;
use super::sql::{self, Param, Sql};
use super::{ClickHouseStore, backend, next_version};
use crate::otel_logs::merge_span_logs;
use crate::{BoxError, CallStore, CallStream, Result, StoreError};

/// Table the call rows are written to (see migrations/0001_init.sql).
const CALL_PARTS: &str = "call_parts";

/// `kind` of a `call_parts` row (Enum8 in the schema).
const KIND_PART: i8 = 0;
const KIND_RENAME: i8 = 1;
const KIND_DELETE: i8 = 2;

/// One row of `call_parts`. Columns of a half the row does not carry keep their defaults.
#[derive(Debug, Default, Row, Serialize)]
struct PartRow {
    pub project_id: String,
    pub id: String,
    pub version: u64,
    pub kind: i8,
    pub has_start: u8,
    pub has_end: u8,
    pub trace_id: Option<String>,
    pub op_name: String,
    pub display_name: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_at: i64,
    pub attributes: String,
    pub attributes_q: String,
    pub inputs: String,
    pub inputs_q: String,
    pub input_refs: Vec<String>,
    pub otel_dump: Option<String>,
    pub wb_user_id: Option<String>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
    pub ended_at: i64,
    pub summary: String,
    pub summary_q: String,
    pub output: Option<String>,
    pub output_q: String,
    pub output_refs: Vec<String>,
    pub exception: Option<String>,
    pub wb_run_step_end: Option<i64>,
    pub deleted_at: i64,
}

impl PartRow {
    fn from_part(p: CallPart, version: u64) -> PartRow {
        let mut row = PartRow {
            project_id: p.project.as_str().to_owned(),
            id: p.id,
            version,
            kind: KIND_PART,
            trace_id: p.trace_id,
            ..PartRow::default()
        };
        if let Some(s) = p.start {
            let inputs = index_json(&s.inputs);
            row.has_start = 1;
            row.op_name = s.op_name;
            row.display_name = s.display_name.filter(|d| !d.is_empty());
            row.parent_id = s.parent_id;
            row.thread_id = s.thread_id;
            row.turn_id = s.turn_id;
            row.started_at = s.started_at.0;
            row.attributes_q = index_json(&s.attributes).q;
            row.attributes = s.attributes;
            row.inputs_q = inputs.q;
            row.input_refs = inputs.refs;
            row.inputs = s.inputs;
            row.otel_dump = s.otel_dump.map(OtelDump::into_string);
            row.wb_user_id = s.wb_user_id;
            row.wb_run_id = s.wb_run_id;
            row.wb_run_step = s.wb_run_step;
        }
        if let Some(e) = p.end {
            let output = e.output.as_deref().map(index_json).unwrap_or_default();
            row.has_end = 1;
            row.ended_at = e.ended_at.0;
            row.summary_q = index_json(&e.summary).q;
            row.summary = e.summary;
            row.output_q = output.q;
            row.output_refs = output.refs;
            row.output = e.output;
            row.exception = e.exception;
            row.wb_run_step_end = e.wb_run_step_end;
            // The end's name outranks the start's (sql::CALLS_AGG); a row carrying both halves
            // then holds the end's.
            if e.display_name.is_some() {
                row.display_name = e.display_name;
            }
        }
        row
    }

    fn rename(project: &ProjectId, id: &str, name: &str, version: u64) -> PartRow {
        PartRow {
            project_id: project.as_str().to_owned(),
            id: id.to_owned(),
            version,
            kind: KIND_RENAME,
            display_name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            ..PartRow::default()
        }
    }

    fn delete(project: &ProjectId, id: String, at: Micros, version: u64) -> PartRow {
        PartRow {
            project_id: project.as_str().to_owned(),
            id,
            version,
            kind: KIND_DELETE,
            deleted_at: at.0,
            ..PartRow::default()
        }
    }
}

/// A call row as [`sql::call_columns`] selects it.
#[derive(Debug, Row, Deserialize)]
struct CallRow {
    pub id: String,
    pub project_id: String,
    pub op_name: String,
    pub display_name: Option<String>,
    pub trace_id: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_us: i64,
    pub ended_us: Option<i64>,
    pub attributes_out: Option<String>,
    pub inputs_out: Option<String>,
    pub output_out: Option<String>,
    pub exception: Option<String>,
    pub summary: String,
    pub otel_dump_out: Option<String>,
    pub wb_user_id: Option<String>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
    pub wb_run_step_end: Option<i64>,
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("valid JSON")
}

impl CallRow {
    fn into_call(self) -> Result<Call, BoxError> {
        let started_at = Micros(self.started_us);
        let ended_at = self.ended_us.map(Micros);
        let summary = derive_summary(
            Some(self.summary.as_str()).filter(|s| !s.is_empty()),
            self.display_name.as_deref(),
            &self.op_name,
            started_at,
            ended_at,
            self.exception.is_some(),
        );
        Ok(Call {
            id: self.id,
            project_id: ProjectId::parse(&self.project_id)?,
            op_name: self.op_name,
            display_name: self.display_name,
            trace_id: self.trace_id.unwrap_or_default(),
            parent_id: self.parent_id,
            thread_id: self.thread_id,
            turn_id: self.turn_id,
            started_at,
            ended_at,
            attributes: raw(self.attributes_out)?.unwrap_or_else(empty_object),
            inputs: raw(self.inputs_out)?.unwrap_or_else(empty_object),
            output: raw(self.output_out)?,
            exception: self.exception,
            summary,
            otel_dump: raw(self.otel_dump_out)?,
            wb_user_id: self.wb_user_id,
            wb_username: None,
            wb_run_id: self.wb_run_id,
            wb_run_step: self.wb_run_step,
            wb_run_step_end: self.wb_run_step_end,
            // Deleted calls are never returned.
            deleted_at: None,
            expire_at: None,
            storage_size_bytes: None,
            total_storage_size_bytes: None,
        })
    }
}

/// Stored JSON text that does not parse: the table was changed behind heddle's back.
#[derive(Debug, thiserror::Error)]
#[error("stored JSON is invalid: {0}")]
struct InvalidStoredJson(#[source] serde_json::Error);

fn raw(json: Option<String>) -> Result<Option<Box<RawValue>>, InvalidStoredJson> {
    json.map(|s| RawValue::from_string(s).map_err(InvalidStoredJson)).transpose()
}

/// The calls among `{ids}` (and all their descendants) that are live, for a soft delete.
/// Descent goes through deleted calls too (their children may have arrived later); the path
/// guard makes a parent cycle terminate. Depth is bounded by ClickHouse's
/// `max_recursive_cte_evaluation_depth` (1000 by default).
fn doomed_calls(project: &str, ids: &[String]) -> Sql {
    let mut sql = Sql::default();
    sql.push(
        "WITH RECURSIVE links AS (
            SELECT id, argMaxIf(tuple(parent_id), version, has_start = 1).1 AS parent,
                   countIf(kind = 'delete') > 0 AS deleted
            FROM call_parts WHERE project_id = ",
    )
    .bind_str(project)
    .push(
        " GROUP BY id HAVING countIf(has_start = 1) > 0
        ),
        doomed AS (
            SELECT id, deleted, [id] AS path FROM links WHERE id IN ",
    )
    .bind(Param::StrList(ids.to_vec()))
    .push(
        " UNION ALL
            SELECT links.id, links.deleted, arrayPushBack(doomed.path, links.id)
            FROM links JOIN doomed ON links.parent = doomed.id
            WHERE NOT has(doomed.path, links.id)
        )
        SELECT DISTINCT id FROM doomed WHERE NOT deleted",
    );
    sql
}

/// The rows of `parts`, built off the async runtime: each JSON member is parsed once more to
/// find refs and numbers ClickHouse would rewrite ([`index_json`]).
async fn part_rows(parts: Vec<CallPart>) -> Result<Vec<PartRow>> {
    tokio::task::spawn_blocking(move || {
        parts.into_iter().map(|p| PartRow::from_part(p, next_version())).collect()
    })
    .await
    .map_err(backend)
}

#[async_trait]
impl CallStore for ClickHouseStore {
    async fn apply_call_parts(&self, parts: Vec<CallPart>) -> Result<()> {
        let rows = part_rows(parts).await?;
        self.insert::<PartRow>(CALL_PARTS, &rows).await
    }

    /// A batch that may arrive again verbatim (the consumer after a crash) is inserted under its
    /// token, so ClickHouse stores it once; were it stored twice, the aggregation per call would
    /// hide the duplicate rows anyway.
    async fn apply_call_parts_once(&self, parts: Vec<CallPart>, token: &str) -> Result<()> {
        let rows = part_rows(parts).await?;
        self.insert_once::<PartRow>(CALL_PARTS, &rows, Some(token)).await
    }

    async fn set_call_display_name(&self, project: &ProjectId, id: &str, name: &str) -> Result<()> {
        let row = PartRow::rename(project, id, name, next_version());
        self.insert::<PartRow>(CALL_PARTS, &[row]).await
    }

    async fn delete_calls(&self, project: &ProjectId, ids: &[String]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let doomed: Vec<String> = doomed_calls(project.as_str(), ids)
            .query(&self.client)
            .fetch_all::<String>()
            .await
            .map_err(backend)?;
        let at = Micros::now();
        let rows: Vec<PartRow> =
            doomed.into_iter().map(|id| PartRow::delete(project, id, at, next_version())).collect();
        self.insert::<PartRow>(CALL_PARTS, &rows).await?;
        Ok(rows.len() as u64)
    }

    async fn query_calls(&self, q: CallsQuery) -> Result<CallStream> {
        let statement = sql::select_calls(&q);
        let (columns, logs) = (q.columns, self.span_logs_lookup());
        let mut cursor = statement.query(&self.client).fetch::<CallRow>().map_err(backend)?;
        // The first row is fetched here, so an error in the query itself is this call's error
        // and the HTTP layer can answer with a status before the first byte.
        let first = match cursor.next().await.map_err(backend)? {
            Some(row) => row,
            None => return Ok(Box::pin(futures::stream::empty())),
        };
        let to_call = |row: CallRow| row.into_call().map_err(StoreError::Backend);
        let rest = futures::stream::unfold(Some(cursor), move |cursor| async move {
            let mut cursor = cursor?;
            match cursor.next().await {
                Ok(Some(row)) => Some((to_call(row), Some(cursor))),
                Ok(None) => None,
                Err(e) => Some((Err(backend(e)), None)),
            }
        });
        let rows = Box::pin(futures::stream::once(async move { to_call(first) }).chain(rest));
        // Span calls with their OTLP log records merged in (`crate::otel_logs`).
        Ok(merge_span_logs(rows, columns, logs))
    }

    async fn count_calls(&self, q: CallsQuery) -> Result<u64> {
        sql::count_calls(&q).query(&self.client).fetch_one::<u64>().await.map_err(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn deletes_bind_user_values() {
        let evil = "x'); DROP TABLE call_parts; --";
        let sql = doomed_calls(evil, &[evil.to_owned()]);
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        check_placeholders(&sql);
        assert_eq!(sql.params, [Param::Str(evil.into()), Param::StrList(vec![evil.into()])]);
    }
}
