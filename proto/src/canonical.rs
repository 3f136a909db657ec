//! Canonical JSON: a byte-for-byte reproduction of Python's `json.dumps(value, sort_keys=True)`
//! with default settings (docs/api/digests.md). Object and table-row digests hash this text, so any
//! deviation changes every digest the server hands out.
//!
//! Rules: separators `", "` / `": "`; object keys sorted by code point, recursively;
//! `ensure_ascii` (non-ASCII as lowercase `\uXXXX`, astral chars as surrogate pairs, DEL too);
//! integers in full decimal; floats in Python `repr` form; non-finite floats as
//! `NaN`/`Infinity`/`-Infinity`.
//!
//! Numbers: `serde_json` runs with `arbitrary_precision`, so a [`Number`] keeps its source text.
//! A text without `.`, `e` or `E` is a Python `int`; anything else is `float(text)`.

use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// Renders `v` exactly as Python's `json.dumps(v, sort_keys=True)` would.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_canonical_json(&mut out, v);
    out
}

/// Appends the canonical form of `v` (see [`canonical_json`]) to `out`.
pub fn write_canonical_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_canonical_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    out.push('{');
    // `str`'s `Ord` compares UTF-8 bytes, which is code-point order — the order Python uses.
    if map.keys().is_sorted() {
        write_entries(out, map.iter());
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        write_entries(out, entries.into_iter());
    }
    out.push('}');
}

fn write_entries<'a>(out: &mut String, entries: impl Iterator<Item = (&'a String, &'a Value)>) {
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str(out, k);
        out.push_str(": ");
        write_canonical_json(out, v);
    }
}

fn write_number(out: &mut String, n: &Number) {
    let text = n.as_str();
    if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        match text.parse::<f64>() {
            Ok(f) => write_float(out, f),
            // Unreachable for numbers produced by serde_json; keep the text rather than panic.
            Err(_) => out.push_str(text),
        }
    } else {
        write_int(out, text)
    }
}

/// Python `str(int(text))`: drops leading zeros and the sign of zero (`-0` → `0`).
fn write_int(out: &mut String, text: &str) {
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        // Unreachable for numbers produced by serde_json.
        out.push_str(text);
        return;
    }
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        out.push('0');
    } else {
        if neg {
            out.push('-');
        }
        out.push_str(digits);
    }
}

/// Python `float.__repr__`: shortest round-trip digits, fixed notation when the decimal exponent
/// is in `-4..16` (integral values keep `.0`), otherwise `d.ddde±XX`.
fn write_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }

    // Rust's `{:e}` yields the shortest round-trip digits, e.g. `-1.2345e-7`, `1e16`, `0e0`
    // (only its tie-breaking differs from Python's; see `round_half_even`).
    // Render it into `out`, decode it, then overwrite it with the Python form.
    let start = out.len();
    let _ = write!(out, "{f:e}");
    let mut digits = [0u8; 32];
    let mut n_digits = 0usize;
    let mut exp: i32 = 0;
    let mut exp_neg = false;
    let mut in_exp = false;
    for &b in out.as_bytes()[start..].iter() {
        match b {
            b'e' => in_exp = true,
            b'-' if in_exp => exp_neg = true,
            b'0'..=b'9' if in_exp => exp = exp * 10 + i32::from(b - b'0'),
            b'0'..=b'9' => {
                if let Some(slot) = digits.get_mut(n_digits) {
                    *slot = b;
                    n_digits += 1;
                }
            }
            _ => {} // leading '-' and the '.' of the mantissa
        }
    }
    out.truncate(start);
    if exp_neg {
        exp = -exp;
    }
    round_half_even(f.abs(), &mut digits, &mut n_digits, exp);
    let Some(digits) = digits.get(..n_digits).filter(|d| !d.is_empty()) else {
        // Unreachable: `{:e}` always prints at least one digit.
        out.push_str("0.0");
        return;
    };

    if f.is_sign_negative() {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                push_ascii(out, digits);
                for _ in digits.len()..int_len {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                let (int_part, frac_part) = digits.split_at(int_len);
                push_ascii(out, int_part);
                out.push('.');
                push_ascii(out, frac_part);
            }
        } else {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            push_ascii(out, digits);
        }
    } else {
        let (first, rest) = digits.split_at(1);
        push_ascii(out, first);
        if !rest.is_empty() {
            out.push('.');
            push_ascii(out, rest);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let abs = exp.unsigned_abs();
        if abs < 10 {
            out.push('0');
        }
        let _ = write!(out, "{abs}");
    }
}

