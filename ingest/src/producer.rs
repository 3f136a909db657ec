//! The distributed write path: call parts go to Kafka, and the HTTP answer is sent only after
//! every record of the request is acknowledged by all in-sync replicas (`acks=all`, idempotent
//! producer). A broker that cannot acknowledge within the delivery timeout turns into 503 with
//! Retry-After — never a 200 for data that is not stored. librdkafka reconnects by itself, so
//! ingest recovers without intervention when the broker is back.
//!
//! Record design: one record per (request, partition), not one per call. tansu and small Kafka
//! clusters sustain tens of thousands of records per second, while the SDK sends up to 1000 calls
//! per request; grouping keeps the record rate per request bounded by the partition count. The
//! partition is chosen from the trace id, so all parts of a trace stay on one partition.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::try_join_all;
use heddle_api::{ApiError, CallSink};
use heddle_proto::calls::CallPart;
use heddle_proto::record::{CallPartRecord, encode_parts, partition_of};
use prost::Message as _;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::sync::Mutex;

use crate::metrics::Metrics;

/// Kafka settings shared by the producer and the consumer.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    pub brokers: String,
    pub topic: String,
    pub dlq_topic: String,
    /// How long a produce may wait for acknowledgement before the request fails with 503.
    pub delivery_timeout: Duration,
    /// Records are cut at about this size (parts larger than it travel alone).
    pub max_record_bytes: usize,
    /// Extra librdkafka properties for every client (TLS/SASL, session timeout, ...), applied
    /// after heddle's own; see [`KafkaConfig::check_options`].
    pub options: Vec<(String, String)>,
}

/// Properties heddle's promises rest on: acknowledged means replicated, offsets move only after
/// the store acknowledged. A user option may not change them.
const FIXED_PROPERTIES: &[&str] =
    &["acks", "enable.idempotence", "enable.auto.commit", "enable.auto.offset.store"];

impl KafkaConfig {
    /// Parses one `key=value` librdkafka property, refusing those heddle fixes.
    pub fn parse_option(kv: &str) -> Result<(String, String), String> {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("{kv:?} is not KEY=VALUE"))?;
        let k = k.trim();
        if FIXED_PROPERTIES.contains(&k) {
            return Err(format!("{k} is fixed by heddle (its durability promises depend on it)"));
        }
        Ok((k.to_owned(), v.trim().to_owned()))
    }

    /// A client config with the brokers and the user's options; callers add their own settings
    /// first and call [`KafkaConfig::finish`] last.
    pub(crate) fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        c
    }

    pub(crate) fn finish(&self, mut c: ClientConfig) -> ClientConfig {
        for (k, v) in &self.options {
            c.set(k, v);
        }
        c
    }
}

pub(crate) fn producer_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = cfg.client();
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", cfg.delivery_timeout.as_millis().to_string())
        .set("linger.ms", "2")
        .set("message.max.bytes", (cfg.max_record_bytes * 2 + 65_536).to_string());
    cfg.finish(c)
}

pub struct KafkaSink {
    /// Replaced when it stays stuck while the broker is reachable (see `recover_after_failure`).
    producer: std::sync::RwLock<FutureProducer>,
    failures: AtomicU32,
    cfg: KafkaConfig,
    metrics: Arc<Metrics>,
    /// Partition count of the topic, refreshed from metadata now and then.
    partitions: AtomicU32,
    refreshed: Mutex<Option<Instant>>,
}

const METADATA_REFRESH: Duration = Duration::from_secs(30);

impl KafkaSink {
    pub fn new(cfg: KafkaConfig, metrics: Arc<Metrics>) -> Result<KafkaSink, KafkaError> {
        let producer = std::sync::RwLock::new(producer_config(&cfg).create()?);
        Ok(KafkaSink {
            producer,
            failures: AtomicU32::new(0),
            cfg,
            metrics,
            partitions: AtomicU32::new(0),
            refreshed: Mutex::new(None),
        })
    }

