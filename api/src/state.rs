use std::sync::Arc;

use heddle_pipeline::{Sink, StoreSink};
use heddle_store::Store;

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

/// The default memory budget: with the default 32 MiB body limit, the largest bodies decode a
/// few at a time, and ordinary ones by the hundred.
pub const DEFAULT_MEMORY_BUDGET_BYTES: usize = 512 << 20;

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
            sink: sink.unwrap_or_else(|| Arc::new(StoreSink(store.clone()))),
            store,
            max_body_bytes: limits.max_body_bytes,
            memory_budget: MemoryBudget::new(limits.memory_budget_bytes),
        })
    }
}
