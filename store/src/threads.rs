//! Threads: the conversations that turn calls form (semantics: [`heddle_proto::threads`]).

use async_trait::async_trait;
use heddle_proto::threads::{Thread, ThreadsQuery};

use crate::Result;

#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// The threads of the project's turn calls.
    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>>;
}
