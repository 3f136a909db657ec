//! The agents API (docs/api/agents.md): read views over the OpenTelemetry GenAI spans stored as
//! calls. Each route reads its candidate calls with one calls query (project, time window, ids
//! pushed down into SQL on either backend), reads each call as an [`AgentSpan`], filters the
//! spans with the request's `query` through the query language's evaluator, and builds the view
//! in `heddle_domain::agents`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use futures::StreamExt;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_domain::agents::AgentSpan;
use heddle_domain::agents::catalog::SpanField;
use heddle_domain::agents::chat::trace_chat;
use heddle_domain::agents::requests::*;
use heddle_domain::agents::stats::StatsPlan;
use heddle_domain::agents::views::{self, Measure, SearchOpts, page};
use heddle_proto::ProjectId;
use heddle_proto::calls::CallsQueryReq;
use heddle_proto::time::Micros;
use heddle_ql::TExpr;
use heddle_ql::eval::eval;
use serde_json::{Value, json};

/// Most candidate spans one request reads: views are computed in memory, so a request over
/// more asks for a narrower window or filter (docs/api/agents.md#bounds).
pub const MAX_SCANNED_SPANS: u64 = 50_000;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/agents/query", post(agents_query))
        .route("/agents/agent-versions/query", post(versions_query))
        .route("/agents/spans/query", post(spans_query))
        .route("/agents/spans/stats", post(spans_stats))
        .route("/agents/spans/custom-attrs/schema", post(custom_attrs_schema))
        .route("/agents/search", post(search))
        .route("/agents/traces/chat", post(trace_chat_route))
        .route("/agents/conversations/chat", post(conversation_chat))
        .route("/agents/conversations/spans", post(conversation_spans))
}

/// What SQL narrows the candidates to; everything else is filtered on the spans.
#[derive(Default)]
struct Scan {
    after: Option<Micros>,
    before: Option<Micros>,
    trace_ids: Option<Vec<String>>,
    conversation_ids: Option<Vec<String>>,
    agent_name: Option<String>,
    /// Keep messages and tool payloads (chat, search, detail reads).
    details: bool,
}

/// The agent spans of `project` that `scan` and `expr` select, by start time.
async fn load(
    state: &AppState,
    project: &ProjectId,
    scan: Scan,
    expr: Option<&TExpr<SpanField>>,
) -> Result<Vec<AgentSpan>, ApiError> {
    let text_nonempty =
        |path: &str| json!({"$not": [{"$eq": [{"$getField": path}, {"$literal": ""}]}]});
    let mut conds = vec![json!({"$or": [text_nonempty("attributes.operation_name"),
                                        text_nonempty("attributes.agent_name")]})];
    // Literals are bound parameters of the calls query, never SQL text.
    if let Some(a) = scan.after {
        conds.push(json!({"$gte": [{"$getField": "started_at"}, {"$literal": a.to_rfc3339()}]}));
    }
    if let Some(b) = scan.before {
        conds.push(json!({"$lt": [{"$getField": "started_at"}, {"$literal": b.to_rfc3339()}]}));
    }
    if let Some(n) = &scan.agent_name {
        conds.push(json!({"$eq": [{"$getField": "attributes.agent_name"}, {"$literal": n}]}));
    }
    let req = json!({
        "project_id": project.as_str(),
        "filter": {"trace_ids": scan.trace_ids, "thread_ids": scan.conversation_ids},
        "query": {"$expr": {"$and": conds}},
        "sort_by": [{"field": "started_at", "direction": "asc"}],
        "limit": MAX_SCANNED_SPANS + 1,
    });
    let req: CallsQueryReq =
        serde_json::from_value(req).map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut rows = state.store.query_calls(req.validate()?).await?;
    let mut spans = Vec::new();
    let mut scanned = 0u64;
    while let Some(call) = rows.next().await {
        scanned += 1;
        if scanned > MAX_SCANNED_SPANS {
            return Err(ApiError::bad_request(format!(
                "more than {MAX_SCANNED_SPANS} agent spans match: narrow the request with \
                 started_after/started_before (or start/end) or a more selective filter"
            )));
        }
        if let Some(span) = AgentSpan::from_call(&call?) {
            spans.push(span);
        }
    }
    inherit_conversations(&mut spans);
    spans.retain_mut(|span| {
        if !scan.details {
            span.strip_details();
        }
        expr.is_none_or(|e| eval(e, &*span) == Some(true))
    });
    Ok(spans)
}

