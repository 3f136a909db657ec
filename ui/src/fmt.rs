//! Small formatting helpers shared by the pages: times, durations, numbers, costs, and the
//! percent-encoding of path segments and query values.

use heddle_proto::time::Micros;

/// `2026-01-02 03:04:05` (UTC); pages mark it up with `<time>` so scripts may localise it.
pub fn time(t: Micros) -> String {
    match chrono::DateTime::<chrono::Utc>::from_timestamp_micros(t.0) {
        Some(dt) => dt.format("%Y-%m-%d %H:%M:%S").to_string(),
        None => "?".into(),
    }
}

/// RFC 3339 for `<time datetime=...>`.
pub fn iso(t: Micros) -> String {
    t.to_rfc3339()
}

/// A duration in milliseconds, short: `850 ms`, `2.4 s`, `3 min 5 s`.
pub fn duration_ms(ms: f64) -> String {
    if !ms.is_finite() {
        return "?".into();
    }
    if ms < 1000.0 {
        format!("{} ms", ms.round() as i64)
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as i64;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// `12,345`.
pub fn int(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A cost in dollars: `$0.0012`, `$3.40`.
pub fn dollars(x: f64) -> String {
    if x == 0.0 {
        "$0".into()
    } else if x < 0.01 {
        format!("${x:.4}")
    } else {
        format!("${x:.2}")
    }
}

/// Percent-encodes `s` for a path segment or a query value (everything but unreserved
/// characters).
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A query string from pairs, leaving out empty values.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) }
}

/// Cuts `s` to at most `max` characters, saying how much was left out.
pub fn cut(s: &str, max: usize) -> (String, usize) {
    match s.char_indices().nth(max) {
        Some((i, _)) => (s[..i].to_owned(), s[i..].chars().count()),
        None => (s.to_owned(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(int(1234567), "1,234,567");
        assert_eq!(int(12), "12");
        assert_eq!(duration_ms(850.2), "850 ms");
        assert_eq!(duration_ms(2400.0), "2.4 s");
        assert_eq!(duration_ms(185_000.0), "3 min 5 s");
        assert_eq!(dollars(0.00123), "$0.0012");
        assert_eq!(enc("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(query(&[("a", "1"), ("b", ""), ("c", "x&y")]), "?a=1&c=x%26y");
        assert_eq!(cut("héllo", 2), ("hé".into(), 3));
        assert_eq!(time(Micros(0)), "1970-01-01 00:00:00");
    }
}
