//! The aggregated views over agent spans (docs/api/agents.md): agents and their versions, span
//! groups with measures, chart-ready stats, the custom attribute schema, message search and the
//! spans of conversations. Each takes the spans that matched the request's filters.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use heddle_ql::eval::{Val, eval};
use heddle_ql::{Direction, TExpr};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::catalog::{CustomSource, SpanField};
use super::requests::{GroupFilterSpec, MeasureSpec, check_alias};
use super::span::AgentSpan;
use heddle_proto::ProtoError;
use heddle_proto::time::Micros;

/// Characters of a message preview (search, first/last message of a group).
pub const PREVIEW_CHARS: usize = 200;

pub fn val_json(v: Val) -> Value {
    match v {
        Val::Null => Value::Null,
        Val::Str(s) => Value::String(s),
        Val::Int(i) => i.into(),
        Val::Float(f) => json!(f),
        Val::Bool(b) => b.into(),
    }
}

fn micros_json(m: Option<Micros>) -> Value {
    m.map_or(Value::Null, |m| m.to_rfc3339().into())
}

/// SQL-like order over result values: NULL smallest, then booleans, numbers, strings.
fn cmp_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            _ => 3,
        }
    }
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => {
            x.as_f64().unwrap_or(0.0).total_cmp(&y.as_f64().unwrap_or(0.0))
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Sorts result rows by top-level keys (or `metrics.<alias>` / `group_keys.<alias>`); stable.
pub fn sort_rows(rows: &mut [Value], sort: &[(String, Direction)]) {
    let get = |row: &Value, key: &str| -> Value {
        row.get(key)
            .or_else(|| row.get("metrics").and_then(|m| m.get(key)))
            .or_else(|| row.get("group_keys").and_then(|m| m.get(key)))
            .cloned()
            .unwrap_or(Value::Null)
    };
    rows.sort_by(|a, b| {
        for (key, dir) in sort {
            let o = cmp_values(&get(a, key), &get(b, key));
            let o = if *dir == Direction::Desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    });
}

pub fn page<T>(rows: Vec<T>, offset: u64, limit: u64) -> Vec<T> {
    rows.into_iter().skip(offset as usize).take(limit as usize).collect()
}

// ---------------------------------------------------------------------------------------------
// Agents and versions

/// What `/agents/query` sorts by.
pub const AGENT_SORT_FIELDS: &[&str] = &[
    "agent_name",
    "agent_version",
    "invocation_count",
    "span_count",
    "total_input_tokens",
    "total_output_tokens",
    "total_duration_ms",
    "error_count",
    "first_seen",
    "last_seen",
];

#[derive(Default)]
struct AgentAcc {
    spans: u64,
    invocations: u64,
    input: i64,
    output: i64,
    duration: i64,
    errors: u64,
    first: Option<Micros>,
    last: Option<Micros>,
}

impl AgentAcc {
    fn add(&mut self, s: &AgentSpan) {
        self.spans += 1;
        self.invocations += s.is_invocation() as u64;
        self.input += s.input_tokens.unwrap_or(0);
        self.output += s.output_tokens.unwrap_or(0);
        self.duration += s.duration_ms();
        self.errors += s.is_error() as u64;
        self.first = self.first.min(s.started_at).or(s.started_at);
        let end = s.ended_at.or(s.started_at);
        self.last = self.last.max(end);
    }
}

/// Per agent (or per version of one agent): the spans that name it. Rows as JSON objects,
/// sorted (default `last_seen desc`, then the name/version ascending).
pub fn agents(
    project: &str,
    spans: &[AgentSpan],
    by_version: bool,
    mut sort: Vec<(String, Direction)>,
) -> Vec<Value> {
    let mut accs: BTreeMap<(String, String), AgentAcc> = BTreeMap::new();
    for s in spans {
        let Some(name) = &s.agent_name else { continue };
        // Per version: the spans that name one.
        let version = match (by_version, &s.agent_version) {
            (false, _) => String::new(),
            (true, Some(v)) => v.clone(),
            (true, None) => continue,
        };
        accs.entry((name.clone(), version)).or_default().add(s);
    }
    let mut rows: Vec<Value> = accs
        .into_iter()
        .map(|((name, version), a)| {
            let mut row = json!({
                "project_id": project,
                "agent_name": name,
                "invocation_count": a.invocations,
                "span_count": a.spans,
                "total_input_tokens": a.input,
                "total_output_tokens": a.output,
                "total_duration_ms": a.duration,
                "error_count": a.errors,
                "first_seen": micros_json(a.first),
                "last_seen": micros_json(a.last),
                "total_cost_usd": null,
            });
            if by_version {
                row["agent_version"] = version.into();
            }
            row
        })
        .collect();
    if sort.is_empty() {
        sort.push(("last_seen".into(), Direction::Desc));
    }
    sort.push(("agent_name".into(), Direction::Asc));
    if by_version {
        sort.push(("agent_version".into(), Direction::Asc));
    }
    sort_rows(&mut rows, &sort);
    rows
}

// ---------------------------------------------------------------------------------------------
// Measures (span groups) and metrics (stats)

/// Aggregations by value type (the hosted service's rules).
fn allowed_aggregations(value_type: &str) -> Option<&'static [&'static str]> {
    Some(match value_type {
        "number" => &["sum", "avg", "min", "max", "count", "count_distinct"],
        "boolean" => &["count", "count_distinct", "count_true", "count_false"],
        "string" => &["count", "count_distinct"],
        "datetime" => &["min", "max", "count", "count_distinct"],
        _ => return None,
    })
}

/// One aggregation over a list of values (NULLs skipped, as SQL does).
pub fn aggregate(agg: &str, values: &[Val], datetime: bool) -> Value {
    let present: Vec<&Val> = values.iter().filter(|v| **v != Val::Null).collect();
    let nums: Vec<f64> = present
        .iter()
        .filter_map(|v| match v {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) => Some(*f),
            Val::Bool(b) => Some(*b as i64 as f64),
            Val::Str(s) => s.parse().ok(),
            Val::Null => None,
        })
        .collect();
    let all_int = present.iter().all(|v| matches!(v, Val::Int(_) | Val::Bool(_)));
    let num = |f: f64| -> Value {
        if datetime {
            micros_json(Some(Micros(f as i64)))
        } else if all_int && f.fract() == 0.0 {
            json!(f as i64)
        } else {
            json!(f)
        }
    };
    match agg {
        "count" => json!(present.len()),
        "count_distinct" => {
            let set: BTreeSet<String> = present.iter().map(|v| format!("{v:?}")).collect();
            json!(set.len())
        }
        "count_true" => json!(present.iter().filter(|v| **v == &Val::Bool(true)).count()),
        "count_false" => json!(present.iter().filter(|v| **v == &Val::Bool(false)).count()),
        "sum" => num(nums.iter().sum()),
        "avg" if nums.is_empty() => Value::Null,
        "avg" => json!(nums.iter().sum::<f64>() / nums.len() as f64),
        "min" => nums.iter().copied().reduce(f64::min).map_or(Value::Null, num),
        "max" => nums.iter().copied().reduce(f64::max).map_or(Value::Null, num),
        _ => Value::Null,
    }
}

