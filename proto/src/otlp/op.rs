//! The op a span is an instance of. Spans carry no code, so — like the Weave server — each span
//! name becomes a placeholder op object (`def func(*args, **kwargs): ...`) whose ref is the
//! call's `op_name`; the SDK and the UI then treat OTel spans like any other op.
//!
//! The rule is pure: [`placeholder_writes`] says which files and op objects a batch of spans
//! needs stored, and the write pipeline stores them (straight into the store, or through Kafka
//! and the consumer; docs/distributed.md, "Placeholder ops"). Both are content-addressed, so
//! writing them again changes nothing.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ProjectId;
use crate::ProtoError;
use crate::canonical::canonical_json;
use crate::digest::{bytes_digest, object_digest};
use crate::objects::{check_object_id, object_kind};

/// The source file every placeholder op points at.
pub const PLACEHOLDER_SOURCE: &str =
    "def func(*args, **kwargs):\n    ... # Code-capture unavailable for this op\n";
pub const PLACEHOLDER_FILE_NAME: &str = "obj.py";

/// Longest op name (the object id limit).
const MAX_NAME: usize = 128;

/// The placeholder source's file digest.
pub fn placeholder_file_digest() -> String {
    bytes_digest(PLACEHOLDER_SOURCE.as_bytes())
}

/// The placeholder op's value; the same for every name, so every placeholder has one digest.
pub fn placeholder_val() -> Value {
    json!({
        "_type": "CustomWeaveType",
        "weave_type": {"type": "Op"},
        "files": {PLACEHOLDER_FILE_NAME: placeholder_file_digest()},
    })
}

/// A span name as an object id: spaces and `/` as `_`, `<>` dropped, lower case (the Weave
/// server's rule), other characters refs cannot carry as `_`; long names are cut and suffixed
/// with a hash of the whole name so distinct names stay distinct.
pub fn op_object_id(span_name: &str) -> String {
    let mut id: String = span_name
        .chars()
        .filter(|c| !matches!(c, '<' | '>'))
        .map(|c| match c {
            ' ' | '/' | ':' => '_',
            c if c.is_control() => '_',
            c => c,
        })
        .flat_map(char::to_lowercase)
        .collect();
    if id.is_empty() {
        id = "span".to_owned();
    }
    if id.chars().count() > MAX_NAME {
        let hash = hex::encode(&Sha256::digest(span_name.as_bytes())[..2]);
        id = id.chars().take(MAX_NAME - 5).collect::<String>() + "_" + &hash;
    }
    id
}

static PLACEHOLDER_DIGEST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| object_digest(&placeholder_val()));

/// The placeholder op's object digest.
pub fn placeholder_digest() -> &'static str {
    &PLACEHOLDER_DIGEST
}

/// The `op_name` of a span's call: `weave:///<entity>/<project>/op/<object id>:<digest>`.
pub fn op_ref(project: &ProjectId, span_name: &str) -> String {
    format!(
        "weave:///{}/{}/op/{}:{}",
        project.entity(),
        project.project(),
        op_object_id(span_name),
        placeholder_digest()
    )
}

/// A file to store, content-addressed: `digest` is the [`bytes_digest`] of `content`.
#[derive(Debug, Clone, PartialEq)]
pub struct FileWrite {
    pub project: ProjectId,
    pub digest: String,
    pub content: Vec<u8>,
}

/// An op object version to store, content-addressed: `digest` is the [`object_digest`] of
/// `val` (canonical JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct OpWrite {
    pub project: ProjectId,
    pub object_id: String,
    pub digest: String,
    pub val: String,
    pub wb_user_id: Option<String>,
}

/// What the placeholder ops of a batch of spans need stored: the source files first (an op
/// names its file), then the op objects.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpWrites {
    pub files: Vec<FileWrite>,
    pub ops: Vec<OpWrite>,
}

impl OpWrites {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.ops.is_empty()
    }

    /// Checks what a Kafka record claims, since a record is outside input like any request:
    /// names are valid, every digest is the digest of its content, every object is an op.
    pub fn check(&self) -> Result<(), ProtoError> {
        for f in &self.files {
            if bytes_digest(&f.content) != f.digest {
                return Err(ProtoError::invalid(format!(
                    "file {} of {} does not match its digest",
                    f.digest, f.project
                )));
            }
        }
        for op in &self.ops {
            check_object_id(&op.object_id)?;
            let val: Value = serde_json::from_str(&op.val).map_err(|e| {
                ProtoError::invalid(format!("op {} is not JSON: {e}", op.object_id))
            })?;
            if object_digest(&val) != op.digest || object_kind(&val) != "op" {
                return Err(ProtoError::invalid(format!(
                    "op {}:{} of {} is not the op its digest names",
                    op.object_id, op.digest, op.project
                )));
            }
        }
        Ok(())
    }
}