/// A conversation id is usually set on the agent span only: the other spans of its trace (the
/// turn) belong to the same conversation.
fn inherit_conversations(spans: &mut [AgentSpan]) {
    let mut by_trace: HashMap<String, String> = HashMap::new();
    for s in spans.iter() {
        if let Some(c) = &s.conversation_id {
            by_trace.entry(s.trace_id.clone()).or_insert_with(|| c.clone());
        }
    }
    for s in spans.iter_mut().filter(|s| s.conversation_id.is_none()) {
        s.conversation_id = by_trace.get(&s.trace_id).cloned();
    }
}

async fn agents_query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<AgentsQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (limit, offset) = paging(req.limit, req.offset, DEFAULT_QUERY_LIMIT, MAX_QUERY_LIMIT)?;
    let name = req.filters.unwrap_or_default().agent_name;
    check_name("filters.agent_name", &name)?;
    let sort = sort_terms(&req.sort_by, |f| {
        f != "agent_version" && views::AGENT_SORT_FIELDS.contains(&f)
    })?;
    let scan = Scan { agent_name: name, ..Scan::default() };
    let spans = load(&state, &req.project_id, scan, None).await?;
    let rows = views::agents(req.project_id.as_str(), &spans, false, sort);
    let total = rows.len();
    Ok(axum::Json(json!({"agents": page(rows, offset, limit), "total_count": total})))
}

async fn versions_query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<AgentVersionsQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (limit, offset) = paging(req.limit, req.offset, DEFAULT_QUERY_LIMIT, MAX_QUERY_LIMIT)?;
    check_name("agent_name", &Some(req.agent_name.clone()))?;
    let sort = sort_terms(&req.sort_by, |f| views::AGENT_SORT_FIELDS.contains(&f))?;
    let scan = Scan { agent_name: Some(req.agent_name), ..Scan::default() };
    let spans = load(&state, &req.project_id, scan, None).await?;
    let rows = views::agents(req.project_id.as_str(), &spans, true, sort);
    let total = rows.len();
    Ok(axum::Json(json!({"versions": page(rows, offset, limit), "total_count": total})))
}

async fn spans_query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SpansQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    req.check()?;
    let (limit, offset) = paging(req.limit, req.offset, DEFAULT_QUERY_LIMIT, MAX_QUERY_LIMIT)?;
    let expr = span_expr(&req.query)?;
    let group_by: Vec<(SpanField, String)> = req
        .group_by
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(GroupByRef::resolve)
        .collect::<Result<_, _>>()?;
    let scan = |details| Scan {
        after: req.started_after,
        before: req.started_before,
        details,
        ..Scan::default()
    };
    if group_by.is_empty() {
        let sortable = |f: &str| {
            heddle_domain::agents::catalog::field(f).is_some() || f.starts_with("custom_attrs_")
        };
        let mut sort = sort_terms(&req.sort_by, sortable)?;
        if sort.is_empty() {
            sort.push(("started_at".into(), heddle_ql::Direction::Desc));
        }
        sort.push(("span_id".into(), heddle_ql::Direction::Asc));
        let sort: Vec<(SpanField, heddle_ql::Direction)> = sort
            .into_iter()
            .map(|(f, d)| {
                Ok((
                    heddle_ql::Catalog::resolve(&heddle_domain::agents::catalog::SpanCatalog, &f)?
                        .0,
                    d,
                ))
            })
            .collect::<Result<_, heddle_proto::ProtoError>>()?;
        let details = req.include_details == Some(true);
        let mut spans = load(&state, &req.project_id, scan(details), expr.as_ref()).await?;
        heddle_ql::eval::sort_rows(&mut spans, &sort);
        let total = spans.len();
        let spans = page(spans, offset, limit);
        return Ok(axum::Json(json!({"spans": spans, "groups": [], "total_count": total})));
    }
    let measures: Vec<Measure> = req
        .measures
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(Measure::new)
        .collect::<Result<_, _>>()?;
    let aliases: Vec<&str> = group_by
        .iter()
        .map(|(_, a)| a.as_str())
        .chain(measures.iter().map(|m| m.alias.as_str()))
        .collect();
    let sort = sort_terms(&req.sort_by, |f| {
        views::GROUP_SORT_FIELDS.contains(&f) || aliases.contains(&f)
    })?;
    // Message previews of conversation groups need the messages.
    let details = group_by.iter().any(|(f, _)| f.name() == "conversation_id");
    let spans = load(&state, &req.project_id, scan(details), expr.as_ref()).await?;
    let filters = req.group_filters.as_deref().unwrap_or_default();
    let rows = views::groups(&spans, &group_by, &measures, filters, &sort)?;
    let total = rows.len();
    Ok(axum::Json(json!({"spans": [], "groups": page(rows, offset, limit), "total_count": total})))
}