/// The `p`th percentile of the numbers among `values` (`crate::quantile`).
pub fn percentile(values: &[Val], p: f64) -> Value {
    let mut nums: Vec<f64> = values
        .iter()
        .filter_map(|v| match v {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) => Some(*f),
            _ => None,
        })
        .collect();
    nums.sort_by(f64::total_cmp);
    crate::quantile::quantile(&nums, p / 100.0).map_or(Value::Null, |v| json!(v))
}

/// A measure, checked: value, type and aggregation agree; its filter is typed.
pub struct Measure {
    pub alias: String,
    pub aggregation: String,
    pub value: Option<SpanField>,
    pub datetime: bool,
    pub filter: Option<TExpr<SpanField>>,
}

fn type_name(f: &SpanField) -> &'static str {
    use heddle_ql::ValueType as T;
    match f.value_type() {
        T::Int | T::Float => "number",
        T::Bool => "boolean",
        T::Timestamp => "datetime",
        _ => "string",
    }
}

impl Measure {
    pub fn new(spec: &MeasureSpec) -> Result<Measure, ProtoError> {
        check_alias(&spec.alias)?;
        let value = spec.value.as_ref().map(|v| v.resolve()).transpose()?;
        let value_type = match (&spec.value_type, &value) {
            (Some(t), _) => t.clone(),
            (None, Some(f)) => type_name(f).to_owned(),
            (None, None) => "number".to_owned(),
        };
        let allowed = allowed_aggregations(&value_type)
            .ok_or_else(|| ProtoError::invalid(format!("unknown value_type {value_type:?}")))?;
        if !allowed.contains(&spec.aggregation.as_str()) {
            return Err(ProtoError::invalid(format!(
                "aggregation {:?} is not valid for value_type {value_type:?}",
                spec.aggregation
            )));
        }
        if value.is_none() && spec.aggregation != "count" {
            return Err(ProtoError::invalid("only count measures may omit value"));
        }
        Ok(Measure {
            alias: spec.alias.clone(),
            aggregation: spec.aggregation.clone(),
            datetime: value_type == "datetime",
            value,
            filter: super::requests::span_expr(&spec.filter)?,
        })
    }

