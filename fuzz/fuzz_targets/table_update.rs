//! `/table/update`: `tables::apply_updates` on arbitrary base tables and edit lists, against a
//! naive reference on a `Vec`.
//!
//! Properties (docs/fuzzing.md): nothing panics; the result (row list, table digest, per-edit
//! row digests, rows brought in) equals the reference's; an edit list the reference refuses is
//! refused, naming the same (first) failing edit.
#![no_main]

use arbitrary::Arbitrary;
use heddle_proto::digest::{row_digest, table_digest};
use heddle_proto::tables::{TableUpdate, apply_updates};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Arbitrary, Debug, Clone)]
enum Row {
    Object(u8),
    /// Rows must be objects: these are refused.
    Scalar(u8),
}

impl Row {
    fn value(&self) -> Value {
        match self {
            Row::Object(n) => json!({"r": n}),
            Row::Scalar(n) => json!(n),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Index {
    /// Mostly in or near range.
    Small(i8),
    Any(i64),
}

impl Index {
    fn get(self) -> i64 {
        match self {
            Index::Small(i) => i as i64,
            Index::Any(i) => i,
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Edit {
    Append(Row),
    Pop(Index),
    Insert(Index, Row),
}

#[derive(Arbitrary, Debug)]
struct Input {
    base: Vec<u8>,
    edits: Vec<Edit>,
}

/// What the edits give: the rows, the digest per edit, and the digests of the rows brought in.
type Outcome = (Vec<String>, Vec<String>, Vec<String>);

/// The expected outcome, or the index of the first edit that fails.
fn reference(mut rows: Vec<String>, edits: &[Edit]) -> Result<Outcome, usize> {
    let (mut updated, mut new_rows) = (Vec::new(), Vec::new());
    for (i, e) in edits.iter().enumerate() {
        match e {
            Edit::Append(row) | Edit::Insert(_, row) => {
                let at = match e {
                    Edit::Insert(index, _) => {
                        let at = usize::try_from(index.get()).map_err(|_| i)?;
                        if at > rows.len() {
                            return Err(i);
                        }
                        at
                    }
                    _ => rows.len(),
                };
                let v = row.value();
                if !v.is_object() {
                    return Err(i);
                }
                let d = row_digest(&v);
                rows.insert(at, d.clone());
                updated.push(d.clone());
                new_rows.push(d);
            }
            Edit::Pop(index) => {
                let at = usize::try_from(index.get()).map_err(|_| i)?;
                if at >= rows.len() {
                    return Err(i);
                }
                updated.push(rows.remove(at));
            }
        }
    }
    Ok((rows, updated, new_rows))
}

fuzz_target!(|input: Input| {
    let base: Vec<String> = input.base.iter().map(|n| format!("base-row-{n}")).collect();
    let updates: Vec<TableUpdate> = input
        .edits
        .iter()
        .map(|e| match e {
            Edit::Append(row) => TableUpdate::Append { row: row.value() },
            Edit::Pop(i) => TableUpdate::Pop { index: i.get() },
            Edit::Insert(i, row) => TableUpdate::Insert { index: i.get(), row: row.value() },
        })
        .collect();
    let got = apply_updates(base.clone(), updates);
    match (reference(base, &input.edits), got) {
        (Ok((rows, updated, new_rows)), Ok(out)) => {
            assert_eq!(out.digest, table_digest(&rows));
            assert_eq!(out.row_digests, rows);
            assert_eq!(out.updated_row_digests, updated);
            let got_new: Vec<String> = out.new_rows.iter().map(|r| r.digest.clone()).collect();
            assert_eq!(got_new, new_rows);
        }
        (Err(i), Err(e)) => {
            let e = e.to_string();
            assert!(
                e.contains(&format!("update {i}:")) || e.contains(&format!("of update {i} ")),
                "edit {i} should fail first: {e}"
            );
        }
        (want, got) => panic!("reference {want:?}, apply_updates {got:?}"),
    }
});
