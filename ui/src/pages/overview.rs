//! `/{entity}/{project}/weave`, the SDK's project link: totals and charts over the project's
//! newest root calls (calls, errors, p50/p99 latency, tokens, cost), and the latest traces.
//! The charts read at most [`SAMPLE`] light rows, so the page costs the same on any project
//! size (docs/ui.md, "Overview").

use std::sync::Arc;

use axum::extract::{Path, State};
use heddle_api::AppState;
use heddle_domain::prices::PriceBook;
use heddle_domain::quantile::quantile;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::common::{self, LIGHT_COLUMNS};
use crate::UiError;
use crate::charts::{self, Axis};
use crate::fmt;
use crate::layout::{self, Tab, call_url, project_base};
use crate::viewer::Viewer;

/// Newest root calls the charts are drawn from.
pub const SAMPLE: u64 = 5_000;
/// Buckets of the time axis.
const BUCKETS: usize = 24;

#[derive(Default, Clone)]
struct Bucket {
    calls: f64,
    errors: f64,
    latencies: Vec<f64>,
    tokens: f64,
    cost: f64,
}

pub async fn page(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project)): Path<(String, String)>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let store = &*state.store;
    let body_of = |limit: u64| {
        json!({
            "project_id": project.as_str(),
            "filter": {"trace_roots_only": true},
            "sort_by": [{"field": "started_at", "direction": "desc"}],
            "columns": LIGHT_COLUMNS,
            "limit": limit,
        })
    };
    let count = store.count_calls(common::calls_query(body_of(SAMPLE + 1))?).await?;
    let calls = common::read_calls(store, body_of(SAMPLE)).await?;
    let prices = PriceBook::new(store.project_costs(&project).await?);

    let (lo, hi) = match (calls.last(), calls.first()) {
        (Some(o), Some(n)) => (o.started_at.0, n.started_at.0),
        _ => (0, 0),
    };
    let width = ((hi - lo) as f64 / BUCKETS as f64).max(1.0);
    let mut buckets = vec![Bucket::default(); BUCKETS];
    let (mut errors, mut tokens, mut cost) = (0u64, 0u64, 0.0);
    for c in &calls {
        let i = (((c.started_at.0 - lo) as f64 / width) as usize).min(BUCKETS - 1);
        let b = &mut buckets[i];
        b.calls += 1.0;
        if common::status(c) == "error" {
            b.errors += 1.0;
            errors += 1;
        }
        if let Some(ms) = common::latency_ms(c) {
            b.latencies.push(ms);
        }
        let mut summary = c.summary.clone();
        prices.add_costs(&mut summary, c.started_at);
        let t = common::tokens(&summary).unwrap_or(0);
        let x = common::cost(&summary).unwrap_or(0.0);
        b.tokens += t as f64;
        b.cost += x;
        tokens += t;
        cost += x;
    }
    for b in &mut buckets {
        b.latencies.sort_by(f64::total_cmp);
    }
    let series = |f: fn(&Bucket) -> f64| buckets.iter().map(f).collect::<Vec<f64>>();
    let (n_calls, n_errors) = (series(|b| b.calls), series(|b| b.errors));
    let (n_tokens, n_cost) = (series(|b| b.tokens), series(|b| b.cost));
    let p50: Vec<Option<f64>> = buckets.iter().map(|b| quantile(&b.latencies, 0.5)).collect();
    let p99: Vec<Option<f64>> = buckets.iter().map(|b| quantile(&b.latencies, 0.99)).collect();
    let (first, last) =
        (fmt::time(heddle_proto::time::Micros(lo)), fmt::time(heddle_proto::time::Micros(hi)));
    let axis = Axis { first: &first, last: &last };
    let base = project_base(&project);
    let int = |v: f64| fmt::int(v as u64);
    let body = html! {
        h1 { (project.as_str()) }
        @if calls.is_empty() {
            p.empty { "No calls yet. Point the SDK here with " code { "weave.init(\"" (project.as_str()) "\")" } "." }
        } @else {
            p.summary {
                "Traces: " strong { @if count > SAMPLE { (fmt::int(SAMPLE)) "+" } @else { (fmt::int(count)) } }
                @if count > SAMPLE { " · the charts show the newest " (fmt::int(SAMPLE)) }
                " · " (first) " to " (last) " UTC"
            }
            div.cards {
                div.card {
                    h2 { "Calls" }
                    p.stat { (fmt::int(calls.len() as u64)) }
                    (charts::bars("Traces over time, errors overlaid", &axis, &[&n_calls, &n_errors], int))
                    p.legend { span.k0 { "traces" } " " span.k1 { "errors" } }
                }
                div.card {
                    h2 { "Errors" }
                    p.stat { (fmt::int(errors)) " " span.muted.small { (format!("{:.1}", errors as f64 * 100.0 / calls.len().max(1) as f64)) "%" } }
                    (charts::bars("Errors over time", &axis, &[&n_errors, &n_errors], int))
                    p { a href={(base) "/calls?status=error"} { "See the failed calls" } }
                }
                div.card {
                    h2 { "Latency p50 / p99" }
                    p.stat { (quantile(&{ let mut all: Vec<f64> = calls.iter().filter_map(common::latency_ms).collect(); all.sort_by(f64::total_cmp); all }, 0.5).map_or("–".into(), fmt::duration_ms)) }
                    (charts::lines("Latency p50 and p99 over time", &axis, &[&p50, &p99], fmt::duration_ms))
                    p.legend { span.k0 { "p50" } " " span.k1 { "p99" } }
                }
                div.card {
                    h2 { "Tokens" }
                    p.stat { (fmt::int(tokens)) }
                    (charts::bars("Tokens over time", &axis, &[&n_tokens], int))
                }
                div.card {
                    h2 { "Cost" }
                    p.stat { (fmt::dollars(cost)) }
                    (charts::bars("Cost over time", &axis, &[&n_cost], fmt::dollars))
                }
            }
            h2.section { "Latest traces" }
            div.table-wrap { table.calls {
                thead { tr { th scope="col" { "Name" } th scope="col" { "Status" } th scope="col" { "Started (UTC)" } th scope="col" class="num" { "Latency" } } }
                tbody { @for c in calls.iter().take(10) { tr {
                    td { a href=(call_url(&project, &c.id)) { (c.summary.pointer("/weave/trace_name").and_then(Value::as_str).unwrap_or(&c.id)) } }
                    td { (common::status_badge(common::status(c))) }
                    td { (fmt::time(c.started_at)) }
                    td.num { @if let Some(ms) = common::latency_ms(c) { (fmt::duration_ms(ms)) } }
                } } }
            } }
            p { a href={(base) "/calls"} { "All calls →" } }
        }
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Overview, project.as_str(), body))
}
