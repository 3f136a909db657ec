//! The substring index of call inputs and outputs (docs/storage.md#substring-index): which
//! blocks of 64 consecutive rows of `calls` can hold a needle, so that `$contains` on `inputs`
//! or `output` reads those rows only instead of the whole project.
//!
//! A block's entry in `calls_text` (FTS5, contentless, no positions) lists every trigram of its
//! rows' inputs and outputs, each hashed to 18 bits and spelled as a 4-letter word. A needle's
//! trigrams are looked up the same way: the blocks that have all of them are candidates, and
//! their rows are then tested in full. Blocks rather than rows because a block of 64 rows has
//! about as many distinct trigrams as a few of its rows, so the index stays small (~30 bytes per
//! call of the benchmark's text) and cheap to build.
//!
//! The index is never wrong, only behind. Every write of a call's part lists the row's block in
//! `calls_text_pending` ([`pend`]), in the same transaction. The writer thread rebuilds pending
//! blocks when it has no writes to do ([`index_step`]), and a query takes every pending block as
//! a candidate. So an answer is the same with or without the index; a backlog only makes it
//! slower. A deleted row's block keeps its entry until a row of it is written again: an entry
//! that lists too much only adds candidates.
//!
//! Why every value a `$contains` can read is found (docs/query-language.md): a string is read
//! with its escapes decoded, a number or boolean as its JSON text. The trigrams are taken of the
//! JSON text with every string's escapes decoded, so each such value is a run of it. Each
//! character is lower-cased on its own (`char::to_lowercase`), in the text and in the needle
//! alike: a substitution character by character keeps a substring a substring. A needle
//! searched with `case_insensitive` is folded as the query language folds it (the whole string
//! at once) and uses the index only when that is ASCII: its run in the folded value then comes
//! from ASCII characters and the two non-ASCII ones whose lower case is ASCII
//! ([`super::substring::FOLDS_TO_ASCII`]), which lower-case the same way one by one.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use super::compile::Sql;
use super::writer::{Idle, Pause};

/// Rows per block, as a shift of the rowid. Migration 0015, [`pend_all`] and [`candidates`]
/// spell the same number.
pub(crate) const BLOCK_SHIFT: u32 = 6;

/// The word of a block that matches every query: its text could not be read as JSON, or is too
/// large to read ([`MAX_BLOCK_BYTES`]), so its trigrams are not known. Shorter than a trigram's
/// word, so it is never one of them.
const ANY: &str = "any";

/// Most trigrams looked up for one needle. Any subset of a needle's trigrams gives a superset
/// of its blocks; a few rare ones select as well as all of them, and each costs a doclist read.
const MAX_QUERY_TRIGRAMS: usize = 16;

/// Characters one [`index_step`] reads before it stops after the block at hand: the bench's
/// 512 rows, a few milliseconds, the longest a write that arrives meanwhile waits for the
/// writer (longer only for a block of very large texts).
const STEP_CHARS: usize = 1 << 19;

/// Most pending blocks one [`index_step`] looks at.
const STEP_BLOCKS: usize = 64;

/// Bytes of `inputs` and `output` past which a block is not read but matches every query
/// ([`ANY`]): a bound on the time one block takes (~25 ms), whatever a client sends. The sizes
/// are read from the rows' headers, so an oversized block costs nothing to skip. The builder's
/// memory is bounded by [`HASH_BITS`].
const MAX_BLOCK_BYTES: i64 = 4 << 20;

/// For `$contains` of `needle` in `inputs` or `output`: renders a test that a row's block is
/// one the index lists for the needle or one still pending, and returns true; false (nothing
/// rendered) when the index cannot answer the needle ([`query`]). The blocks are computed once
/// per statement. The test reads only the rowid, which every index of `calls` holds, so SQLite
/// makes it before it reads the row: a row outside the blocks costs an index entry, not a read
/// of its JSON. It is a test rather than a list of rowids to fetch on purpose: fetching the
/// rows of a needle found almost everywhere one by one took twice as long as the scan without
/// the index, where the test adds 10–20% to it (docs/benchmarks.md, "Substring index").
pub(crate) fn candidates(sql: &mut Sql, needle: &str, case_insensitive: bool) -> bool {
    let Some(q) = query(needle, case_insensitive) else {
        return false;
    };
    // 6: BLOCK_SHIFT.
    sql.push("(calls.rowid >> 6) IN (SELECT rowid FROM calls_text WHERE calls_text MATCH ")
        .bind(q)
        .push(" UNION SELECT block FROM calls_text_pending)");
    true
}

