//! The field catalog of agent spans: what a `query`, `sort_by`, `group_by` or metric may name
//! (docs/api/agents.md#span-fields), and how the query language's one evaluator reads a span.

use heddle_ql::eval::{Cell, Row, Val};
use heddle_ql::{Catalog, ValueType};

use super::span::AgentSpan;
use heddle_proto::ProtoError;

/// A span field, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanField {
    Column(&'static str, ValueType),
    /// `duration_ms`, `total_tokens`, `is_error`, `is_invocation`.
    Derived(&'static str, ValueType),
    /// A key of one of the typed custom attribute maps.
    Custom(CustomSource, String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CustomSource {
    String,
    Int,
    Float,
    Bool,
}

impl CustomSource {
    pub fn parse(s: &str) -> Option<CustomSource> {
        Some(match s {
            "custom_attrs_string" => CustomSource::String,
            "custom_attrs_int" => CustomSource::Int,
            "custom_attrs_float" => CustomSource::Float,
            "custom_attrs_bool" => CustomSource::Bool,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CustomSource::String => "custom_attrs_string",
            CustomSource::Int => "custom_attrs_int",
            CustomSource::Float => "custom_attrs_float",
            CustomSource::Bool => "custom_attrs_bool",
        }
    }

    pub fn value_type_name(self) -> &'static str {
        match self {
            CustomSource::String => "string",
            CustomSource::Int => "int",
            CustomSource::Float => "float",
            CustomSource::Bool => "bool",
        }
    }

    pub const ALL: [CustomSource; 4] =
        [CustomSource::String, CustomSource::Int, CustomSource::Float, CustomSource::Bool];

    fn value_type(self) -> ValueType {
        match self {
            CustomSource::String => ValueType::String,
            CustomSource::Int => ValueType::Int,
            CustomSource::Float => ValueType::Float,
            CustomSource::Bool => ValueType::Bool,
        }
    }
}

use ValueType::{Float as F, Int as I, String as S, Timestamp as T};

/// Columns by name and type.
const COLUMNS: &[(&str, ValueType)] = &[
    ("project_id", S),
    ("trace_id", S),
    ("span_id", S),
    ("parent_span_id", S),
    ("span_name", S),
    ("span_kind", S),
    ("started_at", T),
    ("ended_at", T),
    ("status_code", S),
    ("status_message", S),
    ("operation_name", S),
    ("provider_name", S),
    ("agent_name", S),
    ("agent_id", S),
    ("agent_description", S),
    ("agent_version", S),
    ("request_model", S),
    ("response_model", S),
    ("response_id", S),
    ("input_tokens", I),
    ("output_tokens", I),
    ("reasoning_tokens", I),
    ("cache_creation_input_tokens", I),
    ("cache_read_input_tokens", I),
    ("conversation_id", S),
    ("conversation_name", S),
    ("tool_name", S),
    ("tool_type", S),
    ("tool_call_id", S),
    ("tool_description", S),
    ("error_type", S),
    ("request_temperature", F),
    ("request_max_tokens", I),
    ("request_top_p", F),
    ("request_seed", I),
    ("output_type", S),
    ("server_address", S),
    ("server_port", I),
    ("wb_user_id", S),
    ("wb_run_id", S),
    ("wb_run_step", I),
];

const DERIVED: &[(&str, ValueType)] = &[
    ("duration_ms", I),
    ("total_tokens", I),
    ("is_error", ValueType::Bool),
    ("is_invocation", ValueType::Bool),
];

/// Semantic-convention names accepted for the columns (`gen_ai.agent.name` or `agent.name` for
/// `agent_name`).
const SEMCONV: &[(&str, &str)] = &[
    ("gen_ai.operation.name", "operation_name"),
    ("gen_ai.provider.name", "provider_name"),
    ("gen_ai.agent.name", "agent_name"),
    ("gen_ai.agent.id", "agent_id"),
    ("gen_ai.agent.version", "agent_version"),
    ("gen_ai.agent.description", "agent_description"),
    ("gen_ai.request.model", "request_model"),
    ("gen_ai.response.model", "response_model"),
    ("gen_ai.response.id", "response_id"),
    ("gen_ai.conversation.id", "conversation_id"),
    ("gen_ai.conversation.name", "conversation_name"),
    ("gen_ai.tool.name", "tool_name"),
    ("gen_ai.tool.type", "tool_type"),
    ("gen_ai.tool.call.id", "tool_call_id"),
    ("gen_ai.usage.input_tokens", "input_tokens"),
    ("gen_ai.usage.output_tokens", "output_tokens"),
    ("error.type", "error_type"),
];

/// Resolves a plain field name (column, semantic-convention alias, or derived value).
pub fn field(name: &str) -> Option<SpanField> {
    let canonical = SEMCONV
        .iter()
        .find(|(k, _)| *k == name || k.strip_prefix("gen_ai.") == Some(name))
        .map_or(name, |(_, c)| *c);
    if let Some((n, t)) = COLUMNS.iter().find(|(n, _)| *n == canonical) {
        return Some(SpanField::Column(n, *t));
    }
    DERIVED.iter().find(|(n, _)| *n == canonical).map(|(n, t)| SpanField::Derived(n, *t))
}

/// Resolves a `{source, key}` reference (group_by, metrics, measures, columns).
pub fn value_ref(source: &str, key: &str) -> Result<SpanField, ProtoError> {
    if let Some(src) = CustomSource::parse(source) {
        if key.is_empty() {
            return Err(ProtoError::invalid("a custom attribute key must not be empty"));
        }
        return Ok(SpanField::Custom(src, key.to_owned()));
    }
    let f = match source {
        "field" | "column" => field(key).filter(|f| !matches!(f, SpanField::Derived(..))),
        "derived" => field(key).filter(|f| matches!(f, SpanField::Derived(..))),
        _ => return Err(ProtoError::invalid(format!("unknown value source {source:?}"))),
    };
    f.ok_or_else(|| ProtoError::invalid(format!("unknown span {source} {key:?}")))
}

impl SpanField {
    pub fn value_type(&self) -> ValueType {
        match self {
            SpanField::Column(_, t) | SpanField::Derived(_, t) => *t,
            SpanField::Custom(s, _) => s.value_type(),
        }
    }

    /// The name a result row shows for this field.
    pub fn name(&self) -> String {
        match self {
            SpanField::Column(n, _) | SpanField::Derived(n, _) => (*n).to_owned(),
            SpanField::Custom(_, k) => k.clone(),
        }
    }
}

pub struct SpanCatalog;

impl Catalog for SpanCatalog {
    type Field = SpanField;
    type Error = ProtoError;

    /// Plain names, or `custom_attrs_<type>.<key>` for a custom attribute.
    fn resolve(&self, name: &str) -> Result<(SpanField, ValueType), ProtoError> {
        if let Some((source, key)) = name.split_once('.')
            && CustomSource::parse(source).is_some()
        {
            let f = value_ref(source, key)?;
            let t = f.value_type();
            return Ok((f, t));
        }
        let f = field(name)
            .ok_or_else(|| ProtoError::invalid(format!("unknown agent span field {name:?}")))?;
        let t = f.value_type();
        Ok((f, t))
    }
}

fn opt_str(v: &Option<String>) -> Val {
    v.as_ref().map_or(Val::Null, |s| Val::Str(s.clone()))
}

fn opt_int(v: Option<i64>) -> Val {
    v.map_or(Val::Null, Val::Int)
}

fn opt_float(v: Option<f64>) -> Val {
    v.map_or(Val::Null, Val::Float)
}

impl AgentSpan {
    /// The value of a field, as the evaluator and the aggregations read it.
    pub fn value(&self, f: &SpanField) -> Val {
        match f {
            SpanField::Custom(src, key) => {
                let map = match src {
                    CustomSource::String => &self.custom_attrs_string,
                    CustomSource::Int => &self.custom_attrs_int,
                    CustomSource::Float => &self.custom_attrs_float,
                    CustomSource::Bool => &self.custom_attrs_bool,
                };
                match map.get(key) {
                    Some(serde_json::Value::String(s)) => Val::Str(s.clone()),
                    Some(serde_json::Value::Bool(b)) => Val::Bool(*b),
                    Some(serde_json::Value::Number(n)) if *src == CustomSource::Int => {
                        n.as_i64().map_or(Val::Null, Val::Int)
                    }
                    Some(serde_json::Value::Number(n)) => n.as_f64().map_or(Val::Null, Val::Float),
                    _ => Val::Null,
                }
            }
            SpanField::Derived(name, _) => match *name {
                "duration_ms" => Val::Int(self.duration_ms()),
                "total_tokens" => Val::Int(self.total_tokens()),
                "is_error" => Val::Bool(self.is_error()),
                _ => Val::Bool(self.is_invocation()),
            },
            SpanField::Column(name, _) => match *name {
                "project_id" => Val::Str(self.project_id.clone()),
                "trace_id" => Val::Str(self.trace_id.clone()),
                "span_id" => Val::Str(self.span_id.clone()),
                "parent_span_id" => opt_str(&self.parent_span_id),
                "span_name" => opt_str(&self.span_name),
                "span_kind" => opt_str(&self.span_kind),
                "started_at" => opt_int(self.started_at.map(|m| m.0)),
                "ended_at" => opt_int(self.ended_at.map(|m| m.0)),
                "status_code" => opt_str(&self.status_code),
                "status_message" => opt_str(&self.status_message),
                "operation_name" => opt_str(&self.operation_name),
                "provider_name" => opt_str(&self.provider_name),
                "agent_name" => opt_str(&self.agent_name),
                "agent_id" => opt_str(&self.agent_id),
                "agent_description" => opt_str(&self.agent_description),
                "agent_version" => opt_str(&self.agent_version),
                "request_model" => opt_str(&self.request_model),
                "response_model" => opt_str(&self.response_model),
                "response_id" => opt_str(&self.response_id),
                "input_tokens" => opt_int(self.input_tokens),
                "output_tokens" => opt_int(self.output_tokens),
                "reasoning_tokens" => opt_int(self.reasoning_tokens),
                "cache_creation_input_tokens" => opt_int(self.cache_creation_input_tokens),
                "cache_read_input_tokens" => opt_int(self.cache_read_input_tokens),
                "conversation_id" => opt_str(&self.conversation_id),
                "conversation_name" => opt_str(&self.conversation_name),
                "tool_name" => opt_str(&self.tool_name),
                "tool_type" => opt_str(&self.tool_type),
                "tool_call_id" => opt_str(&self.tool_call_id),
                "tool_description" => opt_str(&self.tool_description),
                "error_type" => opt_str(&self.error_type),
                "request_temperature" => opt_float(self.request_temperature),
                "request_max_tokens" => opt_int(self.request_max_tokens),
                "request_top_p" => opt_float(self.request_top_p),
                "request_seed" => opt_int(self.request_seed),
                "output_type" => opt_str(&self.output_type),
                "server_address" => opt_str(&self.server_address),
                "server_port" => opt_int(self.server_port),
                "wb_user_id" => opt_str(&self.wb_user_id),
                "wb_run_id" => opt_str(&self.wb_run_id),
                "wb_run_step" => opt_int(self.wb_run_step),
                _ => Val::Null,
            },
        }
    }
}

impl Row<SpanField> for AgentSpan {
    fn cell(&self, field: &SpanField) -> Cell<'_> {
        Cell::Val(self.value(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_reads_its_own_value() {
        // A column missing from `value` would silently read NULL.
        let span = AgentSpan::default();
        for (name, _) in COLUMNS {
            let f = field(name).unwrap();
            let v = span.value(&f);
            let expected_non_null = matches!(*name, "project_id" | "trace_id" | "span_id");
            assert_eq!(v != Val::Null, expected_non_null, "{name}");
        }
    }

    #[test]
    fn semconv_aliases_resolve() {
        assert_eq!(field("gen_ai.agent.name"), field("agent_name"));
        assert_eq!(field("agent.name"), field("agent_name"));
        assert!(field("nope").is_none());
        assert!(matches!(
            SpanCatalog.resolve("custom_attrs_int.retries").unwrap().0,
            SpanField::Custom(CustomSource::Int, _)
        ));
        assert!(value_ref("derived", "agent_name").is_err());
        assert!(value_ref("field", "duration_ms").is_err());
    }
}
