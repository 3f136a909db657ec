//! The write-side preparation of JSON members for the query language: what ClickHouse's JSON
//! functions would read differently from the text, and the refs a member holds. Calls and
//! feedback store this beside their members.

use serde_json::Value;

/// What the query language needs of a JSON member beyond its text.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Indexed {
    /// `''`, or the member with every number replaced by a JSON string of its exact text, when
    /// some number's text would not survive ClickHouse's JSON functions (`1.0` reads back as
    /// `1`, `1e-05` as `0.00001`, `10**20` not at all). The query language reads numbers as
    /// their JSON text (docs/api/query.md#typing), and only a string keeps the text.
    pub q: String,
    /// Weave refs anywhere in the member (the `input_refs` / `output_refs` filters).
    pub refs: Vec<String>,
}

pub(super) fn index_json(text: &str) -> Indexed {
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return Indexed::default();
    };
    let mut out = Indexed::default();
    let mut lossy = false;
    scan(&value, &mut lossy, &mut out.refs);
    if lossy {
        quote_numbers(&mut value);
        out.q = serde_json::to_string(&value).expect("JSON values always serialise");
    }
    out
}

/// An integer ClickHouse reads as Int64/UInt64 and writes back with the same text.
fn exact_in_clickhouse(n: &serde_json::Number) -> bool {
    let text = n.to_string();
    !text.contains(['.', 'e', 'E'])
        && text != "-0"
        && (text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok())
}

fn is_ref(s: &str) -> bool {
    s.starts_with("weave:///") || s.starts_with("weave-trace-internal:///")
}

fn scan(v: &Value, lossy: &mut bool, refs: &mut Vec<String>) {
    match v {
        Value::Number(n) => *lossy |= !exact_in_clickhouse(n),
        Value::String(s) if is_ref(s) && !refs.contains(s) => refs.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|x| scan(x, lossy, refs)),
        Value::Object(map) => map.values().for_each(|x| scan(x, lossy, refs)),
        _ => {}
    }
}

fn quote_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => *v = Value::String(n.to_string()),
        Value::Array(items) => items.iter_mut().for_each(quote_numbers),
        Value::Object(map) => map.values_mut().for_each(quote_numbers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_clickhouse_would_rewrite_get_a_string_copy() {
        let plain = index_json(r#"{"n": 5, "m": -12, "u": 18446744073709551615, "s": "1.0"}"#);
        assert_eq!(plain.q, "", "integers survive ClickHouse's JSON functions");
        for (text, q) in [
            (r#"{"f": 1.0}"#, r#"{"f":"1.0"}"#),
            (r#"{"a": [1e-05, 2, true, null]}"#, r#"{"a":["1e-05","2",true,null]}"#),
            (r#"{"z": -0}"#, r#"{"z":"-0"}"#),
            (r#"{"big": 100000000000000000000}"#, r#"{"big":"100000000000000000000"}"#),
            ("2.5", r#""2.5""#),
        ] {
            assert_eq!(index_json(text).q, q, "{text}");
        }
    }

    #[test]
    fn refs_anywhere_in_the_member() {
        let i = index_json(
            r#"{"a": {"b": ["weave:///e/p/object/x:1", "weave:///e/p/object/x:1"]},
                "c": "weave:///e/p/op/f:2", "d": "not a ref", "e": "weave-trace-internal:///x"}"#,
        );
        assert_eq!(
            i.refs,
            ["weave:///e/p/object/x:1", "weave:///e/p/op/f:2", "weave-trace-internal:///x"]
        );
        assert_eq!(index_json("not json"), Indexed::default());
    }
}
