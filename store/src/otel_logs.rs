//! OTLP log records (docs/otlp.md, "Log records"): stored on their own, keyed by project, trace
//! id, span id and record id, and merged into the calls of their spans when calls are read.
//!
//! Merging on read rather than on write is what makes arrival order irrelevant: a span's records
//! may come before the span, after it, or across several requests, and on ClickHouse a call is
//! an aggregation of append-only rows that a write could not amend anyway. Both backends hook
//! [`merge_span_logs`] into their `query_calls`, so every reader of calls (`/call/read`,
//! `/calls/stream_query`, expansion, the web UI) sees the same merged call. Only calls that came
//! from spans are looked up ([`is_span_call`]), one lookup per chunk of rows.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use heddle_proto::ProjectId;
use heddle_proto::calls::{Call, Columns};
use heddle_proto::otlp::logs::{LogsQuery, OtelLog, is_span_call, merge_into_call};

use crate::{CallStream, Result};

#[async_trait]
pub trait OtelLogStore: Send + Sync {
    /// Stores log records; a record already stored (same project and id) is not stored again.
    /// Returns once they are durable.
    async fn put_otel_logs(&self, logs: Vec<OtelLog>) -> Result<()>;

    /// Like `put_otel_logs`, for a batch that may be applied again verbatim (a pipeline retrying
    /// after a crash): backends that deduplicate whole inserts use `token`.
    async fn put_otel_logs_once(&self, logs: Vec<OtelLog>, token: &str) -> Result<()> {
        let _ = token;
        self.put_otel_logs(logs).await
    }

    /// A project's log records, oldest first (time, then position in the request).
    async fn query_otel_logs(&self, q: LogsQuery) -> Result<Vec<OtelLog>>;
}

/// Reads the log records of some spans of a project (`(trace_id, span_id)` pairs), at most
/// `heddle_proto::limits::MAX_LOG_RECORDS_PER_CALL` per span; each backend gives one.
pub type SpanLogsLookup = Arc<
    dyn Fn(ProjectId, Vec<(String, String)>) -> BoxFuture<'static, Result<Vec<OtelLog>>>
        + Send
        + Sync,
>;

/// Calls merged per lookup.
const CHUNK: usize = 256;

/// `rows` with the log records of each span call merged into its inputs and output
/// ([`merge_into_call`]), for the members `columns` returns.
pub fn merge_span_logs(
    rows: CallStream,
    columns: Option<Columns>,
    lookup: SpanLogsLookup,
) -> CallStream {
    let (inputs, output) = columns.map_or((true, true), |c| (c.inputs, c.output));
    if !inputs && !output {
        return rows;
    }
    let merged = rows
        .ready_chunks(CHUNK)
        .then(move |chunk| {
            let lookup = lookup.clone();
            async move { merge_chunk(chunk, lookup, inputs, output).await }
        })
        .flat_map(futures::stream::iter);
    Box::pin(merged)
}

async fn merge_chunk(
    mut chunk: Vec<Result<Call>>,
    lookup: SpanLogsLookup,
    inputs: bool,
    output: bool,
) -> Vec<Result<Call>> {
    let span_calls = || chunk.iter().filter_map(|r| r.as_ref().ok()).filter(|c| is_span_call(c));
    let Some(project) = span_calls().next().map(|c| c.project_id.clone()) else {
        return chunk;
    };
    let spans: Vec<(String, String)> =
        span_calls().map(|c| (c.trace_id.clone(), c.id.clone())).collect();
    let logs = match lookup(project, spans).await {
        Ok(logs) => logs,
        // A read that fails mid-way ends the stream with its error, as a failing row would.
        Err(e) => return vec![Err(e)],
    };
    if logs.is_empty() {
        return chunk;
    }
    let mut by_span: HashMap<(String, String), Vec<OtelLog>> = HashMap::new();
    for log in logs {
        by_span.entry((log.trace_id.clone(), log.span_id.clone())).or_default().push(log);
    }
    for call in chunk.iter_mut().filter_map(|r| r.as_mut().ok()) {
        if let Some(logs) = by_span.get(&(call.trace_id.clone(), call.id.clone())) {
            merge_into_call(call, logs, inputs, output);
        }
    }
    chunk
}
