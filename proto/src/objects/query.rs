//! `/objs/query` (docs/api/objects.md#query-objects): the request as the SDK sends it, and the
//! validated [`ObjectsQuery`] the backends render.

use serde::Deserialize;

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::limits::MAX_FILTER_IDS;
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
    /// Versions holding any of these tags.
    pub tags: Option<Vec<String>>,
    /// Versions any of these aliases name, or the latest version when `latest` is among them:
    /// one condition (any of), so `["latest", "prod"]` selects both.
    pub aliases: Option<AliasFilter>,
    /// Always ends with `object_id`, `version_index` so paging is deterministic.
    pub sort: Vec<(ObjSortField, Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
    pub metadata_only: bool,
    pub include_storage_size: bool,
    pub include_tags_and_aliases: bool,
}

/// The alias of the newest live version of every object: computed, never stored
/// (docs/api/objects.md#tags-and-aliases).
pub const LATEST_ALIAS: &str = "latest";

/// An `aliases` filter: the stored aliases asked for, and whether `latest` was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasFilter {
    pub stored: Vec<String>,
    pub latest: bool,
}

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
        let bounded = |what: &str, l: Option<Vec<String>>| match l {
            Some(l) if l.len() > MAX_FILTER_IDS => Err(ProtoError::invalid(format!(
                "at most {MAX_FILTER_IDS} {what} in a filter, got {}",
                l.len()
            ))),
            l => Ok(non_empty(l)),
        };
        let tags = bounded("tags", f.tags)?;
        let aliases = bounded("aliases", f.aliases)?.map(|a| AliasFilter {
            latest: a.iter().any(|a| a == LATEST_ALIAS),
            stored: a.into_iter().filter(|a| a != LATEST_ALIAS).collect(),
        });
        Ok(ObjectsQuery {
            project: self.project_id,
            object_ids: non_empty(f.object_ids),
            is_op: f.is_op,
            latest_only: f.latest_only.unwrap_or(false),
            base_object_classes: non_empty(f.base_object_classes),
            exclude_base_object_classes: non_empty(f.exclude_base_object_classes),
            leaf_object_classes: non_empty(f.leaf_object_classes),
            tags,
            aliases,
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
        assert!(!q.latest_only && q.tags.is_none() && q.aliases.is_none() && !q.metadata_only);
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
        assert!(!q.latest_only && q.object_ids.is_none());
        assert_eq!(q.aliases, Some(AliasFilter { stored: vec!["prod".into()], latest: true }));
        let q = validate(json!({"project_id": "e/p", "filter": {"tags": ["t"], "aliases": []}}))
            .unwrap();
        assert_eq!((q.tags, q.aliases), (Some(vec!["t".to_owned()]), None));
        for bad in [
            json!({"project_id": "e/p", "sort_by": [{"field": "digest", "direction": "asc"}]}),
            json!({"project_id": "e/p", "limit": -1}),
            json!({"project_id": "e/p", "offset": -5}),
        ] {
            assert!(validate(bad.clone()).is_err(), "{bad}");
        }
    }
}
