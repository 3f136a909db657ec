//! A call inside its trace (`/{entity}/{project}/r/call/{id}`, the SDK's 🍩 link): the trace's
//! call tree with a timing waterfall, paged so a trace of any size renders quickly, and the
//! selected call in full: inputs and output (LLM messages as a chat), exception, attributes,
//! usage and cost, feedback; notes and reactions are added and removed here.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use heddle_api::AppState;
use heddle_domain::prices::PriceBook;
use heddle_proto::ProjectId;
use heddle_proto::calls::Call;
use heddle_proto::feedback::{CreateError, FeedbackCreateReq, StoredFeedback};
use heddle_proto::time::Micros;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{self, LIGHT_COLUMNS};
use crate::UiError;
use crate::fmt;
use crate::json_view;
use crate::layout::{self, Tab, call_url, project_base};
use crate::viewer::Viewer;

/// Calls of one trace read for its tree (light rows: no inputs, outputs or attributes).
pub const MAX_TRACE_CALLS: u64 = 20_000;
/// Rows of the tree per page.
pub const TREE_PAGE: usize = 200;
/// The reactions offered.
const REACTIONS: [&str; 4] = ["👍", "👎", "🎉", "🤔"];

#[derive(Debug, Default, Deserialize)]
pub struct Params {
    /// Which page of the tree to show (default: the one with the call).
    tree: Option<usize>,
}

/// The calls of a trace in tree order (depth first, children by start time): indexes into the
/// calls, with their depth.
pub fn tree_order(calls: &[Call]) -> Vec<(usize, usize)> {
    let index: HashMap<&str, usize> =
        calls.iter().enumerate().map(|(i, c)| (c.id.as_str(), i)).collect();
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        match c.parent_id.as_deref().and_then(|p| index.get(p)) {
            Some(&parent) if parent != i => children.entry(parent).or_default().push(i),
            // A root, or a call whose parent has not arrived (or is past the read limit).
            _ => roots.push(i),
        }
    }
    let mut order = Vec::with_capacity(calls.len());
    let mut seen = vec![false; calls.len()];
    let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue; // a parent cycle in bad data
        }
        order.push((i, depth));
        if let Some(kids) = children.get(&i) {
            stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
        }
    }
    // Calls only reachable through a cycle.
    for (i, s) in seen.iter().enumerate() {
        if !s {
            order.push((i, 0));
        }
    }
    order
}

pub async fn page(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project, id)): Path<(String, String, String)>,
    Query(params): Query<Params>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let store = &*state.store;
    let call = common::read_call(store, &project, &id).await?;
    let trace_body = json!({
        "project_id": project.as_str(),
        "filter": {"trace_ids": [call.trace_id]},
        "sort_by": [{"field": "started_at", "direction": "asc"}],
        "columns": LIGHT_COLUMNS,
        "limit": MAX_TRACE_CALLS + 1,
    });
    let mut trace = common::read_calls(store, trace_body).await?;
    let truncated = trace.len() as u64 > MAX_TRACE_CALLS;
    trace.truncate(MAX_TRACE_CALLS as usize);
    let prices = PriceBook::new(store.project_costs(&project).await?);
    let feedback = store.feedback_for_refs(&project, &[common::call_ref(&project, &id)]).await?;

    let order = tree_order(&trace);
    let pos = order.iter().position(|&(i, _)| trace[i].id == call.id).unwrap_or(0);
    let pages = order.len().div_ceil(TREE_PAGE).max(1);
    let tree_page = params.tree.unwrap_or(pos / TREE_PAGE).min(pages - 1);
    let title = call.summary.pointer("/weave/trace_name").and_then(Value::as_str).unwrap_or(&id);
    let body = html! {
        div.trace-layout {
            section.tree aria-labelledby="tree-h" {
                h2 #tree-h { "Trace" span.muted { " · " (fmt::int(order.len() as u64)) " calls" } }
                @if truncated {
                    p.notice { "This trace has more than " (fmt::int(MAX_TRACE_CALLS)) " calls; the tree shows the first ones by start time." }
                }
                (tree_rows(&project, &trace, &order, tree_page, &call.id))
                @if pages > 1 {
                    @let here = call_url(&project, &call.id);
                    (common::pager(
                        (tree_page > 0).then(|| format!("{here}?tree={}", tree_page - 1)),
                        (tree_page + 1 < pages).then(|| format!("{here}?tree={}", tree_page + 1)),
                    ))
                    p.muted.small { "Rows " (fmt::int((tree_page * TREE_PAGE + 1) as u64)) "–"
                        (fmt::int(((tree_page + 1) * TREE_PAGE).min(order.len()) as u64)) " of " (fmt::int(order.len() as u64)) }
                }
            }
            section.detail aria-labelledby="call-h" {
                (ancestors(&project, &trace, &call))
                h1 #call-h { (title) }
                (call_detail(&project, &call, &prices, &feedback, &viewer.csrf))
            }
        }
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Calls, title, body))
}

