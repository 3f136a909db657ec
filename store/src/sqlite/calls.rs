//! Calls on SQLite: one row per call in `calls`, upserted part by part; queries rendered by
//! [`super::compile`].

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallPart, CallsQuery, derive_summary};
use heddle_proto::time::Micros;
use rusqlite::{Row, params};

use super::values::{empty_object, project_id, raw};
use super::writer::{WriteConn, backend};
use super::{SqliteStore, sql};
use crate::otel_logs::merge_span_logs;
use crate::{CallStore, CallStream, Result};

/// Upsert of one call part. A start part has `started_at` set, an end part `ended_at`; each
/// half only overwrites its own columns, so parts commute and duplicates are no-ops.
///
/// The display name has three sources, highest rank first: a `/call/update` rename
/// (`name_updated` = 1), the end part's name (`name_updated` = 2), the start's (0).
/// A source only replaces a name of the same or a lower rank, whatever the arrival order.
/// ?21 is the end part's name.
const UPSERT_CALL_PART: &str = "
INSERT INTO calls (project_id, id, trace_id, op_name, display_name, parent_id, thread_id, turn_id,
                   started_at, attributes, inputs, otel_dump, wb_user_id, wb_run_id, wb_run_step,
                   ended_at, summary, output, exception, wb_run_step_end, name_updated)
VALUES (?1, ?2, ?3, ?4, COALESCE(NULLIF(?21, ''), NULLIF(?5, '')), ?6, ?7, ?8, ?9, ?10, ?11, ?12,
        ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, IIF(NULLIF(?21, '') IS NULL, 0, 2))
ON CONFLICT (project_id, id) DO UPDATE SET
    trace_id        = COALESCE(excluded.trace_id, calls.trace_id),
    op_name         = IIF(excluded.started_at IS NULL, calls.op_name, excluded.op_name),
    display_name    = CASE
                        WHEN calls.name_updated = 1 THEN calls.display_name
                        WHEN excluded.name_updated = 2 THEN excluded.display_name
                        WHEN excluded.started_at IS NULL OR calls.name_updated = 2
                            THEN calls.display_name
                        ELSE excluded.display_name
                      END,
    name_updated    = IIF(calls.name_updated = 1, 1,
                          MAX(calls.name_updated, excluded.name_updated)),
    parent_id       = IIF(excluded.started_at IS NULL, calls.parent_id, excluded.parent_id),
    thread_id       = IIF(excluded.started_at IS NULL, calls.thread_id, excluded.thread_id),
    turn_id         = IIF(excluded.started_at IS NULL, calls.turn_id, excluded.turn_id),
    started_at      = COALESCE(excluded.started_at, calls.started_at),
    attributes      = IIF(excluded.started_at IS NULL, calls.attributes, excluded.attributes),
    inputs          = IIF(excluded.started_at IS NULL, calls.inputs, excluded.inputs),
    otel_dump       = IIF(excluded.started_at IS NULL, calls.otel_dump, excluded.otel_dump),
    wb_user_id      = IIF(excluded.started_at IS NULL, calls.wb_user_id, excluded.wb_user_id),
    wb_run_id       = IIF(excluded.started_at IS NULL, calls.wb_run_id, excluded.wb_run_id),
    wb_run_step     = IIF(excluded.started_at IS NULL, calls.wb_run_step, excluded.wb_run_step),
    ended_at        = COALESCE(excluded.ended_at, calls.ended_at),
    summary         = IIF(excluded.ended_at IS NULL, calls.summary, excluded.summary),
    output          = IIF(excluded.ended_at IS NULL, calls.output, excluded.output),
    exception       = IIF(excluded.ended_at IS NULL, calls.exception, excluded.exception),
    wb_run_step_end = IIF(excluded.ended_at IS NULL, calls.wb_run_step_end, excluded.wb_run_step_end)
";

const SET_DISPLAY_NAME: &str = "
INSERT INTO calls (project_id, id, display_name, name_updated) VALUES (?1, ?2, NULLIF(?3, ''), 1)
ON CONFLICT (project_id, id) DO UPDATE SET display_name = excluded.display_name, name_updated = 1
";

/// Soft delete of the listed calls (?2, a JSON array) and every descendant.
const DELETE_CALLS: &str = "
WITH RECURSIVE doomed(id) AS (
    SELECT id FROM calls WHERE project_id = ?1 AND id IN (SELECT value FROM json_each(?2))
    UNION
    SELECT c.id FROM calls c JOIN doomed d ON c.parent_id = d.id WHERE c.project_id = ?1
)
UPDATE calls SET deleted_at = ?3
WHERE project_id = ?1 AND deleted_at IS NULL AND started_at IS NOT NULL
  AND id IN (SELECT id FROM doomed)
";

/// Rows buffered between the reading thread and the HTTP response.
const STREAM_BUFFER: usize = 256;

