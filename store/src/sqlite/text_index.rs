//! The substring index of call inputs and outputs (docs/storage.md#substring-index): which
//! blocks of 64 consecutive rows of `calls` can hold a needle, so that `$contains` on `inputs`
//! or `output` reads those rows only instead of the whole project.
//!
//! A block's entry in `calls_text` (FTS5, contentless, no positions) lists every trigram of its
//! rows' inputs and outputs, each hashed to 32 bits and spelled as a 7-letter word. A needle's
//! trigrams are looked up the same way: the blocks that have all of them are candidates, and
//! their rows are then tested in full. Blocks rather than rows because a block of 64 rows has
//! about as many distinct trigrams as a few of its rows, so the index stays small (~30 bytes per
//! call of the benchmark's text) and cheap to build.
//!
//! The index is never wrong, only behind. Triggers on `calls` (migration 0015) list the block of
//! every row inserted, deleted, or whose inputs or output changed in `calls_text_pending`, in
//! the same transaction. The writer thread rebuilds pending blocks when it has no writes to do
//! ([`index_step`]), and a query takes every pending block as a candidate. So an answer is the
//! same with or without the index; a backlog only makes it slower.
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

use std::collections::HashSet;

use rusqlite::{Connection, params};

use super::compile::Sql;

/// Rows per block, as a shift of the rowid. Migration 0015's triggers and [`candidates`] spell
/// the same number.
pub(crate) const BLOCK_SHIFT: u32 = 6;

/// The word of a block that matches every query: its text could not be read as JSON, so its
/// trigrams are not known. Shorter than any trigram's word, so it is never one of them.
const ANY: &str = "any";

/// Most trigrams looked up for one needle. Any subset of a needle's trigrams gives a superset
/// of its blocks; a few rare ones select as well as all of them, and each costs a doclist read.
const MAX_QUERY_TRIGRAMS: usize = 16;

/// Most blocks one [`index_step`] rebuilds: 512 rows, a few milliseconds, the longest a write
/// that arrives meanwhile waits for the writer.
pub(crate) const BLOCKS_PER_STEP: usize = 8;

/// For `$contains` of `needle` in `inputs` or `output`: renders a test that a row's block is
/// one the index lists for the needle or one still pending, and returns true; false (nothing
/// rendered) when the index cannot answer the needle ([`query`]). The blocks are computed once
/// per statement. The test reads only the rowid, which every index of `calls` holds, so SQLite
/// makes it before it reads the row: a row outside the blocks costs an index entry, not a read
/// of its JSON. It is a test rather than a list of rowids to fetch on purpose: a needle found
/// almost everywhere then costs the scan it costs without the index, where fetching the rows
/// one by one took three times as long.
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
    if grams.seen.is_empty() {
        return None;
    }
    // Spread over the needle, in its order, so that a long needle is not judged by its start.
    let mut words: Vec<u32> = grams.in_order;
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

/// The distinct trigram hashes of a block's texts.
#[derive(Default)]
pub(crate) struct Trigrams {
    seen: HashSet<u32, foldhash::fast::FixedState>,
    /// The hashes in the order first seen (queries only; a block's order does not matter).
    in_order: Vec<u32>,
    window: [u32; 3],
    filled: usize,
    unreadable: bool,
}

impl Trigrams {
    fn clear(&mut self) {
        self.seen.clear();
        self.in_order.clear();
        self.filled = 0;
        self.unreadable = false;
    }

    fn add_char(&mut self, c: char) {
        let mut push = |c: char| {
            self.window = [self.window[1], self.window[2], c as u32];
            self.filled += 1;
            if self.filled >= 3 {
                let packed = (u64::from(self.window[0]) << 42)
                    | (u64::from(self.window[1]) << 21)
                    | u64::from(self.window[2]);
                let h = (packed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32;
                if self.seen.insert(h) {
                    self.in_order.push(h);
                }
            }
        };
        if c.is_ascii() {
            push(c.to_ascii_lowercase());
        } else {
            c.to_lowercase().for_each(push);
        }
    }

    fn add_text(&mut self, text: impl Iterator<Item = char>) {
        for c in text {
            self.add_char(c);
        }
    }

    /// Adds a stored JSON text with each string's escapes decoded. A text that is not JSON as
    /// stored makes the block match every query.
    pub(crate) fn add_json(&mut self, json: &str) {
        if decode_json(json, |c| self.add_char(c)).is_none() {
            self.unreadable = true;
        }
        // Trigrams never span two texts: each is a value's run on its own.
        self.filled = 0;
    }

    /// The block's FTS5 text: one word per trigram.
    fn words(&self, out: &mut String) {
        out.clear();
        if self.unreadable {
            out.push_str(ANY);
            out.push(' ');
        }
        for w in &self.seen {
            push_word(out, *w);
            out.push(' ');
        }
    }
}

/// A trigram hash as seven base-32 letters, a word of FTS5's `ascii` tokenizer.
fn push_word(out: &mut String, mut h: u32) {
    const LETTERS: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    for _ in 0..7 {
        out.push(LETTERS[(h & 31) as usize] as char);
        h >>= 5;
    }
}

/// Calls `emit` with the characters of `json`, each string's escapes decoded (`\n` a newline,
/// `\u00e9` an é, a surrogate pair one character). `None` on an escape JSON does not have or a
/// lone surrogate: the stored members are valid JSON, so this is only a guard.
fn decode_json(json: &str, mut emit: impl FnMut(char)) -> Option<()> {
    let mut chars = json.chars();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match (in_string, c) {
            (true, '\\') => {
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
                emit(decoded);
            }
            (_, '"') => {
                in_string = !in_string;
                emit(c);
            }
            _ => emit(c),
        }
    }
    Some(())
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let mut v = 0;
    for _ in 0..4 {
        v = v * 16 + chars.next()?.to_digit(16)?;
    }
    Some(v)
}

