//! A call's JSON members (inputs, output, attributes, summary, otel_dump) as they are stored: the
//! text the client sent, checked, not rebuilt (docs/storage.md#json-members).
//!
//! Parsing each member into values only to write the values out again was a fifth of the CPU of
//! `calls/complete`. A member is instead scanned once without building anything ([`scan`]), and
//! stored as sent when the scan is sure that it parses into a [`Value`] within the member's
//! nesting bound and repeats no key in any object. Anything else goes to `serde_json`, which
//! decides, walking it without building anything ([`exact`]): text it refuses is refused with
//! its reason, text it accepts is parsed into values and written out again from them. That is
//! also how an object that repeats a key (or writes a key with escapes) is stored: parsed, it
//! keeps the last value of the key; SQLite's JSON functions would read the first, so a filter
//! could disagree with the call it returns.

mod exact;
mod scan;
pub mod write;

pub use exact::repeats_a_key;
pub(crate) use scan::Specials;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::ProtoError;
use crate::limits::MAX_MEMBER_DEPTH;

/// An object member (attributes, inputs, summary): absent or `null` is stored as `{}`.
pub fn object_text(what: &str, raw: Option<Box<RawValue>>) -> Result<String, ProtoError> {
    let Some(raw) = raw else { return Ok("{}".to_owned()) };
    if !raw.get().starts_with('{') {
        return Err(ProtoError::invalid(format!("{what} must be a JSON object")));
    }
    member_text(what, raw)
}

/// A member of any JSON type (output, otel_dump): absent or `null` is no member.
pub fn value_text(what: &str, raw: Option<Box<RawValue>>) -> Result<Option<String>, ProtoError> {
    raw.map(|raw| member_text(what, raw)).transpose()
}

fn too_deep(what: &str) -> ProtoError {
    ProtoError::invalid(format!("{what} nests deeper than {MAX_MEMBER_DEPTH} levels"))
}

/// Refuses text that would not parse into a [`Value`], or nests deeper than
/// [`MAX_MEMBER_DEPTH`]; `Ok(true)` when it is stored as it is, `Ok(false)` when it must be
/// written out again from its values. Neither answer builds anything.
pub fn check_parses(what: &str, text: &str) -> Result<bool, ProtoError> {
    match scan::scan(text) {
        Ok(_) => Ok(true),
        Err(scan::Stop::TooDeep) => Err(too_deep(what)),
        // Text that values accept and the scan did not has an escaped, repeated or number key.
        Err(scan::Stop::Unsure) => match exact::check(text) {
            Ok(()) => Ok(false),
            Err(exact::Refusal::TooDeep) => Err(too_deep(what)),
            Err(exact::Refusal::Invalid(e)) => {
                Err(ProtoError::invalid(format!("{what} is not valid JSON: {e}")))
            }
        },
    }
}

/// The nesting depth of `text` (0 for a scalar) when it can be stored as it is: it parses into a
/// [`Value`] within [`MAX_MEMBER_DEPTH`] and repeats no key. `None` when it would not parse or
/// must be rewritten, which the caller then does through values.
pub fn depth_as_sent(text: &str) -> Option<usize> {
    scan::scan(text).ok()
}

