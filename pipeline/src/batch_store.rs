//! How the consumer stores what it consumed: offloaded parts are read back, every store operation
//! runs under one retry policy, and a batch that cannot be stored is bisected down to the records
//! at fault (docs/distributed.md, "Retry policy").
//!
//! The policy ([`BatchStore::attempt`]) tells two situations apart that look alike from inside
//! one failing insert:
//! - **the store is down for everyone** (ClickHouse restarting, network gone, disk full): every
//!   insert would fail, so bisecting would end with every record in the dead-letter topic. The
//!   batch is held and retried instead, with capped backoff, for as long as the outage lasts;
//! - **this batch fails on its own** while the store takes other writes: its content is at fault,
//!   so it is bisected and the records that still fail alone are dead-lettered.
//!
//! A write probe ([`heddle_store::Health::probe_write`]) decides which one it is, once an
//! operation has failed `max_attempts` times in a row. A rejection of the data itself
//! ([`StoreError::Rejected`]) needs no probe: it is never retried.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProjectId;
use heddle_proto::calls::CallPart;
use heddle_proto::otlp::logs::OtelLog;
use heddle_proto::otlp::op::OpWrites;
use heddle_proto::record::{RecordPart, resolve};
use heddle_store::StoreError;
use heddle_store::prelude::*;

use crate::metrics::Metrics;

/// What the consumer needs of the store: every [`Store`] has it. Tests wrap a real store in
/// one to inject faults.
#[async_trait]
pub trait ConsumerStore: Send + Sync {
    /// Stores placeholder ops ([`crate::sink::apply_ops`]); content-addressed, so idempotent.
    async fn apply_ops(&self, ops: &OpWrites) -> heddle_store::Result<()>;
    async fn apply_call_parts_once(
        &self,
        parts: Vec<CallPart>,
        token: &str,
    ) -> heddle_store::Result<()>;
    async fn read_blob(
        &self,
        project: &ProjectId,
        digest: &str,
        size: u64,
    ) -> heddle_store::Result<Bytes>;
    async fn probe_write(&self) -> heddle_store::Result<()>;
    /// Stores OTLP log records, deduplicated by `token` like call parts.
    async fn put_otel_logs_once(&self, logs: Vec<OtelLog>, token: &str)
    -> heddle_store::Result<()>;
}

#[async_trait]
impl ConsumerStore for Arc<dyn Store> {
    async fn apply_ops(&self, ops: &OpWrites) -> heddle_store::Result<()> {
        crate::sink::apply_ops(&**self, ops).await
    }
    async fn apply_call_parts_once(
        &self,
        parts: Vec<CallPart>,
        token: &str,
    ) -> heddle_store::Result<()> {
        CallStore::apply_call_parts_once(&**self, parts, token).await
    }
    async fn read_blob(
        &self,
        project: &ProjectId,
        digest: &str,
        size: u64,
    ) -> heddle_store::Result<Bytes> {
        BlobStore::read_blob(&**self, project, digest, size).await
    }
    async fn probe_write(&self) -> heddle_store::Result<()> {
        Health::probe_write(&**self).await
    }
    async fn put_otel_logs_once(
        &self,
        logs: Vec<OtelLog>,
        token: &str,
    ) -> heddle_store::Result<()> {
        OtelLogStore::put_otel_logs_once(&**self, logs, token).await
    }
}

/// Retries of one store operation: up to `max_attempts` tries with exponential backoff from
/// `initial_backoff` (doubling, at most `max_backoff`), then the write probe decides.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// Why a record was dead-lettered: the `reason` label of `heddle_dead_lettered_records_total`
/// and the `heddle-reason-class` header of the dead-lettered record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonClass {
    /// Not a call record at all.
    Undecodable,
    /// The store refused the data itself.
    Rejected,
    /// An offloaded part whose blob is missing or is not the part the record names.
    Unresolvable,
    /// The store kept failing on this record alone while it took other writes.
    StoreError,
}

impl ReasonClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonClass::Undecodable => "undecodable",
            ReasonClass::Rejected => "rejected",
            ReasonClass::Unresolvable => "unresolvable",
            ReasonClass::StoreError => "store_error",
        }
    }
}

/// Why a store operation gave up.
#[derive(Debug)]
pub enum Failure {
    /// The store refused the data ([`StoreError::Rejected`]); not retried.
    Rejected(String),
    /// It failed `max_attempts` times, and once more after the write probe succeeded: the
    /// store is healthy, the operation is not. The last error.
    Persistent(StoreError),
}