async fn spans_stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SpanStatsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let plan = StatsPlan::new(&req, Micros::now())?;
    let expr = span_expr(&req.query)?;
    let scan = Scan { after: Some(plan.start), before: Some(plan.end), ..Scan::default() };
    let spans = load(&state, &req.project_id, scan, expr.as_ref()).await?;
    Ok(axum::Json(json!({
        "start": plan.start, "end": plan.end, "granularity": plan.granularity_s,
        "timezone": "UTC", "bucket_type": "time",
        "columns": plan.columns(), "rows": plan.rows(&spans),
    })))
}

async fn custom_attrs_schema(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<CustomAttrsSchemaReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (limit, offset) = paging(req.limit, req.offset, DEFAULT_SCHEMA_LIMIT, MAX_SCHEMA_LIMIT)?;
    if limit == 0 {
        return Err(ApiError::bad_request("limit must be >= 1"));
    }
    let expr = span_expr(&req.query)?;
    let scan = Scan { after: req.started_after, before: req.started_before, ..Scan::default() };
    let spans = load(&state, &req.project_id, scan, expr.as_ref()).await?;
    let rows = views::custom_attr_schema(&spans);
    let has_more = rows.len() as u64 > offset + limit;
    Ok(axum::Json(json!({
        "attributes": page(rows, offset, limit), "has_more": has_more,
        "limit": limit, "offset": offset,
    })))
}

async fn search(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<SearchReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (limit, offset) = paging(req.limit, req.offset, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT)?;
    if req.query.len() > MAX_SEARCH_QUERY_BYTES {
        return Err(ApiError::bad_request(format!(
            "query is longer than {MAX_SEARCH_QUERY_BYTES} bytes"
        )));
    }
    for (what, v) in [
        ("conversation_id", &req.conversation_id),
        ("agent_name", &req.agent_name),
        ("provider_name", &req.provider_name),
        ("request_model", &req.request_model),
        ("trace_id", &req.trace_id),
    ] {
        check_name(what, v)?;
    }
    const ROLES: [&str; 7] =
        ["", "user", "assistant", "system", "tool", "tool_call", "tool_result"];
    if let Some(bad) = req.roles.iter().flatten().find(|r| !ROLES.contains(&r.as_str())) {
        return Err(ApiError::bad_request(format!("unknown role {bad:?}")));
    }
    let mut trace_ids = req.trace_id.clone().map(|t| vec![t]);
    if let Some(c) = &req.conversation_id {
        // The conversation's turns, then all their spans.
        let turns =
            conversation_traces(&state, &req.project_id, vec![c.clone()], None, None).await?;
        trace_ids = Some(match trace_ids {
            Some(t) => t.into_iter().filter(|t| turns.contains(t)).collect(),
            None => turns,
        });
    }
    if trace_ids.as_ref().is_some_and(Vec::is_empty) {
        return Ok(axum::Json(json!({"results": [], "total_conversations": 0})));
    }
    let scan = Scan {
        after: req.started_after,
        before: req.started_before,
        trace_ids,
        details: true,
        ..Scan::default()
    };
    let mut spans = load(&state, &req.project_id, scan, None).await?;
    spans.retain(|s| {
        let is = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
        is(&req.agent_name, &s.agent_name)
            && is(&req.provider_name, &s.provider_name)
            && is(&req.request_model, &s.request_model)
    });
    let opts = SearchOpts {
        query: &req.query,
        roles: req.roles.as_deref(),
        truncate: req.truncate_content.unwrap_or(true),
        offset,
        limit,
    };
    let (results, total) = views::search(&spans, &opts);
    Ok(axum::Json(json!({"results": results, "total_conversations": total})))
}

