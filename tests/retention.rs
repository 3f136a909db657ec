//! The retention purge (docs/storage.md#retention) on SQLite and ClickHouse, with a clock the
//! test controls: `purge_expired_everywhere` is given "now", ten days after the data was
//! written, instead of the test waiting ten days. Expired calls, feedback and unreferenced
//! files go; younger data, referenced files and projects without a retention stay; batches are
//! bounded.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::clickhouse::ClickHouse;
use heddle_proto::ProjectId;
use heddle_proto::calls::{CallPart, CallsQueryReq, EndPart, StartPart};
use heddle_proto::feedback::NewFeedback;
use heddle_proto::project_settings::{ProjectSetting, SensitiveDataPolicy};
use heddle_proto::time::Micros;
use heddle_store::clickhouse::ClickHouseStore;
use heddle_store::prelude::*;
use heddle_store::project_settings::purge_expired_everywhere;
use heddle_store::sqlite::{SqliteOptions, SqliteStore};
use heddle_store::{NewObject, Purged};
use serde_json::json;

const DAY: i64 = 86_400_000_000;

fn call(project: &ProjectId, id: &str, started_at: Micros, inputs: &str) -> CallPart {
    CallPart {
        project: project.clone(),
        id: id.into(),
        trace_id: Some(format!("t-{id}")),
        start: Some(StartPart {
            op_name: "op".into(),
            display_name: None,
            parent_id: None,
            thread_id: None,
            turn_id: None,
            started_at,
            attributes: "{}".into(),
            inputs: inputs.into(),
            otel_dump: None,
            wb_user_id: None,
            wb_run_id: None,
            wb_run_step: None,
        }),
        end: Some(EndPart {
            ended_at: Micros(started_at.0 + 1000),
            summary: "{}".into(),
            output: None,
            exception: None,
            wb_run_step_end: None,
            display_name: None,
        }),
    }
}

fn feedback(project: &ProjectId, id: &str, created_at: Micros) -> NewFeedback {
    NewFeedback {
        project: project.clone(),
        id: id.into(),
        weave_ref: format!("weave:///{project}/call/young"),
        feedback_type: "note".into(),
        creator: None,
        payload: r#"{"note": "x"}"#.into(),
        created_at,
        wb_user_id: "u".into(),
        annotation_ref: None,
        runnable_ref: None,
        call_ref: None,
        trigger_ref: None,
        queue_id: None,
        extra: "{}".into(),
    }
}

async fn call_ids(store: &dyn Store, project: &ProjectId) -> Vec<String> {
    use futures::StreamExt;
    let q = CallsQueryReq::for_project(project.clone());
    let rows: Vec<_> = store.query_calls(q.validate().unwrap()).await.unwrap().collect().await;
    let mut ids: Vec<String> = rows.into_iter().map(|r| r.unwrap().id).collect();
    ids.sort();
    ids
}

async fn feedback_ids(store: &dyn Store, project: &ProjectId) -> Vec<String> {
    let q = heddle_proto::feedback::FeedbackQueryReq {
        project_id: project.clone(),
        fields: None,
        query: None,
        sort_by: None,
        offset: None,
        limit: None,
    };
    let (rows, _) = store.query_feedback(q.validate().unwrap().0).await.unwrap();
    let mut ids: Vec<String> = rows.into_iter().map(|f| f.id).collect();
    ids.sort();
    ids
}

async fn has_file(store: &dyn Store, project: &ProjectId, digest: &str) -> bool {
    store.read_file(project, digest).await.is_ok()
}

