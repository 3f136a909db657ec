//! The calls table: root calls (or all calls) newest first, filtered by op, status, time range,
//! a query-language expression, and free text over inputs and outputs; sorted by a column;
//! paged. Filters become a `/calls/stream_query` body, so the table answers exactly what the
//! API would (docs/ui.md, "Calls").

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use futures::StreamExt;
use heddle_api::AppState;
use heddle_domain::prices::PriceBook;
use heddle_proto::ProjectId;
use heddle_proto::calls::Call;
use heddle_proto::time::Micros;
use heddle_ql::eval::fold_case;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{self, LIGHT_COLUMNS};
use crate::UiError;
use crate::fmt;
use crate::layout::{self, Tab, call_url, project_base};
use crate::viewer::Viewer;

/// Rows per page.
pub const PAGE: u64 = 50;
/// Calls the count stops at ("10,000+"), so counting stays cheap on large projects.
pub const COUNT_CAP: u64 = 10_000;
/// Calls a free-text search reads per page before it stops and offers to go on.
pub const TEXT_SCAN: u64 = 5_000;

/// The table's filters, as the page's query string carries them.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct Params {
    #[serde(default)]
    pub op: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
    /// Free text over inputs and outputs.
    #[serde(default)]
    pub q: String,
    /// A query-language expression (`{"$expr": ...}` or the operation alone).
    #[serde(default)]
    pub expr: String,
    #[serde(default)]
    pub sort: String,
    #[serde(default)]
    pub dir: String,
    /// Non-empty: all calls, not only trace roots.
    #[serde(default)]
    pub all: String,
    #[serde(default)]
    pub offset: u64,
}

/// Sortable columns: the page's name for them and the query-language field.
const SORTS: [(&str, &str); 5] = [
    ("started", "started_at"),
    ("op", "op_name"),
    ("name", "summary.weave.trace_name"),
    ("status", "summary.weave.status"),
    ("latency", "summary.weave.latency_ms"),
];

impl Params {
    fn sort_field(&self) -> &'static str {
        SORTS.iter().find(|(k, _)| *k == self.sort).map_or("started_at", |(_, f)| f)
    }

    fn descending(&self) -> bool {
        self.dir != "asc"
    }

    /// The page's query string with some values replaced.
    fn link(&self, base: &str, changes: &[(&str, &str)]) -> String {
        let offset = self.offset.to_string();
        let mut pairs: Vec<(&str, &str)> = vec![
            ("op", &self.op),
            ("status", &self.status),
            ("from", &self.from),
            ("to", &self.to),
            ("q", &self.q),
            ("expr", &self.expr),
            ("sort", &self.sort),
            ("dir", &self.dir),
            ("all", &self.all),
            ("offset", if self.offset > 0 { &offset } else { "" }),
        ];
        for (k, v) in changes {
            if let Some(p) = pairs.iter_mut().find(|(pk, _)| pk == k) {
                p.1 = v;
            }
        }
        format!("{base}{}", fmt::query(&pairs))
    }

    /// The `/calls/stream_query` body for these filters (without paging).
    pub fn body(&self, project: &ProjectId) -> Result<Value, UiError> {
        let mut filter = json!({});
        if self.all.is_empty() {
            filter["trace_roots_only"] = json!(true);
        }
        let op = self.op.trim();
        if !op.is_empty() {
            // An op's calls carry refs to its versions; OpenTelemetry spans may carry a name.
            let ops = if op.starts_with("weave:///") {
                vec![op.to_owned()]
            } else {
                vec![format!("weave:///{}/op/{op}:*", project.as_str()), op.to_owned()]
            };
            filter["op_names"] = json!(ops);
        }
        let mut conds = Vec::new();
        if !self.status.is_empty() {
            conds.push(json!({"$eq": [{"$getField": "summary.weave.status"},
                                      {"$literal": self.status}]}));
        }
        for (value, op) in [(&self.from, "$gte"), (&self.to, "$lt")] {
            if let Some(t) = time_literal(value)? {
                conds.push(json!({op: [{"$getField": "started_at"}, {"$literal": t}]}));
            }
        }
        if !self.expr.trim().is_empty() {
            let v: Value = serde_json::from_str(&self.expr)
                .map_err(|e| UiError::BadRequest(format!("the query is not JSON: {e}")))?;
            conds.push(v.get("$expr").cloned().unwrap_or(v));
        }
        let mut body = json!({
            "project_id": project.as_str(),
            "filter": filter,
            "sort_by": [{"field": self.sort_field(),
                         "direction": if self.descending() { "desc" } else { "asc" }}],
        });
        match conds.len() {
            0 => {}
            1 => body["query"] = json!({"$expr": conds.pop()}),
            _ => body["query"] = json!({"$expr": {"$and": conds}}),
        }
        Ok(body)
    }
}

