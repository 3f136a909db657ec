//! `/objs/query` (docs/api/objects.md#query-objects): the request as the SDK sends it, and the
//! validated [`ObjectsQuery`] the backends render.

use serde::Deserialize;

use crate::ProtoError;
use crate::ids::ProjectId;
use heddle_ql::{Direction, SortBy};

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ObjectVersionFilter {
    pub object_ids: Option<Vec<String>>,
    pub is_op: Option<bool>,
    pub latest_only: Option<bool>,
    pub base_object_classes: Option<Vec<String>>,
    pub exclude_base_object_classes: Option<Vec<String>>,
    pub leaf_object_classes: Option<Vec<String>>,
    pub tags: Option<Vec<String>>,
    pub aliases: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ObjQueryReq {
    pub project_id: ProjectId,
    pub filter: Option<ObjectVersionFilter>,
    #[serde(default, deserialize_with = "heddle_ql::sort_list")]
    pub sort_by: Option<Vec<SortBy>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub metadata_only: Option<bool>,
    pub include_storage_size: Option<bool>,
    pub include_tags_and_aliases: Option<bool>,
}

/// What `/objs/query` may sort by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjSortField {
    ObjectId,
    CreatedAt,
    /// Not requestable: the tie-breaker that makes paging deterministic.
    VersionIndex,
}

/// A validated objects query. Deleted versions are never returned. A list filter that is
/// `None` does not filter (the SDK's and the real server's empty lists mean the same, so
/// validation turns them into `None`).
#[derive(Debug, Clone)]
pub struct ObjectsQuery {
    pub project: ProjectId,
    pub object_ids: Option<Vec<String>>,
    /// `Some(true)`: ops only; `Some(false)`: everything but ops.
    pub is_op: Option<bool>,
    pub latest_only: bool,
    pub base_object_classes: Option<Vec<String>>,
    /// Versions without a base class are kept.
    pub exclude_base_object_classes: Option<Vec<String>>,
    pub leaf_object_classes: Option<Vec<String>>,
    /// A filter no stored version can pass (tags or aliases other than `latest`): backends
    /// need not run the query.
    pub matches_nothing: bool,
    /// Always ends with `object_id`, `version_index` so paging is deterministic.
    pub sort: Vec<(ObjSortField, Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
    pub metadata_only: bool,
    pub include_storage_size: bool,
    pub include_tags_and_aliases: bool,
}

/// The only alias heddle knows: the newest live version of an object. Tags are not
/// implemented, so no version has any.
pub const LATEST_ALIAS: &str = "latest";

fn non_empty(list: Option<Vec<String>>) -> Option<Vec<String>> {
    list.filter(|l| !l.is_empty())
}

impl ObjQueryReq {
    pub fn validate(self) -> Result<ObjectsQuery, ProtoError> {
        let f = self.filter.unwrap_or_default();
        let mut sort = Vec::new();
        for s in self.sort_by.unwrap_or_default() {
            let field = match s.field.as_str() {
                "object_id" => ObjSortField::ObjectId,
                "created_at" => ObjSortField::CreatedAt,
                other => {
                    return Err(ProtoError::invalid(format!(
                        "cannot sort objects by {other:?}: expected \"object_id\" or \"created_at\""
                    )));
                }
            };
            sort.push((field, s.direction));
        }
        for tie in [ObjSortField::ObjectId, ObjSortField::VersionIndex] {
            if !sort.iter().any(|(f, _)| *f == tie) {
                sort.push((tie, Direction::Asc));
            }
        }
        let non_negative = |what: &str, v: Option<i64>| match v {
            Some(n) if n < 0 => Err(ProtoError::invalid(format!("{what} must be >= 0, got {n}"))),
            v => Ok(v.map(|n| n as u64)),
        };
        let tags = non_empty(f.tags);
        let aliases = non_empty(f.aliases);
        // Any-of: `latest` among the aliases selects the latest versions; other aliases and every
        // tag select nothing.
        let wants_latest_alias =
            aliases.as_ref().is_some_and(|a| a.iter().any(|a| a == LATEST_ALIAS));
        let matches_nothing = tags.is_some() || (aliases.is_some() && !wants_latest_alias);
        Ok(ObjectsQuery {
            project: self.project_id,
            object_ids: non_empty(f.object_ids),
            is_op: f.is_op,
            latest_only: f.latest_only.unwrap_or(false) || wants_latest_alias,
            base_object_classes: non_empty(f.base_object_classes),
            exclude_base_object_classes: non_empty(f.exclude_base_object_classes),
            leaf_object_classes: non_empty(f.leaf_object_classes),
            matches_nothing,
            sort,
            limit: non_negative("limit", self.limit)?,
            offset: non_negative("offset", self.offset)?.unwrap_or(0),
            metadata_only: self.metadata_only.unwrap_or(false),
            include_storage_size: self.include_storage_size.unwrap_or(false),
            include_tags_and_aliases: self.include_tags_and_aliases.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn validate(body: serde_json::Value) -> Result<ObjectsQuery, ProtoError> {
        serde_json::from_value::<ObjQueryReq>(body).unwrap().validate()
    }

    #[test]
    fn sdk_request_with_nulls() {
        // `WeaveClient._objects` sends every key, null when unset.
        let q = validate(json!({
            "project_id": "e/p",
            "filter": {"base_object_classes": ["Evaluation"], "exclude_base_object_classes": null,
                       "leaf_object_classes": null, "object_ids": null, "is_op": false,
                       "latest_only": null, "tags": null, "aliases": null},
            "limit": null, "offset": null, "sort_by": null, "metadata_only": false,
            "include_storage_size": false, "include_tags_and_aliases": false
        }))
        .unwrap();
        assert_eq!(q.base_object_classes, Some(vec!["Evaluation".to_owned()]));
        assert_eq!(q.is_op, Some(false));
        assert!(!q.latest_only && !q.matches_nothing && !q.metadata_only);
        assert_eq!((q.limit, q.offset), (None, 0));
        assert_eq!(
            q.sort,
            [
                (ObjSortField::ObjectId, Direction::Asc),
                (ObjSortField::VersionIndex, Direction::Asc)
            ]
        );
    }

    #[test]
    fn sorting_paging_and_aliases() {
        let q = validate(json!({"project_id": "e/p", "limit": 3, "offset": 2,
            "sort_by": [{"field": "created_at", "direction": "desc"}],
            "filter": {"object_ids": [], "aliases": ["latest", "prod"]}}))
        .unwrap();
        assert_eq!(q.sort[0], (ObjSortField::CreatedAt, Direction::Desc));
        assert_eq!(q.sort.len(), 3);
        assert_eq!((q.limit, q.offset), (Some(3), 2));
        assert!(q.latest_only && !q.matches_nothing && q.object_ids.is_none());
        assert!(
            validate(json!({"project_id": "e/p", "filter": {"tags": ["t"]}}))
                .unwrap()
                .matches_nothing
        );
        assert!(
            validate(json!({"project_id": "e/p", "filter": {"aliases": ["prod"]}}))
                .unwrap()
                .matches_nothing
        );
        for bad in [
            json!({"project_id": "e/p", "sort_by": [{"field": "digest", "direction": "asc"}]}),
            json!({"project_id": "e/p", "limit": -1}),
            json!({"project_id": "e/p", "offset": -5}),
        ] {
            assert!(validate(bad.clone()).is_err(), "{bad}");
        }
    }
}
