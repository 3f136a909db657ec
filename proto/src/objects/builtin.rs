//! Built-in object classes (`builtin_object_class` / `set_base_object_class` on `/obj/create`).
//!
//! The real server validates the value against one of its pydantic classes and stores the
//! dump of that model: `_type`, the fields, `_class_name` and `_bases` (the class's MRO without
//! itself and `object`). heddle does not model each class's fields; it keeps the subset that
//! makes the stored value indistinguishable to the SDK: the class must be a known one, the value
//! a dict, and the class markers are stamped so the value reads back (and is classified, see
//! [`super::object_classes`]) as that class. Every class derives from `BaseObject`, whose two
//! optional fields default to null.

use serde_json::{Map, Value};

use crate::ProtoError;

/// `(class name, its bases above BaseObject)`: the built-in registry of the weave 0.54 SDK
/// (`weave/trace/builtin_object_classes/builtin_object_registry.py`). Only
/// `TestOnlyInheritedBaseObject` has an intermediate base.
const BUILTIN_CLASSES: &[(&str, &[&str])] = &[
    ("TestOnlyExample", &[]),
    ("TestOnlyNestedBaseObject", &[]),
    ("TestOnlyInheritedBaseObject", &["TestOnlyExample"]),
    ("Leaderboard", &[]),
    ("AlertSpec", &[]),
    ("AnnotationSpec", &[]),
    ("Provider", &[]),
    ("ProviderModel", &[]),
    ("SavedView", &[]),
    ("ComparisonView", &[]),
    ("LLMStructuredCompletionModel", &[]),
    ("ChartConfig", &[]),
    ("AgentDashboard", &[]),
];

/// The fields every built-in class inherits from `BaseObject`, with their defaults.
const BASE_OBJECT_FIELDS: &[&str] = &["name", "description"];

/// The value to store for `/obj/create` with `builtin_object_class = class`:
/// - a dict already marked as a weave object keeps its markers, which must name `class`;
/// - an unmarked dict is stamped as `class`;
/// - anything else, or an unknown class, is a 400.
pub fn apply_builtin_class(val: Value, class: &str) -> Result<Value, ProtoError> {
    let Value::Object(fields) = val else {
        return Err(ProtoError::invalid(format!(
            "builtin_object_class {class:?} needs a dict value"
        )));
    };
    let val = Value::Object(fields);
    if let (_, Some(leaf)) = super::object_classes(&val) {
        // The value declares its class itself (an edit of an existing object).
        return if leaf == class {
            Ok(val)
        } else {
            Err(ProtoError::invalid(format!(
                "builtin_object_class {class:?} does not match the value's class {leaf:?}"
            )))
        };
    }
    let Some((_, parents)) = BUILTIN_CLASSES.iter().find(|(n, _)| *n == class) else {
        return Err(ProtoError::invalid(format!("unknown builtin_object_class {class:?}")));
    };
    let Value::Object(fields) = val else { unreachable!("checked above") };
    // The real server's dump order: `_type`, the fields, then `_class_name` and `_bases`.
    // Order does not change the digest (keys are sorted) but keeps stored values alike.
    let mut out = Map::new();
    out.insert("_type".into(), Value::String(class.to_owned()));
    for field in BASE_OBJECT_FIELDS {
        if !fields.contains_key(*field) {
            out.insert((*field).to_owned(), Value::Null);
        }
    }
    for (k, v) in fields {
        if !matches!(k.as_str(), "_type" | "_class_name" | "_bases") {
            out.insert(k, v);
        }
    }
    out.insert("_class_name".into(), Value::String(class.to_owned()));
    let bases = parents.iter().copied().chain(["BaseObject", "BaseModel"]);
    out.insert("_bases".into(), Value::Array(bases.map(|b| Value::String(b.into())).collect()));
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::objects::object_classes;

    #[test]
    fn stamps_known_classes() {
        let v = apply_builtin_class(json!({"name": "lb", "columns": []}), "Leaderboard").unwrap();
        assert_eq!(
            v,
            json!({"_type": "Leaderboard", "name": "lb", "description": null, "columns": [],
                   "_class_name": "Leaderboard", "_bases": ["BaseObject", "BaseModel"]})
        );
        assert_eq!(
            object_classes(&v),
            (Some("Leaderboard".to_owned()), Some("Leaderboard".to_owned()))
        );
        let v = apply_builtin_class(json!({}), "TestOnlyInheritedBaseObject").unwrap();
        assert_eq!(v["_bases"], json!(["TestOnlyExample", "BaseObject", "BaseModel"]));
        assert_eq!(
            object_classes(&v),
            (Some("TestOnlyExample".to_owned()), Some("TestOnlyInheritedBaseObject".to_owned()))
        );
    }

    #[test]
    fn keeps_a_matching_marked_value_and_rejects_the_rest() {
        let marked = json!({"_class_name": "Leaderboard", "_bases": ["BaseObject", "BaseModel"],
                            "x": 1});
        assert_eq!(apply_builtin_class(marked.clone(), "Leaderboard").unwrap(), marked);
        for (val, class) in [
            (marked, "AlertSpec"),
            (json!({"a": 1}), "NoSuchClass"),
            (json!({"a": 1}), ""),
            (json!([1]), "Leaderboard"),
            (json!("x"), "Leaderboard"),
        ] {
            assert!(apply_builtin_class(val.clone(), class).is_err(), "{val} as {class}");
        }
        assert!(apply_builtin_class(json!({}), "SavedView").is_ok());
        assert!(apply_builtin_class(json!({}), "Dataset").is_err(), "not a built-in class");
    }
}
