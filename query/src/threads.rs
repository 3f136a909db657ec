//! `/threads/stream_query` (docs/api/threads.md): threads aggregated from the project's turn calls,
//! as JSONL. Semantics in `heddle_proto::threads`; each backend aggregates in its own way.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::threads::ThreadsQueryReq;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/threads/stream_query", post(stream_query))
}

async fn stream_query(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    who: Principal,
    Json(req): Json<ThreadsQueryReq>,
) -> Result<Response, ApiError> {
    who.check(&req.project_id)?;
    let threads = state.store.query_threads(req.validate()?).await?;
    crate::jsonl::response(&headers, &threads)
}