/// The writes that make the placeholder op of every (project, span name) exist: the
/// placeholder source file once per project, and one op object per name, created by `user`.
pub fn placeholder_writes(ops: &BTreeSet<(ProjectId, String)>, user: Option<&str>) -> OpWrites {
    let projects: BTreeSet<&ProjectId> = ops.iter().map(|(p, _)| p).collect();
    let files = projects
        .into_iter()
        .map(|project| FileWrite {
            project: project.clone(),
            digest: placeholder_file_digest(),
            content: PLACEHOLDER_SOURCE.as_bytes().to_vec(),
        })
        .collect();
    let val = canonical_json(&placeholder_val());
    let ops = ops
        .iter()
        .map(|(project, name)| OpWrite {
            project: project.clone(),
            object_id: op_object_id(name),
            digest: placeholder_digest().to_owned(),
            val: val.clone(),
            wb_user_id: user.map(str::to_owned),
        })
        .collect();
    OpWrites { files, ops }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_names_become_valid_object_ids() {
        assert_eq!(op_object_id("Chat GPT-4o/<stream>"), "chat_gpt-4o_stream");
        assert_eq!(op_object_id(""), "span");
        let long = "x".repeat(300);
        let id = op_object_id(&long);
        assert_eq!(id.chars().count(), 128);
        assert_ne!(id, op_object_id(&("x".repeat(299) + "y")));
        for name in ["a:b", "tab\there", &long, "ünïcode"] {
            check_object_id(&op_object_id(name)).unwrap();
        }
    }

    #[test]
    fn placeholder_writes_are_one_file_per_project_and_one_op_per_name() {
        let (a, b) = (ProjectId::parse("e/a").unwrap(), ProjectId::parse("e/b").unwrap());
        let names: BTreeSet<(ProjectId, String)> =
            [(a.clone(), "x".into()), (a.clone(), "Y z".into()), (b.clone(), "x".into())].into();
        let w = placeholder_writes(&names, Some("u"));
        w.check().unwrap();
        let files: Vec<&str> = w.files.iter().map(|f| f.project.as_str()).collect();
        assert_eq!(files, ["e/a", "e/b"]);
        assert_eq!(w.files[0].content, PLACEHOLDER_SOURCE.as_bytes());
        let ops: Vec<(&str, &str)> =
            w.ops.iter().map(|o| (o.project.as_str(), o.object_id.as_str())).collect();
        assert_eq!(ops, [("e/a", "y_z"), ("e/a", "x"), ("e/b", "x")], "in name order");
        // The op's digest is the one the calls' op_name refs carry.
        let op = &w.ops[0];
        assert_eq!(format!("weave:///e/a/op/{}:{}", op.object_id, op.digest), op_ref(&a, "Y z"));
        assert_eq!(op.wb_user_id.as_deref(), Some("u"));
        assert!(placeholder_writes(&BTreeSet::new(), None).is_empty());
    }

    #[test]
    fn writes_whose_digest_is_not_their_content_are_refused() {
        let names: BTreeSet<(ProjectId, String)> =
            [(ProjectId::parse("e/a").unwrap(), "x".into())].into();
        let good = placeholder_writes(&names, None);
        let mut bad_file = good.clone();
        bad_file.files[0].content.push(b'!');
        assert!(bad_file.check().is_err());
        let mut bad_op = good.clone();
        bad_op.ops[0].val =
            r#"{"_type":"CustomWeaveType","weave_type":{"type":"Op"},"files":{}}"#.into();
        assert!(bad_op.check().is_err());
        let mut not_an_op = good.clone();
        not_an_op.ops[0].val = "1".into();
        not_an_op.ops[0].digest = object_digest(&json!(1));
        assert!(not_an_op.check().unwrap_err().to_string().contains("not the op"));
        let mut bad_name = good;
        bad_name.ops[0].object_id = "a/b".into();
        assert!(bad_name.check().is_err());
    }
}
