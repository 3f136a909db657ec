//! Request bodies. heddle reads bodies itself rather than through axum's limit layer so that an
//! oversized body is drained (within bounds) before the 413 goes out. A chunked upload answered
//! mid-stream races the client still sending it, and the client may see a reset instead of the
//! 413 — yet the SDK splits a batch only when it sees the 413
//! (docs/api/README.md#errors-and-status-codes).
//!
//! The JSON extractor's rejections are the API's own errors: 413 above the limit, 400 with the
//! parser's message for malformed JSON or wrong types. Unknown keys are ignored and `null` reads
//! as absent (the SDK sends both, docs/api/README.md#transport-and-encoding).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_ENCODING;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::budget::{AdmissionSlot, Admitted, DECODE_FACTOR, UNCHARGED_BYTES, VALUE_COST};
use crate::{ApiError, AppState};
use heddle_proto::limits::{MAX_JSON_DEPTH, MAX_JSON_VALUES, json_shape};

/// How much of an oversized body is read and discarded so the client gets its 413 cleanly.
const DRAIN_BYTES: usize = 64 * 1024 * 1024;
/// How long draining may take before the connection is simply closed.
const DRAIN_TIME: Duration = Duration::from_secs(10);

fn too_large(limit: usize) -> ApiError {
    ApiError::TooLarge(format!("request body is larger than the server's limit of {limit} bytes"))
}

/// Reads a whole body of at most `limit` bytes.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut chunks = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
        if buf.len() + chunk.len() > limit {
            let drain = async {
                let mut drained = 0usize;
                while let Some(Ok(chunk)) = chunks.next().await {
                    drained += chunk.len();
                    if drained > DRAIN_BYTES {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
            return Err(too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// How a body is compressed (`Content-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
}

impl Encoding {
    pub fn from_headers(headers: &HeaderMap) -> Result<Encoding, ApiError> {
        match headers.get(CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("?").trim()) {
            None | Some("" | "identity") => Ok(Encoding::Identity),
            Some(e) if e.eq_ignore_ascii_case("gzip") => Ok(Encoding::Gzip),
            Some(e) => Err(ApiError::bad_request(format!(
                "unsupported Content-Encoding {e:?}: send gzip or an uncompressed body"
            ))),
        }
    }

    /// The decoded body, at most `limit` bytes after decompression: a gzip bomb is cut off at
    /// the limit (413) instead of being inflated into memory. CPU-bound for large bodies, so
    /// hot paths call it off the async reactor.
    pub fn decode(self, body: Bytes, limit: usize) -> Result<Bytes, ApiError> {
        match self {
            Encoding::Identity => Ok(body),
            Encoding::Gzip => {
                let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
                flate2::read::MultiGzDecoder::new(&body[..])
                    .take(limit as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| ApiError::bad_request(format!("invalid gzip body: {e}")))?;
                if out.len() > limit {
                    return Err(ApiError::TooLarge(format!(
                        "decompressed request body is larger than the server's limit of {limit} \
                         bytes"
                    )));
                }
                Ok(out.into())
            }
        }
    }
}

/// A request body within the size limit, with its encoding, not yet decompressed.
pub struct EncodedBody {
    pub bytes: Bytes,
    pub encoding: Encoding,
}

impl FromRequest<Arc<AppState>> for EncodedBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let encoding = Encoding::from_headers(req.headers())?;
        let bytes = read_body(req.into_body(), state.max_body_bytes).await?;
        Ok(EncodedBody { bytes, encoding })
    }
}

/// A JSON request body (gzip accepted).
pub struct Json<T>(pub T);

impl<T: DeserializeOwned + Send + 'static> FromRequest<Arc<AppState>> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let slot = req.extensions().get::<AdmissionSlot>().cloned();
        let body = EncodedBody::from_request(req, state).await?;
        // Small bodies are parsed where they arrive, uncharged; larger ones on the blocking
        // pool, so a 30 MiB parse never holds up an async worker (and `/health` with it).
        if body.bytes.len() <= UNCHARGED_BYTES && body.encoding == Encoding::Identity {
            return parse(&body.bytes).map(Json);
        }
        let (bytes, admitted) = admit_and_decode(state, body).await?;
        // Charged by its shape before it is parsed: what a body parses into depends on how
        // many objects and arrays it holds more than on its bytes.
        let (bytes, shape) = blocking(move || {
            let shape = json_shape(&bytes, MAX_JSON_DEPTH);
            if shape.values > MAX_JSON_VALUES {
                return Err(ApiError::bad_request(format!(
                    "the body holds more than {MAX_JSON_VALUES} JSON values"
                )));
            }
            Ok((bytes, shape))
        })
        .await?;
        let cost = bytes.len() * 2 + shape.values * VALUE_COST;
        let admitted = state.memory_budget.admit(cost, admitted).await?;
        let parsed = blocking(move || parse(&bytes)).await.map(Json);
        // Held until the handler answers (the parsed body lives that long), where the server
        // provides a slot; else until here.
        if let Some(slot) = slot {
            slot.keep(admitted);
        }
        parsed
    }
}

/// Decompresses a body within the memory budget (`crate::budget`), on the blocking pool; the
/// admission covers parsing what comes out, and is held until the caller drops it.
pub async fn admit_and_decode(
    state: &AppState,
    body: EncodedBody,
) -> Result<(Bytes, Option<Admitted>), ApiError> {
    let limit = state.max_body_bytes;
    let admitted = state.memory_budget.admit_body(body.bytes.len(), None).await?;
    if body.encoding == Encoding::Identity {
        return Ok((body.bytes, admitted));
    }
    let bytes = blocking(move || body.encoding.decode(body.bytes, limit)).await?;
    let admitted = match admitted {
        None if bytes.len() <= UNCHARGED_BYTES => None,
        held => Some(state.memory_budget.admit(bytes.len() * DECODE_FACTOR, held).await?),
    };
    Ok((bytes, admitted))
}

/// Runs CPU-bound request work (decoding, digesting) on the blocking pool.
pub async fn blocking<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(Into::into),
        Err(e) => Err(ApiError::Internal(format!("request work failed: {e}"))),
    }
}

/// A raw request body within the size limit (for multipart uploads).
pub struct RawBody(pub Bytes);

impl FromRequest<Arc<AppState>> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        read_body(req.into_body(), state.max_body_bytes).await.map(RawBody)
    }
}

pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))
}
