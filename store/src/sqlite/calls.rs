//! Calls on SQLite: one row per call in `calls`, upserted part by part; queries rendered by
//! [`super::compile`].

use std::collections::HashMap;
use std::hash::Hash;

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallPart, CallsQuery, EndPart, derive_summary};
use heddle_proto::time::Micros;
use rusqlite::{Row, params};

use super::borrowed::Param;
use super::buckets::{self, in_project};
use super::id_directory::{self, Found, Known, by_id};
use super::id_filter;
use super::project_keys::{self, key_of};
use super::values::{empty_object, raw};
use super::writer::{WriteConn, backend};
use super::{SqliteStore, sql};
use super::{op_keys, otel_resources, text_index};
use crate::otel_logs::merge_span_logs;
use crate::{CallStore, CallStream, Result};

/// Upsert of one call part. A start part has `started_at` set, an end part `ended_at`; each
/// half only overwrites its own columns, so parts commute and duplicates are no-ops.
///
/// The display name has three sources, highest rank first: a `/call/update` rename
/// (`name_updated` = 1), the end part's name (`name_updated` = 2), the start's (0).
/// A source only replaces a name of the same or a lower rank, whatever the arrival order.
/// ?1 is the project's key ([`project_keys`]). ?21 is the end part's name. ?23 is the bucket of
/// the existing row, found by id ([`Known`]), or else of a new row
/// ([`id_directory::bucket_for_new_rows`]). ?24 is the id of the resource taken out of the
/// dump, ?12 ([`otel_resources`]). ?25 is the key of the op named ?4 ([`op_keys`]).
const UPSERT_CALL_PART: &str = "
INSERT INTO calls (project_key, id, trace_id, op_name, display_name, parent_id, thread_id, turn_id,
                   started_at, attributes, inputs, otel_dump, wb_user_id, wb_run_id, wb_run_step,
                   ended_at, summary, output, exception, wb_run_step_end, name_updated, end_status,
                   bucket, otel_resource, op_key)
VALUES (?1, ?2, ?3, ?4, COALESCE(NULLIF(?21, ''), NULLIF(?5, '')), ?6, ?7, ?8, ?9, ?10, ?11, ?12,
        ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, IIF(NULLIF(?21, '') IS NULL, 0, 2), ?22, ?23, ?24,
        ?25)
ON CONFLICT (project_key, bucket, id) DO UPDATE SET
    trace_id        = COALESCE(excluded.trace_id, calls.trace_id),
    op_name         = IIF(excluded.started_at IS NULL, calls.op_name, excluded.op_name),
    op_key          = IIF(excluded.started_at IS NULL, calls.op_key, excluded.op_key),
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
    otel_resource   = IIF(excluded.started_at IS NULL, calls.otel_resource, excluded.otel_resource),
    wb_user_id      = IIF(excluded.started_at IS NULL, calls.wb_user_id, excluded.wb_user_id),
    wb_run_id       = IIF(excluded.started_at IS NULL, calls.wb_run_id, excluded.wb_run_id),
    wb_run_step     = IIF(excluded.started_at IS NULL, calls.wb_run_step, excluded.wb_run_step),
    ended_at        = COALESCE(excluded.ended_at, calls.ended_at),
    summary         = IIF(excluded.ended_at IS NULL, calls.summary, excluded.summary),
    output          = IIF(excluded.ended_at IS NULL, calls.output, excluded.output),
    exception       = IIF(excluded.ended_at IS NULL, calls.exception, excluded.exception),
    wb_run_step_end = IIF(excluded.ended_at IS NULL, calls.wb_run_step_end, excluded.wb_run_step_end),
    end_status      = IIF(excluded.ended_at IS NULL, calls.end_status, excluded.end_status)
";

/// ?1 is the project's key, ?4 the bucket, as in [`UPSERT_CALL_PART`].
const SET_DISPLAY_NAME: &str = "
INSERT INTO calls (project_key, id, display_name, name_updated, bucket)
VALUES (?1, ?2, NULLIF(?3, ''), 1, ?4)
ON CONFLICT (project_key, bucket, id) DO UPDATE SET
    display_name = excluded.display_name, name_updated = 1
";

/// Soft delete of the listed calls (?2, a JSON array) of project ?1 (its id) and every
/// descendant; the listed calls are found by id ([`by_id!`]), their children through
/// `calls_by_parent`, in each of the project's buckets. The plan is named, not left to
/// statistics that may be older than the rows (see `compile.rs`, `calls_table`).
const DELETE_CALLS: &str = concat!(
    "
WITH RECURSIVE doomed(r, id) AS (
    SELECT * FROM (",
    by_id!("c.rowid, c.id", key_of!("?1"), "?2"),
    ")
    UNION
    SELECT c.rowid, c.id FROM doomed d CROSS JOIN calls c INDEXED BY calls_by_parent
    ON c.parent_id = d.id
    WHERE c.project_key = ",
    key_of!("?1"),
    " AND c.",
    in_project!("?1"),
    "
)
UPDATE calls NOT INDEXED SET deleted_at = ?3
WHERE rowid IN (SELECT r FROM doomed) AND deleted_at IS NULL AND started_at IS NOT NULL
"
);

/// Rows buffered between the reading thread and the HTTP response.
const STREAM_BUFFER: usize = 256;

/// Where a part's row is, or goes: its project's key and its bucket.
#[derive(Clone, Copy)]
struct Place {
    project: i64,
    bucket: i64,
}

/// The `otel_dump` a row stores: as sent, or split from its resource ([`otel_resources`]).
struct Dump<'a> {
    text: Option<&'a str>,
    resource: Option<i64>,
}