/// The FTS5 query for `needle`, or `None` when the index cannot answer it: fewer than three
/// characters, or a case-insensitive needle whose folded form is not ASCII.
pub(crate) fn query(needle: &str, case_insensitive: bool) -> Option<String> {
    let folded;
    let needle = if case_insensitive {
        folded = heddle_ql::eval::fold_case(needle);
        if !folded.is_ascii() {
            return None;
        }
        folded.as_str()
    } else {
        needle
    };
    let mut grams = Trigrams::default();
    grams.add_text(needle.chars());
    if grams.listed.is_empty() {
        return None;
    }
    // Spread over the needle, in its order, so that a long needle is not judged by its start.
    let mut words: Vec<u32> = grams.listed;
    let step = words.len().div_ceil(MAX_QUERY_TRIGRAMS);
    words = words.into_iter().step_by(step).collect();
    let mut q = format!("{ANY} OR (");
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            q.push_str(" AND ");
        }
        push_word(&mut q, *w);
    }
    q.push(')');
    Some(q)
}

/// Bits of a trigram's hash. A block lists each hash at most once, so a block has at most 2^18
/// words whatever its size, and a bitmap of 32 KiB dedupes them at the cost of a bit test per
/// character. Collisions only add candidates: a block with 3,000 distinct trigrams (the bench's
/// 64 rows) holds 1.1% of the hashes, so a needle of 7 trigrams matches a block that has none of
/// them once in 10^13; a block with 30,000 (dense multilingual text), once in 4 million.
const HASH_BITS: u32 = 18;

/// The bits of three characters of 21 bits each.
const WINDOW_MASK: u64 = (1 << 63) - 1;

/// `window` with the code point `c` (below 2^21) after its last two characters.
#[inline]
fn slide(window: u64, c: u32) -> u64 {
    ((window << 21) | u64::from(c)) & WINDOW_MASK
}

/// Lists the trigram `window` by its hash, unless `seen` has it.
#[inline]
fn list(seen: &mut [u64; SEEN_WORDS], listed: &mut Vec<u32>, window: u64) {
    let h = (window.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - HASH_BITS)) as u32;
    let (word, bit) = ((h >> 6) as usize, 1u64 << (h & 63));
    if seen[word] & bit == 0 {
        seen[word] |= bit;
        listed.push(h);
    }
}

/// For each byte, its lower case if it is plain, else 0: plain bytes are the ASCII ones other
/// than NUL, quotes and backslashes, which stand for themselves wherever they are in a member.
/// The others go through the decoding path, which takes any byte.
const PLAIN_LOWER: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 1;
    while b < 128 {
        if b != b'"' as usize && b != b'\\' as usize {
            table[b] = (b as u8).to_ascii_lowercase();
        }
        b += 1;
    }
    table
};

/// Words of the bitmap of hashes a set has listed.
const SEEN_WORDS: usize = 1 << (HASH_BITS - 6);

/// The distinct trigram hashes of a block's texts, or of a needle.
pub(crate) struct Trigrams {
    /// Bit `h` is set once hash `h` is listed.
    seen: Box<[u64; SEEN_WORDS]>,
    /// The hashes listed, in the order first seen.
    listed: Vec<u32>,
    /// The last three characters pushed, 21 bits each, the oldest highest.
    window: u64,
    filled: usize,
    /// Characters read.
    chars: usize,
    /// Every query matches: see [`ANY`].
    matches_all: bool,
}

impl Default for Trigrams {
    fn default() -> Self {
        Trigrams {
            seen: Box::new([0; SEEN_WORDS]),
            listed: Vec::new(),
            window: 0,
            filled: 0,
            chars: 0,
            matches_all: false,
        }
    }
}

impl Trigrams {
    fn clear(&mut self) {
        for h in self.listed.drain(..) {
            self.seen[(h >> 6) as usize] = 0;
        }
        self.filled = 0;
        self.chars = 0;
        self.matches_all = false;
    }

    /// A character, lower-cased, as a code point: below 2^21.
    #[inline]
    fn push(&mut self, c: u32) {
        self.window = slide(self.window, c);
        self.filled += 1;
        if self.filled >= 3 {
            list(&mut self.seen, &mut self.listed, self.window);
        }
    }

    fn add_char(&mut self, c: char) {
        if c.is_ascii() {
            self.add_ascii(c as u8);
        } else {
            self.chars += 1;
            for l in c.to_lowercase() {
                self.push(l as u32);
            }
        }
    }

