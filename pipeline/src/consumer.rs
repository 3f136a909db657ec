//! Kafka → store, in batches (the `consume` role).
//!
//! Stages, each small: collect records until a batch is full by rows, bytes or time → decode
//! (undecodable records go to the dead-letter topic) → cut into groups bounded by their
//! resolved size → per group: read offloaded parts back from their blobs, store the group's
//! placeholder ops, then its call parts with one insert whose deduplication token is derived
//! from its offsets → commit the offsets.
//! Offsets are committed only after the store acknowledged, so a crash redelivers rather than
//! loses; the redelivered parts are idempotent upserts, so the repeat is never visible.
//!
//! Retry policy ([`crate::batch_store`]): a store that is down for everyone is retried with
//! capped backoff, without committing, for as long as it takes; a batch that keeps failing while
//! the store takes other writes, or that the store rejects as bad data, is split in halves until
//! the records at fault are isolated, and those go to the dead-letter topic with the reason, so
//! one bad record cannot block a partition.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heddle_proto::record::{Decoded, RecordPart, decode_record};
use heddle_store::Store;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::KafkaConfig;
use crate::batch_store::{BatchStore, Item, ReasonClass, RetryPolicy, cut_by_bytes};
use crate::metrics::Metrics;
use crate::producer::producer_config;

/// When a batch is flushed: whichever limit is reached first.
#[derive(Debug, Clone)]
pub struct BatchLimits {
    pub max_records: usize,
    pub max_bytes: usize,
    pub max_wait: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
}

/// One consumed record, detached from the consumer.
struct Rec {
    partition: i32,
    offset: i64,
    /// Produce time, milliseconds since the epoch.
    timestamp_ms: Option<i64>,
    payload: Vec<u8>,
}

pub struct Pipeline {
    consumer: StreamConsumer,
    dlq: FutureProducer,
    batches: BatchStore,
    metrics: Arc<Metrics>,
    cfg: KafkaConfig,
    limits: BatchLimits,
}

/// How long the broker may hold a fetch that finds no new record. Apache Kafka answers as soon
/// as one arrives, so there this only bounds idle fetches (20 a second). A broker that holds
/// every such fetch for the whole wait (tansu 0.6 does) adds up to the wait to each record's
/// visibility lag: librdkafka's default of 500 ms was most of it, and 50 ms cut the paced lag
/// from 0.77 s to 0.29 s at the median and from 2.0 s to 0.53 s at p99 (docs/benchmarks.md,
/// "Substring pretest, consumer fetch wait and writer cache").
/// `--kafka-option fetch.wait.max.ms=N` overrides it.
const FETCH_WAIT_MS: &str = "50";

impl Pipeline {
    pub fn new(
        cfg: KafkaConfig,
        group: &str,
        limits: BatchLimits,
        retry: RetryPolicy,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> Result<Pipeline, ConsumeError> {
        let mut c = cfg.client();
        c.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", FETCH_WAIT_MS);
        let consumer: StreamConsumer = cfg.finish(c).create()?;
        consumer.subscribe(&[&cfg.topic])?;
        let dlq = producer_config(&cfg).create()?;
        let batches = BatchStore::new(Arc::new(store), metrics.clone(), retry);
        Ok(Pipeline { consumer, dlq, batches, metrics, cfg, limits })
    }

    /// Runs until `shutdown` resolves; the batch in hand is finished first.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), ConsumeError> {
        tokio::pin!(shutdown);
        let mut lag_checked = Instant::now();
        loop {
            let batch = tokio::select! {
                batch = self.collect() => batch?,
                () = &mut shutdown => return Ok(()),
            };
            if !batch.is_empty() {
                self.process(batch).await?;
            }
            if lag_checked.elapsed() > Duration::from_secs(5) {
                self.update_lag();
                lag_checked = Instant::now();
            }
        }
    }

