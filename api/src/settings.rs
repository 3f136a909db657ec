//! Project settings as the write paths see them (docs/api/project-settings.md): a per-process
//! cache of each project's settings, so that ingest reads the store once per project and
//! [`SETTINGS_CACHE_TTL`], not once per request; and what ingest does with them — sampling and
//! redaction of call parts and log records — before anything is stored or produced to Kafka.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use heddle_domain::{redaction, sampling};
use heddle_proto::ProjectId;
use heddle_proto::calls::CallPart;
use heddle_proto::otlp::logs::OtelLog;
use heddle_proto::project_settings::{ProjectSettings, SensitiveDataPolicy};
use heddle_store::{Store, StoreError};
use prometheus::{Encoder, IntCounterVec, Opts, Registry, TextEncoder};

use crate::ApiError;

/// How long a project's settings read from the store are used without reading them again. An
/// update made through this process applies to it at once; other processes (another ingest
/// replica) pick it up within this time.
pub const SETTINGS_CACHE_TTL: Duration = Duration::from_secs(5);

/// When the store cannot answer, settings read within this long are still used, so ingest
/// keeps taking writes (redacted and sampled as before) through a short store outage.
pub const SETTINGS_STALE_IF_ERROR: Duration = Duration::from_secs(300);

/// Most projects one process caches settings of; when full, the cache starts over.
pub const SETTINGS_CACHE_MAX: usize = 10_000;

#[derive(Clone, Copy)]
struct Cached {
    settings: ProjectSettings,
    checked: Instant,
    fresh_until: Instant,
}

/// The store's recent answers about project settings.
pub struct SettingsCache {
    store: Arc<dyn Store>,
    ttl: Duration,
    entries: RwLock<HashMap<ProjectId, Cached>>,
}

impl SettingsCache {
    pub fn new(store: Arc<dyn Store>, ttl: Duration) -> SettingsCache {
        SettingsCache { store, ttl, entries: RwLock::default() }
    }

    /// The settings of `project`, from the cache while fresh.
    pub async fn get(&self, project: &ProjectId) -> Result<ProjectSettings, StoreError> {
        let now = Instant::now();
        let cached = self.entries.read().expect("not poisoned").get(project).copied();
        if let Some(c) = cached
            && now < c.fresh_until
        {
            return Ok(c.settings);
        }
        match self.store.project_settings(project).await {
            Ok(settings) => {
                self.remember(project, settings, now);
                Ok(settings)
            }
            Err(e) => match cached {
                Some(c) if now.saturating_duration_since(c.checked) < SETTINGS_STALE_IF_ERROR => {
                    tracing::warn!(error = %e, %project, "reading project settings failed; using the cached ones");
                    let retry = Cached { fresh_until: now + self.ttl, ..c };
                    self.entries.write().expect("not poisoned").insert(project.clone(), retry);
                    Ok(c.settings)
                }
                _ => Err(e),
            },
        }
    }

    /// Drops the cached settings of `project` (after this process updated them).
    pub fn forget(&self, project: &ProjectId) {
        self.entries.write().expect("not poisoned").remove(project);
    }

    fn remember(&self, project: &ProjectId, settings: ProjectSettings, now: Instant) {
        let mut entries = self.entries.write().expect("not poisoned");
        if entries.len() >= SETTINGS_CACHE_MAX && !entries.contains_key(project) {
            entries.clear();
        }
        let entry = Cached { settings, checked: now, fresh_until: now + self.ttl };
        entries.insert(project.clone(), entry);
    }
}

/// Ingest's own metrics, served at `/metrics` by the roles that ingest.
pub struct IngestMetrics {
    registry: Registry,
    /// Calls ingest sampling dropped (`mode="dropped"`), or would have dropped in a dry run
    /// (`mode="dry_run"`).
    pub sampled_out: IntCounterVec,
}

impl IngestMetrics {
    pub fn new() -> IngestMetrics {
        let registry = Registry::new_custom(Some("heddle".into()), None).expect("valid prefix");
        let sampled_out = IntCounterVec::new(
            Opts::new(
                "ingest_sampled_out_calls_total",
                "Calls not stored because ingest sampling dropped their trace (dry_run: would have)",
            ),
            &["mode"],
        )
        .expect("valid counter");
        registry.register(Box::new(sampled_out.clone())).expect("unique metric names");
        IngestMetrics { registry, sampled_out }
    }