/// Writes one part with [`UPSERT_CALL_PART`], its texts read in place
/// ([`WriteConn::execute_in_place`]): a part's members are most of its bytes.
fn upsert_part(conn: &WriteConn<'_>, p: &CallPart) -> rusqlite::Result<()> {
    let s = p.start.as_ref();
    let e = p.end.as_ref();
    conn.execute_in_place(
        UPSERT_CALL_PART,
        &[
            p.project.as_str().into(),
            p.id.as_str().into(),
            p.trace_id.as_deref().into(),
            s.map(|s| s.op_name.as_str()).into(),
            s.and_then(|s| s.display_name.as_deref()).into(),
            s.and_then(|s| s.parent_id.as_deref()).into(),
            s.and_then(|s| s.thread_id.as_deref()).into(),
            s.and_then(|s| s.turn_id.as_deref()).into(),
            s.map(|s| s.started_at.0).into(),
            s.map(|s| s.attributes.as_str()).into(),
            s.map(|s| s.inputs.as_str()).into(),
            s.and_then(|s| s.otel_dump.as_deref()).into(),
            s.and_then(|s| s.wb_user_id.as_deref()).into(),
            s.and_then(|s| s.wb_run_id.as_deref()).into(),
            s.and_then(|s| s.wb_run_step).into(),
            e.map(|e| e.ended_at.0).into(),
            e.map(|e| e.summary.as_str()).into(),
            e.and_then(|e| e.output.as_deref()).into(),
            e.and_then(|e| e.exception.as_deref()).into(),
            e.and_then(|e| e.wb_run_step_end).into(),
            e.and_then(|e| e.display_name.as_deref()).into(),
        ],
    )?;
    Ok(())
}

/// Builds a [`Call`] from a row selected with [`sql::call_columns`].
fn row_to_call(r: &Row<'_>) -> rusqlite::Result<Call> {
    let op_name: String = r.get(2)?;
    let display_name: Option<String> = r.get(3)?;
    let started_at = Micros(r.get(8)?);
    let ended_at = r.get::<_, Option<i64>>(9)?.map(Micros);
    let exception: Option<String> = r.get(13)?;
    let summary: Option<String> = r.get(14)?;
    let summary = derive_summary(
        summary.as_deref(),
        display_name.as_deref(),
        &op_name,
        started_at,
        ended_at,
        exception.is_some(),
    );
    Ok(Call {
        id: r.get(0)?,
        project_id: project_id(&r.get::<_, String>(1)?)?,
        op_name,
        display_name,
        trace_id: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
        parent_id: r.get(5)?,
        thread_id: r.get(6)?,
        turn_id: r.get(7)?,
        started_at,
        ended_at,
        attributes: raw(r.get(10)?)?.unwrap_or_else(empty_object),
        inputs: raw(r.get(11)?)?.unwrap_or_else(empty_object),
        output: raw(r.get(12)?)?,
        exception,
        summary,
        otel_dump: raw(r.get(15)?)?,
        wb_user_id: r.get(16)?,
        wb_username: None,
        wb_run_id: r.get(17)?,
        wb_run_step: r.get(18)?,
        wb_run_step_end: r.get(19)?,
        deleted_at: r.get::<_, Option<i64>>(20)?.map(Micros),
        expire_at: None,
        storage_size_bytes: None,
        total_storage_size_bytes: None,
    })
}

fn stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[async_trait]
impl CallStore for SqliteStore {
    async fn apply_call_parts(&self, parts: Vec<CallPart>) -> Result<()> {
        self.writer
            .exec(move |conn| {
                for p in &parts {
                    upsert_part(conn, p).map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn set_call_display_name(&self, project: &ProjectId, id: &str, name: &str) -> Result<()> {
        let (project, id, name) = (project.clone(), id.to_owned(), name.to_owned());
        self.writer
            .exec(move |conn| {
                conn.prepare_cached(SET_DISPLAY_NAME)
                    .and_then(|mut st| st.execute(params![project.as_str(), id, name]))
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn delete_calls(&self, project: &ProjectId, ids: &[String]) -> Result<u64> {
        let project = project.clone();
        let ids = serde_json::to_string(ids).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                let n = conn
                    .execute(DELETE_CALLS, params![project.as_str(), ids, Micros::now().0])
                    .map_err(backend)?;
                Ok(n as u64)
            })
            .await
    }

    async fn query_calls(&self, q: CallsQuery) -> Result<CallStream> {
        let statement = sql::select_calls(&q);
        let columns = q.columns;
        let pool = self.readers.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Call>>(STREAM_BUFFER);
        tokio::task::spawn_blocking(move || {
            let run = || -> Result<()> {
                let conn = pool.get().map_err(backend)?;
                let mut st = conn.prepare(&statement.text).map_err(backend)?;
                let mut rows = st
                    .query(rusqlite::params_from_iter(statement.params.iter()))
                    .map_err(backend)?;
                while let Some(row) = rows.next().map_err(backend)? {
                    let call = row_to_call(row).map_err(backend)?;
                    if tx.blocking_send(Ok(call)).is_err() {
                        break; // the client went away: stop reading
                    }
                }
                Ok(())
            };
            if let Err(e) = run() {
                let _ = tx.blocking_send(Err(e));
            }
        });
        // Span calls with their OTLP log records merged in (`crate::otel_logs`).
        Ok(merge_span_logs(Box::pin(stream_from(rx)), columns, self.span_logs_lookup()))
    }

    async fn count_calls(&self, q: CallsQuery) -> Result<u64> {
        let statement = sql::count_calls(&q);
        self.read(move |conn| {
            conn.query_row(
                &statement.text,
                rusqlite::params_from_iter(statement.params.iter()),
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(backend)
        })
        .await
    }
}
