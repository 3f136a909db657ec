//! `/obj/delete` (docs/api/objects.md#delete-an-object): soft delete of some or all versions of one
//! object.

use serde::{Deserialize, Serialize};

use super::{VersionSel, check_object_id};
use crate::ProtoError;
use crate::digest::is_valid_digest;
use crate::ids::ProjectId;

/// Most versions one request may name (the real server's limit).
pub const MAX_DELETE_DIGESTS: usize = 100;

#[derive(Debug, Deserialize)]
pub struct ObjDeleteReq {
    pub project_id: ProjectId,
    pub object_id: String,
    pub digests: Option<Vec<String>>,
}

/// A validated delete: `versions: None` deletes every live version.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectsDelete {
    pub project: ProjectId,
    pub object_id: String,
    pub versions: Option<Vec<VersionSel>>,
}

impl ObjDeleteReq {
    /// Each entry of `digests` is a content digest, `latest` or `v<N>` (the SDK documents
    /// aliases here); anything else can never name a version and is a 400 rather than a 404.
    /// An empty list is a 400 too: the real server would read it as "all versions", which is
    /// never what a caller listing versions means.
    pub fn validate(self) -> Result<ObjectsDelete, ProtoError> {
        check_object_id(&self.object_id)?;
        let versions = match self.digests {
            None => None,
            Some(d) if d.is_empty() => {
                return Err(ProtoError::invalid(
                    "digests is empty: list the versions to delete, or send null to delete all",
                ));
            }
            Some(d) if d.len() > MAX_DELETE_DIGESTS => {
                return Err(ProtoError::invalid(format!(
                    "cannot delete {} versions at once: at most {MAX_DELETE_DIGESTS}",
                    d.len()
                )));
            }
            Some(d) => Some(
                d.iter()
                    .map(|s| match VersionSel::parse(s) {
                        VersionSel::Digest(d) if !is_valid_digest(&d) => Err(ProtoError::invalid(
                            format!("invalid digest {d:?}: expected a content digest, \"latest\" or \"v<N>\""),
                        )),
                        sel => Ok(sel),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(ObjectsDelete { project: self.project_id, object_id: self.object_id, versions })
    }
}

/// One deleted version, with aliases resolved to its content digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeletedVersion {
    pub digest: String,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ObjDeleteRes {
    pub num_deleted: u64,
    pub deleted_versions: Vec<DeletedVersion>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn validate(body: serde_json::Value) -> Result<ObjectsDelete, ProtoError> {
        serde_json::from_value::<ObjDeleteReq>(body).unwrap().validate()
    }

    #[test]
    fn selectors() {
        let d = "8cSIeZmxOV9VXxSrqTBKnzAwHg5YwslsznIRY9ik5sM";
        let ok = validate(json!({"project_id": "e/p", "object_id": "o",
                                 "digests": [d, "latest", "v3"]}))
        .unwrap();
        assert_eq!(
            ok.versions,
            Some(vec![VersionSel::Digest(d.into()), VersionSel::Latest, VersionSel::Index(3)])
        );
        let all = validate(json!({"project_id": "e/p", "object_id": "o", "digests": null}));
        assert_eq!(all.unwrap().versions, None);
        let many: Vec<String> = (0..101).map(|i| format!("v{i}")).collect();
        for bad in [
            json!({"project_id": "e/p", "object_id": "o", "digests": []}),
            json!({"project_id": "e/p", "object_id": "o", "digests": many}),
            json!({"project_id": "e/p", "object_id": "o", "digests": ["short"]}),
            json!({"project_id": "e/p", "object_id": "o", "digests": [""]}),
            json!({"project_id": "e/p", "object_id": "o", "digests": ["v-1"]}),
            json!({"project_id": "e/p", "object_id": "a/b", "digests": null}),
        ] {
            assert!(validate(bad.clone()).is_err(), "{bad}");
        }
        let hundred: Vec<String> = (0..100).map(|i| format!("v{i}")).collect();
        assert!(
            validate(json!({"project_id": "e/p", "object_id": "o", "digests": hundred})).is_ok()
        );
    }
}
