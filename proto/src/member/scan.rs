//! One pass over a member's bytes that says whether it can be stored as sent: JSON that parses
//! into a [`serde_json::Value`], at most [`MAX_MEMBER_DEPTH`] deep, with no object that repeats
//! a key (parsed, such an object keeps the last value; SQLite's JSON functions read the first).
//!
//! It builds nothing and copies nothing: strings are skipped a run at a time and their escapes
//! checked in place, where `serde_json`'s own walk decoded every escaped string into a buffer
//! (a fifth of a span's conversion). It only has to be right when it says yes: whatever it is
//! not sure of ([`Stop::Unsure`]: a syntax error, an escaped or repeated key, a surrogate escape
//! that is not a pair) goes to `serde_json`, which then decides and explains ([`super::exact`]).

use smallvec::SmallVec;

use crate::limits::MAX_MEMBER_DEPTH;

// An object of this one key is read as a number by values: such an object is not stored as sent.
use super::exact::NUMBER_TOKEN;

/// The first keys of an object are compared pairwise as they come; an object with more is
/// sorted at its end, so a wide object costs `n log n`, not `n²`.
const PAIRWISE_KEYS: usize = 16;

/// An open object or array.
struct Open {
    object: bool,
    /// Where the object's keys start in the key stack.
    first_key: usize,
}

struct Scanner<'t> {
    text: &'t [u8],
    at: usize,
    specials: Specials<'t>,
}

/// Why a text is not stored as sent, as far as the pass can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// Nested past [`MAX_MEMBER_DEPTH`] before anything else went wrong.
    TooDeep,
    /// Anything else: `serde_json` decides.
    Unsure,
}

pub(super) type Step<T = ()> = Result<T, Stop>;

impl<'t> Scanner<'t> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next_token(&mut self) -> Step<u8> {
        self.skip_whitespace();
        let b = self.peek().ok_or(Stop::Unsure)?;
        self.at += 1;
        Ok(b)
    }

    fn expect(&mut self, byte: u8) -> Step {
        if self.next_token()? == byte { Ok(()) } else { Err(Stop::Unsure) }
    }

    /// A string whose opening quote was consumed, up to and past its closing quote; its bytes
    /// between the quotes, and whether it holds an escape.
    fn string(&mut self) -> Step<(&'t [u8], bool)> {
        let start = self.at;
        let mut escaped = false;
        loop {
            self.at = self.specials.next(self.at).ok_or(Stop::Unsure)?;
            let b = self.text[self.at];
            self.at += 1;
            match b {
                b'"' => return Ok((&self.text[start..self.at - 1], escaped)),
                b'\\' => {
                    escaped = true;
                    self.escape()?;
                }
                // A control character, which must be escaped.
                _ => return Err(Stop::Unsure),
            }
        }
    }

    /// An escape whose backslash was consumed. A `\u` escape of a surrogate must be the first
    /// half of a pair followed by the second, as `serde_json` requires when it reads a string.
    fn escape(&mut self) -> Step {
        let b = self.peek().ok_or(Stop::Unsure)?;
        self.at += 1;
        match b {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Ok(()),
            b'u' => match self.hex4()? {
                0xD800..=0xDBFF => {
                    if self.text.get(self.at..self.at + 2) != Some(b"\\u") {
                        return Err(Stop::Unsure);
                    }
                    self.at += 2;
                    match self.hex4()? {
                        0xDC00..=0xDFFF => Ok(()),
                        _ => Err(Stop::Unsure),
                    }
                }
                0xDC00..=0xDFFF => Err(Stop::Unsure),
                _ => Ok(()),
            },
            _ => Err(Stop::Unsure),
        }
    }

    fn hex4(&mut self) -> Step<u16> {
        let digits = self.text.get(self.at..self.at + 4).ok_or(Stop::Unsure)?;
        let mut n = 0u16;
        for d in digits {
            let v = (*d as char).to_digit(16).ok_or(Stop::Unsure)?;
            n = n << 4 | v as u16;
        }
        self.at += 4;
        Ok(n)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - start
    }

    /// A number whose first byte (`-` or a digit) was consumed: `-? (0 | [1-9][0-9]*)
    /// (. [0-9]+)? ([eE] [+-]? [0-9]+)?`. Kept as text (`arbitrary_precision`), any such
    /// number parses, however long.
    fn number(&mut self, first: u8) -> Step {
        let first = if first == b'-' {
            let b = self.peek().ok_or(Stop::Unsure)?;
            self.at += 1;
            b
        } else {
            first
        };
        match first {
            b'0' => {}
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return Err(Stop::Unsure),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(Stop::Unsure);
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(Stop::Unsure);
            }
        }
        Ok(())
    }

    fn literal(&mut self, rest: &[u8]) -> Step {
        if self.text.get(self.at..self.at + rest.len()) != Some(rest) {
            return Err(Stop::Unsure);
        }
        self.at += rest.len();
        Ok(())
    }

    /// An object key, from its opening quote to its colon: borrowed when written without
    /// escapes (an escaped key is compared only once decoded: `serde_json` does that).
    fn key(&mut self) -> Step<&'t [u8]> {
        if self.next_token()? != b'"' {
            return Err(Stop::Unsure);
        }
        let (key, escaped) = self.string()?;
        if escaped || key == NUMBER_TOKEN.as_bytes() {
            return Err(Stop::Unsure);
        }
        self.expect(b':')?;
        Ok(key)
    }
}

