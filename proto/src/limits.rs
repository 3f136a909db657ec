//! The bounds on everything a client can make deep, wide or long, in one place
//! (`docs/limits.md` lists them for users). Each write path (HTTP JSON, OTLP protobuf and JSON,
//! gRPC, the Kafka consumer) enforces them before the data is stored, so no stored value can
//! later fail to read back, and no single request can exhaust the stack or the heap.

use serde_json::Value;

use crate::ProtoError;
use crate::member::Specials;

/// Deepest nesting of objects and arrays in any stored JSON value: exactly what `serde_json`
/// accepts when it parses (its limit of 128 counts the level it refuses), so every stored value
/// reads back; far below what recursion on a thread's stack can take.
pub const MAX_JSON_DEPTH: usize = 127;
/// Deepest nesting of one stored member (a call's inputs, output, attributes, summary or
/// otel_dump; an object's value): the deepest a request body can carry one (the shallowest
/// body puts it three levels down), so every answer that wraps it still parses.
pub const MAX_MEMBER_DEPTH: usize = MAX_JSON_DEPTH - 3;

/// OTLP: spans in one export request (the OpenTelemetry SDKs send at most 512 by default).
pub const MAX_SPANS_PER_REQUEST: usize = 50_000;
/// OTLP: attributes, events, links and array/kvlist elements in one export request, together.
/// Each costs ~60–300 bytes once decoded even when it is empty on the wire (2 bytes), so this
/// bounds what a small body can decode into.
pub const MAX_VALUES_PER_REQUEST: usize = 1_000_000;
/// OTLP: the most attributes, events, links and list values in the lists of one message of an
/// export request, together (a span, an event, a resource, an array...); a scope's spans and
/// log records have their own bounds. OpenTelemetry SDKs keep 128 attributes, events and links
/// per span by default. A 5 MiB body of one span with a million attributes held ~420 MiB
/// resident under attack: its lists grow by doubling, and the allocator keeps what they free
/// for a while.
pub const MAX_ITEMS_PER_MESSAGE: usize = 10_000;
/// OTLP: log records in one logs export request (the OpenTelemetry SDKs send at most 512 by
/// default).
pub const MAX_LOG_RECORDS_PER_REQUEST: usize = 50_000;
/// OTLP: the largest log record stored (its body, attributes and the rest, as JSON text). Below
/// Kafka's default record size, so a record always travels in one Kafka record.
pub const MAX_LOG_RECORD_BYTES: usize = 512 * 1024;
/// Log records of one span merged into its call on read: past this many, the rest stay
/// readable through `/otel/logs/query` only.
pub const MAX_LOG_RECORDS_PER_CALL: usize = 1000;
/// Log records one `/otel/logs/query` returns at most.
pub const MAX_LOG_QUERY_LIMIT: u64 = 1000;
/// OTLP: the longest attribute key, in bytes.
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 1024;
/// OTLP: the most dot-separated segments of an attribute key (each becomes one level of
/// nesting: `gen_ai.prompt.0.role` has four).
pub const MAX_ATTRIBUTE_KEY_SEGMENTS: usize = 32;

/// `expand_columns` in one calls query.
pub const MAX_EXPAND_COLUMNS: usize = 64;
/// The query language's own bounds (path segments, terms, sort terms, depth, string bytes).
pub use heddle_ql::limits::{
    MAX_PATH_SEGMENTS, MAX_QUERY_DEPTH, MAX_QUERY_STRING_BYTES, MAX_QUERY_TERMS, MAX_SORT_TERMS,
};
/// Ids in one id-list filter (`call_ids`, `trace_ids`, `parent_ids`, ...), together.
pub const MAX_FILTER_IDS: usize = 10_000;

/// Refs in one `/refs/read_batch`.
pub const MAX_REFS_PER_BATCH: usize = 1000;
/// The largest answer `/refs/read_batch` or one page of expanded calls builds, in bytes.
pub const MAX_RESOLVED_BYTES: usize = 64 * 1024 * 1024;

/// Edits in one `/table/update`.
pub const MAX_TABLE_UPDATES: usize = 100_000;
/// Rows of one table (a dataset version).
pub const MAX_TABLE_ROWS: usize = 1_000_000;

