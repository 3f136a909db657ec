//! `/file/create` (multipart), `/file/content` and `/files/query_stats` (docs/api/files.md). A file
//! is identified by its content digest only; the digest is the same `bytes_digest` the client
//! computes.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use heddle_api::{ApiError, AppState, Json, Principal, RawBody};
use heddle_proto::ProjectId;
use heddle_proto::ProtoError;
use heddle_proto::digest::bytes_digest;
use heddle_proto::objects::{FileContentReq, FileCreateRes, FilesStatsReq, FilesStatsRes};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/file/create", post(create))
        .route("/file/content", post(content))
        .route("/files/query_stats", post(stats))
}

fn multipart_error(e: multer::Error) -> ApiError {
    ApiError::bad_request(format!("invalid multipart body: {e}"))
}

async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<axum::Json<FileCreateRes>, ApiError> {
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| multer::parse_boundary(ct).ok())
        .ok_or_else(|| {
            ApiError::bad_request("expected a multipart/form-data body with a boundary")
        })?;
    let mut multipart = multer::Multipart::new(
        futures::stream::once(async move { Ok::<_, std::convert::Infallible>(body) }),
        boundary,
    );
    let (mut project, mut expected, mut file): (Option<String>, Option<String>, Option<Bytes>) =
        (None, None, None);
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        match field.name().unwrap_or_default() {
            "project_id" => project = Some(field.text().await.map_err(multipart_error)?),
            "expected_digest" => expected = Some(field.text().await.map_err(multipart_error)?),
            "file" => file = Some(field.bytes().await.map_err(multipart_error)?),
            _ => {} // unknown parts are ignored, like unknown JSON keys
        }
    }
    let project = ProjectId::parse(
        &project.ok_or_else(|| ApiError::bad_request("multipart field project_id is missing"))?,
    )?;
    who.check(&project)?;
    let file =
        file.ok_or_else(|| ApiError::bad_request("multipart file part \"file\" is missing"))?;
    let digest = bytes_digest(&file);
    if let Some(expected) = expected.filter(|e| !e.is_empty() && *e != digest) {
        return Err(ProtoError::DigestMismatch { expected, actual: digest }.into());
    }
    state.store.create_file(&project, &digest, file).await?;
    Ok(axum::Json(FileCreateRes { digest }))
}

async fn content(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<FileContentReq>,
) -> Result<Response, ApiError> {
    who.check(&req.project_id)?;
    let bytes = state.store.read_file(&req.project_id, &req.digest).await?;
    let mut resp = bytes.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    Ok(resp)
}

async fn stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<FilesStatsReq>,
) -> Result<axum::Json<FilesStatsRes>, ApiError> {
    who.check(&req.project_id)?;
    let total_size_bytes = state.store.files_size(&req.project_id).await?;
    Ok(axum::Json(FilesStatsRes { total_size_bytes }))
}
