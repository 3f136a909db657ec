//! Project settings (docs/api/project-settings.md): retention (`/project/ttl_settings/*`), the
//! sensitive-data policy (`/project/sensitive_data_settings`) and ingest sampling
//! (`/project/ingest_sampling_settings/*`). Reads go to the store, so they show an update at
//! once; an update also drops this process's cached copy (`heddle_api::settings`), which ingest
//! in other processes refreshes within its TTL.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::routing::{get, post};
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::ProjectId;
use heddle_proto::project_settings::{
    ProjectSetting, Sampling, SamplingUpdateReq, SensitiveDataRes, SensitiveDataUpdateReq,
    SettingsReadReq, TtlRes, TtlUpdateReq,
};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/project/ttl_settings/read", post(ttl_read))
        .route("/project/ttl_settings/update", post(ttl_update))
        .route("/project/sensitive_data_settings", get(sensitive_read))
        .route("/project/sensitive_data_settings/update", post(sensitive_update))
        .route("/project/ingest_sampling_settings/read", post(sampling_read))
        .route("/project/ingest_sampling_settings/update", post(sampling_update))
}

async fn set(
    state: &AppState,
    project: &ProjectId,
    setting: ProjectSetting,
) -> Result<(), ApiError> {
    state.store.set_project_setting(project, setting).await?;
    state.settings.forget(project);
    Ok(())
}

async fn ttl_read(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SettingsReadReq>,
) -> Result<axum::Json<TtlRes>, ApiError> {
    who.check(&req.project_id)?;
    let s = state.store.project_settings(&req.project_id).await?;
    Ok(axum::Json(TtlRes { retention_days: s.retention_days }))
}

async fn ttl_update(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TtlUpdateReq>,
) -> Result<axum::Json<TtlRes>, ApiError> {
    who.check(&req.project_id)?;
    let setting = req.setting()?;
    set(&state, &req.project_id, setting).await?;
    Ok(axum::Json(TtlRes { retention_days: req.retention_days }))
}

async fn sensitive_read(
    State(state): State<Arc<AppState>>,
    who: Principal,
    query: Result<Query<SettingsReadReq>, QueryRejection>,
) -> Result<axum::Json<SensitiveDataRes>, ApiError> {
    let Query(req) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    who.check(&req.project_id)?;
    let s = state.store.project_settings(&req.project_id).await?;
    Ok(axum::Json(SensitiveDataRes { policy: s.sensitive_data }))
}

async fn sensitive_update(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SensitiveDataUpdateReq>,
) -> Result<axum::Json<SensitiveDataRes>, ApiError> {
    who.check(&req.project_id)?;
    let policy = req.policy()?;
    set(&state, &req.project_id, ProjectSetting::SensitiveData(policy)).await?;
    Ok(axum::Json(SensitiveDataRes { policy }))
}

async fn sampling_read(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SettingsReadReq>,
) -> Result<axum::Json<Sampling>, ApiError> {
    who.check(&req.project_id)?;
    Ok(axum::Json(state.store.project_settings(&req.project_id).await?.sampling))
}

async fn sampling_update(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SamplingUpdateReq>,
) -> Result<axum::Json<Sampling>, ApiError> {
    who.check(&req.project_id)?;
    let current = state.store.project_settings(&req.project_id).await?.sampling;
    let sampling = req.sampling(current)?;
    set(&state, &req.project_id, ProjectSetting::Sampling(sampling)).await?;
    Ok(axum::Json(sampling))
}