/// Tags and aliases (docs/api/objects.md#tags-and-aliases): the longest tag and alias, in
/// characters; names in one add, set or remove request; tags one version may hold and aliases
/// one object may hold; names `/tags` or `/aliases` lists at most.
pub const MAX_TAG_CHARS: usize = 256;
pub const MAX_ALIAS_CHARS: usize = 128;
pub const MAX_NAMES_PER_REQUEST: usize = 100;
pub const MAX_TAGS_PER_VERSION: usize = 1000;
pub const MAX_ALIASES_PER_OBJECT: usize = 1000;
pub const MAX_LISTED_NAMES: usize = 10_000;

/// Annotation queues (docs/api/annotation-queues.md): the longest name and description
/// in characters; scorer refs and display fields of one queue or add, and the longest of each in
/// bytes; calls in one add; items one queue may hold; queue ids in one stats request.
pub const MAX_QUEUE_NAME_CHARS: usize = 256;
pub const MAX_QUEUE_DESCRIPTION_CHARS: usize = 10_000;
pub const MAX_QUEUE_LIST_ENTRIES: usize = 100;
pub const MAX_QUEUE_ENTRY_BYTES: usize = 1024;
pub const MAX_QUEUE_ADD_CALLS: usize = 1000;
pub const MAX_QUEUE_ITEMS: usize = 10_000;
pub const MAX_QUEUE_STATS_IDS: usize = 1000;

/// Checks that `text` is a member that reads back: JSON that parses into values, at most
/// [`MAX_MEMBER_DEPTH`] deep ([`crate::member::check_parses`], one walk that builds nothing).
pub fn check_json_text(what: &str, text: &str) -> Result<(), ProtoError> {
    crate::member::check_parses(what, text).map(|_| ())
}

/// The depth bound of [`check_json_text`] alone, for text written here from values (well formed
/// by construction, so not walked in full).
pub fn check_written_depth(what: &str, text: &str) -> Result<(), ProtoError> {
    if text_depth(text, MAX_MEMBER_DEPTH) > MAX_MEMBER_DEPTH {
        return Err(ProtoError::invalid(format!(
            "{what} nests deeper than {MAX_MEMBER_DEPTH} levels"
        )));
    }
    Ok(())
}

/// What JSON text will parse into: its deepest nesting, how many objects and arrays it holds,
/// about how many values in all (objects, arrays and scalars: one more per comma), and the most
/// items of one array or members of one object. Found in one pass over the bytes, before any
/// parsing; meaningful for well-formed text only (the caller parses it afterwards).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JsonShape {
    pub depth: usize,
    pub containers: usize,
    pub values: usize,
    /// Each array or object parses into one vector grown by doubling.
    pub widest: usize,
}

impl JsonShape {
    /// The shape of a parsed value: what [`json_shape`] finds in its text when no object of it
    /// repeats a key (a parsed object keeps one member per key).
    pub fn of(v: &Value) -> JsonShape {
        let mut shape = JsonShape::default();
        let mut stack = vec![(v, 0)];
        while let Some((v, depth)) = stack.pop() {
            shape.values += 1;
            let before = stack.len();
            match v {
                Value::Array(a) => stack.extend(a.iter().map(|c| (c, depth + 1))),
                Value::Object(o) => stack.extend(o.values().map(|c| (c, depth + 1))),
                _ => continue,
            }
            shape.containers += 1;
            shape.depth = shape.depth.max(depth + 1);
            shape.widest = shape.widest.max(stack.len() - before);
        }
        shape
    }
}

