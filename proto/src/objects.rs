//! Objects and files (docs/api/files.md, docs/api/objects.md): request/response shapes and the
//! rules that derive an object's kind and classes from its value.

mod builtin;
mod delete;
mod query;

pub use builtin::apply_builtin_class;
pub use delete::{DeletedVersion, MAX_DELETE_DIGESTS, ObjDeleteReq, ObjDeleteRes, ObjectsDelete};
pub use query::{
    AliasFilter, LATEST_ALIAS, ObjQueryReq, ObjSortField, ObjectVersionFilter, ObjectsQuery,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::time::Micros;

#[derive(Debug, Deserialize)]
pub struct ObjCreateReq {
    pub obj: ObjCreate,
}

#[derive(Debug, Deserialize)]
pub struct ObjCreate {
    pub project_id: ProjectId,
    pub object_id: String,
    pub val: Value,
    /// Validate `val` as this built-in class and stamp its class markers (see [`builtin`]).
    pub builtin_object_class: Option<String>,
    /// Deprecated alias of `builtin_object_class`.
    pub set_base_object_class: Option<String>,
    pub expected_digest: Option<String>,
}

impl ObjCreate {
    /// The value to store: `val` itself, or `val` as the requested built-in class.
    pub fn stored_val(&mut self) -> Result<Value, ProtoError> {
        let val = std::mem::take(&mut self.val);
        match (self.builtin_object_class.as_deref(), self.set_base_object_class.as_deref()) {
            (None, None) => Ok(val),
            (Some(a), Some(b)) if a != b => Err(ProtoError::invalid(format!(
                "builtin_object_class {a:?} and set_base_object_class {b:?} disagree"
            ))),
            (Some(class), _) | (None, Some(class)) => apply_builtin_class(val, class),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ObjCreateRes {
    pub digest: String,
    pub object_id: String,
}

#[derive(Debug, Deserialize)]
pub struct ObjReadReq {
    pub project_id: ProjectId,
    pub object_id: String,
    pub digest: String,
    pub metadata_only: Option<bool>,
    pub include_tags_and_aliases: Option<bool>,
}

/// Which version `/obj/read` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSel {
    Latest,
    Index(i64),
    Digest(String),
}

impl VersionSel {
    pub fn parse(s: &str) -> VersionSel {
        if s == "latest" {
            return VersionSel::Latest;
        }
        if let Some(n) = s.strip_prefix('v').and_then(|n| n.parse::<i64>().ok())
            && n >= 0
            && !s[1..].starts_with('+')
        {
            return VersionSel::Index(n);
        }
        VersionSel::Digest(s.to_owned())
    }
}

/// An object version as `/obj/read` and `/objs/query` return it.
#[derive(Debug, Serialize)]
pub struct ObjSchema {
    pub project_id: ProjectId,
    pub object_id: String,
    pub digest: String,
    pub version_index: i64,
    pub is_latest: i64,
    pub kind: String,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
    pub val: Option<Box<RawValue>>,
    pub created_at: Micros,
    pub deleted_at: Option<Micros>,
    pub wb_user_id: Option<String>,
    /// Bytes of the stored value, when asked for (`include_storage_size`).
    pub size_bytes: Option<i64>,
    /// When asked for (`include_tags_and_aliases`): see [`ObjSchema::with_tags_and_aliases`].
    pub tags: Option<Vec<String>>,
    pub aliases: Option<Vec<String>>,
}

impl ObjSchema {
    /// Fills `tags` and `aliases` with the version's stored ones, sorted; the newest live
    /// version also gets the computed alias `latest`, last.
    pub fn with_tags_and_aliases(mut self, tags: Vec<String>, aliases: Vec<String>) -> ObjSchema {
        let mut tags = tags;
        tags.sort();
        let mut aliases = aliases;
        aliases.sort();
        if self.is_latest == 1 {
            aliases.push(LATEST_ALIAS.to_owned());
        }
        self.tags = Some(tags);
        self.aliases = Some(aliases);
        self
    }
}

/// Object names as the SDK sanitises them: non-empty, at most 128 characters, no `/` or `:`
/// (they would make refs ambiguous).
pub fn check_object_id(id: &str) -> Result<(), ProtoError> {
    let ok = !id.is_empty()
        && id.chars().count() <= 128
        && !id.chars().any(|c| c == '/' || c == ':' || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(ProtoError::invalid(format!(
            "invalid object_id {id:?}: 1-128 characters, no '/', ':' or control characters"
        )))
    }
}

/// `"op"` for a serialised op, else `"object"`.
pub fn object_kind(val: &Value) -> &'static str {
    let is_op = val.get("_type").and_then(Value::as_str) == Some("CustomWeaveType")
        && val.pointer("/weave_type/type").and_then(Value::as_str) == Some("Op");
    if is_op { "op" } else { "object" }
}

/// `(base_object_class, leaf_object_class)` from `_bases`/`_class_name` (docs/api/objects.md).
pub fn object_classes(val: &Value) -> (Option<String>, Option<String>) {
    let bases: Vec<&str> = match val.get("_bases").and_then(Value::as_array) {
        Some(b) => b.iter().filter_map(Value::as_str).collect(),
        None => return (None, None),
    };
    let n = bases.len();
    let pydantic_object =
        n >= 2 && bases[n - 1] == "BaseModel" && matches!(bases[n - 2], "Object" | "BaseObject");
    let leaf = val.get("_class_name").and_then(Value::as_str);
    match (pydantic_object, leaf) {
        (true, Some(leaf)) => {
            let base = if n > 2 { bases[n - 3] } else { leaf };
            (Some(base.to_owned()), Some(leaf.to_owned()))
        }
        _ => (None, None),
    }
}

#[derive(Debug, Serialize)]
pub struct FileCreateRes {
    pub digest: String,
}

#[derive(Debug, Deserialize)]
pub struct FileContentReq {
    pub project_id: ProjectId,
    pub digest: String,
}

#[derive(Debug, Deserialize)]
pub struct FilesStatsReq {
    pub project_id: ProjectId,
}

#[derive(Debug, Serialize)]
pub struct FilesStatsRes {
    pub total_size_bytes: u64,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kinds_and_classes() {
        let op = json!({"_type": "CustomWeaveType", "weave_type": {"type": "Op"}, "files": {}});
        assert_eq!(object_kind(&op), "op");
        assert_eq!(object_kind(&json!({"a": 1})), "object");
        let cases = [
            (
                json!({"_class_name": "Dataset", "_bases": ["Object", "BaseModel"]}),
                Some("Dataset"),
                Some("Dataset"),
            ),
            (
                json!({"_class_name": "M", "_bases": ["Model", "Object", "BaseModel"]}),
                Some("Model"),
                Some("M"),
            ),
            (json!({"_class_name": "X", "_bases": ["Foo", "BaseModel"]}), None, None),
            (json!([1, 2]), None, None),
        ];
        for (val, base, leaf) in cases {
            let (b, l) = object_classes(&val);
            assert_eq!((b.as_deref(), l.as_deref()), (base, leaf), "{val}");
        }
    }

    #[test]
    fn version_selectors() {
        assert_eq!(VersionSel::parse("latest"), VersionSel::Latest);
        assert_eq!(VersionSel::parse("v3"), VersionSel::Index(3));
        assert_eq!(VersionSel::parse("v+3"), VersionSel::Digest("v+3".into()));
        assert_eq!(VersionSel::parse("abc"), VersionSel::Digest("abc".into()));
    }

    #[test]
    fn object_ids() {
        assert!(check_object_id("my-op.v_2").is_ok());
        for bad in ["", "a/b", "a:b", &"x".repeat(129)] {
            assert!(check_object_id(bad).is_err(), "{bad}");
        }
    }
}
