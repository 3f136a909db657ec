//! OTLP attribute values as JSON, and dotted attribute keys as nested objects — the shapes the
//! Weave server stores (`gen_ai.prompt.0.role` → `{"gen_ai": {"prompt": {"0": {"role": ..}}}}`).

use std::borrow::Cow;
use std::cell::OnceCell;

use base64::Engine;
use serde_json::{Map, Value};

use super::request::{AnyValue, KeyValue, Value as Any};
use super::tree::{Leaf, Tree};
use crate::member;
use crate::member::write::{Emit, List, Text, string};

/// One AnyValue as JSON: scalars as themselves, arrays and kvlists recursively, bytes as
/// standard base64, non-finite doubles as `"nan"`/`"inf"`/`"-inf"`, an empty value as null.
pub fn any_value(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(Any::String(s)) => Value::String((*s).to_owned()),
        Some(Any::Bool(b)) => Value::Bool(*b),
        Some(Any::Int(i)) => Value::from(*i),
        Some(Any::Double(d)) => match serde_json::Number::from_f64(*d) {
            Some(n) => Value::Number(n),
            None if d.is_nan() => Value::from("nan"),
            None if *d > 0.0 => Value::from("inf"),
            None => Value::from("-inf"),
        },
        Some(Any::Array(a)) => Value::Array(a.iter().map(any_value).collect()),
        Some(Any::Kvlist(kv)) => Value::Object(
            kv.iter()
                .map(|kv| (kv.key.to_owned(), kv.value.as_ref().map_or(Value::Null, any_value)))
                .collect(),
        ),
        Some(Any::Bytes(b)) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        // An index into a profiles string table: meaningless without one, as in traces.
        Some(Any::StringIndex(_)) => Value::Null,
    }
}

/// Whether a string attribute is read as JSON: its first byte opens an object or an array.
fn holds_json(s: &str) -> bool {
    s.starts_with('{') || s.starts_with('[')
}

/// An attribute value; a string that holds a JSON object or array (how most instrumentations
/// send structured inputs) is parsed.
pub fn attribute_value(v: Option<&AnyValue>) -> Value {
    // Parsed from the attribute itself: a message text is not copied to be parsed.
    if let Some(Any::String(s)) = v.and_then(|v| v.value.as_ref())
        && holds_json(s)
        && let Ok(parsed) = serde_json::from_str::<Value>(s)
    {
        return parsed;
    }
    v.map_or(Value::Null, any_value)
}

/// A span attribute's value: decoded, a JSON text kept as it was sent, a string borrowed from
/// the request, or any other value read from the request as it is.
#[derive(Debug)]
pub enum Attr<'a> {
    Value(Value),
    Text(JsonText<'a>),
    Str(&'a str),
    Any(AnyAttr<'a>),
}

impl Attr<'_> {
    pub fn leaf(&self) -> Leaf<'_> {
        match self {
            Attr::Value(v) => Leaf::Value(Cow::Borrowed(v)),
            Attr::Text(t) => Leaf::Text(t),
            Attr::Str(s) => Leaf::Str(s),
            Attr::Any(a) => Leaf::Any(a),
        }
    }
}

/// An attribute that holds no string: a number, a bool, bytes, an array, a kvlist, or nothing.
/// It is written into the call's members from the request as it is, and decoded into a value
/// only if a rule reads into it. Decoding every number into a `serde_json` value (whose
/// arbitrary-precision numbers are strings) cost allocations no span needed: 1.07× the ingest
/// role's spans per CPU-s (docs/benchmarks.md, "Calls staged where they are made").
#[derive(Debug)]
pub struct AnyAttr<'a> {
    value: Option<&'a AnyValue<'a>>,
    decoded: OnceCell<Value>,
}

