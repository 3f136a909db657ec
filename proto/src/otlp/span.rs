//! One OTLP span → one complete call.

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use serde_json::{Map, Value, json};

use super::conventions as conv;
use super::op::op_ref;
use super::values::{flat, index_maps_to_lists, nest};
use crate::ProjectId;
use crate::calls::{CompleteCall, StartedCall};
use crate::limits;
use crate::time::Micros;

/// The span's scope (instrumentation library), kept in `otel_dump`.
pub struct Scope<'a> {
    pub name: &'a str,
    pub version: &'a str,
}

/// Why a span was rejected (counted in `partial_success`).
pub type SpanError = String;

/// The span's attributes, flat, with lookups by key or by key prefix.
struct Attributes {
    flat: Vec<(String, Value)>,
    /// Indices into `flat` ordered by key (stable: the first of equal keys first). A span is
    /// looked up by ~60 convention keys, most of them absent: a binary search each instead of a
    /// scan of every attribute.
    by_key: Vec<usize>,
    /// Indices into `flat` of one key per first dotted segment (`gen_ai` of `gen_ai.prompt.0`),
    /// ordered by that segment: a span carries a few namespaces, so most convention keys are
    /// ruled out by their first segment alone, without a search of the keys.
    namespaces: Vec<usize>,
    /// Keys whose meaning was extracted: left out of the call's `attributes`.
    used: Vec<String>,
}

/// The first dotted segment of `key`.
fn namespace(key: &str) -> &str {
    key.split_once('.').map_or(key, |(head, _)| head)
}