fn tree_rows(
    project: &ProjectId,
    trace: &[Call],
    order: &[(usize, usize)],
    page: usize,
    selected: &str,
) -> Markup {
    let start = trace.iter().map(|c| c.started_at.0).min().unwrap_or(0);
    let end = trace.iter().map(|c| c.ended_at.unwrap_or(c.started_at).0).max().unwrap_or(start);
    let span = (end - start).max(1) as f64;
    let rows = order.iter().skip(page * TREE_PAGE).take(TREE_PAGE);
    html! {
        ol.tree-rows {
            @for &(i, depth) in rows {
                @let c = &trace[i];
                @let left = (c.started_at.0 - start) as f64 / span * 100.0;
                @let width = (c.ended_at.unwrap_or(Micros(end)).0 - c.started_at.0) as f64 / span * 100.0;
                @let status = common::status(c);
                li class={"tree-row s-" (status)} style={"--depth:" (depth.min(40))} {
                    a href=(call_url(project, &c.id)) aria-current=[(c.id == selected).then_some("true")] {
                        span.name { (c.summary.pointer("/weave/trace_name").and_then(Value::as_str).unwrap_or(&c.id)) }
                        @if status == "error" { span.badge.err { "error" } }
                        span.lat { @if let Some(ms) = common::latency_ms(c) { (fmt::duration_ms(ms)) } }
                        span.bar aria-hidden="true" {
                            span style={"left:" (format!("{left:.2}")) "%;width:" (format!("{:.2}", width.max(0.3))) "%"} {}
                        }
                    }
                }
            }
        }
    }
}

/// The path from the trace's root to the call, as links.
fn ancestors(project: &ProjectId, trace: &[Call], call: &Call) -> Markup {
    let by_id: HashMap<&str, &Call> = trace.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut chain = Vec::new();
    let mut parent = call.parent_id.as_deref();
    while let Some(p) = parent {
        let Some(c) = by_id.get(p) else { break };
        if chain.len() > 100 || chain.iter().any(|x: &&Call| x.id == c.id) {
            break;
        }
        chain.push(*c);
        parent = c.parent_id.as_deref();
    }
    chain.reverse();
    html! {
        @if !chain.is_empty() {
            nav.ancestors aria-label="Parents" {
                @for c in chain {
                    a href=(call_url(project, &c.id)) { (common::op_short(&c.op_name)) } " › "
                }
            }
        }
    }
}

