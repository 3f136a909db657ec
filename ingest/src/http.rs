//! The call ingestion endpoints. Every body is validated and normalised into [`CallPart`]s,
//! handed to the write pipeline's sink (`heddle_pipeline::Sink`), and acknowledged only once the
//! sink says it is durable.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use heddle_api::settings::prepare;
use heddle_api::{ApiError, AppState, Json, JsonBody, Principal, body_text, parse};
use heddle_proto::ProjectId;
use heddle_proto::calls::{
    CallEndReq, CallPart, CallStartReq, CallStartRes, CompleteCall, UpsertItem,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// Most items one batch request may carry (the SDK sends at most 1000).
pub const MAX_BATCH_ITEMS: usize = 10_000;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/call/start", post(call_start))
        .route("/call/end", post(call_end))
        .route("/call/upsert_batch", post(upsert_batch))
        .route("/v2/{entity}/{project}/calls/complete", post(calls_complete))
        .route("/v2/{entity}/{project}/call/start", post(v2_call_start))
        .route("/v2/{entity}/{project}/call/end", post(v2_call_end))
}

/// A batch, parsed whole.
#[derive(Deserialize)]
struct Batch<T> {
    batch: Vec<T>,
}

/// A batch whose items are parsed one by one, so one bad item is reported by index (422,
/// which makes the SDK bisect and drop only that item) instead of failing the whole body.
#[derive(Deserialize)]
struct RawBatch {
    batch: Vec<Box<RawValue>>,
}

/// The parts of a batch body. It is parsed in one pass; only when that fails is it parsed again
/// item by item, to name the bad item.
fn parse_batch<T: DeserializeOwned>(
    body: &[u8],
    into_part: impl Fn(T) -> Result<CallPart, heddle_proto::ProtoError>,
) -> Result<Vec<CallPart>, ApiError> {
    let items: Vec<Result<T, String>> = match serde_json::from_str::<Batch<T>>(body_text(body)?) {
        Ok(Batch { batch }) => batch.into_iter().map(Ok).collect(),
        Err(_) => parse::<RawBatch>(body)?
            .batch
            .iter()
            .map(|raw| serde_json::from_str(raw.get()).map_err(|e| e.to_string()))
            .collect(),
    };
    if items.len() > MAX_BATCH_ITEMS {
        return Err(ApiError::TooLarge(format!(
            "batch has {} items, at most {MAX_BATCH_ITEMS} are accepted",
            items.len()
        )));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            item.and_then(|item| into_part(item).map_err(|e| e.to_string()))
                .map_err(|e| ApiError::BadItem(format!("batch item {i}: {e}")))
        })
        .collect()
}

fn check_all(
    who: &Principal,
    parts: &[CallPart],
    path: Option<&ProjectId>,
) -> Result<(), ApiError> {
    for p in parts {
        if let Some(path) = path
            && &p.project != path
        {
            return Err(ApiError::bad_request(format!(
                "call {} belongs to project {}, not {path} named in the path",
                p.id, p.project
            )));
        }
        who.check(&p.project)?;
    }
    Ok(())
}

fn path_project(entity: &str, project: &str) -> Result<ProjectId, ApiError> {
    Ok(ProjectId::from_parts(entity, project)?)
}

/// Writes authorised parts: first the projects' ingest sampling and sensitive-data policy
/// (`heddle_api::settings::prepare`), so nothing dropped or unredacted reaches the sink.
async fn store(state: &AppState, parts: Vec<CallPart>) -> Result<(), ApiError> {
    let parts = prepare(&state.settings, &state.ingest_metrics, parts).await?;
    if !parts.is_empty() {
        state.sink.write(parts).await?;
    }
    Ok(())
}

async fn start(
    state: &AppState,
    who: &Principal,
    req: CallStartReq,
    path: Option<&ProjectId>,
) -> Result<axum::Json<CallStartRes>, ApiError> {
    let part = req.start.into_part(Some(who.user_id()))?;
    check_all(who, std::slice::from_ref(&part), path)?;
    let res =
        CallStartRes { id: part.id.clone(), trace_id: part.trace_id.clone().unwrap_or_default() };
    store(state, vec![part]).await?;
    Ok(axum::Json(res))
}

async fn end(
    state: &AppState,
    who: &Principal,
    req: CallEndReq,
    path: Option<&ProjectId>,
) -> Result<axum::Json<Value>, ApiError> {
    let part = req.end.into_part()?;
    check_all(who, std::slice::from_ref(&part), path)?;
    store(state, vec![part]).await?;
    Ok(axum::Json(json!({})))
}

async fn call_start(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallStartReq>,
) -> Result<axum::Json<CallStartRes>, ApiError> {
    start(&state, &who, req, None).await
}

async fn call_end(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallEndReq>,
) -> Result<axum::Json<Value>, ApiError> {
    end(&state, &who, req, None).await
}

async fn v2_call_start(
    State(state): State<Arc<AppState>>,
    Path((entity, project)): Path<(String, String)>,
    who: Principal,
    Json(req): Json<CallStartReq>,
) -> Result<axum::Json<CallStartRes>, ApiError> {
    start(&state, &who, req, Some(&path_project(&entity, &project)?)).await
}

async fn v2_call_end(
    State(state): State<Arc<AppState>>,
    Path((entity, project)): Path<(String, String)>,
    who: Principal,
    Json(req): Json<CallEndReq>,
) -> Result<axum::Json<Value>, ApiError> {
    end(&state, &who, req, Some(&path_project(&entity, &project)?)).await
}

async fn calls_complete(
    State(state): State<Arc<AppState>>,
    Path((entity, project)): Path<(String, String)>,
    who: Principal,
    body: JsonBody,
) -> Result<axum::Json<Value>, ApiError> {
    let path = path_project(&entity, &project)?;
    let user = who.user_id().to_owned();
    let parts = body
        .parse_with(move |b| parse_batch(b, |c: CompleteCall| c.into_part(Some(&user))))
        .await?;
    check_all(&who, &parts, Some(&path))?;
    store(&state, parts).await?;
    Ok(axum::Json(json!({})))
}

async fn upsert_batch(
    State(state): State<Arc<AppState>>,
    who: Principal,
    body: JsonBody,
) -> Result<axum::Json<Value>, ApiError> {
    let user = who.user_id().to_owned();
    let parts =
        body.parse_with(move |b| parse_batch(b, |i: UpsertItem| i.into_part(Some(&user)))).await?;
    check_all(&who, &parts, None)?;
    let res: Vec<Value> = parts
        .iter()
        .map(|p| match (&p.start, &p.trace_id) {
            (Some(_), Some(trace_id)) => json!({"id": p.id, "trace_id": trace_id}),
            _ => json!({}),
        })
        .collect();
    store(&state, parts).await?;
    Ok(axum::Json(json!({ "res": res })))
}