/// The ids a batch has made, by what they were made for.
type Made<K> = HashMap<K, i64, foldhash::fast::RandomState>;

/// The id `make` gives `key`, made once per batch: a batch's parts mostly share a few keys (a
/// project, an op, a resource), found here by hashing them, not by a statement.
fn once_per_batch<K: Copy + Eq + Hash>(
    made: &mut Made<K>,
    key: K,
    make: impl FnOnce(K) -> rusqlite::Result<i64>,
) -> rusqlite::Result<i64> {
    if let Some(&id) = made.get(&key) {
        return Ok(id);
    }
    let id = make(key)?;
    made.insert(key, id);
    Ok(id)
}

/// Writes one part with [`UPSERT_CALL_PART`], its texts read in place
/// ([`WriteConn::execute_in_place`]): a part's members are most of its bytes. `end_status` is
/// the end's [`EndPart::status`], read before the job reaches the writer; where it is `None`,
/// the status index's expression computes it from the stored row.
fn upsert_part(
    conn: &WriteConn<'_>,
    p: &CallPart,
    end_status: Option<&'static str>,
    Place { project, bucket }: Place,
    dump: Dump<'_>,
    op: Option<i64>,
) -> rusqlite::Result<()> {
    let s = p.start.as_ref();
    let e = p.end.as_ref();
    conn.execute_in_place(
        UPSERT_CALL_PART,
        &[
            Param::Int(project),
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
            dump.text.into(),
            s.and_then(|s| s.wb_user_id.as_deref()).into(),
            s.and_then(|s| s.wb_run_id.as_deref()).into(),
            s.and_then(|s| s.wb_run_step).into(),
            e.map(|e| e.ended_at.0).into(),
            e.map(|e| e.summary.as_str()).into(),
            e.and_then(|e| e.output.as_deref()).into(),
            e.and_then(|e| e.exception.as_deref()).into(),
            e.and_then(|e| e.wb_run_step_end).into(),
            e.and_then(|e| e.display_name.as_deref()).into(),
            end_status.into(),
            Param::Int(bucket),
            dump.resource.into(),
            op.into(),
        ],
    )?;
    Ok(())
}

/// Builds a [`Call`] of `project` from a row selected with [`sql::call_columns`].
fn row_to_call(r: &Row<'_>, project: &ProjectId) -> rusqlite::Result<Call> {
    let op_name: String = r.get(1)?;
    let display_name: Option<String> = r.get(2)?;
    let started_at = Micros(r.get(7)?);
    let ended_at = r.get::<_, Option<i64>>(8)?.map(Micros);
    let exception: Option<String> = r.get(12)?;
    let summary: Option<String> = r.get(13)?;
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
        project_id: project.clone(),
        op_name,
        display_name,
        trace_id: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
        parent_id: r.get(4)?,
        thread_id: r.get(5)?,
        turn_id: r.get(6)?,
        started_at,
        ended_at,
        attributes: raw(r.get(9)?)?.unwrap_or_else(empty_object),
        inputs: raw(r.get(10)?)?.unwrap_or_else(empty_object),
        output: raw(r.get(11)?)?,
        exception,
        summary,
        otel_dump: raw(whole_dump(r.get(14)?, r.get(20)?))?,
        wb_user_id: r.get(15)?,
        wb_username: None,
        wb_run_id: r.get(16)?,
        wb_run_step: r.get(17)?,
        wb_run_step_end: r.get(18)?,
        deleted_at: r.get::<_, Option<i64>>(19)?.map(Micros),
        expire_at: None,
        storage_size_bytes: None,
        total_storage_size_bytes: None,
    })
}

/// A stored dump with its resource back in place, if it was taken out. A dump that does not
/// take it back (which the writer never stores) reads as stored.
fn whole_dump(stored: Option<String>, resource: Option<String>) -> Option<String> {
    match (stored, resource) {
        (Some(dump), Some(resource)) => otel_resources::join(&dump, &resource).or(Some(dump)),
        (dump, _) => dump,
    }
}

