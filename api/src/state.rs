use std::sync::Arc;

use heddle_store::Store;

use crate::Auth;

/// What every handler of the embedded server can reach.
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub auth: Auth,
}

impl AppState {
    pub fn new(store: Arc<dyn Store>, admin_key: Option<&str>) -> Arc<AppState> {
        Arc::new(AppState { auth: Auth::new(store.clone(), admin_key), store })
    }
}
