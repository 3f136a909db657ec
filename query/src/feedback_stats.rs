//! `/feedback/stats`, `/feedback/payload_schema` and `/feedback/aggregate`
//! (docs/api/feedback.md#feedback-statistics): aggregates of feedback payloads over a time
//! window. The rows are read with the store's ordinary feedback query (its query language
//! evaluated by the backend), at most [`MAX_STATS_FEEDBACK`] of them, and aggregated here.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_domain::series::{MetricSpec, Window};
use heddle_proto::ProjectId;
use heddle_proto::feedback::{FeedbackQueryReq, StoredFeedback};
use heddle_proto::time::Micros;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Most feedback rows one statistics request reads.
pub const MAX_STATS_FEEDBACK: u64 = 100_000;
/// `sample_limit` of `/feedback/payload_schema`: its default and its cap.
const SCHEMA_SAMPLE_DEFAULT: u64 = 2_000;
const SCHEMA_SAMPLE_MAX: u64 = 5_000;
/// Deepest payload path the schema reports.
const SCHEMA_MAX_DEPTH: usize = 8;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/feedback/stats", post(stats))
        .route("/feedback/payload_schema", post(payload_schema))
        .route("/feedback/aggregate", post(aggregate))
}

fn lit_cmp(op: &str, field: &str, v: Value) -> Value {
    json!({op: [{"$getField": field}, {"$literal": v}]})
}

/// `trigger_ref` matches exactly, or, ending in `:*`, every version of the ref.
fn trigger_cond(trigger_ref: &str) -> Value {
    match trigger_ref.strip_suffix('*') {
        Some(prefix) if prefix.ends_with(':') => json!({"$contains": {
            "input": {"$getField": "trigger_ref"}, "substr": {"$literal": prefix}}}),
        _ => lit_cmp("$eq", "trigger_ref", json!(trigger_ref)),
    }
}

/// The project's feedback created in `[after, before)` and matching `extra`, newest first, at
/// most `limit` (more is a 400 when `strict`).
async fn read(
    state: &AppState,
    project: &ProjectId,
    after: Micros,
    before: Micros,
    extra: Vec<Value>,
    limit: u64,
    strict: bool,
) -> Result<Vec<StoredFeedback>, ApiError> {
    let mut conds = vec![
        lit_cmp("$gte", "created_at", json!(after.to_rfc3339())),
        lit_cmp("$lt", "created_at", json!(before.to_rfc3339())),
    ];
    conds.extend(extra);
    let req: FeedbackQueryReq = serde_json::from_value(json!({
        "project_id": project.as_str(),
        "query": {"$expr": {"$and": conds}},
        "sort_by": [{"field": "created_at", "direction": "desc"}],
        "limit": limit + 1,
    }))
    .map_err(|e| ApiError::bad_request(format!("invalid filter: {e}")))?;
    let (q, _) = req.validate()?;
    let (mut rows, _) = state.store.query_feedback(q).await?;
    if rows.len() as u64 > limit {
        if strict {
            return Err(ApiError::bad_request(format!(
                "more than {limit} feedback rows match: narrow the window or the filters"
            )));
        }
        rows.truncate(limit as usize);
    }
    Ok(rows)
}

fn payload(f: &StoredFeedback) -> Value {
    serde_json::from_str(&f.payload).unwrap_or(Value::Null)
}

/// The value at a dot path of a payload.
fn at_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => a.get(seg.parse::<usize>().ok()?),
        _ => None,
    })
}

// ---------------------------------------------------------------------------------------------
// /feedback/stats

#[derive(Debug, Deserialize)]
struct MetricReq {
    json_path: String,
    #[serde(default)]
    aggregations: Vec<String>,
    #[serde(default)]
    percentiles: Vec<f64>,
    #[serde(default = "numeric")]
    value_type: String,
}

fn numeric() -> String {
    "numeric".into()
}

#[derive(Debug, Deserialize)]
struct StatsReq {
    project_id: ProjectId,
    start: Micros,
    end: Option<Micros>,
    granularity: Option<i64>,
    #[serde(default = "crate::usage::utc")]
    timezone: String,
    feedback_type: Option<String>,
    trigger_ref: Option<String>,
    #[serde(default)]
    metrics: Vec<MetricReq>,
}

