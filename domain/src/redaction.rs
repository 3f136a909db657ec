//! Server-side redaction of sensitive data: the one rule every write path applies when a
//! project's sensitive-data policy is `pii-v1` (docs/api/project-settings.md#redaction), before
//! anything is stored or produced to Kafka.
//!
//! It follows the weave SDK's own client-side redaction:
//! - a member whose key is one of [`REDACT_KEYS`] (compared case-insensitively, at any depth)
//!   has its whole value replaced by [`REDACTED_VALUE`], as the SDK's `redact_sensitive_keys`;
//! - in every other string, each piece of personal data is replaced by `<ENTITY_TYPE>`, as the
//!   SDK's `redact_pii` (Presidio's anonymizer) does, for the entity types a pattern can
//!   recognise without a language model: [`Entity`]. Names and places (Presidio's PERSON and
//!   LOCATION, found by NER) are not recognised.

use std::sync::LazyLock;

use heddle_proto::calls::CallPart;
use heddle_proto::feedback::NewFeedback;
use regex::Regex;
use serde_json::Value;

/// What a member with a sensitive key holds after redaction (the SDK's `REDACTED_VALUE`).
pub const REDACTED_VALUE: &str = "REDACTED";

/// The SDK's default redacted keys (`weave.utils.sanitize`), matched case-insensitively.
pub const REDACT_KEYS: &[&str] = &["api_key", "auth_headers", "authorization"];

/// Whether a member named `key` is redacted whole.
pub fn is_sensitive_key(key: &str) -> bool {
    REDACT_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// The personal data recognised in strings, named as Presidio names them (the replacement is
/// `<NAME>`), in the order they are looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    EmailAddress,
    IbanCode,
    CreditCard,
    UsSsn,
    PhoneNumber,
    IpAddress,
}

impl Entity {
    pub const ALL: [Entity; 6] = [
        Entity::EmailAddress,
        Entity::IbanCode,
        Entity::CreditCard,
        Entity::UsSsn,
        Entity::PhoneNumber,
        Entity::IpAddress,
    ];

    pub fn placeholder(self) -> &'static str {
        match self {
            Entity::EmailAddress => "<EMAIL_ADDRESS>",
            Entity::IbanCode => "<IBAN_CODE>",
            Entity::CreditCard => "<CREDIT_CARD>",
            Entity::UsSsn => "<US_SSN>",
            Entity::PhoneNumber => "<PHONE_NUMBER>",
            Entity::IpAddress => "<IP_ADDRESS>",
        }
    }

    fn pattern(self) -> &'static Regex {
        static PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
            [
                r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}",
                r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b",
                r"\b[0-9](?:[ \-]?[0-9]){12,18}\b",
                r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b",
                r"(?:\+[0-9]{1,3}[ .\-]?)?(?:\([0-9]{3}\)|\b[0-9]{3})[ .\-]?[0-9]{3}[ .\-][0-9]{4}\b",
                r"\b(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\b|(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}",
            ]
            .into_iter()
            .map(|p| Regex::new(p).expect("valid pattern"))
            .collect()
        });
        &PATTERNS[self as usize]
    }

    /// Whether a match of the pattern really is this entity (checksums, reserved numbers).
    fn accepts(self, m: &str) -> bool {
        match self {
            Entity::IbanCode => iban_ok(m),
            Entity::CreditCard => luhn_ok(m),
            Entity::UsSsn => ssn_ok(m),
            // IPv6 needs three groups of digits, so `::` and paths like `std::io` stay.
            Entity::IpAddress => {
                m.contains('.')
                    || (m.split(':').filter(|g| !g.is_empty()).count() >= 3
                        && m.parse::<std::net::Ipv6Addr>().is_ok())
            }
            Entity::EmailAddress | Entity::PhoneNumber => true,
        }
    }
}

fn digits(s: &str) -> impl Iterator<Item = u32> + '_ {
    s.chars().filter_map(|c| c.to_digit(10))
}

