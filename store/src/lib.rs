//! Storage behind one interface per resource. The embedded backend is SQLite; the distributed
//! backend is ClickHouse. Each resource (calls, objects, tags and aliases, annotation queues,
//! files, tables, feedback, costs, threads, projects, project settings, keys, blobs, OTLP log
//! records) has its own trait in a module named for it; [`Store`] is the
//! sum of them, so a server holds one `Arc<dyn Store>` while code that needs one resource can
//! ask for that trait alone. The traits speak in validated proto types (call parts in, calls out;
//! content-addressed objects and files), never in SQL, so a backend is free to lay out its
//! tables for its own engine.
//!
//! Callers bring the traits into scope with `use heddle_store::prelude::*`.

pub mod annotation_queues;
pub mod blobs;
pub mod calls;
pub mod composite;
pub mod costs;
pub mod feedback;
pub mod files;
pub mod health;
pub mod keys;
pub mod objects;
pub mod otel_logs;
pub mod project_settings;
pub mod projects;
pub mod tables;
pub mod tags;
pub mod threads;

#[cfg(feature = "clickhouse")]
pub mod clickhouse;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use self::annotation_queues::{Added, AnnotationQueueStore, Progress};
pub use self::blobs::BlobStore;
pub use self::calls::{CallStore, CallStream};
pub use self::composite::Composite;
pub use self::costs::CostStore;
pub use self::feedback::FeedbackStore;
pub use self::files::FileStore;
pub use self::health::Health;
pub use self::keys::{KEY_ID_LEN, KeyInfo, KeyRecord, KeyStore, key_id, parse_key_id};
pub use self::objects::{NewObject, ObjectStore};
pub use self::otel_logs::OtelLogStore;
pub use self::project_settings::{ProjectSettingsStore, Purged};
pub use self::projects::{ProjectInfo, ProjectStore, StorageSizes};
pub use self::tables::{NewTable, StoredRow, TableSlice, TableStore};
pub use self::tags::{Labels, TagStore, VersionKey};
pub use self::threads::ThreadStore;

/// Every resource trait and [`Store`], for `use heddle_store::prelude::*`.
pub mod prelude {
    pub use crate::{
        AnnotationQueueStore, BlobStore, CallStore, CostStore, FeedbackStore, FileStore, Health,
        KeyStore, ObjectStore, OtelLogStore, ProjectSettingsStore, ProjectStore, Store, TableStore,
        TagStore, ThreadStore,
    };
}

/// A store of every resource: what a server runs on. Implemented by anything that implements
/// each resource trait.
pub trait Store:
    CallStore
    + ObjectStore
    + TagStore
    + AnnotationQueueStore
    + FileStore
    + TableStore
    + FeedbackStore
    + CostStore
    + ThreadStore
    + ProjectStore
    + ProjectSettingsStore
    + KeyStore
    + BlobStore
    + OtelLogStore
    + Health
    + 'static
{
}

impl<T> Store for T where
    T: CallStore
        + ObjectStore
        + TagStore
        + AnnotationQueueStore
        + FileStore
        + TableStore
        + FeedbackStore
        + CostStore
        + ThreadStore
        + ProjectStore
        + ProjectSettingsStore
        + KeyStore
        + BlobStore
        + OtelLogStore
        + Health
        + ?Sized
        + 'static
{
}

/// The error a backend hands up: its own error type (a `rusqlite` or `clickhouse` error, ...),
/// kept whole so that logs can walk its chain of sources.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    /// The thing existed but was deleted; clients treat this 404 as authoritative.
    #[error("{what} was deleted")]
    Deleted { what: String, deleted_at: heddle_proto::time::Micros },
    /// The request contradicts what is stored (e.g. an object version of another class).
    #[error("{0}")]
    Invalid(String),
    /// The write queue is full: shed load instead of growing memory.
    #[error("storage is overloaded, retry later")]
    Overloaded,
    /// The backend refused the data itself (not a transient failure): retrying the same data
    /// cannot succeed, so a pipeline must isolate it rather than retry forever.
    #[error("storage rejected the data: {0}")]
    Rejected(#[source] BoxError),
    /// The backend failed (down, out of resources, a broken invariant): a server error.
    #[error("storage error: {0}")]
    Backend(#[source] BoxError),
}

impl StoreError {
    /// A backend error carrying `e` as its source.
    pub fn backend(e: impl Into<BoxError>) -> StoreError {
        StoreError::Backend(e.into())
    }

    /// This error and each of its sources, joined with `": "`, skipping a source whose text
    /// the previous one already shows. For logs that print one string.
    pub fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(e) = source {
            let text = e.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            source = e.source();
        }
        out
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused")]
    struct Refused;

    #[derive(Debug, thiserror::Error)]
    #[error("sending the insert")]
    struct Sending(#[source] Refused);

    #[test]
    fn backend_errors_keep_their_source() {
        let e = StoreError::backend(Sending(Refused));
        assert_eq!(e.to_string(), "storage error: sending the insert");
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.downcast_ref::<Sending>().is_some());
        assert_eq!(e.chain(), "storage error: sending the insert: connection refused");
        // Text-only errors still convert (`"...".into()`), with no chain beyond themselves.
        let plain = StoreError::Backend("write job panicked".into());
        assert_eq!(plain.chain(), "storage error: write job panicked");
    }
}
