//! The distributed write path with real parts: `heddle ingest` → tansu (Kafka protocol) →
//! `heddle consume` → store, read back through `heddle query`, each role its own process. Fault
//! tests assert that every acknowledged call is present exactly once afterwards.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::clickhouse::ClickHouse;
use common::kafka::{DLQ_TOPIC, Kafka, TOPIC};
use common::{Api, BIN, announced_url, basic, uid};
use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};

const PROJECT: &str = "pipe/line";

/// One heddle role process, killed on drop.
struct Role {
    child: Child,
    url: String,
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes of one distributed deployment sharing a store directory and a broker.
struct Deployment {
    kafka: Kafka,
    dir: tempfile::TempDir,
    key: String,
    /// The store: ClickHouse when set, else SQLite in `dir`.
    clickhouse: Option<ClickHouse>,
}

impl Deployment {
    fn new() -> Deployment {
        Deployment {
            kafka: Kafka::start(),
            dir: tempfile::tempdir().expect("tempdir"),
            key: format!("admin-{}", uid()),
            clickhouse: None,
        }
    }

    fn on_clickhouse() -> Deployment {
        Deployment { clickhouse: Some(ClickHouse::start_local()), ..Deployment::new() }
    }

    fn store_args(&self) -> Vec<String> {
        match &self.clickhouse {
            Some(ch) => vec!["--clickhouse".into(), ch.url.clone()],
            None => vec!["--data-dir".into(), self.dir.path().join("data").display().to_string()],
        }
    }

    fn start(&self, role: &str, extra: &[&str]) -> Role {
        let listen_flag = if role == "consume" { "--metrics-listen" } else { "--listen" };
        let mut child = Command::new(BIN)
            .arg(role)
            .args([listen_flag, "127.0.0.1:0", "--api-key", &self.key])
            .args(self.store_args())
            .args(if role == "query" { vec![] } else { vec!["--kafka", &self.kafka.brokers] })
            .args(if role == "ingest" { vec!["--otlp-grpc-listen", "127.0.0.1:0"] } else { vec![] })
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning heddle");
        let prefix =
            if role == "consume" { "heddle consumer metrics on " } else { "heddle listening on " };
        let url = announced_url(&mut child, prefix).expect("the role announced its address");
        Role { child, url }
    }

    fn api(&self, role: &Role) -> Api {
        Api::new(&role.url, Some(basic(&self.key)))
    }
}

fn batch(ids: &[String]) -> Value {
    let calls: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({
                "project_id": PROJECT, "id": id, "trace_id": format!("trace-{}", &id[..8]),
                "op_name": "weave:///pipe/line/op/step:d", "display_name": null, "parent_id": null,
                "started_at": "2026-11-21T10:00:00Z", "ended_at": "2026-11-21T10:00:01Z",
                "attributes": {}, "inputs": {"text": "y".repeat(300)}, "output": {"n": 1},
                "summary": {}, "exception": null, "thread_id": null, "turn_id": null,
                "otel_dump": null, "wb_user_id": null, "wb_run_id": null, "wb_run_step": null,
                "wb_run_step_end": null
            })
        })
        .collect();
    json!({ "batch": calls })
}

/// Sends `n` batches of `size` calls; returns the ids of the acknowledged ones.
async fn send(ingest: &Api, n: usize, size: usize) -> Vec<String> {
    let mut acked = Vec::new();
    for _ in 0..n {
        let ids: Vec<String> = (0..size).map(|_| uid()).collect();
        let r = ingest.post("/v2/pipe/line/calls/complete", &batch(&ids)).await;
        assert_eq!(r.status, 200, "ingest refused a batch while the broker is up: {}", r.text());
        acked.extend(ids);
    }
    acked
}

