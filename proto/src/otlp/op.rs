//! The op a span is an instance of. Spans carry no code, so — like the Weave server — each span
//! name becomes a placeholder op object (`def func(*args, **kwargs): ...`) whose ref is the
//! call's `op_name`; the SDK and the UI then treat OTel spans like any other op.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ProjectId;
use crate::digest::{bytes_digest, object_digest};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::check_object_id;

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
}
