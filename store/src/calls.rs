//! Calls: written as parts (a start and an end half, upserted by `(project, id)`), read back
//! whole through the query language.

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallPart, CallsQuery};

use crate::Result;

/// Rows of a calls query, produced while the client reads them.
pub type CallStream = Pin<Box<dyn Stream<Item = Result<Call>> + Send>>;

#[async_trait]
pub trait CallStore: Send + Sync {
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
}
