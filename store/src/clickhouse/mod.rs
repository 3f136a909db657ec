//! The distributed backend: ClickHouse over its HTTP interface (the `clickhouse` crate, LZ4
//! compressed). Schema: `migrations/0001_init.sql`; every statement: [`sql`]; row types: [`rows`].
//!
//! Writes are synchronous inserts (no `async_insert`): when a call returns, the rows are in
//! ClickHouse and visible to the next read. Calls are append-only rows aggregated per call at
//! read time, which gives order tolerance and idempotency without transactions (see
//! `sql::CALLS_AGG`). Objects need a version index per new digest, which ClickHouse cannot
//! assign atomically: see [`ClickHouseStore::create_object`].

mod blobs;
mod compile;
pub mod migrations;
mod projects;
mod rows;
pub mod sql;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use clickhouse::Client;
use futures::StreamExt;
use heddle_proto::ProjectId;
use heddle_proto::calls::{CallPart, CallsQuery};
use heddle_proto::costs::CostRecord;
use heddle_proto::feedback::{FeedbackQuery, NewFeedback, StoredFeedback};
use heddle_proto::objects::{DeletedVersion, ObjSchema, ObjectsDelete, ObjectsQuery, VersionSel};
use heddle_proto::threads::{Thread, ThreadsQuery};
use heddle_proto::time::Micros;
use serde_json::value::RawValue;

use self::rows::{
    Blob, CallRow, ChunkDataRow, CostRow, FeedbackReadRow, FeedbackRow, FileChunkRow, FileMetaRow,
    FileRow, KeyEntityRow, KeyInfoRow, KeyRevocationRow, KeyRow, LiveVersionRow, ObjectMetaRow,
    ObjectRow, ObjectStateRow, ObjectValRow, PartRow, StoredRowRow, TableListRow, TableRowRow,
    TableSliceRow, ThreadRow,
};
use self::sql::{ObjectBy, Sql};
use crate::objects::{self, LiveVersion};
use crate::{
    CallStream, KeyInfo, KeyRecord, NewObject, NewTable, Result, Store, StoreError, StoredRow,
    TableSlice, files,
};

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("clickhouse: {e}"))
}

/// ClickHouse error codes that mean the inserted data itself is unacceptable (parse and type
/// errors, oversized strings): retrying the same rows cannot succeed.
const DATA_ERROR_CODES: &[u32] = &[6, 26, 27, 38, 41, 69, 72, 117, 131];

/// The server's `Code: N.` of an error, if it is one.
fn error_code(e: &clickhouse::error::Error) -> Option<u32> {
    let clickhouse::error::Error::BadResponse(text) = e else { return None };
    let rest = &text[text.find("Code: ")? + 6..];
    rest[..rest.find('.')?].trim().parse().ok()
}

/// An insert's error: [`StoreError::Rejected`] when the data is at fault, else a backend error.
fn insert_error(e: clickhouse::error::Error) -> StoreError {
    match error_code(&e) {
        Some(code) if DATA_ERROR_CODES.contains(&code) => {
            StoreError::Rejected(format!("clickhouse: {e}"))
        }
        _ => backend(e),
    }
}

/// Orders the rows of one call (and of one object digest): a per-process monotonic counter
/// seeded from the clock in nanoseconds, so rows written later by this or (with roughly
/// synchronised clocks) another process compare greater.
fn next_version() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let prev =
        LAST.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |prev| Some(now.max(prev + 1)));
    now.max(prev.expect("the update always succeeds") + 1)
}

/// Row digests per lookup query: 1,000 × 43 characters (plus quoting) stay well under the
/// 128 KiB a form field may hold.
const ROWS_PER_LOOKUP: usize = 1000;

/// Stripes of the object-version lock (see `create_object`).
const OBJECT_LOCKS: usize = 64;

pub struct ClickHouseStore {
    client: Client,
    /// Object creation per (project, object_id) is serialised through one of these stripes.
    object_locks: Vec<tokio::sync::Mutex<()>>,
}