/// The whole scenario on one store.
async fn purge_scenario(store: Arc<dyn Store>) {
    let p = ProjectId::parse("ret/proj").unwrap();
    let other = ProjectId::parse("ret/forever").unwrap();
    // Data is written "now" (files take the real clock); the purge runs ten days later.
    let t0 = Micros::now();
    let later = Micros(t0.0 + 10 * DAY);
    let (unused, by_call, by_object) =
        ("d-unused-".repeat(5), "d-bycall-".repeat(5), "d-byobj-".repeat(5));
    for d in [&unused, &by_call, &by_object] {
        store.create_file(&p, d, Bytes::from(format!("content of {d}"))).await.unwrap();
    }
    store.create_file(&other, &unused, Bytes::from_static(b"kept")).await.unwrap();
    let mut parts: Vec<CallPart> = (0..5).map(|i| call(&p, &format!("old{i}"), t0, "{}")).collect();
    // Young: started nine days after t0, one day before "now"; it names a file.
    let young_inputs = json!({"img": {"files": {"image.png": by_call}}}).to_string();
    parts.push(call(&p, "young", Micros(t0.0 + 9 * DAY), &young_inputs));
    parts.push(call(&other, "old0", t0, "{}"));
    store.apply_call_parts(parts).await.unwrap();
    store
        .create_object(NewObject {
            project: p.clone(),
            object_id: "model".into(),
            digest: "objdigest".into(),
            val: json!({"files": {"obj.py": by_object}}).to_string(),
            kind: "object",
            base_object_class: None,
            leaf_object_class: None,
            wb_user_id: None,
        })
        .await
        .unwrap();
    let fb = vec![
        feedback(&p, "fb-old", t0),
        feedback(&p, "fb-young", Micros(t0.0 + 9 * DAY)),
        feedback(&other, "fb-old", t0),
    ];
    store.create_feedback(fb).await.unwrap();

    store.set_project_setting(&p, ProjectSetting::Retention(Some(2))).await.unwrap();
    // Other settings of the project do not disturb its retention.
    let pii = ProjectSetting::SensitiveData(SensitiveDataPolicy::PiiV1);
    store.set_project_setting(&p, pii).await.unwrap();
    store.set_project_setting(&other, ProjectSetting::Retention(None)).await.unwrap();
    assert_eq!(store.retention_projects().await.unwrap(), [(p.clone(), 2)]);
    assert_eq!(store.project_settings(&p).await.unwrap().retention_days, Some(2));

    // Today nothing has expired.
    let none = purge_expired_everywhere(&*store, t0, 2, Duration::ZERO).await.unwrap();
    assert_eq!(none, Purged::default());

    // One bounded batch deletes at most `limit` of each kind.
    let cutoff = Micros(later.0 - 2 * DAY);
    let batch = store.purge_expired(&p, cutoff, 2).await.unwrap();
    assert_eq!((batch.calls, batch.feedback, batch.files), (2, 1, 1));
    assert_eq!(call_ids(&*store, &p).await.len(), 4);

    // The whole purge, ten days on: the rest of the old calls go, the young one stays.
    let rest = purge_expired_everywhere(&*store, later, 2, Duration::ZERO).await.unwrap();
    assert_eq!((rest.calls, rest.feedback, rest.files), (3, 0, 0));
    assert_eq!(call_ids(&*store, &p).await, ["young"]);
    assert_eq!(feedback_ids(&*store, &p).await, ["fb-young"]);
    assert!(!has_file(&*store, &p, &unused).await, "an unreferenced old file goes");
    assert!(has_file(&*store, &p, &by_call).await, "a file a stored call names stays");
    assert!(has_file(&*store, &p, &by_object).await, "a file an object names stays");
    // A project without a retention keeps everything.
    assert_eq!(call_ids(&*store, &other).await, ["old0"]);
    assert_eq!(feedback_ids(&*store, &other).await, ["fb-old"]);
    assert!(has_file(&*store, &other, &unused).await);

    // Once the young call expires too, the file it named is unreferenced and goes with it.
    let much_later = Micros(later.0 + 5 * DAY);
    let last = purge_expired_everywhere(&*store, much_later, 500, Duration::ZERO).await.unwrap();
    assert_eq!((last.calls, last.feedback, last.files), (1, 1, 1));
    assert!(call_ids(&*store, &p).await.is_empty());
    assert!(!has_file(&*store, &p, &by_call).await);
    assert!(has_file(&*store, &p, &by_object).await);
    // Again: nothing left to do.
    let again = purge_expired_everywhere(&*store, much_later, 500, Duration::ZERO).await.unwrap();
    assert_eq!(again, Purged::default());
}

#[tokio::test]
async fn retention_purge_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    purge_scenario(Arc::new(store)).await;
}

#[tokio::test]
async fn retention_purge_on_clickhouse() {
    let ch = ClickHouse::start();
    let db = ch.database.as_deref().unwrap_or("default");
    let store = ClickHouseStore::connect(&ch.url, "default", "", db).await.expect("connecting");
    purge_scenario(Arc::new(store)).await;
}
