//! Project settings (retention, sensitive data, ingest sampling: docs/api/project-settings.md)
//! and the retention purge they drive (docs/storage.md#retention).
//!
//! Settings are stored one row per `(project, setting)`, so concurrent updates of different
//! settings never undo each other. The purge deletes a project's expired data in batches of at
//! most `limit` rows per statement; [`purge_expired_everywhere`] runs it for every project with
//! a retention, at a time the caller chooses (an injectable "now").

use std::time::Duration;

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::project_settings::{ProjectSetting, ProjectSettings, retention_cutoff};
use heddle_proto::time::Micros;

use crate::Result;

/// What one purge batch deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub calls: u64,
    pub feedback: u64,
    pub files: u64,
}

impl Purged {
    pub fn add(&mut self, other: Purged) {
        self.calls += other.calls;
        self.feedback += other.feedback;
        self.files += other.files;
    }

    /// Whether a batch of `limit` may have left more to delete.
    fn maybe_more(&self, limit: u64) -> bool {
        self.calls >= limit || self.feedback >= limit || self.files >= limit
    }
}

#[async_trait]
pub trait ProjectSettingsStore: Send + Sync {
    /// The project's settings; defaults for a project never configured.
    async fn project_settings(&self, project: &ProjectId) -> Result<ProjectSettings>;

    /// Stores one setting of the project (the others stay).
    async fn set_project_setting(&self, project: &ProjectId, setting: ProjectSetting)
    -> Result<()>;

    /// Every project with a retention, and its days.
    async fn retention_projects(&self) -> Result<Vec<(ProjectId, i64)>>;

    /// Deletes at most `limit` calls (started before `cutoff`), at most `limit` feedback rows
    /// (created before it) and at most `limit` files (created before it and named by no object
    /// version, table row or stored call of the project) of `project`.
    async fn purge_expired(
        &self,
        project: &ProjectId,
        cutoff: Micros,
        limit: u64,
    ) -> Result<Purged>;
}

/// Rows one purge statement deletes at most: small, so that on SQLite a batch is a short job on
/// the writer between ingest's commits.
pub const PURGE_BATCH: u64 = 500;

/// The pause between two purge batches, leaving the writer to ingest.
pub const PURGE_PAUSE: Duration = Duration::from_millis(20);

/// Purges every project's data older than its retention as of `now`, in batches of `limit`
/// separated by `pause`. Returns what was deleted. A project whose purge fails is logged and
/// skipped (the next run tries again).
pub async fn purge_expired_everywhere(
    store: &dyn ProjectSettingsStore,
    now: Micros,
    limit: u64,
    pause: Duration,
) -> Result<Purged> {
    let mut total = Purged::default();
    for (project, days) in store.retention_projects().await? {
        let cutoff = retention_cutoff(now, days);
        loop {
            match store.purge_expired(&project, cutoff, limit).await {
                Ok(purged) => {
                    total.add(purged);
                    if !purged.maybe_more(limit) {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(%project, error = %e.chain(), "retention purge failed");
                    break;
                }
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }
    Ok(total)
}
