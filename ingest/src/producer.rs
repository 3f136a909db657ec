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
//!
//! Large calls: a part whose encoded size exceeds `max_record_bytes` is offloaded — written to
//! the store as a content-addressed blob of its project *before* the record that references it
//! is produced — so the Kafka record size never limits the call size; the consumer reads the
//! blob back and stores the full call (docs/distributed.md, "Large calls"). A record the broker
//! still refuses as too large is sent again with each of its parts offloaded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::join_all;
use futures::{StreamExt, TryStreamExt};
use heddle_api::{ApiError, CallSink};
use heddle_proto::calls::CallPart;
use heddle_proto::record::{
    CallPartBatch, CallPartRecord, Offload, encode_records, offload, partition_of,
};
use heddle_store::{Store, StoreError};
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
    /// Records are cut at about this size; a part larger than it is offloaded to a blob.
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
    /// Where offloaded parts go (the store the consumer writes to).
    blobs: Arc<dyn Store>,
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
    pub fn new(
        cfg: KafkaConfig,
        blobs: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> Result<KafkaSink, KafkaError> {
        let producer = std::sync::RwLock::new(producer_config(&cfg).create()?);
        Ok(KafkaSink {
            blobs,
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

    /// Stores the blobs of offloaded parts (a few at a time); returns once all are durable.
    async fn put_blobs(&self, blobs: Vec<Offload>) -> Result<(), ApiError> {
        futures::stream::iter(blobs)
            .map(|b| async move {
                let size = b.blob.len() as u64;
                self.blobs.put_blob(&b.project, &b.digest, Bytes::from(b.blob)).await.map_err(
                    |e| {
                        tracing::warn!(error = %e, "storing an offloaded call failed");
                        match e {
                            StoreError::Backend(_) | StoreError::Overloaded => {
                                unavailable("the store did not take a large call".into())
                            }
                            e => ApiError::from(e),
                        }
                    },
                )?;
                self.metrics.offloaded_parts.inc();
                self.metrics.offloaded_bytes.inc_by(size);
                Ok::<_, ApiError>(())
            })
            .buffer_unordered(BLOB_WRITES)
            .try_collect()
            .await
    }

    /// Produces every record (each waits for its own acknowledgement); the result of each.
    async fn produce(&self, records: &[Record]) -> Vec<Result<(), KafkaError>> {
        let producer = self.producer();
        join_all(records.iter().map(|r| {
            let rec = FutureRecord::to(&self.cfg.topic)
                .partition(r.partition)
                .key(&r.key)
                .payload(&r.payload);
            let producer = &producer;
            async move {
                producer.send(rec, self.cfg.delivery_timeout).await.map(|_| ()).map_err(|(e, _)| e)
            }
        }))
        .await
    }

    /// A produce that failed for another reason than size: 503, the request may be retried.
    fn failed(&self, e: &KafkaError) -> ApiError {
        self.metrics.produced.with_label_values(&["failed"]).inc();
        tracing::warn!(error = %e, "produce failed");
        // Checking the broker blocks for up to a second: keep it off the reactor.
        tokio::task::block_in_place(|| self.recover_after_failure());
        unavailable(format!("Kafka did not acknowledge the write: {e}"))
    }

    /// Sends again the records the broker refused as too large (its `message.max.bytes` is below
    /// ours): every part offloaded, one reference per record. A reference is a few hundred bytes;
    /// one still refused is reported for its call alone.
    async fn resend_offloaded(&self, refused: Vec<&Record>) -> Result<usize, ApiError> {
        let mut blobs = Vec::new();
        let mut records = Vec::new();
        for r in refused {
            let batch = CallPartBatch::decode(&r.payload[..])
                .map_err(|e| ApiError::Internal(format!("re-reading a record: {e}")))?;
            for mut part in batch.parts {
                if part.offloaded.is_none() {
                    let off = offload(part).map_err(|e| ApiError::Internal(e.to_string()))?;
                    part = off.reference.clone();
                    blobs.push(off);
                }
                let key = r.key.clone();
                records.push(Record {
                    partition: r.partition,
                    key,
                    payload: encode_records([part]),
                });
            }
        }
        self.put_blobs(blobs).await?;
        for (rec, result) in records.iter().zip(self.produce(&records).await) {
            match result {
                Ok(()) => {}
                Err(e) if is_too_large(&e) => {
                    let id = CallPartBatch::decode(&rec.payload[..])
                        .ok()
                        .and_then(|b| b.parts.into_iter().next())
                        .map_or_else(String::new, |p| p.id);
                    return Err(reference_too_large(&id));
                }
                Err(e) => return Err(self.failed(&e)),
            }
        }
        Ok(records.len())
    }
}

/// Blob writes one request runs at once.
const BLOB_WRITES: usize = 4;

/// One Kafka record to produce.
struct Record {
    partition: i32,
    key: String,
    payload: Vec<u8>,
}

/// What one request becomes: the blobs to store first, then the records.
struct Plan {
    blobs: Vec<Offload>,
    records: Vec<Record>,
}

/// Splits parts into records: grouped by partition (all parts of a trace on one), cut at
/// `max_record_bytes`; a part larger than that is offloaded and travels as a reference.
fn plan(parts: Vec<CallPart>, partitions: u32, max_record_bytes: usize) -> Result<Plan, ApiError> {
    let mut groups: Vec<Vec<CallPartRecord>> = vec![Vec::new(); partitions.max(1) as usize];
    for p in parts {
        let key = p.trace_id.as_deref().unwrap_or(&p.id);
        groups[partition_of(key, partitions) as usize].push(CallPartRecord::from(p));
    }
    let mut blobs = Vec::new();
    let mut records = Vec::new();
    for (partition, group) in groups.into_iter().enumerate() {
        let mut chunk: Vec<CallPartRecord> = Vec::new();
        let mut size = 0;
        for mut rec in group {
            if rec.encoded_len() > max_record_bytes {
                let off = offload(rec).map_err(|e| ApiError::Internal(e.to_string()))?;
                rec = off.reference.clone();
                blobs.push(off);
            }
            let len = rec.encoded_len();
            if !chunk.is_empty() && size + len > max_record_bytes {
                records.push(record(partition, std::mem::take(&mut chunk)));
                size = 0;
            }
            chunk.push(rec);
            size += len;
        }
        if !chunk.is_empty() {
            records.push(record(partition, chunk));
        }
    }
    Ok(Plan { blobs, records })
}

fn record(partition: usize, parts: Vec<CallPartRecord>) -> Record {
    let key = parts[0].trace_id.clone().unwrap_or_else(|| parts[0].id.clone());
    Record { partition: partition as i32, key, payload: encode_records(parts) }
}

fn is_too_large(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge)
}

/// Only a broker whose message size limit is below a few hundred bytes refuses a reference.
fn reference_too_large(id: &str) -> ApiError {
    ApiError::TooLarge(format!(
        "call {id} was not stored: Kafka refuses even a reference to it as too large (the \
         brokers' message.max.bytes is set too low); the other calls may be retried"
    ))
}

fn unavailable(msg: String) -> ApiError {
    ApiError::Overloaded(format!("{msg}; the data was not stored, retry later"))
}

#[async_trait]
impl CallSink for KafkaSink {
    async fn write(&self, parts: Vec<CallPart>) -> Result<(), ApiError> {
        let partitions = self.partition_count().await?;
        let max = self.cfg.max_record_bytes;
        // Encoding and hashing up to the body limit: off the async runtime.
        let plan = tokio::task::spawn_blocking(move || plan(parts, partitions, max))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
        // Blobs first: a record may reference only what is stored.
        self.put_blobs(plan.blobs).await?;
        let results = self.produce(&plan.records).await;
        let mut refused = Vec::new();
        for (rec, result) in plan.records.iter().zip(&results) {
            match result {
                Ok(()) => {}
                Err(e) if is_too_large(e) => refused.push(rec),
                Err(e) => return Err(self.failed(e)),
            }
        }
        let mut acked = plan.records.len() - refused.len();
        if !refused.is_empty() {
            tracing::warn!(
                records = refused.len(),
                "Kafka refused records as too large; offloading"
            );
            acked += self.resend_offloaded(refused).await?;
        }
        self.failures.store(0, Ordering::Relaxed);
        self.metrics.produced.with_label_values(&["acked"]).inc_by(acked as u64);
        Ok(())
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

#[cfg(test)]
mod plan_tests {
    use heddle_proto::ProjectId;
    use heddle_proto::calls::StartPart;
    use heddle_proto::record::{RecordPart, decode_record, resolve};
    use heddle_proto::time::Micros;

    use super::*;

    fn part(id: &str, trace: &str, input_bytes: usize) -> CallPart {
        CallPart {
            project: ProjectId::parse("e/p").unwrap(),
            id: id.into(),
            trace_id: Some(trace.into()),
            start: Some(StartPart {
                op_name: "op".into(),
                display_name: None,
                parent_id: None,
                thread_id: None,
                turn_id: None,
                started_at: Micros(1),
                attributes: "{}".into(),
                inputs: format!("{{\"x\":\"{}\"}}", "a".repeat(input_bytes)),
                otel_dump: None,
                wb_user_id: None,
                wb_run_id: None,
                wb_run_step: None,
            }),
            end: None,
        }
    }

    #[test]
    fn large_parts_are_offloaded_and_every_part_arrives_once() {
        let max = 10_000;
        let mut parts: Vec<CallPart> =
            (0..40).map(|i| part(&format!("s{i}"), &format!("t{}", i % 5), 900)).collect();
        parts.push(part("big", "t1", 50_000));
        parts.push(part("edge", "t2", max)); // just over the limit once encoded
        let plan = plan(parts.clone(), 3, max).unwrap();
        assert_eq!(plan.blobs.len(), 2);
        let mut seen = Vec::new();
        for r in &plan.records {
            assert!(r.payload.len() <= max + 64, "record of {} bytes", r.payload.len());
            for p in decode_record(&r.payload).unwrap() {
                let p = match p {
                    RecordPart::Inline(p) => p,
                    RecordPart::Offloaded(o) => {
                        let blob = plan.blobs.iter().find(|b| b.digest == o.digest).unwrap();
                        resolve(&o, &blob.blob).unwrap()
                    }
                };
                let key = p.trace_id.as_deref().unwrap();
                assert_eq!(partition_of(key, 3), r.partition as u32, "a trace stays together");
                seen.push(p);
            }
        }
        seen.sort_by(|a, b| a.id.cmp(&b.id));
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(seen, parts);
    }
}
