//! Annotation queues on ClickHouse (migration 11): append-only like the other tables. A queue
//! is its newest row by `row_version` (updates and deletes write it again); an item's id is
//! derived from its queue and call, so a repeated add writes the same item, which reads take
//! once; an annotator's state on an item is their newest progress row. Writes of one queue take
//! a lock (the object lock, keyed `queue:<id>`, which no object name can be) so that a check
//! and the write it allows are not interleaved with another in this process.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::annotation_queues::{
    AnnotationState, NewItem, NewQueue, Queue, QueueChanges, QueueItem, QueueSortField, QueueStats,
    QueuesQuery, check_transition, item_id,
};
use heddle_proto::limits::MAX_QUEUE_ITEMS;
use heddle_proto::time::Micros;
use heddle_ql::Direction;
use serde::{Deserialize, Serialize};

use super::sql::{Param, Sql, paging};
use super::{ClickHouseStore, backend, next_version};
use crate::{Added, AnnotationQueueStore, Progress, Result, StoreError};

#[derive(Debug, Row, Serialize)]
struct QueueRow {
    project_id: String,
    id: String,
    name: String,
    description: String,
    scorer_refs: Vec<String>,
    created_at: i64,
    created_by: String,
    updated_at: i64,
    deleted_at: Option<i64>,
    row_version: u64,
}

#[derive(Debug, Row, Deserialize)]
struct QueueOut {
    id: String,
    name: String,
    description: String,
    scorer_refs: Vec<String>,
    created_us: i64,
    created_by: String,
    updated_us: i64,
    deleted_us: Option<i64>,
}

#[derive(Debug, Row, Serialize)]
struct ItemRow {
    project_id: String,
    queue_id: String,
    id: String,
    call_id: String,
    call_started_at: i64,
    call_ended_at: Option<i64>,
    call_op_name: String,
    call_trace_id: String,
    display_fields: Vec<String>,
    added_by: Option<String>,
    created_at: i64,
    created_by: String,
}

/// An item as `select_items` reads it.
#[derive(Debug, Row, Deserialize)]
struct ItemOut {
    queue_id: String,
    id: String,
    call_id: String,
    call_started_us: i64,
    call_ended_us: Option<i64>,
    call_op_name: String,
    call_trace_id: String,
    display_fields: Vec<String>,
    added_by: Option<String>,
    created_us: i64,
    created_by: String,
}

#[derive(Debug, Row, Serialize)]
struct ProgressRow {
    project_id: String,
    queue_id: String,
    item_id: String,
    annotator: String,
    state: String,
    updated_at: i64,
    row_version: u64,
}

#[derive(Debug, Row, Deserialize)]
struct ProgressOut {
    item_id: String,
    annotator: String,
    state: String,
    updated_us: i64,
}

#[derive(Debug, Row, Deserialize)]
struct CountRow {
    queue_id: String,
    n: u64,
}

