//! The embedded backend: one SQLite database in WAL mode. Writes go through the group-commit
//! [`writer`]; reads use a pool of connections on blocking threads, so neither ever blocks the
//! async runtime.

mod blobs;
mod projects;
// `functions` and `sql` are public for the fuzz targets, which render queries and run them on
// an in-memory database (docs/fuzzing.md).
mod compile;
pub mod functions;
pub mod migrations;
pub mod sql;
mod writer;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallPart, CallsQuery, derive_summary};
use heddle_proto::costs::CostRecord;
use heddle_proto::feedback::{FeedbackQuery, NewFeedback, StoredFeedback};
use heddle_proto::objects::{DeletedVersion, ObjSchema, ObjectsDelete, ObjectsQuery, VersionSel};
use heddle_proto::threads::{Thread, ThreadsQuery, Turn};
use heddle_proto::time::Micros;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::value::RawValue;

use self::sql::ObjectBy;
use self::writer::{Writer, backend};
use crate::objects::{self, LiveVersion};
use crate::{
    CallStream, KeyInfo, KeyRecord, NewObject, NewTable, Result, Store, StoreError, StoredRow,
    TableSlice, files,
};

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
    readers: Pool,
}

/// Settings every connection gets. `synchronous = FULL` makes a commit durable against power
/// loss, not only a process crash: an ack must mean the data survives (group commit pays for
/// the fsync once per batch, not once per call).
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.set_prepared_statement_cache_capacity(64);
    functions::register(conn)
}

