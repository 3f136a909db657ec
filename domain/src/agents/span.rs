//! One call stored by the OTLP ingest, read as an agent span (docs/api/agents.md#spans): the
//! GenAI semantic-convention attributes come from `otel_dump.attributes` (every attribute but the
//! ones that became inputs and output, docs/otlp.md#what-otel_dump-holds), the messages from the
//! call's `inputs` and `output`, ids and times from the call's columns.

use serde::Serialize;
use serde_json::{Map, Value};

use heddle_proto::calls::Call;
use heddle_proto::time::Micros;

/// `gen_ai.operation.name` of an agent invocation.
pub const INVOKE_AGENT: &str = "invoke_agent";

/// One message, normalised from any provider format: `content` is the text when the message is
/// text only, else the JSON text of its parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpanMessage {
    pub role: String,
    pub content: String,
    pub finish_reason: String,
}

/// The span as `/agents/spans/query` returns it (every key the SDK's `Span` model declares).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentSpan {
    pub project_id: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub span_name: Option<String>,
    pub span_kind: Option<String>,
    pub started_at: Option<Micros>,
    pub ended_at: Option<Micros>,
    pub status_code: Option<String>,
    pub status_message: Option<String>,
    pub operation_name: Option<String>,
    pub provider_name: Option<String>,
    pub agent_name: Option<String>,
    pub agent_id: Option<String>,
    pub agent_description: Option<String>,
    pub agent_version: Option<String>,
    pub request_model: Option<String>,
    pub response_model: Option<String>,
    pub response_id: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub reasoning_tokens: Option<i64>,
    pub cache_creation_input_tokens: Option<i64>,
    pub cache_read_input_tokens: Option<i64>,
    pub reasoning_content: Option<String>,
    pub conversation_id: Option<String>,
    pub conversation_name: Option<String>,
    pub tool_name: Option<String>,
    pub tool_type: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_description: Option<String>,
    pub tool_definitions: Option<String>,
    pub finish_reasons: Vec<String>,
    pub error_type: Option<String>,
    pub request_temperature: Option<f64>,
    pub request_max_tokens: Option<i64>,
    pub request_top_p: Option<f64>,
    pub request_frequency_penalty: Option<f64>,
    pub request_presence_penalty: Option<f64>,
    pub request_seed: Option<i64>,
    pub request_stop_sequences: Vec<String>,
    pub request_choice_count: Option<i64>,
    pub output_type: Option<String>,
    pub input_messages: Vec<SpanMessage>,
    pub output_messages: Vec<SpanMessage>,
    pub system_instructions: Vec<String>,
    pub tool_call_arguments: Option<String>,
    pub tool_call_result: Option<String>,
    pub compaction_summary: Option<String>,
    pub compaction_items_before: Option<i64>,
    pub compaction_items_after: Option<i64>,
    pub content_refs: Vec<String>,
    pub artifact_refs: Vec<String>,
    pub object_refs: Vec<String>,
    pub custom_attrs_string: Map<String, Value>,
    pub custom_attrs_int: Map<String, Value>,
    pub custom_attrs_float: Map<String, Value>,
    pub custom_attrs_bool: Map<String, Value>,
    pub server_address: Option<String>,
    pub server_port: Option<i64>,
    pub wb_user_id: Option<String>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
    pub wb_run_step_end: Option<i64>,
    pub input_cost_usd: Option<f64>,
    pub output_cost_usd: Option<f64>,
    pub total_cost_usd: Option<f64>,
    pub cache_creation_cost_usd: Option<f64>,
    pub cache_read_cost_usd: Option<f64>,
    pub parent_call_id: Option<String>,
    pub parent_call_trace_id: Option<String>,
    pub eval_evaluation_name: Option<String>,
    pub eval_example_id: Option<String>,
    pub eval_kind: Option<String>,
    pub eval_predict_and_score_call_id: Option<String>,
    pub eval_row_digest: Option<String>,
    pub eval_run_id: Option<String>,
    pub eval_trial_index: Option<i64>,
    /// Only with `include_details`: the stored `otel_dump` as JSON text.
    pub raw_span_dump: Option<String>,
}

/// Top-level attribute namespaces that are semantic conventions, not custom attributes.
const RESERVED_PREFIXES: &[&str] = &["gen_ai", "wandb", "weave", "server", "error", "otel"];

