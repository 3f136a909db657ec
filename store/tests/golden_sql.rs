//! Golden snapshots of the SQL both backends generate for representative queries (see
//! docs/query-language.md, "Golden SQL"). A change to the generated SQL fails here until the
//! new output is blessed: `HEDDLE_BLESS=1 cargo test -p heddle-store --test golden_sql`, then
//! review the diff of `store/tests/golden/` like any other change.

use std::path::PathBuf;

use heddle_proto::calls::CallsQueryReq;
use heddle_proto::feedback::FeedbackQueryReq;
use heddle_store::{clickhouse, sqlite};
use serde_json::{Value, json};

/// What a snapshot holds: the statement, then its parameters one per line.
fn render(text: &str, params: Vec<String>) -> String {
    let mut out = String::from(text);
    out.push_str("\n-- parameters\n");
    for p in params {
        out.push_str("-- ");
        out.push_str(&p);
        out.push('\n');
    }
    out
}

fn check(name: &str, got: String) -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("HEDDLE_BLESS").is_some() {
        std::fs::write(&path, &got).expect("writing the snapshot");
        return None;
    }
    match std::fs::read_to_string(&path) {
        Ok(want) if want == got => None,
        Ok(want) => Some(format!("{name}: the SQL changed.\n--- stored\n{want}\n--- now\n{got}")),
        Err(_) => Some(format!("{name}: no snapshot yet (run with HEDDLE_BLESS=1)")),
    }
}

fn calls(body: Value) -> heddle_proto::calls::CallsQuery {
    serde_json::from_value::<CallsQueryReq>(body).unwrap().validate().unwrap()
}

fn feedback(body: Value) -> heddle_proto::feedback::FeedbackQuery {
    serde_json::from_value::<FeedbackQueryReq>(body).unwrap().validate().unwrap().0
}

/// (snapshot name, calls request)
fn call_cases() -> Vec<(&'static str, Value)> {
    vec![
        (
            "calls_filter_expr_sort_page",
            json!({
                "project_id": "e/p",
                "filter": {"op_names": ["weave:///e/p/op/f:*", "g"], "trace_ids": ["t1"],
                           "parent_ids": ["p1"], "input_refs": ["weave:///e/p/object/o:d"],
                           "output_refs": ["weave:///e/p/object/o:d"], "thread_ids": [],
                           "wb_user_ids": ["u"], "wb_run_ids": ["r"], "turn_ids": ["x"],
                           "trace_roots_only": true},
                "query": {"$expr": {"$and": [
                    {"$eq": [{"$getField": "op_name"}, {"$literal": "f"}]},
                    {"$gt": [{"$getField": "started_at"}, {"$literal": "2026-01-01"}]},
                    {"$not": [{"$eq": [{"$getField": "display_name"}, {"$literal": null}]}]},
                    {"$or": [
                        {"$lt": [{"$getField": "wb_run_step"}, {"$literal": 3}]},
                        {"$lte": [{"$getField": "summary.weave.latency_ms"}, {"$literal": 2.5}]},
                        {"$gte": [{"$getField": "summary.weave.status"}, {"$literal": "error"}]}
                    ]},
                    {"$in": [{"$getField": "summary.weave.trace_name"},
                             [{"$literal": "a"}, {"$getField": "op_name"}]]},
                    {"$contains": {"input": {"$getField": "display_name"},
                                   "substr": {"$literal": "Ab"}, "case_insensitive": true}},
                    {"$contains": {"input": {"$getField": "op_name"}, "substr": {"$literal": "x"}}},
                    {"$contains": {"input": {"$getField": "inputs.question"},
                                   "substr": {"$literal": "Vortex"}, "case_insensitive": true}}
                ]}},
                "sort_by": [{"field": "op_name", "direction": "desc"}, {"field": "started_at"}],
                "limit": 10, "offset": 20
            }),
        ),
        (
            "calls_json_paths",
            json!({
                "project_id": "e/p",
                "query": {"$expr": {"$and": [
                    {"$eq": [{"$getField": "inputs.a.0.b"}, {"$literal": "x"}]},
                    {"$eq": [{"$getField": r"attributes.k\.x"}, {"$literal": null}]},
                    {"$gt": [{"$convert": {"input": {"$getField": "output.score"}, "to": "double"}},
                             {"$literal": 0.5}]},
                    {"$eq": [{"$convert": {"input": {"$getField": "output"}, "to": "int"}},
                             {"$literal": 2}]},
                    {"$eq": [{"$convert": {"input": {"$getField": "summary.ok"}, "to": "bool"}},
                             {"$literal": true}]},
                    {"$eq": [{"$convert": {"input": {"$getField": "inputs.n"}, "to": "exists"}},
                             {"$literal": false}]},
                    {"$eq": [{"$convert": {"input": {"$getField": "wb_run_step"}, "to": "string"}},
                             {"$literal": "3"}]},
                    {"$gt": [{"$convert": {"input": {"$getField": "started_at"}, "to": "double"}},
                             {"$literal": 1}]},
                    {"$gt": [{"$convert": {"input": {"$getField": "ended_at"}, "to": "int"}},
                             {"$literal": 1}]},
                    {"$eq": [{"$convert": {"input": {"$getField": "started_at"}, "to": "string"}},
                             {"$literal": "1"}]}
                ]}},
                "sort_by": [{"field": "inputs.score", "direction": "desc"}]
            }),
        ),
        (
            "calls_feedback_fields",
            json!({
                "project_id": "e/p",
                "query": {"$expr": {"$and": [
                    {"$eq": [{"$getField": "feedback.[wandb.runnable.s].payload.output.a"},
                             {"$literal": "1"}]},
                    {"$eq": [{"$getField": "feedback.[*].runnable_ref"}, {"$literal": null}]}
                ]}},
                "sort_by": [{"field": "feedback.[*].trigger_ref", "direction": "desc"}],
                "limit": 5
            }),
        ),
        (
            "calls_by_ids_unpaged",
            json!({"project_id": "e/p", "filter": {"call_ids": ["a", "b"]},
                   "columns": ["id", "inputs"], "offset": 3}),
        ),
    ]
}