    fn compute(&self, spans: &[&AgentSpan]) -> Value {
        let values: Vec<Val> = spans
            .iter()
            .filter(|s| self.filter.as_ref().is_none_or(|f| eval(f, **s) == Some(true)))
            .map(|s| self.value.as_ref().map_or(Val::Int(1), |f| s.value(f)))
            .collect();
        aggregate(&self.aggregation, &values, self.datetime)
    }
}

// ---------------------------------------------------------------------------------------------
// Span groups

/// What grouped `/agents/spans/query` sorts by, besides group aliases and measure aliases.
pub const GROUP_SORT_FIELDS: &[&str] = &[
    "span_count",
    "invocation_count",
    "conversation_count",
    "total_input_tokens",
    "total_output_tokens",
    "total_reasoning_tokens",
    "total_cache_creation_input_tokens",
    "total_cache_read_input_tokens",
    "total_duration_ms",
    "error_count",
    "first_seen",
    "last_seen",
];

fn preview(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(PREVIEW_CHARS) {
        Some((i, _)) => t[..i].to_owned(),
        None => t.to_owned(),
    }
}

fn user_text(s: &AgentSpan) -> Option<String> {
    s.input_messages
        .iter()
        .rev()
        .find(|m| m.role == "user" && !m.content.is_empty())
        .map(|m| m.content.clone())
}

/// The assistant text of a span's output: every non-user message with content.
pub fn assistant_text(s: &AgentSpan) -> String {
    let texts: Vec<&str> = s
        .output_messages
        .iter()
        .filter(|m| m.role != "user" && !m.content.is_empty())
        .map(|m| m.content.as_str())
        .collect();
    texts.join("\n")
}

