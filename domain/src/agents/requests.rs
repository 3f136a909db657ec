//! Request bodies of the agents API (docs/api/agents.md), as the weave SDK sends them, and their
//! bounds. Unknown keys are ignored (the SDK sends keys newer servers read, such as
//! `include_model_tool_calls`).

use serde::Deserialize;
use serde_json::Value;

use super::catalog::{SpanCatalog, SpanField, value_ref};
use heddle_proto::ProjectId;
use heddle_proto::ProtoError;
use heddle_proto::time::Micros;
use heddle_ql::{Direction, Query, TExpr};

/// Most rows one list request may ask for (agents, versions, spans, groups).
pub const MAX_QUERY_LIMIT: u64 = 10_000;
/// Rows a list returns when the request gives no `limit`.
pub const DEFAULT_QUERY_LIMIT: u64 = 100;
/// Most custom attribute keys one schema request may ask for.
pub const MAX_SCHEMA_LIMIT: u64 = 2_000;
pub const DEFAULT_SCHEMA_LIMIT: u64 = 200;
/// Most matched messages one search may ask for.
pub const MAX_SEARCH_LIMIT: u64 = 1_000;
pub const DEFAULT_SEARCH_LIMIT: u64 = 20;
/// Longest search string, in bytes.
pub const MAX_SEARCH_QUERY_BYTES: usize = 1024;
/// Most turns one conversation chat returns (also its default).
pub const MAX_CONVERSATION_TURNS: u64 = 50;
/// Most conversations one `/agents/conversations/spans` names.
pub const MAX_CONVERSATION_IDS: usize = 100;
/// Most `group_by` refs, measures, metrics and percentiles in one request, each.
pub const MAX_SPEC_TERMS: usize = 32;
/// Most groups one stats request keeps (also the bound of `group_limit`).
pub const MAX_STATS_GROUP_LIMIT: u64 = 1_000;
pub const DEFAULT_STATS_GROUP_LIMIT: u64 = 50;
/// Widest stats time range, in days.
pub const MAX_STATS_RANGE_DAYS: i64 = 31;
/// Most time buckets of one stats request.
pub const MAX_STATS_BUCKETS: i64 = 10_000;
/// Longest id or name a request may filter on, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;

/// `sort_by` of the agents API: the direction defaults to `desc`.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentSortBy {
    pub field: String,
    pub direction: Option<String>,
}

impl AgentSortBy {
    pub fn direction(&self) -> Result<Direction, ProtoError> {
        match self.direction.as_deref() {
            None | Some("desc") => Ok(Direction::Desc),
            Some("asc") => Ok(Direction::Asc),
            Some(other) => Err(ProtoError::invalid(format!(
                "invalid sort direction {other:?}: expected \"asc\" or \"desc\""
            ))),
        }
    }
}

/// Checks `sort_by` against the sortable names; `None` = the default.
pub fn sort_terms(
    sort_by: &Option<Vec<AgentSortBy>>,
    allowed: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Direction)>, ProtoError> {
    let terms = sort_by.as_deref().unwrap_or_default();
    if terms.len() > heddle_ql::limits::MAX_SORT_TERMS {
        return Err(ProtoError::invalid(format!(
            "at most {} sort terms, got {}",
            heddle_ql::limits::MAX_SORT_TERMS,
            terms.len()
        )));
    }
    terms
        .iter()
        .map(|s| {
            if !allowed(&s.field) {
                return Err(ProtoError::invalid(format!("unsupported sort field {:?}", s.field)));
            }
            Ok((s.field.clone(), s.direction()?))
        })
        .collect()
}

/// `limit`/`offset`: non-negative, `limit` at most `max`.
pub fn paging(
    limit: Option<i64>,
    offset: Option<i64>,
    default: u64,
    max: u64,
) -> Result<(u64, u64), ProtoError> {
    let limit = match limit {
        None => default,
        Some(n) if n < 0 || n as u64 > max => {
            return Err(ProtoError::invalid(format!("limit must be between 0 and {max}, got {n}")));
        }
        Some(n) => n as u64,
    };
    let offset = match offset {
        None => 0,
        Some(n) if n < 0 => {
            return Err(ProtoError::invalid(format!("offset must be >= 0, got {n}")));
        }
        Some(n) => n as u64,
    };
    Ok((limit, offset))
}

