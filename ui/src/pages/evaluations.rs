//! Evaluations: each `Evaluation.evaluate` call with its model, dataset and scorer summaries;
//! one evaluation's rows with their per-row scores; two evaluations side by side, rows matched
//! by their dataset row (docs/ui.md, "Evaluations").

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use heddle_api::AppState;
use heddle_proto::ProjectId;
use heddle_proto::calls::Call;
use heddle_proto::objects::VersionSel;
use heddle_store::prelude::*;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::common;
use crate::UiError;
use crate::fmt::{self, enc};
use crate::json_view;
use crate::layout::{self, Tab, call_url, project_base};
use crate::viewer::Viewer;

/// Evaluations per list page.
pub const PAGE: u64 = 50;
/// Rows (predict-and-score calls) shown per evaluation page.
pub const ROWS_PAGE: u64 = 200;

fn op_pattern(project: &ProjectId, op: &str) -> String {
    format!("weave:///{}/op/{op}:*", project.as_str())
}

/// `name` of an object ref `weave:///e/p/object/name:digest...`.
fn ref_name(r: &str) -> Option<&str> {
    let rest = r.strip_prefix("weave:///")?;
    let tail = rest.splitn(4, '/').nth(3)?;
    tail.split(':').next()
}

fn input_ref<'a>(call: &'a Value, key: &str) -> Option<&'a str> {
    call.get(key).and_then(Value::as_str)
}

#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    #[serde(default)]
    offset: u64,
}

/// Scores of an evaluation's summary (its output), flattened: `scorer.key.stat` → number.
fn score_summary(output: &Value) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let Some(map) = output.as_object() else { return out };
    for (scorer, v) in map {
        flatten(scorer, v, &mut out, 0);
    }
    out
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>, depth: usize) {
    match v {
        Value::Number(n) => out.extend(n.as_f64().map(|x| (prefix.to_owned(), x))),
        Value::Bool(b) => out.push((prefix.to_owned(), if *b { 1.0 } else { 0.0 })),
        Value::Object(m) if depth < 4 => {
            for (k, v) in m {
                flatten(&format!("{prefix}.{k}"), v, out, depth + 1);
            }
        }
        _ => {}
    }
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{}", x as i64) } else { format!("{x:.3}") }
}

/// The dataset an evaluation object names, by its name (read once per evaluation version).
async fn dataset_name(
    store: &dyn Store,
    project: &ProjectId,
    eval_ref: &str,
    cache: &mut HashMap<String, Option<String>>,
) -> Option<String> {
    if let Some(hit) = cache.get(eval_ref) {
        return hit.clone();
    }
    let rest = eval_ref.strip_prefix("weave:///")?.strip_prefix(project.as_str())?;
    let (name, digest) = rest.strip_prefix("/object/")?.split_once(':')?;
    let obj = store.read_object(project, name, &VersionSel::parse(digest), false).await.ok()?;
    let val: Value = serde_json::from_str(obj.val.as_ref()?.get()).ok()?;
    let ds = val.get("dataset").and_then(Value::as_str).and_then(ref_name).map(str::to_owned);
    cache.insert(eval_ref.to_owned(), ds.clone());
    ds
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project)): Path<(String, String)>,
    Query(p): Query<ListParams>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let store = &*state.store;
    let evals = common::read_calls(store, json!({
        "project_id": project.as_str(),
        "filter": {"op_names": [op_pattern(&project, "Evaluation.evaluate")], "trace_roots_only": true},
        "sort_by": [{"field": "started_at", "direction": "desc"}],
        "limit": PAGE + 1,
        "offset": p.offset,
        "columns": ["id", "op_name", "started_at", "ended_at", "summary", "inputs", "output", "exception"],
    }))
    .await?;
    let mut datasets = HashMap::new();
    let mut rows = Vec::new();
    for c in evals.iter().take(PAGE as usize) {
        let inputs: Value = serde_json::from_str(c.inputs.get()).unwrap_or(Value::Null);
        let eval_ref = input_ref(&inputs, "self").unwrap_or("");
        let ds = dataset_name(store, &project, eval_ref, &mut datasets).await;
        rows.push((c, inputs.clone(), ds));
    }
    let base = project_base(&project);
    let body = html! {
        h1 { "Evaluations" }
        @if rows.is_empty() { p.empty { "No evaluations yet." } }
        @else {
            form method="get" action={(base) "/evaluations/compare"} {
                div.table-wrap { table.evals {
                    thead { tr {
                        th scope="col" { "Compare" }
                        th scope="col" { "Evaluation" } th scope="col" { "Model" } th scope="col" { "Dataset" }
                        th scope="col" { "Scores" } th scope="col" { "Status" } th scope="col" { "Started (UTC)" }
                    } }
                    tbody {
                        @for (c, inputs, ds) in &rows {
                            @let output = c.output.as_ref().and_then(|o| serde_json::from_str::<Value>(o.get()).ok()).unwrap_or(Value::Null);
                            @let model = input_ref(inputs, "model").and_then(ref_name).unwrap_or("?");
                            tr {
                                td {
                                    input type="checkbox" name="pick" value=(c.id) id={"pick-" (c.id)};
                                    label.visually-hidden for={"pick-" (c.id)} { "Compare " (model) }
                                }
                                td { a href={(base) "/evaluations/" (enc(&c.id))} {
                                    (input_ref(inputs, "self").and_then(ref_name).unwrap_or("evaluation"))
                                } }
                                td { (model) }
                                td { (ds.as_deref().unwrap_or("")) }
                                td.small { @for (k, v) in score_summary(&output).iter().filter(|(k, _)| !k.starts_with("model_latency")).take(4) {
                                    span.score { (k) " " strong { (number(*v)) } } br;
                                } }
                                td { (common::status_badge(common::status(c))) }
                                td { time datetime=(fmt::iso(c.started_at)) { (fmt::time(c.started_at)) } }
                            }
                        }
                    }
                } }
                p.actions { button type="submit" { "Compare the two checked" } }
            }
        }
        (common::pager(
            (p.offset > 0).then(|| format!("{base}/evaluations?offset={}", p.offset.saturating_sub(PAGE))),
            (evals.len() as u64 > PAGE).then(|| format!("{base}/evaluations?offset={}", p.offset + PAGE)),
        ))
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Evaluations, "Evaluations", body))
}

