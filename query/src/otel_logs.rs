//! `POST /otel/logs/query` (docs/api/otel.md, "Reading log records"): a project's OTLP log
//! records as stored, oldest first — those of one trace or span, or the ones that name no span
//! (`"span_id": ""`). This is where a record stays readable when its span never arrived; the
//! records of a span that did arrive are also merged into its call's inputs and output.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::otlp::logs::LogsQueryReq;
use serde_json::{Value, json};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/otel/logs/query", post(query))
}

async fn query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<LogsQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let q = req.validate()?;
    let logs = state.store.query_otel_logs(q).await?;
    let logs: Vec<Value> = logs.iter().map(|l| l.to_json()).collect();
    Ok(axum::Json(json!({ "logs": logs })))
}
