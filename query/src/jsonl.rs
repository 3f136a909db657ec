//! JSON Lines answers (docs/api/README.md#transport-and-encoding): one value per line, typed
//! `application/jsonl`, or `application/x-ndjson` when the client asks for that name.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use heddle_api::ApiError;
use serde::Serialize;

/// The content type the client asked for in `Accept`.
pub fn content_type(headers: &HeaderMap) -> &'static str {
    match headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        Some(a) if a.contains("ndjson") => "application/x-ndjson",
        _ => "application/jsonl",
    }
}

/// An answer of `items` read whole (bounded by the query that read them), one per line.
pub fn response<T: Serialize>(headers: &HeaderMap, items: &[T]) -> Result<Response, ApiError> {
    let mut buf = Vec::with_capacity(items.len() * 256);
    for item in items {
        serde_json::to_writer(&mut buf, item).map_err(|e| ApiError::Internal(e.to_string()))?;
        buf.push(b'\n');
    }
    let mut resp = buf.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(headers)));
    Ok(resp)
}
