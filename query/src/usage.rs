//! `/trace/usage`, `/calls/usage` and `/calls/stats` (docs/api/usage.md): token usage and costs
//! rolled up over call trees, and time series of call metrics. The calls are read through the
//! store's ordinary calls query (filters and the query language evaluated by the backend), with
//! no large member, and aggregated here by `heddle_domain::usage` and `heddle_domain::series`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use futures::StreamExt;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_domain::prices::PriceBook;
use heddle_domain::series::{MetricSpec, Window};
use heddle_domain::usage::{Forest, ModelUsage, Usage, UsageCall};
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallsFilter, CallsQueryReq};
use heddle_proto::time::Micros;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Most calls one usage or stats request reads (and the default `limit`): the aggregation holds
/// each call's id, parent and usage in memory.
pub const MAX_USAGE_CALLS: u64 = 100_000;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/trace/usage", post(trace_usage))
        .route("/calls/usage", post(calls_usage))
        .route("/calls/stats", post(call_stats))
}

#[derive(Debug, Deserialize)]
struct TraceUsageReq {
    project_id: ProjectId,
    filter: Option<CallsFilter>,
    query: Option<heddle_ql::Query>,
    #[serde(default)]
    include_costs: bool,
    limit: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct CallsUsageReq {
    project_id: ProjectId,
    call_ids: Vec<String>,
    #[serde(default)]
    include_costs: bool,
    limit: Option<i64>,
}

fn limit(requested: Option<i64>) -> Result<u64, ApiError> {
    match requested {
        None => Ok(MAX_USAGE_CALLS),
        Some(n) if n >= 1 && n as u64 <= MAX_USAGE_CALLS => Ok(n as u64),
        Some(n) => Err(ApiError::bad_request(format!(
            "limit must be within 1..={MAX_USAGE_CALLS}, got {n}"
        ))),
    }
}

/// The calls matching `filter` and `query`, without their large members; more than `limit`
/// is a 400 (a partial tree would give wrong totals).
async fn read_calls(
    state: &AppState,
    project: &ProjectId,
    filter: Option<CallsFilter>,
    query: Option<heddle_ql::Query>,
    limit: u64,
) -> Result<Vec<Call>, ApiError> {
    let req = CallsQueryReq {
        filter,
        query,
        limit: Some(limit as i64 + 1),
        columns: Some(vec!["id".into()]),
        ..CallsQueryReq::for_project(project.clone())
    };
    let mut rows = state.store.query_calls(req.validate()?).await?;
    let mut calls = Vec::new();
    while let Some(call) = rows.next().await {
        calls.push(call?);
        if calls.len() as u64 > limit {
            return Err(ApiError::bad_request(format!(
                "more than {limit} calls match: narrow the filter (or raise limit, at most \
                 {MAX_USAGE_CALLS})"
            )));
        }
    }
    Ok(calls)
}

fn usage_call(c: &Call) -> UsageCall {
    UsageCall {
        id: c.id.clone(),
        parent_id: c.parent_id.clone(),
        started_at: c.started_at,
        ended: c.ended_at.is_some(),
        usage: c.summary.get("usage").cloned().unwrap_or(Value::Null),
    }
}

async fn prices(
    state: &AppState,
    project: &ProjectId,
    on: bool,
) -> Result<Option<PriceBook>, ApiError> {
    Ok(if on { Some(PriceBook::new(state.store.project_costs(project).await?)) } else { None })
}

async fn trace_usage(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TraceUsageReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let limit = limit(req.limit)?;
    let calls = read_calls(&state, &req.project_id, req.filter, req.query, limit).await?;
    let forest = Forest::new(calls.iter().map(usage_call).collect());
    let book = prices(&state, &req.project_id, req.include_costs).await?;
    let rolled = forest.rolled_up(book.as_ref());
    let call_usage: BTreeMap<&str, &ModelUsage> =
        forest.calls().iter().zip(&rolled).map(|(c, u)| (c.id.as_str(), u)).collect();
    let unfinished: Vec<&str> =
        forest.calls().iter().filter(|c| !c.ended).map(|c| c.id.as_str()).collect();
    Ok(axum::Json(json!({"call_usage": call_usage, "unfinished_call_ids": unfinished})))
}

async fn calls_usage(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallsUsageReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let limit = limit(req.limit)?;
    let roots = CallsFilter { call_ids: Some(req.call_ids.clone()), ..Default::default() };
    roots.check()?;
    let mut call_usage: BTreeMap<String, ModelUsage> =
        req.call_ids.iter().map(|id| (id.clone(), ModelUsage::new())).collect();
    if req.call_ids.is_empty() {
        return Ok(axum::Json(json!({"call_usage": call_usage, "unfinished_call_ids": []})));
    }
    let found = read_calls(&state, &req.project_id, Some(roots), None, limit).await?;
    let trace_ids: Vec<String> =
        found.iter().map(|c| c.trace_id.clone()).collect::<HashSet<_>>().into_iter().collect();
    let mut unfinished = Vec::new();
    if !trace_ids.is_empty() {
        let filter = CallsFilter { trace_ids: Some(trace_ids), ..Default::default() };
        let calls = read_calls(&state, &req.project_id, Some(filter), None, limit).await?;
        let forest = Forest::new(calls.iter().map(usage_call).collect());
        let book = prices(&state, &req.project_id, req.include_costs).await?;
        let mut rolled = forest.rolled_up(book.as_ref());
        let index: HashMap<&str, usize> =
            forest.calls().iter().enumerate().map(|(i, c)| (c.id.as_str(), i)).collect();
        let mut seen = HashSet::new();
        for id in &req.call_ids {
            let Some(&i) = index.get(id.as_str()) else { continue };
            call_usage.insert(id.clone(), std::mem::take(&mut rolled[i]));
            for n in forest.subtree(i) {
                let c = &forest.calls()[n];
                if !c.ended && seen.insert(n) {
                    unfinished.push(c.id.clone());
                }
            }
        }
    }
    Ok(axum::Json(json!({"call_usage": call_usage, "unfinished_call_ids": unfinished})))
}

// ---------------------------------------------------------------------------------------------
// /calls/stats

#[derive(Debug, Deserialize)]
struct MetricReq {
    metric: String,
    #[serde(default)]
    aggregations: Option<Vec<String>>,
    #[serde(default)]
    percentiles: Vec<f64>,
}

#[derive(Debug, Deserialize)]
struct CallStatsReq {
    project_id: ProjectId,
    start: Micros,
    end: Option<Micros>,
    granularity: Option<i64>,
    #[serde(default = "utc")]
    timezone: String,
    filter: Option<CallsFilter>,
    call_metrics: Option<Vec<MetricReq>>,
    usage_metrics: Option<Vec<MetricReq>>,
}

pub fn utc() -> String {
    "UTC".into()
}

/// Most metrics one request may ask for (each is a column of every bucket).
const MAX_METRICS: usize = 32;

const CALL_METRICS: [&str; 3] = ["latency_ms", "call_count", "error_count"];
const USAGE_METRICS: [&str; 8] = [
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "input_cost",
    "output_cost",
    "total_cost",
];

fn specs(
    reqs: Option<Vec<MetricReq>>,
    known: &[&'static str],
) -> Result<Vec<(&'static str, MetricSpec)>, ApiError> {
    let reqs = reqs.unwrap_or_default();
    if reqs.len() > MAX_METRICS {
        return Err(ApiError::bad_request(format!("at most {MAX_METRICS} metrics per request")));
    }
    reqs.into_iter()
        .map(|m| {
            let name = known.iter().find(|k| **k == m.metric).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unknown metric {:?}: expected one of {known:?}",
                    m.metric
                ))
            })?;
            let aggs = m.aggregations.unwrap_or_else(|| vec!["sum".into()]);
            Ok((*name, MetricSpec::new(&aggs, &m.percentiles)?))
        })
        .collect()
}