fn check_id(what: &str, id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > MAX_NAME_BYTES {
        return Err(ApiError::bad_request(format!("{what} must be 1 to {MAX_NAME_BYTES} bytes")));
    }
    Ok(())
}

async fn trace_chat_route(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TraceChatReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    check_id("trace_id", &req.trace_id)?;
    let scan =
        Scan { trace_ids: Some(vec![req.trace_id.clone()]), details: true, ..Scan::default() };
    let spans = load(&state, &req.project_id, scan, None).await?;
    Ok(axum::Json(trace_chat(&req.trace_id, &spans)))
}

/// The traces of a conversation (its turns), oldest first.
async fn conversation_traces(
    state: &AppState,
    project: &ProjectId,
    ids: Vec<String>,
    after: Option<Micros>,
    before: Option<Micros>,
) -> Result<Vec<String>, ApiError> {
    let scan = Scan { conversation_ids: Some(ids), after, before, ..Scan::default() };
    let mut traces: Vec<String> = Vec::new();
    for s in load(state, project, scan, None).await? {
        if !traces.contains(&s.trace_id) {
            traces.push(s.trace_id);
        }
    }
    Ok(traces)
}

async fn conversation_chat(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ConversationChatReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    check_id("conversation_id", &req.conversation_id)?;
    let (limit, offset) =
        paging(req.limit, req.offset, MAX_CONVERSATION_TURNS, MAX_CONVERSATION_TURNS)?;
    let traces =
        conversation_traces(&state, &req.project_id, vec![req.conversation_id.clone()], None, None)
            .await?;
    let total = traces.len() as u64;
    // `offset` skips the most recent turns; the page is returned oldest first.
    let end = total.saturating_sub(offset) as usize;
    let start = end.saturating_sub(limit as usize);
    let selected = traces[start..end].to_vec();
    let mut turns = Vec::with_capacity(selected.len());
    if !selected.is_empty() {
        let scan = Scan { trace_ids: Some(selected.clone()), details: true, ..Scan::default() };
        let spans = load(&state, &req.project_id, scan, None).await?;
        for t in &selected {
            let of_trace: Vec<AgentSpan> =
                spans.iter().filter(|s| &s.trace_id == t).cloned().collect();
            turns.push(trace_chat(t, &of_trace));
        }
    }
    Ok(axum::Json(json!({
        "conversation_id": req.conversation_id, "turns": turns, "total_turns": total,
        "has_more": start > 0, "limit": limit, "offset": offset,
        "total_cost_usd": null, "feedback": null,
    })))
}

async fn conversation_spans(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ConversationSpansReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    if req.conversation_ids.len() > MAX_CONVERSATION_IDS {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_CONVERSATION_IDS} conversation_ids, got {}",
            req.conversation_ids.len()
        )));
    }
    for id in &req.conversation_ids {
        check_id("conversation id", id)?;
    }
    if req.conversation_ids.is_empty() {
        return Ok(axum::Json(json!({"conversations": []})));
    }
    let traces = conversation_traces(
        &state,
        &req.project_id,
        req.conversation_ids.clone(),
        req.started_after,
        req.started_before,
    )
    .await?;
    let spans = if traces.is_empty() {
        Vec::new()
    } else {
        let scan = Scan {
            trace_ids: Some(traces),
            after: req.started_after,
            before: req.started_before,
            ..Scan::default()
        };
        load(&state, &req.project_id, scan, None).await?
    };
    Ok(axum::Json(json!({
        "conversations": views::conversation_spans(&req.conversation_ids, &spans)
    })))
}
