use std::sync::Arc;

use heddle_pipeline::{Sink, StoreSink};
use heddle_store::Store;

use crate::settings::{IngestMetrics, SETTINGS_CACHE_TTL, SettingsCache};
use crate::{Auth, MemoryBudget};

/// What every handler can reach.
pub struct AppState {
    pub store: Arc<dyn Store>,
    /// Where the ingest endpoints write calls and placeholder ops (`heddle_pipeline`).
    pub sink: Arc<dyn Sink>,
    pub auth: Auth,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Memory for decoding bodies and building answers, shared by all requests
    /// (`crate::budget`).
    pub memory_budget: MemoryBudget,
    /// Project settings (retention, redaction, sampling), cached (`crate::settings`).
    pub settings: SettingsCache,
    /// Ingest's metrics (sampling), at `/metrics`.
    pub ingest_metrics: IngestMetrics,
}

/// How much requests may cost: each body's size, and the memory all requests' decoding and
/// answer building may take at once
/// (`docs/limits.md`).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest request body accepted, as sent and after decompression (413 above).
    pub max_body_bytes: usize,
    /// See [`AppState::memory_budget`].
    pub memory_budget_bytes: usize,
}

impl BodyLimits {
    /// A body limit with the default memory budget.
    pub fn new(max_body_bytes: usize) -> BodyLimits {
        BodyLimits { max_body_bytes, memory_budget_bytes: DEFAULT_MEMORY_BUDGET_BYTES }
    }
}

/// The default memory budget: keeps a server under twice its sustainable load within ~300 MB
/// (docs/benchmarks.md, "Memory under overload"), while ordinary bodies still decode by the
/// dozen. A body costing more than the whole budget is admitted alone.
pub const DEFAULT_MEMORY_BUDGET_BYTES: usize = 128 << 20;

impl AppState {
    /// `sink: None` writes straight into `store`.
    pub fn new(
        store: Arc<dyn Store>,
        sink: Option<Arc<dyn Sink>>,
        admin_key: Option<&str>,
        limits: BodyLimits,
    ) -> Arc<AppState> {
        Arc::new(AppState {
            auth: Auth::new(store.clone(), admin_key),
            settings: SettingsCache::new(store.clone(), SETTINGS_CACHE_TTL),
            ingest_metrics: IngestMetrics::new(),
            sink: sink.unwrap_or_else(|| Arc::new(StoreSink(store.clone()))),
            store,
            max_body_bytes: limits.max_body_bytes,
            memory_budget: MemoryBudget::new(limits.memory_budget_bytes),
        })
    }
}