impl AgentSpan {
    /// Reads a call as an agent span; `None` when it is no GenAI span (no
    /// `gen_ai.operation.name` and no `gen_ai.agent.name`).
    pub fn from_call(call: &Call) -> Option<AgentSpan> {
        let dump: Value = call
            .otel_dump
            .as_ref()
            .and_then(|d| serde_json::from_str(d.get()).ok())
            .unwrap_or(Value::Null);
        let attrs = dump.get("attributes").cloned().unwrap_or(Value::Null);
        let s = |key: &str| text(attr(&attrs, key));
        let i = |key: &str| int(attr(&attrs, key));
        let f = |key: &str| float(attr(&attrs, key));
        let operation_name = s("gen_ai.operation.name");
        let agent_name = s("gen_ai.agent.name");
        if operation_name.is_none() && agent_name.is_none() {
            return None;
        }
        let inputs: Value = serde_json::from_str(call.inputs.get()).unwrap_or(Value::Null);
        let output: Value = call
            .output
            .as_ref()
            .and_then(|o| serde_json::from_str(o.get()).ok())
            .unwrap_or(Value::Null);
        let status = dump.get("status");
        let (custom_attrs_string, custom_attrs_int, custom_attrs_float, custom_attrs_bool) =
            custom_attrs(&attrs);
        Some(AgentSpan {
            project_id: call.project_id.to_string(),
            trace_id: call.trace_id.clone(),
            span_id: call.id.clone(),
            parent_span_id: call.parent_id.clone(),
            span_name: dump.get("name").and_then(Value::as_str).map(str::to_owned),
            span_kind: dump.get("kind").and_then(Value::as_str).map(str::to_owned),
            started_at: Some(call.started_at),
            ended_at: call.ended_at,
            status_code: Some(
                status
                    .and_then(|s| s.get("code"))
                    .and_then(Value::as_str)
                    .unwrap_or("UNSET")
                    .to_owned(),
            ),
            status_message: status
                .and_then(|s| s.get("message"))
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
            operation_name,
            provider_name: s("gen_ai.provider.name").or_else(|| s("gen_ai.system")),
            agent_name,
            agent_id: s("gen_ai.agent.id"),
            agent_description: s("gen_ai.agent.description"),
            agent_version: s("gen_ai.agent.version"),
            request_model: s("gen_ai.request.model"),
            response_model: s("gen_ai.response.model"),
            response_id: s("gen_ai.response.id"),
            input_tokens: i("gen_ai.usage.input_tokens"),
            output_tokens: i("gen_ai.usage.output_tokens"),
            reasoning_tokens: i("gen_ai.usage.reasoning_tokens")
                .or_else(|| i("gen_ai.usage.reasoning.output_tokens")),
            cache_creation_input_tokens: i("gen_ai.usage.cache_creation.input_tokens")
                .or_else(|| i("gen_ai.usage.cache_creation_input_tokens")),
            cache_read_input_tokens: i("gen_ai.usage.cache_read.input_tokens")
                .or_else(|| i("gen_ai.usage.cache_read_input_tokens")),
            reasoning_content: s("gen_ai.reasoning.content"),
            conversation_id: call.thread_id.clone().or_else(|| s("gen_ai.conversation.id")),
            conversation_name: s("gen_ai.conversation.name"),
            tool_name: s("gen_ai.tool.name"),
            tool_type: s("gen_ai.tool.type"),
            tool_call_id: s("gen_ai.tool.call.id"),
            tool_description: s("gen_ai.tool.description"),
            tool_definitions: s("gen_ai.tool.definitions"),
            finish_reasons: strings(attr(&attrs, "gen_ai.response.finish_reasons")),
            error_type: s("error.type"),
            request_temperature: f("gen_ai.request.temperature"),
            request_max_tokens: i("gen_ai.request.max_tokens"),
            request_top_p: f("gen_ai.request.top_p"),
            request_frequency_penalty: f("gen_ai.request.frequency_penalty"),
            request_presence_penalty: f("gen_ai.request.presence_penalty"),
            request_seed: i("gen_ai.request.seed"),
            request_stop_sequences: strings(attr(&attrs, "gen_ai.request.stop_sequences")),
            request_choice_count: i("gen_ai.request.choice.count"),
            output_type: s("gen_ai.output.type"),
            input_messages: messages(member(&inputs, "gen_ai.input.messages")),
            output_messages: messages(member(&output, "gen_ai.output.messages")),
            system_instructions: system_instructions(attr(&attrs, "gen_ai.system_instructions")),
            tool_call_arguments: s("gen_ai.tool.call.arguments"),
            tool_call_result: s("gen_ai.tool.call.result"),
            custom_attrs_string,
            custom_attrs_int,
            custom_attrs_float,
            custom_attrs_bool,
            server_address: s("server.address"),
            server_port: i("server.port"),
            wb_user_id: call.wb_user_id.clone(),
            wb_run_id: call.wb_run_id.clone(),
            wb_run_step: call.wb_run_step,
            wb_run_step_end: call.wb_run_step_end,
            raw_span_dump: call.otel_dump.as_ref().map(|d| d.get().to_owned()),
            ..AgentSpan::default()
        })
    }

