//! `/service/projects_info` (docs/api/service.md#project-ids), `/project/stats`
//! (docs/api/service.md#project-stats) and `/files/resolve_url` (docs/api/files.md#resolve-urls).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::ProjectId;
use heddle_store::StorageSizes;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most project ids one `/service/projects_info` request may name.
pub const MAX_PROJECT_IDS: usize = 1000;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/service/projects_info", post(projects_info))
        .route("/project/stats", post(project_stats))
        .route("/files/resolve_url", post(resolve_url))
}

#[derive(Debug, Deserialize)]
struct ProjectsInfoReq {
    project_ids: Vec<String>,
}

/// heddle has no separate internal project ids: a project's internal id is its `entity/project`
/// id. Ids the key may not see, and malformed ones, are left out of the answer (as unknown
/// projects are by the hosted service), never a 403 that would reveal which exist.
async fn projects_info(
    who: Principal,
    Json(req): Json<ProjectsInfoReq>,
) -> Result<axum::Json<Value>, ApiError> {
    if req.project_ids.len() > MAX_PROJECT_IDS {
        return Err(ApiError::TooLarge(format!(
            "at most {MAX_PROJECT_IDS} project ids per request, got {}",
            req.project_ids.len()
        )));
    }
    let infos: Vec<Value> = req
        .project_ids
        .iter()
        .filter_map(|id| ProjectId::parse(id).ok())
        .filter(|p| who.may_use_entity(p.entity()))
        .map(|p| json!({"external_project_id": p.as_str(), "internal_project_id": p.as_str()}))
        .collect();
    Ok(axum::Json(Value::Array(infos)))
}

#[derive(Debug, Deserialize)]
struct ProjectStatsReq {
    project_id: ProjectId,
    include_trace_storage_size: Option<bool>,
    include_object_storage_size: Option<bool>,
    include_table_storage_size: Option<bool>,
    include_file_storage_size: Option<bool>,
}

/// The bytes a project stores per kind of content. Each size is included unless its flag is
/// `false` (then it reads 0), as on the hosted service.
async fn project_stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ProjectStatsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let wanted = |flag: Option<bool>| flag != Some(false);
    let sizes = if wanted(req.include_trace_storage_size)
        || wanted(req.include_object_storage_size)
        || wanted(req.include_table_storage_size)
    {
        state.store.storage_sizes(&req.project_id).await?
    } else {
        StorageSizes::default()
    };
    let files = match wanted(req.include_file_storage_size) {
        true => state.store.files_size(&req.project_id).await?,
        false => 0,
    };
    let pick = |flag: Option<bool>, n: u64| if wanted(flag) { n } else { 0 };
    Ok(axum::Json(json!({
        "trace_storage_size_bytes": pick(req.include_trace_storage_size, sizes.traces),
        "objects_storage_size_bytes": pick(req.include_object_storage_size, sizes.objects),
        "tables_storage_size_bytes": pick(req.include_table_storage_size, sizes.tables),
        "files_storage_size_bytes": files,
    })))
}

#[derive(Debug, Deserialize)]
struct ResolveUrlReq {
    project_id: ProjectId,
    uris: Vec<String>,
}

/// heddle keeps file contents in its own store, not in a bucket, so it never hands out storage
/// URIs and has none to sign: an empty list resolves to an empty list, any URI is a 400 that
/// says where the content is.
async fn resolve_url(
    who: Principal,
    Json(req): Json<ResolveUrlReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    if let Some(uri) = req.uris.first() {
        return Err(ApiError::bad_request(format!(
            "cannot resolve {uri:?}: heddle stores file contents itself and issues no storage \
             URIs; read a file with /file/content"
        )));
    }
    Ok(axum::Json(json!({"download_urls": [], "expires_at": null})))
}
