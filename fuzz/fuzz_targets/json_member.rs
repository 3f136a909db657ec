//! A call's JSON member as a client sends it: `member::value_text` on arbitrary text.
//!
//! Properties (docs/fuzzing.md): nothing panics; the walk accepts exactly what parsing into
//! values accepts within the member's depth bound; what is stored parses into the same value as
//! what was sent; text stored as sent is byte for byte the text sent; stored text has no
//! object that repeats a key; and the shape a body is charged by before it is parsed
//! (`limits::json_shape`) is the parsed value's, where no object repeats a key.
#![no_main]

use heddle_proto::{limits, member};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use serde_json::value::RawValue;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // What a member may be: JSON that parses into values, at most the member bound deep.
    let parsed = serde_json::from_str::<Value>(text).map_err(|e| e.to_string()).and_then(|v| {
        if limits::json_depth(&v, limits::MAX_MEMBER_DEPTH) <= limits::MAX_MEMBER_DEPTH {
            Ok(v)
        } else {
            Err("too deep".to_owned())
        }
    });
    // A parsed object keeps one member per key: the text's shape is the value's when no object
    // repeats one.
    if let (Ok(v), Some(false)) = (&parsed, member::repeats_a_key(text)) {
        assert_eq!(limits::json_shape(data, usize::MAX), limits::JsonShape::of(v), "{text:?}");
    }
    // As a member arrives: a RawValue cut from the body (syntax checked, escapes not).
    let Ok(raw) = serde_json::from_str::<Box<RawValue>>(text) else {
        assert!(parsed.is_err(), "values accept what a RawValue refuses: {text:?}");
        return;
    };
    let sent = raw.get().to_owned();
    let stored = member::value_text("output", Some(raw));
    match (&parsed, stored) {
        (Ok(Value::Null), Ok(None)) => {}
        (Ok(value), Ok(Some(stored))) => {
            let back: Value = serde_json::from_str(&stored).expect("stored text parses");
            assert_eq!(&back, value, "{text:?} stored as {stored:?}");
            assert_eq!(
                member::repeats_a_key(&stored),
                Some(false),
                "{text:?} stored as {stored:?}"
            );
            if member::check_parses("x", &sent).unwrap() {
                assert_eq!(stored, sent);
            }
        }
        (Err(_), Err(_)) => {}
        (parsed, stored) => panic!("{text:?}: values {parsed:?}, member {stored:?}"),
    }
});