fn member_text(what: &str, raw: Box<RawValue>) -> Result<String, ProtoError> {
    if check_parses(what, raw.get())? {
        return Ok(Box::<str>::from(raw).into_string());
    }
    let value: Value = serde_json::from_str(raw.get())
        .map_err(|e| ProtoError::invalid(format!("{what} is not valid JSON: {e}")))?;
    Ok(serde_json::to_string(&value).expect("JSON values always serialise"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use exact::NUMBER_TOKEN;

    fn raw(text: &str) -> Option<Box<RawValue>> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn compact_members_are_stored_as_sent() {
        let text = r#"{"q":"caf\u00e9 \"x\"","n":[1,2.50,-0,1e400,12345678901234567890123],"o":{"a":null}}"#;
        assert_eq!(object_text("inputs", raw(text)).unwrap(), text);
        assert_eq!(value_text("output", raw("\"text\"")).unwrap().as_deref(), Some("\"text\""));
    }

    #[test]
    fn absent_and_null_members() {
        assert_eq!(object_text("inputs", None).unwrap(), "{}");
        assert_eq!(object_text("inputs", raw("null")).unwrap(), "{}");
        assert_eq!(value_text("output", raw("null")).unwrap(), None);
    }

    #[test]
    fn non_objects_are_refused_where_an_object_is_required() {
        for text in ["[1]", "\"s\"", "3", "true"] {
            let e = object_text("summary", raw(text)).unwrap_err();
            assert!(e.to_string().contains("summary must be a JSON object"), "{e}");
        }
    }

    #[test]
    fn what_values_refuse_is_refused() {
        // A RawValue accepts these (it only skips over strings); parsing into values does not.
        for text in [r#"{"a":"\ud800"}"#, r#"["\udc00x"]"#, r#"{"\ud83d":1}"#] {
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
            let e = value_text("output", raw(text)).unwrap_err();
            assert!(e.to_string().starts_with("output is not valid JSON"), "{e}");
            assert!(check_parses("x", text).is_err());
        }
        assert!(check_parses("x", "{\"a\":1} x").is_err());
        // A surrogate pair is one character.
        assert!(value_text("output", raw(r#""\ud83d\ude00""#)).is_ok());
    }

    #[test]
    fn repeated_and_escaped_keys_are_rewritten_as_values_read_them() {
        let cases = [
            (r#"{"a":1,"b":{"c":1,"c":2},"a":3}"#, r#"{"a":3,"b":{"c":2}}"#),
            (r#"{"\u0061":1}"#, r#"{"a":1}"#),
            (r#"[{"k":1},{"k":2}]"#, r#"[{"k":1},{"k":2}]"#),
        ];
        for (sent, stored) in cases {
            assert_eq!(value_text("output", raw(sent)).unwrap().as_deref(), Some(stored));
        }
        let wide: Vec<String> = (0..100).map(|i| format!("\"k{}\":{i}", i % 99)).collect();
        let wide = format!("{{{}}}", wide.join(","));
        assert!(!check_parses("x", &wide).unwrap());
        let distinct: Vec<String> = (0..100).map(|i| format!("\"k{i}\":{i}")).collect();
        assert!(check_parses("x", &format!("{{{}}}", distinct.join(","))).unwrap());
    }

    #[test]
    fn numbers_are_not_levels_and_the_number_key_is_read_as_values_read_it() {
        let n = MAX_MEMBER_DEPTH;
        for num in ["1", "-0", "1.5", "-2e300", "1e400", "123456789012345678901234567890"] {
            let text = format!("{}{num}{}", "[".repeat(n), "]".repeat(n));
            assert_eq!(check_parses("x", &text).ok(), Some(true), "{num}");
        }
        let key = format!(r#"{{"{NUMBER_TOKEN}":"12"}}"#);
        assert_eq!(serde_json::from_str::<Value>(&key).unwrap(), serde_json::json!(12));
        assert_eq!(value_text("output", raw(&key)).unwrap().as_deref(), Some("12"));
        let bad = format!(r#"{{"{NUMBER_TOKEN}":"x"}}"#);
        let more = format!(r#"{{"{NUMBER_TOKEN}":"1","b":2}}"#);
        let escaped = r#"{"$serde_json::private::Number":"1"}"#;
        for bad in [bad.as_str(), more.as_str()] {
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
            assert!(check_parses("x", bad).is_err(), "{bad}");
        }
        assert_eq!(serde_json::from_str::<Value>(escaped).unwrap(), serde_json::json!(1));
        assert_eq!(value_text("output", raw(escaped)).unwrap().as_deref(), Some("1"));
    }

    #[test]
    fn nesting_is_bounded_by_the_member_bound() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check_parses("x", &deep(MAX_MEMBER_DEPTH)).is_ok());
        let e = check_parses("inputs", &deep(MAX_MEMBER_DEPTH + 1)).unwrap_err();
        assert_eq!(e.to_string(), format!("inputs nests deeper than {MAX_MEMBER_DEPTH} levels"));
        let objects = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
        assert!(check_parses("x", &objects(MAX_MEMBER_DEPTH)).is_ok());
        assert!(check_parses("x", &objects(MAX_MEMBER_DEPTH + 1)).is_err());
        // A member cut from a body was skipped over without counting its depth: it is counted
        // when the member is walked.
        let body = format!(r#"{{"batch":[{{"inputs":{{"a":{}}}}}]}}"#, deep(MAX_MEMBER_DEPTH));
        assert!(serde_json::from_str::<Value>(&body).is_err(), "values refuse the body");
        let e = object_text("inputs", Some(raw_member(&body))).unwrap_err();
        assert!(e.to_string().contains("nests deeper"), "{e}");
    }

    /// The `inputs` member of the first item of `body`, cut as the call endpoints cut it.
    fn raw_member(body: &str) -> Box<RawValue> {
        #[derive(serde::Deserialize)]
        struct Item {
            inputs: Box<RawValue>,
        }
        #[derive(serde::Deserialize)]
        struct Batch {
            batch: Vec<Item>,
        }
        let batch: Batch = serde_json::from_str(body).unwrap();
        batch.batch.into_iter().next().unwrap().inputs
    }
}