    /// Waits for the first record, then gathers more until a limit is reached.
    async fn collect(&self) -> Result<Vec<Rec>, ConsumeError> {
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        let first = loop {
            match self.consumer.recv().await {
                Ok(m) => break m,
                Err(e) => self.survive(e).await?,
            }
        };
        bytes += first.payload_len();
        batch.push(detach(&first));
        let deadline = tokio::time::Instant::now() + self.limits.max_wait;
        while batch.len() < self.limits.max_records && bytes < self.limits.max_bytes {
            match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                Ok(Ok(m)) => {
                    bytes += m.payload_len();
                    batch.push(detach(&m));
                }
                Ok(Err(e)) => {
                    self.survive(e).await?;
                    break; // store what is in hand
                }
                Err(_) => break, // max_wait reached
            }
        }
        Ok(batch)
    }

    /// Kafka errors seen while consuming (a broker restarting, a lost connection) are transient:
    /// librdkafka reconnects by itself. Only an error librdkafka declares fatal stops the role.
    async fn survive(&self, e: KafkaError) -> Result<(), ConsumeError> {
        if let Some((_, reason)) = self.consumer.client().fatal_error() {
            tracing::error!(reason, "fatal Kafka consumer error");
            return Err(e.into());
        }
        tracing::warn!(error = %e, "Kafka consumer error; retrying");
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(())
    }

    async fn process(&self, batch: Vec<Rec>) -> Result<(), ConsumeError> {
        let mut decoded: Vec<(&Rec, Decoded)> = Vec::with_capacity(batch.len());
        for rec in &batch {
            match decode_record(&rec.payload) {
                Ok(record) => decoded.push((rec, record)),
                Err(e) => self.dead_letter(rec, ReasonClass::Undecodable, &e.to_string()).await?,
            }
        }
        // Offloaded parts count with their full size: a batch of small references may stand for
        // far more than `max_bytes` once read back.
        let sizes: Vec<usize> =
            decoded.iter().map(|(r, record)| resolved_size(r, &record.parts)).collect();
        let mut rest = decoded.into_iter();
        for group in cut_by_bytes(&sizes, self.limits.max_bytes) {
            self.store_group(rest.by_ref().take(group.len()).collect()).await?;
        }
        self.commit(&batch)
    }

    /// Resolves and stores one group; records that cannot be stored are dead-lettered.
    async fn store_group(&self, group: Vec<(&Rec, Decoded)>) -> Result<(), ConsumeError> {
        let mut items = Vec::with_capacity(group.len());
        let mut recs = Vec::with_capacity(group.len());
        for (rec, Decoded { ops, parts, logs }) in group {
            match self.batches.resolve(parts).await {
                Ok(parts) => {
                    let (partition, offset) = (rec.partition, rec.offset);
                    items.push(Item { partition, offset, ops, parts, logs });
                    recs.push(rec);
                }
                Err((class, reason)) => self.dead_letter(rec, class, &reason).await?,
            }
        }
        let refused = self.batches.store_all(&items).await;
        for r in &refused {
            self.dead_letter(recs[r.index], r.class, &r.reason).await?;
        }
        let now_ms = now_ms();
        let mut stored = 0;
        for (i, rec) in recs.iter().enumerate() {
            if refused.iter().any(|r| r.index == i) {
                continue; // counted as dead-lettered
            }
            stored += 1;
            if let Some(ts) = rec.timestamp_ms {
                self.metrics.visibility_lag.observe((now_ms - ts).max(0) as f64 / 1000.0);
            }
        }
        self.metrics.consumed.with_label_values(&["stored"]).inc_by(stored);
        Ok(())
    }

    /// Sends a record to the dead-letter topic with the reason; retried until Kafka takes it.
    async fn dead_letter(
        &self,
        rec: &Rec,
        class: ReasonClass,
        reason: &str,
    ) -> Result<(), ConsumeError> {
        tracing::error!(
            partition = rec.partition,
            offset = rec.offset,
            class = class.as_str(),
            reason,
            "dead-lettering record"
        );
        let partition = rec.partition.to_string();
        let offset = rec.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header { key: "heddle-reason", value: Some(reason) })
            .insert(Header { key: "heddle-reason-class", value: Some(class.as_str()) })
            .insert(Header { key: "heddle-source-topic", value: Some(&self.cfg.topic) })
            .insert(Header { key: "heddle-source-partition", value: Some(&partition) })
            .insert(Header { key: "heddle-source-offset", value: Some(&offset) });
        loop {
            let record = FutureRecord::<(), _>::to(&self.cfg.dlq_topic)
                .payload(&rec.payload)
                .headers(headers.clone());
            match self.dlq.send(record, self.cfg.delivery_timeout).await {
                Ok(_) => break,
                Err((e, _)) => {
                    tracing::warn!(error = %e, "dead-letter produce failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        self.metrics.consumed.with_label_values(&["dead_lettered"]).inc();
        self.metrics.dead_lettered.with_label_values(&[class.as_str()]).inc();
        Ok(())
    }

    /// Commits the next offset of every partition in the batch, synchronously.
    fn commit(&self, recs: &[Rec]) -> Result<(), ConsumeError> {
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for r in recs {
            let e = next.entry(r.partition).or_insert(0);
            *e = (*e).max(r.offset + 1);
        }
        if next.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (partition, offset) in next {
            tpl.add_partition_offset(&self.cfg.topic, partition, Offset::Offset(offset))?;
        }
        self.consumer.commit(&tpl, CommitMode::Sync)?;
        Ok(())
    }

    /// Consumer lag per assigned partition: high watermark minus committed offset.
    fn update_lag(&self) {
        let Ok(assignment) = self.consumer.assignment() else { return };
        let Ok(committed) = self.consumer.committed_offsets(assignment, Duration::from_secs(2))
        else {
            return;
        };
        for elem in committed.elements() {
            let Ok((_, high)) = self.consumer.fetch_watermarks(
                elem.topic(),
                elem.partition(),
                Duration::from_secs(2),
            ) else {
                continue;
            };
            let done = match elem.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            self.metrics
                .consumer_lag
                .with_label_values(&[elem.topic(), &elem.partition().to_string()])
                .set((high - done).max(0));
        }
    }
}

fn detach<M: Message>(m: &M) -> Rec {
    Rec {
        partition: m.partition(),
        offset: m.offset(),
        timestamp_ms: m.timestamp().to_millis(),
        payload: m.payload().unwrap_or_default().to_vec(),
    }
}

/// What a record weighs once its offloaded parts are read back.
fn resolved_size(rec: &Rec, parts: &[RecordPart]) -> usize {
    let blobs: u64 = parts
        .iter()
        .map(|p| match p {
            RecordPart::Offloaded(o) => o.size,
            RecordPart::Inline(_) => 0,
        })
        .sum();
    rec.payload.len().saturating_add(usize::try_from(blobs).unwrap_or(usize::MAX))
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