/// Waits until the store holds exactly `expected` (no more, no fewer, no duplicates).
async fn assert_visible_exactly_once(query: &Api, expected: &[String], within: Duration) {
    let deadline = Instant::now() + within;
    let want: HashSet<&str> = expected.iter().map(String::as_str).collect();
    loop {
        let rows = query.stream(&json!({"project_id": PROJECT, "columns": ["id"]})).await;
        let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
        let got: HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(got.len(), ids.len(), "a call appears twice");
        if got == want {
            let count = query.count(&json!({"project_id": PROJECT})).await;
            assert_eq!(count as usize, want.len(), "query_stats disagrees with stream_query");
            return;
        }
        assert!(got.is_subset(&want), "calls that were never sent are visible");
        assert!(
            Instant::now() < deadline,
            "{} of {} acknowledged calls not visible after {within:?}",
            want.len() - got.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_killed_mid_stream_loses_and_duplicates_nothing() {
    let d = Deployment::new();
    let ingest_role = d.start("ingest", &[]);
    let query_role = d.start("query", &[]);
    let (ingest, query) = (d.api(&ingest_role), d.api(&query_role));

    let mut consumer = d.start("consume", &["--batch-records", "7"]);
    let mut acked = send(&ingest, 20, 25).await;
    // SIGKILL the consumer while records are in flight, keep writing, then start a new one.
    drop(consumer);
    acked.extend(send(&ingest, 20, 25).await);
    consumer = d.start("consume", &["--batch-records", "7"]);
    acked.extend(send(&ingest, 10, 25).await);
    assert_visible_exactly_once(&query, &acked, Duration::from_secs(60)).await;

    // The consumer reports its lag and visibility lag.
    let metrics = d.api(&consumer).get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = metrics.text();
    assert!(text.contains("heddle_visibility_lag_seconds_count"), "{text}");
    assert!(d.api(&consumer).client_without_auth().get("/metrics").await.status == 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_means_503_then_recovery() {
    let mut d = Deployment::new();
    // Long enough that records the restarted broker is slow to answer do not time out in flight
    // (see `Kafka::is_broken`), short enough for a prompt 503.
    let ingest_args = ["--kafka-delivery-timeout-ms", "5000"];
    let mut ingest_role = d.start("ingest", &ingest_args);
    let query_role = d.start("query", &[]);
    let _consumer = d.start("consume", &[]);
    let query = d.api(&query_role);
    let mut ingest = d.api(&ingest_role);
    let mut acked = send(&ingest, 3, 10).await;

    d.kafka.stop();
    let ids: Vec<String> = (0..10).map(|_| uid()).collect();
    let started = Instant::now();
    let r = ingest.post("/v2/pipe/line/calls/complete", &batch(&ids)).await;
    assert_eq!(r.status, 503, "a write the broker did not acknowledge: {}", r.text());
    assert!(r.err(503).contains("not stored"));
    assert!(started.elapsed() < Duration::from_secs(15), "503 took {:?}", started.elapsed());

    d.kafka.resume();
    // Ingest reconnects by itself: the same request succeeds once the broker is back.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = ingest.post("/v2/pipe/line/calls/complete", &batch(&ids)).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.text());
        if d.kafka.is_broken() {
            eprintln!("the test broker's storage failed: restarting it and ingest");
            drop(ingest_role);
            d.kafka.restart();
            ingest_role = d.start("ingest", &ingest_args);
            ingest = d.api(&ingest_role);
        }
        assert!(
            Instant::now() < deadline,
            "ingest did not recover: {}\ntansu's log:\n{}",
            r.text(),
            d.kafka.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    acked.extend(ids);
    acked.extend(send(&ingest, 2, 10).await);
    assert_visible_exactly_once(&query, &acked, Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_record_goes_to_the_dead_letter_topic_and_the_partition_moves_on() {
    let d = Deployment::new();
    let ingest_role = d.start("ingest", &[]);
    let query_role = d.start("query", &[]);
    let consumer = d.start("consume", &[]);
    let (ingest, query) = (d.api(&ingest_role), d.api(&query_role));

    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &d.kafka.brokers).create().unwrap();
    for partition in 0..common::kafka::PARTITIONS as i32 {
        let poison =
            FutureRecord::to(TOPIC).partition(partition).key("poison").payload(b"\xffnot protobuf");
        producer.send(poison, Duration::from_secs(10)).await.unwrap();
    }
    let acked = send(&ingest, 5, 20).await;
    assert_visible_exactly_once(&query, &acked, Duration::from_secs(60)).await;

    let dlq: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &d.kafka.brokers)
        .set("group.id", format!("dlq-reader-{}", uid()))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    dlq.subscribe(&[DLQ_TOPIC]).unwrap();
    let mut reasons = Vec::new();
    while reasons.len() < common::kafka::PARTITIONS as usize {
        let m = tokio::time::timeout(Duration::from_secs(30), dlq.recv())
            .await
            .expect("dead-lettered records arrive")
            .unwrap();
        assert_eq!(m.payload(), Some(&b"\xffnot protobuf"[..]));
        let headers = m.headers().expect("headers");
        let header = |key: &str| {
            let value = headers.iter().find(|h| h.key == key).and_then(|h| h.value);
            String::from_utf8_lossy(value.unwrap_or_else(|| panic!("no {key}"))).into_owned()
        };
        assert_eq!(header("heddle-reason-class"), "undecodable");
        reasons.push(header("heddle-reason"));
    }
    assert!(reasons.iter().all(|r| r.contains("undecodable")), "{reasons:?}");
    let dead = r#"heddle_dead_lettered_records_total{reason="undecodable"}"#;
    let dead = metric(&d.api(&consumer), dead).await;
    assert_eq!(dead, Some(f64::from(common::kafka::PARTITIONS)));
}

/// The value of a metric line `name value` (or `name{labels} value`) in /metrics, if present.
async fn metric(api: &Api, name: &str) -> Option<f64> {
    let r = api.get("/metrics").await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.text().lines().find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        (key == name).then(|| value.parse().ok()).flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_down_for_a_while_then_the_consumer_catches_up() {
    let mut d = Deployment::on_clickhouse();
    let ingest_role = d.start("ingest", &[]);
    let query_role = d.start("query", &[]);
    // One attempt before the write probe: an outage must still not be mistaken for bad data.
    let consumer = d.start("consume", &["--consumer-max-attempts", "1"]);
    let (ingest, query) = (d.api(&ingest_role), d.api(&query_role));
    let mut acked = send(&ingest, 4, 25).await;
    assert_visible_exactly_once(&query, &acked, Duration::from_secs(60)).await;
    let metrics = d.api(&consumer);
    assert_eq!(metric(&metrics, "heddle_consumer_store_up").await, Some(1.0));

    // Ingest keeps acknowledging into Kafka while ClickHouse is gone; nothing is committed.
    d.clickhouse.as_mut().unwrap().stop();
    acked.extend(send(&ingest, 8, 25).await);
    // Except a call too large for a Kafka record: its blob needs the store, so it is refused
    // with 503 (retry later), not acknowledged.
    let big = json!({ "batch": [big_call(&uid(), 2_000_000)] });
    let r = ingest.post("/v2/pipe/line/calls/complete", &big).await;
    assert!(r.err(503).contains("not stored"), "{}", r.text());
    // The consumer sees the outage (its write probe fails) and holds the batch.
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&metrics, "heddle_consumer_store_up").await != Some(0.0) {
        assert!(Instant::now() < deadline, "the consumer did not report the store down");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    d.clickhouse.as_mut().unwrap().resume();
    acked.extend(send(&ingest, 4, 25).await);
    assert_visible_exactly_once(&query, &acked, Duration::from_secs(90)).await;

    // Nothing was dead-lettered: the outage was waited out, not bisected into the DLQ.
    assert_eq!(metric(&metrics, "heddle_consumer_store_up").await, Some(1.0));
    assert!(metric(&metrics, "heddle_consumer_store_retries_total").await.unwrap() >= 1.0);
    let text = metrics.get("/metrics").await.text();
    assert!(!text.contains("heddle_dead_lettered_records_total{"), "{text}");
    assert!(!text.contains("outcome=\"dead_lettered\""), "{text}");
}

/// A call of `input_bytes` of text in `/calls/complete` form.
fn big_call(id: &str, input_bytes: usize) -> Value {
    json!({
        "project_id": PROJECT, "id": id, "trace_id": format!("trace-{id}"),
        "op_name": "weave:///pipe/line/op/big:d", "display_name": null, "parent_id": null,
        "started_at": "2026-11-21T10:00:00Z", "ended_at": "2026-11-21T10:00:01Z",
        "attributes": {}, "inputs": {"doc": format!("{id}:{}", "z".repeat(input_bytes))},
        "output": null, "summary": {}, "exception": null, "thread_id": null, "turn_id": null,
        "otel_dump": null, "wb_user_id": null, "wb_run_id": null, "wb_run_step": null,
        "wb_run_step_end": null
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_the_broker_refuses_as_too_large_are_sent_again_offloaded() {
    let d = Deployment::on_clickhouse();
    // The Kafka client's own size limit (like a broker's message.max.bytes) far below the
    // records heddle cuts (900 kB by default): whole records are refused as too large.
    let ingest_role = d.start("ingest", &["--kafka-option", "message.max.bytes=100000"]);
    let query_role = d.start("query", &[]);
    let _consumer = d.start("consume", &[]);
    let (ingest, query) = (d.api(&ingest_role), d.api(&query_role));

    let ids: Vec<String> = (0..12).map(|_| uid()).collect();
    let batch: Vec<Value> = ids.iter().map(|id| big_call(id, 60_000)).collect();
    let r = ingest.post("/v2/pipe/line/calls/complete", &json!({ "batch": batch })).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_visible_exactly_once(&query, &ids, Duration::from_secs(60)).await;
    for id in &ids {
        let call = query.read_call(PROJECT, id).await;
        let doc = call["inputs"]["doc"].as_str().unwrap();
        assert!(doc == format!("{id}:{}", "z".repeat(60_000)), "{id}: {} bytes", doc.len());
    }
    let offloaded = metric(&d.api(&ingest_role), "heddle_offloaded_parts_total").await;
    assert!(offloaded.unwrap_or(0.0) >= 1.0, "nothing was offloaded: {offloaded:?}");
}

/// An OTLP/JSON export of one span named `name`.
fn otlp_span(name: &str) -> (String, Vec<u8>) {
    let trace_id = uid().replace('-', "")[..32].to_owned();
    let span_id = uid().replace('-', "")[..16].to_owned();
    let body = json!({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{
        "scope": {"name": "pipeline-tests"},
        "spans": [{
            "traceId": trace_id, "spanId": span_id, "name": name, "kind": 1,
            "startTimeUnixNano": "1763700000000000000", "endTimeUnixNano": "1763700001000000000"
        }]
    }]}]});
    (span_id, serde_json::to_vec(&body).unwrap())
}

/// The placeholder op of an OTLP span travels through Kafka like its call: the ingest role
/// writes nothing to the store itself, so before a consumer runs the op is not there, and once
/// one runs the op, its source file and the call that names it are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_placeholder_ops_reach_the_store_through_kafka() {
    let d = Deployment::new();
    let ingest_role = d.start("ingest", &[]);
    let query_role = d.start("query", &[]);
    let (ingest, query) = (d.api(&ingest_role), d.api(&query_role));

    let object_id = format!("span-{}", &uid()[..8]);
    let (span_id, body) = otlp_span(&object_id);
    let headers = [("content-type", "application/json"), ("project_id", PROJECT)];
    let r = ingest.post_headers("/otel/v1/traces", &headers, body).await;
    assert_eq!(r.ok(), json!({}));
    let read_op = json!({"project_id": PROJECT, "object_id": object_id, "digest": "latest"});
    query.post("/obj/read", &read_op).await.err(404);

    let _consumer = d.start("consume", &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let op = loop {
        let r = query.post("/obj/read", &read_op).await;
        if r.status == 200 {
            break r.ok();
        }
        assert_eq!(r.status, 404, "{}", r.text());
        assert!(Instant::now() < deadline, "the placeholder op never reached the store");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(op["obj"]["kind"], "op");
    let file_digest = op["obj"]["val"]["files"]["obj.py"].as_str().unwrap();
    let read_file = json!({"project_id": PROJECT, "digest": file_digest});
    let file = query.post("/file/content", &read_file).await;
    assert!(file.text().starts_with("def func(*args, **kwargs):"), "{}", file.text());
    let op_ref =
        format!("weave:///{PROJECT}/op/{object_id}:{}", op["obj"]["digest"].as_str().unwrap());
    assert_visible_exactly_once(&query, std::slice::from_ref(&span_id), Duration::from_secs(60))
        .await;
    assert_eq!(query.read_call(PROJECT, &span_id).await["op_name"], op_ref);
}