/// Whether `b` ends a run of string text: a quote, a backslash or a control character. The
/// searches below find these bytes many at a time.
fn ends_string_text(b: u8) -> bool {
    matches!(b, b'"' | b'\\' | 0..0x20)
}

/// Where the first byte that ends a run of string text is: a quote, a backslash or a control
/// character. Sixteen bytes at a time on x86-64 (SSE2, which every x86-64 has), eight elsewhere
/// (SWAR): most of a member's bytes are string text, and its runs between escapes are short (a
/// newline every line), too short for `memchr`'s setup.
pub(super) fn special(bytes: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut chunks = bytes.chunks_exact(16);
        let mut at = 0;
        for chunk in chunks.by_ref() {
            // SAFETY: SSE2 is part of x86-64: every x86-64 processor has it.
            let found = unsafe { special_16(chunk.try_into().expect("sixteen bytes")) };
            if found != 0 {
                return Some(at + found.trailing_zeros() as usize);
            }
            at += 16;
        }
        if chunks.remainder().is_empty() {
            return None;
        }
        // The sixteen bytes that end the text, when there are that many: those before the
        // remainder were found clean, so the first one found is the remainder's.
        if let Some(last) = bytes.last_chunk::<16>() {
            // SAFETY: as above.
            let found = unsafe { special_16(last) };
            return (found != 0).then(|| bytes.len() - 16 + found.trailing_zeros() as usize);
        }
        special_8(bytes)
    }
    #[cfg(not(target_arch = "x86_64"))]
    special_8(bytes)
}

/// The bytes of a text that end string text (see [`special`]), found 64 at a time. Prose in a
/// message has an escape every few words (a quote, a newline), so a string's runs are shorter
/// than a block: each byte after the first in a block is then found with a shift, where a new
/// search would load and compare its bytes again.
pub(crate) struct Specials<'t> {
    text: &'t [u8],
    /// Where the block starts: bit `i` of `mask` is set when byte `base + i` ends string text.
    base: usize,
    mask: u64,
}

