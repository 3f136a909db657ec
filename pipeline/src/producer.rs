//! The distributed write path (docs/distributed.md, "Write path"): call parts, placeholder ops
//! and OTLP log records go to Kafka, and a write returns only after every record of it is acknowledged by all
//! in-sync replicas (`acks=all`, idempotent producer). A broker that cannot acknowledge within
//! the delivery timeout makes the write [`SinkError::Unavailable`] (the API answers 503 with
//! Retry-After) — never a success for data that is not stored. librdkafka reconnects by itself,
//! so ingest recovers without intervention when the broker is back. How a write is cut into
//! records is [`crate::plan`].
//!
//! Large calls: a part whose encoded size exceeds `max_record_bytes` is offloaded — written to
//! the store as a content-addressed blob of its project *before* the record that references it
//! is produced — so the Kafka record size never limits the call size; the consumer reads the
//! blob back and stores the full call (docs/distributed.md, "Large calls"). A record the broker
//! still refuses as too large is sent again with each of its parts offloaded.

use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::join_all;
use futures::{StreamExt, TryStreamExt};
use heddle_proto::calls::CallPart;
use heddle_proto::otlp::logs::OtelLog;
use heddle_proto::otlp::op::OpWrites;
use heddle_proto::record::{
    CallPartBatch, Offload, encode_logs, encode_ops, encode_records, offload,
};
use heddle_store::{Store, StoreError};
use prost::Message as _;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;
use tokio::sync::Mutex;

use crate::lend::{self, LendingProducer};
use crate::metrics::Metrics;
use crate::plan::{Plan, Planner, Record, plan, plan_logs, plan_ops};
use crate::sink::Staging;
use crate::{KafkaConfig, Sink, SinkError, Staged};