    #[inline]
    fn add_ascii(&mut self, b: u8) {
        self.chars += 1;
        self.push(u32::from(b.to_ascii_lowercase()));
    }

    fn add_text(&mut self, text: impl Iterator<Item = char>) {
        for c in text {
            self.add_char(c);
        }
    }

    /// Adds a stored JSON text with each string's escapes decoded. A text that is not JSON as
    /// stored makes the block match every query.
    pub(crate) fn add_json(&mut self, json: &str) {
        if self.matches_all {
            return;
        }
        if self.add_decoded(json).is_none() {
            self.matches_all = true;
        }
        // Trigrams never span two texts: each is a value's run on its own.
        self.filled = 0;
    }

    /// Adds the characters of `json` with its strings' escapes decoded; `None` for an escape
    /// JSON does not have. Byte by byte: a member is mostly ASCII, which needs no decoding, and
    /// reading it as characters was most of the time the index took to build.
    fn add_decoded(&mut self, json: &str) -> Option<()> {
        let bytes = json.as_bytes();
        let (mut i, mut in_string) = (0, false);
        loop {
            if self.filled >= 2 {
                i = self.add_plain_run(bytes, i);
            }
            let Some(&b) = bytes.get(i) else { break };
            if !b.is_ascii() {
                let c = json[i..].chars().next()?;
                i += c.len_utf8();
                self.add_char(c);
                continue;
            }
            i += 1;
            match b {
                b'\\' if in_string => {
                    let (c, used) = unescape(&json[i..])?;
                    i += used;
                    self.add_char(c);
                }
                b'"' => {
                    in_string = !in_string;
                    self.add_ascii(b);
                }
                _ => self.add_ascii(b),
            }
        }
        Some(())
    }

    /// Adds the run of plain bytes ([`PLAIN_LOWER`]) that starts at `bytes[i]`, and returns where
    /// it ends: most of a member, read with the window in a register. The window must hold two
    /// characters of the text already, so that each byte makes a trigram.
    #[inline]
    fn add_plain_run(&mut self, bytes: &[u8], mut i: usize) -> usize {
        debug_assert!(self.filled >= 2);
        let (start, mut window) = (i, self.window);
        let (seen, listed) = (&mut self.seen, &mut self.listed);
        while let Some(&b) = bytes.get(i) {
            let lower = PLAIN_LOWER[usize::from(b)];
            if lower == 0 {
                break;
            }
            window = slide(window, u32::from(lower));
            list(seen, listed, window);
            i += 1;
        }
        self.window = window;
        self.filled += i - start;
        self.chars += i - start;
        i
    }

    /// The block's FTS5 text: one word per trigram.
    fn words(&self, out: &mut String) {
        out.clear();
        if self.matches_all {
            out.push_str(ANY);
            return;
        }
        for w in &self.listed {
            push_word(out, *w);
            out.push(' ');
        }
    }
}

/// A trigram hash as four base-32 letters, a word of FTS5's `ascii` tokenizer.
fn push_word(out: &mut String, mut h: u32) {
    const LETTERS: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    for _ in 0..HASH_BITS.div_ceil(5) {
        out.push(LETTERS[(h & 31) as usize] as char);
        h >>= 5;
    }
}

/// The character an escape of a JSON string stands for (`\n` a newline, `\u00e9` an é, a
/// surrogate pair one character), `rest` being the text after its backslash, and the bytes of
/// `rest` the escape takes. `None` for an escape JSON does not have or a lone surrogate: the
/// stored members are valid JSON, so this is only a guard.
fn unescape(rest: &str) -> Option<(char, usize)> {
    let mut chars = rest.chars();
    let decoded = match chars.next()? {
        '"' => '"',
        '\\' => '\\',
        '/' => '/',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'u' => {
            let unit = hex4(&mut chars)?;
            if (0xD800..0xDC00).contains(&unit) {
                if chars.next()? != '\\' || chars.next()? != 'u' {
                    return None;
                }
                let low = hex4(&mut chars)?;
                if !(0xDC00..0xE000).contains(&low) {
                    return None;
                }
                char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
            } else {
                char::from_u32(unit)?
            }
        }
        _ => return None,
    };
    Some((decoded, rest.len() - chars.as_str().len()))
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let mut v = 0;
    for _ in 0..4 {
        v = v * 16 + chars.next()?.to_digit(16)?;
    }
    Some(v)
}