    /// The topic's partition count: cached, refreshed every 30 s, fetched when unknown.
    async fn partition_count(&self) -> Result<u32, ApiError> {
        let mut refreshed = self.refreshed.lock().await;
        let known = self.partitions.load(Ordering::Relaxed);
        if known > 0 && refreshed.is_some_and(|t| t.elapsed() < METADATA_REFRESH) {
            return Ok(known);
        }
        let client = self.producer();
        let topic = self.cfg.topic.clone();
        let timeout = self.cfg.delivery_timeout;
        let fetched = tokio::task::spawn_blocking(move || {
            let md = client.client().fetch_metadata(Some(&topic), timeout)?;
            Ok::<_, KafkaError>(md.topics().first().map_or(0, |t| t.partitions().len() as u32))
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
        match fetched {
            Ok(n) if n > 0 => {
                self.partitions.store(n, Ordering::Relaxed);
                *refreshed = Some(Instant::now());
                Ok(n)
            }
            // A stale count is still a valid routing; only an unknown one is fatal.
            _ if known > 0 => Ok(known),
            Ok(_) => Err(unavailable(format!("topic {} has no partitions", self.cfg.topic))),
            Err(e) => Err(unavailable(format!("Kafka metadata unavailable: {e}"))),
        }
    }

    fn producer(&self) -> FutureProducer {
        self.producer.read().expect("not poisoned").clone()
    }

    /// An idempotent producer whose messages timed out must bump its epoch with the broker; a
    /// broker that restarted without that state (tansu does) can leave the producer failing
    /// forever. After repeated failures while the broker answers metadata, start a new producer
    /// (a new producer id). Duplicates this might cause are invisible: parts are idempotent.
    fn recover_after_failure(&self) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < 2 {
            return;
        }
        let reachable = self
            .producer()
            .client()
            .fetch_metadata(Some(&self.cfg.topic), Duration::from_secs(1))
            .is_ok();
        if !reachable {
            return;
        }
        match producer_config(&self.cfg).create::<FutureProducer>() {
            Ok(fresh) => {
                tracing::warn!(
                    failures,
                    "Kafka is reachable but writes keep failing: new producer"
                );
                *self.producer.write().expect("not poisoned") = fresh;
                self.failures.store(0, Ordering::Relaxed);
            }
            Err(e) => tracing::error!(error = %e, "could not create a new Kafka producer"),
        }
    }

    /// Splits parts into records: grouped by partition, cut at `max_record_bytes`.
    fn records(&self, parts: &[CallPart], partitions: u32) -> Vec<(i32, String, Vec<u8>)> {
        let mut groups: Vec<Vec<&CallPart>> = vec![Vec::new(); partitions as usize];
        for p in parts {
            let key = p.trace_id.as_deref().unwrap_or(&p.id);
            groups[partition_of(key, partitions) as usize].push(p);
        }
        let mut out = Vec::new();
        for (partition, group) in groups.into_iter().enumerate() {
            let mut chunk: Vec<&CallPart> = Vec::new();
            let mut size = 0;
            for p in group {
                let len = CallPartRecord::from(p).encoded_len();
                if !chunk.is_empty() && size + len > self.cfg.max_record_bytes {
                    out.push(record(partition, &chunk));
                    chunk.clear();
                    size = 0;
                }
                chunk.push(p);
                size += len;
            }
            if !chunk.is_empty() {
                out.push(record(partition, &chunk));
            }
        }
        out
    }
}

fn record(partition: usize, parts: &[&CallPart]) -> (i32, String, Vec<u8>) {
    let key = parts[0].trace_id.clone().unwrap_or_else(|| parts[0].id.clone());
    (partition as i32, key, encode_parts(parts.iter().copied()))
}

fn unavailable(msg: String) -> ApiError {
    ApiError::Overloaded(format!("{msg}; the data was not stored, retry later"))
}

#[async_trait]
impl CallSink for KafkaSink {
    async fn write(&self, parts: Vec<CallPart>) -> Result<(), ApiError> {
        let partitions = self.partition_count().await?;
        let records = self.records(&parts, partitions);
        let producer = self.producer();
        let sends = records.iter().map(|(partition, key, payload)| {
            let rec =
                FutureRecord::to(&self.cfg.topic).partition(*partition).key(key).payload(payload);
            let producer = &producer;
            async move { producer.send(rec, self.cfg.delivery_timeout).await.map_err(|(e, _)| e) }
        });
        match try_join_all(sends).await {
            Ok(_) => {
                self.failures.store(0, Ordering::Relaxed);
                self.metrics.produced.with_label_values(&["acked"]).inc_by(records.len() as u64);
                Ok(())
            }
            Err(e) => {
                self.metrics.produced.with_label_values(&["failed"]).inc();
                tracing::warn!(error = %e, "produce failed");
                // Checking the broker blocks for up to a second: keep it off the reactor.
                tokio::task::block_in_place(|| self.recover_after_failure());
                Err(match e.rdkafka_error_code() {
                    Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
                        ApiError::TooLarge(format!("a call is larger than Kafka accepts: {e}"))
                    }
                    _ => unavailable(format!("Kafka did not acknowledge the write: {e}")),
                })
            }
        }
    }
}

#[cfg(test)]
mod options_tests {
    use super::*;

    fn cfg(options: &[&str]) -> Result<KafkaConfig, String> {
        Ok(KafkaConfig {
            brokers: "b:9092".into(),
            topic: "t".into(),
            dlq_topic: "d".into(),
            delivery_timeout: Duration::from_secs(5),
            max_record_bytes: 1000,
            options: options
                .iter()
                .map(|o| KafkaConfig::parse_option(o))
                .collect::<Result<_, _>>()?,
        })
    }

    #[test]
    fn user_options_apply_after_heddles_own() {
        let c = producer_config(&cfg(&["linger.ms=20", " security.protocol = SASL_SSL"]).unwrap());
        assert_eq!(c.get("linger.ms"), Some("20"));
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(c.get("acks"), Some("all"));
    }

    #[test]
    fn durability_properties_and_malformed_options_are_refused() {
        for bad in ["acks=1", "enable.idempotence=false", "enable.auto.commit=true"] {
            let Err(err) = cfg(&[bad]) else { panic!("{bad} was accepted") };
            assert!(err.contains("fixed by heddle"), "{bad}: {err}");
        }
        let Err(err) = cfg(&["session.timeout.ms"]) else { panic!("a bare key was accepted") };
        assert!(err.contains("not KEY=VALUE"), "{err}");
    }
}
