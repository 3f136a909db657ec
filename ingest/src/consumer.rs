//! Kafka → store, in batches (the `consume` role).
//!
//! Stages, each small: collect records until a batch is full by rows, bytes or time → decode
//! (undecodable records go to the dead-letter topic) → store the batch with one insert whose
//! deduplication token is derived from the batch's offsets → commit the offsets. Offsets are
//! committed only after the store acknowledged, so a crash redelivers rather than loses; the
//! redelivered parts are idempotent upserts, so the repeat is never visible.
//!
//! Retry policy by error type: a store that is down or overloaded is retried (with backoff,
//! without committing) for as long as it takes; a batch the store rejects as bad data is split in
//! halves until the poison record is isolated, and that record goes to the dead-letter topic with
//! the reason, so one bad record cannot block a partition.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heddle_proto::calls::CallPart;
use heddle_proto::record::decode_parts;
use heddle_store::{Store, StoreError};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::metrics::Metrics;
use crate::producer::{KafkaConfig, producer_config};

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
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    cfg: KafkaConfig,
    limits: BatchLimits,
}

impl Pipeline {
    pub fn new(
        cfg: KafkaConfig,
        group: &str,
        limits: BatchLimits,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> Result<Pipeline, ConsumeError> {
        let mut c = cfg.client();
        c.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false");
        let consumer: StreamConsumer = cfg.finish(c).create()?;
        consumer.subscribe(&[&cfg.topic])?;
        let dlq = producer_config(&cfg).create()?;
        Ok(Pipeline { consumer, dlq, store, metrics, cfg, limits })
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
        let mut good: Vec<(Rec, Vec<CallPart>)> = Vec::with_capacity(batch.len());
        for rec in batch {
            match decode_parts(&rec.payload) {
                Ok(parts) => good.push((rec, parts)),
                Err(e) => self.dead_letter(&rec, &e.to_string()).await?,
            }
        }
        let rejected = self.store_all(&good).await?;
        self.commit(&good.iter().map(|(r, _)| r).collect::<Vec<_>>())?;
        let now_ms = now_ms();
        for (rec, _) in good.iter().filter(|(r, _)| !rejected.contains(&(r.partition, r.offset))) {
            if let Some(ts) = rec.timestamp_ms {
                self.metrics.visibility_lag.observe((now_ms - ts).max(0) as f64 / 1000.0);
            }
        }
        // Rejected records were counted as dead-lettered, not stored.
        let stored = good.len() - rejected.len();
        self.metrics.consumed.with_label_values(&["stored"]).inc_by(stored as u64);
        Ok(())
    }

    /// Stores records, splitting around data the store rejects; retries everything else.
    /// Returns the (partition, offset) of the records the store rejected (now dead-lettered).
    async fn store_all(
        &self,
        recs: &[(Rec, Vec<CallPart>)],
    ) -> Result<Vec<(i32, i64)>, ConsumeError> {
        let mut rejected = Vec::new();
        let mut pending = vec![recs];
        while let Some(slice) = pending.pop() {
            if slice.is_empty() {
                continue;
            }
            match self.store_retrying(slice).await {
                Ok(()) => {}
                Err(reason) if slice.len() == 1 => {
                    let rec = &slice[0].0;
                    self.dead_letter(rec, &reason).await?;
                    rejected.push((rec.partition, rec.offset));
                }
                Err(_) => {
                    let (a, b) = slice.split_at(slice.len() / 2);
                    pending.push(b);
                    pending.push(a);
                }
            }
        }
        Ok(rejected)
    }

    /// One insert of a slice; `Err(reason)` only when the store rejected the data itself.
    async fn store_retrying(&self, slice: &[(Rec, Vec<CallPart>)]) -> Result<(), String> {
        let parts: Vec<CallPart> = slice.iter().flat_map(|(_, p)| p.iter().cloned()).collect();
        let token = dedup_token(slice.iter().map(|(r, _)| r));
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.store.apply_call_parts_once(parts.clone(), &token).await {
                Ok(()) => return Ok(()),
                Err(StoreError::Rejected(reason)) => return Err(reason),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "store unavailable; retrying batch");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Sends a record to the dead-letter topic with the reason; retried until Kafka takes it.
    async fn dead_letter(&self, rec: &Rec, reason: &str) -> Result<(), ConsumeError> {
        tracing::error!(
            partition = rec.partition,
            offset = rec.offset,
            reason,
            "dead-lettering record"
        );
        let partition = rec.partition.to_string();
        let offset = rec.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header { key: "heddle-reason", value: Some(reason) })
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
        Ok(())
    }

    /// Commits the next offset of every partition in the batch, synchronously.
    fn commit(&self, recs: &[&Rec]) -> Result<(), ConsumeError> {
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

/// A token naming exactly the records of a batch (per partition: first and last offset), so the
/// same batch re-inserted after a crash or a retried request is recognised as a duplicate.
fn dedup_token<'a>(recs: impl Iterator<Item = &'a Rec>) -> String {
    let mut ranges: BTreeMap<i32, (i64, i64, usize)> = BTreeMap::new();
    for r in recs {
        let e = ranges.entry(r.partition).or_insert((r.offset, r.offset, 0));
        e.0 = e.0.min(r.offset);
        e.1 = e.1.max(r.offset);
        e.2 += 1;
    }
    ranges
        .iter()
        .map(|(p, (lo, hi, n))| format!("p{p}:{lo}-{hi}x{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(partition: i32, offset: i64) -> Rec {
        Rec { partition, offset, timestamp_ms: None, payload: vec![] }
    }

    #[test]
    fn tokens_name_the_offsets_of_a_batch() {
        let batch = [rec(1, 7), rec(0, 3), rec(1, 5), rec(0, 4)];
        assert_eq!(dedup_token(batch.iter()), "p0:3-4x2,p1:5-7x2");
        assert_ne!(dedup_token(batch[..2].iter()), dedup_token(batch.iter()));
    }
}
