//! JSON text written straight into a [`Text`], byte for byte as `serde_json::to_string` writes
//! it: no whitespace, strings escaped as serde_json escapes them, objects in their order.
//!
//! A span's `otel_dump` and `attributes` are mostly short keys and strings. Through serde, each
//! went through serde_json's escaping, which looks every byte up in a table and writes the quotes
//! and the text as three separate appends, and through a buffer that started at 128 bytes and
//! was copied at every doubling: over half of writing a span's members. Here a string's text is
//! searched for what must be escaped sixteen bytes at a time ([`super::scan::special`]) and
//! copied a run at a time, and a writer sizes its buffer once.

use std::ops::Range;

use serde_json::Value;

use super::scan::special;
use crate::time::Micros;

/// JSON text being written at the end of a byte buffer: into a string of its own
/// ([`to_text`]), or straight into a Kafka record between the protobuf bytes before and after
/// it (`crate::record::append_lazy`). It is only ever appended whole `str`s and `char`s, so
/// what was written since it began is UTF-8, whatever the buffer held before.
pub struct Text {
    buf: Vec<u8>,
    /// Where the text begins in `buf`.
    start: usize,
    /// Where the last [`Marked`] value written lies in the text.
    marked: Option<Range<usize>>,
}

impl Text {
    pub fn with_capacity(capacity: usize) -> Text {
        Text { buf: Vec::with_capacity(capacity), start: 0, marked: None }
    }

    /// A text written after what `buf` holds.
    pub fn after(buf: Vec<u8>) -> Text {
        let start = buf.len();
        Text { buf, start, marked: None }
    }

    /// Where the last [`Marked`] value written lies in the text.
    pub fn marked(&self) -> Option<Range<usize>> {
        self.marked.clone()
    }

    #[inline]
    pub fn push_str(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
    }

    #[inline]
    pub fn push(&mut self, c: char) {
        if c.is_ascii() {
            self.buf.push(c as u8);
        } else {
            self.push_str(c.encode_utf8(&mut [0; 4]));
        }
    }

    pub fn reserve(&mut self, additional: usize) {
        self.buf.reserve(additional);
    }

    /// The length of what was written.
    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What was written.
    pub fn as_str(&self) -> &str {
        // SAFETY: `buf[start..]` was only ever appended whole `str`s (see the type's docs).
        unsafe { std::str::from_utf8_unchecked(&self.buf[self.start..]) }
    }

    /// The buffer, with the text at its end.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// The text, when the buffer holds nothing else.
    pub fn into_string(self) -> String {
        assert_eq!(self.start, 0, "a text after other bytes is not a string");
        // SAFETY: as in `as_str`, with `start` 0.
        unsafe { String::from_utf8_unchecked(self.buf) }
    }
}

/// What can be written as JSON text.
pub trait Emit {
    fn emit(&self, out: &mut Text);
}

/// `v` as JSON text, in a string of `capacity` bytes to start with.
pub fn to_text<T: Emit + ?Sized>(v: &T, capacity: usize) -> String {
    let mut out = Text::with_capacity(capacity);
    v.emit(&mut out);
    out.into_string()
}

impl Emit for str {
    fn emit(&self, out: &mut Text) {
        string(out, self);
    }
}

impl Emit for Value {
    fn emit(&self, out: &mut Text) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            // With `arbitrary_precision` a number displays as the text it was read from or
            // written as, which is what serde_json writes.
            Value::Number(n) => out.push_str(n.as_str()),
            Value::String(s) => string(out, s),
            Value::Array(items) => List(items).emit(out),
            Value::Object(map) => {
                let mut obj = Object::open(out);
                for (k, v) in map {
                    obj.member(k, v);
                }
                obj.close();
            }
        }
    }
}

impl<T: Emit + ?Sized> Emit for &T {
    fn emit(&self, out: &mut Text) {
        (**self).emit(out);
    }
}

impl<T: Emit> Emit for Option<T> {
    fn emit(&self, out: &mut Text) {
        match self {
            Some(v) => v.emit(out),
            None => out.push_str("null"),
        }
    }
}

impl Emit for u32 {
    fn emit(&self, out: &mut Text) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
}

impl Emit for u64 {
    fn emit(&self, out: &mut Text) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
}

impl Emit for i64 {
    fn emit(&self, out: &mut Text) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
}

/// A timestamp as its RFC 3339 string (how it serialises).
impl Emit for Micros {
    fn emit(&self, out: &mut Text) {
        out.push('"');
        self.with_rfc3339(|t| out.push_str(t));
        out.push('"');
    }
}

