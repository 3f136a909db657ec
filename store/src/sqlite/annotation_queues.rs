//! Annotation queues on SQLite: `annotation_queues`, `annotation_queue_items` and
//! `annotation_queue_progress` (migration 11). Every check and its write run in one writer job.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::annotation_queues::{
    AnnotationState, NewItem, NewQueue, Queue, QueueChanges, QueueItem, QueueSortField, QueueStats,
    QueuesQuery, check_transition, item_id,
};
use heddle_proto::limits::MAX_QUEUE_ITEMS;
use heddle_proto::time::Micros;
use heddle_ql::Direction;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::sql::Sql;
use super::writer::backend;
use crate::{Added, AnnotationQueueStore, Progress, Result, StoreError};

const QUEUE_COLUMNS: &str =
    "id, name, description, scorer_refs, created_at, created_by, updated_at, deleted_at";

const INSERT_QUEUE: &str = "INSERT INTO annotation_queues (project_id, id, name, description,
    scorer_refs, created_at, created_by, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6)";

const UPDATE_QUEUE: &str = "UPDATE annotation_queues SET name = ?3, description = ?4,
    scorer_refs = ?5, updated_at = ?6, deleted_at = ?7 WHERE project_id = ?1 AND id = ?2";

const ITEM_COLUMNS: &str = "id, queue_id, call_id, call_started_at, call_ended_at, call_op_name,
    call_trace_id, display_fields, added_by, created_at, created_by, updated_at";

const INSERT_ITEM: &str = "INSERT INTO annotation_queue_items (project_id, queue_id, id, call_id,
    call_started_at, call_ended_at, call_op_name, call_trace_id, display_fields, added_by,
    created_at, created_by, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?10, ?11) ON CONFLICT DO NOTHING";

const COUNT_ITEMS: &str =
    "SELECT count(*) FROM annotation_queue_items WHERE project_id = ?1 AND queue_id = ?2";

const ITEM_EXISTS: &str =
    "SELECT 1 FROM annotation_queue_items WHERE project_id = ?1 AND queue_id = ?2 AND id = ?3";

const PROGRESS: &str = "SELECT item_id, annotator, state, updated_at
FROM annotation_queue_progress WHERE project_id = ?1 AND queue_id = ?2";

const ANNOTATOR_STATE: &str = "SELECT state FROM annotation_queue_progress
WHERE project_id = ?1 AND queue_id = ?2 AND item_id = ?3 AND annotator = ?4";

const UPSERT_PROGRESS: &str = "INSERT INTO annotation_queue_progress (project_id, queue_id,
    item_id, annotator, state, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
ON CONFLICT (project_id, queue_id, item_id, annotator)
DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at";

/// Items and done items of one queue (done: completed or skipped by anyone).
const STATS: &str = "SELECT
    (SELECT count(*) FROM annotation_queue_items WHERE project_id = ?1 AND queue_id = ?2),
    (SELECT count(DISTINCT item_id) FROM annotation_queue_progress
     WHERE project_id = ?1 AND queue_id = ?2 AND state IN ('completed', 'skipped'))";

fn strings(text: String) -> rusqlite::Result<Vec<String>> {
    serde_json::from_str(&text).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))
}

fn row_to_queue(project: &ProjectId, r: &Row<'_>) -> rusqlite::Result<Queue> {
    Ok(Queue {
        id: r.get(0)?,
        project_id: project.clone(),
        name: r.get(1)?,
        description: r.get(2)?,
        scorer_refs: strings(r.get(3)?)?,
        created_at: Micros(r.get(4)?),
        created_by: r.get(5)?,
        updated_at: Micros(r.get(6)?),
        deleted_at: r.get::<_, Option<i64>>(7)?.map(Micros),
    })
}

fn row_to_item(project: &ProjectId, r: &Row<'_>) -> rusqlite::Result<QueueItem> {
    Ok(QueueItem {
        id: r.get(0)?,
        project_id: project.clone(),
        queue_id: r.get(1)?,
        call_id: r.get(2)?,
        call_started_at: Micros(r.get(3)?),
        call_ended_at: r.get::<_, Option<i64>>(4)?.map(Micros),
        call_op_name: r.get(5)?,
        call_trace_id: r.get(6)?,
        display_fields: strings(r.get(7)?)?,
        added_by: r.get(8)?,
        annotation_state: AnnotationState::Unstarted,
        annotator_user_id: None,
        created_at: Micros(r.get(9)?),
        created_by: r.get(10)?,
        updated_at: Micros(r.get(11)?),
        deleted_at: None,
        position_in_queue: None,
    })
}

