//! Tags and aliases of object versions (docs/api/objects.md#tags-and-aliases). A tag labels
//! one live version; an alias names one live version of an object and moves when set on
//! another. Deleting a version drops its tags and the aliases naming it, so a version revived
//! later comes back bare. `latest` is never stored (it is computed from the versions).

use std::collections::HashMap;

use async_trait::async_trait;
use heddle_proto::ProjectId;

use crate::Result;

/// One object version: `(object_id, digest)`.
pub type VersionKey = (String, String);

/// The stored tags and aliases of one version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels {
    pub tags: Vec<String>,
    pub aliases: Vec<String>,
}

#[async_trait]
pub trait TagStore: Send + Sync {
    /// Adds tags to a live version; [`crate::StoreError::NotFound`] when it is not one, and
    /// [`crate::StoreError::Invalid`] past `MAX_TAGS_PER_VERSION`. Tags it has already stay.
    async fn add_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
        wb_user_id: &str,
    ) -> Result<()>;

    /// Removes tags from a version; tags it does not have are ignored.
    async fn remove_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
    ) -> Result<()>;

    /// Points the aliases at a live version of the object, moving any that named another one;
    /// `NotFound` when it is not one, `Invalid` past `MAX_ALIASES_PER_OBJECT`.
    async fn set_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        aliases: &[String],
        wb_user_id: &str,
    ) -> Result<()>;

    /// Removes aliases of an object; aliases it does not have are ignored.
    async fn remove_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        aliases: &[String],
    ) -> Result<()>;

    /// The project's distinct tags, sorted, at most `MAX_LISTED_NAMES`.
    async fn list_tags(&self, project: &ProjectId) -> Result<Vec<String>>;

    /// The project's distinct stored aliases, sorted, at most `MAX_LISTED_NAMES`.
    async fn list_aliases(&self, project: &ProjectId) -> Result<Vec<String>>;

    /// The stored tags and aliases of each listed version that has any.
    async fn labels(
        &self,
        project: &ProjectId,
        versions: &[VersionKey],
    ) -> Result<HashMap<VersionKey, Labels>>;

    /// The digest `alias` names in the object, if it names one.
    async fn resolve_alias(
        &self,
        project: &ProjectId,
        object_id: &str,
        alias: &str,
    ) -> Result<Option<String>>;
}
