//! A call's JSON members (inputs, output, attributes, summary, otel_dump) as they are stored: the
//! text the client sent, checked, not rebuilt (docs/storage.md#json-members).
//!
//! Parsing each member into values only to write the values out again was a fifth of the CPU of
//! `calls/complete`. A member is instead walked once by `serde_json` without building anything:
//! the walk accepts exactly what parsing into a [`Value`] accepts (the grammar, and string escapes
//! including a lone UTF-16 surrogate, which it refuses), within the member's nesting bound, so
//! every later reader that parses the stored text succeeds. One spelling is rewritten through
//! values instead: an object that repeats a key (or has a key written with escapes, which the
//! walk cannot compare without copying). Parsed, such an object keeps the last value of the key;
//! SQLite's JSON functions would read the first, so a filter could disagree with the call it
//! returns.

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;

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

/// Refuses text that would not parse into a [`Value`], or nests deeper than
/// [`MAX_MEMBER_DEPTH`]; `Ok(true)` when it is stored as it is.
pub fn check_parses(what: &str, text: &str) -> Result<bool, ProtoError> {
    let (walk, walked) = Walk::run(text);
    match walked {
        Ok(()) => Ok(!walk.rewrite),
        Err(_) if walk.depth > MAX_MEMBER_DEPTH => {
            Err(ProtoError::invalid(format!("{what} nests deeper than {MAX_MEMBER_DEPTH} levels")))
        }
        Err(e) => Err(ProtoError::invalid(format!("{what} is not valid JSON: {e}"))),
    }
}

/// The nesting depth of `text` (0 for a scalar) when it can be stored as it is: it parses into a
/// [`Value`] within [`MAX_MEMBER_DEPTH`] and repeats no key. `None` when it would not parse or
/// must be rewritten, which the caller then does through values.
pub fn depth_as_sent(text: &str) -> Option<usize> {
    let (walk, walked) = Walk::run(text);
    (walked.is_ok() && !walk.rewrite).then_some(walk.deepest)
}

fn member_text(what: &str, raw: Box<RawValue>) -> Result<String, ProtoError> {
    if check_parses(what, raw.get())? {
        return Ok(Box::<str>::from(raw).into_string());
    }
    let value: Value = serde_json::from_str(raw.get())
        .map_err(|e| ProtoError::invalid(format!("{what} is not valid JSON: {e}")))?;
    Ok(serde_json::to_string(&value).expect("JSON values always serialise"))
}

/// The walk's state: the keys of the objects being walked, innermost last (borrowed from the
/// text), whether the text must be rewritten through values, and the objects and arrays open.
/// The depth is counted here: a member cut from a body as a `RawValue` was skipped over by a
/// parser that does not count it, and the member's bound is below the parser's own.
struct Walk<'de> {
    text: &'de str,
    keys: Vec<&'de str>,
    rewrite: bool,
    depth: usize,
    /// The deepest `depth` reached.
    deepest: usize,
}

/// The key under which serde_json (built with `arbitrary_precision`, as heddle is) hands a number
/// to a visitor as a map of one entry; serde_json does not export it.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// The first keys of an object are checked for a repeat pairwise as they come; an object with
/// more is sorted at its end, so a wide object costs `n log n`, not `n²`.
const PAIRWISE_KEYS: usize = 16;

impl<'de> Walk<'de> {
    /// Walks the whole of `text`.
    fn run(text: &'de str) -> (Walk<'de>, serde_json::Result<()>) {
        let mut walk = Walk { text, keys: Vec::new(), rewrite: false, depth: 0, deepest: 0 };
        let mut de = serde_json::Deserializer::from_str(text);
        let walked = (&mut walk).deserialize(&mut de).and_then(|()| de.end());
        (walk, walked)
    }

    /// Enters an object or an array; past [`MAX_MEMBER_DEPTH`] the walk stops with `depth`
    /// left above it.
    fn enter<E: serde::de::Error>(&mut self) -> Result<(), E> {
        self.depth += 1;
        self.deepest = self.deepest.max(self.depth);
        if self.depth > MAX_MEMBER_DEPTH {
            return Err(E::custom("too deep"));
        }
        Ok(())
    }

    /// Whether an object of more than [`PAIRWISE_KEYS`] keys repeats one (its first keys were
    /// compared pairwise as they came).
    fn repeats_a_key(keys: &mut [&'de str]) -> bool {
        if keys.len() <= PAIRWISE_KEYS {
            return false;
        }
        keys.sort_unstable();
        keys.windows(2).any(|w| w[0] == w[1])
    }
}

impl<'de> DeserializeSeed<'de> for &mut Walk<'de> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Walk<'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.enter()?;
        while seq.next_element_seed(&mut *self)?.is_some() {}
        self.depth -= 1;
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut next = map.next_key::<Key<'de>>()?;
        if let Some(Key(Some(k))) = next
            && k == NUMBER_TOKEN
        {
            // A number, as serde_json hands over one it keeps as text: not a level of nesting.
            // Values read an object written with this key in the text as a number too, so
            // such a text is rewritten.
            let digits: String = map.next_value()?;
            digits.parse::<serde_json::Number>().map_err(A::Error::custom)?;
            self.rewrite |= self.text.as_bytes().as_ptr_range().contains(&k.as_ptr());
            return Ok(());
        }
        self.enter()?;
        let first = self.keys.len();
        while let Some(key) = next {
            // Once the text is to be rewritten, keys need no more checking: an object of a
            // million repeats of one key holds one key here, not a million.
            if !self.rewrite {
                match key.0 {
                    Some(k) if self.keys.len() - first < PAIRWISE_KEYS => {
                        self.rewrite = self.keys[first..].contains(&k);
                        self.keys.push(k);
                    }
                    Some(k) => self.keys.push(k),
                    None => self.rewrite = true,
                }
            }
            map.next_value_seed(&mut *self)?;
            next = map.next_key::<Key<'de>>()?;
        }
        if !self.rewrite && Walk::repeats_a_key(&mut self.keys[first..]) {
            self.rewrite = true;
        }
        self.keys.truncate(first);
        self.depth -= 1;
        Ok(())
    }
}

/// An object's key: borrowed from the text, or `None` when written with escapes.
struct Key<'de>(Option<&'de str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, k: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Some(k)))
            }
            fn visit_str<E>(self, _: &str) -> Result<Key<'de>, E> {
                Ok(Key(None))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(serde_json::from_str::<Value>(&bad).is_err());
        assert!(check_parses("x", &bad).is_err());
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
