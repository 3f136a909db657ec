//! Objects: versioned, content-addressed values named per project. The rules every backend
//! applies the same way live here too: which versions a delete names, and when a new version
//! collides with the object's class. Backends load the live versions of one object, ask these
//! functions, then write.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::objects::{DeletedVersion, ObjSchema, ObjectsDelete, ObjectsQuery, VersionSel};

use crate::{Result, StoreError};

/// A new object version to store.
#[derive(Debug, Clone)]
pub struct NewObject {
    pub project: ProjectId,
    pub object_id: String,
    pub digest: String,
    /// Canonical-or-not JSON text of the value, stored verbatim.
    pub val: String,
    pub kind: &'static str,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
    pub wb_user_id: Option<String>,
}

#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// Stores an object version if `(project, object_id, digest)` is new (or revives a deleted
    /// one, keeping its version index); a no-op when it is live. A version whose base class
    /// differs from the object's live versions is [`StoreError::Invalid`] ([`check_class`]).
    async fn create_object(&self, obj: NewObject) -> Result<()>;

    async fn read_object(
        &self,
        project: &ProjectId,
        object_id: &str,
        version: &VersionSel,
        metadata_only: bool,
    ) -> Result<ObjSchema>;

    /// The live object versions matching `q`, with `is_latest` computed over live versions.
    async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>>;

    /// Soft-deletes the versions `d` names ([`resolve_deletion`]); returns them.
    async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>>;
}

/// A live (non-deleted) version of an object, as a delete needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveVersion {
    pub digest: String,
    pub version_index: i64,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
}

impl From<&LiveVersion> for DeletedVersion {
    fn from(v: &LiveVersion) -> Self {
        DeletedVersion {
            digest: v.digest.clone(),
            base_object_class: v.base_object_class.clone(),
            leaf_object_class: v.leaf_object_class.clone(),
        }
    }
}

/// The versions a delete removes, each once, in version order. `versions: None` means all live
/// versions. Deleted versions are gone for a delete: naming one, or an object with no live
/// version, is a 404.
pub fn resolve_deletion<'a>(
    object_id: &str,
    live: &'a [LiveVersion],
    versions: Option<&[VersionSel]>,
) -> Result<Vec<&'a LiveVersion>> {
    if live.is_empty() {
        return Err(StoreError::NotFound(format!("object {object_id} not found")));
    }
    let Some(versions) = versions else {
        let mut all: Vec<&LiveVersion> = live.iter().collect();
        all.sort_by_key(|v| v.version_index);
        return Ok(all);
    };
    let mut chosen: Vec<&LiveVersion> = Vec::new();
    let mut missing = Vec::new();
    for sel in versions {
        let found = match sel {
            VersionSel::Latest => live.iter().max_by_key(|v| v.version_index),
            VersionSel::Index(i) => live.iter().find(|v| v.version_index == *i),
            VersionSel::Digest(d) => live.iter().find(|v| v.digest == *d),
        };
        match found {
            Some(v) => chosen.push(v),
            None => missing.push(match sel {
                VersionSel::Latest => "latest".to_owned(),
                VersionSel::Index(i) => format!("v{i}"),
                VersionSel::Digest(d) => d.clone(),
            }),
        }
    }
    if !missing.is_empty() {
        return Err(StoreError::NotFound(format!(
            "object {object_id} has no version {}",
            missing.join(", ")
        )));
    }
    chosen.sort_by_key(|v| v.version_index);
    chosen.dedup_by_key(|v| v.version_index);
    Ok(chosen)
}

/// Refuses a new version whose base class differs from the object's live versions (the real
/// server's name/type collision): an object name stays one kind of thing (a `Model`, a
/// `Dataset`, a plain value) for as long as it has live versions. `latest_live_base` is the
/// base class of the newest live version, `None` when there is none.
pub fn check_class(
    object_id: &str,
    latest_live_base: Option<Option<&str>>,
    new_base: Option<&str>,
) -> Result<()> {
    match latest_live_base {
        Some(old) if old != new_base => Err(StoreError::Invalid(format!(
            "object {object_id} is a {} and cannot get a version that is a {}: \
             use another name, or delete its versions first",
            describe(old),
            describe(new_base)
        ))),
        _ => Ok(()),
    }
}

/// How a version selector reads in a message: `latest`, `v3`, or the digest.
pub fn version_text(v: &VersionSel) -> String {
    match v {
        VersionSel::Latest => "latest".into(),
        VersionSel::Index(i) => format!("v{i}"),
        VersionSel::Digest(d) => d.clone(),
    }
}

fn describe(base: Option<&str>) -> String {
    base.map_or_else(|| "value without a base object class".to_owned(), |b| format!("{b:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(digest: &str, index: i64) -> LiveVersion {
        LiveVersion {
            digest: digest.to_owned(),
            version_index: index,
            base_object_class: None,
            leaf_object_class: None,
        }
    }

    #[test]
    fn deletions() {
        let live = [v("b", 1), v("a", 0), v("d", 3)];
        let digests = |sels: Option<&[VersionSel]>| -> Result<Vec<String>> {
            Ok(resolve_deletion("o", &live, sels)?.iter().map(|v| v.digest.clone()).collect())
        };
        assert_eq!(digests(None).unwrap(), ["a", "b", "d"]);
        let sels = [VersionSel::Latest, VersionSel::Digest("d".into()), VersionSel::Index(0)];
        assert_eq!(digests(Some(&sels)).unwrap(), ["a", "d"], "aliases resolve, each once");
        for missing in [VersionSel::Index(2), VersionSel::Digest("c".into())] {
            let sels = [VersionSel::Latest, missing];
            assert!(matches!(digests(Some(&sels)), Err(StoreError::NotFound(_))));
        }
        assert!(matches!(resolve_deletion("o", &[], None), Err(StoreError::NotFound(_))));
    }

    #[test]
    fn class_collisions() {
        assert!(check_class("o", None, Some("Model")).is_ok(), "a new object takes any class");
        assert!(check_class("o", Some(Some("Model")), Some("Model")).is_ok());
        assert!(check_class("o", Some(None), None).is_ok());
        for (old, new) in
            [(Some("Model"), Some("Dataset")), (None, Some("Model")), (Some("M"), None)]
        {
            assert!(matches!(check_class("o", Some(old), new), Err(StoreError::Invalid(_))));
        }
    }
}