const PENDING: &str = "SELECT block FROM calls_text_pending ORDER BY block LIMIT ?1";
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

/// Rebuilds up to [`BLOCKS_PER_STEP`] pending blocks, lowest first, inside the caller's
/// transaction; returns how many it rebuilt (0: the index is up to date).
pub(crate) fn index_step(conn: &Connection, b: &mut Builder) -> rusqlite::Result<usize> {
    let blocks: Vec<i64> = conn
        .prepare_cached(PENDING)?
        .query_map([BLOCKS_PER_STEP as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut rows = conn.prepare_cached(BLOCK_ROWS)?;
    let mut delete = conn.prepare_cached(DELETE_ENTRY)?;
    let mut insert = conn.prepare_cached(INSERT_ENTRY)?;
    let mut done = conn.prepare_cached(DONE)?;
    for &block in &blocks {
        b.grams.clear();
        let first = block << BLOCK_SHIFT;
        let mut found = rows.query(params![first, first + (1 << BLOCK_SHIFT) - 1])?;
        let mut any_row = false;
        while let Some(row) = found.next()? {
            any_row = true;
            for col in 0..2 {
                if let Some(text) = row.get_ref(col)?.as_str_or_null()? {
                    b.grams.add_json(text);
                }
            }
        }
        delete.execute([block])?;
        if any_row {
            b.grams.words(&mut b.words);
            insert.execute(params![block, b.words])?;
        }
        done.execute([block])?;
    }
    Ok(blocks.len())
}

/// Rebuilds every pending block in one transaction; returns how many it rebuilt. For tests and
/// tools: the server builds the index in the writer's idle steps ([`idle_work`]).
pub fn catch_up(conn: &mut Connection) -> rusqlite::Result<usize> {
    let mut builder = Builder::default();
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut rebuilt = 0;
    loop {
        match index_step(&tx, &mut builder)? {
            0 => break,
            n => rebuilt += n,
        }
    }
    tx.commit()?;
    Ok(rebuilt)
}

/// The writer's idle work ([`super::writer::Writer::start`]): one [`index_step`] per call, in a
/// transaction of its own, committed like any other (`synchronous = FULL`).
pub(crate) fn idle_work() -> impl FnMut(&mut Connection) -> bool + Send {
    let mut builder = Builder::default();
    move |conn| {
        let mut step = || -> rusqlite::Result<usize> {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let rebuilt = index_step(&tx, &mut builder)?;
            tx.commit()?;
            Ok(rebuilt)
        };
        match step() {
            Ok(rebuilt) => rebuilt > 0,
            Err(e) => {
                tracing::warn!(error = %e, "sqlite substring index step failed");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(json: &str) -> Option<String> {
        let mut s = String::new();
        decode_json(json, |c| s.push(c)).map(|()| s)
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
            n.in_order.iter().all(|h| text.seen.contains(h))
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
    fn every_change_pends_its_block_until_rebuilt() {
        let mut conn = database();
        let insert = "INSERT INTO calls (rowid, project_id, id, inputs, output) VALUES (?1, 'e/p', ?1, ?2, ?3)";
        conn.execute(insert, params![1, r#"{"q":"alpha"}"#, None::<String>]).unwrap();
        conn.execute(insert, params![64, r#"{"q":"bravo"}"#, r#""charlie""#]).unwrap();
        conn.execute(insert, params![200, "{}", r#"{"a":"delta"}"#]).unwrap();
        assert_eq!(pending(&conn), [0, 1, 3]);
        // Pending blocks are candidates for every needle.
        assert_eq!(blocks_for(&conn, "zulu"), [0, 1, 3]);
        assert_eq!(catch_up(&mut conn).unwrap(), 3);
        assert!(pending(&conn).is_empty());
        assert_eq!(blocks_for(&conn, "alpha"), [0]);
        assert_eq!(blocks_for(&conn, "HARL"), [1]);
        assert_eq!(blocks_for(&conn, "delta"), [3]);
        assert!(blocks_for(&conn, "zulu").is_empty());

        // A new output pends its block, and the rebuilt entry has the new text only.
        conn.execute("UPDATE calls SET output = '\"zulu\"' WHERE rowid = 64", []).unwrap();
        assert_eq!(pending(&conn), [1]);
        catch_up(&mut conn).unwrap();
        assert_eq!(blocks_for(&conn, "zulu"), [1]);
        assert!(blocks_for(&conn, "charlie").is_empty());
        // Other columns leave the index alone.
        conn.execute("UPDATE calls SET summary = '{}' WHERE rowid = 64", []).unwrap();
        assert!(pending(&conn).is_empty());
        // A deleted row's block is rebuilt without it; an empty block has no entry.
        conn.execute("DELETE FROM calls WHERE rowid = 200", []).unwrap();
        assert_eq!(pending(&conn), [3]);
        catch_up(&mut conn).unwrap();
        let entries: i64 =
            conn.query_row("SELECT count(*) FROM calls_text", [], |r| r.get(0)).unwrap();
        assert_eq!(entries, 2);
    }

    #[test]
    fn a_block_that_is_not_json_matches_everything() {
        let mut conn = database();
        conn.execute(
            "INSERT INTO calls (rowid, project_id, id, inputs) VALUES (1, 'e/p', 'a', '\"\\q\"')",
            [],
        )
        .unwrap();
        catch_up(&mut conn).unwrap();
        assert_eq!(blocks_for(&conn, "anything"), [0]);
    }
}