impl ClickHouseStore {
    /// Connects to the ClickHouse HTTP interface at `url`, creates `database` when it is not
    /// `default`, and migrates the schema to the latest version.
    pub async fn connect(
        url: &str,
        user: &str,
        password: &str,
        database: &str,
    ) -> Result<ClickHouseStore> {
        let base = Client::default().with_url(url).with_user(user).with_password(password);
        if database != "default" {
            // An operator-chosen name, not a user value: checked, then quoted as an identifier.
            if database.is_empty()
                || !database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(backend(format!(
                    "invalid database name {database:?}: letters, digits and '_' only"
                )));
            }
            base.query_raw(&format!("CREATE DATABASE IF NOT EXISTS `{database}`"))
                .execute()
                .await
                .map_err(backend)?;
        }
        let client = base.with_database(database);
        migrations::migrate(&client).await.map_err(backend)?;
        let object_locks = (0..OBJECT_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect();
        Ok(ClickHouseStore { client, object_locks })
    }

    /// The client, e.g. for tests that look at the tables.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Inserts `rows` into `table` and returns once ClickHouse has stored them: synchronous
    /// (`async_insert = 0`), with the status sent only at the end of the query.
    async fn insert<T>(&self, table: &str, rows: &[T::Value<'_>]) -> Result<()>
    where
        T: clickhouse::Row + clickhouse::RowWrite,
    {
        self.insert_once::<T>(table, rows, None).await
    }

    /// Like `insert`; with a `token`, ClickHouse stores the insert once however often the same
    /// token arrives (`insert_deduplication_token`, within the table's
    /// `non_replicated_deduplication_window` of recent inserts).
    async fn insert_once<T>(
        &self,
        table: &str,
        rows: &[T::Value<'_>],
        token: Option<&str>,
    ) -> Result<()>
    where
        T: clickhouse::Row + clickhouse::RowWrite,
    {
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert = self
            .client
            .insert::<T>(table)
            .await
            .map_err(backend)?
            .with_setting("wait_end_of_query", "1")
            .with_setting("async_insert", "0");
        if let Some(token) = token {
            insert = insert.with_setting("insert_deduplication_token", token);
        }
        for row in rows {
            insert.write(row).await.map_err(insert_error)?;
        }
        insert.end().await.map_err(insert_error)
    }

    fn object_lock(&self, project: &ProjectId, object_id: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (project.as_str(), object_id).hash(&mut h);
        &self.object_locks[h.finish() as usize % OBJECT_LOCKS]
    }
}

/// The rows of `parts`, built off the async runtime: each JSON member is parsed once more to
/// find refs and numbers ClickHouse would rewrite (`rows::index_json`).
async fn part_rows(parts: Vec<CallPart>) -> Result<Vec<PartRow>> {
    tokio::task::spawn_blocking(move || {
        parts.into_iter().map(|p| PartRow::from_part(p, next_version())).collect()
    })
    .await
    .map_err(backend)
}

fn to_schema(project: &ProjectId, meta: ObjectMetaRow, val: Option<Box<RawValue>>) -> ObjSchema {
    ObjSchema {
        project_id: project.clone(),
        object_id: meta.object_id,
        digest: meta.digest,
        version_index: meta.version_index,
        is_latest: meta.is_latest as i64,
        kind: meta.kind,
        base_object_class: meta.base_object_class,
        leaf_object_class: meta.leaf_object_class,
        val,
        created_at: Micros(meta.created_us),
        deleted_at: meta.deleted_us.map(Micros),
        wb_user_id: meta.wb_user_id,
        size_bytes: meta.size_bytes,
        tags: None,
        aliases: None,
    }
}

fn version_text(v: &VersionSel) -> String {
    match v {
        VersionSel::Latest => "latest".into(),
        VersionSel::Index(i) => format!("v{i}"),
        VersionSel::Digest(d) => d.clone(),
    }
}

#[async_trait]
impl Store for ClickHouseStore {
    async fn apply_call_parts(&self, parts: Vec<CallPart>) -> Result<()> {
        let rows = part_rows(parts).await?;
        self.insert::<PartRow>(sql::CALL_PARTS, &rows).await
    }

    /// A batch that may arrive again verbatim (the consumer after a crash) is inserted under its
    /// token, so ClickHouse stores it once; were it stored twice, the aggregation per call would
    /// hide the duplicate rows anyway.
    async fn apply_call_parts_once(&self, parts: Vec<CallPart>, token: &str) -> Result<()> {
        let rows = part_rows(parts).await?;
        self.insert_once::<PartRow>(sql::CALL_PARTS, &rows, Some(token)).await
    }

    async fn set_call_display_name(&self, project: &ProjectId, id: &str, name: &str) -> Result<()> {
        let row = PartRow::rename(project, id, name, next_version());
        self.insert::<PartRow>(sql::CALL_PARTS, &[row]).await
    }

    async fn delete_calls(&self, project: &ProjectId, ids: &[String]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let doomed: Vec<String> = sql::doomed_calls(project.as_str(), ids)
            .query(&self.client)
            .fetch_all::<String>()
            .await
            .map_err(backend)?;
        let at = Micros::now();
        let rows: Vec<PartRow> =
            doomed.into_iter().map(|id| PartRow::delete(project, id, at, next_version())).collect();
        self.insert::<PartRow>(sql::CALL_PARTS, &rows).await?;
        Ok(rows.len() as u64)
    }

    async fn query_calls(&self, q: CallsQuery) -> Result<CallStream> {
        let statement = sql::select_calls(&q);
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
        Ok(Box::pin(futures::stream::once(async move { to_call(first) }).chain(rest)))
    }

    async fn count_calls(&self, q: CallsQuery) -> Result<u64> {
        sql::count_calls(&q).query(&self.client).fetch_one::<u64>().await.map_err(backend)
    }

    /// Version indexes are `max + 1` per object. ClickHouse has no transactions, so two
    /// concurrent creates of new digests could take the same index: this assumes ONE writer of
    /// objects per (project, object_id) — the query role of a single process (objects are a
    /// low-volume write) — and serialises creates in-process. Duplicates of one digest are
    /// harmless anyway: reads take one row per digest.
    async fn create_object(&self, o: NewObject) -> Result<()> {
        let _guard = self.object_lock(&o.project, &o.object_id).lock().await;
        let state: ObjectStateRow = sql::object_state(o.project.as_str(), &o.object_id, &o.digest)
            .query(&self.client)
            .fetch_one()
            .await
            .map_err(backend)?;
        if state.found > 0 && state.mine.2 == 0 {
            return Ok(()); // the version exists: a no-op
        }
        let latest_base = (state.live_versions > 0).then_some(state.live_base.0.as_deref());
        objects::check_class(&o.object_id, latest_base, o.base_object_class.as_deref())?;
        let (version_index, created_at, wb_user_id) = if state.found > 0 {
            // Revive the deleted version as it was (a newer row of the same digest).
            let (index, created_at, _, wb_user_id) = state.mine;
            (index, created_at, wb_user_id)
        } else if state.versions == 0 {
            (0, Micros::now().0, o.wb_user_id)
        } else {
            (state.max_index + 1, Micros::now().0, o.wb_user_id)
        };
        let row = ObjectRow {
            project_id: o.project.as_str().to_owned(),
            object_id: o.object_id,
            digest: o.digest,
            version_index,
            kind: o.kind.to_owned(),
            base_object_class: o.base_object_class,
            leaf_object_class: o.leaf_object_class,
            val: o.val,
            created_at,
            deleted_at: None,
            wb_user_id,
            row_version: next_version(),
        };
        self.insert::<ObjectRow>("objects", &[row]).await
    }

    async fn read_object(
        &self,
        project: &ProjectId,
        object_id: &str,
        version: &VersionSel,
        metadata_only: bool,
    ) -> Result<ObjSchema> {
        let by = match version {
            VersionSel::Latest => ObjectBy::Latest,
            VersionSel::Index(i) => ObjectBy::Index(*i),
            VersionSel::Digest(d) => ObjectBy::Digest(d.clone()),
        };
        let found: Option<ObjectMetaRow> = sql::select_object(project.as_str(), object_id, &by)
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        let what = || format!("object {object_id}:{}", version_text(version));
        let meta = found.ok_or_else(|| StoreError::NotFound(format!("{} not found", what())))?;
        if let Some(at) = meta.deleted_us {
            return Err(StoreError::Deleted { what: what(), deleted_at: Micros(at) });
        }
        let val = if metadata_only {
            None
        } else {
            let text: String = sql::select_object_val(project.as_str(), object_id, &meta.digest)
                .query(&self.client)
                .fetch_one()
                .await
                .map_err(backend)?;
            Some(RawValue::from_string(text).map_err(backend)?)
        };
        Ok(to_schema(project, meta, val))
    }

    /// Metadata first (sorted and paged by ClickHouse), then the values of that page only.
    async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>> {
        if q.matches_nothing {
            return Ok(Vec::new());
        }
        let metas: Vec<ObjectMetaRow> =
            sql::select_objects(&q).query(&self.client).fetch_all().await.map_err(backend)?;
        let mut vals = std::collections::HashMap::new();
        if !q.metadata_only && !metas.is_empty() {
            let dedup = |mut v: Vec<String>| {
                v.sort_unstable();
                v.dedup();
                v
            };
            let ids = dedup(metas.iter().map(|m| m.object_id.clone()).collect());
            let digests = dedup(metas.iter().map(|m| m.digest.clone()).collect());
            let rows: Vec<ObjectValRow> =
                sql::select_object_vals(q.project.as_str(), &ids, &digests)
                    .query(&self.client)
                    .fetch_all()
                    .await
                    .map_err(backend)?;
            vals.extend(rows.into_iter().map(|r| ((r.object_id, r.digest), r.val_text)));
        }
        metas
            .into_iter()
            .map(|meta| {
                let val = match vals.remove(&(meta.object_id.clone(), meta.digest.clone())) {
                    Some(text) => Some(RawValue::from_string(text).map_err(backend)?),
                    None => None,
                };
                Ok(to_schema(&q.project, meta, val))
            })
            .collect()
    }

    async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>> {
        // The same lock as creates: a create reviving a version and a delete of it serialise.
        let _guard = self.object_lock(&d.project, &d.object_id).lock().await;
        let rows: Vec<LiveVersionRow> = sql::live_object_versions(d.project.as_str(), &d.object_id)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        let live: Vec<LiveVersion> = rows
            .into_iter()
            .map(|r| LiveVersion {
                digest: r.digest,
                version_index: r.version_index,
                base_object_class: r.base_object_class,
                leaf_object_class: r.leaf_object_class,
            })
            .collect();
        let doomed = objects::resolve_deletion(&d.object_id, &live, d.versions.as_deref())?;
        let digests: Vec<String> = doomed.iter().map(|v| v.digest.clone()).collect();
        sql::delete_object_versions(
            d.project.as_str(),
            &d.object_id,
            &digests,
            Micros::now().0,
            next_version(),
        )
        .query(&self.client)
        .with_setting("wait_end_of_query", "1")
        .with_setting("async_insert", "0")
        .execute()
        .await
        .map_err(insert_error)?;
        Ok(doomed.into_iter().map(DeletedVersion::from).collect())
    }

    async fn create_file(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        // Content-addressed: skip the upload when the digest is stored. A racing duplicate
        // writes the same rows, which collapse in the ReplacingMergeTrees.
        let n: u64 = sql::file_exists(project.as_str(), digest)
            .query(&self.client)
            .fetch_one()
            .await
            .map_err(backend)?;
        if n > 0 {
            return Ok(());
        }
        let chunks = FileChunkRow::split(project.as_str(), digest, &content);
        // Chunks first: the file row makes the file visible, complete.
        self.insert::<FileChunkRow>("file_chunks", &chunks).await?;
        let row = FileRow {
            project_id: project.as_str().to_owned(),
            digest: digest.to_owned(),
            size_bytes: content.len() as u64,
            content: Blob::default(),
            created_at: Micros::now().0,
            n_chunks: files::chunk_count(content.len()),
        };
        self.insert::<FileRow>("files", &[row]).await
    }

    async fn read_file(&self, project: &ProjectId, digest: &str) -> Result<Bytes> {
        let found: Option<FileMetaRow> = sql::select_file(project.as_str(), digest)
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        let meta = found.ok_or_else(|| StoreError::NotFound(format!("file {digest} not found")))?;
        if meta.n_chunks == 0 {
            return Ok(meta.content.0); // stored before chunking, or empty
        }
        let parts: Vec<ChunkDataRow> = sql::select_file_chunks(project.as_str(), digest)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        files::assemble(
            digest,
            meta.size_bytes,
            meta.n_chunks,
            parts.into_iter().map(|r| r.data.0).collect(),
        )
    }

    async fn files_size(&self, project: &ProjectId) -> Result<u64> {
        sql::files_size(project.as_str()).query(&self.client).fetch_one().await.map_err(backend)
    }

    /// Content-addressed like files: rows and the table are inserted only when not yet stored
    /// (rows first, so a visible table has its rows). A racing duplicate is the same row and
    /// collapses in the ReplacingMergeTree; reads take one row per digest meanwhile.
    async fn create_table(&self, t: NewTable) -> Result<()> {
        let project = t.project.as_str();
        let mut wanted: Vec<String> = t.rows.iter().map(|r| r.digest.clone()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let stored = self.read_rows(&t.project, &wanted, false).await?;
        let now = Micros::now().0;
        let mut seen = HashSet::new();
        let rows: Vec<TableRowRow> = t
            .rows
            .into_iter()
            .filter(|r| !stored.contains_key(&r.digest) && seen.insert(r.digest.clone()))
            .map(|r| TableRowRow {
                project_id: project.to_owned(),
                size_bytes: r.val.len() as u64,
                digest: r.digest,
                val: r.val,
                created_at: now,
            })
            .collect();
        self.insert::<TableRowRow>(sql::TABLE_ROWS, &rows).await?;
        if self.table_slice(&t.project, &t.digest, 0, Some(0)).await?.is_some() {
            return Ok(());
        }
        let table = TableListRow {
            project_id: project.to_owned(),
            digest: t.digest,
            row_count: t.row_digests.len() as u64,
            row_digests: t.row_digests,
            created_at: now,
        };
        self.insert::<TableListRow>(sql::TABLES, &[table]).await
    }

    async fn table_slice(
        &self,
        project: &ProjectId,
        digest: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Option<TableSlice>> {
        let found: Option<TableSliceRow> =
            sql::table_slice(project.as_str(), digest, offset, limit)
                .query(&self.client)
                .fetch_optional()
                .await
                .map_err(backend)?;
        Ok(found.map(|r| TableSlice { count: r.row_count, row_digests: r.page }))
    }

    async fn read_rows(
        &self,
        project: &ProjectId,
        digests: &[String],
        with_val: bool,
    ) -> Result<HashMap<String, StoredRow>> {
        let mut out = HashMap::with_capacity(digests.len());
        // The digests travel as one query parameter, a form field of the request: batches
        // keep each under ClickHouse's `http_max_field_value_size` (128 KiB by default).
        for batch in digests.chunks(ROWS_PER_LOOKUP) {
            let rows: Vec<StoredRowRow> = sql::select_table_rows(project.as_str(), batch, with_val)
                .query(&self.client)
                .fetch_all()
                .await
                .map_err(backend)?;
            for r in rows {
                let val = if with_val {
                    Some(RawValue::from_string(r.val).map_err(backend)?)
                } else {
                    None
                };
                out.insert(r.digest, StoredRow { size_bytes: r.size_bytes, val });
            }
        }
        Ok(out)
    }

    /// Ids already stored are skipped (found first, under the project's lock stripe, so two
    /// sends of one batch through this process insert once; a race across processes leaves a
    /// duplicate row that FINAL reads and merges collapse).
    async fn create_feedback(&self, items: Vec<NewFeedback>) -> Result<Vec<StoredFeedback>> {
        let mut out: Vec<Option<StoredFeedback>> = vec![None; items.len()];
        let mut by_project: HashMap<ProjectId, Vec<(usize, NewFeedback)>> = HashMap::new();
        for (i, f) in items.into_iter().enumerate() {
            by_project.entry(f.project.clone()).or_default().push((i, f));
        }
        for (project, items) in by_project {
            let _guard = self.object_lock(&project, "\0feedback").lock().await;
            let ids: Vec<String> = items.iter().map(|(_, f)| f.id.clone()).collect();
            let mut stored: HashMap<String, StoredFeedback> = HashMap::new();
            for chunk in ids.chunks(ROWS_PER_LOOKUP) {
                let rows: Vec<FeedbackReadRow> = sql::feedback_by_ids(project.as_str(), chunk)
                    .query(&self.client)
                    .fetch_all()
                    .await
                    .map_err(backend)?;
                for r in rows {
                    let r = r.into_stored().map_err(backend)?;
                    stored.insert(r.id.clone(), r);
                }
            }
            let mut rows = Vec::new();
            for (i, f) in items {
                if let Some(existing) = stored.get(&f.id) {
                    out[i] = Some(existing.clone());
                    continue;
                }
                let row = StoredFeedback::from(f.clone());
                stored.insert(f.id.clone(), row.clone());
                out[i] = Some(row);
                rows.push(FeedbackRow::from_new(f));
            }
            self.insert::<FeedbackRow>(sql::FEEDBACK, &rows).await?;
        }
        Ok(out.into_iter().map(|r| r.expect("every item answered")).collect())
    }

    async fn query_feedback(&self, q: FeedbackQuery) -> Result<(Vec<StoredFeedback>, u64)> {
        let rows: Vec<FeedbackReadRow> =
            sql::select_feedback(&q).query(&self.client).fetch_all().await.map_err(backend)?;
        let total: u64 =
            sql::count_feedback(&q).query(&self.client).fetch_one().await.map_err(backend)?;
        let rows = rows
            .into_iter()
            .map(|r| r.into_stored().map_err(backend))
            .collect::<Result<Vec<_>>>()?;
        Ok((rows, total))
    }

    async fn purge_feedback(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        for chunk in ids.chunks(ROWS_PER_LOOKUP) {
            sql::purge_feedback(project.as_str(), chunk)
                .query(&self.client)
                .with_setting("wait_end_of_query", "1")
                .execute()
                .await
                .map_err(backend)?;
        }
        Ok(())
    }

    async fn feedback_for_refs(
        &self,
        project: &ProjectId,
        refs: &[String],
    ) -> Result<Vec<StoredFeedback>> {
        let mut out = Vec::new();
        for chunk in refs.chunks(ROWS_PER_LOOKUP) {
            let rows: Vec<FeedbackReadRow> = sql::feedback_for_refs(project.as_str(), chunk)
                .query(&self.client)
                .fetch_all()
                .await
                .map_err(backend)?;
            for r in rows {
                out.push(r.into_stored().map_err(backend)?);
            }
        }
        Ok(out)
    }

    async fn create_costs(&self, costs: Vec<CostRecord>) -> Result<()> {
        let rows: Vec<CostRow> =
            costs.into_iter().map(|c| CostRow::from_record(c, next_version())).collect();
        self.insert::<CostRow>(sql::COSTS, &rows).await
    }

    async fn project_costs(&self, project: &ProjectId) -> Result<Vec<CostRecord>> {
        let rows: Vec<CostRow> = sql::select_costs(project.as_str())
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        Ok(rows.into_iter().filter(|r| r.deleted == 0).map(|r| r.into_record(project)).collect())
    }

    /// Writes a tombstone for each of the project's live prices among `ids`.
    async fn purge_costs(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        let live = self.project_costs(project).await?;
        let rows: Vec<CostRow> = live
            .into_iter()
            .filter(|c| ids.contains(&c.id))
            .map(|c| CostRow { deleted: 1, ..CostRow::from_record(c, next_version()) })
            .collect();
        self.insert::<CostRow>(sql::COSTS, &rows).await
    }

    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>> {
        if q.thread_ids.as_ref().is_some_and(|l| l.is_empty()) {
            return Ok(Vec::new());
        }
        let rows: Vec<ThreadRow> =
            sql::select_threads(&q).query(&self.client).fetch_all().await.map_err(backend)?;
        Ok(rows
            .into_iter()
            .map(|r| Thread {
                thread_id: r.thread_id,
                turn_count: r.turn_count,
                start_time: Micros(r.start_time_us),
                last_updated: Micros(r.last_updated_us),
                first_turn_id: Some(r.first_turn_id),
                last_turn_id: Some(r.last_turn_id),
                p50_turn_duration_ms: r.p50_turn_duration_ms,
                p99_turn_duration_ms: r.p99_turn_duration_ms,
            })
            .collect())
    }

    async fn create_key(&self, key_hash: &str, entity: Option<&str>) -> Result<()> {
        let row = KeyRow {
            key_hash: key_hash.to_owned(),
            entity: entity.map(str::to_owned),
            created_at: Micros::now().0,
        };
        self.insert::<KeyRow>("api_keys", &[row]).await
    }

    async fn list_projects(
        &self,
        entity: Option<&str>,
        limit: u64,
    ) -> Result<Vec<crate::ProjectInfo>> {
        self.projects(entity, limit).await
    }

    async fn lookup_key(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        let found: Option<KeyEntityRow> = sql::select_key(key_hash)
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        Ok(found.map(|r| KeyRecord { entity: r.entity }))
    }

    async fn has_admin_key(&self) -> Result<bool> {
        let n: u64 =
            Sql::new(sql::ANY_ADMIN_KEY).query(&self.client).fetch_one().await.map_err(backend)?;
        Ok(n > 0)
    }

    async fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        let rows: Vec<KeyInfoRow> =
            sql::key_infos(None).query(&self.client).fetch_all().await.map_err(backend)?;
        Ok(rows.into_iter().map(KeyInfoRow::into_info).collect())
    }

    async fn revoke_key(&self, id: &str) -> Result<KeyInfo> {
        let id = crate::parse_key_id(id)?;
        let hashes: Vec<String> =
            sql::keys_with_id(&id).query(&self.client).fetch_all().await.map_err(backend)?;
        let hash = crate::only_key(&id, &hashes)?;
        let info = |hash: &str| {
            let q = sql::key_infos(Some(hash)).query(&self.client);
            async move {
                let row: KeyInfoRow = q.fetch_one().await.map_err(backend)?;
                Ok::<_, StoreError>(row.into_info())
            }
        };
        let before = info(&hash).await?;
        if before.revoked_at.is_some() {
            return Ok(before);
        }
        let row = KeyRevocationRow { key_hash: hash.clone(), revoked_at: Micros::now().0 };
        self.insert::<KeyRevocationRow>("api_key_revocations", &[row]).await?;
        info(&hash).await
    }

    async fn put_blob(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        self.put_blob_chunks(project, digest, content).await
    }

    async fn read_blob(&self, project: &ProjectId, digest: &str, size: u64) -> Result<Bytes> {
        self.read_blob_chunks(project, digest, size).await
    }

    async fn probe_write(&self) -> Result<()> {
        self.probe().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_errors_are_rejections() {
        let e = |text: &str| clickhouse::error::Error::BadResponse(text.to_owned());
        let bad = e(
            "Code: 27. DB::Exception: Cannot parse input: expected '\\t'. (CANNOT_PARSE_INPUT_ASSERTION_FAILED)",
        );
        assert_eq!(error_code(&bad), Some(27));
        assert!(matches!(insert_error(bad), StoreError::Rejected(_)));
        let transient =
            e("Code: 241. DB::Exception: Memory limit exceeded. (MEMORY_LIMIT_EXCEEDED)");
        assert!(matches!(insert_error(transient), StoreError::Backend(_)));
        assert!(matches!(insert_error(clickhouse::error::Error::TimedOut), StoreError::Backend(_)));
    }

    #[test]
    fn versions_increase() {
        let mut last = next_version();
        for _ in 0..10_000 {
            let v = next_version();
            assert!(v > last);
            last = v;
        }
    }
}
