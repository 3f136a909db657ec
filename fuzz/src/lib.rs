//! Shared by the query targets: renders a validated query in both SQL dialects, checks the
//! text and its parameters, and runs the SQLite statements on a small in-memory database
//! with the real schema and SQL functions (an SQL error there would be a 500 for client input).

use heddle_domain::expansion::{Planned, plan};
use heddle_proto::calls::{CallsQuery, CallsQueryReq};
use heddle_proto::feedback::{FeedbackQuery, FeedbackQueryReq};
use heddle_store::clickhouse::sql as ch;
use heddle_store::sqlite::sql as lite;
use rusqlite::Connection;

/// The project the seeded rows belong to.
pub const PROJECT: &str = "e/p";

/// Two calls and two feedback rows, with JSON members deep enough for paths to find values of
/// every JSON type (and for array indexes to meet objects).
const SEED: &str = r#"
INSERT INTO project_keys (project_key, project_id) VALUES (1, 'e/p');
INSERT INTO call_buckets (project_key, bucket) VALUES (1, 0);
INSERT INTO calls (project_key, bucket, id, trace_id, op_name, display_name, started_at,
                   ended_at, attributes, inputs, output, summary, exception, wb_run_step)
VALUES (1, 0, 'c1', 't1', 'weave:///e/p/op/f:d', NULL, 1000000, 2000000,
        '{"a":{"b":[1,"x",{"c":null}]}}',
        '{"x":1,"s":"str","l":[0,1.5,true],"o":{"k":"v","0":"z"},"n":null}',
        '{"y":[{"z":2}]}', '{"status_counts":{"error":0},"usage":{"m":{"t":3}}}', NULL, 1),
       (1, 0, 'c2', 't1', 'plain', 'shown', 1500000, NULL, '{}', '[1,2]', NULL, '{}', 'boom',
        NULL);
INSERT INTO feedback (project_id, id, weave_ref, feedback_type, creator, payload, created_at,
                      runnable_ref, trigger_ref)
VALUES ('e/p', 'f1', 'weave:///e/p/call/c1', 'wandb.runnable.s', NULL,
        '{"output":{"score":1},"note":"ok","l":[1]}', 1, 'weave:///e/p/op/s:1', NULL),
       ('e/p', 'f2', 'weave:///e/p/call/c1', 't', 'me', '[1,"a"]', 2, NULL, 'x');
"#;

fn open_db() -> Connection {
    let mut conn = Connection::open_in_memory().expect("in-memory SQLite");
    heddle_store::sqlite::functions::register(&conn).expect("functions");
    heddle_store::sqlite::migrations::migrate(&mut conn).expect("schema");
    conn.execute_batch(SEED).expect("seed rows");
    conn
}

thread_local! {
    static DB: Connection = open_db();
}

/// SQLite: one `?` per parameter, no `marker` in the text, and the statement runs.
fn check_sqlite(sql: &lite::Sql, marker: Option<&str>) {
    assert_eq!(sql.text.matches('?').count(), sql.params.len(), "{}", sql.text);
    if let Some(m) = marker {
        assert!(!sql.text.contains(m), "a user value in the SQL text: {}", sql.text);
    }
    DB.with(|db| {
        let mut stmt = db
            .prepare(&sql.text)
            .unwrap_or_else(|e| panic!("rendered SQL does not prepare: {e}\n{}", sql.text));
        let mut rows = stmt
            .query(rusqlite::params_from_iter(sql.params.iter()))
            .unwrap_or_else(|e| panic!("rendered SQL fails: {e}\n{}", sql.text));
        loop {
            match rows.next() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    panic!("rendered SQL fails on a row: {e}\n{}\n{:?}", sql.text, sql.params)
                }
            }
        }
    });
}

/// ClickHouse: placeholders `{p0:T}` .. `{pN:T}`, one per parameter, no `marker` in the text.
fn check_clickhouse(sql: &ch::Sql, marker: Option<&str>) {
    assert_eq!(sql.text.matches("{p").count(), sql.params.len(), "{}", sql.text);
    for i in 0..sql.params.len() {
        assert!(sql.text.contains(&format!("{{p{i}:")), "placeholder {i} missing: {}", sql.text);
    }
    if let Some(m) = marker {
        assert!(!sql.text.contains(m), "a user value in the SQL text: {}", sql.text);
    }
}

pub fn check_calls(q: &CallsQuery, marker: Option<&str>) {
    check_sqlite(&lite::select_calls(q), marker);
    check_sqlite(&lite::count_calls(q), marker);
    check_clickhouse(&ch::select_calls(q), marker);
    check_clickhouse(&ch::count_calls(q), marker);
}

pub fn check_feedback(q: &FeedbackQuery, marker: Option<&str>) {
    check_sqlite(&lite::select_feedback(q), marker);
    check_sqlite(&lite::count_feedback(q), marker);
    check_clickhouse(&ch::select_feedback(q), marker);
    check_clickhouse(&ch::count_feedback(q), marker);
}

/// A calls request the way `/calls/stream_query` takes it: validated, planned (expand columns),
/// and every SQL statement it leads to rendered and checked.
pub fn calls_request(req: CallsQueryReq, marker: Option<&str>) {
    if let Ok(q) = req.clone().validate() {
        check_calls(&q, marker);
    }
    match plan(req) {
        Ok(Planned::Sql(q)) => check_calls(&q, marker),
        Ok(Planned::Expand { candidates, .. }) => check_calls(&candidates, marker),
        Err(_) => {}
    }
}

pub fn feedback_request(req: FeedbackQueryReq, marker: Option<&str>) {
    if let Ok((q, _)) = req.validate() {
        check_feedback(&q, marker);
    }
}
