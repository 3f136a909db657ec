//! Annotation queues (docs/api/annotation-queues.md): queues of calls for people to review,
//! their items (one per call and queue, the call's fields copied in when it is added) and each
//! annotator's progress on an item. Queues are soft-deleted.
//!
//! A queue holds at most `MAX_QUEUE_ITEMS` items, so listing its items reads them all and the
//! rules — an item's state, filters, order, position, paging — are applied here, once for
//! every backend ([`assemble_items`]).

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::annotation_queues::{
    AnnotationState, ItemsQuery, NewItem, NewQueue, Queue, QueueChanges, QueueItem, QueueStats,
    QueuesQuery, compare_items,
};
use heddle_proto::time::Micros;

use crate::Result;

/// What adding calls to a queue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    /// Calls that became items.
    pub added: u64,
    /// Calls that were items already.
    pub duplicates: u64,
}

/// One annotator's current state on one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub item_id: String,
    pub annotator: String,
    pub state: AnnotationState,
    pub updated_at: Micros,
}

#[async_trait]
pub trait AnnotationQueueStore: Send + Sync {
    async fn create_queue(&self, q: NewQueue) -> Result<()>;

    /// A live queue; `None` when it does not exist or was deleted.
    async fn read_queue(&self, project: &ProjectId, id: &str) -> Result<Option<Queue>>;

    /// The live queues matching `q`, sorted and paged.
    async fn query_queues(&self, q: QueuesQuery) -> Result<Vec<Queue>>;

    /// Applies `changes` to a live queue and returns it; `None` when there is none.
    async fn update_queue(
        &self,
        project: &ProjectId,
        id: &str,
        changes: QueueChanges,
        now: Micros,
    ) -> Result<Option<Queue>>;

    /// Soft-deletes a live queue and returns it as deleted; `None` when there is none.
    async fn delete_queue(
        &self,
        project: &ProjectId,
        id: &str,
        now: Micros,
    ) -> Result<Option<Queue>>;

    /// Adds the calls to a live queue (`NotFound` when there is none); calls already in it are
    /// counted as duplicates. `Invalid` when the queue would hold more than `MAX_QUEUE_ITEMS`.
    async fn add_items(
        &self,
        project: &ProjectId,
        queue_id: &str,
        items: Vec<NewItem>,
        display_fields: &[String],
        added_by: &str,
        now: Micros,
    ) -> Result<Added>;

    /// Every item of a queue, as added (state `unstarted`, no annotator, no position).
    async fn queue_items(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<QueueItem>>;

    /// Every annotator's current state on the items of a queue.
    async fn queue_progress(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<Progress>>;

    /// Items and done items (completed or skipped by anyone) of each listed queue, in order;
    /// zeros for a queue that does not exist.
    async fn queue_stats(
        &self,
        project: &ProjectId,
        queue_ids: &[String],
    ) -> Result<Vec<QueueStats>>;

    /// Sets `annotator`'s state on an item of a queue, checking the transition
    /// (`check_transition`; `Invalid` when refused); `NotFound` when the item is not in it.
    async fn set_progress(
        &self,
        project: &ProjectId,
        queue_id: &str,
        item_id: &str,
        annotator: &str,
        state: &str,
        now: Micros,
    ) -> Result<()>;

    /// A queue's items matching `q`, each with its state, sorted and paged.
    async fn query_items(&self, q: ItemsQuery) -> Result<Vec<QueueItem>> {
        let items = self.queue_items(&q.project, &q.queue_id).await?;
        let progress = self.queue_progress(&q.project, &q.queue_id).await?;
        Ok(assemble_items(&q, items, progress))
    }
}

/// Gives each item its state — that of the annotator who changed it last, `unstarted` while
/// nobody has — then orders the whole queue, numbers it (`position_in_queue`, 1-based, in the
/// whole queue whatever the filter), filters and pages.
pub fn assemble_items(
    q: &ItemsQuery,
    mut items: Vec<QueueItem>,
    progress: Vec<Progress>,
) -> Vec<QueueItem> {
    let mut latest: std::collections::HashMap<&str, &Progress> = Default::default();
    for p in &progress {
        let newer =
            |cur: &&Progress| (p.updated_at.0, &p.annotator) > (cur.updated_at.0, &cur.annotator);
        match latest.get(p.item_id.as_str()) {
            Some(cur) if !newer(cur) => {}
            _ => {
                latest.insert(&p.item_id, p);
            }
        }
    }
    for item in &mut items {
        if let Some(p) = latest.get(item.id.as_str()) {
            item.annotation_state = p.state;
            item.annotator_user_id = Some(p.annotator.clone());
        }
    }
    items.sort_by(|a, b| compare_items(&q.sort, a, b));
    items
        .into_iter()
        .enumerate()
        .filter(|(_, item)| q.matches(item))
        .skip(q.offset.min(usize::MAX as u64) as usize)
        .take(q.limit.map_or(usize::MAX, |l| l.min(usize::MAX as u64) as usize))
        .map(|(i, mut item)| {
            item.position_in_queue = q.include_position.then_some(i as u64 + 1);
            item
        })
        .collect()
}
