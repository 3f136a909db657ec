use std::sync::Arc;

use async_trait::async_trait;
use heddle_proto::calls::CallPart;
use heddle_store::Store;

use crate::{ApiError, Auth, DecodeBudget};

/// Where the ingest endpoints put call parts. It returns only once the parts are durable: in the
/// store (embedded mode) or acknowledged by Kafka (distributed mode).
#[async_trait]
pub trait CallSink: Send + Sync + 'static {
    async fn write(&self, parts: Vec<CallPart>) -> Result<(), ApiError>;
}

/// The embedded write path: straight into the store.
pub struct StoreSink(pub Arc<dyn Store>);

#[async_trait]
impl CallSink for StoreSink {
    async fn write(&self, parts: Vec<CallPart>) -> Result<(), ApiError> {
        Ok(self.0.apply_call_parts(parts).await?)
    }
}

/// What every handler can reach.
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub calls: Arc<dyn CallSink>,
    pub auth: Auth,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Room for decoding request bodies at once (`crate::budget`).
    pub decode_budget: DecodeBudget,
}

/// The default decode budget: with the default 32 MiB body limit, four of the largest bodies
/// decode at once, and any number of ordinary ones.
pub const DEFAULT_DECODE_BUDGET_BYTES: usize = 512 << 20;

impl AppState {
    /// `calls: None` writes calls straight into `store`.
    pub fn new(
        store: Arc<dyn Store>,
        calls: Option<Arc<dyn CallSink>>,
        admin_key: Option<&str>,
        max_body_bytes: usize,
    ) -> Arc<AppState> {
        Arc::new(AppState {
            auth: Auth::new(store.clone(), admin_key),
            calls: calls.unwrap_or_else(|| Arc::new(StoreSink(store.clone()))),
            store,
            max_body_bytes,
            decode_budget: DecodeBudget::new(DEFAULT_DECODE_BUDGET_BYTES),
        })
    }
}
