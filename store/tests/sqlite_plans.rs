//! The filters the SDK and the UI use on large projects are answered from an index: the query
//! plan SQLite picks for each compiled query names the index we expect (docs/storage.md#indexes).
//! A plan that scans the time index for one trace is correct but hundreds of times slower at a
//! million calls, so it fails here rather than in a benchmark.
#![cfg(feature = "sqlite")]

use heddle_proto::calls::CallsQueryReq;
use heddle_store::sqlite::{migrations, sql};
use rusqlite::Connection;
use serde_json::{Value, json};

const PROJECT: &str = "e/p";
const OPS: [&str; 4] = ["predict", "retrieve", "chat", "rerank"];

fn op_ref(op: &str) -> String {
    format!("weave:///{PROJECT}/op/{op}:digest")
}

/// A project of `traces` traces of one root and three children; every 50th call failed. With the
/// statistics the writer takes after seeding.
fn seeded(traces: usize) -> Connection {
    let conn = seeded_after_analysis(traces, false);
    heddle_store::sqlite::analyze(&conn);
    conn
}

/// The same project, with the statistics of the database before it was seeded (`analyzed`), as
/// the writer has them for up to half a minute after it opens an empty one, or none.
fn seeded_after_analysis(traces: usize, analyzed: bool) -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    heddle_store::sqlite::configure(&conn).unwrap();
    migrations::migrate(&mut conn).unwrap();
    if analyzed {
        heddle_store::sqlite::analyze(&conn);
    }
    let tx = conn.transaction().unwrap();
    {
        tx.execute("INSERT INTO project_keys (project_key, project_id) VALUES (1, ?1)", [PROJECT])
            .unwrap();
        tx.execute("INSERT INTO call_buckets (project_key, bucket) VALUES (1, 0)", []).unwrap();
        let mut insert = tx
            .prepare(
                "INSERT INTO calls (project_key, id, bucket, trace_id, parent_id, op_name, \
                 started_at, ended_at, attributes, inputs, output, summary, exception) \
                 VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6, ?7, '{}', '{}', 'null', '{}', ?8)",
            )
            .unwrap();
        let mut n = 0i64;
        for t in 0..traces {
            let trace = format!("trace-{t}");
            let root = format!("{t}-0");
            for (i, op) in OPS.iter().enumerate() {
                n += 1;
                let id = format!("{t}-{i}");
                let parent = (i > 0).then(|| root.clone());
                let exception = (n % 50 == 0).then_some("ValueError: boom");
                let start = 1_700_000_000_000_000 + n * 1000;
                insert
                    .execute(rusqlite::params![
                        1,
                        id,
                        trace,
                        parent,
                        op_ref(op),
                        start,
                        start + 500,
                        exception
                    ])
                    .unwrap();
            }
        }
    }
    tx.commit().unwrap();
    conn
}

/// The plan of `sql` as SQLite reports it, one line per step.
fn plan(conn: &Connection, sql: &sql::Sql) -> String {
    let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", sql.text)).unwrap();
    let rows = st
        .query_map(rusqlite::params_from_iter(sql.params.iter()), |r| r.get::<_, String>(3))
        .unwrap();
    rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
}

fn query(extra: Value) -> heddle_proto::calls::CallsQuery {
    let mut body = json!({"project_id": PROJECT, "limit": 100,
                          "sort_by": [{"field": "started_at", "direction": "desc"}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let req: CallsQueryReq = serde_json::from_value(body).unwrap();
    req.validate().unwrap()
}

#[test]
fn ui_filters_use_their_index() {
    let conn = seeded(2_000);
    let status = json!({"$expr": {"$eq": [{"$getField": "summary.weave.status"},
                                          {"$literal": "error"}]}});
    // (filter, the index a page in time order should use, the index a count should use). A
    // page of a filter matching a quarter of the calls may walk the time index instead: as good.
    let cases = [
        (
            "one trace",
            json!({"filter": {"trace_ids": ["trace-7"]}}),
            Some("calls_by_trace (project_key=? AND bucket=? AND trace_id=?"),
            "calls_by_trace (project_key=? AND bucket=? AND trace_id=?",
        ),
        (
            "roots",
            json!({"filter": {"trace_roots_only": true}}),
            None,
            "COVERING INDEX calls_by_parent (project_key=? AND bucket=? AND parent_id=?",
        ),
        (
            "children",
            json!({"filter": {"parent_ids": ["p-1"]}}),
            Some("calls_by_parent (project_key=? AND bucket=? AND parent_id=?"),
            "COVERING INDEX calls_by_parent (project_key=? AND bucket=? AND parent_id=?",
        ),
        (
            "one op",
            json!({"filter": {"op_names": [op_ref("chat")]}}),
            None,
            "COVERING INDEX calls_by_op",
        ),
        ("status", json!({"query": status}), Some("calls_live_by_status"), "calls_live_by_status"),
        (
            "by ids",
            json!({"filter": {"call_ids": ["7-1", "9-2"]}}),
            Some("SEARCH calls USING INTEGER PRIMARY KEY (rowid=?)"),
            "SEARCH calls USING INTEGER PRIMARY KEY (rowid=?)",
        ),
        ("everything", json!({}), Some("calls_live_by_start"), "COVERING INDEX"),
    ];
    for (name, extra, page_index, count_index) in cases {
        let q = query(extra);
        for (what, sql, index) in [
            ("page", sql::select_calls(&q), page_index),
            ("count", sql::count_calls(&q), Some(count_index)),
        ] {
            let plan = plan(&conn, &sql);
            assert!(!plan.contains("SCAN calls"), "{name} ({what}) scans the table:\n{plan}");
            if let Some(index) = index {
                assert!(plan.contains(index), "{name} ({what}) should use {index}:\n{plan}");
            }
        }
    }
}

#[test]
fn status_index_gives_the_same_answers_as_the_expression() {
    // The index holds the compiler's status expression: both ways of reading agree.
    let conn = seeded(100);
    let q = query(json!({"query": {"$expr": {"$eq": [{"$getField": "summary.weave.status"},
                                                     {"$literal": "error"}]}},
                         "limit": null}));
    let count = sql::count_calls(&q);
    let n: i64 = conn
        .query_row(&count.text, rusqlite::params_from_iter(count.params.iter()), |r| r.get(0))
        .unwrap();
    let scanned: i64 = conn
        .query_row("SELECT COUNT(*) FROM calls NOT INDEXED WHERE exception IS NOT NULL", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!((n, scanned), (8, 8));
}

/// Listed call ids are read by rowid, whatever the statistics say. The writer refreshes them at
/// most every half minute: with those of an empty database, the planner walked a million calls'
/// time index for one call.
#[test]
fn listed_ids_are_read_by_rowid_whatever_the_statistics() {
    for analyzed in [false, true] {
        let conn = seeded_after_analysis(2_000, analyzed);
        let q = query(json!({"filter": {"call_ids": ["7-1", "9-2"]}}));
        for (what, sql) in [("page", sql::select_calls(&q)), ("count", sql::count_calls(&q))] {
            let plan = plan(&conn, &sql);
            let by_rowid = "SEARCH calls USING INTEGER PRIMARY KEY (rowid=?)";
            assert!(plan.contains(by_rowid), "{what} ({analyzed}):\n{plan}");
            assert!(!plan.contains("INDEX calls_"), "{what} ({analyzed}) uses an index:\n{plan}");
        }
    }
}
