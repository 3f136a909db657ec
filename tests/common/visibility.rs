//! The read-after-write barrier for the distributed store mode.
//!
//! With `heddle serve --kafka ... --clickhouse ...`, a 200 from an ingest endpoint means the
//! records are in Kafka; the in-process consumer stores them in ClickHouse a moment later. The
//! suites write and then read at once, so after every acknowledged ingest request the test
//! client waits here until the consumer has caught up — no sleeps, no weaker assertions:
//!
//! - normally, from the server's own `/metrics`: every record this process produced
//!   (`heddle_produced_records_total{outcome="acked"}`) has been handled by its consumer
//!   (`heddle_consumed_records_total` stored + dead-lettered; counted after the store's
//!   acknowledgement and the offset commit);
//! - in a process started on the data of a killed one, the counters start from zero while the
//!   consumer still has the old process's uncommitted records to redeliver, so the metrics
//!   cannot tell; there the barrier asks Kafka instead: the consumer group's committed offset
//!   has reached the high watermark of every partition (offsets are committed only after the
//!   store acknowledged, and the watermark read after an acknowledged produce covers it).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// How long an acknowledged write may take to become visible before the test fails.
const TIMEOUT: Duration = Duration::from_secs(30);
/// A consumer restarted after SIGKILL may first wait for the broker to expire the dead
/// member's session before it is assigned partitions.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);

/// The ingest endpoints: a 200 from one of them means "in Kafka", not yet "stored".
pub fn is_ingest_path(path: &str) -> bool {
    if matches!(
        path,
        "/call/start"
            | "/call/end"
            | "/call/upsert_batch"
            | "/otel/v1/traces"
            | "/agents/otel/v1/traces"
            | "/otel/v1/logs"
    ) {
        return true;
    }
    // /v2/{entity}/{project}/calls/complete and /v2/{entity}/{project}/call/{start,end}
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(
        segments.as_slice(),
        ["v2", _, _, "calls", "complete"] | ["v2", _, _, "call", "start" | "end"]
    )
}

/// How to tell that one server process's consumer has caught up.
pub struct Visibility {
    url: String,
    auth: String,
    http: reqwest::Client,
    kafka: KafkaProbe,
    /// The process was started on the data of a killed one: use Kafka's offsets.
    restarted: bool,
}

impl Visibility {
    pub fn new(url: &str, admin_key: &str, brokers: &str, group: &str, restarted: bool) -> Self {
        Visibility {
            url: url.to_owned(),
            auth: super::basic(admin_key),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("http client"),
            kafka: KafkaProbe { brokers: brokers.to_owned(), group: group.to_owned() },
            restarted,
        }
    }

    /// Waits until everything acknowledged so far is stored; panics after the timeout.
    pub async fn wait(&self) {
        if self.restarted {
            let kafka = self.kafka.clone();
            tokio::task::spawn_blocking(move || kafka.wait_caught_up(TIMEOUT))
                .await
                .expect("the Kafka probe panicked");
            return;
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let counters = self.counters().await;
            if counters.consumed() >= counters.produced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "acknowledged writes not stored within {TIMEOUT:?}: {counters:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The pipeline counters from the server's `/metrics`.
    async fn counters(&self) -> Counters {
        let resp = self
            .http
            .get(format!("{}/metrics", self.url))
            .header(reqwest::header::AUTHORIZATION, &self.auth)
            .send()
            .await
            .unwrap_or_else(|e| panic!("visibility barrier: GET /metrics failed: {e:?}"));
        let status = resp.status();
        let text = resp.text().await.expect("the /metrics body");
        assert!(status.is_success(), "visibility barrier: /metrics answered {status}: {text}");
        Counters::parse(&text)
    }

    /// Blocks until the consumer group has committed everything in the topic (used right after
    /// a restart, before the test reads).
    pub fn wait_caught_up_blocking(&self) {
        self.kafka.wait_caught_up(CATCH_UP_TIMEOUT);
    }
}

/// The counters the barrier compares.
#[derive(Debug, Default, PartialEq)]
struct Counters {
    produced: u64,
    stored: u64,
    dead_lettered: u64,
}

impl Counters {
    fn consumed(&self) -> u64 {
        self.stored + self.dead_lettered
    }

    /// Reads the samples from the Prometheus text format; absent samples are zero (a counter
    /// vector shows a label value only once it was used).
    fn parse(text: &str) -> Counters {
        let mut c = Counters::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else { continue };
            let value: u64 = match value.parse::<f64>() {
                Ok(v) => v as u64,
                Err(_) => continue,
            };
            match name {
                r#"heddle_produced_records_total{outcome="acked"}"# => c.produced = value,
                r#"heddle_consumed_records_total{outcome="stored"}"# => c.stored = value,
                r#"heddle_consumed_records_total{outcome="dead_lettered"}"# => {
                    c.dead_lettered = value
                }
                _ => {}
            }
        }
        c
    }
}

/// Reads the call topic's high watermarks and the consumer group's committed offsets.
#[derive(Clone)]
struct KafkaProbe {
    brokers: String,
    group: String,
}

impl KafkaProbe {
    fn wait_caught_up(&self, timeout: Duration) {
        // A client of the group that never subscribes: it only fetches the group's offsets.
        let client: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("a Kafka client for the visibility barrier");
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.behind(&client);
            match &state {
                Ok(behind) if behind.is_empty() => return,
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "the consumer did not catch up within {timeout:?}: {state:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Partitions whose committed offset is below the high watermark: (partition, committed,
    /// high).
    fn behind(&self, client: &BaseConsumer) -> Result<Vec<(i32, i64, i64)>, String> {
        let timeout = Duration::from_secs(5);
        let topic = super::kafka::TOPIC;
        let md = client.fetch_metadata(Some(topic), timeout).map_err(|e| e.to_string())?;
        let partitions: Vec<i32> =
            md.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
        if partitions.is_empty() {
            return Err(format!("no partitions for {topic}"));
        }
        let mut tpl = TopicPartitionList::new();
        for &p in &partitions {
            tpl.add_partition(topic, p);
        }
        let committed = client.committed_offsets(tpl, timeout).map_err(|e| e.to_string())?;
        let mut behind = Vec::new();
        for &p in &partitions {
            let (_, high) =
                client.fetch_watermarks(topic, p, timeout).map_err(|e| e.to_string())?;
            let done = match committed.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => 0,
            };
            if done < high {
                behind.push((p, done, high));
            }
        }
        Ok(behind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_paths() {
        for p in [
            "/call/start",
            "/call/end",
            "/call/upsert_batch",
            "/v2/e/p/calls/complete",
            "/v2/e/p/call/start",
            "/v2/e/p/call/end",
        ] {
            assert!(is_ingest_path(p), "{p}");
        }
        for p in ["/call/read", "/calls/stream_query", "/v2/e/p/calls/stream", "/obj/create"] {
            assert!(!is_ingest_path(p), "{p}");
        }
    }

    #[test]
    fn counters_from_the_text_format() {
        let text = "# HELP heddle_consumed_records_total Kafka records\n\
            # TYPE heddle_consumed_records_total counter\n\
            heddle_consumed_records_total{outcome=\"dead_lettered\"} 2\n\
            heddle_consumed_records_total{outcome=\"stored\"} 40\n\
            heddle_produced_records_total{outcome=\"acked\"} 43\n\
            heddle_produced_records_total{outcome=\"failed\"} 1\n";
        let c = Counters::parse(text);
        assert_eq!(c, Counters { produced: 43, stored: 40, dead_lettered: 2 });
        assert_eq!(Counters::parse(""), Counters::default());
    }
}