fn luhn_ok(s: &str) -> bool {
    let d: Vec<u32> = digits(s).collect();
    if !(13..=19).contains(&d.len()) {
        return false;
    }
    let sum: u32 = d
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &x)| if i % 2 == 1 { if x * 2 > 9 { x * 2 - 9 } else { x * 2 } } else { x })
        .sum();
    sum.is_multiple_of(10)
}

/// Presidio's invalid SSNs: area 000, 666 or 9xx, group 00, serial 0000.
fn ssn_ok(s: &str) -> bool {
    let (area, group, serial) = (&s[0..3], &s[4..6], &s[7..11]);
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

/// The IBAN check: the country and check digits moved to the end, letters as numbers, mod 97.
fn iban_ok(s: &str) -> bool {
    let compact: Vec<char> = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let rotated = compact[4..].iter().chain(&compact[..4]);
    let mut rem: u64 = 0;
    for c in rotated {
        let v = match c.to_digit(36) {
            Some(v) => v as u64,
            None => return false,
        };
        rem = if v >= 10 { (rem * 100 + v) % 97 } else { (rem * 10 + v) % 97 };
    }
    rem == 1
}

/// `s` with its personal data replaced, or `None` when it holds none.
pub fn redact_str(s: &str) -> Option<String> {
    // Nothing shorter can hold an entity (`a@b.co`, `1.1.1.1`).
    if s.len() < 6 {
        return None;
    }
    let mut current: Option<String> = None;
    for entity in Entity::ALL {
        let text = current.as_deref().unwrap_or(s);
        let re = entity.pattern();
        if !re.is_match(text) {
            continue;
        }
        let mut out = String::with_capacity(text.len());
        let (mut last, mut changed) = (0, false);
        for m in re.find_iter(text) {
            if entity.accepts(m.as_str()) {
                out.push_str(&text[last..m.start()]);
                out.push_str(entity.placeholder());
                last = m.end();
                changed = true;
            }
        }
        if changed {
            out.push_str(&text[last..]);
            current = Some(out);
        }
    }
    current
}

/// Redacts `v` in place; returns whether anything changed.
pub fn redact_value(v: &mut Value) -> bool {
    match v {
        Value::String(s) => match redact_str(s) {
            Some(r) => {
                *s = r;
                true
            }
            None => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |acc, x| redact_value(x) | acc),
        Value::Object(map) => {
            let mut changed = false;
            for (k, x) in map.iter_mut() {
                if is_sensitive_key(k) {
                    if x.as_str() != Some(REDACTED_VALUE) {
                        *x = Value::String(REDACTED_VALUE.into());
                        changed = true;
                    }
                } else {
                    changed |= redact_value(x);
                }
            }
            changed
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// JSON text redacted, rewritten only when something changed (unchanged text stays byte for
/// byte). Text that is not JSON is redacted as a plain string.
fn redact_json_text(text: &mut String) {
    match serde_json::from_str::<Value>(text) {
        Ok(mut v) => {
            if redact_value(&mut v) {
                *text = v.to_string();
            }
        }
        Err(_) => redact_string(text),
    }
}

fn redact_string(s: &mut String) {
    if let Some(r) = redact_str(s) {
        *s = r;
    }
}

/// Redacts every member of a call part a user writes: inputs, attributes, output, summary,
/// `otel_dump`, the exception and the display name.
pub fn redact_call_part(part: &mut CallPart) {
    if let Some(s) = &mut part.start {
        redact_json_text(&mut s.inputs);
        redact_json_text(&mut s.attributes);
        if let Some(d) = &mut s.otel_dump {
            redact_json_text(d.edit());
        }
        if let Some(name) = &mut s.display_name {
            redact_string(name);
        }
    }
    if let Some(e) = &mut part.end {
        redact_json_text(&mut e.summary);
        if let Some(o) = &mut e.output {
            redact_json_text(o);
        }
        if let Some(x) = &mut e.exception {
            redact_string(x);
        }
        if let Some(name) = &mut e.display_name {
            redact_string(name);
        }
    }
}

/// Redacts a feedback row's payload and its `scorer_*` / `span_*` members.
pub fn redact_feedback(f: &mut NewFeedback) {
    redact_json_text(&mut f.payload);
    redact_json_text(&mut f.extra);
}

/// Redacts an OTLP log record's body, attributes and the rest of it (resource attributes).
pub fn redact_log(log: &mut heddle_proto::otlp::logs::OtelLog) {
    redact_json_text(&mut log.body);
    redact_json_text(&mut log.attributes);
    redact_json_text(&mut log.dump);
}

/// A display name, redacted.
pub fn redact_display_name(name: &str) -> String {
    redact_str(name).unwrap_or_else(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn entities_in_strings() {
        let cases = [
            ("mail alice.smith+x@example.co.uk now", Some("mail <EMAIL_ADDRESS> now")),
            ("card 4111 1111 1111 1111.", Some("card <CREDIT_CARD>.")),
            ("card 4111-1111-1111-1112", None), // fails the Luhn check
            ("ssn 123-45-6789", Some("ssn <US_SSN>")),
            ("ssn 000-45-6789", None),
            (
                "call (555) 123-4567 or +1 555.123.4567",
                Some("call <PHONE_NUMBER> or <PHONE_NUMBER>"),
            ),
            ("from 192.168.0.17:80", Some("from <IP_ADDRESS>:80")),
            ("v6 2001:db8::ff00:42:8329", Some("v6 <IP_ADDRESS>")),
            ("at 12:30:45 sharp", None),
            ("use std::fmt; a::b; ::", None),
            ("iban GB82 WEST 1234 5698 7654 32", Some("iban <IBAN_CODE>")),
            ("iban GB82 WEST 1234 5698 7654 33", None),
            ("version 1.2.3 and 300.1.1.1", None),
            ("plain text", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(redact_str(input).as_deref(), want, "{input}");
        }
    }

    #[test]
    fn sensitive_keys_at_any_depth() {
        let mut v = json!({
            "API_KEY": "sk-123", "nested": [{"Authorization": {"deep": "x"}}],
            "auth_headers": null, "email": "bob@example.com", "n": 4111111111111111u64
        });
        assert!(redact_value(&mut v));
        assert_eq!(
            v,
            json!({
                "API_KEY": "REDACTED", "nested": [{"Authorization": "REDACTED"}],
                "auth_headers": "REDACTED", "email": "<EMAIL_ADDRESS>", "n": 4111111111111111u64
            })
        );
        // Again: nothing left to change.
        assert!(!redact_value(&mut v));
    }

    #[test]
    fn unchanged_json_keeps_its_exact_text() {
        let mut text = r#"{"x": 1.50, "y": "fine"}"#.to_owned();
        redact_json_text(&mut text);
        assert_eq!(text, r#"{"x": 1.50, "y": "fine"}"#);
    }

    #[test]
    fn an_end_part_is_redacted_whole() {
        use heddle_proto::ProjectId;
        use heddle_proto::calls::EndPart;
        use heddle_proto::time::Micros;
        let mut part = CallPart {
            project: ProjectId::parse("e/p").unwrap(),
            id: "c".into(),
            trace_id: None,
            start: None,
            end: Some(EndPart {
                ended_at: Micros(1),
                summary: r#"{"who": "bob@example.com"}"#.into(),
                output: Some(r#"{"api_key": "sk-1"}"#.into()),
                exception: Some("failed for 123-45-6789".into()),
                wb_run_step_end: None,
                display_name: Some("for bob@example.com".into()),
            }),
        };
        redact_call_part(&mut part);
        let end = part.end.unwrap();
        for text in [end.summary, end.output.unwrap(), end.exception.unwrap()] {
            assert!(!text.contains("bob@") && !text.contains("sk-1") && !text.contains("6789"));
        }
        assert_eq!(end.display_name.as_deref(), Some("for <EMAIL_ADDRESS>"));
    }
}
