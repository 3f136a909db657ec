//! Feedback on SQLite: one row per id in `feedback`. Its statements are rendered with the
//! query language's in [`super::compile`].

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::feedback::{FeedbackQuery, NewFeedback, StoredFeedback};
use heddle_proto::time::Micros;
use rusqlite::{Row, params};

use super::values::project_id;
use super::writer::backend;
use super::{SqliteStore, sql};
use crate::{FeedbackStore, Result};

/// Builds a feedback row from [`sql::FEEDBACK_COLUMNS`].
fn row_to_feedback(r: &Row<'_>) -> rusqlite::Result<StoredFeedback> {
    Ok(StoredFeedback {
        project: project_id(&r.get::<_, String>(0)?)?,
        id: r.get(1)?,
        weave_ref: r.get(2)?,
        feedback_type: r.get(3)?,
        creator: r.get(4)?,
        payload: r.get(5)?,
        created_at: Micros(r.get(6)?),
        wb_user_id: r.get(7)?,
        annotation_ref: r.get(8)?,
        runnable_ref: r.get(9)?,
        call_ref: r.get(10)?,
        trigger_ref: r.get(11)?,
        queue_id: r.get(12)?,
        extra: r.get(13)?,
    })
}

#[async_trait]
impl FeedbackStore for SqliteStore {
    async fn create_feedback(&self, items: Vec<NewFeedback>) -> Result<Vec<StoredFeedback>> {
        self.writer
            .exec(move |conn| {
                let mut insert = conn.prepare_cached(sql::INSERT_FEEDBACK).map_err(backend)?;
                let mut read =
                    conn.prepare_cached(&sql::select_feedback_by_id()).map_err(backend)?;
                let mut out = Vec::with_capacity(items.len());
                for f in &items {
                    insert
                        .execute(params![
                            f.project.as_str(),
                            f.id,
                            f.weave_ref,
                            f.feedback_type,
                            f.creator,
                            f.payload,
                            f.created_at.0,
                            f.wb_user_id,
                            f.annotation_ref,
                            f.runnable_ref,
                            f.call_ref,
                            f.trigger_ref,
                            f.queue_id,
                            f.extra,
                        ])
                        .map_err(backend)?;
                    // The stored row: this one, or the one an earlier send of the same id made.
                    out.push(
                        read.query_row(params![f.project.as_str(), f.id], row_to_feedback)
                            .map_err(backend)?,
                    );
                }
                Ok(out)
            })
            .await
    }

    async fn query_feedback(&self, q: FeedbackQuery) -> Result<(Vec<StoredFeedback>, u64)> {
        let (select, count) = (sql::select_feedback(&q), sql::count_feedback(&q));
        self.read(move |conn| {
            let mut st = conn.prepare(&select.text).map_err(backend)?;
            let rows = st
                .query_map(rusqlite::params_from_iter(select.params.iter()), row_to_feedback)
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)?;
            let total: i64 = conn
                .query_row(&count.text, rusqlite::params_from_iter(count.params.iter()), |r| {
                    r.get(0)
                })
                .map_err(backend)?;
            Ok((rows, total as u64))
        })
        .await
    }

    async fn purge_feedback(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        let project = project.clone();
        let ids = serde_json::to_string(ids).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                conn.execute(sql::PURGE_FEEDBACK, params![project.as_str(), ids])
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn feedback_for_refs(
        &self,
        project: &ProjectId,
        refs: &[String],
    ) -> Result<Vec<StoredFeedback>> {
        let project = project.clone();
        let refs = serde_json::to_string(refs).map_err(backend)?;
        self.read(move |conn| {
            let mut st = conn.prepare_cached(&sql::feedback_for_refs()).map_err(backend)?;
            st.query_map(params![project.as_str(), refs], row_to_feedback)
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)
        })
        .await
    }
}