    /// The Prometheus text exposition of these metrics.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("encoding to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for IngestMetrics {
    fn default() -> Self {
        IngestMetrics::new()
    }
}

/// What ingest's settings act on: call parts and OTLP log records.
pub trait Ingested: Send + 'static {
    fn project(&self) -> &ProjectId;
    /// The trace sampling decides by; an item without one is kept.
    fn trace_id(&self) -> Option<&str>;
    /// Whether dropping it counts as a sampled-out call (a part that starts a call).
    fn starts_call(&self) -> bool;
    fn redact(&mut self);
}

impl Ingested for CallPart {
    fn project(&self) -> &ProjectId {
        &self.project
    }
    fn trace_id(&self) -> Option<&str> {
        self.trace_id.as_deref()
    }
    fn starts_call(&self) -> bool {
        self.start.is_some()
    }
    fn redact(&mut self) {
        redaction::redact_call_part(self)
    }
}

impl Ingested for OtelLog {
    fn project(&self) -> &ProjectId {
        &self.project
    }
    fn trace_id(&self) -> Option<&str> {
        Some(self.trace_id.as_str()).filter(|t| !t.is_empty())
    }
    fn starts_call(&self) -> bool {
        false
    }
    fn redact(&mut self) {
        redaction::redact_log(self)
    }
}

/// The settings of the projects a write names, fetched before it is prepared.
pub struct WriteSettings(BTreeMap<ProjectId, ProjectSettings>);

impl WriteSettings {
    /// The settings of `projects`, from the cache while fresh.
    pub async fn fetch<'p>(
        cache: &SettingsCache,
        projects: impl IntoIterator<Item = &'p ProjectId>,
    ) -> Result<WriteSettings, ApiError> {
        let mut settings = BTreeMap::new();
        for project in projects {
            if !settings.contains_key(project) {
                settings.insert(project.clone(), cache.get(project).await?);
            }
        }
        Ok(WriteSettings(settings))
    }

    /// Whether `project` is among these settings.
    pub fn covers(&self, project: &ProjectId) -> bool {
        self.0.contains_key(project)
    }

    /// Removes the items of traces sampling drops (counting dropped calls); also whether any
    /// item kept is to be redacted.
    fn sample<T: Ingested>(&self, metrics: &IngestMetrics, items: Vec<T>) -> (Vec<T>, bool) {
        let mut kept = Vec::with_capacity(items.len());
        let mut redact = false;
        for item in items {
            let s = &self.0[item.project()];
            if sampled_in(s, metrics, item.trace_id(), item.starts_call()) {
                redact |= s.sensitive_data == SensitiveDataPolicy::PiiV1;
                kept.push(item);
            }
        }
        (kept, redact)
    }

    fn redact<T: Ingested>(&self, items: &mut [T]) {
        for item in items {
            if self.0[item.project()].sensitive_data == SensitiveDataPolicy::PiiV1 {
                item.redact();
            }
        }
    }

    /// [`prepare`] of one item of `project` in `trace_id` with these settings, decided before it
    /// is made: for a caller already on a blocking thread. A call part `starts_call` when it
    /// holds a start (dropping it counts as a sampled-out call). `project` must be covered
    /// ([`WriteSettings::covers`]).
    pub fn admit(
        &self,
        metrics: &IngestMetrics,
        project: &ProjectId,
        trace_id: Option<&str>,
        starts_call: bool,
    ) -> Admission {
        let s = &self.0[project];
        if !sampled_in(s, metrics, trace_id, starts_call) {
            Admission::Dropped
        } else if s.sensitive_data == SensitiveDataPolicy::PiiV1 {
            Admission::Redacted
        } else {
            Admission::Kept
        }
    }
}

/// What becomes of an item its project's settings were applied to ([`WriteSettings::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Sampled out.
    Dropped,
    Kept,
    /// Kept, once redacted (`Ingested::redact`).
    Redacted,
}

