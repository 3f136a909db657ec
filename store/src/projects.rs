//! Projects: which projects hold calls, for the web UI's project list (docs/ui.md), and how
//! much a project stores (`/project/stats`, docs/api/service.md#project-stats). Projects are not
//! stored as such; backends derive both from the resources' own tables.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;

use crate::Result;

/// A project as the web UI's project list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectInfo {
    pub project: ProjectId,
    /// Live calls (roots and children).
    pub calls: u64,
    /// The newest call's start.
    pub last_call: Micros,
}

/// The bytes of content a project stores, as written (before the engine compresses it): its
/// live calls' JSON and text members, its live object versions' values, and its table rows.
/// Files are counted by [`crate::FileStore::files_size`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageSizes {
    pub traces: u64,
    pub objects: u64,
    pub tables: u64,
}

#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// What `project` stores (see [`StorageSizes`]).
    async fn storage_sizes(&self, project: &ProjectId) -> Result<StorageSizes>;

    /// The projects that hold live calls, most recently active first, at most `limit`; only
    /// those of `entity` when given.
    async fn list_projects(&self, entity: Option<&str>, limit: u64) -> Result<Vec<ProjectInfo>>;
}
