//! `/threads/stream_query` (docs/api/threads.md): threads aggregated from the project's turn calls,
//! as JSONL. Semantics in `heddle_proto::threads`; each backend aggregates in its own way.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
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
    let mut buf = Vec::with_capacity(threads.len() * 256);
    for t in &threads {
        serde_json::to_writer(&mut buf, t).map_err(|e| ApiError::Internal(e.to_string()))?;
        buf.push(b'\n');
    }
    let content_type = match headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        Some(a) if a.contains("ndjson") => "application/x-ndjson",
        _ => "application/jsonl",
    };
    let mut resp = buf.into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(resp)
}