/// Whether an item in `trace_id` is kept under its project's settings `s`; an item without a
/// trace is. A dropped call is counted.
fn sampled_in(
    s: &ProjectSettings,
    metrics: &IngestMetrics,
    trace_id: Option<&str>,
    starts_call: bool,
) -> bool {
    let rate = s.sampling.sample_rate;
    let sampled_in = match trace_id {
        Some(trace) if rate < 1.0 => sampling::keeps_trace(trace, rate),
        _ => true,
    };
    if !sampled_in && starts_call {
        let mode = if s.sampling.dry_run { "dry_run" } else { "dropped" };
        metrics.sampled_out.with_label_values(&[mode]).inc();
    }
    sampled_in || s.sampling.dry_run
}

/// Applies each project's ingest sampling and sensitive-data policy to what is about to be
/// written: items of traces sampling drops are removed (dropped calls counted), the rest
/// redacted under `pii-v1`. An item without a trace id (an end sent without one) cannot be
/// sampled and is kept.
pub async fn prepare<T: Ingested>(
    cache: &SettingsCache,
    metrics: &IngestMetrics,
    items: Vec<T>,
) -> Result<Vec<T>, ApiError> {
    let settings = WriteSettings::fetch(cache, items.iter().map(Ingested::project)).await?;
    let (mut kept, redact) = settings.sample(metrics, items);
    if !redact {
        return Ok(kept);
    }
    // CPU work on values of any size: off the async workers.
    crate::blocking(move || {
        settings.redact(&mut kept);
        Ok::<_, ApiError>(kept)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use heddle_proto::project_settings::{ProjectSetting, Sampling};
    use heddle_proto::time::Micros;
    use heddle_store::sqlite::{SqliteOptions, SqliteStore};
    use heddle_store::{Composite, ProjectSettingsStore, Purged};

    use super::*;

    /// The store's project settings, counting the reads.
    struct Counting(Arc<SqliteStore>, AtomicUsize);

    #[async_trait::async_trait]
    impl ProjectSettingsStore for Counting {
        async fn project_settings(&self, p: &ProjectId) -> heddle_store::Result<ProjectSettings> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.project_settings(p).await
        }
        async fn set_project_setting(
            &self,
            p: &ProjectId,
            s: ProjectSetting,
        ) -> heddle_store::Result<()> {
            self.0.set_project_setting(p, s).await
        }
        async fn retention_projects(&self) -> heddle_store::Result<Vec<(ProjectId, i64)>> {
            self.0.retention_projects().await
        }
        async fn purge_expired(
            &self,
            p: &ProjectId,
            cutoff: Micros,
            limit: u64,
        ) -> heddle_store::Result<Purged> {
            self.0.purge_expired(p, cutoff, limit).await
        }
    }

    #[tokio::test]
    async fn settings_are_read_once_per_ttl_and_forgotten_on_update() {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
        let counting = Arc::new(Counting(sqlite.clone(), AtomicUsize::new(0)));
        let mut composite = Composite::of(sqlite);
        composite.project_settings = counting.clone();
        let store: Arc<dyn Store> = Arc::new(composite);
        let p = ProjectId::parse("e/p").unwrap();
        let reads = || counting.1.load(Ordering::SeqCst);

        let cache = SettingsCache::new(store.clone(), Duration::from_secs(3600));
        for _ in 0..100 {
            assert_eq!(cache.get(&p).await.unwrap(), ProjectSettings::default());
        }
        assert_eq!(reads(), 1, "one store read for many requests");
        let half = Sampling { sample_rate: 0.5, dry_run: false };
        store.set_project_setting(&p, ProjectSetting::Sampling(half)).await.unwrap();
        assert_eq!(cache.get(&p).await.unwrap().sampling.sample_rate, 1.0, "cached within TTL");
        cache.forget(&p);
        assert_eq!(cache.get(&p).await.unwrap().sampling, half);
        assert_eq!(reads(), 2);

        // With no TTL every request reads the store.
        let uncached = SettingsCache::new(store, Duration::ZERO);
        uncached.get(&p).await.unwrap();
        uncached.get(&p).await.unwrap();
        assert_eq!(reads(), 4);
    }
}