/// Whether the dotted `key` is `prefix` itself or lies under it (`a.b` is under `a`, `ab` is not).
fn at_or_under(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

impl Attributes {
    fn new(flat: Vec<(String, Value)>) -> Attributes {
        let mut by_key: Vec<usize> = (0..flat.len()).collect();
        by_key.sort_by(|a, b| flat[*a].0.cmp(&flat[*b].0));
        let mut namespaces: Vec<usize> = (0..flat.len()).collect();
        namespaces.sort_by(|a, b| namespace(&flat[*a].0).cmp(namespace(&flat[*b].0)));
        namespaces.dedup_by(|a, b| namespace(&flat[*a].0) == namespace(&flat[*b].0));
        Attributes { flat, by_key, namespaces, used: Vec::new() }
    }

    /// Where keys not less than `key` start in `by_key`.
    fn first_at_least(&self, key: &str) -> usize {
        self.by_key.partition_point(|i| self.flat[*i].0.as_str() < key)
    }

    /// The value of `key`: the attribute itself, or the attributes under `key.` nested into one
    /// object (indexed maps read as lists). Untruthy values count as absent.
    fn get(&self, key: &str) -> Option<Value> {
        let wanted = namespace(key);
        if self.namespaces.binary_search_by(|i| namespace(&self.flat[*i].0).cmp(wanted)).is_err() {
            return None;
        }
        // Keys starting with `key` sort together from here: `key` itself first, then among
        // others (`key-x` sorts before `key.x`) those under `key.`.
        let start = self.first_at_least(key);
        let mut under = Vec::new();
        for &i in self.by_key[start..].iter().take_while(|i| self.flat[**i].0.starts_with(key)) {
            let (k, v) = &self.flat[i];
            if k.len() == key.len() {
                if truthy(v) {
                    return Some(v.clone());
                }
            } else if k.as_bytes()[key.len()] == b'.' {
                under.push(i);
            }
        }
        if under.is_empty() {
            return None;
        }
        // Nested in their original order.
        under.sort_unstable();
        let under = under.iter().map(|i| (&self.flat[*i].0[key.len() + 1..], &self.flat[*i].1));
        Some(index_maps_to_lists(Value::Object(nest(under)))).filter(truthy)
    }

    /// The first of `keys` present, marked as used.
    fn take_first(&mut self, keys: &[&str]) -> Option<(String, Value)> {
        keys.iter().find_map(|k| self.get(k).map(|v| (k.to_string(), v))).inspect(|(k, _)| {
            self.used.push(k.clone());
        })
    }

    fn is_used(&self, key: &str) -> bool {
        self.used.iter().any(|u| at_or_under(key, u))
    }

    /// The attributes nobody extracted, nested.
    fn unmapped(&self) -> Map<String, Value> {
        nest(self.flat.iter().filter(|(k, _)| !self.is_used(k)).map(|(k, v)| (k.as_str(), v)))
    }
}

/// Every attribute key within [`limits::MAX_ATTRIBUTE_KEY_BYTES`] and
/// [`limits::MAX_ATTRIBUTE_KEY_SEGMENTS`]: keys are nested by their dots, so an unbounded key
/// would nest a value thousands of levels deep.
pub fn check_attribute_keys(attrs: &[KeyValue]) -> Result<(), SpanError> {
    for kv in attrs {
        if kv.key.len() > limits::MAX_ATTRIBUTE_KEY_BYTES {
            return Err(format!(
                "attribute key of {} bytes is longer than the limit of {}",
                kv.key.len(),
                limits::MAX_ATTRIBUTE_KEY_BYTES
            ));
        }
        let segments = kv.key.split('.').count();
        if segments > limits::MAX_ATTRIBUTE_KEY_SEGMENTS {
            let head: String = kv.key.chars().take(64).collect();
            return Err(format!(
                "attribute key {head:?}... has {segments} dot-separated segments, more than \
                 the limit of {}",
                limits::MAX_ATTRIBUTE_KEY_SEGMENTS
            ));
        }
    }
    Ok(())
}

/// The span's own, its events' and its links' attribute keys (see [`check_attribute_keys`]).
pub fn check_keys(span: &Span) -> Result<(), SpanError> {
    check_attribute_keys(&span.attributes)?;
    span.events.iter().try_for_each(|e| check_attribute_keys(&e.attributes))?;
    span.links.iter().try_for_each(|l| check_attribute_keys(&l.attributes))
}

fn hex_id(bytes: &[u8], len: usize, what: &str) -> Result<String, SpanError> {
    if bytes.len() != len {
        return Err(format!("{what} must be {len} bytes, got {}", bytes.len()));
    }
    if bytes.iter().all(|b| *b == 0) {
        return Err(format!("{what} is all zeroes"));
    }
    Ok(hex::encode(bytes))
}

fn micros(nanos: u64) -> Micros {
    Micros((nanos / 1_000) as i64)
}

fn as_string(v: Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `{key: value}` for inputs; a single generic `input`/`inputs` object is unwrapped.
fn inputs(found: Option<(String, Value)>) -> Map<String, Value> {
    match found {
        None => Map::new(),
        Some((k, Value::Object(o))) if k == "input" || k == "inputs" => o,
        Some((k, v)) => Map::from_iter([(k, v)]),
    }
}

fn output(found: Option<(String, Value)>) -> Option<Value> {
    found.map(|(k, v)| if k == "output" || k == "outputs" { v } else { json!({ k: v }) })
}

/// Token counts in the SDK's usage shape, with `total_tokens` completed from its parts and
/// `requests: 1`; `None` when the span reports no tokens.
fn usage(attrs: &mut Attributes) -> Option<Map<String, Value>> {
    let mut usage = Map::new();
    for (field, keys) in conv::USAGE_KEYS {
        if let Some((_, v)) = attrs.take_first(keys)
            && let Some(n) = as_int(&v)
        {
            usage.insert(field.to_string(), n.into());
        }
    }
    if usage.is_empty() {
        return None;
    }
    if !usage.contains_key("total_tokens") {
        let sum = |a: &str, b: &str| Some(usage.get(a)?.as_i64()? + usage.get(b)?.as_i64()?);
        if let Some(total) = sum("prompt_tokens", "completion_tokens")
            .or_else(|| sum("input_tokens", "output_tokens"))
        {
            usage.insert("total_tokens".into(), total.into());
        }
    }
    usage.insert("requests".into(), 1.into());
    Some(usage)
}

/// `events.<name>` entries for the input and output keys that name events: the attributes of
/// the span's events with that name, as a list.
fn event_attributes(span: &Span) -> Vec<(String, Value)> {
    let mut by_name: Vec<(String, Vec<Value>)> = Vec::new();
    for event in &span.events {
        let value =
            Value::Object(nest(flat(&event.attributes).iter().map(|(k, v)| (k.as_str(), v))));
        let key = format!("events.{}", event.name);
        match by_name.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(value),
            None => by_name.push((key, vec![value])),
        }
    }
    by_name
        .into_iter()
        .filter(|(key, _)| {
            conv::INPUT_KEYS.contains(&key.as_str()) || conv::OUTPUT_KEYS.contains(&key.as_str())
        })
        .map(|(key, list)| (key, Value::Array(list)))
        .collect()
}

/// The exception text of a failed span: its `exception` event (`type: message`, then the
/// stack trace) when it recorded one, else the status message, else `"error"`.
fn exception(span: &Span, status: &Status) -> Option<String> {
    if status.code != StatusCode::Error as i32 {
        return None;
    }
    let event = span.events.iter().find(|e| e.name == "exception").map(|e| {
        let get = |k: &str| {
            e.attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.as_ref())
                .map(super::values::any_value)
                .and_then(as_string)
        };
        let head = match (get("exception.type"), get("exception.message")) {
            (Some(t), Some(m)) => format!("{t}: {m}"),
            (Some(t), None) => t,
            (None, Some(m)) => m,
            (None, None) => String::new(),
        };
        match get("exception.stacktrace") {
            Some(trace) if !head.is_empty() => format!("{head}\n{trace}"),
            Some(trace) => trace,
            None => head,
        }
    });
    Some(
        event
            .filter(|e| !e.is_empty())
            .or_else(|| Some(status.message.clone()).filter(|m| !m.is_empty()))
            .unwrap_or_else(|| "error".to_owned()),
    )
}

