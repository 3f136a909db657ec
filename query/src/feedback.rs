//! Feedback (docs/api/feedback.md, docs/api/feedback.md#batch-create-feedback): `/feedback/create`,
//! `/feedback/batch/create`, `/feedback/query`, `/feedback/purge`, `/feedback/replace`, and the
//! rows `include_feedback` adds to calls.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_domain::redaction;
use heddle_proto::ProjectId;
use heddle_proto::calls::Call;
use heddle_proto::feedback::{
    CreateError, FeedbackBatchCreateReq, FeedbackCreateReq, FeedbackPurgeReq, FeedbackQueryReq,
    FeedbackReplaceReq, MAX_BATCH, NewFeedback, project_row, purge_ids,
};
use heddle_proto::project_settings::SensitiveDataPolicy;
use heddle_proto::time::Micros;
use heddle_store::Store;
use serde_json::{Map, Value, json};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/feedback/create", post(create))
        .route("/feedback/batch/create", post(batch_create))
        .route("/feedback/query", post(query))
        .route("/feedback/purge", post(purge))
        .route("/feedback/replace", post(replace))
}

/// A create's validation error. `item` errors (in a batch) answer 422, so the SDK bisects the
/// batch and drops only the bad item; an oversized payload is 413 either way (the SDK splits,
/// then drops the single oversized item).
fn create_error(e: CreateError, item: bool) -> ApiError {
    match e {
        CreateError::TooLarge(m) => ApiError::TooLarge(m),
        CreateError::Invalid(e) if item => ApiError::BadItem(e.to_string()),
        CreateError::Invalid(e) => e.into(),
    }
}

fn validate(who: &Principal, req: FeedbackCreateReq, item: bool) -> Result<NewFeedback, ApiError> {
    who.check(&req.project_id)?;
    req.into_new(who.user_id(), Micros::now()).map_err(|e| create_error(e, item))
}

/// Applies each project's sensitive-data policy (docs/api/project-settings.md#redaction) to
/// validated rows, before they are stored.
async fn redacted(
    state: &AppState,
    mut items: Vec<NewFeedback>,
) -> Result<Vec<NewFeedback>, ApiError> {
    for f in &mut items {
        if state.settings.get(&f.project).await?.sensitive_data == SensitiveDataPolicy::PiiV1 {
            redaction::redact_feedback(f);
        }
    }
    Ok(items)
}

async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<FeedbackCreateReq>,
) -> Result<axum::Json<Value>, ApiError> {
    let new = redacted(&state, vec![validate(&who, req, false)?]).await?;
    let stored = state.store.create_feedback(new).await?;
    Ok(axum::Json(stored[0].create_result()))
}

async fn batch_create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<FeedbackBatchCreateReq>,
) -> Result<axum::Json<Value>, ApiError> {
    if req.batch.len() > MAX_BATCH {
        return Err(ApiError::TooLarge(format!(
            "at most {MAX_BATCH} feedback items per batch, got {}",
            req.batch.len()
        )));
    }
    let items = req
        .batch
        .into_iter()
        .map(|item| validate(&who, item, true))
        .collect::<Result<Vec<_>, _>>()?;
    let stored = state.store.create_feedback(redacted(&state, items).await?).await?;
    let res: Vec<Value> = stored.iter().map(|f| f.create_result()).collect();
    Ok(axum::Json(json!({ "res": res })))
}

async fn query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<FeedbackQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (q, fields) = req.validate()?;
    let (rows, total) = state.store.query_feedback(q).await?;
    let result: Vec<Value> = rows
        .iter()
        .map(|r| {
            let row = r.to_json();
            Value::Object(match &fields {
                Some(fields) => project_row(&row, fields),
                None => row,
            })
        })
        .collect();
    Ok(axum::Json(json!({ "result": result, "total_count": total })))
}

async fn purge(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<FeedbackPurgeReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let ids = purge_ids(&req.query)?;
    state.store.purge_feedback(&req.project_id, &ids).await?;
    Ok(axum::Json(json!({})))
}

/// Deletes `feedback_id`, then creates the new row (docs/api/feedback.md#replace-feedback). The new
/// row is validated before anything is deleted.
async fn replace(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<FeedbackReplaceReq>,
) -> Result<axum::Json<Value>, ApiError> {
    let new = validate(&who, req.create, false)?;
    if req.feedback_id.is_empty() {
        return Err(ApiError::bad_request("feedback_id must not be empty"));
    }
    let new = redacted(&state, vec![new]).await?;
    state.store.purge_feedback(&new[0].project, &[req.feedback_id]).await?;
    let stored = state.store.create_feedback(new).await?;
    Ok(axum::Json(stored[0].create_result()))
}

/// The ref of a call, the `weave_ref` of its feedback.
pub fn call_ref(project: &ProjectId, id: &str) -> String {
    format!("weave:///{project}/call/{id}")
}

/// Sets `summary.weave.feedback` of each call to its feedback rows, oldest first
/// (docs/api/calls.md#call-object), with one store read for the whole chunk.
pub async fn attach(store: &dyn Store, calls: &mut [Call]) -> Result<(), heddle_store::StoreError> {
    let Some(first) = calls.first() else { return Ok(()) };
    let project = first.project_id.clone();
    let refs: Vec<String> = calls.iter().map(|c| call_ref(&c.project_id, &c.id)).collect();
    let mut by_ref: HashMap<String, Vec<Value>> = HashMap::new();
    for f in store.feedback_for_refs(&project, &refs).await? {
        by_ref.entry(f.weave_ref.clone()).or_default().push(Value::Object(f.to_json()));
    }
    for (call, r) in calls.iter_mut().zip(refs) {
        let rows = by_ref.remove(&r).unwrap_or_default();
        if !call.summary.is_object() {
            call.summary = Value::Object(Map::new());
        }
        let summary = call.summary.as_object_mut().expect("just made an object");
        let weave = summary.entry("weave").or_insert_with(|| Value::Object(Map::new()));
        if !weave.is_object() {
            *weave = Value::Object(Map::new());
        }
        weave.as_object_mut().expect("an object").insert("feedback".into(), Value::Array(rows));
    }
    Ok(())
}
