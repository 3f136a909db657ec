//! Durability: every call acknowledged before the process is killed with SIGKILL is there after
//! a restart, exactly once, and halves of a call written across the restart still merge.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Server, uid};
use serde_json::{Value, json};

const PROJECT: &str = "durable/restart";

fn complete_call(id: &str) -> Value {
    json!({
        "project_id": PROJECT, "id": id, "trace_id": id, "op_name": "weave:///durable/restart/op/f:d",
        "started_at": "2026-11-21T10:00:00.000001Z", "ended_at": "2026-11-21T10:00:01.000001Z",
        "display_name": null, "parent_id": null, "thread_id": null, "turn_id": null,
        "attributes": {}, "inputs": {"payload": "x".repeat(200)}, "output": {"ok": true},
        "summary": {}, "otel_dump": null, "exception": null, "wb_user_id": null, "wb_run_id": null,
        "wb_run_step": null, "wb_run_step_end": null
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_calls_survive_sigkill() {
    let mut server = Server::start();
    let api = server.admin();

    // A call whose start is acknowledged before the crash and whose end comes after it.
    let half = uid();
    api.post(
        "/call/start",
        &json!({"start": {"project_id": PROJECT, "id": half, "trace_id": half, "op_name": "half",
                          "started_at": "2026-11-21T09:00:00Z", "attributes": {}, "inputs": {}}}),
    )
    .await
    .ok();

    // Writers keep sending batches while the process is killed under them.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for _ in 0..4 {
        let (api, acked, stop) = (api.clone(), acked.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let ids: Vec<String> = (0..20).map(|_| uid()).collect();
                let batch: Vec<Value> = ids.iter().map(|id| complete_call(id)).collect();
                let resp = api
                    .try_post("/v2/durable/restart/calls/complete", &json!({ "batch": batch }))
                    .await;
                match resp {
                    Ok(r) if r.status == 200 => acked.lock().unwrap().extend(ids),
                    _ => {} // not acknowledged (in flight at the kill): may or may not be stored
                }
            }
        }));
    }
    while acked.lock().unwrap().len() < 2_000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill_and_restart();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acked: Vec<String> = acked.lock().unwrap().clone();

    let api = server.admin();
    let rows = api.stream(&json!({"project_id": PROJECT, "columns": ["id"]})).await;
    let stored: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let unique: HashSet<&str> = stored.iter().copied().collect();
    assert_eq!(unique.len(), stored.len(), "a call id appears twice");
    let missing: Vec<&String> = acked.iter().filter(|id| !unique.contains(id.as_str())).collect();
    assert!(missing.is_empty(), "{} of {} acknowledged calls lost", missing.len(), acked.len());
    let count = api.count(&json!({"project_id": PROJECT})).await;
    assert_eq!(count as usize, stored.len(), "query_stats disagrees with stream_query");

    // The end of the call started before the crash merges with its start.
    api.post(
        "/call/end",
        &json!({"end": {"project_id": PROJECT, "id": half, "ended_at": "2026-11-21T09:00:02Z",
                        "summary": {}, "output": 42}}),
    )
    .await
    .ok();
    let call = api.read_call(PROJECT, &half).await;
    assert_eq!(call["op_name"], "half");
    assert_eq!(call["output"], 42);
    assert_eq!(call["summary"]["weave"]["status"], "success");
    assert_eq!(call["summary"]["weave"]["latency_ms"], 2000);
}