fn feedback_case() -> Value {
    json!({
        "project_id": "e/p",
        "query": {"$expr": {"$or": [
            {"$eq": [{"$getField": "payload.note"}, {"$literal": "x"}]},
            {"$in": [{"$getField": "weave_ref"}, [{"$literal": "weave:///e/p/call/c"}]]},
            {"$contains": {"input": {"$getField": "feedback_type"}, "substr": {"$literal": "Ab"},
                           "case_insensitive": true}},
            {"$gt": [{"$getField": "created_at"}, {"$literal": "2026-01-01"}]}
        ]}},
        "sort_by": [{"field": "payload.score", "direction": "desc"}, {"field": "creator"}],
        "limit": 3, "offset": 1
    })
}

fn debug_all<T: std::fmt::Debug>(params: &[T]) -> Vec<String> {
    params.iter().map(|p| format!("{p:?}")).collect()
}

#[test]
fn generated_sql_matches_the_snapshots() {
    let mut failures = Vec::new();
    for (name, body) in call_cases() {
        let q = calls(body);
        let s = sqlite::sql::select_calls(&q);
        failures
            .extend(check(&format!("{name}.sqlite.sql"), render(&s.text, debug_all(&s.params))));
        let c = clickhouse::sql::select_calls(&q);
        failures.extend(check(
            &format!("{name}.clickhouse.sql"),
            render(&c.text, debug_all(&c.params)),
        ));
    }
    let q = calls(call_cases()[0].1.clone());
    let s = sqlite::sql::count_calls(&q);
    failures.extend(check("calls_count.sqlite.sql", render(&s.text, debug_all(&s.params))));
    let c = clickhouse::sql::count_calls(&q);
    failures.extend(check("calls_count.clickhouse.sql", render(&c.text, debug_all(&c.params))));

    let q = feedback(feedback_case());
    let s = sqlite::sql::select_feedback(&q);
    failures.extend(check("feedback_query.sqlite.sql", render(&s.text, debug_all(&s.params))));
    let c = clickhouse::sql::select_feedback(&q);
    failures.extend(check("feedback_query.clickhouse.sql", render(&c.text, debug_all(&c.params))));
    let s = sqlite::sql::count_feedback(&q);
    failures.extend(check("feedback_count.sqlite.sql", render(&s.text, debug_all(&s.params))));
    let c = clickhouse::sql::count_feedback(&q);
    failures.extend(check("feedback_count.clickhouse.sql", render(&c.text, debug_all(&c.params))));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