/// The project's queues (one, or all), newest row each, live ones only, in `QueueOut`'s
/// columns; a condition on them may follow.
fn live_queues(project: &str, id: Option<&str>) -> Sql {
    let mut sql = Sql::new(
        "SELECT id, q.1 AS name, q.2 AS description, q.3 AS scorer_refs, q.4 AS created_us,
                q.5 AS created_by, q.6 AS updated_us, q.7 AS deleted_us
         FROM (SELECT id, argMax(tuple(name, description, scorer_refs,
                   toUnixTimestamp64Micro(created_at), created_by,
                   toUnixTimestamp64Micro(updated_at), toUnixTimestamp64Micro(deleted_at)),
                   row_version) AS q
               FROM annotation_queues WHERE project_id = ",
    );
    sql.bind_str(project);
    if let Some(id) = id {
        sql.push(" AND id = ").bind_str(id);
    }
    sql.push(" GROUP BY id) WHERE deleted_us IS NULL");
    sql
}

fn select_queues(q: &QueuesQuery) -> Sql {
    let mut sql = live_queues(q.project.as_str(), None);
    if let Some(name) = &q.name {
        sql.push(" AND positionCaseInsensitiveUTF8(name, ").bind_str(name).push(") > 0");
    }
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in q.sort.iter().enumerate() {
        sql.push(if i > 0 { ", " } else { "" }).push(match field {
            QueueSortField::Id => "id",
            QueueSortField::Name => "name",
            QueueSortField::CreatedAt => "created_us",
            QueueSortField::UpdatedAt => "updated_us",
        });
        sql.push(if *dir == Direction::Desc { " DESC" } else { " ASC" });
    }
    paging(&mut sql, q.limit, q.offset);
    sql
}

/// The items of a queue, each once (`item_id` makes a repeated add the same row).
fn select_items(project: &str, queue_id: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT queue_id, id, call_id, toUnixTimestamp64Micro(call_started_at) AS call_started_us,
                toUnixTimestamp64Micro(call_ended_at) AS call_ended_us, call_op_name,
                call_trace_id, display_fields, added_by,
                toUnixTimestamp64Micro(created_at) AS created_us, created_by
         FROM annotation_queue_items WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND queue_id = ").bind_str(queue_id);
    sql.push(" ORDER BY id, created_us LIMIT 1 BY id");
    sql
}

/// Each annotator's current state on the queue's items (or on one item of one annotator).
fn select_progress(project: &str, queue_id: &str, one: Option<(&str, &str)>) -> Sql {
    let mut sql = Sql::new(
        "SELECT item_id, annotator, argMax(state, row_version) AS state,
                toUnixTimestamp64Micro(argMax(updated_at, row_version)) AS updated_us
         FROM annotation_queue_progress WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND queue_id = ").bind_str(queue_id);
    if let Some((item, annotator)) = one {
        sql.push(" AND item_id = ").bind_str(item).push(" AND annotator = ").bind_str(annotator);
    }
    sql.push(" GROUP BY item_id, annotator");
    sql
}

/// Items per queue, and items done (completed or skipped) by anyone per queue.
fn select_counts(project: &str, queue_ids: &[String], done: bool) -> Sql {
    let mut sql = Sql::new(if done {
        "SELECT queue_id, uniqExact(item_id) AS n FROM (SELECT queue_id, item_id,
             argMax(state, row_version) AS s FROM annotation_queue_progress WHERE project_id = "
    } else {
        "SELECT queue_id, uniqExact(id) AS n FROM annotation_queue_items WHERE project_id = "
    });
    sql.bind_str(project).push(" AND queue_id IN ").bind(Param::StrList(queue_ids.to_vec()));
    sql.push(if done {
        " GROUP BY queue_id, item_id, annotator) WHERE s IN ('completed', 'skipped') GROUP BY queue_id"
    } else {
        " GROUP BY queue_id"
    });
    sql
}

fn to_queue(project: &ProjectId, r: QueueOut) -> Queue {
    Queue {
        id: r.id,
        project_id: project.clone(),
        name: r.name,
        description: r.description,
        scorer_refs: r.scorer_refs,
        created_at: Micros(r.created_us),
        created_by: r.created_by,
        updated_at: Micros(r.updated_us),
        deleted_at: r.deleted_us.map(Micros),
    }
}

fn queue_row(q: &Queue) -> QueueRow {
    QueueRow {
        project_id: q.project_id.as_str().to_owned(),
        id: q.id.clone(),
        name: q.name.clone(),
        description: q.description.clone(),
        scorer_refs: q.scorer_refs.clone(),
        created_at: q.created_at.0,
        created_by: q.created_by.clone(),
        updated_at: q.updated_at.0,
        deleted_at: q.deleted_at.map(|d| d.0),
        row_version: next_version(),
    }
}

fn lock_key(queue_id: &str) -> String {
    format!("queue:{queue_id}")
}

impl ClickHouseStore {
    async fn live_queue(&self, project: &ProjectId, id: &str) -> Result<Option<Queue>> {
        let row: Option<QueueOut> = live_queues(project.as_str(), Some(id))
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        Ok(row.map(|r| to_queue(project, r)))
    }

    async fn counts(
        &self,
        project: &str,
        ids: &[String],
        done: bool,
    ) -> Result<HashMap<String, u64>> {
        let rows: Vec<CountRow> = select_counts(project, ids, done)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        Ok(rows.into_iter().map(|r| (r.queue_id, r.n)).collect())
    }
}

#[async_trait]
impl AnnotationQueueStore for ClickHouseStore {
    async fn create_queue(&self, q: NewQueue) -> Result<()> {
        let queue = Queue {
            id: q.id,
            project_id: q.project,
            name: q.name,
            description: q.description,
            scorer_refs: q.scorer_refs,
            created_at: q.created_at,
            created_by: q.created_by,
            updated_at: q.created_at,
            deleted_at: None,
        };
        self.insert::<QueueRow>("annotation_queues", &[queue_row(&queue)]).await
    }

    async fn read_queue(&self, project: &ProjectId, id: &str) -> Result<Option<Queue>> {
        self.live_queue(project, id).await
    }

    async fn query_queues(&self, q: QueuesQuery) -> Result<Vec<Queue>> {
        let rows: Vec<QueueOut> =
            select_queues(&q).query(&self.client).fetch_all().await.map_err(backend)?;
        Ok(rows.into_iter().map(|r| to_queue(&q.project, r)).collect())
    }

    async fn update_queue(
        &self,
        project: &ProjectId,
        id: &str,
        changes: QueueChanges,
        now: Micros,
    ) -> Result<Option<Queue>> {
        let _guard = self.object_lock(project, &lock_key(id)).lock().await;
        let Some(mut q) = self.live_queue(project, id).await? else { return Ok(None) };
        changes.apply(&mut q, now);
        self.insert::<QueueRow>("annotation_queues", &[queue_row(&q)]).await?;
        Ok(Some(q))
    }

    async fn delete_queue(
        &self,
        project: &ProjectId,
        id: &str,
        now: Micros,
    ) -> Result<Option<Queue>> {
        let _guard = self.object_lock(project, &lock_key(id)).lock().await;
        let Some(mut q) = self.live_queue(project, id).await? else { return Ok(None) };
        q.deleted_at = Some(now);
        self.insert::<QueueRow>("annotation_queues", &[queue_row(&q)]).await?;
        Ok(Some(q))
    }

    async fn add_items(
        &self,
        project: &ProjectId,
        queue_id: &str,
        items: Vec<NewItem>,
        display_fields: &[String],
        added_by: &str,
        now: Micros,
    ) -> Result<Added> {
        let _guard = self.object_lock(project, &lock_key(queue_id)).lock().await;
        if self.live_queue(project, queue_id).await?.is_none() {
            return Err(StoreError::NotFound(format!("queue {queue_id} not found")));
        }
        let have: HashSet<String> =
            self.queue_items(project, queue_id).await?.into_iter().map(|i| i.id).collect();
        // A microsecond apart, so the items keep the request's order (the default).
        let rows: Vec<ItemRow> = items
            .iter()
            .enumerate()
            .map(|(i, it)| (i as i64, item_id(queue_id, &it.call_id), it))
            .filter(|(_, id, _)| !have.contains(id))
            .map(|(i, id, it)| ItemRow {
                project_id: project.as_str().to_owned(),
                queue_id: queue_id.to_owned(),
                id,
                call_id: it.call_id.clone(),
                call_started_at: it.call_started_at.0,
                call_ended_at: it.call_ended_at.map(|m| m.0),
                call_op_name: it.call_op_name.clone(),
                call_trace_id: it.call_trace_id.clone(),
                display_fields: display_fields.to_vec(),
                added_by: Some(added_by.to_owned()),
                created_at: now.0 + i,
                created_by: added_by.to_owned(),
            })
            .collect();
        if have.len() + rows.len() > MAX_QUEUE_ITEMS {
            return Err(StoreError::Invalid(format!(
                "a queue holds at most {MAX_QUEUE_ITEMS} items"
            )));
        }
        let added = rows.len() as u64;
        self.insert::<ItemRow>("annotation_queue_items", &rows).await?;
        Ok(Added { added, duplicates: items.len() as u64 - added })
    }

    async fn queue_items(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<QueueItem>> {
        let rows: Vec<ItemOut> = select_items(project.as_str(), queue_id)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        Ok(rows
            .into_iter()
            .map(|r| QueueItem {
                id: r.id,
                project_id: project.clone(),
                queue_id: r.queue_id,
                call_id: r.call_id,
                call_started_at: Micros(r.call_started_us),
                call_ended_at: r.call_ended_us.map(Micros),
                call_op_name: r.call_op_name,
                call_trace_id: r.call_trace_id,
                display_fields: r.display_fields,
                added_by: r.added_by,
                annotation_state: AnnotationState::Unstarted,
                annotator_user_id: None,
                created_at: Micros(r.created_us),
                created_by: r.created_by,
                updated_at: Micros(r.created_us),
                deleted_at: None,
                position_in_queue: None,
            })
            .collect())
    }

    async fn queue_progress(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<Progress>> {
        let rows: Vec<ProgressOut> = select_progress(project.as_str(), queue_id, None)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        rows.into_iter()
            .map(|r| {
                let state = AnnotationState::parse(&r.state)
                    .ok_or_else(|| backend(format!("stored annotation state {:?}", r.state)))?;
                Ok(Progress {
                    item_id: r.item_id,
                    annotator: r.annotator,
                    state,
                    updated_at: Micros(r.updated_us),
                })
            })
            .collect()
    }

    async fn queue_stats(
        &self,
        project: &ProjectId,
        queue_ids: &[String],
    ) -> Result<Vec<QueueStats>> {
        if queue_ids.is_empty() {
            return Ok(Vec::new());
        }
        let total = self.counts(project.as_str(), queue_ids, false).await?;
        let done = self.counts(project.as_str(), queue_ids, true).await?;
        Ok(queue_ids
            .iter()
            .map(|id| QueueStats {
                queue_id: id.clone(),
                total_items: total.get(id).copied().unwrap_or(0),
                completed_items: done.get(id).copied().unwrap_or(0),
            })
            .collect())
    }

    async fn set_progress(
        &self,
        project: &ProjectId,
        queue_id: &str,
        item_id: &str,
        annotator: &str,
        state: &str,
        now: Micros,
    ) -> Result<()> {
        let _guard = self.object_lock(project, &lock_key(queue_id)).lock().await;
        let p = project.as_str();
        if !self.queue_items(project, queue_id).await?.iter().any(|i| i.id == item_id) {
            return Err(StoreError::NotFound(format!(
                "item {item_id} not found in queue {queue_id}"
            )));
        }
        let current: Option<ProgressOut> = select_progress(p, queue_id, Some((item_id, annotator)))
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        let current = current.and_then(|c| AnnotationState::parse(&c.state));
        let new =
            check_transition(current, state).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let row = ProgressRow {
            project_id: p.to_owned(),
            queue_id: queue_id.to_owned(),
            item_id: item_id.to_owned(),
            annotator: annotator.to_owned(),
            state: new.as_str().to_owned(),
            updated_at: now.0,
            row_version: next_version(),
        };
        self.insert::<ProgressRow>("annotation_queue_progress", &[row]).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn queue_statements_bind_user_values() {
        let evil = "x'); DROP TABLE annotation_queues; --";
        let q: heddle_proto::annotation_queues::QueuesQueryReq = serde_json::from_value(json!({
            "project_id": "e/p", "name": evil, "limit": 2, "offset": 1,
            "sort_by": [{"field": "updated_at", "direction": "desc"}]
        }))
        .unwrap();
        let list = [evil.to_owned()];
        for sql in [
            live_queues(evil, Some(evil)),
            select_queues(&q.validate().unwrap()),
            select_items(evil, evil),
            select_progress(evil, evil, Some((evil, evil))),
            select_counts(evil, &list, true),
            select_counts(evil, &list, false),
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
    }
}