/// One call metric's value for a call (`None`: the call has no value, e.g. no latency yet).
fn call_metric(name: &str, c: &Call) -> Option<f64> {
    match name {
        "latency_ms" => c.ended_at.map(|e| ((e.0 - c.started_at.0) / 1000) as f64),
        "call_count" => Some(1.0),
        "error_count" => Some(if c.exception.is_some() { 1.0 } else { 0.0 }),
        _ => None,
    }
}

fn usage_metric(name: &str, u: &Usage) -> f64 {
    let cost = |c: Option<f64>| c.unwrap_or(0.0);
    let input_cost = cost(u.prompt_tokens_total_cost)
        + cost(u.cache_read_input_tokens_total_cost)
        + cost(u.cache_creation_input_tokens_total_cost);
    match name {
        "input_tokens" => u.prompt_tokens as f64,
        "output_tokens" => u.completion_tokens as f64,
        "total_tokens" => u.total_tokens as f64,
        "cache_read_input_tokens" => u.cache_read_input_tokens as f64,
        "cache_creation_input_tokens" => u.cache_creation_input_tokens as f64,
        "input_cost" => input_cost,
        "output_cost" => cost(u.completion_tokens_total_cost),
        _ => input_cost + cost(u.completion_tokens_total_cost),
    }
}

