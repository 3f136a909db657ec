//! Threads: the project's threads (`/threads/stream_query`'s aggregation), and one thread's
//! turns in order, as a conversation (docs/ui.md, "Threads").

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use heddle_api::AppState;
use heddle_proto::threads::ThreadsQueryReq;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::common;
use crate::UiError;
use crate::fmt::{self, enc};
use crate::json_view;
use crate::layout::{self, Tab, call_url, project_base};
use crate::viewer::Viewer;

/// Threads per list page; turns per thread page.
pub const PAGE: u64 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct Params {
    #[serde(default)]
    offset: u64,
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project)): Path<(String, String)>,
    Query(p): Query<Params>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let req: ThreadsQueryReq = common::request(json!({
        "project_id": project.as_str(),
        "limit": PAGE + 1,
        "offset": p.offset,
        "sort_by": [{"field": "last_updated", "direction": "desc"}],
    }))?;
    let threads = state.store.query_threads(req.validate()?).await?;
    let base = project_base(&project);
    let body = html! {
        h1 { "Threads" }
        @if threads.is_empty() { p.empty { "No threads yet: calls made inside " code { "weave.thread(...)" } " appear here." } }
        @else {
            div.table-wrap { table.threads {
                thead { tr {
                    th scope="col" { "Thread" } th scope="col" class="num" { "Turns" }
                    th scope="col" { "Started (UTC)" } th scope="col" { "Last update (UTC)" }
                    th scope="col" class="num" { "p50 turn" } th scope="col" class="num" { "p99 turn" }
                } }
                tbody { @for t in threads.iter().take(PAGE as usize) { tr {
                    td { a href={(base) "/threads/" (enc(&t.thread_id))} { (t.thread_id) } }
                    td.num { (t.turn_count) }
                    td { (fmt::time(t.start_time)) }
                    td { (fmt::time(t.last_updated)) }
                    td.num { @if let Some(ms) = t.p50_turn_duration_ms { (fmt::duration_ms(ms)) } }
                    td.num { @if let Some(ms) = t.p99_turn_duration_ms { (fmt::duration_ms(ms)) } }
                } } }
            } }
        }
        (common::pager(
            (p.offset > 0).then(|| format!("{base}/threads?offset={}", p.offset.saturating_sub(PAGE))),
            (threads.len() as u64 > PAGE).then(|| format!("{base}/threads?offset={}", p.offset + PAGE)),
        ))
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Threads, "Threads", body))
}

pub async fn detail(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project, id)): Path<(String, String, String)>,
    Query(p): Query<Params>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    // Turn calls are the thread's calls whose turn id is their own id.
    let turns = common::read_calls(
        &*state.store,
        json!({
            "project_id": project.as_str(),
            "filter": {"thread_ids": [id]},
            "query": {"$expr": {"$eq": [{"$getField": "turn_id"}, {"$getField": "id"}]}},
            "sort_by": [{"field": "started_at", "direction": "asc"}],
            "limit": PAGE + 1,
            "offset": p.offset,
        }),
    )
    .await?;
    let here = format!("{}/threads/{}", project_base(&project), enc(&id));
    let body = html! {
        h1 { "Thread " (id) }
        @if turns.is_empty() { p.empty { "No turns in this thread." } }
        ol.turns start=(p.offset + 1) {
            @for t in turns.iter().take(PAGE as usize) {
                @let inputs: Value = serde_json::from_str(t.inputs.get()).unwrap_or(Value::Null);
                @let output: Value = t.output.as_ref().and_then(|o| serde_json::from_str(o.get()).ok()).unwrap_or(Value::Null);
                li.turn {
                    div.turn-head {
                        a href=(call_url(&project, &t.id)) { (common::op_short(&t.op_name)) }
                        " " (common::status_badge(common::status(t)))
                        " " span.muted.small { (fmt::time(t.started_at))
                            @if let Some(ms) = common::latency_ms(t) { " · " (fmt::duration_ms(ms)) } }
                    }
                    div.msg.role-user { span.role { "in" } div.text { (turn_text(&inputs)) } }
                    div.msg.role-assistant { span.role { "out" } div.text { (turn_text(&output)) } }
                }
            }
        }
        (common::pager(
            (p.offset > 0).then(|| format!("{here}?offset={}", p.offset.saturating_sub(PAGE))),
            (turns.len() as u64 > PAGE).then(|| format!("{here}?offset={}", p.offset + PAGE)),
        ))
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Threads, "Thread", body))
}

/// A turn's input or output as conversation text: the last message of a chat, one string
/// value, or the value as a tree.
fn turn_text(v: &Value) -> Markup {
    if let Some(m) = json_view::messages(v) {
        return json_view::chat(&m);
    }
    if let Some(s) = v.as_str() {
        return html! { (fmt::cut(s, json_view::MAX_STRING).0) };
    }
    let strings: Vec<&str> =
        v.as_object().map_or(Vec::new(), |m| m.values().filter_map(Value::as_str).collect());
    match strings.as_slice() {
        [one] if v.as_object().is_some_and(|m| m.len() == 1) => {
            html! { (fmt::cut(one, json_view::MAX_STRING).0) }
        }
        _ => json_view::tree(v),
    }
}
