//! Storage behind one interface. The embedded backend is SQLite; the distributed backend
//! (ClickHouse) implements the same [`Store`] trait. The interface speaks in validated proto
//! types (call parts in, calls out; content-addressed objects and files), never in SQL, so a
//! backend is free to lay out its tables for its own engine.

use std::collections::HashMap;
use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallPart, CallsQuery};
use heddle_proto::costs::CostRecord;
use heddle_proto::feedback::{FeedbackQuery, NewFeedback, StoredFeedback};
use heddle_proto::objects::{DeletedVersion, ObjSchema, ObjectsDelete, ObjectsQuery, VersionSel};
use heddle_proto::tables::Row;
use heddle_proto::threads::{Thread, ThreadsQuery};
use heddle_proto::time::Micros;
use serde_json::value::RawValue;

pub mod blobs;
pub mod clickhouse;
pub mod files;
pub mod objects;
pub mod sqlite;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    /// The thing existed but was deleted; clients treat this 404 as authoritative.
    #[error("{what} was deleted")]
    Deleted { what: String, deleted_at: Micros },
    /// The request contradicts what is stored (e.g. an object version of another class).
    #[error("{0}")]
    Invalid(String),
    /// The write queue is full: shed load instead of growing memory.
    #[error("storage is overloaded, retry later")]
    Overloaded,
    /// The backend refused the data itself (not a transient failure): retrying the same data
    /// cannot succeed, so a pipeline must isolate it rather than retry forever.
    #[error("storage rejected the data: {0}")]
    Rejected(String),
    #[error("storage error: {0}")]
    Backend(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Rows of a calls query, produced while the client reads them.
pub type CallStream = Pin<Box<dyn Stream<Item = Result<Call>> + Send>>;

/// A new object version to store.
#[derive(Debug, Clone)]
pub struct NewObject {
    pub project: ProjectId,
    pub object_id: String,
    pub digest: String,
    /// Canonical-or-not JSON text of the value, stored verbatim.
    pub val: String,
    pub kind: &'static str,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
    pub wb_user_id: Option<String>,
}

/// A table to store: its digest over `row_digests`, and the rows it brings (content-addressed,
/// so rows already stored are skipped). Every digest in `row_digests` is either in `rows` or
/// already stored in the project.
#[derive(Debug, Clone)]
pub struct NewTable {
    pub project: ProjectId,
    pub digest: String,
    pub row_digests: Vec<String>,
    pub rows: Vec<Row>,
}

/// A page of a table's row list: the table's row count and the digests at
/// `[offset, offset + limit)`, in table order.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSlice {
    pub count: u64,
    pub row_digests: Vec<String>,
}

/// A stored row: its size, and its value when asked for.
#[derive(Debug)]
pub struct StoredRow {
    pub size_bytes: u64,
    pub val: Option<Box<RawValue>>,
}

/// Who an API key belongs to. `entity: None` is an admin key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub entity: Option<String>,
}

/// An API key as `heddle keys list` shows it: never the key, nor its full hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// [`key_id`] of the key's hash.
    pub id: String,
    /// `None` for an admin key.
    pub entity: Option<String>,
    pub created_at: Micros,
    /// When the key was first revoked; `None` while it works.
    pub revoked_at: Option<Micros>,
}

/// A project as the web UI's project list shows it ([`Store::list_projects`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectInfo {
    pub project: ProjectId,
    /// Live calls (roots and children).
    pub calls: u64,
    /// The newest call's start.
    pub last_call: Micros,
}

/// Hex characters of a key's hash that make its id.
pub const KEY_ID_LEN: usize = 12;

/// A key's stable, non-secret id: the first [`KEY_ID_LEN`] hex characters of its SHA-256 hash.
/// Keys are 256-bit random secrets, so this much of their hash tells nothing about them, and 48
/// bits keep the ids of even many thousands of keys apart (a clash is refused on revocation).
pub fn key_id(key_hash: &str) -> &str {
    &key_hash[..KEY_ID_LEN.min(key_hash.len())]
}

