//! Feedback on ClickHouse: rows in `feedback` (a ReplacingMergeTree by id, read `FINAL`). Its
//! statements are rendered with the query language's in [`super::compile`].

use std::collections::HashMap;

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::feedback::{FeedbackQuery, NewFeedback, StoredFeedback};
use heddle_proto::time::Micros;
use heddle_proto::{ProjectId, ProtoError};
use serde::{Deserialize, Serialize};

use super::json::index_json;
use super::sql;
use super::{ClickHouseStore, ROWS_PER_LOOKUP, backend};
use crate::{FeedbackStore, Result};

/// A row of `feedback`, as inserted.
#[derive(Debug, Row, Serialize)]
struct FeedbackRow {
    pub project_id: String,
    pub id: String,
    pub weave_ref: String,
    pub feedback_type: String,
    pub creator: Option<String>,
    pub payload: String,
    pub payload_q: String,
    pub created_at: i64,
    pub wb_user_id: Option<String>,
    pub annotation_ref: Option<String>,
    pub runnable_ref: Option<String>,
    pub call_ref: Option<String>,
    pub trigger_ref: Option<String>,
    pub queue_id: Option<String>,
    pub extra: String,
}

impl FeedbackRow {
    fn from_new(f: NewFeedback) -> FeedbackRow {
        FeedbackRow {
            project_id: f.project.as_str().to_owned(),
            payload_q: index_json(&f.payload).q,
            id: f.id,
            weave_ref: f.weave_ref,
            feedback_type: f.feedback_type,
            creator: f.creator,
            payload: f.payload,
            created_at: f.created_at.0,
            wb_user_id: Some(f.wb_user_id),
            annotation_ref: f.annotation_ref,
            runnable_ref: f.runnable_ref,
            call_ref: f.call_ref,
            trigger_ref: f.trigger_ref,
            queue_id: f.queue_id,
            extra: f.extra,
        }
    }
}

/// A feedback row as the feedback statements of [`super::compile`] select it.
#[derive(Debug, Row, Deserialize)]
struct FeedbackReadRow {
    pub project_id: String,
    pub id: String,
    pub weave_ref: String,
    pub feedback_type: String,
    pub creator: Option<String>,
    pub payload: String,
    pub created_us: i64,
    pub wb_user_id: Option<String>,
    pub annotation_ref: Option<String>,
    pub runnable_ref: Option<String>,
    pub call_ref: Option<String>,
    pub trigger_ref: Option<String>,
    pub queue_id: Option<String>,
    pub extra: String,
}

impl FeedbackReadRow {
    fn into_stored(self) -> Result<StoredFeedback, ProtoError> {
        Ok(StoredFeedback {
            project: ProjectId::parse(&self.project_id)?,
            id: self.id,
            weave_ref: self.weave_ref,
            feedback_type: self.feedback_type,
            creator: self.creator,
            payload: self.payload,
            created_at: Micros(self.created_us),
            wb_user_id: self.wb_user_id,
            annotation_ref: self.annotation_ref,
            runnable_ref: self.runnable_ref,
            call_ref: self.call_ref,
            trigger_ref: self.trigger_ref,
            queue_id: self.queue_id,
            extra: self.extra,
        })
    }
}

#[async_trait]
impl FeedbackStore for ClickHouseStore {
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
}