const PEND: &str = "INSERT OR IGNORE INTO calls_text_pending (block) VALUES (?1)";

/// Lists the block of the row `rowid` of `calls` as pending, in the caller's transaction: every
/// statement that writes a call's `inputs` or `output` must be followed by it.
pub(crate) fn pend(conn: &Connection, rowid: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(PEND)?.execute([rowid >> BLOCK_SHIFT])?;
    Ok(())
}

/// Lists every block of `calls` as pending, as migration 0015 does: for tests and tools that
/// write rows without [`pend`].
pub fn pend_all(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "INSERT OR IGNORE INTO calls_text_pending (block) SELECT DISTINCT rowid >> 6 FROM calls",
    )
}

/// Pending blocks, lowest first; with ?2 = 0, all but the block of the newest row. That block
/// fills one row at a time, and rebuilding it on every pause read all of it again each time
/// (docs/benchmarks.md, "Substring index"): it waits until it is full, and a query reads its
/// at most 64 rows meanwhile.
const PENDING: &str = "SELECT block FROM calls_text_pending WHERE ?2 OR block < \
     coalesce((SELECT max(rowid) FROM calls) >> 6, 0) ORDER BY block LIMIT ?1";
const BLOCK_BYTES: &str = "SELECT coalesce(sum(octet_length(inputs)), 0) + \
     coalesce(sum(octet_length(output)), 0) FROM calls WHERE rowid BETWEEN ?1 AND ?2";
const BLOCK_ROWS: &str = "SELECT inputs, output FROM calls WHERE rowid BETWEEN ?1 AND ?2";
const DELETE_ENTRY: &str = "DELETE FROM calls_text WHERE rowid = ?1";
const INSERT_ENTRY: &str = "INSERT INTO calls_text (rowid, grams) VALUES (?1, ?2)";
const DONE: &str = "DELETE FROM calls_text_pending WHERE block = ?1";

/// What the index builder keeps between steps.
#[derive(Default)]
pub(crate) struct Builder {
    grams: Trigrams,
    words: String,
}

/// At most `limit` pending blocks, lowest first; the newest block among them only if `newest`.
fn pending_blocks(conn: &Connection, limit: i64, newest: bool) -> rusqlite::Result<Vec<i64>> {
    conn.prepare_cached(PENDING)?.query_map(params![limit, newest], |r| r.get(0))?.collect()
}

/// Rebuilds pending blocks, lowest first, inside the caller's transaction, until it has read
/// [`STEP_CHARS`] characters; returns how many it rebuilt (0: none is left, or only the newest
/// block when `newest` is false).
pub(crate) fn index_step(
    conn: &Connection,
    b: &mut Builder,
    newest: bool,
) -> rusqlite::Result<usize> {
    let blocks = pending_blocks(conn, STEP_BLOCKS as i64, newest)?;
    let mut bytes = conn.prepare_cached(BLOCK_BYTES)?;
    let mut rows = conn.prepare_cached(BLOCK_ROWS)?;
    let mut delete = conn.prepare_cached(DELETE_ENTRY)?;
    let mut insert = conn.prepare_cached(INSERT_ENTRY)?;
    let mut done = conn.prepare_cached(DONE)?;
    let (mut rebuilt, mut chars) = (0, 0);
    for &block in &blocks {
        if chars >= STEP_CHARS {
            break;
        }
        b.grams.clear();
        let range = params![block << BLOCK_SHIFT, ((block + 1) << BLOCK_SHIFT) - 1];
        let size: i64 = bytes.query_row(range, |r| r.get(0))?;
        // An oversized block is not read at all (stepping to its first row would load that
        // row's members); its size says it has rows.
        let any_row = if size > MAX_BLOCK_BYTES {
            b.grams.matches_all = true;
            true
        } else {
            add_rows(&mut rows, range, &mut b.grams)?
        };
        chars += b.grams.chars;
        delete.execute([block])?;
        if any_row {
            b.grams.words(&mut b.words);
            insert.execute(params![block, b.words])?;
        }
        done.execute([block])?;
        rebuilt += 1;
    }
    Ok(rebuilt)
}

