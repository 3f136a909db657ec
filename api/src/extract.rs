//! A JSON body extractor whose rejections are the API's own errors: 413 above the body limit,
//! 400 with the parser's message for malformed JSON or wrong types. Unknown keys are ignored
//! and `null` reads as absent (the SDK sends both, CONTRACT §1.1).

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::ApiError;

pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        parse(&bytes).map(Json)
    }
}

pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))
}

pub fn body_error(e: BytesRejection) -> ApiError {
    match e {
        BytesRejection::FailedToBufferBody(inner)
            if inner.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE =>
        {
            ApiError::TooLarge("request body is larger than the server's limit".into())
        }
        other => ApiError::BadRequest(format!("could not read request body: {other}")),
    }
}