/// A list written as a JSON array.
pub struct List<'a, T>(pub &'a [T]);

impl<T: Emit> Emit for List<'_, T> {
    fn emit(&self, out: &mut Text) {
        out.push('[');
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            item.emit(out);
        }
        out.push(']');
    }
}

/// JSON text kept as it is (a member already checked and written).
pub struct Raw<'a>(pub &'a str);

impl Emit for Raw<'_> {
    fn emit(&self, out: &mut Text) {
        out.push_str(self.0);
    }
}

/// A value whose place in the text is kept ([`Text::marked`]): otel_dump's resource, which the
/// SQLite store takes out of the dump (`crate::calls::OtelDump`).
pub struct Marked<T>(pub T);

impl<T: Emit> Emit for Marked<T> {
    fn emit(&self, out: &mut Text) {
        let start = out.len();
        self.0.emit(out);
        out.marked = Some(start..out.len());
    }
}

/// An object being written: `{`, then members, then `}`.
pub struct Object<'o> {
    out: &'o mut Text,
    empty: bool,
}

impl<'o> Object<'o> {
    pub fn open(out: &'o mut Text) -> Object<'o> {
        out.push('{');
        Object { out, empty: true }
    }

    pub fn member<V: Emit + ?Sized>(&mut self, key: &str, value: &V) {
        value.emit(self.key(key));
    }

    /// A member whose key is a literal with nothing to escape (no quote, backslash or control
    /// character): written as it is, without the search for bytes to escape. An `otel_dump` has
    /// some thirty such keys, and searching them was two fifths of writing it.
    pub fn field<V: Emit + ?Sized>(&mut self, key: &'static str, value: &V) {
        debug_assert!(special(key.as_bytes()).is_none(), "{key:?} needs escaping");
        self.next();
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
        value.emit(self.out);
    }

    /// Starts the next member: its key and colon (after a comma when it is not the first). Its
    /// value is to be written into the string returned.
    pub fn key(&mut self, key: &str) -> &mut Text {
        self.next();
        string(self.out, key);
        self.out.push(':');
        self.out
    }

    /// The comma before a member that is not the first.
    fn next(&mut self) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
    }

    pub fn close(self) {
        self.out.push('}');
    }
}

/// `s` as a JSON string: quoted, with `"`, `\` and control characters escaped as serde_json
/// escapes them (the short forms where JSON has one, else `\u00xx`).
pub fn string(out: &mut Text, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut rest = s;
    while let Some(at) = special(rest.as_bytes()) {
        out.push_str(&rest[..at]);
        let byte = rest.as_bytes()[at];
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[usize::from(byte >> 4)] as char);
                out.push(HEX[usize::from(byte & 0xf)] as char);
            }
        }
        // The byte is ASCII, so the next one starts a character.
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A string of characters drawn from those that are escaped, ASCII, and wider ones.
    fn random_string(rng: &mut fastrand::Rng) -> String {
        const PICK: &[char] =
            &['"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\0', '\u{1f}', '\u{7f}', 'é', '😀'];
        (0..rng.usize(0..40))
            .map(|_| match rng.u8(0..4) {
                0 => PICK[rng.usize(0..PICK.len())],
                _ => rng.char('\u{20}'..='\u{7e}'),
            })
            .collect()
    }

    fn random_value(rng: &mut fastrand::Rng, depth: usize) -> Value {
        match rng.u8(0..if depth > 3 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(rng.bool()),
            2 => json!(rng.i64(..)),
            3 => json!(rng.f64() * 1e6),
            4 => Value::String(random_string(rng)),
            5 => Value::Array((0..rng.usize(0..4)).map(|_| random_value(rng, depth + 1)).collect()),
            _ => Value::Object(
                (0..rng.usize(0..4))
                    .map(|_| (random_string(rng), random_value(rng, depth + 1)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn values_are_written_as_serde_json_writes_them() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let v = random_value(&mut rng, 0);
            assert_eq!(to_text(&v, 0), serde_json::to_string(&v).unwrap(), "{v:?}");
        }
        // Every byte below 0x80 on its own, escaped or not.
        for b in 0u8..0x80 {
            let s = (b as char).to_string();
            assert_eq!(to_text(s.as_str(), 0), serde_json::to_string(&s).unwrap());
        }
        let parsed: Value =
            serde_json::from_str(r#"{"n": 1.50, "big": 123456789012345678901234567890}"#).unwrap();
        assert_eq!(to_text(&parsed, 0), r#"{"n":1.50,"big":123456789012345678901234567890}"#);
    }
}