/// A metric's value in one payload, as a number: booleans are 1/0, numeric strings are not
/// numbers (payloads keep types). `None`: the payload has no usable value there.
fn metric_value(v: &Value, value_type: &str) -> Option<f64> {
    match (value_type, v) {
        ("boolean", Value::Bool(b)) => Some(if *b { 1.0 } else { 0.0 }),
        ("numeric", Value::Number(n)) => n.as_f64(),
        ("numeric", Value::Bool(b)) => Some(if *b { 1.0 } else { 0.0 }),
        ("categorical", v) if !v.is_null() => Some(1.0),
        _ => None,
    }
}

struct Metric {
    path: String,
    slug: String,
    value_type: String,
    spec: MetricSpec,
}

async fn stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<StatsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let window = Window::new(req.start, req.end, req.granularity, &req.timezone)?;
    if req.metrics.len() > 32 {
        return Err(ApiError::bad_request("at most 32 metrics per request"));
    }
    let metrics = req
        .metrics
        .into_iter()
        .map(|m| {
            if !["numeric", "boolean", "categorical"].contains(&m.value_type.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "value_type {:?}: expected numeric, boolean or categorical",
                    m.value_type
                )));
            }
            let aggs = if !m.aggregations.is_empty() {
                m.aggregations
            } else if m.value_type == "numeric" {
                vec!["avg".into(), "min".into(), "max".into()]
            } else if m.value_type == "boolean" {
                vec!["count_true".into(), "count_false".into()]
            } else {
                vec!["count".into()]
            };
            let percentiles = if m.value_type == "numeric" { m.percentiles } else { vec![] };
            Ok(Metric {
                slug: m.json_path.replace('.', "_"),
                path: m.json_path,
                value_type: m.value_type,
                spec: MetricSpec::new(&aggs, &percentiles)?,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let mut extra = Vec::new();
    if let Some(t) = &req.feedback_type {
        extra.push(lit_cmp("$eq", "feedback_type", json!(t)));
    }
    if let Some(t) = &req.trigger_ref {
        extra.push(trigger_cond(t));
    }
    let rows =
        read(&state, &req.project_id, window.start, window.end, extra, MAX_STATS_FEEDBACK, true)
            .await?;
    let payloads: Vec<(Micros, Value)> =
        rows.iter().map(|f| (window.bucket(f.created_at), payload(f))).collect();

    let values = |m: &Metric, of: &mut dyn Iterator<Item = &Value>| -> Vec<f64> {
        of.filter_map(|p| at_path(p, &m.path).and_then(|v| metric_value(v, &m.value_type)))
            .collect()
    };
    let mut by_bucket: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
    for (t, p) in &payloads {
        by_bucket.entry(t.0).or_default().push(p);
    }
    let buckets: Vec<Value> = by_bucket
        .iter()
        .map(|(t, ps)| {
            let mut row = Map::new();
            row.insert("timestamp".into(), json!(Micros(*t).to_rfc3339()));
            row.insert("count".into(), json!(ps.len()));
            for m in &metrics {
                let mut vs = values(m, &mut ps.iter().copied());
                m.spec.write(&m.slug, &mut vs, false, &mut row);
            }
            Value::Object(row)
        })
        .collect();
    let mut window_stats = Map::new();
    for m in &metrics {
        let mut vs = values(m, &mut payloads.iter().map(|(_, p)| p));
        let mut row = Map::new();
        m.spec.write(&m.slug, &mut vs, false, &mut row);
        // Keyed by aggregation name alone inside the metric's entry.
        let suffix = format!("_{}", m.slug);
        let by_agg: Map<String, Value> = row
            .into_iter()
            .map(|(k, v)| (k.strip_suffix(&suffix).unwrap_or(&k).to_owned(), v))
            .collect();
        window_stats.insert(m.slug.clone(), Value::Object(by_agg));
    }
    Ok(axum::Json(json!({
        "start": window.start,
        "end": window.end,
        "granularity": window.granularity,
        "timezone": req.timezone,
        "buckets": buckets,
        "window_stats": window_stats,
    })))
}

// ---------------------------------------------------------------------------------------------
// /feedback/payload_schema

#[derive(Debug, Deserialize)]
struct SchemaReq {
    project_id: ProjectId,
    start: Micros,
    end: Option<Micros>,
    feedback_type: Option<String>,
    trigger_ref: Option<String>,
    sample_limit: Option<i64>,
}

/// Adds the leaf paths of `v` under `prefix` with their types; the first type seen wins.
fn leaves(v: &Value, prefix: &str, depth: usize, out: &mut BTreeMap<String, &'static str>) {
    let ty = match v {
        Value::Object(m) if depth < SCHEMA_MAX_DEPTH => {
            for (k, v) in m {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                leaves(v, &path, depth + 1, out);
            }
            return;
        }
        Value::Number(_) => "numeric",
        Value::Bool(_) => "boolean",
        Value::String(_) => "categorical",
        _ => return,
    };
    if !prefix.is_empty() {
        out.entry(prefix.to_owned()).or_insert(ty);
    }
}

async fn payload_schema(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SchemaReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let sample = match req.sample_limit {
        None => SCHEMA_SAMPLE_DEFAULT,
        Some(n) if n >= 1 => (n as u64).min(SCHEMA_SAMPLE_MAX),
        Some(n) => {
            return Err(ApiError::bad_request(format!("sample_limit must be >= 1, got {n}")));
        }
    };
    let end = req.end.unwrap_or_else(Micros::now);
    if end.0 <= req.start.0 {
        return Err(ApiError::bad_request("end must be after start"));
    }
    let mut extra = Vec::new();
    if let Some(t) = &req.feedback_type {
        extra.push(lit_cmp("$eq", "feedback_type", json!(t)));
    }
    if let Some(t) = &req.trigger_ref {
        extra.push(trigger_cond(t));
    }
    let rows = read(&state, &req.project_id, req.start, end, extra, sample, false).await?;
    let mut paths = BTreeMap::new();
    for f in &rows {
        leaves(&payload(f), "", 0, &mut paths);
    }
    let paths: Vec<Value> =
        paths.into_iter().map(|(p, t)| json!({"json_path": p, "value_type": t})).collect();
    Ok(axum::Json(json!({ "paths": paths })))
}

// ---------------------------------------------------------------------------------------------
// /feedback/aggregate

#[derive(Debug, Deserialize)]
struct AggregateReq {
    project_id: ProjectId,
    after_ms: i64,
    before_ms: i64,
    #[serde(default)]
    feedback_types: Vec<String>,
    #[serde(default)]
    group_by: Vec<String>,
    #[serde(default)]
    scorer_ids: Vec<String>,
    #[serde(default)]
    monitor_ids: Vec<String>,
    rating_min: Option<f64>,
    rating_max: Option<f64>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    span_agent_names: Vec<String>,
    #[serde(default)]
    span_types: Vec<String>,
    time_bucket_seconds: Option<i64>,
}

/// `id` matches one of `patterns`: exactly, or as a prefix when the pattern ends with `*`.
fn matches_any(id: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => id == p,
    })
}