    /// Drops what only detail reads return (messages, tool payloads, the raw dump), as list
    /// queries without `include_details` do.
    pub fn strip_details(&mut self) {
        self.input_messages = Vec::new();
        self.output_messages = Vec::new();
        self.system_instructions = Vec::new();
        self.tool_call_arguments = None;
        self.tool_call_result = None;
        self.tool_definitions = None;
        self.reasoning_content = None;
        self.raw_span_dump = None;
    }

    pub fn duration_ms(&self) -> i64 {
        match (self.started_at, self.ended_at) {
            (Some(s), Some(e)) => ((e.0 - s.0) / 1000).max(0),
            _ => 0,
        }
    }

    pub fn is_error(&self) -> bool {
        self.status_code.as_deref() == Some("ERROR")
    }

    pub fn is_invocation(&self) -> bool {
        self.operation_name.as_deref() == Some(INVOKE_AGENT)
    }

    pub fn total_tokens(&self) -> i64 {
        self.input_tokens.unwrap_or(0) + self.output_tokens.unwrap_or(0)
    }
}

/// An attribute of the nested `otel_dump.attributes` by its dotted key. A key that is both a
/// value and a prefix (`a` and `a.b`) keeps the value under `""` (docs/otlp.md#values).
pub fn attr<'a>(attrs: &'a Value, key: &str) -> Option<&'a Value> {
    let mut v = attrs;
    for seg in key.split('.') {
        v = v.as_object()?.get(seg)?;
    }
    match v {
        Value::Object(m) if m.contains_key("") => m.get(""),
        v => Some(v),
    }
}

/// `{key: value}` members of inputs and output (docs/otlp.md#inputs-and-outputs).
fn member<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_object()?.get(key)
}

/// Strings as they are; other values (JSON-parsed attributes, numbers) as their JSON text.
fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn float(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items.iter().filter_map(|i| text(Some(i))).collect(),
        Some(v) => text(Some(v)).into_iter().collect(),
        None => Vec::new(),
    }
}

/// `gen_ai.system_instructions`: a list of parts (the text of each) or a plain string.
fn system_instructions(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| part_text(p).or_else(|| text(Some(p)))).collect()
        }
        Some(v) => text(Some(v)).into_iter().collect(),
        None => Vec::new(),
    }
}

fn part_text(part: &Value) -> Option<String> {
    match part {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) if m.get("type").and_then(Value::as_str).unwrap_or("text") == "text" => {
            m.get("content").or_else(|| m.get("text")).and_then(Value::as_str).map(str::to_owned)
        }
        _ => None,
    }
}

/// GenAI messages (`{role, parts: [...], finish_reason}`, or the older `{role, content}`).
fn messages(v: Option<&Value>) -> Vec<SpanMessage> {
    let Some(Value::Array(items)) = v else { return Vec::new() };
    items
        .iter()
        .filter_map(Value::as_object)
        .map(|m| {
            let content = match (m.get("parts"), m.get("content")) {
                (Some(Value::Array(parts)), _) => {
                    let texts: Option<Vec<String>> = parts.iter().map(part_text).collect();
                    match texts {
                        Some(t) => t.join("\n"),
                        None => Value::Array(parts.clone()).to_string(),
                    }
                }
                (_, Some(Value::String(s))) => s.clone(),
                (_, Some(other)) if !other.is_null() => other.to_string(),
                _ => String::new(),
            };
            SpanMessage {
                role: m.get("role").and_then(Value::as_str).unwrap_or_default().to_owned(),
                content,
                finish_reason: m
                    .get("finish_reason")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }
        })
        .collect()
}

type Maps = (Map<String, Value>, Map<String, Value>, Map<String, Value>, Map<String, Value>);

/// Attributes outside the semantic-convention namespaces, by dotted key and JSON type: the
/// span's custom attributes. Lists and objects that are leaves count as strings (their JSON).
fn custom_attrs(attrs: &Value) -> Maps {
    let mut out: Maps = Default::default();
    let Some(top) = attrs.as_object() else { return out };
    for (k, v) in top {
        if RESERVED_PREFIXES.contains(&k.as_str()) {
            continue;
        }
        flatten(k.clone(), v, &mut out);
    }
    out
}

fn flatten(key: String, v: &Value, out: &mut Maps) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                // `""` holds the value of a key that is also a prefix.
                let key = if k.is_empty() { key.clone() } else { format!("{key}.{k}") };
                flatten(key, v, out);
            }
        }
        Value::Bool(b) => {
            out.3.insert(key, Value::Bool(*b));
        }
        Value::Number(n) if n.is_i64() || n.is_u64() => {
            out.1.insert(key, v.clone());
        }
        Value::Number(_) => {
            out.2.insert(key, v.clone());
        }
        Value::String(s) => {
            out.0.insert(key, Value::String(s.clone()));
        }
        Value::Null => {}
        other => {
            out.0.insert(key, Value::String(other.to_string()));
        }
    }
}