async fn call_stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CallStatsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let window = Window::new(req.start, req.end, req.granularity, &req.timezone)?;
    let call_specs = specs(req.call_metrics, &CALL_METRICS)?;
    let usage_specs = specs(req.usage_metrics, &USAGE_METRICS)?;
    let started = |op: &str, t: Micros| json!({op: [{"$getField": "started_at"}, {"$literal": t.to_rfc3339()}]});
    let query: heddle_ql::Query = serde_json::from_value(json!({"$expr": {"$and": [
        started("$gte", window.start),
        started("$lt", window.end),
    ]}}))
    .map_err(|e| ApiError::Internal(format!("building the window query: {e}")))?;
    let calls = if call_specs.is_empty() && usage_specs.is_empty() {
        Vec::new()
    } else {
        read_calls(&state, &req.project_id, req.filter, Some(query), MAX_USAGE_CALLS).await?
    };

    let mut by_bucket: BTreeMap<i64, Vec<&Call>> = BTreeMap::new();
    for c in &calls {
        by_bucket.entry(window.bucket(c.started_at).0).or_default().push(c);
    }
    let call_buckets = (!call_specs.is_empty()).then(|| {
        by_bucket
            .iter()
            .map(|(t, calls)| {
                let mut row = Map::new();
                row.insert("timestamp".into(), json!(Micros(*t).to_rfc3339()));
                for (name, spec) in &call_specs {
                    let mut values: Vec<f64> =
                        calls.iter().filter_map(|c| call_metric(name, c)).collect();
                    spec.write(name, &mut values, true, &mut row);
                }
                Value::Object(row)
            })
            .collect::<Vec<_>>()
    });

    let usage_buckets = if usage_specs.is_empty() {
        None
    } else {
        let wants_cost = usage_specs.iter().any(|(n, _)| n.ends_with("_cost"));
        let book = prices(&state, &req.project_id, wants_cost).await?;
        let forest = Forest::new(calls.iter().map(usage_call).collect());
        let counted = forest.counted(book.as_ref());
        // (bucket, model) → each call's usage of the model.
        let mut cells: BTreeMap<(i64, &str), Vec<&Usage>> = BTreeMap::new();
        for (c, usage) in forest.calls().iter().zip(&counted) {
            for (model, u) in usage {
                cells.entry((window.bucket(c.started_at).0, model.as_str())).or_default().push(u);
            }
        }
        Some(
            cells
                .into_iter()
                .map(|((t, model), usages)| {
                    let mut row = Map::new();
                    row.insert("timestamp".into(), json!(Micros(t).to_rfc3339()));
                    row.insert("model".into(), json!(model));
                    for (name, spec) in &usage_specs {
                        let mut values: Vec<f64> =
                            usages.iter().map(|u| usage_metric(name, u)).collect();
                        spec.write(name, &mut values, !name.ends_with("_cost"), &mut row);
                    }
                    Value::Object(row)
                })
                .collect::<Vec<_>>(),
        )
    };
    Ok(axum::Json(json!({
        "start": window.start,
        "end": window.end,
        "granularity": window.granularity,
        "timezone": req.timezone,
        "call_buckets": call_buckets,
        "usage_buckets": usage_buckets,
    })))
}
