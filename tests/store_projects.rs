//! The project list (`ProjectStore::list_projects`, the web UI's `/`), on SQLite and on
//! ClickHouse over the same calls: live calls counted per project, newest first, one entity's
//! projects only when asked, deleted calls and calls whose start has not arrived left out.

mod common;

use common::clickhouse::ClickHouse;
use heddle_proto::ProjectId;
use heddle_proto::calls::{CallPart, EndPart, StartPart};
use heddle_proto::time::Micros;
use heddle_store::clickhouse::ClickHouseStore;
use heddle_store::prelude::*;
use heddle_store::sqlite::{SqliteOptions, SqliteStore};

fn project(p: &str) -> ProjectId {
    ProjectId::parse(p).unwrap()
}

fn start(p: &str, id: &str, parent: Option<&str>, started_s: i64) -> CallPart {
    CallPart {
        project: project(p),
        id: id.into(),
        trace_id: Some(format!("t-{id}")),
        start: Some(StartPart {
            op_name: "op".into(),
            display_name: None,
            parent_id: parent.map(str::to_owned),
            thread_id: None,
            turn_id: None,
            started_at: Micros(started_s * 1_000_000),
            attributes: "{}".into(),
            inputs: "{}".into(),
            otel_dump: None,
            wb_user_id: None,
            wb_run_id: None,
            wb_run_step: None,
        }),
        end: None,
    }
}

/// A call's end alone: until its start arrives the call is not counted.
fn end_only(p: &str, id: &str, ended_s: i64) -> CallPart {
    CallPart {
        project: project(p),
        id: id.into(),
        trace_id: None,
        start: None,
        end: Some(EndPart {
            ended_at: Micros(ended_s * 1_000_000),
            summary: "{}".into(),
            output: None,
            exception: None,
            wb_run_step_end: None,
            display_name: None,
        }),
    }
}

fn parts() -> Vec<CallPart> {
    vec![
        start("acme/a", "a1", None, 10),
        start("acme/a", "a2", Some("a1"), 30),
        start("acme/a", "a3", Some("a1"), 20),
        start("acme/b", "b1", None, 40),
        end_only("acme/c", "c1", 50),
        // Entities whose names extend "acme": not acme's projects.
        start("acme-x/p", "x1", None, 5),
        start("acmez/p", "z1", None, 6),
        start("other/x", "o1", None, 25),
    ]
}

/// `(project, calls, last call's start in seconds)`, in the store's order.
async fn listed(store: &dyn Store, entity: Option<&str>, limit: u64) -> Vec<(String, u64, i64)> {
    let rows = store.list_projects(entity, limit).await.unwrap();
    rows.into_iter()
        .map(|p| (p.project.as_str().to_owned(), p.calls, p.last_call.0 / 1_000_000))
        .collect()
}

fn expect(rows: &[(&str, u64, i64)]) -> Vec<(String, u64, i64)> {
    rows.iter().map(|(p, n, t)| ((*p).to_owned(), *n, *t)).collect()
}

async fn check(store: &dyn Store, backend: &str) {
    store.apply_call_parts(parts()).await.unwrap();
    assert_eq!(
        listed(store, None, 100).await,
        expect(&[
            ("acme/b", 1, 40),
            ("acme/a", 3, 30),
            ("other/x", 1, 25),
            ("acmez/p", 1, 6),
            ("acme-x/p", 1, 5)
        ]),
        "{backend}: every project"
    );
    assert_eq!(
        listed(store, Some("acme"), 100).await,
        expect(&[("acme/b", 1, 40), ("acme/a", 3, 30)]),
        "{backend}: one entity's"
    );
    assert_eq!(listed(store, None, 2).await.len(), 2, "{backend}: limit");
    assert_eq!(listed(store, Some("nobody"), 100).await, vec![], "{backend}: unknown entity");

    // Deleting a call removes it (and its descendants), and a project without live calls.
    store.delete_calls(&project("acme/b"), &["b1".into()]).await.unwrap();
    store.delete_calls(&project("acme/a"), &["a2".into()]).await.unwrap();
    assert_eq!(
        listed(store, Some("acme"), 100).await,
        expect(&[("acme/a", 2, 20)]),
        "{backend}: after deletes"
    );
    // The start of a call that had only its end makes it count.
    store.apply_call_parts(vec![start("acme/c", "c1", None, 45)]).await.unwrap();
    assert_eq!(
        listed(store, Some("acme"), 100).await,
        expect(&[("acme/c", 1, 45), ("acme/a", 2, 20)]),
        "{backend}: after a late start"
    );
}

#[tokio::test]
async fn sqlite_lists_projects() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    check(&store, "sqlite").await;
}

#[tokio::test]
async fn clickhouse_lists_projects() {
    let ch = ClickHouse::start();
    let db = ch.database.as_deref().unwrap_or("default");
    let store = ClickHouseStore::connect(&ch.url, "default", "", db).await.unwrap();
    check(&store, "clickhouse").await;
}