fn live_queue(conn: &Connection, project: &ProjectId, id: &str) -> Result<Option<Queue>> {
    let sql = format!(
        "SELECT {QUEUE_COLUMNS} FROM annotation_queues
         WHERE project_id = ?1 AND id = ?2 AND deleted_at IS NULL"
    );
    conn.query_row(&sql, params![project.as_str(), id], |r| row_to_queue(project, r))
        .optional()
        .map_err(backend)
}

fn write_queue(conn: &Connection, q: &Queue) -> Result<()> {
    let refs = serde_json::to_string(&q.scorer_refs).map_err(backend)?;
    conn.execute(
        UPDATE_QUEUE,
        params![
            q.project_id.as_str(),
            q.id,
            q.name,
            q.description,
            refs,
            q.updated_at.0,
            q.deleted_at.map(|d| d.0)
        ],
    )
    .map_err(backend)?;
    Ok(())
}

/// `/annotation_queues/query`: live queues, name filter, sorted, paged.
fn select_queues(q: &QueuesQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ")
        .push(QUEUE_COLUMNS)
        .push(" FROM annotation_queues WHERE project_id = ")
        .bind(q.project.as_str().to_owned())
        .push(" AND deleted_at IS NULL");
    if let Some(name) = &q.name {
        // instr, not LIKE: the filter is a plain substring (no wildcards), case-insensitive.
        sql.push(" AND instr(lower(name), lower(").bind(name.clone()).push(")) > 0");
    }
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in q.sort.iter().enumerate() {
        sql.push(if i > 0 { ", " } else { "" }).push(match field {
            QueueSortField::Id => "id",
            QueueSortField::Name => "name",
            QueueSortField::CreatedAt => "created_at",
            QueueSortField::UpdatedAt => "updated_at",
        });
        sql.push(if *dir == Direction::Desc { " DESC" } else { " ASC" });
    }
    if q.limit.is_some() || q.offset > 0 {
        let limit = q.limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
        sql.push(" LIMIT ").bind(limit).push(" OFFSET ").bind(q.offset.min(i64::MAX as u64) as i64);
    }
    sql
}

#[async_trait]
impl AnnotationQueueStore for SqliteStore {
    async fn create_queue(&self, q: NewQueue) -> Result<()> {
        let refs = serde_json::to_string(&q.scorer_refs).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                conn.execute(
                    INSERT_QUEUE,
                    params![
                        q.project.as_str(),
                        q.id,
                        q.name,
                        q.description,
                        refs,
                        q.created_at.0,
                        q.created_by
                    ],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn read_queue(&self, project: &ProjectId, id: &str) -> Result<Option<Queue>> {
        let (project, id) = (project.clone(), id.to_owned());
        self.read(move |conn| live_queue(conn, &project, &id)).await
    }

    async fn query_queues(&self, q: QueuesQuery) -> Result<Vec<Queue>> {
        let statement = select_queues(&q);
        self.read(move |conn| {
            let mut st = conn.prepare(&statement.text).map_err(backend)?;
            st.query_map(rusqlite::params_from_iter(statement.params.iter()), |r| {
                row_to_queue(&q.project, r)
            })
            .and_then(|rows| rows.collect())
            .map_err(backend)
        })
        .await
    }

    async fn update_queue(
        &self,
        project: &ProjectId,
        id: &str,
        changes: QueueChanges,
        now: Micros,
    ) -> Result<Option<Queue>> {
        let (project, id) = (project.clone(), id.to_owned());
        self.writer
            .exec(move |conn| {
                let Some(mut q) = live_queue(conn, &project, &id)? else { return Ok(None) };
                changes.apply(&mut q, now);
                write_queue(conn, &q)?;
                Ok(Some(q))
            })
            .await
    }

    async fn delete_queue(
        &self,
        project: &ProjectId,
        id: &str,
        now: Micros,
    ) -> Result<Option<Queue>> {
        let (project, id) = (project.clone(), id.to_owned());
        self.writer
            .exec(move |conn| {
                let Some(mut q) = live_queue(conn, &project, &id)? else { return Ok(None) };
                q.deleted_at = Some(now);
                write_queue(conn, &q)?;
                Ok(Some(q))
            })
            .await
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
        let (project, queue_id, added_by) =
            (project.clone(), queue_id.to_owned(), added_by.to_owned());
        let fields = serde_json::to_string(display_fields).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                if live_queue(conn, &project, &queue_id)?.is_none() {
                    return Err(StoreError::NotFound(format!("queue {queue_id} not found")));
                }
                let mut added = 0u64;
                let mut st = conn.prepare_cached(INSERT_ITEM).map_err(backend)?;
                // A microsecond apart, so the items keep the request's order (the default).
                for (i, it) in items.iter().enumerate() {
                    added += st
                        .execute(params![
                            project.as_str(),
                            queue_id,
                            item_id(&queue_id, &it.call_id),
                            it.call_id,
                            it.call_started_at.0,
                            it.call_ended_at.map(|m| m.0),
                            it.call_op_name,
                            it.call_trace_id,
                            fields,
                            added_by,
                            now.0 + i as i64,
                        ])
                        .map_err(backend)? as u64;
                }
                let n: i64 = conn
                    .query_row(COUNT_ITEMS, params![project.as_str(), queue_id], |r| r.get(0))
                    .map_err(backend)?;
                if n as usize > MAX_QUEUE_ITEMS {
                    return Err(StoreError::Invalid(format!(
                        "a queue holds at most {MAX_QUEUE_ITEMS} items"
                    )));
                }
                Ok(Added { added, duplicates: items.len() as u64 - added })
            })
            .await
    }