fn call_detail(
    project: &ProjectId,
    call: &Call,
    prices: &PriceBook,
    feedback: &[StoredFeedback],
    csrf: &str,
) -> Markup {
    let mut summary = call.summary.clone();
    prices.add_costs(&mut summary, call.started_at);
    let inputs: Value = serde_json::from_str(call.inputs.get()).unwrap_or(Value::Null);
    let output: Option<Value> =
        call.output.as_ref().map(|o| serde_json::from_str(o.get()).unwrap_or(Value::Null));
    let base = project_base(project);
    html! {
        dl.meta {
            dt { "Op" } dd { (common::op_link(project, &call.op_name)) }
            dt { "Status" } dd { (common::status_badge(common::status(call))) }
            dt { "Started" } dd { time datetime=(fmt::iso(call.started_at)) { (fmt::time(call.started_at)) " UTC" } }
            dt { "Latency" } dd { @if let Some(ms) = common::latency_ms(call) { (fmt::duration_ms(ms)) } @else { "running" } }
            @if let Some(t) = common::tokens(&summary) { dt { "Tokens" } dd { (fmt::int(t)) } }
            @if let Some(x) = common::cost(&summary) { dt { "Cost" } dd { (fmt::dollars(x)) } }
            dt { "Call id" } dd { code { (call.id) } }
            @if let Some(t) = call.thread_id.as_deref().filter(|t| !t.is_empty()) {
                dt { "Thread" } dd { a href={(base) "/threads/" (fmt::enc(t))} { (t) } }
            }
        }
        @if let Some(exc) = &call.exception {
            section.panel.exception aria-labelledby="exc-h" {
                h2 #exc-h { "Exception" }
                (exception(exc))
            }
        }
        section.panel aria-labelledby="in-h" {
            h2 #in-h { "Inputs" }
            (value_view(&inputs))
        }
        section.panel aria-labelledby="out-h" {
            h2 #out-h { "Output" }
            @match &output {
                Some(v) => (value_view(v)),
                None => p.muted { @if call.ended_at.is_some() { "None" } @else { "Not finished yet." } },
            }
        }
        @if let Some(usage) = summary.get("usage").and_then(Value::as_object).filter(|u| !u.is_empty()) {
            section.panel aria-labelledby="usage-h" {
                h2 #usage-h { "Usage and cost" }
                (usage_table(usage, summary.pointer("/weave/costs")))
            }
        }
        section.panel aria-labelledby="fb-h" #feedback {
            h2 #fb-h { "Feedback" }
            (feedback_view(project, &call.id, feedback, csrf))
        }
        section.panel aria-labelledby="attr-h" {
            h2 #attr-h { "Attributes" }
            (json_view::tree_text(call.attributes.get()))
        }
        section.panel aria-labelledby="sum-h" {
            h2 #sum-h { "Summary" }
            (json_view::tree(&summary))
        }
    }
}

/// A value: as a chat when it holds LLM messages (the JSON stays one click away), else a tree.
fn value_view(v: &Value) -> Markup {
    match json_view::messages(v) {
        Some(m) => html! {
            (json_view::chat(&m))
            details.raw { summary { "JSON" } (json_view::tree(v)) }
        },
        None => json_view::tree(v),
    }
}

/// The SDK sends exceptions as JSON (`type`, `message`, `traceback`); other writers as text.
fn exception(text: &str) -> Markup {
    let parsed: Option<Value> = serde_json::from_str(text).ok().filter(Value::is_object);
    match parsed {
        Some(v) => {
            let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            let tb = match v.get("traceback") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(frames)) => frames
                    .iter()
                    .map(|f| f.as_str().map_or_else(|| f.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join(""),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            html! {
                p.exc-line { strong { (s("type")) } ": " (s("message")) }
                @if !tb.is_empty() { pre.traceback { (fmt::cut(&tb, 20_000).0) } }
            }
        }
        None => html! { pre.traceback { (fmt::cut(text, 20_000).0) } },
    }
}

fn usage_table(usage: &serde_json::Map<String, Value>, costs: Option<&Value>) -> Markup {
    let n = |u: &Value, keys: &[&str]| -> u64 {
        keys.iter().filter_map(|k| u.get(*k).and_then(Value::as_f64)).sum::<f64>() as u64
    };
    html! {
        div.table-wrap { table {
            thead { tr {
                th scope="col" { "Model" } th scope="col" class="num" { "Requests" }
                th scope="col" class="num" { "Input tokens" } th scope="col" class="num" { "Output tokens" }
                th scope="col" class="num" { "Total tokens" } th scope="col" class="num" { "Cost" }
            } }
            tbody {
                @for (model, u) in usage {
                    @let cost = costs.and_then(|c| c.get(model)).map(|c| {
                        let f = |k: &str| c.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                        f("prompt_tokens_total_cost") + f("completion_tokens_total_cost")
                    });
                    tr {
                        th scope="row" { (model) }
                        td.num { (fmt::int(n(u, &["requests"]))) }
                        td.num { (fmt::int(n(u, &["prompt_tokens", "input_tokens"]))) }
                        td.num { (fmt::int(n(u, &["completion_tokens", "output_tokens"]))) }
                        td.num { (fmt::int(n(u, &["total_tokens"]))) }
                        td.num { @match cost { Some(c) => (fmt::dollars(c)), None => span.muted { "no price" } } }
                    }
                }
            }
        } }
    }
}

fn feedback_view(project: &ProjectId, id: &str, rows: &[StoredFeedback], csrf: &str) -> Markup {
    let action = format!("{}/feedback", call_url(project, id));
    html! {
        @if rows.is_empty() { p.muted { "No feedback yet." } }
        @else {
            ul.feedback {
                @for f in rows {
                    @let payload = f.payload_value();
                    li {
                        @match f.feedback_type.as_str() {
                            "wandb.reaction.1" => span.reaction { (payload.get("emoji").and_then(Value::as_str).unwrap_or("?")) },
                            "wandb.note.1" => span.note { (payload.get("note").and_then(Value::as_str).unwrap_or("")) },
                            other => span { code { (other) } " " (json_view::tree(&payload)) },
                        }
                        " "
                        span.muted.small { (f.wb_user_id.as_deref().unwrap_or("")) " · " (fmt::time(f.created_at)) }
                        form.inline method="post" action={(action) "/delete"} {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="hidden" name="feedback_id" value=(f.id);
                            button.link type="submit" aria-label={"Remove this " (kind_name(&f.feedback_type))} { "Remove" }
                        }
                    }
                }
            }
        }
        div.feedback-forms {
            form.reactions method="post" action=(action) {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="kind" value="reaction";
                @for e in REACTIONS {
                    button type="submit" name="emoji" value=(e) aria-label={"React with " (e)} { (e) }
                }
            }
            form.note method="post" action=(action) {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="kind" value="note";
                label for="note" { "Add a note" }
                textarea #note name="note" rows="2" maxlength="4000" required {}
                button type="submit" { "Add note" }
            }
        }
    }
}

fn kind_name(feedback_type: &str) -> &'static str {
    match feedback_type {
        "wandb.reaction.1" => "reaction",
        "wandb.note.1" => "note",
        _ => "feedback",
    }
}