/// `datetime-local` values (`2026-01-02T03:04`, UTC) and anything the query language takes.
fn time_literal(s: &str) -> Result<Option<String>, UiError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let full = if s.len() == 16 { format!("{s}:00Z") } else { s.to_owned() };
    Micros::parse_loose(&Value::String(full.clone()))
        .map_err(|e| UiError::BadRequest(format!("invalid time {s:?}: {e}")))?;
    Ok(Some(full))
}

/// A page of the table: its rows and where the next page starts (an offset among matches, or
/// for a text search, among the calls read).
struct Rows {
    calls: Vec<Call>,
    next: Option<u64>,
    /// Calls matching the filters (text search aside), up to [`COUNT_CAP`].
    count: Option<u64>,
    /// A text search read this many calls without filling the page.
    scanned: Option<u64>,
}

async fn rows(state: &AppState, project: &ProjectId, p: &Params) -> Result<Rows, UiError> {
    let store = &*state.store;
    let mut body = p.body(project)?;
    let needle = fold_case(p.q.trim());
    if needle.is_empty() {
        let mut count_body = body.clone();
        count_body["limit"] = json!(COUNT_CAP + 1);
        let count = store.count_calls(common::calls_query(count_body)?).await?;
        body["columns"] = json!(LIGHT_COLUMNS);
        body["limit"] = json!(PAGE + 1);
        body["offset"] = json!(p.offset);
        let mut calls = common::read_calls(store, body).await?;
        let next = (calls.len() as u64 > PAGE).then_some(p.offset + PAGE);
        calls.truncate(PAGE as usize);
        return Ok(Rows { calls, next, count: Some(count), scanned: None });
    }
    // Free text: SQL narrows by the other filters, the text is matched here in the JSON of
    // inputs and output, at most TEXT_SCAN calls per page (the query language matches paths,
    // not whole members).
    body["limit"] = json!(TEXT_SCAN);
    body["offset"] = json!(p.offset);
    let mut stream = store.query_calls(common::calls_query(body)?).await?;
    let (mut calls, mut read) = (Vec::new(), 0u64);
    while let Some(call) = stream.next().await {
        let call = call?;
        read += 1;
        let hit = contains_ci(call.inputs.get(), &needle)
            || call.output.as_ref().is_some_and(|o| contains_ci(o.get(), &needle));
        if hit {
            calls.push(call);
            if calls.len() as u64 == PAGE {
                break;
            }
        }
    }
    let more = calls.len() as u64 == PAGE || read == TEXT_SCAN;
    let next = more.then_some(p.offset + read);
    let scanned = (read == TEXT_SCAN && (calls.len() as u64) < PAGE).then_some(read);
    Ok(Rows { calls, next, count: None, scanned })
}

/// Case-insensitive as the query language's `$contains` is (docs/query-language.md).
fn contains_ci(haystack: &str, folded_needle: &str) -> bool {
    fold_case(haystack).contains(folded_needle)
}

pub async fn page(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project)): Path<(String, String)>,
    Query(p): Query<Params>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let (rows, ops) = tokio::try_join!(rows(&state, &project, &p), op_names(&state, &project))?;
    let prices = PriceBook::new(state.store.project_costs(&project).await?);
    let refs = rows.calls.iter().map(|c| common::call_ref(&project, &c.id)).collect();
    let feedback = common::feedback_by_ref(&*state.store, &project, refs).await?;
    let base = format!("{}/calls", project_base(&project));
    let body = html! {
        h1 { "Calls" }
        (filters(&base, &p, &ops))
        p.summary {
            @if let Some(n) = rows.count {
                @if n > COUNT_CAP { (fmt::int(COUNT_CAP)) "+ " } @else { (fmt::int(n)) " " }
                @if p.all.is_empty() { "traces" } @else { "calls" }
            }
            @if let Some(n) = rows.scanned {
                "Searched " (fmt::int(n)) " calls from row " (fmt::int(p.offset + 1)) " without filling the page."
            }
        }
        @if rows.calls.is_empty() {
            p.empty { "No calls match." }
        } @else {
            div.table-wrap {
                table.calls {
                    caption.visually-hidden { "Calls" }
                    thead { tr {
                        (sort_header(&base, &p, "op", "Op"))
                        (sort_header(&base, &p, "name", "Name"))
                        (sort_header(&base, &p, "status", "Status"))
                        (sort_header(&base, &p, "started", "Started (UTC)"))
                        (sort_header(&base, &p, "latency", "Latency"))
                        th scope="col" class="num" { "Tokens" }
                        th scope="col" class="num" { "Cost" }
                        th scope="col" { "Feedback" }
                    } }
                    tbody {
                        @for c in &rows.calls {
                            @let summary = with_costs(&prices, c);
                            tr {
                                td { (common::op_short(&c.op_name)) }
                                td { a href=(call_url(&project, &c.id)) {
                                    (summary.pointer("/weave/trace_name").and_then(Value::as_str).unwrap_or(&c.id))
                                } }
                                td { (common::status_badge(common::status(c))) }
                                td { time datetime=(fmt::iso(c.started_at)) { (fmt::time(c.started_at)) } }
                                td.num { @if let Some(ms) = common::latency_ms(c) { (fmt::duration_ms(ms)) } }
                                td.num { @if let Some(t) = common::tokens(&summary) { (fmt::int(t)) } }
                                td.num { @if let Some(x) = common::cost(&summary) { (fmt::dollars(x)) } }
                                td { (common::feedback_cell(feedback.get(&common::call_ref(&project, &c.id)).map_or(&[][..], Vec::as_slice))) }
                            }
                        }
                    }
                }
            }
        }
        (common::pager(
            (p.offset > 0 && p.q.trim().is_empty()).then(|| {
                let prev = p.offset.saturating_sub(PAGE).to_string();
                p.link(&base, &[("offset", &prev)])
            }),
            rows.next.map(|n| p.link(&base, &[("offset", &n.to_string())])),
        ))
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Calls, "Calls", body))
}