impl<'a> AnyAttr<'a> {
    fn new(value: Option<&'a AnyValue<'a>>) -> AnyAttr<'a> {
        AnyAttr { value, decoded: OnceCell::new() }
    }

    fn any(&self) -> Option<&'a Any<'a>> {
        self.value.and_then(|v| v.value.as_ref())
    }

    /// The value [`any_value`] decodes (once).
    pub fn value(&self) -> &Value {
        self.decoded.get_or_init(|| self.value.map_or(Value::Null, any_value))
    }

    pub fn is_object(&self) -> bool {
        matches!(self.any(), Some(Any::Kvlist(_)))
    }

    /// Whether it decodes to neither an object nor a list.
    pub fn is_scalar(&self) -> bool {
        !matches!(self.any(), Some(Any::Kvlist(_) | Any::Array(_)))
    }

    /// Whether it counts as present (what the rules' truthiness says of its decoded value),
    /// read without decoding.
    pub fn truthy(&self) -> bool {
        match self.any() {
            None | Some(Any::StringIndex(_)) => false,
            Some(Any::Bool(b)) => *b,
            Some(Any::Int(i)) => *i != 0,
            // NaN and the infinities decode to strings, which are present.
            Some(Any::Double(d)) => *d != 0.0,
            Some(Any::String(s)) => !s.is_empty(),
            Some(Any::Bytes(b)) => !b.is_empty(),
            Some(Any::Array(items)) => !items.is_empty(),
            Some(Any::Kvlist(kvs)) => !kvs.is_empty(),
        }
    }

    /// The integer it holds, read without decoding.
    pub fn int(&self) -> Option<i64> {
        match self.any() {
            Some(Any::Int(i)) => Some(*i),
            _ => None,
        }
    }

    /// Its nesting depth, as [`crate::limits::json_depth`] counts the decoded value; a kvlist
    /// that repeats a key may count deeper than its value is, never shallower.
    pub fn depth(&self) -> usize {
        self.value.map_or(0, any_depth)
    }
}

fn any_depth(v: &AnyValue) -> usize {
    let below = match &v.value {
        Some(Any::Array(items)) => items.iter().map(any_depth).max(),
        Some(Any::Kvlist(kvs)) => kvs.iter().map(|kv| kv.value.as_ref().map_or(0, any_depth)).max(),
        _ => return 0,
    };
    1 + below.unwrap_or(0)
}

impl Emit for AnyAttr<'_> {
    fn emit(&self, out: &mut Text) {
        match self.value {
            Some(v) => v.emit(out),
            None => out.push_str("null"),
        }
    }
}

/// An AnyValue written as the JSON text of [`any_value`]'s value, without decoding it.
impl Emit for AnyValue<'_> {
    fn emit(&self, out: &mut Text) {
        match &self.value {
            None | Some(Any::StringIndex(_)) => out.push_str("null"),
            Some(Any::String(s)) => string(out, s),
            Some(Any::Bool(b)) => out.push_str(if *b { "true" } else { "false" }),
            Some(Any::Int(i)) => i.emit(out),
            Some(Any::Double(d)) if d.is_finite() => {
                // serde_json's own formatting, as `Number::from_f64` makes the number's text.
                let mut buf = [0u8; 40];
                let mut w = &mut buf[..];
                serde_json::to_writer(&mut w, d).expect("a float's text fits in 40 bytes");
                let len = 40 - w.len();
                out.push_str(std::str::from_utf8(&buf[..len]).expect("a float's text is ASCII"));
            }
            Some(Any::Double(_)) | Some(Any::Bytes(_)) => any_value(self).emit(out),
            Some(Any::Array(items)) => List(items).emit(out),
            // Its keys may repeat: the decoded map decides which value stays, and where.
            Some(Any::Kvlist(_)) => any_value(self).emit(out),
        }
    }
}

/// An attribute that holds a JSON object or array as text, as most instrumentations send
/// messages (`gen_ai.input.messages`). It is walked once ([`member::depth_as_sent`]: it parses,
/// within the member bound, no key repeated) and written into the call's members as it was
/// sent; it is parsed into values only if a rule reads into it. Parsing the messages and writing
/// them out again was a fifth of a span's conversion (docs/benchmarks.md, "Message texts kept
/// as sent").
#[derive(Debug)]
pub struct JsonText<'a> {
    text: &'a str,
    depth: usize,
    parsed: OnceCell<Value>,
}