/// The [`JsonShape`] of `text`; counting stops once the depth passes `stop_at`.
pub fn json_shape(text: &[u8], stop_at: usize) -> JsonShape {
    let mut shape = JsonShape::default();
    // Open containers (`[` or `{`) and the items or members met in each so far, innermost last:
    // whether a string is a key or a value.
    let mut open: Vec<(u8, usize)> = Vec::new();
    // One more item of the innermost array, or member of the innermost object.
    let item = |open: &mut Vec<(u8, usize)>, shape: &mut JsonShape| {
        if let Some((_, n)) = open.last_mut() {
            *n += 1;
            shape.widest = shape.widest.max(*n);
        }
    };
    // The last byte outside strings and whitespace; the top level reads as after a comma.
    let mut prev = b',';
    let mut specials = Specials::new(text);
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        i += 1;
        match b {
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            b'"' => {
                let in_object = open.last().is_some_and(|(c, _)| *c == b'{');
                let key = in_object && matches!(prev, b'{' | b',');
                shape.values += usize::from(!key);
                if key || !in_object {
                    item(&mut open, &mut shape);
                }
                // Through the string: its bytes are most of the text, so they are skipped a run
                // at a time, up to the closing quote or an escape (whose next byte is skipped).
                // Most strings are keys and short values: the bytes that can end a run are
                // found 64 at a time, once ([`Specials`]), where a search per run (`memchr2`)
                // cost a third of the pass in setting up.
                loop {
                    let Some(at) = specials.next(i) else {
                        return shape;
                    };
                    i = at + 1;
                    match text[at] {
                        b'"' => break,
                        b'\\' => i += 1,
                        // A control byte, which JSON does not allow here: the parse refuses it.
                        _ => {}
                    }
                }
            }
            b'[' | b'{' => {
                if open.last().is_some_and(|(c, _)| *c == b'[') {
                    item(&mut open, &mut shape);
                }
                open.push((b, 0));
                shape.containers += 1;
                shape.values += 1;
                shape.depth = shape.depth.max(open.len());
                if shape.depth > stop_at {
                    return shape;
                }
            }
            b']' | b'}' => {
                open.pop();
            }
            b',' | b':' => {}
            // The first byte of a number, `true`, `false` or `null`.
            _ if matches!(prev, b'[' | b',' | b':') => {
                shape.values += 1;
                if open.last().is_some_and(|(c, _)| *c == b'[') {
                    item(&mut open, &mut shape);
                }
            }
            _ => {}
        }
        prev = b;
    }
    shape
}

fn text_depth(text: &str, stop_at: usize) -> usize {
    json_shape(text.as_bytes(), stop_at).depth
}

/// Values (objects, arrays and scalars) in one JSON request body. Each costs ~100 bytes once
/// parsed however short it is in the text (`0,` is two bytes), so this bounds what one body can
/// parse into (~400 MB, which the memory budget then shares out).
pub const MAX_JSON_VALUES: usize = 4_000_000;

/// The nesting depth of a value (a scalar is 0, `{}` and `[]` are 1), found without recursion,
/// and without looking further down than `stop_at`.
pub fn json_depth(v: &Value, stop_at: usize) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    // Scalars are not pushed: only containers can make the value deeper.
    let deeper = |c: &&Value| c.is_array() || c.is_object();
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(items) => {
                stack.extend(items.iter().filter(deeper).map(|c| (c, depth + 1)))
            }
            Value::Object(map) => stack.extend(map.values().filter(deeper).map(|c| (c, depth + 1))),
            _ => continue,
        }
        deepest = deepest.max(depth + 1);
        if deepest > stop_at {
            return deepest;
        }
    }
    deepest
}

/// [`json_depth`] as a check of one member: at most [`MAX_MEMBER_DEPTH`] deep, the same bound
/// [`check_json_text`] puts on its text.
pub fn check_json_depth(what: &str, v: &Value) -> Result<(), ProtoError> {
    check_depth_under(what, std::iter::once(v), 0)
}

/// [`check_json_depth`] of an object held as its map.
pub fn check_map_depth(what: &str, map: &serde_json::Map<String, Value>) -> Result<(), ProtoError> {
    check_depth_under(what, map.values(), 1)
}

