use std::sync::Arc;

use heddle_store::Store;

use crate::Auth;

/// What every handler of the embedded server can reach.
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub auth: Auth,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
}

impl AppState {
    pub fn new(
        store: Arc<dyn Store>,
        admin_key: Option<&str>,
        max_body_bytes: usize,
    ) -> Arc<AppState> {
        Arc::new(AppState { auth: Auth::new(store.clone(), admin_key), store, max_body_bytes })
    }
}