impl<'a> JsonText<'a> {
    /// `text` when it can be kept as sent: a JSON object or array (the rule of
    /// [`attribute_value`]) that [`member::depth_as_sent`] accepts.
    fn new(text: &'a str) -> Option<JsonText<'a>> {
        if !holds_json(text) {
            return None;
        }
        let depth = member::depth_as_sent(text)?;
        Some(JsonText { text, depth, parsed: OnceCell::new() })
    }

    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Its nesting depth, as [`crate::limits::json_depth`] counts it.
    pub fn depth(&self) -> usize {
        self.depth
    }

    pub fn is_object(&self) -> bool {
        self.text.starts_with('{')
    }

    /// `{}` or `[]`, whatever the whitespace inside.
    pub fn is_empty(&self) -> bool {
        self.text[1..].trim_start().starts_with(['}', ']'])
    }

    /// The text parsed (once).
    pub fn value(&self) -> &Value {
        // The walk accepted it, so it parses; a string is the answer `attribute_value` gives
        // to text that does not.
        self.parsed.get_or_init(|| {
            serde_json::from_str(self.text).unwrap_or_else(|_| Value::String(self.text.to_owned()))
        })
    }
}

/// A span attribute's value: a JSON text kept as sent where it can be (see [`JsonText`]), a
/// string that holds no JSON borrowed as it is, else [`attribute_value`].
pub fn span_attribute<'a>(v: Option<&'a AnyValue<'a>>) -> Attr<'a> {
    if let Some(Any::String(s)) = v.and_then(|v| v.value.as_ref()) {
        if let Some(text) = JsonText::new(s) {
            return Attr::Text(text);
        }
        if !holds_json(s) {
            return Attr::Str(s);
        }
        return Attr::Value(attribute_value(v));
    }
    Attr::Any(AnyAttr::new(v))
}

/// The flat attribute list, keys unsplit, values decoded.
pub fn flat<'a>(attrs: &[KeyValue<'a>]) -> Vec<(&'a str, Value)> {
    attrs.iter().map(|kv| (kv.key, attribute_value(kv.value.as_ref()))).collect()
}

/// Dotted keys as nested objects (the rule is [`Tree::insert_path`]'s).
pub fn nest<'a>(attrs: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Map<String, Value> {
    Tree::nest(attrs.into_iter().map(|(k, v)| (k, Leaf::Value(Cow::Borrowed(v))))).into_map()
}

/// `attrs` decoded and nested into one object.
pub fn nested(attrs: &[KeyValue]) -> Value {
    let flat = flat(attrs);
    Value::Object(nest(flat.iter().map(|(k, v)| (*k, v))))
}