impl<'t> Specials<'t> {
    pub(crate) fn new(text: &'t [u8]) -> Specials<'t> {
        let mut s = Specials { text, base: 0, mask: 0 };
        s.load(0);
        s
    }

    /// The first byte at or after `at` that ends string text. Inlined where it is found in the
    /// block at hand, which is most calls (a string of prose ends, or escapes a byte, every few
    /// words): a call of its own cost more than the search (docs/benchmarks.md, "The next
    /// special byte found inline").
    #[inline(always)]
    pub(crate) fn next(&mut self, at: usize) -> Option<usize> {
        if self.holds(at) {
            let rest = self.mask >> (at - self.base);
            if rest != 0 {
                return Some(at + rest.trailing_zeros() as usize);
            }
        }
        self.next_in_later_blocks(at)
    }

    /// Whether `at` is in the block at hand.
    #[inline(always)]
    fn holds(&self, at: usize) -> bool {
        // Below `base` the difference wraps past 64.
        at.wrapping_sub(self.base) < 64
    }

    /// [`Specials::next`] past the block at hand: `at` is outside it, or nothing from `at` to
    /// its end ends string text, so the search starts at the block after it.
    #[inline(never)]
    fn next_in_later_blocks(&mut self, at: usize) -> Option<usize> {
        let mut from = if self.holds(at) { self.base + 64 } else { at };
        loop {
            if from >= self.text.len() {
                return None;
            }
            self.load(from);
            if self.mask != 0 {
                return Some(from + self.mask.trailing_zeros() as usize);
            }
            from += 64;
        }
    }

    fn load(&mut self, base: usize) {
        self.base = base;
        let rest = self.text.get(base..).unwrap_or_default();
        self.mask = match rest.first_chunk::<64>() {
            Some(block) => special_64(block),
            None => {
                // The last block, padded with spaces, which end nothing.
                let mut block = [b' '; 64];
                block[..rest.len()].copy_from_slice(rest);
                special_64(&block)
            }
        };
    }
}

/// A bit for each of the 64 bytes that ends string text.
fn special_64(block: &[u8; 64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut mask = 0;
        for (i, chunk) in block.chunks_exact(16).enumerate() {
            // SAFETY: SSE2 is part of x86-64: every x86-64 processor has it.
            let found = unsafe { special_16(chunk.try_into().expect("sixteen bytes")) };
            mask |= u64::from(found) << (16 * i);
        }
        mask
    }
    #[cfg(not(target_arch = "x86_64"))]
    block
        .iter()
        .enumerate()
        .filter(|(_, b)| ends_string_text(**b))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// A bit for each of the sixteen bytes that ends string text.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn special_16(chunk: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: the load reads the sixteen bytes of `chunk` and needs no alignment.
    let x = unsafe { _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>()) };
    let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
    // Below 0x20, unsigned: the byte is its own minimum with 0x1f.
    let control = _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1f)), x);
    _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32
}