pub fn check_name(what: &str, v: &Option<String>) -> Result<(), ProtoError> {
    match v {
        Some(s) if s.len() > MAX_NAME_BYTES => {
            Err(ProtoError::invalid(format!("{what} is longer than {MAX_NAME_BYTES} bytes")))
        }
        _ => Ok(()),
    }
}

/// A span query's `query`, typed against the span catalog.
pub fn span_expr(q: &Option<Query>) -> Result<Option<TExpr<SpanField>>, ProtoError> {
    q.as_ref().map(|q| q.typed(&SpanCatalog)).transpose()
}

fn terms<T>(what: &str, v: &Option<Vec<T>>) -> Result<(), ProtoError> {
    let n = v.as_ref().map_or(0, Vec::len);
    if n > MAX_SPEC_TERMS {
        return Err(ProtoError::invalid(format!("at most {MAX_SPEC_TERMS} {what}, got {n}")));
    }
    Ok(())
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct AgentsFilters {
    pub agent_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AgentsQueryReq {
    pub project_id: ProjectId,
    pub filters: Option<AgentsFilters>,
    pub include_costs: Option<bool>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub sort_by: Option<Vec<AgentSortBy>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AgentVersionsQueryReq {
    pub project_id: ProjectId,
    pub agent_name: String,
    pub include_costs: Option<bool>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub sort_by: Option<Vec<AgentSortBy>>,
}

/// `{source, key}`: a span field, a derived value or a custom attribute.
#[derive(Debug, Clone, Deserialize)]
pub struct ValueRef {
    #[serde(default = "field_source")]
    pub source: String,
    pub key: String,
}

fn field_source() -> String {
    "field".to_owned()
}

impl ValueRef {
    pub fn resolve(&self) -> Result<SpanField, ProtoError> {
        value_ref(&self.source, &self.key)
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct GroupByRef {
    #[serde(default = "field_source")]
    pub source: String,
    pub key: String,
    pub alias: Option<String>,
}

impl GroupByRef {
    /// The field and the name `group_keys` shows it under.
    pub fn resolve(&self) -> Result<(SpanField, String), ProtoError> {
        if self.source == "derived" {
            return Err(ProtoError::invalid("group_by takes fields and custom attributes"));
        }
        let f = value_ref(&self.source, &self.key)?;
        let alias = self.alias.clone().unwrap_or_else(|| f.name());
        check_alias(&alias)?;
        Ok((f, alias))
    }
}

/// Aliases name result columns: identifiers only.
pub fn check_alias(alias: &str) -> Result<(), ProtoError> {
    let ok = !alias.is_empty()
        && alias.len() <= 128
        && alias.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok { Ok(()) } else { Err(ProtoError::invalid(format!("invalid alias {alias:?}"))) }
}

#[derive(Debug, Clone, Deserialize)]
pub struct MeasureSpec {
    pub alias: String,
    pub aggregation: String,
    pub value: Option<ValueRef>,
    pub value_type: Option<String>,
    pub filter: Option<Query>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct GroupFilterSpec {
    pub measure: MeasureSpec,
    #[serde(default)]
    pub group_by: Vec<GroupByRef>,
    pub min: Option<Value>,
    pub max: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SpansQueryReq {
    pub project_id: ProjectId,
    pub query: Option<Query>,
    pub group_by: Option<Vec<GroupByRef>>,
    pub measures: Option<Vec<MeasureSpec>>,
    pub group_filters: Option<Vec<GroupFilterSpec>>,
    pub group_distributions: Option<Vec<Value>>,
    pub custom_attr_columns: Option<Vec<ValueRef>>,
    pub include_details: Option<bool>,
    pub include_costs: Option<bool>,
    pub sort_by: Option<Vec<AgentSortBy>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub started_after: Option<Micros>,
    pub started_before: Option<Micros>,
    pub signal_filters: Option<Value>,
    pub insight_filters: Option<Vec<Value>>,
}

impl SpansQueryReq {
    /// Checks the request's shape and bounds (what the spans view needs is checked there).
    pub fn check(&self) -> Result<(), ProtoError> {
        terms("group_by refs", &self.group_by)?;
        terms("measures", &self.measures)?;
        terms("group_filters", &self.group_filters)?;
        terms("custom_attr_columns", &self.custom_attr_columns)?;
        let grouped = self.group_by.as_ref().is_some_and(|g| !g.is_empty());
        let measures = self.measures.as_ref().is_some_and(|v| !v.is_empty());
        let filters = self.group_filters.as_ref().is_some_and(|v| !v.is_empty());
        if !grouped && (measures || filters) {
            return Err(ProtoError::invalid("grouped measures and filters require group_by"));
        }
        if grouped && self.include_details == Some(true) {
            return Err(ProtoError::invalid(
                "include_details is only supported for ungrouped spans",
            ));
        }
        if self.group_distributions.as_ref().is_some_and(|d| !d.is_empty()) {
            return Err(ProtoError::invalid("group_distributions are not supported"));
        }
        check_signal_filters(&self.signal_filters)?;
        check_insight_filters(&self.insight_filters)
    }
}

/// Signal filters select spans by feedback (tags, ratings), which agent spans do not carry
/// here: an empty filter is accepted, any other is a 400 (docs/api/agents.md#not-supported).
pub fn check_signal_filters(v: &Option<Value>) -> Result<(), ProtoError> {
    let empty = match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.values().all(|v| match v {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            _ => false,
        }),
        _ => false,
    };
    if empty { Ok(()) } else { Err(ProtoError::invalid("signal_filters are not supported")) }
}

/// Insight filters need extracted conversation insights, which heddle does not compute.
pub fn check_insight_filters(v: &Option<Vec<Value>>) -> Result<(), ProtoError> {
    match v {
        Some(f) if !f.is_empty() => Err(ProtoError::invalid("insight_filters are not supported")),
        _ => Ok(()),
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct MetricSpec {
    pub alias: String,
    pub value: ValueRef,
    pub value_type: String,
    #[serde(default)]
    pub aggregations: Vec<String>,
    #[serde(default)]
    pub percentiles: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SpanStatsReq {
    pub project_id: ProjectId,
    pub start: Micros,
    pub end: Option<Micros>,
    pub granularity: Option<i64>,
    pub timezone: Option<String>,
    pub query: Option<Query>,
    pub group_by: Option<Vec<GroupByRef>>,
    pub metrics: Option<Vec<MetricSpec>>,
    pub group_limit: Option<i64>,
    pub bucket_by: Option<Value>,
    pub group_filters: Option<Vec<Value>>,
    pub signal_filters: Option<Value>,
    pub insight_filters: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CustomAttrsSchemaReq {
    pub project_id: ProjectId,
    pub query: Option<Query>,
    pub started_after: Option<Micros>,
    pub started_before: Option<Micros>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SearchReq {
    pub project_id: ProjectId,
    #[serde(default)]
    pub query: String,
    pub roles: Option<Vec<String>>,
    pub conversation_id: Option<String>,
    pub agent_name: Option<String>,
    pub provider_name: Option<String>,
    pub request_model: Option<String>,
    pub trace_id: Option<String>,
    pub truncate_content: Option<bool>,
    pub started_after: Option<Micros>,
    pub started_before: Option<Micros>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TraceChatReq {
    pub project_id: ProjectId,
    pub trace_id: String,
    pub include_feedback: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ConversationChatReq {
    pub project_id: ProjectId,
    pub conversation_id: String,
    pub include_feedback: Option<bool>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ConversationSpansReq {
    pub project_id: ProjectId,
    #[serde(default)]
    pub conversation_ids: Vec<String>,
    pub started_after: Option<Micros>,
    pub started_before: Option<Micros>,
}