fn stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[async_trait]
impl CallStore for SqliteStore {
    async fn apply_call_parts(&self, parts: Vec<CallPart>) -> Result<()> {
        // Read before the job reaches the writer, which is the one thread all writes share.
        let statuses: Vec<_> =
            parts.iter().map(|p| p.end.as_ref().and_then(EndPart::status)).collect();
        let splits: Vec<_> = parts
            .iter()
            .map(|p| p.start.as_ref()?.otel_dump.as_ref().and_then(otel_resources::split))
            .collect();
        let filter = self.ids.clone();
        self.writer
            .exec(move |conn| {
                let mut filter = id_filter::lock(&filter);
                filter.start_job(conn).map_err(backend)?;
                // New rows of a batch are consecutive: their blocks are listed once each, and
                // they share a bucket, listed once for each project, whose key is looked up
                // once; so is each op's and each resource.
                let mut listed = None;
                let bucket = id_directory::bucket_for_new_rows(conn).map_err(backend)?;
                let mut projects = Made::default();
                let keys = parts
                    .iter()
                    .map(|p| {
                        once_per_batch(&mut projects, p.project.as_str(), |id| {
                            let key = project_keys::key(conn, id)?;
                            buckets::list(conn, key, bucket)?;
                            Ok(key)
                        })
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(backend)?;
                let ids = keys
                    .iter()
                    .zip(&parts)
                    .map(|(&key, p)| (key, p.id.as_str()))
                    .filter(|&(key, id)| filter.may_hold(key, id));
                let mut known = Known::look_up(conn, ids).map_err(backend)?;
                let (mut ops, mut resources) = (Made::default(), Made::default());
                for (((p, &project), &status), split) in
                    parts.iter().zip(&keys).zip(&statuses).zip(&splits)
                {
                    let whole = p.start.as_ref().and_then(|s| s.otel_dump.as_deref());
                    let dump = match (split, whole) {
                        (Some(split), Some(whole)) => {
                            let text = (project, &whole[split.resource.clone()]);
                            let id = once_per_batch(&mut resources, text, |(project, text)| {
                                otel_resources::key(conn, project, text)
                            })
                            .map_err(backend)?;
                            Dump { text: Some(&split.rest), resource: Some(id) }
                        }
                        _ => Dump { text: whole, resource: None },
                    };
                    let op = p
                        .start
                        .as_ref()
                        .map(|s| {
                            once_per_batch(&mut ops, (project, s.op_name.as_str()), |(p, name)| {
                                op_keys::key(conn, p, name)
                            })
                        })
                        .transpose()
                        .map_err(backend)?;
                    let found = known.get(project, &p.id);
                    let place = Place { project, bucket: found.map_or(bucket, |f| f.bucket) };
                    upsert_part(conn, p, status, place, dump, op).map_err(backend)?;
                    let rowid = match found {
                        Some(found) => found.rowid,
                        None => {
                            let rowid = conn.last_insert_rowid();
                            known.inserted(project, &p.id, Found { rowid, bucket });
                            filter.inserted(project, &p.id);
                            rowid
                        }
                    };
                    let block = Some(rowid >> text_index::BLOCK_SHIFT);
                    if block != listed {
                        text_index::pend(conn, rowid).map_err(backend)?;
                        listed = block;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn set_call_display_name(&self, project: &ProjectId, id: &str, name: &str) -> Result<()> {
        let (project, id, name) = (project.clone(), id.to_owned(), name.to_owned());
        let filter = self.ids.clone();
        self.writer
            .exec(move |conn| {
                let mut filter = id_filter::lock(&filter);
                filter.start_job(conn).map_err(backend)?;
                let key = project_keys::key(conn, project.as_str()).map_err(backend)?;
                let found = if filter.may_hold(key, &id) {
                    Known::look_up(conn, [(key, id.as_str())]).map_err(backend)?.get(key, &id)
                } else {
                    None
                };
                let bucket = match found {
                    Some(found) => found.bucket,
                    None => {
                        let bucket = id_directory::bucket_for_new_rows(conn).map_err(backend)?;
                        buckets::list(conn, key, bucket).map_err(backend)?;
                        filter.inserted(key, &id);
                        bucket
                    }
                };
                conn.prepare_cached(SET_DISPLAY_NAME)
                    .and_then(|mut st| st.execute(params![key, id, name, bucket]))
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
        let (columns, project) = (q.columns, q.project);
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
                    let call = row_to_call(row, &project).map_err(backend)?;
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use futures::StreamExt;
    use heddle_proto::calls::{CallsQueryReq, StartPart};
    use rusqlite::Connection;
    use serde_json::json;

    use super::super::{DB_FILE, SqliteOptions, migrations};
    use super::*;

    fn start() -> StartPart {
        StartPart {
            op_name: "op".into(),
            display_name: None,
            parent_id: None,
            thread_id: None,
            turn_id: None,
            started_at: Micros(1_000),
            attributes: "{}".into(),
            inputs: "{}".into(),
            otel_dump: None,
            wb_user_id: None,
            wb_run_id: None,
            wb_run_step: None,
        }
    }

    fn end(summary: &str, exception: Option<&str>) -> EndPart {
        EndPart {
            ended_at: Micros(5_000),
            summary: summary.into(),
            output: None,
            exception: exception.map(str::to_owned),
            wb_run_step_end: None,
            display_name: None,
        }
    }

    fn part(id: &str, start: Option<StartPart>, end: Option<EndPart>) -> CallPart {
        let project = ProjectId::parse("e/p").unwrap();
        CallPart { project, id: id.into(), trace_id: Some("t".into()), start, end }
    }

    fn status_query(status: &str) -> CallsQuery {
        let req: CallsQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$eq": [{"$getField": "summary.weave.status"},
                                        {"$literal": status}]}},
        }))
        .unwrap();
        req.validate().unwrap()
    }

    async fn ids(store: &SqliteStore, q: CallsQuery) -> Vec<String> {
        let calls: Vec<Call> =
            store.query_calls(q).await.unwrap().map(Result::unwrap).collect().await;
        let mut ids: Vec<String> = calls.into_iter().map(|c| c.id).collect();
        ids.sort();
        ids
    }

    /// A status filter (answered from `calls_live_by_status`) finds exactly the calls returned
    /// with that `summary.weave.status`, for rows stored before migration 14 (no `end_status`)
    /// and after it, whatever order a call's parts came in.
    #[tokio::test]
    async fn status_filters_agree_with_the_status_returned() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = migrations::database_at(dir.path(), 13);
            let legacy = "INSERT INTO calls (project_id, id, trace_id, op_name, started_at, \
                          ended_at, attributes, inputs, summary, exception) \
                          VALUES ('e/p', ?1, 't', 'op', 1, ?2, '{}', '{}', ?3, ?4)";
            for (id, ended, summary, exception) in [
                ("old-running", None, None, None),
                ("old-success", Some(2), Some(r#"{"status_counts": {"error": 0}}"#), None),
                ("old-error", Some(2), Some("{}"), Some("boom")),
                ("old-descendant", Some(2), Some(r#"{"status_counts": {"error": 3}}"#), None),
                // Text is not a count: the status returned with the call is success.
                ("old-text-count", Some(2), Some(r#"{"status_counts": {"error": "3"}}"#), None),
            ] {
                conn.execute(legacy, params![id, ended, summary, exception]).unwrap();
            }
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let counts = r#"{"status_counts": {"error": 2}}"#;
        let repeated = r#"{"status_counts": {"error": 2}, "status_counts": {"error": 2}}"#;
        let parts = vec![
            part("new-running", Some(start()), None),
            part("new-success", Some(start()), Some(end("{}", None))),
            part("new-error", Some(start()), Some(end("{}", Some("boom")))),
            part("new-descendant", Some(start()), Some(end(counts, None))),
            // The end first, then its start: the start keeps the end's status.
            part("late-start", None, Some(end(counts, None))),
            // A summary that repeats a key: no status is stored, the index computes it.
            part("repeated-key", Some(start()), Some(end(repeated, None))),
        ];
        store.apply_call_parts(parts).await.unwrap();
        store.apply_call_parts(vec![part("late-start", Some(start()), None)]).await.unwrap();
        // A renamed call that ends later.
        store
            .set_call_display_name(&ProjectId::parse("e/p").unwrap(), "renamed", "r")
            .await
            .unwrap();
        store.apply_call_parts(vec![part("renamed", Some(start()), None)]).await.unwrap();
        store
            .apply_call_parts(vec![part("renamed", None, Some(end("{}", Some("x"))))])
            .await
            .unwrap();

        let all: CallsQuery = serde_json::from_value::<CallsQueryReq>(json!({"project_id": "e/p"}))
            .unwrap()
            .validate()
            .unwrap();
        let mut returned: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let calls: Vec<Call> =
            store.query_calls(all).await.unwrap().map(Result::unwrap).collect().await;
        for c in calls {
            let status = c.summary["weave"]["status"].as_str().unwrap().to_owned();
            returned.entry(status).or_default().push(c.id);
        }
        let expected = [
            (
                "descendant_error",
                vec!["late-start", "new-descendant", "old-descendant", "repeated-key"],
            ),
            ("error", vec!["new-error", "old-error", "renamed"]),
            ("running", vec!["new-running", "old-running"]),
            ("success", vec!["new-success", "old-success", "old-text-count"]),
        ];
        for (status, want) in expected {
            let mut got = returned.remove(status).unwrap_or_default();
            got.sort();
            assert_eq!(got, want, "returned as {status}");
            assert_eq!(ids(&store, status_query(status)).await, want, "filtered by {status}");
            assert_eq!(store.count_calls(status_query(status)).await.unwrap(), want.len() as u64);
        }
        assert!(returned.is_empty(), "{returned:?}");

        // Calls written since store the status of their end; the others compute it.
        let stored: Vec<(String, Option<String>)> = store
            .read(|conn| {
                let mut st = conn.prepare("SELECT id, end_status FROM calls ORDER BY id").unwrap();
                let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
                Ok(rows.map(Result::unwrap).collect())
            })
            .await
            .unwrap();
        let stored: Vec<(&str, Option<&str>)> =
            stored.iter().map(|(id, s)| (id.as_str(), s.as_deref())).collect();
        assert_eq!(
            stored,
            [
                ("late-start", Some("descendant_error")),
                ("new-descendant", Some("descendant_error")),
                ("new-error", Some("error")),
                ("new-running", None),
                ("new-success", Some("success")),
                ("old-descendant", None),
                ("old-error", None),
                ("old-running", None),
                ("old-success", None),
                ("old-text-count", None),
                ("renamed", Some("error")),
                ("repeated-key", None),
            ]
        );
    }

    fn contains(path: &str, needle: &str) -> CallsQuery {
        let req: CallsQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$contains": {"input": {"$getField": path},
                                              "substr": {"$literal": needle}}}},
        }))
        .unwrap();
        req.validate().unwrap()
    }

    /// Waits until the writer has indexed every block but the newest, which waits until it is
    /// full (docs/storage.md#substring-index).
    async fn indexed(store: &SqliteStore) {
        for _ in 0..500 {
            let pending: i64 = store
                .read(|c| {
                    c.query_row(
                        "SELECT count(*) FROM calls_text_pending \
                         WHERE block < (SELECT max(rowid) >> 6 FROM calls)",
                        [],
                        |r| r.get(0),
                    )
                    .map_err(backend)
                })
                .await
                .unwrap();
            if pending == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the substring index did not catch up");
    }

    /// `$contains` finds what a part wrote into a row whose block was already indexed: the
    /// update lists the block again, whichever half of the call comes second.
    #[tokio::test]
    async fn substring_search_sees_parts_written_after_indexing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let with_inputs = |inputs: &str| StartPart { inputs: inputs.into(), ..start() };
        let with_output = |output: &str| EndPart { output: Some(output.into()), ..end("{}", None) };
        store
            .apply_call_parts(vec![
                part("start-first", Some(with_inputs(r#"{"q":"alpha"}"#)), None),
                part("end-first", None, Some(with_output(r#""bravo""#))),
            ])
            .await
            .unwrap();
        // Later calls fill the block, so that it is indexed (the newest block waits).
        let later = (0..70).map(|i| part(&format!("later-{i}"), Some(start()), None)).collect();
        store.apply_call_parts(later).await.unwrap();
        indexed(&store).await;
        store
            .apply_call_parts(vec![
                part("start-first", None, Some(with_output(r#"{"a":"charlie"}"#))),
                part("end-first", Some(with_inputs(r#"{"q":"delta"}"#)), None),
            ])
            .await
            .unwrap();
        indexed(&store).await;
        for (path, needle, want) in [
            ("inputs.q", "alpha", vec!["start-first"]),
            ("output.a", "charlie", vec!["start-first"]),
            ("output", "bravo", vec!["end-first"]),
            ("inputs.q", "delta", vec!["end-first"]),
            ("inputs.q", "echo", vec![]),
        ] {
            assert_eq!(ids(&store, contains(path, needle)).await, want, "{path} {needle}");
            let count = store.count_calls(contains(path, needle)).await.unwrap();
            assert_eq!(count, want.len() as u64, "{path} {needle}");
        }
    }

    /// Migration 17 gives each project of an existing database its key: every call keeps its
    /// rowid and bucket and is found under its own project only, and the bucket lists follow.
    #[tokio::test]
    async fn migration_17_keys_every_project_of_an_existing_database() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = migrations::database_at(dir.path(), 16);
            let insert = "INSERT INTO calls (rowid, project_id, id, trace_id, op_name, started_at, \
                          attributes, inputs, bucket) VALUES (?1, ?2, ?3, 't', 'op', ?1, '{}', \
                          '{}', ?1 >> 13)";
            for (rowid, project, id) in
                [(5, "e/p", "a"), (9_000, "e/q", "a"), (20_000, "e/p", "b"), (20_001, "f/p", "c")]
            {
                conn.execute(insert, params![rowid, project, id]).unwrap();
            }
            conn.execute_batch(
                "INSERT INTO call_buckets VALUES ('e/p', 0), ('e/q', 1), ('e/p', 2), ('f/p', 2)",
            )
            .unwrap();
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        for (project, want) in [("e/p", vec!["a", "b"]), ("e/q", vec!["a"]), ("f/p", vec!["c"])] {
            let q = |filter: serde_json::Value| {
                serde_json::from_value::<CallsQueryReq>(
                    json!({"project_id": project, "filter": filter}),
                )
                .unwrap()
                .validate()
                .unwrap()
            };
            assert_eq!(ids(&store, q(json!({}))).await, want, "{project}");
            assert_eq!(ids(&store, q(json!({"trace_ids": ["t"]}))).await, want, "{project}");
        }
        let rows: Vec<(i64, String, String, i64)> = store
            .read(|c| {
                let mut st = c
                    .prepare(
                        "SELECT c.rowid, k.project_id, c.id, c.bucket FROM calls c \
                         JOIN project_keys k USING (project_key) ORDER BY c.rowid",
                    )
                    .map_err(backend)?;
                let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)));
                rows.and_then(Iterator::collect).map_err(backend)
            })
            .await
            .unwrap();
        let want = [
            (5, "e/p", "a", 0),
            (9_000, "e/q", "a", 1),
            (20_000, "e/p", "b", 2),
            (20_001, "f/p", "c", 2),
        ];
        assert_eq!(rows, want.map(|(r, p, i, b)| (r, p.to_owned(), i.to_owned(), b)));
        let listed: Vec<(String, i64)> = store
            .read(|c| {
                let mut st = c
                    .prepare(
                        "SELECT k.project_id, b.bucket FROM call_buckets b \
                         JOIN project_keys k USING (project_key) ORDER BY 1, 2",
                    )
                    .map_err(backend)?;
                let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)));
                rows.and_then(Iterator::collect).map_err(backend)
            })
            .await
            .unwrap();
        let want = [("e/p", 0), ("e/p", 2), ("e/q", 1), ("f/p", 2)];
        assert_eq!(listed, want.map(|(p, b)| (p.to_owned(), b)));
    }

    /// Migration 22 gives each op of an existing database its key, per project: a filter on op
    /// names finds the rows written before it and after it, and no other project's.
    #[tokio::test]
    async fn migration_22_keys_every_op_of_an_existing_database() {
        let dir = tempfile::tempdir().unwrap();
        let op = |project: &str, name: &str| format!("weave:///{project}/op/{name}:d1");
        {
            let conn = migrations::database_at(dir.path(), 21);
            conn.execute_batch("INSERT INTO project_keys VALUES (1, 'e/p'), (2, 'e/q')").unwrap();
            let insert = "INSERT INTO calls (project_key, id, trace_id, op_name, started_at, \
                          attributes, inputs, bucket) VALUES (?1, ?2, 't', ?3, 1, '{}', '{}', 0)";
            for (key, id, name) in [
                (1, "a", Some(op("e/p", "alpha"))),
                (1, "b", Some(op("e/p", "beta"))),
                (2, "c", Some(op("e/p", "alpha"))),
                (1, "renamed-only", None),
            ] {
                conn.execute(insert, params![key, id, name]).unwrap();
            }
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let mut later = part("d", Some(start()), None);
        later.start.as_mut().unwrap().op_name = op("e/p", "alpha");
        store.apply_call_parts(vec![later]).await.unwrap();
        let by_ops = |project: &str, names: serde_json::Value| {
            serde_json::from_value::<CallsQueryReq>(
                json!({"project_id": project, "filter": {"op_names": names}}),
            )
            .unwrap()
            .validate()
            .unwrap()
        };
        let cases = [
            ("e/p", json!([op("e/p", "alpha")]), vec!["a", "d"]),
            ("e/p", json!([op("e/p", "beta")]), vec!["b"]),
            ("e/p", json!(["weave:///e/p/op/alpha:*"]), vec!["a", "d"]),
            ("e/p", json!(["weave:///e/p/op/*", op("e/p", "beta")]), vec!["b"]),
            ("e/p", json!(["weave:///e/p/op/beta:*", op("e/p", "alpha")]), vec!["a", "b", "d"]),
            ("e/q", json!([op("e/p", "alpha")]), vec!["c"]),
            ("e/q", json!([op("e/p", "beta")]), vec![]),
        ];
        for (project, names, want) in cases {
            let q = by_ops(project, names.clone());
            assert_eq!(ids(&store, q.clone()).await, want, "{project} {names}");
            assert_eq!(store.count_calls(q).await.unwrap(), want.len() as u64, "{project} {names}");
        }
        let keys: Vec<(String, Option<i64>)> = store
            .read(|c| {
                let mut st =
                    c.prepare("SELECT id, op_key FROM calls ORDER BY id").map_err(backend)?;
                let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)));
                rows.and_then(Iterator::collect).map_err(backend)
            })
            .await
            .unwrap();
        let key = |id: &str| keys.iter().find(|(i, _)| i == id).unwrap().1;
        assert_eq!(key("a"), key("d"), "a later call of an op takes the op's key");
        assert_ne!(key("a"), key("c"), "each project has its own keys");
        assert_ne!(key("a"), key("b"));
        assert_eq!(key("renamed-only"), None);
    }

    /// Spans sharing a resource store it once and read back their dumps as written, whatever
    /// else the dump holds; a dump of another shape is stored whole.
    #[tokio::test]
    async fn resources_are_stored_once_and_dumps_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let resource = r#"{"attributes":{"service":{"name":"agent","version":"2.1"},"host":{"name":"w-0"}},"dropped_attributes_count":0}"#;
        let dump = |name: &str| {
            format!(r#"{{"name":"{name}","resource":{resource},"scope":{{"name":"s"}}}}"#)
        };
        let with_dump =
            |dump: &str| StartPart { otel_dump: Some(dump.to_owned().into()), ..start() };
        let dumps = [
            ("a", dump("first")),
            ("b", dump("second")),
            ("c", r#"{"name":"small","resource":{"attributes":{}}}"#.to_owned()),
            ("d", r#"[1,2]"#.to_owned()),
        ];
        let parts = dumps.iter().map(|(id, d)| part(id, Some(with_dump(d)), None)).collect();
        store.apply_call_parts(parts).await.unwrap();
        // A second batch with the same resource, and an end part that keeps the dump.
        store
            .apply_call_parts(vec![part("e", Some(with_dump(&dump("third"))), None)])
            .await
            .unwrap();
        store.apply_call_parts(vec![part("a", None, Some(end("{}", None)))]).await.unwrap();

        let all: Vec<Call> = store
            .query_calls(filtered(json!({})))
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        let read: BTreeMap<String, String> = all
            .into_iter()
            .map(|c| (c.id, c.otel_dump.map(|d| d.get().to_owned()).unwrap_or_default()))
            .collect();
        let mut want: BTreeMap<String, String> =
            dumps.iter().map(|(id, d)| (id.to_string(), d.clone())).collect();
        want.insert("e".into(), dump("third"));
        assert_eq!(read, want);

        let (resources, stored): (i64, String) = store
            .read(|c| {
                let n = c.query_row("SELECT count(*) FROM otel_resources", [], |r| r.get(0));
                let d = c.query_row("SELECT otel_dump FROM calls WHERE id = 'b'", [], |r| r.get(0));
                Ok((n.map_err(backend)?, d.map_err(backend)?))
            })
            .await
            .unwrap();
        assert_eq!(resources, 1);
        assert_eq!(stored, r#"{"name":"second","resource":null,"scope":{"name":"s"}}"#);
    }

    /// A delete reads the listed calls by id, their children by parent and the rows it updates
    /// by rowid, whatever the statistics (here none).
    #[test]
    fn a_delete_seeks_every_row_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let conn = migrations::database_at(dir.path(), migrations::LATEST);
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {DELETE_CALLS}"))
            .unwrap()
            .query_map(params!["e/p", r#"["a"]"#, 1], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        for step in [
            "SEARCH calls USING INTEGER PRIMARY KEY (rowid=?)",
            "SEARCH d USING PRIMARY KEY (project_key=? AND id=?)",
            "SEARCH c USING INDEX calls_by_parent (project_key=? AND bucket=? AND parent_id=?)",
        ] {
            assert!(plan.iter().any(|s| s == step), "{step} not in {plan:#?}");
        }
        assert!(!plan.iter().any(|s| s.starts_with("SCAN calls")), "{plan:#?}");
    }

    fn filtered(filter: serde_json::Value) -> CallsQuery {
        serde_json::from_value::<CallsQueryReq>(json!({"project_id": "e/p", "filter": filter}))
            .unwrap()
            .validate()
            .unwrap()
    }

    /// Trace, parent, root and id lookups go through the bucketed indexes: they find calls in
    /// every bucket, rows from before migration 16 (bucket 0) and a call whose row a rename
    /// created, whether the id directory holds their bucket or not, and a delete follows children
    /// from one bucket into the next.
    #[tokio::test]
    async fn lookups_find_calls_in_every_bucket() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = migrations::database_at(dir.path(), 15);
            let legacy = "INSERT INTO calls (project_id, id, trace_id, parent_id, op_name, \
                          started_at, attributes, inputs) VALUES ('e/p', ?1, 't', ?2, 'op', 1, \
                          '{}', '{}')";
            conn.execute(legacy, params!["a", None::<&str>]).unwrap();
            conn.execute(legacy, params!["b", "a"]).unwrap();
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        // Rows of another project move the rowid on, and with it the bucket of the next batch.
        let filler = Connection::open(dir.path().join(DB_FILE)).unwrap();
        let skip_to = |rowid: i64| {
            filler
                .execute(
                    "INSERT INTO calls (rowid, project_key, id, bucket) VALUES (?1, 1000, ?1, ?1 >> 13)",
                    [rowid],
                )
                .unwrap();
        };
        let child = |id: &str, trace: &str, parent: Option<&str>| {
            let mut p =
                part(id, Some(StartPart { parent_id: parent.map(Into::into), ..start() }), None);
            p.trace_id = Some(trace.into());
            p
        };
        let project = ProjectId::parse("e/p").unwrap();
        skip_to(10_000);
        store.apply_call_parts(vec![child("c", "t", Some("b"))]).await.unwrap();
        skip_to(100_000);
        store.set_call_display_name(&project, "e", "renamed first").await.unwrap();
        let batch =
            vec![child("d", "t", Some("c")), child("e", "t", Some("a")), child("r", "u", None)];
        store.apply_call_parts(batch).await.unwrap();

        let buckets: BTreeMap<String, i64> = filler
            .prepare(concat!("SELECT id, bucket FROM calls WHERE project_key = ", key_of!("'e/p'")))
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        // The rename created e's row in the newest bucket, and its start found it there.
        let want = [("a", 0), ("b", 0), ("c", 1), ("d", 12), ("e", 12), ("r", 12)];
        assert_eq!(buckets, want.map(|(id, b)| (id.to_owned(), b)).into());

        // Bucket 12's first batch merged the sealed buckets into the id directory; their calls
        // are found there and updated where they are, by a part, a rename or a call_ids filter.
        let merged: i64 =
            filler.query_row("SELECT merged FROM call_ids_merged", [], |r| r.get(0)).unwrap();
        assert_eq!(merged, 11);
        store.apply_call_parts(vec![part("c", None, Some(end("{}", None)))]).await.unwrap();
        store.set_call_display_name(&project, "a", "renamed later").await.unwrap();
        let rows: i64 = filler
            .query_row("SELECT count(*) FROM calls WHERE project_key != 1000", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 6, "no call written twice");
        let by_ids: Vec<Call> = store
            .query_calls(filtered(json!({"call_ids": ["a", "c", "e", "zz"]})))
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        let mut by_ids: Vec<_> =
            by_ids.into_iter().map(|c| (c.id, c.display_name, c.ended_at)).collect();
        by_ids.sort();
        assert_eq!(
            by_ids,
            [
                ("a".into(), Some("renamed later".into()), None),
                ("c".into(), None, Some(Micros(5_000))),
                ("e".into(), Some("renamed first".into()), None),
            ]
        );

        let cases = [
            (json!({"trace_ids": ["t"]}), vec!["a", "b", "c", "d", "e"]),
            (json!({"trace_ids": ["u"]}), vec!["r"]),
            (json!({"parent_ids": ["a"]}), vec!["b", "e"]),
            (json!({"parent_ids": ["b", "c"]}), vec!["c", "d"]),
            (json!({"trace_roots_only": true}), vec!["a", "r"]),
            (json!({"trace_ids": ["t"], "trace_roots_only": true}), vec!["a"]),
        ];
        for (filter, want) in &cases {
            assert_eq!(&ids(&store, filtered(filter.clone())).await, want, "{filter}");
            let count = store.count_calls(filtered(filter.clone())).await.unwrap();
            assert_eq!(count, want.len() as u64, "{filter}");
        }

        // Pages of a trace in time order (their rows are chosen by rowid first, then read):
        // newest first, ties by id.
        let mut pages = Vec::new();
        for offset in [0, 2, 4] {
            let req = json!({"project_id": "e/p", "filter": {"trace_ids": ["t"]}, "limit": 2,
                             "offset": offset,
                             "sort_by": [{"field": "started_at", "direction": "desc"}]});
            let q = serde_json::from_value::<CallsQueryReq>(req).unwrap().validate().unwrap();
            let calls: Vec<Call> =
                store.query_calls(q).await.unwrap().map(Result::unwrap).collect().await;
            pages.push(calls.into_iter().map(|c| c.id).collect::<Vec<_>>());
        }
        assert_eq!(pages, [vec!["c", "d"], vec!["e", "a"], vec!["b"]]);

        // b's subtree spans buckets 0, 1 and 12.
        assert_eq!(store.delete_calls(&project, &["b".into()]).await.unwrap(), 3);
        assert_eq!(ids(&store, filtered(json!({"trace_ids": ["t"]}))).await, ["a", "e"]);
    }

    /// Two stores on one database, as separate roles sharing a data directory are: each one's
    /// id filter is built, then parts of one call and renames come from both, and every call
    /// stays one row with every part's columns.
    #[tokio::test]
    async fn parts_from_two_writers_meet_in_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let a = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let b = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let project = ProjectId::parse("e/p").unwrap();
        for (store, id) in [(&a, "from-a"), (&b, "from-b")] {
            store.apply_call_parts(vec![part(id, Some(start()), None)]).await.unwrap();
            id_filter::lock(&store.ids).wait_for_build();
        }
        // Rows of another project move the rowid on: each part below goes to a bucket of its own,
        // where the upsert's conflict cannot find an earlier part.
        let filler = Connection::open(dir.path().join(DB_FILE)).unwrap();
        let skip = |to: i64| {
            filler
                .execute(
                    "INSERT INTO calls (rowid, project_key, id, bucket) VALUES (?1, 1000, ?1, ?1 >> 13)",
                    [to << 13],
                )
                .unwrap();
        };
        // Each writes the other's call, seen by the other's filter and not by its own.
        skip(1);
        a.apply_call_parts(vec![part("from-b", None, Some(end("{}", None)))]).await.unwrap();
        skip(2);
        b.apply_call_parts(vec![part("from-a", None, Some(end("{}", None)))]).await.unwrap();
        skip(3);
        a.apply_call_parts(vec![part("x", Some(start()), None)]).await.unwrap();
        skip(4);
        b.apply_call_parts(vec![part("x", None, Some(end("{}", None)))]).await.unwrap();
        skip(5);
        b.set_call_display_name(&project, "y", "named by b").await.unwrap();
        skip(6);
        a.apply_call_parts(vec![part("y", Some(start()), Some(end("{}", None)))]).await.unwrap();

        let rows: Vec<(String, bool, bool)> = filler
            .prepare(
                "SELECT id, started_at IS NOT NULL, ended_at IS NOT NULL FROM calls \
                 WHERE project_key != 1000 ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let want = ["from-a", "from-b", "x", "y"].map(|id| (id.to_owned(), true, true));
        assert_eq!(rows, want);
        let y = ids(&a, filtered(json!({"call_ids": ["y"]}))).await;
        assert_eq!(y, ["y"]);
    }
}