/// A scorer row's ratings and tags (docs/api/feedback.md#aggregate-scorer-feedback): the
/// numeric members of `payload.output` (a bare number is the rating `output`) and the names of
/// its `true` members (a bare string is a tag).
fn ratings_and_tags(payload: &Value) -> (Vec<(String, f64)>, Vec<String>) {
    let (mut ratings, mut tags) = (Vec::new(), Vec::new());
    match payload.get("output") {
        Some(Value::Number(n)) => ratings.extend(n.as_f64().map(|f| ("output".to_owned(), f))),
        Some(Value::String(s)) => tags.push(s.clone()),
        Some(Value::Object(m)) => {
            for (k, v) in m {
                match v {
                    Value::Number(n) => ratings.extend(n.as_f64().map(|f| (k.clone(), f))),
                    Value::Bool(true) => tags.push(k.clone()),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    (ratings, tags)
}

#[derive(Default)]
struct Cell {
    total: u64,
    scored: u64,
    rating_counts: BTreeMap<String, u64>,
    rating_sums: BTreeMap<String, f64>,
    tag_counts: BTreeMap<String, u64>,
}

async fn aggregate(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<AggregateReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    if req.before_ms <= req.after_ms {
        return Err(ApiError::bad_request("before_ms must be after after_ms"));
    }
    if let Some(g) = req.group_by.iter().find(|g| g.as_str() != "scorer_id") {
        return Err(ApiError::bad_request(format!(
            "group_by {g:?} is not supported: heddle groups by scorer_id only (agent spans carry \
             no agent name or status)"
        )));
    }
    if !req.span_agent_names.is_empty() || !req.span_types.is_empty() {
        return Err(ApiError::bad_request(
            "span_agent_names and span_types are not supported (agent spans are not modelled)",
        ));
    }
    let bucket_us = match req.time_bucket_seconds {
        Some(s) if s <= 0 => {
            return Err(ApiError::bad_request(format!("time_bucket_seconds must be > 0, got {s}")));
        }
        Some(s)
            if (req.before_ms - req.after_ms) / 1000 / s > heddle_domain::series::MAX_BUCKETS =>
        {
            return Err(ApiError::bad_request(format!(
                "time_bucket_seconds {s} gives more than {} buckets",
                heddle_domain::series::MAX_BUCKETS
            )));
        }
        s => s.map(|s| s * 1_000_000),
    };
    let after = Micros(req.after_ms.saturating_mul(1000));
    let before = Micros(req.before_ms.saturating_mul(1000));
    let rows =
        read(&state, &req.project_id, after, before, vec![], MAX_STATS_FEEDBACK, true).await?;
    let mut cells: BTreeMap<(Option<i64>, Option<String>), Cell> = BTreeMap::new();
    for f in &rows {
        if !req.feedback_types.is_empty()
            && !req.feedback_types.iter().any(|t| f.feedback_type.starts_with(t.as_str()))
        {
            continue;
        }
        let scorer = f.runnable_ref.clone().unwrap_or_else(|| f.feedback_type.clone());
        if !req.scorer_ids.is_empty() && !matches_any(&scorer, &req.scorer_ids) {
            continue;
        }
        let monitor = f.trigger_ref.as_deref().unwrap_or("");
        if !req.monitor_ids.is_empty() && !matches_any(monitor, &req.monitor_ids) {
            continue;
        }
        let (ratings, tags) = ratings_and_tags(&payload(f));
        if (req.rating_min.is_some() || req.rating_max.is_some())
            && !ratings.iter().any(|(_, r)| {
                req.rating_min.is_none_or(|m| *r >= m) && req.rating_max.is_none_or(|m| *r <= m)
            })
        {
            continue;
        }
        if !req.tags.is_empty() && !tags.iter().any(|t| req.tags.contains(t)) {
            continue;
        }
        let bucket = bucket_us.map(|b| f.created_at.0.div_euclid(b) * b / 1000);
        let group = (!req.group_by.is_empty()).then(|| scorer.clone());
        let cell = cells.entry((bucket, group)).or_default();
        cell.total += 1;
        if !ratings.is_empty() || !tags.is_empty() {
            cell.scored += 1;
        }
        for (k, r) in ratings {
            *cell.rating_counts.entry(k.clone()).or_default() += 1;
            *cell.rating_sums.entry(k).or_default() += r;
        }
        for t in tags {
            *cell.tag_counts.entry(t).or_default() += 1;
        }
    }
    let buckets: Vec<Value> = cells
        .into_iter()
        .map(|((bucket, group), c)| {
            let group: Map<String, Value> =
                group.map(|g| ("scorer_id".to_owned(), json!(g))).into_iter().collect();
            json!({
                "time_bucket_start_ms": bucket,
                "group": group,
                "total_count": c.total,
                "scored_count": c.scored,
                "rating_counts": c.rating_counts,
                "rating_sums": c.rating_sums,
                "tag_counts": c.tag_counts,
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "after_ms": req.after_ms,
        "before_ms": req.before_ms,
        "time_bucket_seconds": req.time_bucket_seconds,
        "buckets": buckets,
    })))
}
