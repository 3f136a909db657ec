//! The Kafka topics (docs/distributed.md#topics) on a real broker (tansu) that starts without
//! any: `heddle migrate --kafka` creates them with their partitions, running it again changes
//! nothing, and `heddle serve --kafka` on a fresh broker creates them itself so that the first
//! write is stored instead of answering 503.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::kafka::{DLQ_TOPIC, Kafka, TOPIC};
use common::{Api, BIN, announced_url, basic, uid};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::json;

/// The partition count of each topic the broker knows (0 for an unknown topic).
fn partitions(brokers: &str, topic: &str) -> usize {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("a metadata client");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    md.topics().first().map_or(0, |t| if t.error().is_some() { 0 } else { t.partitions().len() })
}

fn migrate(kafka: &Kafka, dir: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .args(["migrate", "--kafka", &kafka.brokers, "--data-dir"])
        .arg(dir)
        .args(["--kafka-partitions", "4", "--kafka-replication-factor", "1"])
        .env_clear()
        .env("RUST_LOG", "warn")
        .output()
        .expect("running heddle migrate")
}

#[test]
fn migrate_creates_the_topics_and_is_idempotent() {
    let kafka = Kafka::start_bare();
    assert_eq!(partitions(&kafka.brokers, TOPIC), 0, "a fresh broker has no calls topic");
    let dir = tempfile::tempdir().unwrap();

    let out = migrate(&kafka, dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "migrate --kafka failed: {stderr}\n{}", kafka.log());
    assert!(stderr.contains(&format!("created topic {TOPIC} (4 partitions)")), "{stderr}");
    assert_eq!(partitions(&kafka.brokers, TOPIC), 4);
    assert_eq!(partitions(&kafka.brokers, DLQ_TOPIC), 1);

    // Again: the topics exist and keep their partitions.
    let out = migrate(&kafka, dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "second migrate --kafka failed: {stderr}");
    assert!(stderr.contains(&format!("topic {TOPIC} exists (4 partitions)")), "{stderr}");
    assert_eq!(partitions(&kafka.brokers, TOPIC), 4);
    assert_eq!(partitions(&kafka.brokers, DLQ_TOPIC), 1);
}

#[test]
fn migrate_refuses_a_layout_the_pipeline_cannot_use() {
    let kafka = Kafka::start_bare();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["migrate", "--kafka", &kafka.brokers, "--data-dir"])
        .arg(dir.path())
        .args(["--kafka-topic-max-message-bytes", "1000"])
        .env_clear()
        .output()
        .expect("running heddle migrate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("below twice the record size"), "{stderr}");
    assert_eq!(partitions(&kafka.brokers, TOPIC), 0, "nothing was created");
}

#[tokio::test]
async fn serve_on_a_fresh_broker_creates_the_topics_and_stores_the_first_call() {
    let kafka = Kafka::start_bare();
    let dir = tempfile::tempdir().unwrap();
    let key = format!("admin-{}", uid());
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--otlp-grpc-listen", "127.0.0.1:0"])
        .args(["--api-key", &key, "--kafka", &kafka.brokers, "--data-dir"])
        .arg(dir.path().join("data"))
        .env_clear()
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning heddle serve");
    let url = announced_url(&mut child, "heddle listening on ").expect("serve announced itself");
    let api = Api::new(&url, Some(basic(&key)));
    let id = uid();
    let call = json!({"batch": [{"project_id": "topics/fresh", "id": id, "trace_id": uid(),
        "op_name": "f", "started_at": "2026-01-01T00:00:00Z", "attributes": {}, "inputs": {},
        "ended_at": "2026-01-01T00:00:01Z", "summary": {}, "output": 1}]});
    // The topics are created in the background at startup: writes may answer 503 until then.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = api.post("/v2/topics/fresh/calls/complete", &call).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(Instant::now() < deadline, "still 503 after 60 s: {}", r.text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(partitions(&kafka.brokers, TOPIC) >= 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read = api.post("/call/read", &json!({"project_id": "topics/fresh", "id": id})).await;
        if read.status == 200 && read.json()["call"]["id"] == json!(id) {
            assert_eq!(read.json()["call"]["output"], json!(1));
            break;
        }
        assert!(Instant::now() < deadline, "the call never became visible");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}