fn kind_name(kind: i32) -> &'static str {
    match SpanKind::try_from(kind).unwrap_or(SpanKind::Unspecified) {
        SpanKind::Unspecified => "UNSPECIFIED",
        SpanKind::Internal => "INTERNAL",
        SpanKind::Server => "SERVER",
        SpanKind::Client => "CLIENT",
        SpanKind::Producer => "PRODUCER",
        SpanKind::Consumer => "CONSUMER",
    }
}

fn status_name(code: i32) -> &'static str {
    match StatusCode::try_from(code).unwrap_or(StatusCode::Unset) {
        StatusCode::Unset => "UNSET",
        StatusCode::Ok => "OK",
        StatusCode::Error => "ERROR",
    }
}

fn nested(attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Value {
    let f = flat(attrs);
    Value::Object(nest(f.iter().map(|(k, v)| (k.as_str(), v))))
}

/// The attribute keys (or `events.<name>`) whose values became the call's inputs and output.
struct Moved {
    inputs: Option<String>,
    output: Option<String>,
}

impl Moved {
    /// Whether `key` is, or lies under, a moved key.
    fn holds(&self, key: &str) -> bool {
        [&self.inputs, &self.output].into_iter().flatten().any(|m| at_or_under(key, m))
    }

    fn to_json(&self) -> Option<Value> {
        let mut map = Map::new();
        if let Some(k) = &self.inputs {
            map.insert("inputs".into(), k.as_str().into());
        }
        if let Some(k) = &self.output {
            map.insert("output".into(), k.as_str().into());
        }
        (!map.is_empty()).then_some(Value::Object(map))
    }
}

/// The original span, readable: hex ids, RFC 3339 times, nested attributes (the Weave
/// server's `otel_dump` shape), less the attributes and events that became the call's inputs
/// and output: `attributes_moved` names them. `attributes` are the span's, already decoded.
fn dump(
    span: &Span,
    attributes: Value,
    moved: &Moved,
    resource: Option<&Resource>,
    scope: &Scope,
    parent: Option<&str>,
) -> Value {
    let status = span.status.clone().unwrap_or_default();
    let mut dump = json!({
        "name": span.name,
        "context": {
            "trace_id": hex::encode(&span.trace_id),
            "span_id": hex::encode(&span.span_id),
            "trace_state": span.trace_state,
        },
        "kind": kind_name(span.kind),
        "parent_id": parent,
        "start_time": micros(span.start_time_unix_nano).to_rfc3339(),
        "end_time": micros(span.end_time_unix_nano).to_rfc3339(),
        "status": {"code": status_name(status.code), "message": status.message},
        "attributes": attributes,
        // An event whose attributes moved keeps its place, name and time; its attributes are
        // the next item of the list under `events.<name>` in inputs or output.
        "events": span.events.iter().map(|e| json!({
            "name": e.name,
            "timestamp": e.time_unix_nano,
            "attributes": if moved.holds(&format!("events.{}", e.name)) {
                Value::Null
            } else {
                nested(&e.attributes)
            },
            "dropped_attributes_count": e.dropped_attributes_count,
        })).collect::<Vec<_>>(),
        "links": span.links.iter().map(|l| json!({
            "trace_id": hex::encode(&l.trace_id),
            "span_id": hex::encode(&l.span_id),
            "trace_state": l.trace_state,
            "attributes": nested(&l.attributes),
            "dropped_attributes_count": l.dropped_attributes_count,
            "flags": l.flags,
        })).collect::<Vec<_>>(),
        "resource": resource.map(|r| json!({
            "attributes": nested(&r.attributes),
            "dropped_attributes_count": r.dropped_attributes_count,
        })),
        "scope": {"name": scope.name, "version": scope.version},
    });
    if let Some(moved) = moved.to_json() {
        dump["attributes_moved"] = moved;
    }
    dump
}

/// Converts one span of `project` into a complete call.
pub fn to_call(
    project: &ProjectId,
    span: &Span,
    resource: Option<&Resource>,
    scope: &Scope,
) -> Result<CompleteCall, SpanError> {
    let id = hex_id(&span.span_id, 8, "span_id")?;
    let trace_id = hex_id(&span.trace_id, 16, "trace_id")?;
    let parent_id = match span.parent_span_id.as_slice() {
        [] => None,
        p if p.iter().all(|b| *b == 0) && p.len() == 8 => None,
        p => Some(hex_id(p, 8, "parent_span_id")?),
    };
    if span.start_time_unix_nano == 0 {
        return Err("start_time_unix_nano is missing".into());
    }
    let started_at = micros(span.start_time_unix_nano);
    let ended_at = micros(span.end_time_unix_nano.max(span.start_time_unix_nano));
    let status = span.status.clone().unwrap_or_default();

    let mut flat = flat(&span.attributes);
    let span_attribute_count = flat.len();
    flat.extend(event_attributes(span));
    let mut attrs = Attributes::new(flat);
    let inputs_found = attrs.take_first(conv::INPUT_KEYS);
    let output_found = attrs.take_first(conv::OUTPUT_KEYS);
    // The content that became inputs and output is stored there only: the dump names where it
    // went instead of holding it a second time (docs/otlp.md#what-otel_dump-holds).
    let moved = Moved {
        inputs: inputs_found.as_ref().map(|(k, _)| k.clone()),
        output: output_found.as_ref().map(|(k, _)| k.clone()),
    };
    let dumped_attributes = Value::Object(nest(
        attrs.flat[..span_attribute_count]
            .iter()
            .filter(|(k, _)| !moved.holds(k))
            .map(|(k, v)| (k.as_str(), v)),
    ));
    let inputs = inputs(inputs_found);
    let output = output(output_found);
    let usage = usage(&mut attrs);

    let mut attributes = Map::new();
    for (field, keys) in conv::ATTRIBUTE_KEYS {
        if let Some((_, v)) = attrs.take_first(keys) {
            attributes.insert(field.to_string(), v);
        }
    }
    let display_name = attrs.take_first(conv::DISPLAY_NAME_KEYS).and_then(|(_, v)| as_string(v));
    let thread_id = attrs.take_first(conv::THREAD_ID_KEYS).and_then(|(_, v)| as_string(v));
    let is_turn = attrs.take_first(conv::IS_TURN_KEYS).is_some();
    let turn_id = (thread_id.is_some() && is_turn).then(|| id.clone());
    let wb_run_id = attrs.take_first(conv::WB_RUN_ID_KEYS).and_then(|(_, v)| as_string(v));
    let wb_run_step = attrs.take_first(conv::WB_RUN_STEP_KEYS).and_then(|(_, v)| as_int(&v));
    let wb_run_step_end =
        attrs.take_first(conv::WB_RUN_STEP_END_KEYS).and_then(|(_, v)| as_int(&v));
    let extra = attrs.take_first(&[conv::EXTRA_ATTRIBUTES_KEY]);
    // Unmapped attributes first, so an extracted field of the same name wins.
    let mut all = attrs.unmapped();
    all.extend(attributes);
    if let Some((_, Value::Object(extra))) = extra {
        all.extend(extra);
    }

    let model = all
        .get("model")
        .and_then(Value::as_str)
        .or_else(|| all.get("model_parameters")?.get("model")?.as_str())
        .map(str::to_owned);
    let dumped = dump(span, dumped_attributes, &moved, resource, scope, parent_id.as_deref());
    let mut summary = Map::new();
    if let Some(usage) = usage {
        let key = model.unwrap_or_else(|| "usage".to_owned());
        summary.insert("usage".into(), json!({ key: usage }));
    }

    // Every member must read back (see `limits::check_json_text`); the values are checked here,
    // before they become text, so the text need not be scanned again.
    let deep = |e: crate::ProtoError| e.to_string();
    limits::check_map_depth("inputs", &inputs).map_err(deep)?;
    limits::check_map_depth("attributes", &all).map_err(deep)?;
    limits::check_json_depth("otel_dump", &dumped).map_err(deep)?;
    if let Some(output) = &output {
        limits::check_json_depth("output", output).map_err(deep)?;
    }
    Ok(CompleteCall {
        start: StartedCall {
            project_id: project.clone(),
            id: Some(id),
            trace_id: Some(trace_id),
            op_name: op_ref(project, &span.name),
            display_name,
            parent_id: parent_id.clone(),
            thread_id,
            turn_id,
            started_at,
            attributes: Some(all),
            inputs: Some(inputs),
            otel_dump: Some(dumped),
            wb_run_id,
            wb_run_step,
        },
        ended_at,
        summary: Some(summary),
        output,
        exception: exception(span, &status),
        wb_run_step_end,
    })
}