/// Adds the members of the rows `rows` finds in `range` to `grams`; whether it found any.
fn add_rows(
    rows: &mut rusqlite::CachedStatement,
    range: impl rusqlite::Params,
    grams: &mut Trigrams,
) -> rusqlite::Result<bool> {
    let mut found = rows.query(range)?;
    let mut any_row = false;
    while let Some(row) = found.next()? {
        any_row = true;
        for col in 0..2 {
            match row.get_ref(col)? {
                ValueRef::Null => {}
                ValueRef::Text(t) => match std::str::from_utf8(t) {
                    Ok(text) => grams.add_json(text),
                    Err(_) => grams.matches_all = true,
                },
                // Members are stored as text; anything else is listed as matching all.
                _ => grams.matches_all = true,
            }
        }
    }
    Ok(any_row)
}

/// Rebuilds every pending block in one transaction; returns how many it rebuilt. For tests and
/// tools: the server builds the index in the writer's idle steps ([`idle_work`]).
pub fn catch_up(conn: &mut Connection) -> rusqlite::Result<usize> {
    let mut builder = Builder::default();
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut rebuilt = 0;
    loop {
        match index_step(&tx, &mut builder, true)? {
            0 => break,
            n => rebuilt += n,
        }
    }
    tx.commit()?;
    Ok(rebuilt)
}

/// Pending blocks that make a full step: with fewer, a step waits until writes pause.
const FULL_STEP_BLOCKS: i64 = 8;

