//! What several pages share: calls queries built as `/calls/stream_query` bodies, and the
//! cells that show a call's status, op, tokens, cost and feedback.

use std::collections::HashMap;

use futures::StreamExt;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, CallsQueryReq, op_display_name};
use heddle_proto::feedback::StoredFeedback;
use heddle_store::prelude::*;
use maud::{Markup, html};
use serde_json::Value;

use crate::UiError;
use crate::fmt;
use crate::layout::project_base;

/// The members a list of calls shows: everything but the large JSON ones.
pub const LIGHT_COLUMNS: [&str; 10] = [
    "id",
    "op_name",
    "display_name",
    "trace_id",
    "parent_id",
    "thread_id",
    "turn_id",
    "started_at",
    "ended_at",
    "summary",
];

/// An API request type from its JSON body, as the API would parse it.
pub fn request<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, UiError> {
    serde_json::from_value(body).map_err(|e| UiError::BadRequest(format!("invalid request: {e}")))
}

/// A calls query given as the JSON body `/calls/stream_query` takes, validated the same way:
/// the pages and the API speak one query language (docs/query-language.md).
pub fn calls_query(body: Value) -> Result<heddle_proto::calls::CallsQuery, UiError> {
    let req: CallsQueryReq = serde_json::from_value(body)
        .map_err(|e| UiError::BadRequest(format!("invalid calls query: {e}")))?;
    Ok(req.validate()?)
}

/// Up to the query's limit of calls, in its order.
pub async fn read_calls(store: &dyn Store, body: Value) -> Result<Vec<Call>, UiError> {
    let mut rows = store.query_calls(calls_query(body)?).await?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().await {
        out.push(row?);
    }
    Ok(out)
}

/// One call by id, with every member.
pub async fn read_call(store: &dyn Store, project: &ProjectId, id: &str) -> Result<Call, UiError> {
    let body = serde_json::json!({
        "project_id": project.as_str(),
        "filter": {"call_ids": [id]},
        "limit": 1,
    });
    read_calls(store, body)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| UiError::NotFound(format!("no call {id} in project {project}")))
}

pub fn status(call: &Call) -> &str {
    call.summary.pointer("/weave/status").and_then(Value::as_str).unwrap_or("running")
}

pub fn latency_ms(call: &Call) -> Option<f64> {
    call.ended_at.map(|e| (e.0 - call.started_at.0) as f64 / 1000.0)
}

pub fn status_badge(status: &str) -> Markup {
    let (class, label) = match status {
        "success" => ("ok", "✓ success"),
        "error" => ("err", "✗ error"),
        "descendant_error" => ("warn", "! child error"),
        "running" => ("run", "… running"),
        other => ("run", other),
    };
    html! { span class={"badge " (class)} { (label) } }
}

/// The op's short name: `name` of `weave:///e/p/op/name:digest`, else the op name itself.
pub fn op_short(op_name: &str) -> &str {
    op_display_name(op_name)
}

/// `(name, digest)` of an op ref in this project.
pub fn op_ref_parts<'a>(project: &ProjectId, op_name: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = op_name.strip_prefix("weave:///")?.strip_prefix(project.as_str())?;
    let rest = rest.strip_prefix("/op/")?;
    rest.split_once(':')
}

/// The op's name, linked to its version page when it is an op ref of this project.
pub fn op_link(project: &ProjectId, op_name: &str) -> Markup {
    match op_ref_parts(project, op_name) {
        Some((name, digest)) => html! {
            a href={(project_base(project)) "/ops/" (fmt::enc(name)) "/versions/" (fmt::enc(digest))} {
                (name)
            }
        },
        None => html! { (op_short(op_name)) },
    }
}

/// Total tokens over the models of `summary.usage`.
pub fn tokens(summary: &Value) -> Option<u64> {
    let usage = summary.get("usage")?.as_object()?;
    let mut total = 0.0;
    for u in usage.values() {
        let n = |k: &str| u.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let t = n("total_tokens");
        total += if t > 0.0 {
            t
        } else {
            n("prompt_tokens") + n("completion_tokens") + n("input_tokens") + n("output_tokens")
        };
    }
    (!usage.is_empty()).then_some(total as u64)
}

/// Total cost over the models of `summary.weave.costs` (added with the price book).
pub fn cost(summary: &Value) -> Option<f64> {
    let costs = summary.pointer("/weave/costs")?.as_object()?;
    let total = costs
        .values()
        .map(|c| {
            let n = |k: &str| c.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            n("prompt_tokens_total_cost") + n("completion_tokens_total_cost")
        })
        .sum();
    Some(total)
}

/// `weave:///{project}/call/{id}`: the ref feedback on a call points at.
pub fn call_ref(project: &ProjectId, id: &str) -> String {
    format!("weave:///{}/call/{}", project.as_str(), id)
}

/// Feedback rows per call ref.
pub async fn feedback_by_ref(
    store: &dyn Store,
    project: &ProjectId,
    refs: Vec<String>,
) -> Result<HashMap<String, Vec<StoredFeedback>>, UiError> {
    let mut out: HashMap<String, Vec<StoredFeedback>> = HashMap::new();
    if refs.is_empty() {
        return Ok(out);
    }
    for row in store.feedback_for_refs(project, &refs).await? {
        out.entry(row.weave_ref.clone()).or_default().push(row);
    }
    Ok(out)
}

/// Reactions (their emoji), notes (a count) and other feedback (a count), compactly.
pub fn feedback_cell(rows: &[StoredFeedback]) -> Markup {
    let mut emojis = String::new();
    let (mut notes, mut other) = (0, 0);
    for r in rows {
        match r.feedback_type.as_str() {
            "wandb.reaction.1" => {
                let p = r.payload_value();
                if let Some(e) = p.get("emoji").and_then(Value::as_str) {
                    emojis.push_str(e);
                }
            }
            "wandb.note.1" => notes += 1,
            _ => other += 1,
        }
    }
    html! {
        (emojis)
        @if notes > 0 { " " span.muted title="notes" { "✎" (notes) } }
        @if other > 0 { " " span.muted title="scores and other feedback" { "◆" (other) } }
    }
}

/// "Earlier / later" links of a paged list.
pub fn pager(prev: Option<String>, next: Option<String>) -> Markup {
    html! {
        nav.pager aria-label="Pages" {
            @if let Some(p) = prev { a href=(p) rel="prev" { "← Previous" } }
            @if let Some(n) = next { a href=(n) rel="next" { "Next →" } }
        }
    }
}
