//! A cheap test that lets `$contains` skip the JSON parse of rows that cannot match
//! (docs/query-language.md#substring-search-on-sqlite).
//!
//! `$contains` on a JSON path reads the path's value (a string unquoted, a number or boolean as
//! its JSON text) and looks for the needle in it. Parsing every row's JSON to extract the value
//! costs more than everything else the scan does, and almost no row matches. The value is a
//! piece of the row's JSON text, so the text itself can be searched first: when the needle is
//! not in it, the value cannot hold it either, except where the JSON text spells a character
//! differently from the value. Such spellings are listed as "risky" patterns, and any row that
//! has one is evaluated in full. The test is therefore exact: it never rejects a row the full
//! evaluation would accept.
//!
//! Where JSON text and value differ:
//! - escapes: `\"`, `\\` and control characters are never in a needle that is tested (see
//!   [`TextTest::new`]); `\/` is risky when the needle has a `/`; `\uXXXX` can spell anything
//!   and is always risky;
//! - numbers and booleans are read as their JSON text, unchanged (SQLite's `->`), so they are
//!   in the text as they are in the value;
//! - with `case_insensitive`, the value is folded to lower case in full Unicode: the needle is
//!   tested only when its folded form is ASCII, the text is searched ignoring ASCII case, and
//!   the non-ASCII characters whose lower case has an ASCII character ([`FOLDS_TO_ASCII`]) are
//!   risky.

use aho_corasick::{AhoCorasick, AhoCorasickKind};

/// Non-ASCII characters whose full lower case contains an ASCII character: the Kelvin sign
/// folds to `k`, and the capital I with a dot above to `i` and a combining dot. The test
/// `folds_to_ascii_is_complete` checks this list against every Unicode scalar value.
pub const FOLDS_TO_ASCII: [char; 2] = ['\u{130}', '\u{212A}'];

/// Longest needle that is tested. The matcher's size and build time grow with the needle (a
/// contiguous NFA: ~8 KB and ~0.1 ms at this length, 1.3 MB and 15 ms at the 64 KiB a literal
/// may have), and a query may hold hundreds of `$contains`; a longer needle is evaluated in full.
pub const MAX_TESTED_NEEDLE_BYTES: usize = 256;

/// The test for one needle, built once per statement.
pub struct TextTest(Option<AhoCorasick>);

impl TextTest {
    /// A test for `needle`. A needle that cannot be tested on the JSON text (empty, longer than
    /// [`MAX_TESTED_NEEDLE_BYTES`], with a quote, a backslash or a control character, or one
    /// that folds to non-ASCII when case is ignored) gives a test that passes every row.
    pub fn new(needle: &str, case_insensitive: bool) -> TextTest {
        let folded;
        let needle = if case_insensitive {
            folded = heddle_ql::eval::fold_case(needle);
            if !folded.is_ascii() {
                return TextTest(None);
            }
            folded.as_str()
        } else {
            needle
        };
        if needle.is_empty()
            || needle.len() > MAX_TESTED_NEEDLE_BYTES
            || needle.chars().any(|c| c == '"' || c == '\\' || c.is_control())
        {
            return TextTest(None);
        }
        let mut patterns: Vec<String> = vec![needle.to_owned(), "\\u".to_owned()];
        if needle.contains('/') {
            patterns.push("\\/".to_owned());
        }
        if case_insensitive {
            patterns.extend(FOLDS_TO_ASCII.iter().map(|c| c.to_string()));
        }
        let matcher = AhoCorasick::builder()
            .ascii_case_insensitive(case_insensitive)
            .kind(Some(AhoCorasickKind::ContiguousNFA))
            .build(&patterns)
            .ok();
        TextTest(matcher)
    }

    /// False only when no value read from `json_text` can contain the needle.
    pub fn may_contain(&self, json_text: &[u8]) -> bool {
        match &self.0 {
            Some(m) => m.is_match(json_text),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_to_ascii_is_complete() {
        let found: Vec<char> = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| !c.is_ascii() && c.to_lowercase().any(|l| l.is_ascii()))
            .collect();
        assert_eq!(found, FOLDS_TO_ASCII);
    }

    #[test]
    fn rejects_only_text_without_the_needle() {
        let t = TextTest::new("vortex", false);
        assert!(t.may_contain(br#"{"q":"a zqxvortex b"}"#));
        assert!(!t.may_contain(br#"{"q":"a zqxVORTEX b"}"#));
        assert!(!t.may_contain(br#"{"q":"nothing here"}"#));
        // An escape may spell the needle: evaluated in full.
        assert!(t.may_contain(br#"{"q":"\u0076ortex"}"#));
        // A newline escape does not: the needle has no control character.
        assert!(!t.may_contain(br#"{"q":"line\nnext"}"#));
    }

    #[test]
    fn ignoring_case() {
        let t = TextTest::new("VorTex", true);
        assert!(t.may_contain(br#"{"q":"ZQXVORTEX"}"#));
        assert!(!t.may_contain(br#"{"q":"vortx"}"#));
        // The Kelvin sign folds to k: "\u{212A}ey" folds to "key".
        let k = TextTest::new("key", true);
        assert!(k.may_contain("{\"q\":\"\u{212A}EY\"}".as_bytes()));
        assert!(!k.may_contain(br#"{"q":"kye"}"#));
    }

    #[test]
    fn long_needles_are_not_tested() {
        let long = "a".repeat(MAX_TESTED_NEEDLE_BYTES + 1);
        assert!(TextTest::new(&long, false).may_contain(b"{}"));
        assert!(TextTest::new(&long, true).may_contain(b"{}"));
        let longest = "a".repeat(MAX_TESTED_NEEDLE_BYTES);
        assert!(!TextTest::new(&longest, true).may_contain(b"{}"));
    }

    #[test]
    fn untestable_needles_pass_everything() {
        for (needle, ci) in
            [("", false), ("a\"b", false), ("a\\b", false), ("a\nb", false), ("ÄPFEL", true)]
        {
            assert!(TextTest::new(needle, ci).may_contain(b"{}"), "{needle:?}");
        }
        // A slash may be spelled `\/`.
        let t = TextTest::new("a/b", false);
        assert!(t.may_contain(br#"{"q":"a\/b"}"#));
        assert!(!t.may_contain(br#"{"q":"ab"}"#));
        // Non-ASCII needles are tested when case matters: the text holds them as they are.
        let t = TextTest::new("äpf", false);
        assert!(t.may_contain("{\"q\":\"äpfel\"}".as_bytes()));
        assert!(!t.may_contain(br#"{"q":"apfel"}"#));
    }
}