/// Objects whose keys are exactly `"0"`..`"n-1"` become arrays, recursively: the indexed
/// attribute style (`gen_ai.prompt.0.content`) read back as the list it encodes. Objects that
/// stay objects are changed in place, not rebuilt.
pub fn index_maps_to_lists(v: Value) -> Value {
    match v {
        Value::Object(mut map) => {
            let mut index = itoa::Buffer::new();
            let is_list =
                !map.is_empty() && (0..map.len()).all(|i| map.contains_key(index.format(i)));
            if is_list {
                let items = (0..map.len()).map(|i| map.remove(index.format(i)).expect("present"));
                Value::Array(items.map(index_maps_to_lists).collect())
            } else {
                for v in map.values_mut() {
                    *v = index_maps_to_lists(std::mem::take(v));
                }
                Value::Object(map)
            }
        }
        Value::Array(mut items) => {
            for v in &mut items {
                *v = index_maps_to_lists(std::mem::take(v));
            }
            Value::Array(items)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn dotted_keys_nest_and_indexed_maps_become_lists() {
        let attrs = [
            ("gen_ai.prompt.0.role".to_owned(), json!("user")),
            ("gen_ai.prompt.0.content".to_owned(), json!("hi")),
            ("gen_ai.prompt.1.role".to_owned(), json!("assistant")),
            ("a".to_owned(), json!(1)),
            ("a.b".to_owned(), json!(2)),
        ];
        let nested = nest(attrs.iter().map(|(k, v)| (k.as_str(), v)));
        assert_eq!(nested["gen_ai"]["prompt"]["0"]["content"], "hi");
        assert_eq!(nested["a"], json!({"": 1, "b": 2}));
        let prompt = index_maps_to_lists(nested["gen_ai"]["prompt"].clone());
        assert_eq!(prompt, json!([{"role": "user", "content": "hi"}, {"role": "assistant"}]));
    }

    #[test]
    fn object_values_merge_with_dotted_keys_in_either_order() {
        let parsed = json!({"x": 1, "o": {"p": 1}});
        let attrs = [("a", &parsed), ("a.y", &json!(2)), ("a.o.q", &json!(3))];
        assert_eq!(
            Value::Object(nest(attrs)),
            json!({"a": {"x": 1, "o": {"p": 1, "q": 3}, "y": 2}})
        );
        let (scalar, object) = (json!(2), json!({"x": 1}));
        let attrs = [("a.y", &scalar), ("a", &object), ("a", &scalar)];
        assert_eq!(Value::Object(nest(attrs)), json!({"a": {"y": 2, "x": 1, "": 2}}));
    }

    #[test]
    fn wide_objects_keep_first_positions_and_last_values() {
        let values: Vec<Value> = (0..100).map(|i| json!(i)).collect();
        let keys: Vec<String> = (0..50).map(|i| format!("k.{i}")).collect();
        // Every key twice: the second value wins, in the first one's place.
        let attrs = keys.iter().chain(&keys).zip(&values).map(|(k, v)| (k.as_str(), v));
        let nested = nest(attrs);
        let k = nested["k"].as_object().unwrap();
        assert_eq!(
            k.keys().cloned().collect::<Vec<_>>(),
            keys.iter().map(|k| &k[2..]).collect::<Vec<_>>()
        );
        assert_eq!(k["0"], 50);
        assert_eq!(k["49"], 99);
    }

    /// A random AnyValue: every kind, awkward numbers and strings, nesting, repeated keys.
    fn random_any(rng: &mut fastrand::Rng, depth: usize) -> AnyValue<'static> {
        const STRINGS: &[&str] = &["", "a", "\"q\"", "line\n", "résumé", "\u{1}", "{\"a\":1}"];
        const KEYS: &[&str] = &["a", "b", "", "a.b", "\"k"];
        let value = match rng.usize(0..if depth < 4 { 11 } else { 8 }) {
            0 => None,
            1 => Some(Any::Bool(rng.bool())),
            2 => {
                let any = rng.i64(..);
                Some(Any::Int(rng.choice([0, 1, -1, i64::MIN, i64::MAX, any]).unwrap()))
            }
            3 => Some(Any::Double(
                rng.choice([
                    0.0,
                    -0.0,
                    0.7,
                    1e21,
                    1e-7,
                    f64::NAN,
                    f64::INFINITY,
                    f64::MIN_POSITIVE,
                ])
                .unwrap(),
            )),
            4 => Some(Any::Double(f64::from_bits(rng.u64(..)))),
            5 => Some(Any::String(rng.choice(STRINGS).unwrap())),
            6 => Some(Any::Bytes(&b"\x00\xffbytes"[..rng.usize(0..8)])),
            7 => Some(Any::StringIndex(3)),
            8 | 9 => {
                Some(Any::Array((0..rng.usize(0..4)).map(|_| random_any(rng, depth + 1)).collect()))
            }
            _ => Some(Any::Kvlist(
                (0..rng.usize(0..4))
                    .map(|_| KeyValue {
                        key: rng.choice(KEYS).unwrap(),
                        value: rng.bool().then(|| random_any(rng, depth + 1)),
                    })
                    .collect(),
            )),
        };
        AnyValue { value }
    }

    #[test]
    fn values_read_from_the_request_write_what_decoded_values_write() {
        let mut rng = fastrand::Rng::with_seed(12);
        for _ in 0..20_000 {
            let v = random_any(&mut rng, 0);
            let attr = AnyAttr::new(Some(&v));
            let decoded = any_value(&v);
            let direct = crate::member::write::to_text(&attr, 0);
            let through = crate::member::write::to_text(&decoded, 0);
            assert_eq!(direct, through, "{v:?}");
            assert_eq!(direct, serde_json::to_string(&decoded).unwrap());
            // Never shallower than the decoded value (repeated keys may count deeper).
            let depth = crate::limits::json_depth(&decoded, 100);
            assert!(attr.depth() >= depth, "{v:?}");
            let repeats = matches!(&v.value, Some(Any::Kvlist(_))) || direct.contains("{\"");
            if !repeats {
                assert_eq!(attr.depth(), depth, "{v:?}");
            }
            assert_eq!(attr.is_object(), decoded.is_object());
            assert_eq!(attr.truthy(), super::super::attributes::truthy_value(&decoded), "{v:?}");
            assert_eq!(
                attr.int(),
                decoded.as_i64().filter(|_| matches!(v.value, Some(Any::Int(_))))
            );
            assert_eq!(attr.value(), &decoded);
        }
        let none = AnyAttr::new(None);
        assert_eq!((none.depth(), none.value()), (0, &Value::Null));
    }

    #[test]
    fn values_decode_like_the_weave_server() {
        let v = |x| AnyValue { value: Some(x) };
        assert_eq!(any_value(&v(Any::Double(f64::NAN))), json!("nan"));
        assert_eq!(any_value(&v(Any::Bytes(&[1, 2, 3]))), json!("AQID"));
        assert_eq!(any_value(&v(Any::Int(i64::MAX))), json!(i64::MAX));
        assert_eq!(attribute_value(Some(&v(Any::String("{\"a\": [1]}")))), json!({"a": [1]}));
        assert_eq!(attribute_value(Some(&v(Any::String("[not json")))), json!("[not json"));
        assert_eq!(attribute_value(Some(&v(Any::String(" {}")))), json!(" {}"));
    }
}
