//! Whether the store accepts writes at all, apart from any one batch.

use async_trait::async_trait;

use crate::Result;

#[async_trait]
pub trait Health: Send + Sync {
    /// A tiny write that succeeds whenever the store accepts writes. The Kafka consumer uses it
    /// to tell a store that is down (keep retrying) from a batch that fails on its own (bisect).
    async fn probe_write(&self) -> Result<()>;
}