impl KafkaConfig {
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
    producer: std::sync::RwLock<Arc<LendingProducer>>,
    failures: AtomicU32,
    /// When a new producer was last tried: one attempt at a time, at most one per wait.
    last_recovery: std::sync::Mutex<Option<std::time::Instant>>,
    cfg: KafkaConfig,
    /// `cfg.topic` as librdkafka takes it.
    topic: CString,
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
        let producer = std::sync::RwLock::new(Arc::new(lend::create(&producer_config(&cfg))?));
        let topic = CString::new(cfg.topic.as_str())?;
        Ok(KafkaSink {
            blobs,
            producer,
            failures: AtomicU32::new(0),
            last_recovery: std::sync::Mutex::new(None),
            cfg,
            topic,
            metrics,
            partitions: AtomicU32::new(0),
            refreshed: Mutex::new(None),
        })
    }

    /// The topic's partition count: cached, refreshed every 30 s, fetched when unknown.
    async fn partition_count(&self) -> Result<u32, SinkError> {
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
        .map_err(|e| SinkError::internal("fetching Kafka metadata", e))?;
        match fetched {
            Ok(n) if n > 0 => {
                self.partitions.store(n, Ordering::Relaxed);
                *refreshed = Some(Instant::now());
                Ok(n)
            }
            // A stale count is still a valid routing; only an unknown one is fatal.
            _ if known > 0 => Ok(known),
            Ok(_) => Err(SinkError::unavailable(
                format!(
                    "topic {} has no partitions (create the topics with `heddle migrate --kafka`)",
                    self.cfg.topic
                ),
                None,
            )),
            Err(e) => Err(SinkError::unavailable(
                format!("Kafka metadata unavailable: {e}"),
                Some(e.into()),
            )),
        }
    }

    fn producer(&self) -> Arc<LendingProducer> {
        self.producer.read().expect("not poisoned").clone()
    }

    /// An idempotent producer whose messages timed out must bump its epoch with the broker; a
    /// broker that restarted without that state (tansu does) can leave the producer failing
    /// forever. After repeated failures, start a new producer (a new producer id) once the
    /// broker answers it. The broker is asked through the new producer, not the stuck one,
    /// whose connections may be as stuck as its messages, and with up to the delivery timeout
    /// (at most 5 s): a broker that just restarted on a loaded machine answers slowly.
    /// Duplicates this might cause are invisible: parts are idempotent.
    fn recover_after_failure(&self) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < 2 {
            return;
        }
        let wait = self.cfg.delivery_timeout.min(Duration::from_secs(5));
        // Writes failing together try once: the others answer their 503 at once.
        let Ok(mut last) = self.last_recovery.try_lock() else { return };
        if last.is_some_and(|t| t.elapsed() < wait) {
            return;
        }
        *last = Some(std::time::Instant::now());
        let fresh = match lend::create(&producer_config(&self.cfg)) {
            Ok(fresh) => Arc::new(fresh),
            Err(e) => {
                tracing::error!(error = %e, "could not create a new Kafka producer");
                return;
            }
        };
        if fresh.client().fetch_metadata(Some(&self.cfg.topic), wait).is_err() {
            return;
        }
        tracing::warn!(failures, "Kafka is reachable but writes keep failing: new producer");
        *self.producer.write().expect("not poisoned") = fresh;
        self.failures.store(0, Ordering::Relaxed);
    }

    /// Stores the blobs of offloaded parts (a few at a time); returns once all are durable.
    async fn put_blobs(&self, blobs: Vec<Offload>) -> Result<(), SinkError> {
        futures::stream::iter(blobs)
            .map(|b| async move {
                let size = b.blob.len() as u64;
                self.blobs.put_blob(&b.project, &b.digest, Bytes::from(b.blob)).await.map_err(
                    |e| {
                        tracing::warn!(error = %e, "storing an offloaded call failed");
                        match e {
                            StoreError::Backend(_) | StoreError::Overloaded => {
                                SinkError::unavailable(
                                    "the store did not take a large call",
                                    Some(e.into()),
                                )
                            }
                            e => SinkError::Store(e),
                        }
                    },
                )?;
                self.metrics.offloaded_parts.inc();
                self.metrics.offloaded_bytes.inc_by(size);
                Ok::<_, SinkError>(())
            })
            .buffer_unordered(BLOB_WRITES)
            .try_collect()
            .await
    }

    /// Stores a plan's blobs, then produces its records.
    async fn send(&self, plan: Plan) -> Result<(), SinkError> {
        // Blobs first: a record may reference only what is stored.
        self.put_blobs(plan.blobs).await?;
        self.produce_all(plan.records, |refused| self.resend_offloaded(refused)).await
    }

    /// Produces every record (each waits for its own acknowledgement); each record with its
    /// result. librdkafka reads the records in place ([`lend`]).
    async fn produce(&self, records: Vec<Record>) -> Vec<(Record, Result<(), KafkaError>)> {
        let producer = self.producer();
        let producer = &*producer;
        join_all(
            records
                .into_iter()
                .map(|r| lend::produce(producer, &self.topic, r, self.cfg.delivery_timeout)),
        )
        .await
    }

    /// A produce that failed for another reason than size: the write may be retried.
    fn failed(&self, e: &KafkaError) -> SinkError {
        self.metrics.produced.with_label_values(&["failed"]).inc();
        tracing::warn!(error = %e, "produce failed");
        // Checking the broker blocks for up to 5 s: keep it off the reactor.
        tokio::task::block_in_place(|| self.recover_after_failure());
        SinkError::unavailable(
            format!("Kafka did not acknowledge the write: {e}"),
            Some(e.clone().into()),
        )
    }

    /// Sends again the records the broker refused as too large (its `message.max.bytes` is below
    /// ours): every part offloaded, one reference per record. A reference is a few hundred bytes;
    /// one still refused is reported for its call alone.
    async fn resend_offloaded(&self, refused: Vec<Record>) -> Result<usize, SinkError> {
        let mut blobs = Vec::new();
        let mut records = Vec::new();
        for r in refused {
            let batch = CallPartBatch::decode(&r.payload[..])
                .map_err(|e| SinkError::internal("re-reading a record", e))?;
            for mut part in batch.parts {
                if part.offloaded.is_none() {
                    let off = offload(part)
                        .map_err(|e| SinkError::internal("offloading a call part", e))?;
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
        let count = records.len();
        for (rec, result) in self.produce(records).await {
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
        Ok(count)
    }

    /// Sends again the op records the broker refused as too large: one op per record, each
    /// with its project's files. One still refused fails the write.
    async fn resend_ops_alone(&self, refused: Vec<Record>) -> Result<usize, SinkError> {
        let mut records = Vec::new();
        for r in refused {
            let batch = CallPartBatch::decode(&r.payload[..])
                .map_err(|e| SinkError::internal("re-reading a record", e))?;
            for op in batch.ops {
                let payload = encode_ops(batch.files.clone(), vec![op]);
                records.push(Record { partition: r.partition, key: r.key.clone(), payload });
            }
        }
        let count = records.len();
        for (rec, result) in self.produce(records).await {
            match result {
                Ok(()) => {}
                Err(e) if is_too_large(&e) => {
                    return Err(SinkError::TooLarge(format!(
                        "the placeholder ops of project {} were not stored: Kafka refuses a \
                         record of one op as too large (the brokers' message.max.bytes is set \
                         too low)",
                        rec.key
                    )));
                }
                Err(e) => return Err(self.failed(&e)),
            }
        }
        Ok(count)
    }

    /// Sends again the log records the broker refused as too large: one log record per record.
    /// One still refused fails the write.
    async fn resend_logs_alone(&self, refused: Vec<Record>) -> Result<usize, SinkError> {
        let mut records = Vec::new();
        for r in refused {
            let batch = CallPartBatch::decode(&r.payload[..])
                .map_err(|e| SinkError::internal("re-reading a record", e))?;
            for log in batch.logs {
                let payload = encode_logs(vec![log]);
                records.push(Record { partition: r.partition, key: r.key.clone(), payload });
            }
        }
        let count = records.len();
        for (_, result) in self.produce(records).await {
            match result {
                Ok(()) => {}
                Err(e) if is_too_large(&e) => {
                    return Err(SinkError::TooLarge(
                        "a log record was not stored: Kafka refuses a record of one log record \
                         as too large (the brokers' message.max.bytes is set too low)"
                            .into(),
                    ));
                }
                Err(e) => return Err(self.failed(&e)),
            }
        }
        Ok(count)
    }

    /// Produces `records`, each waiting for its acknowledgement; those the broker refuses as
    /// too large go to `resend`, which returns how many records it had acknowledged.
    async fn produce_all<F, Fut>(&self, records: Vec<Record>, resend: F) -> Result<(), SinkError>
    where
        F: FnOnce(Vec<Record>) -> Fut,
        Fut: std::future::Future<Output = Result<usize, SinkError>>,
    {
        let count = records.len();
        let mut refused = Vec::new();
        for (rec, result) in self.produce(records).await {
            match result {
                Ok(()) => {}
                Err(e) if is_too_large(&e) => refused.push(rec),
                Err(e) => return Err(self.failed(&e)),
            }
        }
        let mut acked = count - refused.len();
        if !refused.is_empty() {
            tracing::warn!(records = refused.len(), "Kafka refused records as too large");
            acked += resend(refused).await?;
        }
        self.failures.store(0, Ordering::Relaxed);
        self.metrics.produced.with_label_values(&["acked"]).inc_by(acked as u64);
        Ok(())
    }
}

/// Blob writes one request runs at once.
const BLOB_WRITES: usize = 4;

fn is_too_large(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge)
}

/// Only a broker whose message size limit is below a few hundred bytes refuses a reference.
fn reference_too_large(id: &str) -> SinkError {
    SinkError::TooLarge(format!(
        "call {id} was not stored: Kafka refuses even a reference to it as too large (the \
         brokers' message.max.bytes is set too low); the other calls may be retried"
    ))
}

#[async_trait]
impl Sink for KafkaSink {
    async fn write(&self, parts: Vec<CallPart>) -> Result<(), SinkError> {
        let partitions = self.partition_count().await?;
        let max = self.cfg.max_record_bytes;
        // Encoding and hashing up to the body limit: off the async runtime.
        let plan = tokio::task::spawn_blocking(move || plan(parts, partitions, max))
            .await
            .map_err(|e| SinkError::internal("planning the records", e))??;
        self.send(plan).await
    }

    /// Plans the records with the partition count last read; before any was read, the parts
    /// are collected and written as `write` writes them.
    fn stager(&self) -> Staged {
        match self.partitions.load(Ordering::Relaxed) {
            0 => Staged::parts(Vec::new()),
            partitions => {
                Staged(Staging::Records(Planner::new(partitions, self.cfg.max_record_bytes)))
            }
        }
    }

    async fn write_staged(&self, staged: Staged) -> Result<(), SinkError> {
        match staged.0 {
            Staging::Parts(parts) => self.write(parts).await,
            Staging::Failed(e) => Err(e),
            Staging::Records(planner) => {
                let plan = planner.finish();
                // Keeps the count fresh, and fails as `write` does when the topic is unknown. A
                // count that grew since the plan was made changes where a trace's parts go, as
                // it does between any two writes; storing does not depend on it.
                self.partition_count().await?;
                self.send(plan).await
            }
        }
    }

    async fn write_ops(&self, ops: OpWrites) -> Result<(), SinkError> {
        if ops.is_empty() {
            return Ok(());
        }
        let partitions = self.partition_count().await?;
        let records = plan_ops(ops, partitions, self.cfg.max_record_bytes);
        self.produce_all(records, |refused| self.resend_ops_alone(refused)).await
    }

    async fn write_logs(&self, logs: Vec<OtelLog>) -> Result<(), SinkError> {
        if logs.is_empty() {
            return Ok(());
        }
        let partitions = self.partition_count().await?;
        let max = self.cfg.max_record_bytes;
        // Encoding up to the body limit: off the async runtime.
        let records = tokio::task::spawn_blocking(move || plan_logs(logs, partitions, max))
            .await
            .map_err(|e| SinkError::internal("planning the records", e))?;
        self.produce_all(records, |refused| self.resend_logs_alone(refused)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::cfg;

    #[test]
    fn user_options_apply_after_heddles_own() {
        let c = producer_config(&cfg(&["linger.ms=20", " security.protocol = SASL_SSL"]).unwrap());
        assert_eq!(c.get("linger.ms"), Some("20"));
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(c.get("acks"), Some("all"));
    }
}
