//! The query language's conformance table (docs/query-language.md): every case (a query, a
//! sort, the ids expected in order) runs through the in-memory evaluator, the SQLite store and
//! the ClickHouse store over the same calls, and all three must answer the expected ids.

mod common;

use common::clickhouse::ClickHouse;
use futures::StreamExt;
use heddle_domain::expansion::{CallValues, compare_keys, eval, sort_key};
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallPart, CallsQuery, CallsQueryReq, EndPart, StartPart};
use heddle_proto::time::Micros;
use heddle_store::Store;
use heddle_store::clickhouse::ClickHouseStore;
use heddle_store::prelude::*;
use heddle_store::sqlite::{SqliteOptions, SqliteStore};
use serde_json::{Value, json};

/// One call: id, op name, display name, started (s), ended (s), inputs.
type RowSpec = (&'static str, &'static str, Option<&'static str>, i64, Option<i64>, Value);

fn rows() -> Vec<RowSpec> {
    vec![
        ("r1", "a", Some("Äpfel"), 1, Some(2), json!({"n": 1.5, "s": "x", "b": true})),
        ("r2", "b", None, 2, None, json!({"n": "10", "s": "Y", "o": {"k": 1}})),
        ("r3", "c", Some("apple"), 3, Some(10), json!({"n": null, "s": "äpfel"})),
        ("r4", "d", Some("BANANA"), 4, Some(5), json!({"n": 2, "arr": [5, 6], "s": "STRASSE"})),
    ]
}

fn part(r: &RowSpec) -> CallPart {
    let (id, op, display, started, ended, inputs) = r;
    CallPart {
        project: ProjectId::parse("e/p").unwrap(),
        id: (*id).to_owned(),
        trace_id: Some("t".into()),
        start: Some(StartPart {
            op_name: (*op).to_owned(),
            display_name: display.map(str::to_owned),
            parent_id: None,
            thread_id: None,
            turn_id: None,
            started_at: Micros(started * 1_000_000),
            attributes: "{}".into(),
            inputs: inputs.to_string(),
            otel_dump: None,
            wb_user_id: None,
            wb_run_id: None,
            wb_run_step: None,
        }),
        end: ended.map(|e| EndPart {
            ended_at: Micros(e * 1_000_000),
            summary: "{}".into(),
            output: Some("1".into()),
            exception: None,
            wb_run_step_end: None,
            display_name: None,
        }),
    }
}

fn f(name: &str) -> Value {
    json!({ "$getField": name })
}
fn l(v: Value) -> Value {
    json!({ "$literal": v })
}
fn conv(name: &str, to: &str) -> Value {
    json!({"$convert": {"input": f(name), "to": to}})
}

/// (what it checks, `$expr` or null, `sort_by` or null, expected ids in order)
fn cases() -> Vec<(&'static str, Value, Value, Vec<&'static str>)> {
    let none = Value::Null;
    let n_gt = json!({"$gt": [conv("inputs.n", "double"), l(json!(1.6))]});
    vec![
        ("$eq column", json!({"$eq": [f("op_name"), l(json!("b"))]}), none.clone(), vec!["r2"]),
        (
            "$gt timestamp",
            json!({"$gt": [f("started_at"), l(json!("1970-01-01T00:00:02Z"))]}),
            none.clone(),
            vec!["r3", "r4"],
        ),
        (
            "$gte unix seconds",
            json!({"$gte": [f("started_at"), l(json!(2))]}),
            none.clone(),
            vec!["r2", "r3", "r4"],
        ),
        ("$lt string", json!({"$lt": [f("op_name"), l(json!("b"))]}), none.clone(), vec!["r1"]),
        (
            "$lte string",
            json!({"$lte": [f("op_name"), l(json!("b"))]}),
            none.clone(),
            vec!["r1", "r2"],
        ),
        (
            "$in",
            json!({"$in": [f("op_name"), [l(json!("a")), l(json!("c"))]]}),
            none.clone(),
            vec!["r1", "r3"],
        ),
        (
            "$and",
            json!({"$and": [{"$gt": [f("started_at"), l(json!(1))]}, {"$lt": [f("op_name"), l(json!("d"))]}]}),
            none.clone(),
            vec!["r2", "r3"],
        ),
        (
            "$or",
            json!({"$or": [{"$eq": [f("op_name"), l(json!("a"))]}, {"$eq": [f("op_name"), l(json!("d"))]}]}),
            none.clone(),
            vec!["r1", "r4"],
        ),
        (
            "$not",
            json!({"$not": [{"$eq": [f("op_name"), l(json!("a"))]}]}),
            none.clone(),
            vec!["r2", "r3", "r4"],
        ),
        (
            "$contains case-sensitive",
            json!({"$contains": {"input": f("inputs.s"), "substr": l(json!("Y"))}}),
            none.clone(),
            vec!["r2"],
        ),
        (
            "$contains folds Unicode",
            json!({"$contains": {"input": f("inputs.s"), "substr": l(json!("ÄPF")), "case_insensitive": true}}),
            none.clone(),
            vec!["r3"],
        ),
        (
            "$contains folds Unicode in columns",
            json!({"$contains": {"input": f("display_name"), "substr": l(json!("äP")), "case_insensitive": true}}),
            none.clone(),
            vec!["r1"],
        ),
        (
            "JSON number as text",
            json!({"$eq": [f("inputs.n"), l(json!("1.5"))]}),
            none.clone(),
            vec!["r1"],
        ),
        (
            "JSON bool as text",
            json!({"$eq": [f("inputs.b"), l(json!("true"))]}),
            none.clone(),
            vec!["r1"],
        ),
        (
            "JSON null, missing and objects read as empty",
            json!({"$eq": [f("inputs.o"), l(json!(""))]}),
            none.clone(),
            vec!["r1", "r2", "r3", "r4"],
        ),
        (
            "JSON array index",
            json!({"$eq": [f("inputs.arr.1"), l(json!("6"))]}),
            none.clone(),
            vec!["r4"],
        ),
        ("$convert double", n_gt.clone(), none.clone(), vec!["r2", "r4"]),
        ("NULL comparison's $not is true", json!({"$not": [n_gt]}), none.clone(), vec!["r1", "r3"]),
        (
            "$convert int",
            json!({"$eq": [conv("inputs.n", "int"), l(json!(10))]}),
            none.clone(),
            vec!["r2"],
        ),
        (
            "$convert exists",
            json!({"$eq": [conv("inputs.n", "exists"), l(json!(true))]}),
            none.clone(),
            vec!["r1", "r2", "r4"],
        ),
        (
            "$convert string of a timestamp is its microseconds",
            json!({"$eq": [conv("started_at", "string"), l(json!("3000000"))]}),
            none.clone(),
            vec!["r3"],
        ),
        (
            "null literal on a column",
            json!({"$eq": [f("ended_at"), l(json!(null))]}),
            none.clone(),
            vec!["r2"],
        ),
        (
            "null literal on a JSON path",
            json!({"$eq": [f("inputs.n"), l(json!(null))]}),
            none.clone(),
            vec!["r3"],
        ),
        (
            "$in with a NULL input",
            json!({"$in": [f("display_name"), [l(json!("apple"))]]}),
            none.clone(),
            vec!["r3"],
        ),
        (
            "sort: NULL first ascending, bytes order",
            none.clone(),
            json!([{"field": "display_name", "direction": "asc"}]),
            vec!["r2", "r4", "r3", "r1"],
        ),
        (
            "sort: NULL last descending",
            none.clone(),
            json!([{"field": "ended_at", "direction": "desc"}]),
            vec!["r3", "r4", "r1", "r2"],
        ),
        (
            "sort: JSON paths present first, numerically",
            none.clone(),
            json!([{"field": "inputs.n", "direction": "asc"}]),
            vec!["r1", "r4", "r2", "r3"],
        ),
        (
            "sort: JSON paths present first descending too",
            none.clone(),
            json!([{"field": "inputs.n", "direction": "desc"}]),
            vec!["r2", "r4", "r1", "r3"],
        ),
        (
            "sort: JSON strings after numbers",
            none.clone(),
            json!([{"field": "inputs.s", "direction": "asc"}]),
            vec!["r4", "r2", "r1", "r3"],
        ),
    ]
}

fn query(expr: &Value, sort: &Value) -> CallsQuery {
    let mut body = json!({"project_id": "e/p"});
    if !expr.is_null() {
        body["query"] = json!({ "$expr": expr });
    }
    if !sort.is_null() {
        body["sort_by"] = sort.clone();
    }
    let req: CallsQueryReq = serde_json::from_value(body).unwrap();
    req.validate().unwrap()
}

async fn ids_of(store: &dyn Store, q: CallsQuery) -> Vec<String> {
    let calls: Vec<_> = store.query_calls(q).await.unwrap().collect().await;
    calls.into_iter().map(|c| c.unwrap().id).collect()
}

/// The evaluator's answer over every call (as the store reads them back).
async fn evaluated(store: &dyn Store, q: &CallsQuery) -> Vec<String> {
    let all: Vec<Call> = store
        .query_calls(query(&Value::Null, &Value::Null))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    let mut rows: Vec<CallValues> = all
        .into_iter()
        .map(CallValues::new)
        .filter(|c| q.expr.as_ref().is_none_or(|e| eval(e, c) == Some(true)))
        .collect();
    rows.sort_by(|a, b| compare_keys(&q.sort, &sort_key(&q.sort, a), &sort_key(&q.sort, b)));
    rows.into_iter().map(|c| c.call.id).collect()
}

#[tokio::test]
async fn evaluator_sqlite_and_clickhouse_agree_with_the_table() {
    let parts: Vec<CallPart> = rows().iter().map(part).collect();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    sqlite.apply_call_parts(parts.clone()).await.unwrap();
    let ch = ClickHouse::start();
    let db = ch.database.as_deref().unwrap_or("default");
    let clickhouse = ClickHouseStore::connect(&ch.url, "default", "", db).await.unwrap();
    clickhouse.apply_call_parts(parts).await.unwrap();

    let mut failures = Vec::new();
    for (what, expr, sort, expected) in cases() {
        let expected: Vec<String> = expected.into_iter().map(str::to_owned).collect();
        let answers = [
            ("evaluator", evaluated(&sqlite, &query(&expr, &sort)).await),
            ("sqlite", ids_of(&sqlite, query(&expr, &sort)).await),
            ("clickhouse", ids_of(&clickhouse, query(&expr, &sort)).await),
        ];
        for (who, got) in answers {
            if got != expected {
                failures.push(format!("{what} ({who}): expected {expected:?}, got {got:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} disagreements:\n{}", failures.len(), failures.join("\n"));
}