    async fn queue_items(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<QueueItem>> {
        let (project, queue_id) = (project.clone(), queue_id.to_owned());
        self.read(move |conn| {
            let sql = format!(
                "SELECT {ITEM_COLUMNS} FROM annotation_queue_items
                 WHERE project_id = ?1 AND queue_id = ?2"
            );
            let mut st = conn.prepare_cached(&sql).map_err(backend)?;
            st.query_map(params![project.as_str(), queue_id], |r| row_to_item(&project, r))
                .and_then(|rows| rows.collect())
                .map_err(backend)
        })
        .await
    }

    async fn queue_progress(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<Progress>> {
        let (project, queue_id) = (project.as_str().to_owned(), queue_id.to_owned());
        self.read(move |conn| {
            let mut st = conn.prepare_cached(PROGRESS).map_err(backend)?;
            let rows = st
                .query_map(params![project, queue_id], |r| {
                    Ok((r.get::<_, String>(0)?, r.get(1)?, r.get::<_, String>(2)?, r.get(3)?))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)?;
            rows.into_iter()
                .map(|(item_id, annotator, state, at)| {
                    let state = AnnotationState::parse(&state)
                        .ok_or_else(|| backend(format!("stored annotation state {state:?}")))?;
                    Ok(Progress { item_id, annotator, state, updated_at: Micros(at) })
                })
                .collect()
        })
        .await
    }

    async fn queue_stats(
        &self,
        project: &ProjectId,
        queue_ids: &[String],
    ) -> Result<Vec<QueueStats>> {
        let (project, ids) = (project.as_str().to_owned(), queue_ids.to_vec());
        self.read(move |conn| {
            let mut st = conn.prepare_cached(STATS).map_err(backend)?;
            ids.into_iter()
                .map(|id| {
                    let (total, done): (i64, i64) = st
                        .query_row(params![project, id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .map_err(backend)?;
                    Ok(QueueStats {
                        queue_id: id,
                        total_items: total as u64,
                        completed_items: done as u64,
                    })
                })
                .collect()
        })
        .await
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
        let (p, q, i) = (project.as_str().to_owned(), queue_id.to_owned(), item_id.to_owned());
        let (who, state) = (annotator.to_owned(), state.to_owned());
        self.writer
            .exec(move |conn| {
                let exists = conn.query_row(ITEM_EXISTS, params![p, q, i], |_| Ok(())).optional();
                if exists.map_err(backend)?.is_none() {
                    return Err(StoreError::NotFound(format!("item {i} not found in queue {q}")));
                }
                let current: Option<String> = conn
                    .query_row(ANNOTATOR_STATE, params![p, q, i, who], |r| r.get(0))
                    .optional()
                    .map_err(backend)?;
                let current = current.as_deref().and_then(AnnotationState::parse);
                let new = check_transition(current, &state)
                    .map_err(|e| StoreError::Invalid(e.to_string()))?;
                conn.execute(UPSERT_PROGRESS, params![p, q, i, who, new.as_str(), now.0])
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn queue_listing_binds_user_values() {
        let evil = "x'); DROP TABLE annotation_queues; --";
        let q: heddle_proto::annotation_queues::QueuesQueryReq = serde_json::from_value(json!({
            "project_id": "e/p", "name": evil, "limit": 2, "offset": 1,
            "sort_by": [{"field": "name", "direction": "desc"}]
        }))
        .unwrap();
        let sql = select_queues(&q.validate().unwrap());
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        assert_eq!(sql.text.matches('?').count(), sql.params.len());
        assert!(sql.text.contains("ORDER BY name DESC, id ASC LIMIT ? OFFSET ?"), "{}", sql.text);
    }
}