/// The fixed bundle of a group, as a JSON row.
fn group_row(keys: Map<String, Value>, spans: &[&AgentSpan], measures: &[Measure]) -> Value {
    let mut convs = BTreeSet::new();
    let mut sets: [BTreeSet<String>; 5] = Default::default();
    let (mut first, mut last) = (None::<Micros>, None::<Micros>);
    let sum =
        |f: fn(&AgentSpan) -> Option<i64>| spans.iter().map(|s| f(s).unwrap_or(0)).sum::<i64>();
    for s in spans {
        if let Some(c) = &s.conversation_id {
            convs.insert(c.clone());
        }
        for (set, v) in sets.iter_mut().zip([
            &s.agent_name,
            &s.agent_version,
            &s.provider_name,
            &s.request_model,
            &s.conversation_name,
        ]) {
            if let Some(v) = v {
                set.insert(v.clone());
            }
        }
        first = first.min(s.started_at).or(s.started_at);
        last = last.max(s.ended_at.or(s.started_at));
    }
    let mut ordered: Vec<&&AgentSpan> = spans.iter().collect();
    ordered.sort_by_key(|s| (s.started_at, s.span_id.clone()));
    let first_message = ordered
        .iter()
        .find_map(|s| user_text(s))
        .map(|t| json!({"role": "user_message", "text": preview(&t)}));
    let last_message = ordered
        .iter()
        .rev()
        .map(|s| assistant_text(s))
        .find(|t| !t.is_empty())
        .map(|t| json!({"role": "assistant_message", "text": preview(&t)}));
    let metrics: Map<String, Value> =
        measures.iter().map(|m| (m.alias.clone(), m.compute(spans))).collect();
    let [agents, versions, providers, models, conv_names] = sets;
    json!({
        "group_keys": keys,
        "span_count": spans.len(),
        "invocation_count": spans.iter().filter(|s| s.is_invocation()).count(),
        "conversation_count": convs.len(),
        "total_input_tokens": sum(|s| s.input_tokens),
        "total_output_tokens": sum(|s| s.output_tokens),
        "total_reasoning_tokens": sum(|s| s.reasoning_tokens),
        "total_cache_creation_input_tokens": sum(|s| s.cache_creation_input_tokens),
        "total_cache_read_input_tokens": sum(|s| s.cache_read_input_tokens),
        "total_duration_ms": spans.iter().map(|s| s.duration_ms()).sum::<i64>(),
        "error_count": spans.iter().filter(|s| s.is_error()).count(),
        "agent_names": agents,
        "agent_versions": versions,
        "provider_names": providers,
        "request_models": models,
        "conversation_names": conv_names,
        "first_seen": micros_json(first),
        "last_seen": micros_json(last),
        "first_message": first_message,
        "last_message": last_message,
        "metrics": metrics,
        "distributions": {},
        "total_cost_usd": null,
        "total_input_cost_usd": null,
        "total_output_cost_usd": null,
    })
}

/// Spans grouped by the values of `group_by` (spans where a key is NULL form their own group,
/// with `null` in `group_keys`), with the fixed bundle and the measures. `group_filters` keep
/// the groups whose measure lies in `[min, max]`.
pub fn groups(
    spans: &[AgentSpan],
    group_by: &[(SpanField, String)],
    measures: &[Measure],
    filters: &[GroupFilterSpec],
    sort: &[(String, Direction)],
) -> Result<Vec<Value>, ProtoError> {
    let mut filter_measures = Vec::new();
    for f in filters {
        if !f.group_by.is_empty() {
            let same = f.group_by.len() == group_by.len()
                && f.group_by
                    .iter()
                    .zip(group_by)
                    .all(|(r, (field, _))| r.resolve().map(|(g, _)| g == *field).unwrap_or(false));
            if !same {
                return Err(ProtoError::invalid(
                    "a group filter's group_by must be empty or the request's group_by",
                ));
            }
        }
        if f.min.is_none() && f.max.is_none() {
            return Err(ProtoError::invalid("group filter must set min or max"));
        }
        filter_measures.push((Measure::new(&f.measure)?, f.min.clone(), f.max.clone()));
    }
    let mut by_key: HashMap<String, (Map<String, Value>, Vec<&AgentSpan>)> = HashMap::new();
    for s in spans {
        let keys: Map<String, Value> =
            group_by.iter().map(|(f, alias)| (alias.clone(), val_json(s.value(f)))).collect();
        let id = Value::Object(keys.clone()).to_string();
        by_key.entry(id).or_insert_with(|| (keys, Vec::new())).1.push(s);
    }
    let mut rows = Vec::new();
    'groups: for (keys, members) in by_key.into_values() {
        for (m, min, max) in &filter_measures {
            let v = m.compute(&members);
            if v.is_null()
                || min.as_ref().is_some_and(|b| cmp_bound(&v, b) == Ordering::Less)
                || max.as_ref().is_some_and(|b| cmp_bound(&v, b) == Ordering::Greater)
            {
                continue 'groups;
            }
        }
        rows.push(group_row(keys, &members, measures));
    }
    let mut sort = sort.to_vec();
    if sort.is_empty() {
        sort.push(("span_count".into(), Direction::Desc));
    }
    // Then by the group keys, so paging is deterministic.
    sort.extend(group_by.iter().map(|(_, a)| (a.clone(), Direction::Asc)));
    sort_rows(&mut rows, &sort);
    Ok(rows)
}