impl Failure {
    fn into_refusal(self) -> (ReasonClass, String) {
        match self {
            Failure::Rejected(reason) => (ReasonClass::Rejected, reason),
            Failure::Persistent(e) => (ReasonClass::StoreError, e.to_string()),
        }
    }
}

/// A consumed record ready to store: where it came from (for the deduplication token), its
/// placeholder ops, its call parts and its OTLP log records.
#[derive(Debug, Clone)]
pub struct Item {
    pub partition: i32,
    pub offset: i64,
    pub ops: OpWrites,
    pub parts: Vec<CallPart>,
    pub logs: Vec<OtelLog>,
}

/// An item the store would not take: its index among the items stored, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub index: usize,
    pub class: ReasonClass,
    pub reason: String,
}

pub struct BatchStore {
    store: Arc<dyn ConsumerStore>,
    metrics: Arc<Metrics>,
    policy: RetryPolicy,
}

impl BatchStore {
    pub fn new(
        store: Arc<dyn ConsumerStore>,
        metrics: Arc<Metrics>,
        policy: RetryPolicy,
    ) -> BatchStore {
        let policy = RetryPolicy { max_attempts: policy.max_attempts.max(1), ..policy };
        BatchStore { store, metrics, policy }
    }

    /// Runs a store operation under the retry policy (see the module documentation). Returns
    /// only once it succeeded, was rejected, or failed persistently while the store is healthy:
    /// during an outage it keeps retrying.
    pub async fn attempt<T, F, Fut>(&self, mut op: F) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = heddle_store::Result<T>>,
    {
        let mut backoff = self.policy.initial_backoff;
        let mut failures = 0u32;
        loop {
            let err = match op().await {
                Ok(v) => {
                    self.metrics.store_up.set(1);
                    return Ok(v);
                }
                Err(StoreError::Rejected(reason)) => {
                    return Err(Failure::Rejected(reason.to_string()));
                }
                Err(e) => e,
            };
            failures += 1;
            if failures >= self.policy.max_attempts {
                match self.store.probe_write().await {
                    Ok(()) => {
                        self.metrics.store_up.set(1);
                        // The store may have come back between the last try and the probe.
                        return match op().await {
                            Ok(v) => Ok(v),
                            Err(StoreError::Rejected(reason)) => {
                                Err(Failure::Rejected(reason.to_string()))
                            }
                            Err(e) => Err(Failure::Persistent(e)),
                        };
                    }
                    Err(probe) => {
                        self.metrics.store_up.set(0);
                        tracing::error!(
                            error = %err,
                            probe = %probe,
                            retry_in = ?backoff,
                            "store is down (its write probe fails): holding the batch, retrying"
                        );
                    }
                }
            } else {
                tracing::warn!(error = %err, retry_in = ?backoff, "store operation failed; retrying");
            }
            self.metrics.store_retries.inc();
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.policy.max_backoff);
        }
    }

    /// Stores one slice of items, each step under the retry policy.
    async fn store_slice(&self, slice: &[Item]) -> Result<(), Failure> {
        let mut ops = OpWrites::default();
        for item in slice {
            ops.files.extend(item.ops.files.iter().cloned());
            ops.ops.extend(item.ops.ops.iter().cloned());
        }
        if !ops.is_empty() {
            self.attempt(|| self.store.apply_ops(&ops)).await?;
        }
        let token = dedup_token(slice.iter().map(|i| (i.partition, i.offset)));
        let logs: Vec<OtelLog> = slice.iter().flat_map(|i| i.logs.iter().cloned()).collect();
        if !logs.is_empty() {
            self.attempt(|| self.store.put_otel_logs_once(logs.clone(), &token)).await?;
        }
        let parts: Vec<CallPart> = slice.iter().flat_map(|i| i.parts.iter().cloned()).collect();
        if parts.is_empty() {
            return Ok(());
        }
        self.attempt(|| self.store.apply_call_parts_once(parts.clone(), &token)).await
    }

    /// The call parts of a decoded record, offloaded ones read back from their blobs.
    pub async fn resolve(
        &self,
        parts: Vec<RecordPart>,
    ) -> Result<Vec<CallPart>, (ReasonClass, String)> {
        let mut out = Vec::with_capacity(parts.len());
        for part in parts {
            let o = match part {
                RecordPart::Inline(p) => {
                    out.push(p);
                    continue;
                }
                RecordPart::Offloaded(o) => o,
            };
            // A missing blob is retried like any failure: a replica may not have it yet.
            let blob = self
                .attempt(|| self.store.read_blob(&o.project, &o.digest, o.size))
                .await
                .map_err(|f| match f {
                Failure::Persistent(StoreError::NotFound(m)) => (ReasonClass::Unresolvable, m),
                f => f.into_refusal(),
            })?;
            // Hashing and decoding up to the body limit: off the async runtime.
            let part = tokio::task::spawn_blocking(move || resolve(&o, &blob))
                .await
                .map_err(|e| (ReasonClass::StoreError, e.to_string()))?
                .map_err(|e| (ReasonClass::Unresolvable, e.to_string()))?;
            out.push(part);
        }
        Ok(out)
    }

    /// Stores the items: the slice's placeholder ops first (so a call's op is never stored after
    /// the call), then its call parts with one insert deduplicated by a token naming the slice's
    /// records. A slice the store rejects, or that fails persistently while the store is
    /// healthy, is split in halves until the items at fault are isolated; those are returned
    /// (every other item is stored).
    pub async fn store_all(&self, items: &[Item]) -> Vec<Refused> {
        let mut refused = Vec::new();
        let mut pending: Vec<Range<usize>> = Vec::new();
        pending.push(0..items.len());
        while let Some(range) = pending.pop() {
            if range.is_empty() {
                continue;
            }
            let slice = &items[range.clone()];
            let Err(failure) = self.store_slice(slice).await else { continue };
            if range.len() == 1 {
                let (class, reason) = failure.into_refusal();
                refused.push(Refused { index: range.start, class, reason });
                continue;
            }
            tracing::warn!(
                records = range.len(),
                ?failure,
                "the store refuses this slice while it takes other writes; bisecting"
            );
            let mid = range.start + range.len() / 2;
            pending.push(mid..range.end);
            pending.push(range.start..mid);
        }
        refused.sort_by_key(|r| r.index);
        refused
    }
}

