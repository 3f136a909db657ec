//! Costs (docs/api/costs.md): `/cost/create`, `/cost/query`, `/cost/purge`. The query language over
//! prices runs in `heddle_proto::costs` on the project's prices (few per project), so the
//! backends only store, list and delete them.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::costs::{CostCreateReq, CostPurgeReq, CostQueryReq, purge_ids};
use serde_json::{Value, json};

/// Most prices one request may create.
pub const MAX_COSTS_PER_CREATE: usize = 1000;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/cost/create", post(create))
        .route("/cost/query", post(query))
        .route("/cost/purge", post(purge))
}

async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CostCreateReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    if req.costs.len() > MAX_COSTS_PER_CREATE {
        return Err(ApiError::TooLarge(format!(
            "at most {MAX_COSTS_PER_CREATE} costs per request, got {}",
            req.costs.len()
        )));
    }
    let records = req.into_records(who.user_id())?;
    let ids: Vec<[&str; 2]> = records.iter().map(|r| [r.llm_id.as_str(), r.id.as_str()]).collect();
    let body = json!({ "ids": ids });
    state.store.create_costs(records).await?;
    Ok(axum::Json(body))
}

async fn query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CostQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let q = req.validate()?;
    let rows = state.store.project_costs(&q.project).await?;
    Ok(axum::Json(json!({ "results": q.apply(rows) })))
}

async fn purge(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CostPurgeReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let ids = purge_ids(&req.query)?;
    if !ids.is_empty() {
        state.store.purge_costs(&req.project_id, &ids).await?;
    }
    Ok(axum::Json(json!({})))
}