/// One scored row of an evaluation.
struct Scored {
    call: Call,
    /// The dataset row's digest, from the `example` ref.
    row_digest: Option<String>,
    example: Value,
    output: Value,
    scores: Value,
}

/// An evaluation call and its scored rows (first `ROWS_PAGE`), with their dataset rows.
async fn evaluation(
    store: &dyn Store,
    project: &ProjectId,
    id: &str,
) -> Result<(Call, Vec<Scored>), UiError> {
    let eval = common::read_call(store, project, id).await?;
    if !eval.op_name.contains("/op/Evaluation.evaluate:") {
        return Err(UiError::NotFound(format!("call {id} is not an evaluation")));
    }
    let children = common::read_calls(store, json!({
        "project_id": project.as_str(),
        "filter": {"parent_ids": [id], "op_names": [op_pattern(project, "Evaluation.predict_and_score")]},
        "sort_by": [{"field": "started_at", "direction": "asc"}],
        "limit": ROWS_PAGE,
    }))
    .await?;
    let mut scored: Vec<Scored> = children
        .into_iter()
        .map(|call| {
            let inputs: Value = serde_json::from_str(call.inputs.get()).unwrap_or(Value::Null);
            let out: Value = call
                .output
                .as_ref()
                .and_then(|o| serde_json::from_str(o.get()).ok())
                .unwrap_or(Value::Null);
            let example = inputs.get("example").cloned().unwrap_or(Value::Null);
            let row_digest = example
                .as_str()
                .and_then(|r| r.rsplit_once("/attr/rows/id/"))
                .map(|(_, d)| d.to_owned());
            Scored {
                call,
                row_digest,
                example,
                output: out.get("output").cloned().unwrap_or(Value::Null),
                scores: out.get("scores").cloned().unwrap_or(Value::Null),
            }
        })
        .collect();
    let digests: Vec<String> = scored.iter().filter_map(|s| s.row_digest.clone()).collect();
    let rows = store.read_rows(project, &digests, true).await?;
    for s in &mut scored {
        let val = s.row_digest.as_ref().and_then(|d| rows.get(d)).and_then(|r| r.val.as_ref());
        if let Some(v) = val.and_then(|v| serde_json::from_str(v.get()).ok()) {
            s.example = v;
        }
    }
    Ok((eval, scored))
}

fn example_cell(v: &Value) -> Markup {
    match v.as_object() {
        Some(m) => {
            html! { @for (k, x) in m { span.muted { (k) ": " } (x.as_str().map_or_else(|| x.to_string(), str::to_owned)) br; } }
        }
        None => json_view::tree(v),
    }
}

fn scores_cell(v: &Value) -> Markup {
    let flat = score_summary(v);
    html! { @for (k, x) in &flat { (k) " " strong { (number(*x)) } br; } @if flat.is_empty() { (json_view::tree(v)) } }
}

