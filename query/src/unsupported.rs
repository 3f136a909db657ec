//! Routes of the Weave API that run a model on the server (docs/api/unsupported.md): heddle
//! stores and reads traces and holds no model-provider credentials, so each answers 501 with a
//! `{"reason"}` — after authentication, like every other route, so an unauthenticated caller
//! learns nothing about which routes exist.

use std::sync::Arc;

use axum::Router;
use axum::extract::OriginalUri;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Principal};

/// The routes, as the SDKs call them (all POST).
pub const PATHS: [&str; 7] = [
    "/completions/create",
    "/completions/create_stream",
    "/image/create",
    "/evaluations/evaluate_model",
    "/evaluations/rescore",
    "/evaluations/status",
    "/calls/score",
];

pub fn routes() -> Router<Arc<AppState>> {
    PATHS.iter().fold(Router::new(), |r, path| r.route(path, post(not_implemented)))
}

/// The body is never read: nothing here needs it, and a 501 should cost nothing.
async fn not_implemented(_who: Principal, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::NotImplemented(format!(
        "{} runs models on the server, which heddle does not do: call the model from your own \
         code (traced with the SDK) instead",
        uri.path()
    ))
}