impl SqliteStore {
    /// Opens (creating if needed) `dir/heddle.db` and migrates it to the latest schema.
    pub fn open(dir: &Path, opts: SqliteOptions) -> Result<SqliteStore> {
        std::fs::create_dir_all(dir)
            .map_err(|e| backend(format!("creating data dir {}: {e}", dir.display())))?;
        let path = dir.join("heddle.db");
        let mut conn = Connection::open(&path).map_err(backend)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(backend)?;
        configure(&conn).map_err(backend)?;
        migrations::migrate(&mut conn).map_err(backend)?;
        let manager = SqliteConnectionManager::file(&path).with_init(|c| configure(c));
        let readers = r2d2::Pool::builder()
            .max_size(opts.readers.max(1))
            .min_idle(Some(1))
            .build(manager)
            .map_err(backend)?;
        Ok(SqliteStore { writer: Writer::start(conn, opts.write_queue.max(1)), readers })
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

fn upsert_part(conn: &Connection, p: &CallPart) -> rusqlite::Result<()> {
    let s = p.start.as_ref();
    let e = p.end.as_ref();
    conn.prepare_cached(sql::UPSERT_CALL_PART)?.execute(params![
        p.project.as_str(),
        p.id,
        p.trace_id,
        s.map(|s| &s.op_name),
        s.and_then(|s| s.display_name.as_deref()),
        s.and_then(|s| s.parent_id.as_deref()),
        s.and_then(|s| s.thread_id.as_deref()),
        s.and_then(|s| s.turn_id.as_deref()),
        s.map(|s| s.started_at.0),
        s.map(|s| &s.attributes),
        s.map(|s| &s.inputs),
        s.and_then(|s| s.otel_dump.as_deref()),
        s.and_then(|s| s.wb_user_id.as_deref()),
        s.and_then(|s| s.wb_run_id.as_deref()),
        s.and_then(|s| s.wb_run_step),
        e.map(|e| e.ended_at.0),
        e.map(|e| &e.summary),
        e.and_then(|e| e.output.as_deref()),
        e.and_then(|e| e.exception.as_deref()),
        e.and_then(|e| e.wb_run_step_end),
    ])?;
    Ok(())
}

fn raw(json: Option<String>) -> rusqlite::Result<Option<Box<RawValue>>> {
    json.map(|s| {
        RawValue::from_string(s).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))
    })
    .transpose()
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("valid JSON")
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
        project_id: ProjectId::parse(&r.get::<_, String>(1)?)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?,
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

fn row_to_object(
    project: &ProjectId,
    r: &Row<'_>,
    metadata_only: bool,
) -> rusqlite::Result<ObjSchema> {
    Ok(ObjSchema {
        project_id: project.clone(),
        object_id: r.get(0)?,
        digest: r.get(1)?,
        version_index: r.get(2)?,
        is_latest: r.get::<_, Option<bool>>(3)?.unwrap_or(false) as i64,
        kind: r.get(4)?,
        base_object_class: r.get(5)?,
        leaf_object_class: r.get(6)?,
        val: if metadata_only { None } else { raw(r.get(7)?)? },
        created_at: Micros(r.get(8)?),
        deleted_at: r.get::<_, Option<i64>>(9)?.map(Micros),
        wb_user_id: r.get(10)?,
        size_bytes: r.get(11)?,
        tags: None,
        aliases: None,
    })
}

/// Builds a feedback row from [`sql::FEEDBACK_COLUMNS`].
fn row_to_feedback(r: &Row<'_>) -> rusqlite::Result<StoredFeedback> {
    Ok(StoredFeedback {
        project: ProjectId::parse(&r.get::<_, String>(0)?)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?,
        id: r.get(1)?,
        weave_ref: r.get(2)?,
        feedback_type: r.get(3)?,
        creator: r.get(4)?,
        payload: r.get(5)?,
        created_at: Micros(r.get(6)?),
        wb_user_id: r.get(7)?,
        annotation_ref: r.get(8)?,
        runnable_ref: r.get(9)?,
        call_ref: r.get(10)?,
        trigger_ref: r.get(11)?,
        queue_id: r.get(12)?,
        extra: r.get(13)?,
    })
}

fn row_to_live_version(r: &Row<'_>) -> rusqlite::Result<LiveVersion> {
    Ok(LiveVersion {
        digest: r.get(0)?,
        version_index: r.get(1)?,
        base_object_class: r.get(2)?,
        leaf_object_class: r.get(3)?,
    })
}

fn live_versions(
    conn: &Connection,
    project: &ProjectId,
    object_id: &str,
) -> Result<Vec<LiveVersion>> {
    conn.prepare_cached(sql::LIVE_OBJECT_VERSIONS)
        .and_then(|mut st| {
            st.query_map(params![project.as_str(), object_id], row_to_live_version)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)
}

/// Rows buffered between the reading thread and the HTTP response.
const STREAM_BUFFER: usize = 256;

#[async_trait]
impl Store for SqliteStore {
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
                conn.prepare_cached(sql::SET_DISPLAY_NAME)
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
                    .execute(sql::DELETE_CALLS, params![project.as_str(), ids, Micros::now().0])
                    .map_err(backend)?;
                Ok(n as u64)
            })
            .await
    }

    async fn query_calls(&self, q: CallsQuery) -> Result<CallStream> {
        let statement = sql::select_calls(&q);
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
        Ok(Box::pin(tokio_stream_from(rx)))
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

    async fn create_object(&self, o: NewObject) -> Result<()> {
        self.writer
            .exec(move |conn| {
                let live: Option<bool> = conn
                    .query_row(
                        sql::OBJECT_VERSION_LIVE,
                        params![o.project.as_str(), o.object_id, o.digest],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                if live == Some(true) {
                    return Ok(()); // the version exists: a no-op
                }
                let versions = live_versions(conn, &o.project, &o.object_id)?;
                let latest = versions.last().map(|v| v.base_object_class.as_deref());
                objects::check_class(&o.object_id, latest, o.base_object_class.as_deref())?;
                // New, or a deleted version revived with its version index.
                conn.prepare_cached(sql::INSERT_OBJECT)
                    .and_then(|mut st| {
                        st.execute(params![
                            o.project.as_str(),
                            o.object_id,
                            o.digest,
                            o.kind,
                            o.base_object_class,
                            o.leaf_object_class,
                            o.val,
                            Micros::now().0,
                            o.wb_user_id,
                        ])
                    })
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>> {
        if q.matches_nothing {
            return Ok(Vec::new());
        }
        let statement = sql::select_objects(&q);
        self.read(move |conn| {
            let mut st = conn.prepare(&statement.text).map_err(backend)?;
            st.query_map(rusqlite::params_from_iter(statement.params.iter()), |r| {
                row_to_object(&q.project, r, q.metadata_only)
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(backend)
        })
        .await
    }

    async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>> {
        self.writer
            .exec(move |conn| {
                let live = live_versions(conn, &d.project, &d.object_id)?;
                let doomed = objects::resolve_deletion(&d.object_id, &live, d.versions.as_deref())?;
                let digests: Vec<&str> = doomed.iter().map(|v| v.digest.as_str()).collect();
                conn.execute(
                    sql::DELETE_OBJECT_VERSIONS,
                    params![
                        d.project.as_str(),
                        d.object_id,
                        serde_json::to_string(&digests).map_err(backend)?,
                        Micros::now().0
                    ],
                )
                .map_err(backend)?;
                Ok(doomed.into_iter().map(DeletedVersion::from).collect())
            })
            .await
    }

    async fn read_object(
        &self,
        project: &ProjectId,
        object_id: &str,
        version: &VersionSel,
        metadata_only: bool,
    ) -> Result<ObjSchema> {
        let (project, object_id, version) =
            (project.clone(), object_id.to_owned(), version.clone());
        self.read(move |conn| {
            let (by, selector): (ObjectBy, Option<rusqlite::types::Value>) = match &version {
                VersionSel::Latest => (ObjectBy::Latest, None),
                VersionSel::Index(i) => (ObjectBy::Index, Some((*i).into())),
                VersionSel::Digest(d) => (ObjectBy::Digest, Some(d.clone().into())),
            };
            let args = [project.as_str().to_owned().into(), object_id.clone().into()]
                .into_iter()
                .chain(selector);
            let found = conn
                .query_row(&sql::select_object(by), rusqlite::params_from_iter(args), |r| {
                    row_to_object(&project, r, metadata_only)
                })
                .optional()
                .map_err(backend)?;
            let what = || format!("object {object_id}:{}", version_text(&version));
            match found {
                None => Err(StoreError::NotFound(format!("{} not found", what()))),
                Some(ObjSchema { deleted_at: Some(at), .. }) => {
                    Err(StoreError::Deleted { what: what(), deleted_at: at })
                }
                Some(obj) => Ok(obj),
            }
        })
        .await
    }

    async fn create_file(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.writer
            .exec(move |conn| {
                let p = project.as_str();
                let exists: bool = conn
                    .query_row(sql::FILE_EXISTS, params![p, digest], |r| r.get(0))
                    .map_err(backend)?;
                if exists {
                    return Ok(());
                }
                // One savepoint: chunks and file row commit together.
                let mut chunk = conn.prepare_cached(sql::INSERT_FILE_CHUNK).map_err(backend)?;
                for (i, data) in files::chunks(&content) {
                    chunk.execute(params![p, digest, i, &data[..]]).map_err(backend)?;
                }
                conn.prepare_cached(sql::INSERT_FILE)
                    .and_then(|mut st| {
                        st.execute(params![
                            p,
                            digest,
                            content.len() as i64,
                            files::chunk_count(content.len()),
                            Micros::now().0
                        ])
                    })
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn read_file(&self, project: &ProjectId, digest: &str) -> Result<Bytes> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.read(move |conn| {
            let p = project.as_str();
            let found: Option<(i64, u32, Vec<u8>)> = conn
                .query_row(sql::SELECT_FILE, params![p, digest], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
                .map_err(backend)?;
            let Some((size, n_chunks, inline)) = found else {
                return Err(StoreError::NotFound(format!("file {digest} not found")));
            };
            if n_chunks == 0 {
                return Ok(Bytes::from(inline)); // stored before chunking, or empty
            }
            let parts = conn
                .prepare_cached(sql::SELECT_FILE_CHUNKS)
                .and_then(|mut st| {
                    st.query_map(params![p, digest], |r| r.get::<_, Vec<u8>>(0).map(Bytes::from))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)?;
            files::assemble(&digest, size as u64, n_chunks, parts)
        })
        .await
    }

    async fn files_size(&self, project: &ProjectId) -> Result<u64> {
        let project = project.clone();
        self.read(move |conn| {
            conn.query_row(sql::FILES_SIZE, params![project.as_str()], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(backend)
        })
        .await
    }

    async fn create_table(&self, t: NewTable) -> Result<()> {
        let list = serde_json::to_string(&t.row_digests).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                let now = Micros::now().0;
                let project = t.project.as_str();
                let mut insert_row = conn.prepare_cached(sql::INSERT_TABLE_ROW).map_err(backend)?;
                for r in &t.rows {
                    insert_row
                        .execute(params![project, r.digest, r.val, r.val.len() as i64, now])
                        .map_err(backend)?;
                }
                conn.prepare_cached(sql::INSERT_TABLE)
                    .and_then(|mut st| {
                        st.execute(params![
                            project,
                            t.digest,
                            t.row_digests.len() as i64,
                            list,
                            now
                        ])
                    })
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn table_slice(
        &self,
        project: &ProjectId,
        digest: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Option<TableSlice>> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.read(move |conn| {
            let count: Option<i64> = conn
                .prepare_cached(sql::TABLE_COUNT)
                .and_then(|mut st| {
                    st.query_row(params![project.as_str(), digest], |r| r.get(0)).optional()
                })
                .map_err(backend)?;
            let Some(count) = count else { return Ok(None) };
            let count = count as u64;
            if offset >= count || limit == Some(0) {
                return Ok(Some(TableSlice { count, row_digests: Vec::new() }));
            }
            let limit = limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
            let mut st = conn.prepare_cached(sql::TABLE_PAGE).map_err(backend)?;
            let row_digests = st
                .query_map(params![project.as_str(), digest, limit, offset as i64], |r| r.get(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
                .map_err(backend)?;
            Ok(Some(TableSlice { count, row_digests }))
        })
        .await
    }

    async fn read_rows(
        &self,
        project: &ProjectId,
        digests: &[String],
        with_val: bool,
    ) -> Result<HashMap<String, StoredRow>> {
        if digests.is_empty() {
            return Ok(HashMap::new());
        }
        let project = project.clone();
        let list = serde_json::to_string(digests).map_err(backend)?;
        self.read(move |conn| {
            let mut st = conn.prepare_cached(sql::SELECT_TABLE_ROWS).map_err(backend)?;
            let rows = st
                .query_map(params![project.as_str(), list, with_val], |r| {
                    let row =
                        StoredRow { size_bytes: r.get::<_, i64>(1)? as u64, val: raw(r.get(2)?)? };
                    Ok((r.get::<_, String>(0)?, row))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<HashMap<_, _>>>())
                .map_err(backend)?;
            Ok(rows)
        })
        .await
    }

    async fn create_feedback(&self, items: Vec<NewFeedback>) -> Result<Vec<StoredFeedback>> {
        self.writer
            .exec(move |conn| {
                let mut insert = conn.prepare_cached(sql::INSERT_FEEDBACK).map_err(backend)?;
                let mut read =
                    conn.prepare_cached(&sql::select_feedback_by_id()).map_err(backend)?;
                let mut out = Vec::with_capacity(items.len());
                for f in &items {
                    insert
                        .execute(params![
                            f.project.as_str(),
                            f.id,
                            f.weave_ref,
                            f.feedback_type,
                            f.creator,
                            f.payload,
                            f.created_at.0,
                            f.wb_user_id,
                            f.annotation_ref,
                            f.runnable_ref,
                            f.call_ref,
                            f.trigger_ref,
                            f.queue_id,
                            f.extra,
                        ])
                        .map_err(backend)?;
                    // The stored row: this one, or the one an earlier send of the same id made.
                    out.push(
                        read.query_row(params![f.project.as_str(), f.id], row_to_feedback)
                            .map_err(backend)?,
                    );
                }
                Ok(out)
            })
            .await
    }

    async fn query_feedback(&self, q: FeedbackQuery) -> Result<(Vec<StoredFeedback>, u64)> {
        let (select, count) = (sql::select_feedback(&q), sql::count_feedback(&q));
        self.read(move |conn| {
            let mut st = conn.prepare(&select.text).map_err(backend)?;
            let rows = st
                .query_map(rusqlite::params_from_iter(select.params.iter()), row_to_feedback)
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)?;
            let total: i64 = conn
                .query_row(&count.text, rusqlite::params_from_iter(count.params.iter()), |r| {
                    r.get(0)
                })
                .map_err(backend)?;
            Ok((rows, total as u64))
        })
        .await
    }

    async fn purge_feedback(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        let project = project.clone();
        let ids = serde_json::to_string(ids).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                conn.execute(sql::PURGE_FEEDBACK, params![project.as_str(), ids])
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn feedback_for_refs(
        &self,
        project: &ProjectId,
        refs: &[String],
    ) -> Result<Vec<StoredFeedback>> {
        let project = project.clone();
        let refs = serde_json::to_string(refs).map_err(backend)?;
        self.read(move |conn| {
            let mut st = conn.prepare_cached(&sql::feedback_for_refs()).map_err(backend)?;
            st.query_map(params![project.as_str(), refs], row_to_feedback)
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)
        })
        .await
    }

    async fn create_costs(&self, costs: Vec<CostRecord>) -> Result<()> {
        self.writer
            .exec(move |conn| {
                let mut st = conn.prepare_cached(sql::INSERT_COST).map_err(backend)?;
                for c in &costs {
                    st.execute(params![
                        c.project.as_str(),
                        c.id,
                        c.llm_id,
                        c.provider_id,
                        c.prompt_token_cost,
                        c.completion_token_cost,
                        c.prompt_token_cost_unit,
                        c.completion_token_cost_unit,
                        c.cache_read_input_token_cost,
                        c.cache_creation_input_token_cost,
                        c.effective_date.0,
                        c.created_at.0,
                        c.created_by,
                    ])
                    .map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn project_costs(&self, project: &ProjectId) -> Result<Vec<CostRecord>> {
        let project = project.clone();
        self.read(move |conn| {
            let mut st = conn.prepare_cached(sql::SELECT_COSTS).map_err(backend)?;
            st.query_map(params![project.as_str()], |r| {
                Ok(CostRecord {
                    id: r.get(0)?,
                    project: project.clone(),
                    llm_id: r.get(1)?,
                    provider_id: r.get(2)?,
                    prompt_token_cost: r.get(3)?,
                    completion_token_cost: r.get(4)?,
                    prompt_token_cost_unit: r.get(5)?,
                    completion_token_cost_unit: r.get(6)?,
                    cache_read_input_token_cost: r.get(7)?,
                    cache_creation_input_token_cost: r.get(8)?,
                    effective_date: Micros(r.get(9)?),
                    created_at: Micros(r.get(10)?),
                    created_by: r.get(11)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(backend)
        })
        .await
    }

    async fn purge_costs(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        let project = project.clone();
        let ids = serde_json::to_string(ids).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                conn.execute(sql::DELETE_COSTS, params![project.as_str(), ids]).map_err(backend)?;
                Ok(())
            })
            .await
    }

    /// Reads the project's turn calls through the partial index and aggregates them in Rust
    /// (SQLite has no percentile aggregate); memory grows with the project's threads.
    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>> {
        let ids = q.thread_ids.as_ref().map(serde_json::to_string).transpose().map_err(backend)?;
        self.read(move |conn| {
            let mut st = conn.prepare_cached(sql::SELECT_TURNS).map_err(backend)?;
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
            Ok(q.aggregate(turns))
        })
        .await
    }

    async fn create_key(&self, key_hash: &str, entity: Option<&str>) -> Result<()> {
        let (hash, entity) = (key_hash.to_owned(), entity.map(str::to_owned));
        self.writer
            .exec(move |conn| {
                conn.execute(sql::INSERT_KEY, params![hash, entity, Micros::now().0])
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn list_projects(
        &self,
        entity: Option<&str>,
        limit: u64,
    ) -> Result<Vec<crate::ProjectInfo>> {
        let entity = entity.map(str::to_owned);
        self.read(move |conn| projects::list(conn, entity.as_deref(), limit)).await
    }

    async fn lookup_key(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        let hash = key_hash.to_owned();
        self.read(move |conn| {
            conn.query_row(sql::SELECT_KEY, params![hash], |r| r.get::<_, Option<String>>(0))
                .optional()
                .map(|found| found.map(|entity| KeyRecord { entity }))
                .map_err(backend)
        })
        .await
    }

    async fn has_admin_key(&self) -> Result<bool> {
        self.read(|conn| conn.query_row(sql::ANY_ADMIN_KEY, [], |r| r.get(0)).map_err(backend))
            .await
    }

    async fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        self.read(|conn| {
            conn.prepare(sql::LIST_KEYS)
                .and_then(|mut stmt| stmt.query_map([], key_info)?.collect())
                .map_err(backend)
        })
        .await
    }

    async fn revoke_key(&self, id: &str) -> Result<KeyInfo> {
        let id = crate::parse_key_id(id)?;
        // One writer job: the lookup and the update commit together.
        self.writer
            .exec(move |conn| {
                let hashes: Vec<String> = conn
                    .prepare(sql::KEYS_WITH_ID)
                    .and_then(|mut stmt| stmt.query_map([&id], |r| r.get(0))?.collect())
                    .map_err(backend)?;
                let hash = crate::only_key(&id, &hashes)?;
                conn.execute(sql::REVOKE_KEY, params![hash, Micros::now().0]).map_err(backend)?;
                conn.query_row(sql::KEY_INFO, [&hash], key_info).map_err(backend)
            })
            .await
    }

    async fn put_blob(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.writer.exec(move |conn| blobs::put(conn, project.as_str(), &digest, &content)).await
    }

    async fn read_blob(&self, project: &ProjectId, digest: &str, size: u64) -> Result<Bytes> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.read(move |conn| blobs::read(conn, project.as_str(), &digest, size)).await
    }

    async fn probe_write(&self) -> Result<()> {
        self.writer.exec(blobs::probe).await
    }
}

/// A row of `sql::LIST_KEYS` or `sql::KEY_INFO`.
fn key_info(r: &Row<'_>) -> rusqlite::Result<KeyInfo> {
    let hash: String = r.get(0)?;
    Ok(KeyInfo {
        id: crate::key_id(&hash).to_owned(),
        entity: r.get(1)?,
        created_at: Micros(r.get(2)?),
        revoked_at: r.get::<_, Option<i64>>(3)?.map(Micros),
    })
}

fn version_text(v: &VersionSel) -> String {
    match v {
        VersionSel::Latest => "latest".into(),
        VersionSel::Index(i) => format!("v{i}"),
        VersionSel::Digest(d) => d.clone(),
    }
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_in_chunks_and_files_from_before_chunking() {
        let dir = tempfile::tempdir().unwrap();
        let project = ProjectId::parse("e/p").unwrap();
        {
            // A database at schema version 2 holding a file the old way (content inline).
            let mut conn = Connection::open(dir.path().join("heddle.db")).unwrap();
            assert_eq!(migrations::migrate_to(&mut conn, 2).unwrap(), 2);
            conn.execute(
                "INSERT INTO files (project_id, digest, size_bytes, content, created_at)
                 VALUES ('e/p', 'old', 3, x'616263', 0)",
                [],
            )
            .unwrap();
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        assert_eq!(store.read_file(&project, "old").await.unwrap(), Bytes::from_static(b"abc"));

        let content: Bytes = (0..(5usize << 20) / 2).map(|i| (i % 253) as u8).collect();
        store.create_file(&project, "big", content.clone()).await.unwrap();
        store.create_file(&project, "big", content.clone()).await.unwrap(); // idempotent
        let chunks: Vec<(i64, i64)> = store
            .read(|conn| {
                let mut st = conn
                    .prepare(
                        "SELECT chunk_index, length(data) FROM file_chunks WHERE digest = 'big'
                         ORDER BY chunk_index",
                    )
                    .map_err(backend)?;
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                    .map_err(backend)
            })
            .await
            .unwrap();
        assert_eq!(chunks, [(0, 1 << 20), (1, 1 << 20), (2, 1 << 19)], "2.5 MiB in 1 MiB chunks");
        assert_eq!(store.read_file(&project, "big").await.unwrap(), content);
        assert_eq!(store.files_size(&project).await.unwrap(), content.len() as u64 + 3);
    }

    #[tokio::test]
    async fn keys_are_listed_and_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let (admin, alice, bob) = ("a0".repeat(32), "b1".repeat(32), "c2".repeat(32));
        {
            // A key stored before keys could be revoked keeps working after the upgrade.
            let mut conn = Connection::open(dir.path().join("heddle.db")).unwrap();
            assert_eq!(migrations::migrate_to(&mut conn, 6).unwrap(), 6);
            conn.execute(sql::INSERT_KEY, params![admin, None::<String>, 1]).unwrap();
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        store.create_key(&alice, Some("alice")).await.unwrap();
        store.create_key(&bob, Some("bob")).await.unwrap();
        assert!(store.has_admin_key().await.unwrap());

        let listed = store.list_keys().await.unwrap();
        let ids: Vec<(&str, Option<&str>)> =
            listed.iter().map(|k| (k.id.as_str(), k.entity.as_deref())).collect();
        assert_eq!(
            ids,
            [
                ("a0a0a0a0a0a0", None),
                ("b1b1b1b1b1b1", Some("alice")),
                ("c2c2c2c2c2c2", Some("bob"))
            ]
        );
        assert!(listed.iter().all(|k| k.revoked_at.is_none() && k.created_at.0 > 0));

        let revoked = store.revoke_key("B1B1B1B1B1B1").await.unwrap();
        assert_eq!(revoked.entity.as_deref(), Some("alice"));
        let at = revoked.revoked_at.expect("revoked");
        assert_eq!(store.lookup_key(&alice).await.unwrap(), None);
        assert_eq!(
            store.lookup_key(&bob).await.unwrap(),
            Some(KeyRecord { entity: Some("bob".into()) })
        );
        // Again: nothing changes, the first revocation time stays.
        assert_eq!(store.revoke_key("b1b1b1b1b1b1").await.unwrap().revoked_at, Some(at));
        let listed = store.list_keys().await.unwrap();
        assert_eq!(listed[1].revoked_at, Some(at));
        assert_eq!((listed[0].revoked_at, listed[2].revoked_at), (None, None));

        // Revoking the only admin key leaves none: the next `serve` generates a new one.
        store.revoke_key("a0a0a0a0a0a0").await.unwrap();
        assert!(!store.has_admin_key().await.unwrap());
        assert_eq!(store.lookup_key(&admin).await.unwrap(), None);

        assert!(matches!(store.revoke_key("d3d3d3d3d3d3").await, Err(StoreError::NotFound(_))));
        for bad in ["b1b1", "b1b1b1b1b1b1b1", "b1b1b1b1b1bx", "%"] {
            assert!(matches!(store.revoke_key(bad).await, Err(StoreError::Invalid(_))), "{bad}");
        }
        assert_eq!(store.lookup_key(&bob).await.unwrap().unwrap().entity.as_deref(), Some("bob"));
    }
}