#[derive(Deserialize)]
pub struct FeedbackForm {
    csrf: String,
    kind: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    emoji: String,
}

/// Adds a note or a reaction to the call, as the SDK's `call.feedback.add_note` / `add_reaction`
/// would (same feedback types and payloads).
pub async fn add_feedback(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    headers: HeaderMap,
    Path((entity, project, id)): Path<(String, String, String)>,
    Form(f): Form<FeedbackForm>,
) -> Result<Redirect, UiError> {
    viewer.check_form(&headers, &f.csrf)?;
    let project = viewer.project(&entity, &project)?;
    let (feedback_type, payload) = match f.kind.as_str() {
        "note" if !f.note.trim().is_empty() => ("wandb.note.1", json!({"note": f.note.trim()})),
        "reaction" if REACTIONS.contains(&f.emoji.as_str()) => {
            ("wandb.reaction.1", json!({"emoji": f.emoji}))
        }
        _ => {
            return Err(UiError::BadRequest(
                "a note needs text; a reaction one of the offered emoji".into(),
            ));
        }
    };
    // Only calls that exist get feedback.
    common::read_call(&*state.store, &project, &id).await?;
    let req: FeedbackCreateReq = common::request(json!({
        "project_id": project.as_str(),
        "weave_ref": common::call_ref(&project, &id),
        "feedback_type": feedback_type,
        "payload": payload,
        "creator": viewer.principal.user_id(),
    }))?;
    let new = req.into_new(viewer.principal.user_id(), Micros::now()).map_err(|e| match e {
        CreateError::Invalid(e) => UiError::from(e),
        CreateError::TooLarge(m) => UiError::BadRequest(m),
    })?;
    state.store.create_feedback(vec![new]).await?;
    Ok(Redirect::to(&format!("{}#feedback", call_url(&project, &id))))
}

#[derive(Deserialize)]
pub struct DeleteForm {
    csrf: String,
    feedback_id: String,
}

/// Removes one feedback row of the call.
pub async fn delete_feedback(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    headers: HeaderMap,
    Path((entity, project, id)): Path<(String, String, String)>,
    Form(f): Form<DeleteForm>,
) -> Result<Redirect, UiError> {
    viewer.check_form(&headers, &f.csrf)?;
    let project = viewer.project(&entity, &project)?;
    let rows = state.store.feedback_for_refs(&project, &[common::call_ref(&project, &id)]).await?;
    if !rows.iter().any(|r| r.id == f.feedback_id) {
        return Err(UiError::NotFound("no such feedback on this call".into()));
    }
    state.store.purge_feedback(&project, &[f.feedback_id]).await?;
    Ok(Redirect::to(&format!("{}#feedback", call_url(&project, &id))))
}