/// Python's shortest repr breaks ties between two equally close shortest candidates towards the
/// even one, whereas Rust's `{:e}` rounds such ties up (`848193560769138.25` → Python
/// `…138.2`, Rust `…138.3`). A tie needs the exact binary value to be the midpoint of the two
/// `n`-digit candidates, i.e. its full decimal expansion has exactly `n + 1` significant digits
/// ending in `5`. Detect that with integer arithmetic and, if the even neighbour also
/// round-trips, switch `digits` to it. `f` must be finite and non-negative; `exp` is the decimal
/// exponent of `digits[0]`.
fn round_half_even(f: f64, digits: &mut [u8; 32], n_digits: &mut usize, exp: i32) {
    let n = *n_digits;
    if !(1..=17).contains(&n) {
        return;
    }
    // f = k · 2^q with k odd.
    let bits = f.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mut k, mut q) =
        if biased == 0 { (fraction, -1074) } else { (fraction | (1u64 << 52), biased - 1075) };
    if k == 0 {
        return;
    }
    let tz = k.trailing_zeros();
    k >>= tz;
    q += tz as i32;
    // S = the significant digits of f's exact decimal expansion, when they fit in u64.
    let s: u64 = if q < 0 {
        // f = k · 5^-q / 10^-q; k · 5^-q is odd, so it has no trailing zeros.
        let Ok(e) = u32::try_from(-q) else { return };
        if e > 27 {
            return;
        }
        match u64::try_from(u128::from(k) * 5u128.pow(e)) {
            Ok(s) => s,
            Err(_) => return,
        }
    } else {
        // The last significant digit can only be 5 if f = S · 10^q with S = k / 5^q odd.
        let Ok(e) = u32::try_from(q) else { return };
        if e > 22 {
            return;
        }
        let p = 5u64.pow(e);
        if !k.is_multiple_of(p) {
            return;
        }
        k / p
    };
    if s % 10 != 5 || s >= 1_000_000_000_000_000_000 || decimal_len(s) != n + 1 {
        return;
    }
    let low = s / 10;
    let even = if low.is_multiple_of(2) { low } else { low + 1 };
    if decimal_len(even) != n {
        return;
    }
    let current = digits.iter().take(n).fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
    if current == even {
        return;
    }
    let candidate = format!("{even}e{}", exp - (n as i32 - 1));
    if candidate.parse::<f64>() != Ok(f) {
        return;
    }
    let mut rest = even;
    for slot in digits.iter_mut().take(n).rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    while *n_digits > 1 && digits.get(*n_digits - 1) == Some(&b'0') {
        *n_digits -= 1;
    }
}

fn decimal_len(mut v: u64) -> usize {
    let mut len = 1;
    while v >= 10 {
        v /= 10;
        len += 1;
    }
    len
}

/// Appends ASCII digit bytes.
fn push_ascii(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        out.push(char::from(b));
    }
}

/// How an ASCII byte is written inside a string: 0 = verbatim, `b'u'` = `\u00XX`, otherwise the
/// character that follows the backslash.
const ASCII_ESCAPE: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut i = 0;
    while i < 0x20 {
        table[i] = b'u';
        i += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[0x7f] = b'u';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_u_escape(out: &mut String, unit: u32) {
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[((unit >> shift) & 0xf) as usize]));
    }
}

