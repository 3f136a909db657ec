//! SQL functions registered on every connection. They give `$convert` the query language's
//! semantics (a failed numeric cast is NULL, where SQLite's CAST would yield 0) and `$contains` its case
//! folding and its test of a row's JSON text before the value is extracted.

use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;

use super::substring::TextTest;

pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("hd_to_double", 1, flags, |ctx| {
        Ok(match ctx.get_raw(0) {
            ValueRef::Integer(i) => Some(i as f64),
            ValueRef::Real(f) => Some(f),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|f| f.is_finite()),
            _ => None,
        })
    })?;
    conn.create_scalar_function("hd_to_int", 1, flags, |ctx| {
        Ok(match ctx.get_raw(0) {
            ValueRef::Integer(i) => Some(i),
            ValueRef::Real(f) if f.is_finite() => Some(f as i64),
            ValueRef::Text(t) => std::str::from_utf8(t).ok().and_then(|s| s.trim().parse().ok()),
            _ => None,
        })
    })?;
    conn.create_scalar_function("hd_to_bool", 1, flags, |ctx| {
        Ok(match ctx.get_raw(0) {
            ValueRef::Integer(i) => Some(i != 0),
            ValueRef::Real(f) => Some(f != 0.0),
            ValueRef::Text(t) => match t {
                b"true" | b"1" => Some(true),
                b"false" | b"0" => Some(false),
                _ => None,
            },
            _ => None,
        })
    })?;
    // Case folding of `$contains` with `case_insensitive`: full Unicode, where SQLite's lower()
    // folds ASCII only (docs/query-language.md).
    conn.create_scalar_function("hd_fold", 1, flags, |ctx| {
        let s: Option<String> = ctx.get(0)?;
        Ok(s.map(|s| heddle_ql::eval::fold_case(&s)))
    })?;
    // hd_may_contain(json_text, needle, case_insensitive): false only when no value read from
    // the JSON text can contain the needle (substring.rs). The test is built once per statement.
    conn.create_scalar_function("hd_may_contain", 3, flags, |ctx| {
        let test = ctx.get_or_create_aux(1, |needle| -> rusqlite::Result<TextTest> {
            Ok(TextTest::new(needle.as_str()?, ctx.get(2)?))
        })?;
        Ok(match ctx.get_raw(0) {
            ValueRef::Text(text) => test.may_contain(text),
            // NULL and non-text columns read as '' or as their own text: test in full.
            _ => true,
        })
    })?;
    conn.create_scalar_function("hd_op_name", 1, flags, |ctx| {
        let op: Option<String> = ctx.get(0)?;
        Ok(op.map(|op| heddle_proto::calls::op_display_name(&op).to_owned()))
    })?;
    Ok(())
}
