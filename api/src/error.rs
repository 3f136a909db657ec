//! The single error type of the HTTP API, mapped to status codes in one place
//! (docs/api/README.md#errors-and-status-codes). Every error body is `{"reason": ...}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use heddle_pipeline::SinkError;
use heddle_proto::ProtoError;
use heddle_proto::time::Micros;
use heddle_store::StoreError;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// A batch item that is invalid on its own: 422 makes the SDK bisect the batch and drop
    /// only the bad item instead of the whole batch.
    #[error("{0}")]
    BadItem(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// 404 that tells the SDK the thing was deleted (it stops retrying).
    #[error("{reason}")]
    Deleted { reason: String, deleted_at: Micros },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
    /// A body in a format the endpoint does not speak (415).
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Overloaded(String),
    /// An endpoint heddle serves no implementation of (501), e.g. the model-provider routes.
    #[error("{0}")]
    NotImplemented(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad_request(msg: impl Into<String>) -> Self {
        ApiError::BadRequest(msg.into())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::BadItem(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) | ApiError::Deleted { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unsupported(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl ApiError {
    /// The same error for a gRPC client (OTLP/gRPC): retryable conditions map to the codes
    /// OTLP exporters retry (UNAVAILABLE, RESOURCE_EXHAUSTED only with retry info).
    pub fn grpc_status(&self) -> tonic::Status {
        use tonic::Code;
        let code = match self {
            ApiError::BadRequest(_) | ApiError::BadItem(_) | ApiError::Unsupported(_) => {
                Code::InvalidArgument
            }
            ApiError::Unauthorized(_) => Code::Unauthenticated,
            ApiError::Forbidden(_) => Code::PermissionDenied,
            ApiError::NotFound(_) | ApiError::Deleted { .. } => Code::NotFound,
            ApiError::Conflict(_) => Code::AlreadyExists,
            ApiError::TooLarge(_) => Code::OutOfRange,
            ApiError::Overloaded(_) => Code::Unavailable,
            ApiError::NotImplemented(_) => Code::Unimplemented,
            ApiError::Internal(_) => Code::Internal,
        };
        if let ApiError::Internal(detail) = self {
            let id = log_internal(detail);
            return tonic::Status::new(code, format!("internal error (request_id {id})"));
        }
        tonic::Status::new(code, self.to_string())
    }
}

impl From<ProtoError> for ApiError {
    fn from(e: ProtoError) -> Self {
        match e {
            ProtoError::Invalid(m) => ApiError::BadRequest(m),
            ProtoError::Forbidden(m) => ApiError::Forbidden(m),
            e @ ProtoError::DigestMismatch { .. } => ApiError::Conflict(e.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => ApiError::NotFound(m),
            StoreError::Deleted { what, deleted_at } => {
                ApiError::Deleted { reason: format!("{what} was deleted"), deleted_at }
            }
            StoreError::Invalid(m) => ApiError::BadRequest(m),
            StoreError::Overloaded => ApiError::Overloaded(e.to_string()),
            // The log gets the whole chain of sources; the client only the request id.
            StoreError::Rejected(_) => ApiError::BadRequest(format!(
                "the store rejected the data (request_id {})",
                log_internal(&e.chain())
            )),
            StoreError::Backend(_) => ApiError::Internal(e.chain()),
        }
    }
}

/// The write pipeline's errors: retryable unavailability is 503 with Retry-After, a call Kafka
/// cannot carry even as a reference is 413, the store's own errors map as above.
impl From<SinkError> for ApiError {
    fn from(e: SinkError) -> Self {
        match e {
            e @ SinkError::Unavailable { .. } => ApiError::Overloaded(e.to_string()),
            SinkError::TooLarge(m) => ApiError::TooLarge(m),
            SinkError::Store(e) => ApiError::from(e),
            e @ SinkError::Internal { .. } => ApiError::Internal(with_sources(&e)),
        }
    }
}

/// An error's text followed by its sources', for the log.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The most of an internal error's text that goes to the log (a failed statement can carry
/// megabytes of SQL).
const LOGGED_ERROR_BYTES: usize = 2048;

/// `text` cut to at most `max` bytes, on a character boundary.
pub fn truncated(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let cut = (0..=max).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    format!("{}... ({} bytes more)", &text[..cut], text.len() - cut).into()
}

/// Logs an internal error under a fresh request id and returns the id: clients see only the
/// id, never the text (which may name tables, statements or paths).
fn log_internal(error: &str) -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    tracing::error!(request_id = %id, error = %truncated(error, LOGGED_ERROR_BYTES), "internal error");
    id
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            ApiError::Internal(detail) => {
                json!({"reason": "internal error", "request_id": log_internal(detail)})
            }
            ApiError::Deleted { reason, deleted_at } => {
                json!({"reason": reason, "deleted_at": deleted_at})
            }
            other => json!({"reason": other.to_string()}),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if matches!(self, ApiError::Overloaded(_)) {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(e: ApiError) -> (StatusCode, serde_json::Value) {
        let resp = e.into_response();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn internal_details_never_reach_the_client() {
        let detail = format!("no such column: secret in SELECT {}", "x".repeat(2_000_000));
        let (status, body) =
            answer(ApiError::from(StoreError::Backend(detail.clone().into()))).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["reason"], "internal error");
        assert_eq!(body["request_id"].as_str().unwrap().len(), 32);
        assert_eq!(body.as_object().unwrap().len(), 2);
        let (status, body) =
            answer(ApiError::from(StoreError::Rejected("Code: 27. DB::Exception".into()))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(!body["reason"].as_str().unwrap().contains("DB::Exception"), "{body}");
        let grpc = ApiError::Internal(detail).grpc_status();
        assert!(grpc.message().starts_with("internal error (request_id "), "{}", grpc.message());
    }

    #[tokio::test]
    async fn pipeline_errors_keep_their_statuses() {
        let unavailable =
            SinkError::unavailable("Kafka did not acknowledge the write: timed out", None);
        let resp = ApiError::from(unavailable).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            body["reason"],
            "Kafka did not acknowledge the write: timed out; the data was not stored, retry later"
        );
        let unavailable = ApiError::from(SinkError::unavailable("down", None));
        assert_eq!(unavailable.grpc_status().code(), tonic::Code::Unavailable);

        let (status, body) =
            answer(SinkError::TooLarge("call c was not stored".into()).into()).await;
        assert_eq!(
            (status, body["reason"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("call c was not stored"))
        );
        // The store's errors mean what they mean without the pipeline.
        let (status, _) = answer(SinkError::Store(StoreError::Overloaded).into()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let (status, body) =
            answer(SinkError::Store(StoreError::Rejected("DB::Exception".into())).into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(!body["reason"].as_str().unwrap().contains("DB::Exception"), "{body}");
        let (status, _) = answer(SinkError::Store(StoreError::Invalid("bad".into())).into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        // Internal faults are masked; their sources go to the log only.
        let internal = SinkError::internal("re-reading a record", std::io::Error::other("secret"));
        let ApiError::Internal(logged) = ApiError::from(internal) else { panic!("not internal") };
        assert_eq!(logged, "re-reading a record: secret");
        let internal = SinkError::internal("re-reading a record", std::io::Error::other("secret"));
        let (status, body) = answer(internal.into()).await;
        assert_eq!(
            (status, body["reason"].as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, Some("internal error"))
        );
    }

    #[test]
    fn internal_errors_log_their_sources() {
        #[derive(Debug, thiserror::Error)]
        #[error("commit failed")]
        struct Commit(#[source] std::io::Error);
        let e = StoreError::backend(Commit(std::io::Error::other("database is locked")));
        let ApiError::Internal(logged) = ApiError::from(e) else { panic!("not internal") };
        assert_eq!(logged, "storage error: commit failed: database is locked");
    }

    #[test]
    fn logged_text_is_truncated_on_a_character_boundary() {
        let text = "é".repeat(5000);
        let cut = truncated(&text, 2049);
        assert!(cut.starts_with(&"é".repeat(1024)) && cut.ends_with("(7952 bytes more)"), "{cut}");
        assert_eq!(truncated("short", 10), "short");
    }
}
