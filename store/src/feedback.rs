//! Feedback: reactions, notes and scores attached to calls and objects by their refs.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::feedback::{FeedbackQuery, NewFeedback, StoredFeedback};

use crate::Result;

#[async_trait]
pub trait FeedbackStore: Send + Sync {
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
}
