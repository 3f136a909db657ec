//! Calls far larger than a Kafka record (docs/distributed.md, "Large calls"): every call that
//! fits the request body limit is stored in full, in every store mode, and a batch answer is
//! true for every item in it. Inputs are compared byte for byte after reading back.

mod common;

use common::{Api, Server, complete, ended, started, t, uid};
use serde_json::{Value, json};

const P: &str = "big/calls";

/// `n` bytes of printable text that differ from call to call (not one repeated byte, so no
/// layer can get away with a shortcut), with characters JSON must escape.
fn text(n: usize, seed: u64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 \"\\/\n\t{}";
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ALPHABET[(x >> 33) as usize % ALPHABET.len()] as char
        })
        .collect()
}

fn upsert_start(start: Value) -> Value {
    json!({"mode": "start", "req": {"start": start}})
}

fn upsert_end(end: Value) -> Value {
    json!({"mode": "end", "req": {"end": end}})
}

/// Reads the project's calls `ids` through `/calls/stream_query`; one row per id, in id order.
async fn read_all(api: &Api, ids: &[String]) -> Vec<Value> {
    let mut rows = api
        .stream(&json!({"project_id": P, "filter": {"call_ids": ids},
                        "sort_by": [{"field": "id", "direction": "asc"}]}))
        .await;
    rows.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    rows
}

/// Asserts a read-back text equals what was sent, without printing megabytes on failure.
#[track_caller]
fn assert_same(what: &str, got: &Value, want: &str) {
    let got = got.as_str().unwrap_or_else(|| panic!("{what}: not a string"));
    assert!(
        got == want,
        "{what}: read back {} bytes, sent {} bytes (first difference at byte {:?})",
        got.len(),
        want.len(),
        got.bytes().zip(want.bytes()).position(|(a, b)| a != b)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_batch_with_huge_calls_stores_every_call_in_full() {
    let server = Server::start();
    let api = server.admin();
    let small: Vec<String> = (0..53).map(|i| format!("small-{i:02}-{}", uid())).collect();
    let (big, huge) = (format!("big-{}", uid()), format!("huge-{}", uid()));
    let big_input = text(3 << 20, 1);
    let huge_input = text(20 << 20, 2);
    let big_output = text(3 << 20, 3);

    let mut batch = Vec::new();
    for (i, id) in small.iter().enumerate() {
        let inputs = json!({"i": i, "text": text(2000, 100 + i as u64)});
        batch.push(upsert_start(started(P, id, json!({"inputs": inputs, "started_at": t(0.0)}))));
        batch.push(upsert_end(ended(P, id, json!({"output": i, "ended_at": t(1.0)}))));
    }
    batch.push(upsert_start(started(P, &big, json!({"inputs": {"doc": big_input}}))));
    batch.push(upsert_end(ended(P, &big, json!({"output": {"answer": big_output}}))));
    batch.push(upsert_start(started(P, &huge, json!({"inputs": {"doc": huge_input}}))));
    batch.push(upsert_end(ended(P, &huge, json!({"output": "done"}))));
    let body = json!({ "batch": batch });
    let res = api.post("/call/upsert_batch", &body).await.ok();
    assert_eq!(res["res"].as_array().map(Vec::len), Some(batch.len()), "one result per item");

    let mut ids = small.clone();
    ids.extend([big.clone(), huge.clone()]);
    let rows = read_all(&api, &ids).await;
    let got: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(got, want, "every call of the batch is stored, once");
    for row in &rows {
        let id = row["id"].as_str().unwrap();
        assert!(row["ended_at"].is_string(), "{id} has its end");
        if let Some(i) = small.iter().position(|s| s == id) {
            assert_eq!(row["inputs"]["i"], json!(i));
            assert_same(id, &row["inputs"]["text"], &text(2000, 100 + i as u64));
            assert_eq!(row["output"], json!(i));
        }
    }
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap();
    assert_same("3 MiB input", &row(&big)["inputs"]["doc"], &big_input);
    assert_same("3 MiB output", &row(&big)["output"]["answer"], &big_output);
    assert_same("20 MiB input", &row(&huge)["inputs"]["doc"], &huge_input);
    assert_eq!(row(&huge)["output"], json!("done"));

    // The same batch again (a client retry) changes nothing.
    api.post("/call/upsert_batch", &body).await.ok();
    assert_eq!(api.count(&json!({"project_id": P})).await, ids.len() as u64);
    let again = api.read_call(P, &huge).await;
    assert_same("20 MiB input after a retry", &again["inputs"]["doc"], &huge_input);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_start_and_end_with_large_values() {
    let server = Server::start();
    let api = server.admin();
    let id = uid();
    let input = text(3 << 20, 4);
    let output = text(5 << 20, 5);
    let res = api.call_start(started(P, &id, json!({"inputs": {"doc": input}}))).await;
    assert_eq!(res["id"], json!(id));
    let call = api.read_call(P, &id).await;
    assert_same("input after start", &call["inputs"]["doc"], &input);
    assert!(call["ended_at"].is_null());

    api.call_end(ended(P, &id, json!({"output": output, "summary": {"note": "x"}}))).await;
    let call = api.read_call(P, &id).await;
    assert_same("input after end", &call["inputs"]["doc"], &input);
    assert_same("output", &call["output"], &output);
    assert!(call["ended_at"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_complete_with_a_large_call_among_small_ones() {
    let server = Server::start();
    let api = server.admin();
    let big = uid();
    let input = text(3 << 20, 6);
    let mut batch: Vec<Value> = (0..20)
        .map(|i| complete(P, &format!("c{i:02}-{big}"), json!({"inputs": {"i": i}})))
        .collect();
    batch.insert(7, complete(P, &big, json!({"inputs": {"doc": input}, "output": {"n": 1}})));
    api.complete_calls(P, batch).await;

    let call = api.read_call(P, &big).await;
    assert_same("input", &call["inputs"]["doc"], &input);
    assert_eq!(call["output"], json!({"n": 1}));
    assert_eq!(api.count(&json!({"project_id": P})).await, 21);
}