/// [`special`] eight bytes at a time, in a `u64` (SWAR).
fn special_8(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte of `x` is zero (resp. below 0x20): its high bit is set in the result. Borrows can
    // set bits above the first such byte but never below it, so the lowest bit set is exact.
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below_space = |x: u64| x.wrapping_sub(ONES * 0x20) & !x & HIGH;
    let found = |chunk: &[u8; 8]| {
        let x = u64::from_le_bytes(*chunk);
        zero(x ^ (ONES * u64::from(b'"'))) | zero(x ^ (ONES * u64::from(b'\\'))) | below_space(x)
    };
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in chunks.by_ref() {
        let found = found(chunk.try_into().expect("eight bytes"));
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    if chunks.remainder().is_empty() {
        return None;
    }
    // The eight bytes that end the text, when there are that many: those before the remainder
    // were found clean, and no bit is set below the first byte found.
    if let Some(last) = bytes.last_chunk::<8>() {
        let found = found(last);
        return (found != 0).then(|| bytes.len() - 8 + found.trailing_zeros() as usize / 8);
    }
    bytes.iter().position(|b| ends_string_text(*b))
}

/// Whether `keys` (an object's, all of them) repeats one. The first [`PAIRWISE_KEYS`] were
/// compared as they came.
fn repeats_a_key(keys: &mut [&[u8]]) -> bool {
    if keys.len() <= PAIRWISE_KEYS {
        return false;
    }
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// Scans `text` (see the module's comment), without recursion: when it is stored as sent, its
/// depth as [`crate::limits::json_depth`] counts it.
pub(super) fn scan(text: &str) -> Step<usize> {
    let s = &mut Scanner { text: text.as_bytes(), at: 0, specials: Specials::new(text.as_bytes()) };
    // On the stack for the texts most attributes hold (a few levels, a few keys open at once).
    let mut open: SmallVec<[Open; 16]> = SmallVec::new();
    let mut keys: SmallVec<[&[u8]; 16]> = SmallVec::new();
    let mut deepest = 0;
    'value: loop {
        // A value is due.
        match s.next_token()? {
            b @ (b'{' | b'[') => {
                let object = b == b'{';
                if open.len() == MAX_MEMBER_DEPTH {
                    return Err(Stop::TooDeep);
                }
                open.push(Open { object, first_key: keys.len() });
                deepest = deepest.max(open.len());
                s.skip_whitespace();
                let close = if object { b'}' } else { b']' };
                if s.peek() == Some(close) {
                    s.at += 1;
                    open.pop();
                } else {
                    if object {
                        keys.push(s.key()?);
                    }
                    continue 'value;
                }
            }
            b'"' => {
                s.string()?;
            }
            b't' => s.literal(b"rue")?,
            b'f' => s.literal(b"alse")?,
            b'n' => s.literal(b"ull")?,
            b @ (b'-' | b'0'..=b'9') => s.number(b)?,
            _ => return Err(Stop::Unsure),
        }
        // A value ended: close what it ends, or go on to the next.
        loop {
            let Some(top) = open.last() else {
                s.skip_whitespace();
                return if s.at == s.text.len() { Ok(deepest) } else { Err(Stop::Unsure) };
            };
            match (s.next_token()?, top.object) {
                (b',', false) => continue 'value,
                (b',', true) => {
                    let key = s.key()?;
                    let first = top.first_key;
                    if keys.len() - first < PAIRWISE_KEYS && keys[first..].contains(&key) {
                        return Err(Stop::Unsure);
                    }
                    keys.push(key);
                    continue 'value;
                }
                (b']', false) => {
                    open.pop();
                }
                (b'}', true) => {
                    let first = top.first_key;
                    if repeats_a_key(&mut keys[first..]) {
                        return Err(Stop::Unsure);
                    }
                    keys.truncate(first);
                    open.pop();
                }
                _ => return Err(Stop::Unsure),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    use crate::limits::json_depth;

    use fastrand::Rng;

    /// Draws from a seeded generator, so that a failure reproduces.
    trait Draw {
        fn below(&mut self, n: usize) -> usize;
        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str;
    }

    impl Draw for Rng {
        fn below(&mut self, n: usize) -> usize {
            self.usize(..n)
        }

        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.below(from.len())]
        }
    }

    const SPACE: &[&str] = &["", "", "", " ", "\n", "\t ", "\r\n"];
    const NUMBERS: &[&str] =
        &["0", "-0", "7", "-12", "1.5", "0.25e-3", "1E+400", "12345678901234567890123", "2e9"];
    /// String pieces: plain, every escape, pairs and lone halves of surrogates, and text that
    /// must not appear raw.
    const PIECES: &[&str] = &[
        "a",
        "key",
        "résumé",
        "😀",
        " ",
        r"\n",
        r#"\""#,
        r"\\",
        r"\/",
        r"\b\f\r\t",
        r"\u00e9",
        r"\u00E9",
        r"\ud83d\ude00",
        r"\ud800",
        r"\udc00",
        r"\ud800\u0041",
        r"\x",
        r"\u12",
        "\u{1}",
        "\t",
        "$serde_json::private::Number",
    ];
    const KEYS: &[&str] =
        &["a", "b", "c", r"\u0061", "role", "content", "", "$serde_json::private::Number"];

    fn string(r: &mut Rng, out: &mut String, from: &[&str]) {
        out.push('"');
        for _ in 0..r.below(4) {
            out.push_str(r.pick(from));
        }
        out.push('"');
    }

    fn value(r: &mut Rng, out: &mut String, depth: usize) {
        out.push_str(r.pick(SPACE));
        match r.below(if depth > 0 { 8 } else { 5 }) {
            0 => out.push_str(r.pick(&["null", "true", "false"])),
            1 | 2 => out.push_str(r.pick(NUMBERS)),
            3 | 4 => string(r, out, PIECES),
            5 | 6 => {
                out.push('{');
                for i in 0..r.below(5) {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(r.pick(SPACE));
                    let keys = r.below(KEYS.len()) + 1;
                    string(r, out, &KEYS[..keys]);
                    out.push_str(r.pick(SPACE));
                    out.push(':');
                    value(r, out, depth - 1);
                }
                out.push('}');
            }
            _ => {
                out.push('[');
                for i in 0..r.below(5) {
                    if i > 0 {
                        out.push(',');
                    }
                    value(r, out, depth - 1);
                }
                out.push(']');
            }
        }
        out.push_str(r.pick(SPACE));
    }

    /// Edits that keep the text UTF-8: a character dropped, or a JSON-significant one put in.
    fn mutate(r: &mut Rng, text: &str) -> String {
        let mut chars: Vec<char> = text.chars().collect();
        for _ in 0..r.below(3) + 1 {
            let at = r.below(chars.len() + 1);
            if r.below(2) == 0 && at < chars.len() {
                chars.remove(at);
            } else {
                let c = b"{}[],:\"\\0-1.eE+tu \x1f"[r.below(19)] as char;
                chars.insert(at, c);
            }
        }
        chars.into_iter().collect()
    }

    /// What the scan says must agree with parsing into values: yes only for text that parses,
    /// at the depth it says, repeating no key; too deep only for text that does not parse
    /// within the bound. Generated texts, valid and damaged; the counts show every answer is
    /// reached often.
    #[test]
    fn scan_agrees_with_parsing_into_values() {
        let mut r = Rng::with_seed(0x9E37_79B9_7F4A_7C15);
        let (mut as_sent, mut unsure_but_valid, mut refused) = (0, 0, 0);
        for n in 0..60_000 {
            let mut text = String::new();
            let depth = r.below(5);
            value(&mut r, &mut text, depth);
            if n % 2 == 1 {
                text = mutate(&mut r, &text);
            }
            let parsed = serde_json::from_str::<Value>(&text);
            // And the whole check, scan then serde_json's walk, agrees with values.
            match (&parsed, super::super::check_parses("x", &text)) {
                (Ok(_), Ok(_)) | (Err(_), Err(_)) => {}
                (parsed, verdict) => panic!("{text:?}: values {parsed:?}, check {verdict:?}"),
            }
            match scan(&text) {
                Ok(depth) => {
                    let v = parsed.unwrap_or_else(|e| panic!("{text:?}: scan yes, values {e}"));
                    assert_eq!(depth, json_depth(&v, MAX_MEMBER_DEPTH), "{text:?}");
                    assert_eq!(super::super::repeats_a_key(&text), Some(false), "{text:?}");
                    as_sent += 1;
                }
                Err(Stop::TooDeep) => panic!("{text:?}: too deep"),
                Err(Stop::Unsure) if parsed.is_ok() => unsure_but_valid += 1,
                Err(Stop::Unsure) => refused += 1,
            }
        }
        assert!(
            as_sent > 15_000 && unsure_but_valid > 1_000 && refused > 15_000,
            "{as_sent} {unsure_but_valid} {refused}"
        );
    }

    /// `len` bytes, mostly `q`, one in `one_in` drawn from those that end string text and their
    /// neighbours.
    fn awkward_bytes(r: &mut Rng, len: usize, one_in: usize) -> Vec<u8> {
        let alphabet = b"ab\x00\x1f \x7f\x80\xff\"\\\x20\x21";
        (0..len)
            .map(|_| if r.below(one_in) == 0 { alphabet[r.below(alphabet.len())] } else { b'q' })
            .collect()
    }

    /// [`special`], a byte at a time.
    fn first_special(bytes: &[u8]) -> Option<usize> {
        bytes.iter().position(|b| matches!(b, b'"' | b'\\' | 0..0x20))
    }

    #[test]
    fn special_finds_the_first_byte_that_ends_string_text() {
        let mut r = Rng::with_seed(7);
        for _ in 0..40_000 {
            let len = r.below(80);
            let bytes = awkward_bytes(&mut r, len, 6);
            let naive = first_special(&bytes);
            assert_eq!(special(&bytes), naive, "{bytes:?}");
            assert_eq!(special_8(&bytes), naive, "{bytes:?}");
        }
    }

    #[test]
    fn specials_finds_the_next_byte_that_ends_string_text_from_anywhere() {
        let mut r = Rng::with_seed(8);
        for _ in 0..4_000 {
            let len = r.below(300);
            let bytes = awkward_bytes(&mut r, len, 9);
            let mut specials = Specials::new(&bytes);
            // Forward in small steps, as a scan goes, and now and then back or far ahead.
            let mut at = 0;
            for _ in 0..60 {
                at = match r.below(10) {
                    0 => r.below(len + 1),
                    _ => (at + r.below(40)).min(len),
                };
                let naive = first_special(&bytes[at..]);
                assert_eq!(specials.next(at), naive.map(|i| at + i), "{bytes:?} from {at}");
            }
        }
    }

    #[test]
    fn what_is_stored_as_sent_and_what_is_not() {
        let yes = [
            (r#" {"a": [1, -0.5e+3, "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"], "b": {}} "#, 2),
            ("[]", 1),
            ("\"s\"", 0),
            ("-0", 0),
            ("123456789012345678901234567890e-999", 0),
            (r#"[true,false,null,{"k":[[]]}]"#, 4),
        ];
        for (text, depth) in yes {
            assert_eq!(scan(text), Ok(depth), "{text}");
        }
        let unsure = [
            "",
            " ",
            "{",
            "[1,]",
            r#"{"a":1,}"#,
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "tru",
            "nul",
            "[1] 2",
            "\"\u{1f}\"",
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""\x""#,
            r#""\u12""#,
            r#"{"a":1,"a":2}"#,
            r#"{"\u0061":1}"#,
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{1:2}"#,
            r#"{"a" 1}"#,
            "[1 2]",
            "NaN",
            "'a'",
        ];
        for text in unsure {
            assert_eq!(scan(text), Err(Stop::Unsure), "{text:?}");
        }
        let wide: Vec<String> = (0..100).map(|i| format!("\"k{}\":{i}", i % 99)).collect();
        assert_eq!(scan(&format!("{{{}}}", wide.join(","))), Err(Stop::Unsure));
        let distinct: Vec<String> = (0..100).map(|i| format!("\"k{i}\":{i}")).collect();
        assert_eq!(scan(&format!("{{{}}}", distinct.join(","))), Ok(1));
    }

    #[test]
    fn nesting_past_the_bound_is_too_deep_before_what_follows_is_read() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(scan(&deep(MAX_MEMBER_DEPTH)), Ok(MAX_MEMBER_DEPTH));
        assert_eq!(scan(&deep(MAX_MEMBER_DEPTH + 1)), Err(Stop::TooDeep));
        assert_eq!(scan(&"[".repeat(1_000_000)), Err(Stop::TooDeep));
        let objects = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
        assert_eq!(scan(&objects(MAX_MEMBER_DEPTH)), Ok(MAX_MEMBER_DEPTH));
        assert_eq!(scan(&objects(MAX_MEMBER_DEPTH + 1)), Err(Stop::TooDeep));
    }
}