/// The writer's idle work ([`super::writer::Writer::start`]): one [`index_step`] per call, in a
/// transaction of its own. While writes keep coming, only full steps: a small step costs its
/// commit (the FTS5 segment, its structure record, the pending table's pages) for little work.
///
/// A step commits with `synchronous = NORMAL`, without an fsync of its own: with one, catching
/// up a million calls took 46 s of which 13 s were CPU. Nothing acknowledged depends on it. In
/// WAL mode an unsynced commit can only be lost whole, with the machine, and then its blocks are
/// still pending, as the same transaction writes their entries and takes them off the list; the
/// next write's commit (`synchronous = FULL`) syncs the WAL file, and with it every step before
/// it. The writer's own setting is restored before it takes the next batch: SQLite refuses the
/// change only inside a transaction, and a connection left in one could not begin the batch's.
pub(crate) fn idle_work() -> impl FnMut(&mut Connection, Pause) -> Idle + Send {
    let mut builder = Builder::default();
    move |conn, pause| {
        let mut step = || -> rusqlite::Result<Idle> {
            if pause == Pause::Brief {
                let pending = pending_blocks(conn, FULL_STEP_BLOCKS, false)?.len() as i64;
                if pending < FULL_STEP_BLOCKS {
                    return Ok(if pending == 0 { Idle::Done } else { Idle::AtPause });
                }
            }
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let rebuilt = index_step(&tx, &mut builder, false)?;
            tx.commit()?;
            Ok(if rebuilt == 0 { Idle::Done } else { Idle::More })
        };
        let left = step().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "sqlite substring index step failed");
            Idle::Done
        });
        if let Err(e) = conn.pragma_update(None, "synchronous", "FULL") {
            tracing::error!(error = %e, "sqlite writer could not restore synchronous = FULL");
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `json` read as characters, each string's escapes decoded: the text whose trigrams the
    /// index lists.
    fn decoded(json: &str) -> Option<String> {
        let mut out = String::new();
        let (mut it, mut in_string) = (json.chars(), false);
        while let Some(c) = it.next() {
            let c = match (in_string, c) {
                (true, '\\') => {
                    let rest = it.as_str();
                    let (c, used) = unescape(rest)?;
                    it = rest[used..].chars();
                    c
                }
                (_, '"') => {
                    in_string = !in_string;
                    c
                }
                _ => c,
            };
            out.push(c);
        }
        Some(out)
    }

    #[test]
    fn strings_are_decoded_and_the_rest_kept() {
        assert_eq!(
            decoded(r#"{"a":"x\ny\u00e9\/\"","n":1E2}"#).unwrap(),
            "{\"a\":\"x\nyé/\"\",\"n\":1E2}"
        );
        assert_eq!(decoded(r#"["\ud83d\ude00"]"#).unwrap(), "[\"😀\"]");
        // Outside strings a backslash is kept as it is.
        assert_eq!(decoded(r#"\n"#).unwrap(), "\\n");
        assert_eq!(decoded(r#""\ud83d""#), None);
        assert_eq!(decoded(r#""\x""#), None);
        assert_eq!(decoded(r#""\u12""#), None);
    }

    #[test]
    fn a_block_too_large_to_read_matches_everything() {
        let mut conn = database();
        let insert =
            "INSERT INTO calls (rowid, project_key, id, bucket, inputs) VALUES (?1, 1, ?1, 0, ?2)";
        let large = serde_json::to_string(&"ab".repeat(MAX_BLOCK_BYTES as usize / 2)).unwrap();
        for (rowid, inputs) in [(1, large.as_str()), (64, r#""small""#)] {
            conn.execute(insert, params![rowid, inputs]).unwrap();
            pend(&conn, rowid).unwrap();
        }
        catch_up(&mut conn).unwrap();
        assert_eq!(blocks_for(&conn, "zulu"), [0]);
        assert_eq!(blocks_for(&conn, "small"), [0, 1]);
        let words: String = conn
            .query_row("SELECT count(*) FROM calls_text", [], |r| r.get::<_, i64>(0))
            .map(|n| n.to_string())
            .unwrap();
        assert_eq!(words, "2");
    }

    /// The trigrams of `texts` as the index defines them, spelled out one step at a time: each
    /// text [`decoded`], each character lower-cased on its own, and every three consecutive ones
    /// hashed. `None` when a text has an escape JSON does not have.
    fn trigrams_by_definition(texts: &[&str]) -> Option<(Vec<u32>, usize)> {
        let (mut listed, mut chars) = (Vec::new(), 0);
        for text in texts {
            let text = decoded(text)?;
            chars += text.chars().count();
            let points: Vec<u32> =
                text.chars().flat_map(char::to_lowercase).map(u32::from).collect();
            for w in points.windows(3) {
                let packed = (u64::from(w[0]) << 42) | (u64::from(w[1]) << 21) | u64::from(w[2]);
                let h = (packed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - HASH_BITS)) as u32;
                if !listed.contains(&h) {
                    listed.push(h);
                }
            }
        }
        Some((listed, chars))
    }

    /// Reading a member byte by byte lists the trigrams the definition gives, in the same
    /// order, and counts the same characters, over random texts of ASCII, wider characters and
    /// escapes, some of them broken.
    #[test]
    fn members_read_by_bytes_give_the_defined_trigrams() {
        const PIECES: &[&str] = &[
            "a",
            "B",
            "k",
            " ",
            "\"",
            "{",
            ":",
            "1",
            "é",
            "É",
            "ß",
            "Σ",
            "\u{130}",
            "\u{212A}",
            "😀",
            "\\n",
            "\\\"",
            "\\\\",
            "\\/",
            "\\u00e9",
            "\\u212A",
            "\\ud83d\\ude00",
            "\\u0041",
            "\\x",
            "\\ud83d",
            "\\u12",
            "\\",
        ];
        let mut rng = fastrand::Rng::with_seed(11);
        let (mut compared, mut refused) = (0, 0);
        for _ in 0..5_000 {
            let texts: Vec<String> = (0..1 + rng.usize(..3))
                .map(|_| (0..rng.usize(..40)).map(|_| PIECES[rng.usize(..PIECES.len())]).collect())
                .collect();
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let mut g = Trigrams::default();
            for t in &texts {
                g.add_json(t);
            }
            match trigrams_by_definition(&texts) {
                Some((listed, chars)) => {
                    assert!(!g.matches_all, "{texts:?}");
                    assert_eq!(g.listed, listed, "{texts:?}");
                    assert_eq!(g.chars, chars, "{texts:?}");
                    compared += 1;
                }
                None => {
                    assert!(g.matches_all, "{texts:?}");
                    refused += 1;
                }
            }
        }
        assert!(compared > 1_000 && refused > 1_000, "{compared} {refused}");
    }

    #[test]
    fn a_cleared_set_lists_again() {
        let mut g = Trigrams::default();
        g.add_json(r#""abcdef""#);
        g.clear();
        g.add_json(r#""abc""#);
        assert_eq!(g.listed.len(), 3, "\"ab, abc, bc\"");
        let mut n = Trigrams::default();
        n.add_text("cde".chars());
        assert!(!g.listed.contains(&n.listed[0]), "cleared: {:?}", g.listed);
    }

    #[test]
    fn a_needle_needs_three_characters_and_ascii_when_folded() {
        assert!(query("ab", false).is_none());
        assert!(query("abc", false).is_some());
        assert!(query("äpf", false).is_some());
        assert!(query("ÄPF", true).is_none());
        assert!(query("KEY", true).is_some());
        // One word per trigram, at most MAX_QUERY_TRIGRAMS of them.
        let q = query(&"abcdefghijklmnopqrstuvwxyz".repeat(10), false).unwrap();
        assert!(q.matches(" AND ").count() < MAX_QUERY_TRIGRAMS, "{q}");
    }

    #[test]
    fn a_needle_in_a_text_has_its_trigrams_among_the_texts() {
        let mut text = Trigrams::default();
        text.add_json(r#"{"q":"Der \u212Aelvin ÄPFEL \u0130stanbul","n":-0.50}"#);
        let has = |needle: &str, ci: bool| {
            let mut n = Trigrams::default();
            let folded = if ci { heddle_ql::eval::fold_case(needle) } else { needle.to_owned() };
            n.add_text(folded.chars());
            n.listed.iter().all(|h| text.listed.contains(h))
        };
        assert!(has("kelvin", true));
        assert!(has("\u{212A}elvin", false));
        assert!(has("äpfel", false));
        // "İ" lower-cases to "i" and a combining dot, as the query language folds it: the
        // folded value holds "i̇stanbul", not "istanbul".
        assert!(has("stanbul", true));
        assert!(!has("istanbul", true));
        assert!(has("i\u{307}stan", false));
        assert!(has("-0.50", false));
        assert!(has("ÄPFEL", false));
        assert!(!has("vortex", false));
    }

    /// Every run of three or more characters of a string value, spelled every way JSON allows,
    /// has its trigrams among the document's, with and without case: the property the index
    /// rests on, over random texts of the characters where spelling and case differ.
    #[test]
    fn every_substring_of_a_value_is_found() {
        const ALPHABET: &[char] = &[
            'a', 'b', 'K', 'k', 'i', 'I', ' ', '"', '\\', '/', '\n', '\u{1}', 'é', 'É', 'ß', 'Σ',
            'ς', '\u{130}', '\u{212A}', '\u{307}', '😀', '1', '.',
        ];
        let mut rng = fastrand::Rng::with_seed(7);
        let mut next = |n: usize| rng.usize(..n);
        for _ in 0..300 {
            let value: Vec<char> =
                (0..1 + next(24)).map(|_| ALPHABET[next(ALPHABET.len())]).collect();
            // As serde_json writes it, then with some characters as \u escapes (pairs above the
            // BMP) and some `/` as `\/`.
            let mut json = String::from("{\"q\":\"");
            for &c in &value {
                match (c, next(3)) {
                    ('/', 0) => json.push_str("\\/"),
                    (c, 0) => {
                        let mut units = [0u16; 2];
                        for u in c.encode_utf16(&mut units) {
                            json.push_str(&format!("\\u{u:04X}"));
                        }
                    }
                    (c, _) => {
                        let quoted = serde_json::to_string(&c.to_string()).unwrap();
                        json.push_str(&quoted[1..quoted.len() - 1]);
                    }
                }
            }
            json.push_str("\"}");
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&json).unwrap()["q"],
                value.iter().collect::<String>()
            );
            let mut doc = Trigrams::default();
            doc.add_json(&json);
            assert!(!doc.matches_all, "{json}");
            let found = |needle: &str| {
                let mut n = Trigrams::default();
                n.add_text(needle.chars());
                n.listed.iter().all(|h| doc.listed.contains(h))
            };
            let substrings = |text: &[char]| {
                (0..text.len())
                    .flat_map(|i| (i + 3..=text.len()).map(move |j| (i, j)))
                    .map(|(i, j)| text[i..j].iter().collect::<String>())
                    .collect::<Vec<_>>()
            };
            for needle in substrings(&value) {
                assert!(found(&needle), "{needle:?} in {json}");
            }
            // Case ignored: any ASCII run of the value folded as the query language folds it.
            let folded: Vec<char> =
                heddle_ql::eval::fold_case(&value.iter().collect::<String>()).chars().collect();
            for needle in substrings(&folded).into_iter().filter(|n| n.is_ascii()) {
                assert!(found(&needle), "{needle:?} (case ignored) in {json}");
            }
        }
    }

    fn database() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::functions::register(&conn).unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        conn
    }

    fn blocks_for(conn: &Connection, needle: &str) -> Vec<i64> {
        let mut sql = Sql::default();
        sql.push("SELECT DISTINCT rowid >> 6 FROM calls WHERE ");
        assert!(candidates(&mut sql, needle, false));
        sql.push(" ORDER BY 1");
        let mut st = conn.prepare(&sql.text).unwrap();
        let rows = st.query_map(rusqlite::params_from_iter(sql.params.iter()), |r| r.get(0));
        rows.unwrap().map(Result::unwrap).collect()
    }

    fn pending(conn: &Connection) -> Vec<i64> {
        let mut st = conn.prepare("SELECT block FROM calls_text_pending ORDER BY 1").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    }

    #[test]
    fn pending_blocks_are_candidates_until_rebuilt() {
        let mut conn = database();
        let insert = "INSERT INTO calls (rowid, project_key, id, bucket, inputs, output) \
                      VALUES (?1, 1, ?1, 0, ?2, ?3)";
        for (rowid, inputs, output) in [
            (1, r#"{"q":"alpha"}"#, None),
            (64, r#"{"q":"bravo"}"#, Some(r#""charlie""#)),
            (200, "{}", Some(r#"{"a":"delta"}"#)),
        ] {
            conn.execute(insert, params![rowid, inputs, output]).unwrap();
            pend(&conn, rowid).unwrap();
        }
        assert_eq!(pending(&conn), [0, 1, 3]);
        // Pending blocks are candidates for every needle.
        assert_eq!(blocks_for(&conn, "zulu"), [0, 1, 3]);
        assert_eq!(catch_up(&mut conn).unwrap(), 3);
        assert!(pending(&conn).is_empty());
        assert_eq!(blocks_for(&conn, "alpha"), [0]);
        assert_eq!(blocks_for(&conn, "HARL"), [1]);
        assert_eq!(blocks_for(&conn, "delta"), [3]);
        assert!(blocks_for(&conn, "zulu").is_empty());

        // A rebuilt block has the new text only.
        conn.execute("UPDATE calls SET output = '\"zulu\"' WHERE rowid = 64", []).unwrap();
        pend(&conn, 64).unwrap();
        assert_eq!(pending(&conn), [1]);
        catch_up(&mut conn).unwrap();
        assert_eq!(blocks_for(&conn, "zulu"), [1]);
        assert!(blocks_for(&conn, "charlie").is_empty());
        // A block rebuilt after its rows are gone has no entry.
        conn.execute("DELETE FROM calls WHERE rowid = 200", []).unwrap();
        pend(&conn, 200).unwrap();
        catch_up(&mut conn).unwrap();
        let entries: i64 =
            conn.query_row("SELECT count(*) FROM calls_text", [], |r| r.get(0)).unwrap();
        assert_eq!(entries, 2);
    }

    #[test]
    fn idle_steps_wait_for_a_full_step_and_leave_the_newest_block() {
        let mut conn = database();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        let sync = |conn: &Connection| -> i64 {
            conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
        };
        let insert = "INSERT INTO calls (rowid, project_key, id, bucket, inputs) VALUES (?1, 1, ?1, 0, '{}')";
        let add = |conn: &Connection, block: i64| {
            conn.execute(insert, [block * 64 + 1]).unwrap();
            pend(conn, block * 64 + 1).unwrap();
        };
        for block in 0..20 {
            add(&conn, block);
        }
        let mut idle = idle_work();
        // A brief gap with a full step's backlog works, and leaves the block of the newest row.
        assert_eq!(idle(&mut conn, Pause::Brief), Idle::More);
        assert_eq!(sync(&conn), 2);
        assert_eq!(pending(&conn), [19]);
        // Less than a full step waits for a lasting pause.
        add(&conn, 30);
        assert_eq!(idle(&mut conn, Pause::Brief), Idle::AtPause);
        assert_eq!(idle(&mut conn, Pause::Lasting), Idle::More);
        assert_eq!(pending(&conn), [30]);
        assert_eq!(idle(&mut conn, Pause::Lasting), Idle::Done);
        assert_eq!(pending(&conn), [30]);
        // A step that fails restores the setting too.
        pend(&conn, 1).unwrap();
        conn.execute_batch("DROP TABLE calls_text").unwrap();
        assert_eq!(idle(&mut conn, Pause::Lasting), Idle::Done);
        assert_eq!(sync(&conn), 2);
    }

    #[test]
    fn a_block_that_is_not_json_matches_everything() {
        let mut conn = database();
        conn.execute(
            "INSERT INTO calls (rowid, project_key, id, bucket, inputs) VALUES (1, 1, 'a', 0, '\"\\q\"')",
            [],
        )
        .unwrap();
        pend(&conn, 1).unwrap();
        catch_up(&mut conn).unwrap();
        assert_eq!(blocks_for(&conn, "anything"), [0]);
    }
}