/// The call's summary with `weave.costs`, as `include_costs` adds it.
fn with_costs(prices: &PriceBook, c: &Call) -> Value {
    let mut summary = c.summary.clone();
    prices.add_costs(&mut summary, c.started_at);
    summary
}

fn sort_header(base: &str, p: &Params, key: &str, label: &str) -> Markup {
    let active = p.sort == key || (p.sort.is_empty() && key == "started");
    let dir = if active && p.descending() { "asc" } else { "desc" };
    let aria = match (active, p.descending()) {
        (false, _) => "none",
        (true, true) => "descending",
        (true, false) => "ascending",
    };
    let href = p.link(base, &[("sort", key), ("dir", dir), ("offset", "")]);
    html! {
        th scope="col" aria-sort=(aria) {
            a href=(href) { (label) @if active { @if p.descending() { " ↓" } @else { " ↑" } } }
        }
    }
}

fn filters(base: &str, p: &Params, ops: &[String]) -> Markup {
    html! {
        form.filters method="get" action=(base) role="search" {
            div.field {
                label for="f-op" { "Op" }
                select #f-op name="op" {
                    option value="" { "any" }
                    @for op in ops {
                        option value=(op) selected[*op == p.op] { (op) }
                    }
                }
            }
            div.field {
                label for="f-status" { "Status" }
                select #f-status name="status" {
                    @for (v, label) in [("", "any"), ("success", "success"), ("error", "error"),
                                        ("descendant_error", "child error"), ("running", "running")] {
                        option value=(v) selected[p.status == v] { (label) }
                    }
                }
            }
            div.field {
                label for="f-from" { "From (UTC)" }
                input #f-from type="datetime-local" name="from" value=(p.from);
            }
            div.field {
                label for="f-to" { "To (UTC)" }
                input #f-to type="datetime-local" name="to" value=(p.to);
            }
            div.field.grow {
                label for="f-q" { "Text in inputs or output" }
                input #f-q type="search" name="q" value=(p.q);
            }
            div.field.check {
                input #f-all type="checkbox" name="all" value="1" checked[!p.all.is_empty()];
                label for="f-all" { "Child calls too" }
            }
            details.field.wide open[!p.expr.is_empty()] {
                summary { "Query expression" }
                label for="f-expr" { "A " code { "$expr" } " of the calls query language (as in "
                    code { "/calls/stream_query" } ")" }
                textarea #f-expr name="expr" rows="2" spellcheck="false"
                    placeholder=r#"{"$gt": [{"$getField": "summary.weave.latency_ms"}, {"$literal": 1000}]}"# { (p.expr) }
            }
            input type="hidden" name="sort" value=(p.sort);
            input type="hidden" name="dir" value=(p.dir);
            div.actions {
                button type="submit" { "Filter" }
                a href=(base) { "Clear" }
            }
        }
    }
}

/// The names of the project's ops (latest versions), for the op filter.
async fn op_names(state: &AppState, project: &ProjectId) -> Result<Vec<String>, UiError> {
    let q = common::request::<heddle_proto::objects::ObjQueryReq>(json!({
        "project_id": project.as_str(),
        "filter": {"is_op": true, "latest_only": true},
        "sort_by": [{"field": "object_id", "direction": "asc"}],
        "limit": 500,
        "metadata_only": true,
    }))?
    .validate()?;
    let objs = state.store.query_objects(q).await?;
    Ok(objs.into_iter().map(|o| o.object_id).collect())
}
