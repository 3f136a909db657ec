//! Call reads (`/call/read`, `/calls/stream_query`, `/calls/query_stats`) and the call writes
//! that answer immediately (`/call/update`, `/calls/delete`).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use futures::StreamExt;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_domain::expansion::{Planned, for_count, plan};
use heddle_domain::prices::PriceBook;
use heddle_domain::redaction;
use heddle_proto::calls::{CallReadReq, CallUpdateReq, CallsDeleteReq, CallsFilter, CallsQueryReq};
use heddle_proto::project_settings::SensitiveDataPolicy;
use serde_json::{Value, json};

use crate::expand;

/// Most call ids one delete may name (the real server answers 413 above this).
pub const MAX_DELETE_IDS: usize = 1000;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/call/read", post(read))
        .route("/calls/stream_query", post(stream_query))
        .route("/calls/query_stats", post(query_stats))
        .route("/call/update", post(update))
        .route("/calls/delete", post(delete))
}

async fn read(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallReadReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let q = CallsQueryReq {
        filter: Some(CallsFilter { call_ids: Some(vec![req.id]), ..Default::default() }),
        limit: Some(1),
        ..CallsQueryReq::for_project(req.project_id)
    };
    let settings = state.settings.get(&q.project_id).await?;
    let mut rows = state.store.query_calls(q.validate()?).await?;
    let call = rows.next().await.transpose()?.map(|mut call| {
        call.expire_at = settings.expire_at(call.started_at);
        call
    });
    Ok(axum::Json(json!({ "call": call })))
}

/// Rows are serialised as they come and grouped into chunks of what is ready, so a large
/// result streams with bounded memory and without one write per row.
async fn stream_query(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    who: Principal,
    Json(req): Json<CallsQueryReq>,
) -> Result<Response, ApiError> {
    who.check(&req.project_id)?;
    let content_type = crate::jsonl::content_type(&headers);
    let include_feedback = req.include_feedback == Some(true);
    let include_costs = req.include_costs == Some(true);
    let project = req.project_id.clone();
    let q = match plan(req)? {
        Planned::Sql(q) => q,
        Planned::Expand { .. } if include_feedback || include_costs => {
            return Err(ApiError::bad_request(
                "include_feedback or include_costs together with expand_columns is not supported \
                 yet",
            ));
        }
        Planned::Expand { candidates, plan } => {
            let store = state.store.clone();
            let chunks = if plan.sort.is_some() {
                expand::sorted(store, state.memory_budget.clone(), candidates, *plan).await?
            } else {
                expand::stream(store, state.memory_budget.clone(), candidates, *plan).await?
            };
            let body = chunks.map(|c| {
                c.map_err(|e| {
                    // Past the first byte the only way to signal an error is to cut the body.
                    tracing::error!(error = %e, "calls stream failed mid-way");
                    std::io::Error::other(e.to_string())
                })
            });
            let mut resp = Body::from_stream(body).into_response();
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            return Ok(resp);
        }
    };
    // `expire_at`: when the project's retention will purge the call (docs/storage.md#retention).
    let settings = state.settings.get(&project).await?;
    let mut rows = state.store.query_calls(q).await?;
    if settings.retention_days.is_some() {
        rows = Box::pin(rows.map(move |row| {
            row.map(|mut call| {
                call.expire_at = settings.expire_at(call.started_at);
                call
            })
        }));
    }
    if include_costs {
        // `summary.weave.costs` is derived per row after the read, with the project's prices
        // loaded once per request (heddle_proto::costs).
        let prices = PriceBook::new(state.store.project_costs(&project).await?);
        rows = Box::pin(rows.map(move |row| {
            row.map(|mut call| {
                prices.add_costs(&mut call.summary, call.started_at);
                call
            })
        }));
    }
    // Errors must become a status before the first byte
    // (docs/api/README.md#streaming-responses-jsonl): look at the first row.
    let first = rows.next().await.transpose()?;
    let store = state.store.clone();
    let chunks = futures::stream::iter(first.map(Ok)).chain(rows).ready_chunks(256);
    let lines = chunks.then(move |batch| {
        let store = store.clone();
        async move {
            // Past the first byte the only way to signal an error is to cut the body.
            let cut = |e: heddle_store::StoreError| {
                tracing::error!(error = %e, "calls stream failed mid-way");
                std::io::Error::other(e.to_string())
            };
            let mut calls = batch.into_iter().collect::<Result<Vec<_>, _>>().map_err(cut)?;
            if include_feedback {
                crate::feedback::attach(&*store, &mut calls).await.map_err(cut)?;
            }
            let mut buf = Vec::with_capacity(calls.len() * 512);
            for call in &calls {
                serde_json::to_writer(&mut buf, call).map_err(std::io::Error::other)?;
                buf.push(b'\n');
            }
            Ok::<_, std::io::Error>(Bytes::from(buf))
        }
    });
    let mut resp = Body::from_stream(lines).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(resp)
}

async fn query_stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallsQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    // Counting ignores order, paging and projection: don't reject what it would not use.
    let count = match plan(for_count(req))? {
        Planned::Sql(q) => state.store.count_calls(q).await?,
        Planned::Expand { candidates, plan } if plan.residual.is_some() => {
            expand::count(state.store.clone(), state.memory_budget.clone(), candidates, *plan)
                .await?
        }
        // Expansion does not change which calls match.
        Planned::Expand { candidates, .. } => state.store.count_calls(candidates).await?,
    };
    Ok(axum::Json(json!({ "count": count, "total_storage_size_bytes": null })))
}

async fn update(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallUpdateReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let name = req
        .display_name
        .ok_or_else(|| ApiError::bad_request("display_name is required (\"\" clears it)"))?;
    if req.call_id.is_empty() {
        return Err(ApiError::bad_request("call_id must not be empty"));
    }
    // A display name is user text like any other: the sensitive-data policy applies.
    let settings = state.settings.get(&req.project_id).await?;
    let name = match settings.sensitive_data {
        SensitiveDataPolicy::PiiV1 => redaction::redact_display_name(&name),
        SensitiveDataPolicy::Off => name,
    };
    state.store.set_call_display_name(&req.project_id, &req.call_id, &name).await?;
    Ok(axum::Json(json!({})))
}

async fn delete(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallsDeleteReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    if req.call_ids.len() > MAX_DELETE_IDS {
        return Err(ApiError::TooLarge(format!(
            "at most {MAX_DELETE_IDS} call ids per delete, got {}",
            req.call_ids.len()
        )));
    }
    let n = state.store.delete_calls(&req.project_id, &req.call_ids).await?;
    Ok(axum::Json(json!({ "num_deleted": n })))
}