/// `id` if it has the shape of a key id (any case; returned in lowercase), else
/// [`StoreError::Invalid`].
pub fn parse_key_id(id: &str) -> Result<String> {
    if id.len() == KEY_ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id.to_ascii_lowercase())
    } else {
        Err(StoreError::Invalid(format!(
            "{id:?} is not an API key id ({KEY_ID_LEN} hex characters, as `heddle keys list` shows)"
        )))
    }
}

/// The one key among `hashes` (those starting with `id`) that a revocation of `id` means.
pub(crate) fn only_key(id: &str, hashes: &[String]) -> Result<String> {
    match hashes {
        [one] => Ok(one.clone()),
        [] => Err(StoreError::NotFound(format!("no API key with id {id}"))),
        _ => Err(StoreError::Invalid(format!(
            "API key id {id} names {} keys; none was revoked",
            hashes.len()
        ))),
    }
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies call parts as upserts by `(project, id)`. Returns once they are durable.
    async fn apply_call_parts(&self, parts: Vec<CallPart>) -> Result<()>;

    /// Like `apply_call_parts`, for a batch that may be applied again verbatim (a pipeline
    /// retrying after a crash): backends that can deduplicate whole inserts use `token` to store
    /// the batch once. Either way, parts are idempotent, so a repeat is never visible.
    async fn apply_call_parts_once(&self, parts: Vec<CallPart>, token: &str) -> Result<()> {
        let _ = token;
        self.apply_call_parts(parts).await
    }

    /// Sets a call's display name (`""` clears it). Applies even when the call has not arrived
    /// yet, and wins over the display name of parts that arrive later.
    async fn set_call_display_name(&self, project: &ProjectId, id: &str, name: &str) -> Result<()>;

    /// Soft-deletes the calls and all their descendants; returns how many were deleted.
    async fn delete_calls(&self, project: &ProjectId, ids: &[String]) -> Result<u64>;

    /// Streams the calls matching `q`. Errors in the query itself surface as the first item.
    async fn query_calls(&self, q: CallsQuery) -> Result<CallStream>;

    /// Counts the calls `query_calls` would return without `limit`/`offset`, capped at `limit`.
    async fn count_calls(&self, q: CallsQuery) -> Result<u64>;

    /// Stores an object version if `(project, object_id, digest)` is new (or revives a deleted
    /// one, keeping its version index); a no-op when it is live. A version whose base class
    /// differs from the object's live versions is [`StoreError::Invalid`]
    /// ([`objects::check_class`]).
    async fn create_object(&self, obj: NewObject) -> Result<()>;

    async fn read_object(
        &self,
        project: &ProjectId,
        object_id: &str,
        version: &VersionSel,
        metadata_only: bool,
    ) -> Result<ObjSchema>;

    /// The live object versions matching `q`, with `is_latest` computed over live versions.
    async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>>;

    /// Soft-deletes the versions `d` names ([`objects::resolve_deletion`]); returns them.
    async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>>;

    /// Stores file content under its digest, in chunks ([`files`]); idempotent.
    async fn create_file(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()>;

    async fn read_file(&self, project: &ProjectId, digest: &str) -> Result<Bytes>;

    /// Total bytes of the project's files (each digest once).
    async fn files_size(&self, project: &ProjectId) -> Result<u64>;
    /// Stores a table and the rows it brings; a no-op for a table already stored. Rows are
    /// stored before the table, so a visible table always has its rows.
    async fn create_table(&self, table: NewTable) -> Result<()>;

    /// The row digests of table `digest` at `[offset, offset + limit)` (all from `offset` when
    /// `limit` is None) and its row count; `None` when the project has no such table.
    async fn table_slice(
        &self,
        project: &ProjectId,
        digest: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Option<TableSlice>>;

    /// The stored rows among `digests` (missing ones are absent from the map), with their
    /// values when `with_val`.
    async fn read_rows(
        &self,
        project: &ProjectId,
        digests: &[String],
        with_val: bool,
    ) -> Result<HashMap<String, StoredRow>>;

    /// Stores feedback rows; an id already stored in the project is left as it is (a retried
    /// batch changes nothing). Returns the stored row of every item, in order.
    async fn create_feedback(&self, items: Vec<NewFeedback>) -> Result<Vec<StoredFeedback>>;

    /// The feedback rows matching `q` (sorted, paged) and how many match without paging.
    async fn query_feedback(&self, q: FeedbackQuery) -> Result<(Vec<StoredFeedback>, u64)>;

    /// Hard-deletes the project's feedback rows with these ids.
    async fn purge_feedback(&self, project: &ProjectId, ids: &[String]) -> Result<()>;

    /// The feedback rows whose `weave_ref` is one of `refs`, oldest first (per ref).
    async fn feedback_for_refs(
        &self,
        project: &ProjectId,
        refs: &[String],
    ) -> Result<Vec<StoredFeedback>>;

    // --- costs and threads (CONTRACT §6, §13) -------------------------------------------------

    /// Stores new prices (fresh ids).
    async fn create_costs(&self, costs: Vec<CostRecord>) -> Result<()>;

    /// Every live price of the project. Prices are few per project, so filtering, sorting and
    /// paging happen in [`heddle_proto::costs`], the same for every backend.
    async fn project_costs(&self, project: &ProjectId) -> Result<Vec<CostRecord>>;

    /// Deletes the project's prices with these ids (ids of other projects are untouched).
    async fn purge_costs(&self, project: &ProjectId, ids: &[String]) -> Result<()>;

    /// The threads of the project's turn calls (semantics: [`heddle_proto::threads`]).
    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>>;

    // --- projects (the web UI's project list) --------------------------------------------

    /// The projects that hold calls, most recently active first, at most `limit`; only those
    /// of `entity` when given. Backends answer from their calls index without reading calls.
    async fn list_projects(&self, entity: Option<&str>, limit: u64) -> Result<Vec<ProjectInfo>> {
        let _ = (entity, limit);
        Err(StoreError::Backend("this store cannot list projects".into()))
    }

    // --- keys -------------------------------------------------------------------------------

    async fn create_key(&self, key_hash: &str, entity: Option<&str>) -> Result<()>;

    /// Who the key with this hash belongs to; `None` when it is unknown or revoked.
    async fn lookup_key(&self, key_hash: &str) -> Result<Option<KeyRecord>>;

    /// Whether any unrevoked admin key exists (so `serve` knows whether to generate one).
    async fn has_admin_key(&self) -> Result<bool>;

    /// Every key, revoked ones too, oldest first.
    async fn list_keys(&self) -> Result<Vec<KeyInfo>>;

    /// Revokes the key with id `id` ([`key_id`]) and returns it. Idempotent: revoking a revoked
    /// key changes nothing and returns its first revocation time. [`StoreError::NotFound`] when
    /// no key has this id, [`StoreError::Invalid`] when `id` is not a key id.
    async fn revoke_key(&self, id: &str) -> Result<KeyInfo>;

    // --- blobs of the distributed write path (docs/distributed.md) ---------------------------

    /// Stores `content` as the project's blob `digest`, the [`blobs`] digest of the bytes, so a
    /// repeat stores the same bytes again (idempotent). Returns once the blob is durable and
    /// complete: only then may a record referencing it be produced.
    async fn put_blob(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()>;

    /// The project's blob `digest`, `size` bytes long; [`StoreError::NotFound`] when absent.
    async fn read_blob(&self, project: &ProjectId, digest: &str, size: u64) -> Result<Bytes>;

    /// A tiny write that succeeds whenever the store accepts writes. The Kafka consumer uses it
    /// to tell a store that is down (keep retrying) from a batch that fails on its own (bisect).
    async fn probe_write(&self) -> Result<()>;
}