/// Compares a measure with a bound (a number, or an RFC 3339 time for datetime measures).
fn cmp_bound(v: &Value, bound: &Value) -> Ordering {
    match (v, bound) {
        (Value::String(a), Value::String(b)) => {
            let p = |s: &str| Micros::parse(s).map(|m| m.0).unwrap_or(0);
            p(a).cmp(&p(b))
        }
        _ => cmp_values(v, bound),
    }
}

// ---------------------------------------------------------------------------------------------
// Custom attribute schema

/// Keys of the custom attribute maps with how many spans carry each, by span count descending,
/// then source and key.
pub fn custom_attr_schema(spans: &[AgentSpan]) -> Vec<Value> {
    let mut counts: BTreeMap<(&'static str, String), u64> = BTreeMap::new();
    for s in spans {
        for src in CustomSource::ALL {
            let map = match src {
                CustomSource::String => &s.custom_attrs_string,
                CustomSource::Int => &s.custom_attrs_int,
                CustomSource::Float => &s.custom_attrs_float,
                CustomSource::Bool => &s.custom_attrs_bool,
            };
            for k in map.keys() {
                *counts.entry((src.name(), k.clone())).or_default() += 1;
            }
        }
    }
    let mut rows: Vec<((&'static str, String), u64)> = counts.into_iter().collect();
    rows.sort_by(|a, b| {
        b.1.cmp(&a.1).then_with(|| a.0.1.cmp(&b.0.1)).then_with(|| a.0.0.cmp(b.0.0))
    });
    rows.into_iter()
        .map(|((source, key), n)| {
            let value_type =
                CustomSource::parse(source).map_or("string", CustomSource::value_type_name);
            json!({"source": source, "key": key, "value_type": value_type, "span_count": n})
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Search

/// One searchable message of a span: its role and content.
fn span_messages(s: &AgentSpan) -> Vec<(&'static str, &str)> {
    let role = |r: &str| match r {
        "user" => "user",
        "assistant" => "assistant",
        "system" => "system",
        "tool" => "tool",
        _ => "",
    };
    let mut out = Vec::new();
    for m in &s.input_messages {
        out.push((role(&m.role), m.content.as_str()));
    }
    for m in &s.output_messages {
        out.push((role(&m.role), m.content.as_str()));
    }
    if let Some(a) = &s.tool_call_arguments {
        out.push(("tool_call", a.as_str()));
    }
    if let Some(r) = &s.tool_call_result {
        out.push(("tool_result", r.as_str()));
    }
    out.retain(|(_, c)| !c.is_empty());
    out
}

pub struct SearchOpts<'a> {
    pub query: &'a str,
    pub roles: Option<&'a [String]>,
    pub truncate: bool,
    pub offset: u64,
    pub limit: u64,
}

/// Messages whose content contains the query (case-insensitively; an empty query matches
/// every message), newest span first, paged, then grouped by conversation (newest activity
/// first). Spans outside a conversation are not searched. Returns the results and how many
/// conversations matched in all.
pub fn search(spans: &[AgentSpan], o: &SearchOpts) -> (Vec<Value>, u64) {
    let needle = heddle_ql::eval::fold_case(o.query);
    let mut ordered: Vec<&AgentSpan> =
        spans.iter().filter(|s| s.conversation_id.is_some()).collect();
    ordered.sort_by(|a, b| b.started_at.cmp(&a.started_at).then_with(|| a.span_id.cmp(&b.span_id)));
    let mut hits: Vec<(&AgentSpan, &'static str, &str)> = Vec::new();
    for s in ordered {
        for (role, content) in span_messages(s) {
            if o.roles.is_some_and(|r| !r.iter().any(|x| x == role)) {
                continue;
            }
            if needle.is_empty() || heddle_ql::eval::fold_case(content).contains(&needle) {
                hits.push((s, role, content));
            }
        }
    }
    let total: BTreeSet<&str> =
        hits.iter().filter_map(|(s, _, _)| s.conversation_id.as_deref()).collect();
    let total = total.len() as u64;
    let mut convs: Vec<(String, Value)> = Vec::new();
    for (s, role, content) in page(hits, o.offset, o.limit) {
        let conv = s.conversation_id.clone().unwrap_or_default();
        let digest = hex::encode(Sha256::digest(content.as_bytes()));
        let text = if o.truncate { preview(content) } else { content.to_owned() };
        let m = json!({
            "span_id": s.span_id, "trace_id": s.trace_id, "role": role,
            "content_preview": text, "content_digest": digest,
            "started_at": micros_json(s.started_at),
        });
        let idx = match convs.iter().position(|(c, _)| *c == conv) {
            Some(i) => i,
            None => {
                let in_conv = spans.iter().filter(|x| x.conversation_id.as_deref() == Some(&conv));
                let mut name = String::new();
                let mut agent = String::new();
                let mut last = None::<Micros>;
                for x in in_conv {
                    if name.is_empty() {
                        name = x.conversation_name.clone().unwrap_or_default();
                    }
                    if agent.is_empty() {
                        agent = x.agent_name.clone().unwrap_or_default();
                    }
                    last = last.max(x.ended_at.or(x.started_at));
                }
                convs.push((
                    conv.clone(),
                    json!({
                        "conversation_id": conv, "conversation_name": name, "agent_name": agent,
                        "last_activity": micros_json(last), "matched_messages": [],
                    }),
                ));
                convs.len() - 1
            }
        };
        convs[idx].1["matched_messages"].as_array_mut().expect("built as a list").push(m);
    }
    let mut results: Vec<Value> = convs.into_iter().map(|(_, v)| v).collect();
    sort_rows(
        &mut results,
        &[("last_activity".into(), Direction::Desc), ("conversation_id".into(), Direction::Asc)],
    );
    (results, total)
}

// ---------------------------------------------------------------------------------------------
// Conversation spans

/// The spans of each conversation (every span of the conversation's traces), by start time.
pub fn conversation_spans(ids: &[String], spans: &[AgentSpan]) -> Vec<Value> {
    ids.iter()
        .map(|id| {
            let traces: BTreeSet<&str> = spans
                .iter()
                .filter(|s| s.conversation_id.as_deref() == Some(id))
                .map(|s| s.trace_id.as_str())
                .collect();
            let mut members: Vec<&AgentSpan> =
                spans.iter().filter(|s| traces.contains(s.trace_id.as_str())).collect();
            members.sort_by(|a, b| {
                a.started_at.cmp(&b.started_at).then_with(|| a.span_id.cmp(&b.span_id))
            });
            let rows: Vec<Value> = members
                .iter()
                .map(|s| {
                    json!({
                        "span_id": s.span_id, "trace_id": s.trace_id,
                        "operation_name": s.operation_name.clone().unwrap_or_default(),
                        "status": s.status_code.clone().unwrap_or_else(|| "UNSET".into()),
                        "duration_ms": s.duration_ms(),
                    })
                })
                .collect();
            json!({"conversation_id": id, "spans": rows, "spans_feedback": []})
        })
        .collect()
}
