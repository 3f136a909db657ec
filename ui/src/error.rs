//! The UI's one error type, rendered as an HTML page with the matching status. Internal errors
//! are logged and shown without detail, like the API's 500s.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use heddle_api::ApiError;
use heddle_proto::ProtoError;
use heddle_store::StoreError;
use maud::html;

use crate::layout;

#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(String),
}

impl UiError {
    pub fn status(&self) -> StatusCode {
        match self {
            UiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            UiError::Forbidden(_) => StatusCode::FORBIDDEN,
            UiError::NotFound(_) => StatusCode::NOT_FOUND,
            UiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            UiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Store and request errors take the API's one mapping (`api/src/error.rs`), so a page and the
/// endpoint it mirrors answer the same status.
impl From<StoreError> for UiError {
    fn from(e: StoreError) -> Self {
        UiError::from(ApiError::from(e))
    }
}

impl From<ProtoError> for UiError {
    fn from(e: ProtoError) -> Self {
        UiError::from(ApiError::from(e))
    }
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Forbidden(m) | ApiError::Unauthorized(m) => UiError::Forbidden(m),
            ApiError::NotFound(m) => UiError::NotFound(m),
            ApiError::Deleted { reason, .. } => UiError::NotFound(reason),
            ApiError::Overloaded(m) => UiError::Unavailable(m),
            ApiError::Internal(m) => UiError::Internal(m),
            other => UiError::BadRequest(other.to_string()),
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            UiError::Internal(detail) => {
                tracing::error!(error = %detail, "UI page failed");
                "Something went wrong on the server; the details are in its log.".to_owned()
            }
            other => other.to_string(),
        };
        let title = status.canonical_reason().unwrap_or("Error");
        let body = html! {
            main.narrow {
                h1 { (status.as_u16()) " " (title) }
                p.error-message { (message) }
                p { a href="/" { "All projects" } }
            }
        };
        (status, layout::bare(title, body)).into_response()
    }
}
