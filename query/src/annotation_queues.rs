//! Annotation queues (docs/api/annotation-queues.md): `POST /annotation_queues`,
//! `POST /annotation_queues/query` (JSONL), `GET|PUT|DELETE /annotation_queues/{queue_id}`,
//! `POST /annotation_queues/stats`, `POST /annotation_queues/{queue_id}/items`,
//! `POST /annotation_queues/{queue_id}/items/query` and
//! `POST /annotation_queues/{queue_id}/items/{item_id}/progress`.
//!
//! The acting user (creator, adder, annotator) is the key's user, never a body field.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use futures::StreamExt;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::annotation_queues::{
    ItemsAddReq, ItemsFilter, ItemsQueryReq, NewItem, ProgressReq, Queue, QueueCreateReq,
    QueueStatsReq, QueueUpdateReq, QueuesQueryReq, check_id,
};
use heddle_proto::calls::{CallsFilter, CallsQueryReq};
use heddle_proto::tags::ProjectParam;
use heddle_proto::time::Micros;
use serde_json::{Value, json};

use crate::tags::{path, query};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/annotation_queues", post(create))
        .route("/annotation_queues/query", post(list))
        .route("/annotation_queues/stats", post(stats))
        .route("/annotation_queues/{queue_id}", get(read).put(update).delete(delete))
        .route("/annotation_queues/{queue_id}/items", post(add_items))
        .route("/annotation_queues/{queue_id}/items/query", post(query_items))
        .route("/annotation_queues/{queue_id}/items/{item_id}/progress", post(progress))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("annotation queue {id} not found"))
}

fn queue_id(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let id = path(p)?;
    check_id("queue_id", &id)?;
    Ok(id)
}

async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<QueueCreateReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let q = req.validate(who.user_id(), Micros::now())?;
    let id = q.id.clone();
    state.store.create_queue(q).await?;
    Ok(axum::Json(json!({ "id": id })))
}

/// JSONL, one queue per line, like the other stream queries.
async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    who: Principal,
    Json(req): Json<QueuesQueryReq>,
) -> Result<Response, ApiError> {
    who.check(&req.project_id)?;
    let queues = state.store.query_queues(req.validate()?).await?;
    crate::jsonl::response(&headers, &queues)
}

fn queue_answer(q: Option<Queue>, id: &str) -> Result<axum::Json<Value>, ApiError> {
    let q = q.ok_or_else(|| not_found(id))?;
    Ok(axum::Json(json!({ "queue": q })))
}

async fn read(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ProjectParam>, QueryRejection>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = query(q)?;
    who.check(&q.project_id)?;
    let id = queue_id(p)?;
    queue_answer(state.store.read_queue(&q.project_id, &id).await?, &id)
}

async fn update(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<String>, PathRejection>,
    Json(req): Json<QueueUpdateReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let id = queue_id(p)?;
    let (project, changes) = req.validate()?;
    queue_answer(state.store.update_queue(&project, &id, changes, Micros::now()).await?, &id)
}

async fn delete(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ProjectParam>, QueryRejection>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = query(q)?;
    who.check(&q.project_id)?;
    let id = queue_id(p)?;
    queue_answer(state.store.delete_queue(&q.project_id, &id, Micros::now()).await?, &id)
}

async fn stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<QueueStatsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (project, ids) = req.validate()?;
    let stats = state.store.queue_stats(&project, &ids).await?;
    Ok(axum::Json(json!({ "stats": stats })))
}

/// Adds the calls that exist (unknown ids are skipped, counted neither as added nor as
/// duplicates, like the hosted service); a call id repeated in the request counts as a
/// duplicate.
async fn add_items(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<String>, PathRejection>,
    Json(req): Json<ItemsAddReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let id = queue_id(p)?;
    let (project, call_ids, display_fields, repeats) = req.validate()?;
    if state.store.read_queue(&project, &id).await?.is_none() {
        return Err(not_found(&id));
    }
    let calls = CallsQueryReq {
        filter: Some(CallsFilter { call_ids: Some(call_ids.clone()), ..Default::default() }),
        ..CallsQueryReq::for_project(project.clone())
    };
    let mut rows = state.store.query_calls(calls.validate()?).await?;
    let mut found = std::collections::HashMap::new();
    while let Some(call) = rows.next().await {
        let call = call?;
        found.insert(call.id.clone(), call);
    }
    // In the request's order.
    let items: Vec<NewItem> = call_ids
        .iter()
        .filter_map(|c| found.remove(c))
        .map(|c| NewItem {
            call_id: c.id,
            call_started_at: c.started_at,
            call_ended_at: c.ended_at,
            call_op_name: c.op_name,
            call_trace_id: c.trace_id,
        })
        .collect();
    let added = state
        .store
        .add_items(&project, &id, items, &display_fields, who.user_id(), Micros::now())
        .await?;
    Ok(axum::Json(json!({
        "added_count": added.added,
        "duplicates": added.duplicates + repeats,
    })))
}

async fn query_items(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<String>, PathRejection>,
    Json(req): Json<ItemsQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let id = queue_id(p)?;
    let items = state.store.query_items(req.validate(id)?).await?;
    Ok(axum::Json(json!({ "items": items })))
}

/// Sets the key's user's state on the item, then answers the item with its (new) state.
async fn progress(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<(String, String)>, PathRejection>,
    Json(req): Json<ProgressReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (queue, item) = path(p)?;
    check_id("queue_id", &queue)?;
    check_id("item_id", &item)?;
    if state.store.read_queue(&req.project_id, &queue).await?.is_none() {
        return Err(not_found(&queue));
    }
    let now = Micros::now();
    let store = &state.store;
    store
        .set_progress(&req.project_id, &queue, &item, who.user_id(), &req.annotation_state, now)
        .await?;
    let filter = ItemsFilter { id: Some(item.clone()), ..Default::default() };
    let q = ItemsQueryReq {
        project_id: req.project_id,
        filter: Some(filter),
        sort_by: None,
        limit: None,
        offset: None,
        include_position: None,
    };
    let mut items = store.query_items(q.validate(queue)?).await?;
    let item = items.pop().ok_or_else(|| ApiError::NotFound(format!("item {item} not found")))?;
    Ok(axum::Json(json!({ "item": item })))
}