fn eval_header(project: &ProjectId, eval: &Call) -> (String, Markup) {
    let inputs: Value = serde_json::from_str(eval.inputs.get()).unwrap_or(Value::Null);
    let output: Value = eval
        .output
        .as_ref()
        .and_then(|o| serde_json::from_str(o.get()).ok())
        .unwrap_or(Value::Null);
    let model = input_ref(&inputs, "model").and_then(ref_name).unwrap_or("?").to_owned();
    let name = input_ref(&inputs, "self").and_then(ref_name).unwrap_or("evaluation").to_owned();
    let markup = html! {
        dl.meta {
            dt { "Evaluation" } dd { (name) }
            dt { "Model" } dd { @match input_ref(&inputs, "model") { Some(r) => (json_view::tree(&Value::String(r.to_owned()))), None => "?" } }
            dt { "Status" } dd { (common::status_badge(common::status(eval))) }
            dt { "Trace" } dd { a href=(call_url(project, &eval.id)) { "open the trace" } }
        }
        section.panel aria-label="Scores" {
            h2 { "Scores" }
            div.table-wrap { table.scores {
                thead { tr { th scope="col" { "Score" } th scope="col" class="num" { "Value" } } }
                tbody { @for (k, v) in score_summary(&output) { tr { th scope="row" { (k) } td.num { (number(v)) } } } }
            } }
        }
    };
    (model, markup)
}

pub async fn detail(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project, id)): Path<(String, String, String)>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let (eval, rows) = evaluation(&*state.store, &project, &id).await?;
    let (model, header) = eval_header(&project, &eval);
    let body = html! {
        h1 { "Evaluation of " (model) }
        (header)
        section.panel aria-labelledby="rows-h" {
            h2 #rows-h { "Rows" }
            div.table-wrap { table.eval-rows {
                thead { tr { th scope="col" { "Example" } th scope="col" { "Output" } th scope="col" { "Scores" } th scope="col" { "Call" } } }
                tbody { @for s in &rows { tr {
                    td { (example_cell(&s.example)) }
                    td { (json_view::tree(&s.output)) }
                    td { (scores_cell(&s.scores)) }
                    td { a href=(call_url(&project, &s.call.id)) { "trace" } }
                } } }
            } }
            @if rows.len() as u64 == ROWS_PAGE { p.muted { "The first " (ROWS_PAGE) " rows." } }
        }
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Evaluations, "Evaluation", body))
}

#[derive(Debug, Default, Deserialize)]
pub struct CompareParams {
    #[serde(default)]
    a: String,
    #[serde(default)]
    b: String,
    /// The list's checkboxes.
    #[serde(default)]
    pick: Vec<String>,
}

pub async fn compare(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project)): Path<(String, String)>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let p = parse_compare(raw.as_deref().unwrap_or(""));
    let (a, b) = match (p.a.is_empty(), p.pick.as_slice()) {
        (false, _) => (p.a.clone(), p.b.clone()),
        (true, [x, y]) => (x.clone(), y.clone()),
        _ => return Err(UiError::BadRequest("check exactly two evaluations to compare".into())),
    };
    let store = &*state.store;
    let (ea, ra) = evaluation(store, &project, &a).await?;
    let (eb, rb) = evaluation(store, &project, &b).await?;
    let (ma, ha) = eval_header(&project, &ea);
    let (mb, hb) = eval_header(&project, &eb);
    let by_row: HashMap<&str, &Scored> =
        rb.iter().filter_map(|s| Some((s.row_digest.as_deref()?, s))).collect();
    let body = html! {
        h1 { (ma) " vs " (mb) }
        div.compare { div { h2 { "A: " (ma) } (ha) } div { h2 { "B: " (mb) } (hb) } }
        section.panel aria-labelledby="rows-h" {
            h2 #rows-h { "Rows" }
            div.table-wrap { table.eval-rows {
                thead { tr {
                    th scope="col" { "Example" } th scope="col" { "A: output" } th scope="col" { "A: scores" }
                    th scope="col" { "B: output" } th scope="col" { "B: scores" }
                } }
                tbody { @for s in &ra {
                    @let other = s.row_digest.as_deref().and_then(|d| by_row.get(d));
                    tr {
                        td { (example_cell(&s.example)) }
                        td { (json_view::tree(&s.output)) } td { (scores_cell(&s.scores)) }
                        @match other {
                            Some(o) => { td { (json_view::tree(&o.output)) } td { (scores_cell(&o.scores)) } }
                            None => { td.muted colspan="2" { "not in B" } }
                        }
                    }
                } }
            } }
        }
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Evaluations, "Compare", body))
}

/// `a`, `b` and repeated `pick` from a query string (serde's form decoding takes one value
/// per key).
fn parse_compare(raw: &str) -> CompareParams {
    let mut p = CompareParams::default();
    for pair in raw.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v);
        match k {
            "a" => p.a = v,
            "b" => p.b = v,
            "pick" => p.pick.push(v),
            _ => {}
        }
    }
    p
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_picks_from_the_query_string() {
        let p = parse_compare("pick=a%2Db&pick=c+d&x=1");
        assert_eq!(p.pick, ["a-b", "c d"]);
        assert_eq!(parse_compare("a=1&b=%zz").b, "%zz");
        assert_eq!(
            score_summary(&serde_json::json!({"s": {"correct": {"true_fraction": 0.5}}})),
            [("s.correct.true_fraction".to_owned(), 0.5)]
        );
    }
}