fn check_depth_under<'a>(
    what: &str,
    values: impl IntoIterator<Item = &'a Value>,
    above: usize,
) -> Result<(), ProtoError> {
    let limit = MAX_MEMBER_DEPTH - above;
    if values.into_iter().any(|v| json_depth(v, limit) > limit) {
        return Err(ProtoError::invalid(format!(
            "{what} nests deeper than {MAX_MEMBER_DEPTH} levels"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn text_depth_limit_is_the_parsers() {
        assert!(check_json_text("inputs", &nested(MAX_MEMBER_DEPTH)).is_ok());
        let err = check_json_text("inputs", &nested(MAX_MEMBER_DEPTH + 1)).unwrap_err();
        assert!(err.to_string().contains("deeper than 124"), "{err}");
        // The parser's own limit, which members stay three levels under.
        assert!(serde_json::from_str::<Value>(&nested(MAX_JSON_DEPTH + 1)).is_err());
        // Brackets inside strings do not count.
        let quoted = format!("[{:?}]", "[".repeat(500) + "\\\"{");
        assert!(check_json_text("x", &quoted).is_ok(), "{quoted}");
        // Whatever the checker accepts, serde_json parses back into a value.
        assert!(serde_json::from_str::<Value>(&nested(MAX_JSON_DEPTH)).is_ok());
        assert!(check_json_text("x", "{\"a\": ").unwrap_err().to_string().contains("not valid"));
        // A million levels are refused without exhausting the stack.
        assert!(check_json_text("x", &nested(1_000_000)).is_err());
    }

    #[test]
    fn shape_counts_values_outside_strings() {
        let shape = json_shape(br#"{"a": [1, 2, {"b": "x,[{\"", "d": null}], "c": {}}"#, 10);
        assert_eq!(shape, JsonShape { depth: 3, containers: 4, values: 8, widest: 3 });
        assert_eq!(json_shape(b"[[],[],[]]", 10).values, 4);
        assert_eq!(json_shape(b" -1.5e3 ", 10).values, 1);
        assert_eq!(json_shape(b"[]", 10).values, 1);
        for (text, widest) in [
            (&br#"[]"#[..], 0),
            (br#"[1, "a", [], {}, null]"#, 5),
            (br#"{"a": 1, "b": [1, 2, 3], "c": {"d": "x,y"}}"#, 3),
            (br#"{"a": [[1, 2], [3, 4, 5, 6]], "b": {}}"#, 4),
            (br#"["{\"a\": [1, 2, 3, 4, 5, 6]}", -1.5e3]"#, 2),
        ] {
            assert_eq!(json_shape(text, 10).widest, widest, "{}", String::from_utf8_lossy(text));
        }
    }

    /// The shape of random JSON, strings of every length and escape placed across the blocks
    /// the string search reads, is what the parsed value has.
    #[test]
    fn shape_is_the_parsed_values() {
        const PIECES: &[&str] =
            &["a", "\\\"", "\\\\", "\\n", "\\u00e9", "é", "[{,:}]", "0123456789abcdef", " "];
        fn string(r: &mut fastrand::Rng, out: &mut String) {
            out.push('"');
            for _ in 0..r.usize(..12) {
                out.push_str(PIECES[r.usize(..PIECES.len())]);
            }
            out.push('"');
        }
        fn value(r: &mut fastrand::Rng, out: &mut String, depth: usize) {
            match r.usize(..if depth > 0 { 6 } else { 3 }) {
                0 => out.push_str(["1", "-2.5e3", "true", "null"][r.usize(..4)]),
                1 | 2 => string(r, out),
                3 | 4 => {
                    out.push('{');
                    for i in 0..r.usize(..6) {
                        out.push_str(if i > 0 { ", " } else { "" });
                        out.push_str(&format!("\"k{i}\": "));
                        value(r, out, depth - 1);
                    }
                    out.push('}');
                }
                _ => {
                    out.push('[');
                    for i in 0..r.usize(..6) {
                        out.push_str(if i > 0 { "," } else { "" });
                        value(r, out, depth - 1);
                    }
                    out.push(']');
                }
            }
        }
        let mut r = fastrand::Rng::with_seed(11);
        for _ in 0..3_000 {
            let mut text = String::new();
            value(&mut r, &mut text, 5);
            let parsed: Value = serde_json::from_str(&text).expect(&text);
            assert_eq!(json_shape(text.as_bytes(), 10), JsonShape::of(&parsed), "{text}");
        }
    }

    #[test]
    fn value_depth_without_recursion() {
        assert_eq!(json_depth(&json!(1), 10), 0);
        assert_eq!(json_depth(&json!({"a": [1, {"b": {}}]}), 10), 4);
        let mut deep = json!(1);
        for _ in 0..2_000 {
            deep = Value::Array(vec![deep]);
        }
        // Stops looking once past the bound.
        assert_eq!(json_depth(&deep, MAX_MEMBER_DEPTH), MAX_MEMBER_DEPTH + 1);
    }
}