/// A token naming exactly the records of a slice (per partition: first and last offset, and
/// how many), so the same slice re-inserted after a crash or a retry is recognised as a
/// duplicate.
pub fn dedup_token(recs: impl Iterator<Item = (i32, i64)>) -> String {
    let mut ranges: std::collections::BTreeMap<i32, (i64, i64, usize)> = Default::default();
    for (partition, offset) in recs {
        let e = ranges.entry(partition).or_insert((offset, offset, 0));
        e.0 = e.0.min(offset);
        e.1 = e.1.max(offset);
        e.2 += 1;
    }
    ranges
        .iter()
        .map(|(p, (lo, hi, n))| format!("p{p}:{lo}-{hi}x{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Cuts records of the given sizes into consecutive groups of at most `max_bytes` (a record
/// larger than that forms a group alone), so what the consumer holds resolved stays bounded.
pub fn cut_by_bytes(sizes: &[usize], max_bytes: usize) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && bytes + size > max_bytes {
            groups.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        groups.push(start..sizes.len());
    }
    groups
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use heddle_proto::calls::CallsQueryReq;
    use heddle_proto::record::{CallPartRecord, decode_record, encode_records, offload};
    use heddle_store::sqlite::{SqliteOptions, SqliteStore};

    use super::*;

    /// A real SQLite store with injected faults: `down` fails every write, read and probe (an
    /// outage); inserts containing a `poison` call fail with a backend error (a fault tied to
    /// the content) or, for `rejected` calls, a rejection.
    struct Faulty {
        inner: Arc<dyn Store>,
        down: AtomicBool,
        poison: Mutex<HashSet<String>>,
        rejected: Mutex<HashSet<String>>,
        inserts: AtomicUsize,
    }

    #[async_trait]
    impl ConsumerStore for Faulty {
        async fn apply_ops(&self, ops: &OpWrites) -> heddle_store::Result<()> {
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Backend("connection refused".into()));
            }
            self.inner.apply_ops(ops).await
        }
        async fn apply_call_parts_once(
            &self,
            parts: Vec<CallPart>,
            token: &str,
        ) -> heddle_store::Result<()> {
            self.inserts.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Backend("connection refused".into()));
            }
            let hit = |set: &Mutex<HashSet<String>>| {
                let set = set.lock().unwrap();
                parts.iter().any(|p| set.contains(&p.id))
            };
            if hit(&self.rejected) {
                return Err(StoreError::Rejected("cannot parse".into()));
            }
            if hit(&self.poison) {
                return Err(StoreError::Backend("memory limit exceeded".into()));
            }
            self.inner.apply_call_parts_once(parts, token).await
        }
        async fn read_blob(
            &self,
            project: &ProjectId,
            digest: &str,
            size: u64,
        ) -> heddle_store::Result<Bytes> {
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Backend("connection refused".into()));
            }
            self.inner.read_blob(project, digest, size).await
        }
        async fn probe_write(&self) -> heddle_store::Result<()> {
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Backend("connection refused".into()));
            }
            self.inner.probe_write().await
        }
        async fn put_otel_logs_once(
            &self,
            logs: Vec<OtelLog>,
            token: &str,
        ) -> heddle_store::Result<()> {
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Backend("connection refused".into()));
            }
            self.inner.put_otel_logs_once(logs, token).await
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        faulty: Arc<Faulty>,
        metrics: Arc<Metrics>,
        batches: BatchStore,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
        let faulty = Arc::new(Faulty {
            inner,
            down: AtomicBool::new(false),
            poison: Mutex::default(),
            rejected: Mutex::default(),
            inserts: AtomicUsize::new(0),
        });
        let metrics = Arc::new(Metrics::new());
        let policy = RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        };
        let batches = BatchStore::new(faulty.clone(), metrics.clone(), policy);
        Fixture { _dir: dir, faulty, metrics, batches }
    }

    fn part(id: &str, inputs: &str) -> CallPart {
        crate::test_parts::started(id, &format!("t-{id}"), inputs)
    }

    /// One item per call `c0..cN`, offsets 0..N on partition 0.
    fn items(n: usize) -> Vec<Item> {
        (0..n)
            .map(|i| Item {
                partition: 0,
                offset: i as i64,
                ops: OpWrites::default(),
                parts: vec![part(&format!("c{i}"), "{}")],
                logs: Vec::new(),
            })
            .collect()
    }

    async fn stored_ids(f: &Fixture) -> HashSet<String> {
        let q: CallsQueryReq =
            serde_json::from_value(serde_json::json!({"project_id": "e/p"})).unwrap();
        let stream = f.faulty.inner.query_calls(q.validate().unwrap()).await.unwrap();
        futures::StreamExt::collect::<Vec<_>>(stream)
            .await
            .into_iter()
            .map(|c| c.unwrap().id)
            .collect()
    }

    fn names(ids: &[usize]) -> HashSet<String> {
        ids.iter().map(|i| format!("c{i}")).collect()
    }

    /// Before the bounded policy, a store that kept failing on one record retried it forever.
    async fn within<T>(fut: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), fut).await.expect("the consumer is stuck")
    }

    #[tokio::test]
    async fn records_failing_while_the_store_is_healthy_are_isolated_and_the_rest_stored() {
        let f = fixture();
        f.faulty.poison.lock().unwrap().extend(names(&[3, 7]));
        f.faulty.rejected.lock().unwrap().extend(names(&[11]));
        let refused = within(f.batches.store_all(&items(16))).await;
        let got: Vec<(usize, ReasonClass)> = refused.iter().map(|r| (r.index, r.class)).collect();
        assert_eq!(
            got,
            [
                (3, ReasonClass::StoreError),
                (7, ReasonClass::StoreError),
                (11, ReasonClass::Rejected)
            ]
        );
        assert!(refused[0].reason.contains("memory limit exceeded"), "{refused:?}");
        let mut want = names(&(0..16).collect::<Vec<_>>());
        want.retain(|id| !names(&[3, 7, 11]).contains(id));
        assert_eq!(stored_ids(&f).await, want);
        assert!(f.metrics.store_retries.get() > 0);
        assert_eq!(f.metrics.store_up.get(), 1, "the store was healthy throughout");
    }

    #[tokio::test]
    async fn an_outage_is_waited_out_and_nothing_is_refused() {
        let f = fixture();
        f.faulty.down.store(true, Ordering::SeqCst);
        let all = items(8);
        let storing = f.batches.store_all(&all);
        let outage = async {
            // Let the batch fail far more often than max_attempts, then end the outage.
            while f.faulty.inserts.load(Ordering::SeqCst) < 20 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert_eq!(f.metrics.store_up.get(), 0, "the outage shows in the metrics");
            f.faulty.down.store(false, Ordering::SeqCst);
        };
        let (refused, ()) = within(async { tokio::join!(storing, outage) }).await;
        assert_eq!(refused, [], "an outage must not dead-letter anything");
        assert_eq!(stored_ids(&f).await, names(&(0..8).collect::<Vec<_>>()));
        assert_eq!(f.metrics.store_up.get(), 1);
    }

    #[tokio::test]
    async fn offloaded_parts_are_read_back_and_missing_blobs_are_unresolvable() {
        let f = fixture();
        let big = part("big", &format!("{{\"x\":\"{}\"}}", "y".repeat(3 << 20)));
        let off = offload(CallPartRecord::from(&big)).unwrap();
        f.faulty.inner.put_blob(&off.project, &off.digest, off.blob.clone().into()).await.unwrap();
        let record = encode_records([CallPartRecord::from(&part("small", "{}")), off.reference]);
        let parts = within(f.batches.resolve(decode_record(&record).unwrap().parts)).await.unwrap();
        assert_eq!(parts, [part("small", "{}"), big]);

        // A reference to a blob that is not there (a digest of other bytes).
        let other = offload(CallPartRecord::from(&part("other", "{}"))).unwrap();
        let missing = decode_record(&encode_records([other.reference])).unwrap().parts;
        let (class, reason) = within(f.batches.resolve(missing)).await.unwrap_err();
        assert_eq!(class, ReasonClass::Unresolvable, "{reason}");
        assert!(reason.contains("not found"), "{reason}");
    }

    #[tokio::test]
    async fn blob_reads_wait_out_an_outage_too() {
        let f = fixture();
        let big = part("big", &format!("{{\"x\":\"{}\"}}", "z".repeat(1000)));
        let off = offload(CallPartRecord::from(&big)).unwrap();
        f.faulty.inner.put_blob(&off.project, &off.digest, off.blob.clone().into()).await.unwrap();
        f.faulty.down.store(true, Ordering::SeqCst);
        let resolving =
            f.batches.resolve(decode_record(&encode_records([off.reference])).unwrap().parts);
        let outage = async {
            while f.metrics.store_retries.get() < 10 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            f.faulty.down.store(false, Ordering::SeqCst);
        };
        let (resolved, ()) = within(async { tokio::join!(resolving, outage) }).await;
        assert_eq!(resolved.unwrap(), [big]);
    }

    #[tokio::test]
    async fn placeholder_ops_are_stored_with_their_items_even_after_an_outage() {
        let f = fixture();
        let project = ProjectId::parse("e/p").unwrap();
        let spans = [(project.clone(), "my span".to_owned())].into();
        let mut all = items(3);
        all[1].ops = heddle_proto::otlp::op::placeholder_writes(&spans, Some("u"));
        f.faulty.down.store(true, Ordering::SeqCst);
        let storing = f.batches.store_all(&all);
        let outage = async {
            while f.metrics.store_retries.get() < 5 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            f.faulty.down.store(false, Ordering::SeqCst);
        };
        let (refused, ()) = within(async { tokio::join!(storing, outage) }).await;
        assert_eq!(refused, []);
        assert_eq!(stored_ids(&f).await, names(&[0, 1, 2]));
        let op = f
            .faulty
            .inner
            .read_object(&project, "my_span", &heddle_proto::objects::VersionSel::Latest, false)
            .await
            .unwrap();
        assert_eq!(op.digest, heddle_proto::otlp::op::placeholder_digest());
        let file = f.faulty.inner.read_file(&project, &all[1].ops.files[0].digest).await.unwrap();
        assert_eq!(&file[..], heddle_proto::otlp::op::PLACEHOLDER_SOURCE.as_bytes());
    }

    #[test]
    fn tokens_name_the_offsets_of_a_batch() {
        let batch = [(1, 7), (0, 3), (1, 5), (0, 4)];
        assert_eq!(dedup_token(batch.into_iter()), "p0:3-4x2,p1:5-7x2");
        assert_ne!(dedup_token(batch[..2].iter().copied()), dedup_token(batch.into_iter()));
    }

    #[test]
    fn groups_stay_under_the_byte_limit() {
        // (sizes, limit, groups as (start, end))
        type Case = (&'static [usize], usize, &'static [(usize, usize)]);
        let cases: &[Case] = &[
            (&[], 10, &[]),
            (&[3, 3, 3], 10, &[(0, 3)]),
            (&[3, 3, 3, 3], 10, &[(0, 3), (3, 4)]),
            (&[50, 1, 1], 10, &[(0, 1), (1, 3)]),
            (&[1, 50, 1], 10, &[(0, 1), (1, 2), (2, 3)]),
            (&[10, 10], 10, &[(0, 1), (1, 2)]),
        ];
        for (sizes, max, want) in cases {
            let got: Vec<(usize, usize)> =
                cut_by_bytes(sizes, *max).into_iter().map(|r| (r.start, r.end)).collect();
            assert_eq!(got, *want, "{sizes:?} / {max}");
        }
    }
}
