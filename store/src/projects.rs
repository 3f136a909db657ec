//! Projects: which projects hold calls, for the web UI's project list (docs/ui.md). Projects
//! are not stored as such; backends derive the list from their calls index without reading
//! calls.

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

#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// The projects that hold live calls, most recently active first, at most `limit`; only
    /// those of `entity` when given.
    async fn list_projects(&self, entity: Option<&str>, limit: u64) -> Result<Vec<ProjectInfo>>;
}
