//! `$contains` on a JSON path first asks the substring index which blocks of rows can hold the
//! needle (`calls_text`), then tests the row's JSON text (`hd_may_contain`) so that rows which
//! cannot match are not parsed. Neither may ever change an answer: every query here runs twice,
//! once as compiled on a database whose index is built, and once on a database whose index is
//! all pending and where the pretest passes every row, and the two must select the same calls.
//! Each document is a block of its own, so the index answers for each one. The documents spell
//! values every way JSON allows (escapes, `\/`, numbers as written, characters whose lower case
//! is ASCII).
#![cfg(feature = "sqlite")]

use heddle_proto::calls::CallsQueryReq;
use heddle_store::sqlite::{migrations, sql, text_index};
use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;
use serde_json::json;

const PROJECT: &str = "e/p";

/// Raw JSON texts of `inputs`, as a client may send them.
const DOCUMENTS: &[&str] = &[
    r#"{"q":"a zqxvortex b"}"#,
    r#"{"q":"ZQXVORTEX"}"#,
    r#"{"q":"zqx\u0076ortex"}"#,
    r#"{"q":"\u005Aqxvortex"}"#,
    r#"{"q":"line\nvortex\t"}"#,
    r#"{"q":"say \"vortex\""}"#,
    r#"{"q":"a\/b and a/b"}"#,
    r#"{"q":"a\/b only"}"#,
    r#"{"q":"\u212Aey"}"#,
    "{\"q\":\"\u{212A}EY\"}",
    "{\"q\":\"\u{130}stanbul\"}",
    r#"{"q":"\u0130stanbul"}"#,
    "{\"q\":\"ÄPFEL\"}",
    r#"{"q":"\u00c4pfel"}"#,
    r#"{"q":1E2}"#,
    r#"{"q":-0.50}"#,
    r#"{"q":true}"#,
    r#"{"q":null}"#,
    r#"{"q":{"vortex":"vortex"}}"#,
    r#"{"q":["vortex"]}"#,
    r#"{"vortex":"key"}"#,
    r#"{"other":"vortex"}"#,
    r#"{}"#,
];

const NEEDLES: &[&str] = &[
    "vortex",
    "Vortex",
    "VORTEX",
    "zqxvortex",
    "key",
    "KEY",
    "a/b",
    "/",
    "1E2",
    "1e2",
    "0.5",
    "-0.50",
    "true",
    "TRUE",
    "äpf",
    "ÄPF",
    "istanbul",
    "i\u{307}stan",
    "\"vortex\"",
    "\nvortex",
    "x\\y",
    "",
    "null",
];

/// Rowids per block of the substring index (text_index.rs BLOCK_SHIFT).
const BLOCK: i64 = 64;

fn database(pretest_and_index: bool) -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    heddle_store::sqlite::configure(&conn).unwrap();
    if !pretest_and_index {
        conn.create_scalar_function(
            "hd_may_contain",
            3,
            FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
            |_| Ok(true),
        )
        .unwrap();
    }
    migrations::migrate(&mut conn).unwrap();
    conn.execute("INSERT INTO project_keys (project_key, project_id) VALUES (1, ?1)", [PROJECT])
        .unwrap();
    for (i, inputs) in DOCUMENTS.iter().enumerate() {
        conn.execute(
            "INSERT INTO calls (rowid, project_key, id, bucket, trace_id, op_name, started_at, \
             attributes, inputs, summary) VALUES (?1, ?2, ?3, 0, ?3, 'op', ?4, '{}', ?5, '{}')",
            rusqlite::params![
                BLOCK * (i as i64 + 1),
                1,
                format!("c{i:02}"),
                1_000 + i as i64,
                inputs
            ],
        )
        .unwrap();
    }
    text_index::pend_all(&conn).unwrap();
    let pending = |conn: &Connection| -> i64 {
        conn.query_row("SELECT count(*) FROM calls_text_pending", [], |r| r.get(0)).unwrap()
    };
    assert_eq!(pending(&conn), DOCUMENTS.len() as i64);
    if pretest_and_index {
        assert_eq!(text_index::catch_up(&mut conn).unwrap(), DOCUMENTS.len());
        assert_eq!(pending(&conn), 0);
    }
    conn
}

fn selected(conn: &Connection, query: serde_json::Value) -> Vec<String> {
    let req: CallsQueryReq =
        serde_json::from_value(json!({"project_id": PROJECT, "query": {"$expr": query}})).unwrap();
    let q = sql::select_calls(&req.validate().unwrap());
    let mut stmt = conn.prepare(&q.text).unwrap();
    let rows = stmt
        .query_map(rusqlite::params_from_iter(q.params.iter()), |row| row.get::<_, String>("id"))
        .unwrap();
    let mut ids: Vec<String> = rows.map(Result::unwrap).collect();
    ids.sort();
    ids
}

#[test]
fn the_pretest_never_changes_an_answer() {
    let (with, without) = (database(true), database(false));
    let mut matched = 0;
    for needle in NEEDLES {
        for case_insensitive in [false, true] {
            for path in ["inputs.q", "inputs.vortex"] {
                for negate in [false, true] {
                    let contains = json!({"$contains": {
                        "input": {"$getField": path},
                        "substr": {"$literal": needle},
                        "case_insensitive": case_insensitive,
                    }});
                    let query = if negate { json!({"$not": [contains]}) } else { contains };
                    let got = selected(&with, query.clone());
                    let want = selected(&without, query.clone());
                    assert_eq!(got, want, "{query}");
                    matched += want.len();
                }
            }
        }
    }
    // The documents do match: the comparison is not between two empty answers.
    assert!(matched > 500, "{matched}");
}

#[test]
fn escapes_and_folding_still_match() {
    let db = database(true);
    let ids = |needle: &str, ci: bool| {
        selected(
            &db,
            json!({"$contains": {"input": {"$getField": "inputs.q"},
                                 "substr": {"$literal": needle}, "case_insensitive": ci}}),
        )
    };
    // `\u0076` is a "v", `\u005A` a "Z".
    assert_eq!(ids("zqxvortex", false), ["c00", "c02"]);
    assert_eq!(ids("zqxvortex", true), ["c00", "c01", "c02", "c03"]);
    // `\/` is a "/".
    assert_eq!(ids("a/b", false), ["c06", "c07"]);
    // The Kelvin sign folds to "k", raw or escaped.
    assert_eq!(ids("key", true), ["c08", "c09"]);
    assert_eq!(ids("äpf", true), ["c12", "c13"]);
    // Numbers read as written.
    assert_eq!(ids("1E2", false), ["c14"]);
    assert_eq!(ids("-0.5", false), ["c15"]);
}