/// Writes `s` as a JSON string literal with Python's `ensure_ascii` escaping.
fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut run_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 {
            let esc = ASCII_ESCAPE[b as usize];
            if esc == 0 {
                i += 1;
                continue;
            }
            out.push_str(&s[run_start..i]);
            if esc == b'u' {
                push_u_escape(out, u32::from(b));
            } else {
                out.push('\\');
                out.push(char::from(esc));
            }
            i += 1;
        } else {
            // `i` is at a char boundary: runs only stop at ASCII bytes or UTF-8 lead bytes.
            out.push_str(&s[run_start..i]);
            let Some(c) = s[i..].chars().next() else {
                break;
            };
            let cp = u32::from(c);
            if cp >= 0x1_0000 {
                let v = cp - 0x1_0000;
                push_u_escape(out, 0xd800 | (v >> 10));
                push_u_escape(out, 0xdc00 | (v & 0x3ff));
            } else {
                push_u_escape(out, cp);
            }
            i += c.len_utf8();
        }
        run_start = i;
    }
    out.push_str(&s[run_start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test input is valid JSON")
    }

    /// `(JSON text, json.dumps(json.loads(text), sort_keys=True))`, expected values generated by
    /// CPython 3.11.
    const PYTHON_CASES: &[(&str, &str)] = &[
        (r#"0.1"#, r#"0.1"#),
        (r#"1e-7"#, r#"1e-07"#),
        (r#"123456789012345678.0"#, r#"1.2345678901234568e+17"#),
        (r#"1.5e300"#, r#"1.5e+300"#),
        (r#"5e-324"#, r#"5e-324"#),
        (r#"1e22"#, r#"1e+22"#),
        (r#"2.5"#, r#"2.5"#),
        (r#"-1.0"#, r#"-1.0"#),
        (r#"0.0001"#, r#"0.0001"#),
        (r#"0.00001"#, r#"1e-05"#),
        (r#"1e15"#, r#"1000000000000000.0"#),
        (r#"1e16"#, r#"1e+16"#),
        (r#"9999999999999998.0"#, r#"9999999999999998.0"#),
        (r#"1234567890123456.0"#, r#"1234567890123456.0"#),
        (r#"12345678901234567.0"#, r#"1.2345678901234568e+16"#),
        (r#"0.0"#, r#"0.0"#),
        (r#"-0.0"#, r#"-0.0"#),
        (r#"1.0"#, r#"1.0"#),
        (r#"100.0"#, r#"100.0"#),
        (r#"1E5"#, r#"100000.0"#),
        (r#"1e5"#, r#"100000.0"#),
        (r#"1.50"#, r#"1.5"#),
        (r#"1e+5"#, r#"100000.0"#),
        (r#"1E-5"#, r#"1e-05"#),
        (r#"0.1e1"#, r#"1.0"#),
        (r#"100e-2"#, r#"1.0"#),
        (r#"1e400"#, r#"Infinity"#),
        (r#"-1e400"#, r#"-Infinity"#),
        (r#"1e-400"#, r#"0.0"#),
        (r#"-1e-400"#, r#"-0.0"#),
        (r#"1.7976931348623157e308"#, r#"1.7976931348623157e+308"#),
        (r#"2.2250738585072014e-308"#, r#"2.2250738585072014e-308"#),
        (r#"-2.5e-5"#, r#"-2.5e-05"#),
        (r#"0.000123"#, r#"0.000123"#),
        (r#"0.0001234567"#, r#"0.0001234567"#),
        (r#"123.456"#, r#"123.456"#),
        (r#"1e-05"#, r#"1e-05"#),
        (r#"3.141592653589793"#, r#"3.141592653589793"#),
        (r#"0.30000000000000004"#, r#"0.30000000000000004"#),
        (r#"1e100"#, r#"1e+100"#),
        (r#"9007199254740993.0"#, r#"9007199254740992.0"#),
        (r#"1e-4"#, r#"0.0001"#),
        (r#"99999999999999999999.0"#, r#"1e+20"#),
        (r#"0.5e-323"#, r#"5e-324"#),
        (r#"4.9406564584124654e-324"#, r#"5e-324"#),
        (r#"1.00000000000000000001"#, r#"1.0"#),
        (r#"0.1000000000000000055511151231257827"#, r#"0.1"#),
        (r#"12e-1"#, r#"1.2"#),
        (r#"-123456789.125e3"#, r#"-123456789125.0"#),
        (r#"1e-10"#, r#"1e-10"#),
        (r#"1e21"#, r#"1e+21"#),
        // Ties between two shortest candidates: Python picks the even one, Rust's `{:e}` rounds up.
        (r#"848193560769138.25"#, r#"848193560769138.2"#),
        (r#"848193560769138.2397785776"#, r#"848193560769138.2"#),
        (r#"15554608603048433e-1"#, r#"1555460860304843.2"#),
        (r#"178296900160966.125"#, r#"178296900160966.12"#),
        (r#"223354169.05915861E+6"#, r#"223354169059158.62"#),
        (r#"-899509816826215.2E+0"#, r#"-899509816826215.2"#),
        (r#"5.9604644775390625e-08"#, r#"5.960464477539063e-08"#),
        (r#"2.98023223876953125e-08"#, r#"2.9802322387695312e-08"#),
        (r#"1125899906842624.125"#, r#"1125899906842624.0"#),
        (r#"4503599627370497.5"#, r#"4503599627370498.0"#),
        (r#"2251799813685248.25"#, r#"2251799813685248.0"#),
        (r#"0"#, r#"0"#),
        (r#"-0"#, r#"0"#),
        (r#"1"#, r#"1"#),
        (r#"-1"#, r#"-1"#),
        (r#"42"#, r#"42"#),
        (r#"9007199254740993"#, r#"9007199254740993"#),
        (r#"18446744073709551615"#, r#"18446744073709551615"#),
        (r#"18446744073709551616"#, r#"18446744073709551616"#),
        (r#"-9223372036854775808"#, r#"-9223372036854775808"#),
        (r#"-9223372036854775809"#, r#"-9223372036854775809"#),
        (r#"100000000000000000000"#, r#"100000000000000000000"#),
        (
            r#"-123456789012345678901234567890123456789"#,
            r#"-123456789012345678901234567890123456789"#,
        ),
        (
            r#"123456789012345678901234567890123456789012345678901234567890"#,
            r#"123456789012345678901234567890123456789012345678901234567890"#,
        ),
        (r#"null"#, r#"null"#),
        (r#"true"#, r#"true"#),
        (r#"false"#, r#"false"#),
        (r#""""#, r#""""#),
        (r#""plain ascii ~ !""#, r#""plain ascii ~ !""#),
        (r#""\"quoted\" and \\ backslash / slash""#, r#""\"quoted\" and \\ backslash / slash""#),
        (r#""\n\r\t\b\f""#, r#""\n\r\t\b\f""#),
        (r#""\u0000\u0001\u001f\u007f\u0020""#, r#""\u0000\u0001\u001f\u007f ""#),
        (r#""\u0080\u00ff\u0100""#, r#""\u0080\u00ff\u0100""#),
        ("\"\u{e9}\"", r#""\u00e9""#),
        ("\"\u{65e5}\u{672c}\u{8a9e}\"", r#""\u65e5\u672c\u8a9e""#),
        ("\"\u{1f600}\"", r#""\ud83d\ude00""#),
        ("\"\u{1f600}x\u{10ffff}\"", r#""\ud83d\ude00x\udbff\udfff""#),
        ("\"\u{ffff}\u{fffe}\"", r#""\uffff\ufffe""#),
        ("\"a\u{2028}b\u{2029}c\"", r#""a\u2028b\u2029c""#),
        ("\"mixed \u{e9}\u{1f600}\\u0001z\"", r#""mixed \u00e9\ud83d\ude00\u0001z""#),
        (r#""\ud83d\ude00""#, r#""\ud83d\ude00""#),
        (r#"{}"#, r#"{}"#),
        (r#"[]"#, r#"[]"#),
        (r#"[[]]"#, r#"[[]]"#),
        (r#"[{}]"#, r#"[{}]"#),
        (r#"{"a": {}}"#, r#"{"a": {}}"#),
        (r#"[1, [2, [3, [4]]]]"#, r#"[1, [2, [3, [4]]]]"#),
        (r#"{"b": 1, "a": 2}"#, r#"{"a": 2, "b": 1}"#),
        (
            "{\"\u{e9}\": 1, \"Z\": 2, \"a\": 3, \"\u{1f600}\": 4, \"\u{ffff}\": 5, \"\": 6, \"A\": 7, \"aa\": 8, \"a \": 9}",
            r#"{"": 6, "A": 7, "Z": 2, "a": 3, "a ": 9, "aa": 8, "\u00e9": 1, "\uffff": 5, "\ud83d\ude00": 4}"#,
        ),
        (
            "{\"\u{ffff}\": 1, \"\u{1f600}\": 2, \"\u{e000}\": 3, \"\u{d7ff}\": 4}",
            r#"{"\ud7ff": 4, "\ue000": 3, "\uffff": 1, "\ud83d\ude00": 2}"#,
        ),
        (
            r#"{"z": {"y": {"x": [3, 2, 1], "b": null}, "a": true}, "m": [{"k2": 1.0, "k1": -0}]}"#,
            r#"{"m": [{"k1": 0, "k2": 1.0}], "z": {"a": true, "y": {"b": null, "x": [3, 2, 1]}}}"#,
        ),
        (
            r#"{"key\nwith\tescapes": "v", "key\"q": 1}"#,
            r#"{"key\nwith\tescapes": "v", "key\"q": 1}"#,
        ),
        (r#"{"a": 1, "a": 2}"#, r#"{"a": 2}"#),
        (r#"[1, 1.0, -0, -0.0, "1", true, null]"#, r#"[1, 1.0, 0, -0.0, "1", true, null]"#),
    ];

    #[test]
    fn matches_python_json_dumps() {
        for (input, want) in PYTHON_CASES {
            assert_eq!(canonical_json(&parse(input)), *want, "input {input}");
        }
    }

    #[test]
    fn contract_vector() {
        let v = parse(
            r#"{"b":1,"a":[1.0,"é",null,true,1e-05,1e16,123.456,-0.0,100000000000000000000]}"#,
        );
        assert_eq!(
            canonical_json(&v),
            r#"{"a": [1.0, "\u00e9", null, true, 1e-05, 1e+16, 123.456, -0.0, 100000000000000000000], "b": 1}"#
        );
    }

    #[test]
    fn values_built_in_rust() {
        let v = json!({
            "f": [1.0, -0.0, 0.1, 1e16, 1e-5, 2.5e-7, 1234567890123456.0, f64::MAX, 5e-324],
            "i": [0, -1, u64::MAX, i64::MIN],
            "s": "é\u{1F600}\u{7f}",
        });
        assert_eq!(
            canonical_json(&v),
            concat!(
                r#"{"f": [1.0, -0.0, 0.1, 1e+16, 1e-05, 2.5e-07, 1234567890123456.0, "#,
                r#"1.7976931348623157e+308, 5e-324], "#,
                r#""i": [0, -1, 18446744073709551615, -9223372036854775808], "#,
                r#""s": "\u00e9\ud83d\ude00\u007f"}"#,
            )
        );
    }

    #[test]
    fn non_finite_floats() {
        let cases: &[(f64, &str)] =
            &[(f64::INFINITY, "Infinity"), (f64::NEG_INFINITY, "-Infinity"), (f64::NAN, "NaN")];
        for (f, want) in cases {
            let mut out = String::new();
            write_float(&mut out, *f);
            assert_eq!(out, *want);
        }
    }

    #[test]
    fn appends_to_existing_buffer() {
        let mut out = String::from("prefix:");
        write_canonical_json(&mut out, &parse(r#"{"b": [1.5e300, "x"], "a": 1}"#));
        assert_eq!(out, r#"prefix:{"a": 1, "b": [1.5e+300, "x"]}"#);
    }
}
