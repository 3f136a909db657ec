//! OTLP logs (docs/otlp.md, "Log records"): decoding an `ExportLogsServiceRequest`, turning each
//! log record into an [`OtelLog`] to store, and — on read — merging the GenAI message events
//! among a span's records into its call's inputs and output ([`merge_into_call`]).
//!
//! GenAI instrumentations may send a call's messages as log records (events) rather than span
//! attributes, each carrying the trace and span id of its span. Records and spans travel
//! separately, in any order and in different requests, so records are stored on their own and
//! merged when the call is read: whichever arrives first, the call reads the same once both are
//! in. A record whose span never arrives, or that names no span, stays readable on its own
//! (`/otel/logs/query`).

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::request::{self, AnyValue};
use super::values::{attribute_value, flat, nested};
use super::{MAX_REASONS, json as otlp_json, resource_project, span, wire};
use crate::calls::Call;
use crate::limits::{self, MAX_LOG_RECORD_BYTES, MAX_LOG_RECORDS_PER_REQUEST};
use crate::{ProjectId, ProtoError};

/// One stored log record. JSON members are kept as text, as they are stored.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelLog {
    pub project: ProjectId,
    /// Lowercase hex; empty when the record names no trace.
    pub trace_id: String,
    /// Lowercase hex; empty when the record names no span.
    pub span_id: String,
    /// The record's time in ns since the epoch: `time_unix_nano`, else the observed time.
    pub time_unix_nano: i64,
    /// The record's position in its export request: orders records of the same time.
    pub seq: i64,
    /// Digest of everything above and below (but the project): the same record sent twice has
    /// the same id, and is stored once.
    pub id: String,
    /// The LogRecord's `event_name`, else its `event.name` attribute, else empty.
    pub event_name: String,
    pub severity_number: i32,
    pub severity_text: String,
    /// The body as JSON (a kvlist is an object; a string holding a JSON object or array is
    /// parsed, as for attributes); `null` when absent.
    pub body: String,
    /// The attributes as one JSON object, keys unsplit.
    pub attributes: String,
    /// The rest of the record: observed time, flags, dropped attributes, resource and scope.
    pub dump: String,
    pub wb_user_id: Option<String>,
}

impl OtelLog {
    /// The checks every write path makes (the Kafka consumer included): well-formed ids, and
    /// members that are JSON within the depth and size bounds.
    pub fn check(&self) -> Result<(), ProtoError> {
        let hex_ok = |s: &str, len: usize| {
            s.is_empty() || (s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit()))
        };
        if !hex_ok(&self.trace_id, 32) || !hex_ok(&self.span_id, 16) {
            return Err(ProtoError::invalid(format!(
                "log record {}: malformed trace or span id",
                self.id
            )));
        }
        if self.id.is_empty() || self.id.len() > 64 {
            return Err(ProtoError::invalid("a log record needs an id of at most 64 bytes"));
        }
        let size = self.body.len() + self.attributes.len() + self.dump.len();
        if size > MAX_LOG_RECORD_BYTES {
            return Err(ProtoError::invalid(format!(
                "the log record is {size} bytes once stored, more than the limit of \
                 {MAX_LOG_RECORD_BYTES}"
            )));
        }
        limits::check_json_text("the log record's body", &self.body)?;
        limits::check_json_text("the log record's attributes", &self.attributes)?;
        limits::check_json_text("the log record", &self.dump)
    }

    /// The record as `/otel/logs/query` returns it.
    pub fn to_json(&self) -> Value {
        let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
        let id_or_null = |s: &str| if s.is_empty() { Value::Null } else { Value::from(s) };
        let mut out = json!({
            "id": self.id,
            "project_id": self.project.as_str(),
            "trace_id": id_or_null(&self.trace_id),
            "span_id": id_or_null(&self.span_id),
            "time_unix_nano": self.time_unix_nano,
            "event_name": self.event_name,
            "severity_number": self.severity_number,
            "severity_text": self.severity_text,
            "body": parse(&self.body),
            "attributes": parse(&self.attributes),
        });
        if let (Value::Object(out), Value::Object(dump)) = (&mut out, parse(&self.dump)) {
            out.extend(dump);
        }
        out
    }
}

// ---- decoding ---------------------------------------------------------------------------------

/// Decodes an OTLP/protobuf logs body; one with more log records or values than
/// [`crate::limits`] allows is refused before it is decoded.
pub fn decode_protobuf(body: &[u8]) -> Result<ExportLogsServiceRequest, ProtoError> {
    wire::count_logs(body)?;
    ExportLogsServiceRequest::decode(body).map_err(wire::malformed)
}

/// Decodes an OTLP/JSON logs body, in every form the protobuf JSON mapping allows (as for
/// traces: either field-name style, hex ids, enum names or numbers, 64-bit integers as strings
/// or numbers).
pub fn decode_json(body: &[u8]) -> Result<ExportLogsServiceRequest, ProtoError> {
    let bad = |e: serde_json::Error| ProtoError::invalid(format!("invalid OTLP/JSON body: {e}"));
    otlp_json::check_shape(body)?;
    let mut v: Value = serde_json::from_slice(body).map_err(bad)?;
    if !v.is_object() {
        return Err(ProtoError::invalid("invalid OTLP/JSON body: expected an object"));
    }
    let records = otlp_json::count_lists(&v, &["logRecords", "log_records"])?;
    if records > MAX_LOG_RECORDS_PER_REQUEST {
        return Err(ProtoError::invalid(format!(
            "the request has more than {MAX_LOG_RECORDS_PER_REQUEST} log records: send fewer \
             per request"
        )));
    }
    otlp_json::canonicalise(&mut v, "");
    serde_json::from_value(v).map_err(bad)
}

// ---- conversion -------------------------------------------------------------------------------

/// What a logs request turned into.
#[derive(Debug, Default)]
pub struct ConvertedLogs {
    pub logs: Vec<OtelLog>,
    /// Every project the records go to (each must be authorised).
    pub projects: std::collections::BTreeSet<ProjectId>,
    pub rejected: i64,
    /// Why records were rejected: the first few reasons.
    pub errors: Vec<String>,
}

impl ConvertedLogs {
    pub fn response(&self) -> ExportLogsServiceResponse {
        if self.rejected == 0 {
            return ExportLogsServiceResponse { partial_success: None };
        }
        let mut message = self.errors.join("; ");
        if self.rejected as usize > self.errors.len() {
            message.push_str("; ...");
        }
        ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: self.rejected,
                error_message: message,
            }),
        }
    }
}

/// Converts every log record of `req`. The project is `header_project` when given, else each
/// resource's `wandb.entity` + `wandb.project`; a resource with neither fails the request, as
/// for traces. A record that cannot be stored is rejected alone (partial success).
pub fn convert(
    req: &ExportLogsServiceRequest,
    header_project: Option<&ProjectId>,
    wb_user_id: Option<&str>,
) -> Result<ConvertedLogs, ProtoError> {
    let mut out = ConvertedLogs::default();
    let mut seq = 0i64;
    for rl in &req.resource_logs {
        let resource_attrs = rl.resource.as_ref().map(request::Resource::from);
        let project = match (header_project, resource_project(resource_attrs.as_ref())) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) => p?,
            (None, None) => {
                return Err(ProtoError::invalid(
                    "no project for these log records: send a project_id: <entity>/<project> \
                     header or the resource attributes wandb.entity and wandb.project",
                ));
            }
        };
        let resource_ok =
            resource_attrs.as_ref().map_or(Ok(()), |r| span::check_attribute_keys(&r.attributes));
        let resource = resource_attrs.as_ref().map(|r| {
            json!({
                "attributes": nested(&r.attributes),
                "dropped_attributes_count": r.dropped_attributes_count,
            })
        });
        for sl in &rl.scope_logs {
            let scope = json!({
                "name": sl.scope.as_ref().map_or("", |s| s.name.as_str()),
                "version": sl.scope.as_ref().map_or("", |s| s.version.as_str()),
            });
            for rec in &sl.log_records {
                let converted = resource_ok.clone().and_then(|()| {
                    to_log(&project, rec, seq, resource.as_ref(), &scope, wb_user_id)
                });
                seq += 1;
                match converted {
                    Ok(log) => {
                        out.projects.insert(project.clone());
                        out.logs.push(log);
                    }
                    Err(reason) => {
                        out.rejected += 1;
                        if out.errors.len() < MAX_REASONS {
                            out.errors.push(format!(
                                "log record (trace_id {:?}, span_id {:?}): {reason}",
                                hex::encode(&rec.trace_id),
                                hex::encode(&rec.span_id)
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// An optional id: empty or all zeroes is none; otherwise exactly `len` bytes.
fn optional_id(bytes: &[u8], len: usize, what: &str) -> Result<String, String> {
    if bytes.iter().all(|b| *b == 0) {
        return Ok(String::new());
    }
    if bytes.len() != len {
        return Err(format!("{what} must be {len} bytes, got {}", bytes.len()));
    }
    Ok(hex::encode(bytes))
}

fn nanos(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One log record of `project` as stored.
fn to_log(
    project: &ProjectId,
    rec: &LogRecord,
    seq: i64,
    resource: Option<&Value>,
    scope: &Value,
    wb_user_id: Option<&str>,
) -> Result<OtelLog, String> {
    let kvs = request::key_values(&rec.attributes);
    span::check_attribute_keys(&kvs)?;
    let trace_id = optional_id(&rec.trace_id, 16, "trace_id")?;
    let span_id = optional_id(&rec.span_id, 8, "span_id")?;
    let attrs: Map<String, Value> =
        flat(&kvs).into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let event_name = if rec.event_name.is_empty() {
        attrs.get("event.name").and_then(Value::as_str).unwrap_or_default().to_owned()
    } else {
        rec.event_name.clone()
    };
    let body = attribute_value(rec.body.as_ref().map(AnyValue::from).as_ref());
    let attributes = Value::Object(attrs);
    let dump = json!({
        "observed_time_unix_nano": nanos(rec.observed_time_unix_nano),
        "flags": rec.flags,
        "dropped_attributes_count": rec.dropped_attributes_count,
        "resource": resource,
        "scope": scope,
    });
    let deep = |e: ProtoError| e.to_string();
    limits::check_json_depth("the log record's body", &body).map_err(deep)?;
    limits::check_json_depth("the log record's attributes", &attributes).map_err(deep)?;
    limits::check_json_depth("the log record", &dump).map_err(deep)?;
    let time =
        if rec.time_unix_nano != 0 { rec.time_unix_nano } else { rec.observed_time_unix_nano };
    let mut log = OtelLog {
        project: project.clone(),
        trace_id,
        span_id,
        time_unix_nano: nanos(time),
        seq,
        id: String::new(),
        event_name,
        severity_number: rec.severity_number,
        severity_text: rec.severity_text.clone(),
        body: body.to_string(),
        attributes: attributes.to_string(),
        dump: dump.to_string(),
        wb_user_id: wb_user_id.map(str::to_owned),
    };
    log.id = record_id(&log);
    log.check().map_err(|e| e.to_string())?;
    Ok(log)
}

/// 128 bits of SHA-256 over the record's content, position and time, in hex.
fn record_id(log: &OtelLog) -> String {
    let mut h = Sha256::new();
    for part in [
        log.trace_id.as_bytes(),
        log.span_id.as_bytes(),
        &log.time_unix_nano.to_le_bytes(),
        &log.seq.to_le_bytes(),
        log.event_name.as_bytes(),
        &log.severity_number.to_le_bytes(),
        log.severity_text.as_bytes(),
        log.body.as_bytes(),
        log.attributes.as_bytes(),
        log.dump.as_bytes(),
    ] {
        // Length-prefixed, so no two different records hash the same bytes.
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    hex::encode(&h.finalize()[..16])
}

// ---- reading ----------------------------------------------------------------------------------

/// `POST /otel/logs/query`: a project's log records, oldest first, optionally those of one trace
/// or one span (an empty `span_id` selects the records that name no span).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQueryReq {
    pub project_id: ProjectId,
    #[serde(default)]
    pub trace_id: Option<String>,
    #[serde(default)]
    pub span_id: Option<String>,
    #[serde(default)]
    pub limit: Option<u64>,
    #[serde(default)]
    pub offset: Option<u64>,
}

/// A validated [`LogsQueryReq`].
#[derive(Debug, Clone, PartialEq)]
pub struct LogsQuery {
    pub project: ProjectId,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
    pub limit: u64,
    pub offset: u64,
}

/// Records one query returns when it names no limit.
pub const DEFAULT_LOG_QUERY_LIMIT: u64 = 100;

impl LogsQueryReq {
    pub fn validate(self) -> Result<LogsQuery, ProtoError> {
        let id = |v: Option<String>, len: usize, what: &str| match v {
            Some(s)
                if !s.is_empty()
                    && (s.len() != len || !s.bytes().all(|b| b.is_ascii_hexdigit())) =>
            {
                Err(ProtoError::invalid(format!("{what} must be {len} hex digits")))
            }
            other => Ok(other.map(|s| s.to_ascii_lowercase())),
        };
        let limit = self.limit.unwrap_or(DEFAULT_LOG_QUERY_LIMIT);
        if limit > limits::MAX_LOG_QUERY_LIMIT {
            return Err(ProtoError::invalid(format!(
                "limit must be at most {}",
                limits::MAX_LOG_QUERY_LIMIT
            )));
        }
        let offset = self.offset.unwrap_or(0);
        if offset > i64::MAX as u64 {
            return Err(ProtoError::invalid("offset is too large"));
        }
        Ok(LogsQuery {
            project: self.project_id,
            trace_id: id(self.trace_id, 32, "trace_id")?,
            span_id: id(self.span_id, 16, "span_id")?,
            limit,
            offset,
        })
    }
}

// ---- merging into calls -----------------------------------------------------------------------

/// The GenAI message events, by event name, and the role each message plays.
const MESSAGE_EVENTS: &[(&str, &str)] = &[
    ("gen_ai.system.message", "system"),
    ("gen_ai.user.message", "user"),
    ("gen_ai.assistant.message", "assistant"),
    ("gen_ai.tool.message", "tool"),
];
/// A completion choice (`gen_ai.choice`): one item of the output's `choices`.
const CHOICE_EVENT: &str = "gen_ai.choice";
/// The newer convention: one event per inference, holding the messages as attributes.
const DETAILS_EVENT: &str = "gen_ai.client.inference.operation.details";
/// Attributes of [`DETAILS_EVENT`] that become inputs, and those that become the output.
const DETAILS_INPUT_KEYS: &[&str] = &["gen_ai.system_instructions", "gen_ai.input.messages"];
const DETAILS_OUTPUT_KEYS: &[&str] = &["gen_ai.output.messages"];

/// What a span's log records add to its call.
#[derive(Debug, Default, PartialEq)]
pub struct Contribution {
    pub inputs: Map<String, Value>,
    pub output: Map<String, Value>,
}

impl Contribution {
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty() && self.output.is_empty()
    }
}

/// The inputs and output the log records of one span make, in record order (time, then position
/// in the request); a record stored twice counts once.
///
/// - `gen_ai.{system,user,assistant,tool}.message` → an item of `inputs.messages`: the body
///   object (a body that is not an object becomes `{"content": body}`), with `role` set from the
///   event name unless the body has one;
/// - `gen_ai.choice` → an item of `output.choices`: the body;
/// - `gen_ai.client.inference.operation.details` → its `gen_ai.system_instructions` and
///   `gen_ai.input.messages` attributes under those keys in `inputs`, its
///   `gen_ai.output.messages` in `output` (the shape the same attributes on a span take).
pub fn contribution(logs: &[OtelLog]) -> Contribution {
    let mut sorted: Vec<&OtelLog> = logs.iter().collect();
    sorted.sort_by(|a, b| (a.time_unix_nano, a.seq, &a.id).cmp(&(b.time_unix_nano, b.seq, &b.id)));
    sorted.dedup_by(|a, b| a.id == b.id);
    let mut out = Contribution::default();
    let mut messages = Vec::new();
    let mut choices = Vec::new();
    for log in sorted {
        let name = log.event_name.as_str();
        if let Some((_, role)) = MESSAGE_EVENTS.iter().find(|(n, _)| *n == name) {
            messages.push(message(parse(&log.body), role));
        } else if name == CHOICE_EVENT {
            choices.push(match parse(&log.body) {
                Value::Null => Value::Object(Map::new()),
                body => body,
            });
        } else if name == DETAILS_EVENT {
            let attrs = parse(&log.attributes);
            for (keys, into) in
                [(DETAILS_INPUT_KEYS, &mut out.inputs), (DETAILS_OUTPUT_KEYS, &mut out.output)]
            {
                for key in keys {
                    if let Some(v) = attrs.get(*key).filter(|v| !v.is_null()) {
                        into.insert((*key).to_owned(), v.clone());
                    }
                }
            }
        }
    }
    if !messages.is_empty() {
        out.inputs.insert("messages".into(), Value::Array(messages));
    }
    if !choices.is_empty() {
        out.output.insert("choices".into(), Value::Array(choices));
    }
    out
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// A message event's body as a chat message with its role first.
fn message(body: Value, role: &str) -> Value {
    let fields = match body {
        Value::Object(o) => o,
        Value::Null => Map::new(),
        other => Map::from_iter([("content".to_owned(), other)]),
    };
    let mut msg = Map::with_capacity(fields.len() + 1);
    if !fields.contains_key("role") {
        msg.insert("role".into(), role.into());
    }
    msg.extend(fields);
    Value::Object(msg)
}

/// Whether `call` can have log records: it came from a span (a 16-hex-digit id in a
/// 32-hex-digit trace). Calls of the SDK (UUIDs) are never looked up.
pub fn is_span_call(call: &Call) -> bool {
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    hex(&call.id, 16) && hex(&call.trace_id, 32)
}

/// Merges what the log records of the call's span contribute into its inputs and output. The
/// span's own values win: a key already in the inputs is kept; the output takes the records'
/// keys when it is absent or an object without them, and is left alone otherwise (the records
/// stay readable through `/otel/logs/query`). `inputs`/`output` say which members the read
/// returns: a member left out is not filled in.
pub fn merge_into_call(call: &mut Call, logs: &[OtelLog], inputs: bool, output: bool) {
    let add = contribution(logs);
    if add.is_empty() {
        return;
    }
    if inputs && !add.inputs.is_empty() {
        let mut merged: Map<String, Value> =
            serde_json::from_str(call.inputs.get()).unwrap_or_default();
        let before = merged.len();
        for (k, v) in add.inputs {
            merged.entry(k).or_insert(v);
        }
        if merged.len() != before {
            call.inputs = raw(&Value::Object(merged));
        }
    }
    if output && !add.output.is_empty() {
        let current: Value = call
            .output
            .as_ref()
            .and_then(|o| serde_json::from_str(o.get()).ok())
            .unwrap_or_default();
        let merged = match current {
            Value::Null => Some(Value::Object(add.output)),
            Value::Object(mut o) => {
                let before = o.len();
                for (k, v) in add.output {
                    o.entry(k).or_insert(v);
                }
                (o.len() != before).then_some(Value::Object(o))
            }
            _ => None,
        };
        if let Some(m) = merged {
            call.output = Some(raw(&m));
        }
    }
}

fn raw(v: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).expect("a JSON value serialises")
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, KeyValueList, any_value};
    use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::resource::v1::Resource;

    use super::*;

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn s(v: &str) -> any_value::Value {
        any_value::Value::StringValue(v.into())
    }

    fn kvlist_value(items: Vec<KeyValue>) -> any_value::Value {
        any_value::Value::KvlistValue(KeyValueList { values: items })
    }

    fn kvlist(items: Vec<KeyValue>) -> AnyValue {
        AnyValue { value: Some(kvlist_value(items)) }
    }

    const TRACE: [u8; 16] = [7; 16];
    const SPAN: [u8; 8] = [9; 8];

    fn record(event: &str, time: u64, body: Option<AnyValue>) -> LogRecord {
        LogRecord {
            time_unix_nano: time,
            trace_id: TRACE.to_vec(),
            span_id: SPAN.to_vec(),
            event_name: event.into(),
            body,
            ..Default::default()
        }
    }

    fn request(records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs { log_records: records, ..Default::default() }],
                ..Default::default()
            }],
        }
    }

    fn project() -> ProjectId {
        ProjectId::parse("e/p").unwrap()
    }

    fn convert_ok(records: Vec<LogRecord>) -> ConvertedLogs {
        convert(&request(records), Some(&project()), Some("u")).unwrap()
    }

    #[test]
    fn messages_and_choices_become_inputs_and_output_in_time_order() {
        let user = kvlist(vec![kv("content", s("2+2?"))]);
        let choice = kvlist(vec![
            kv("index", any_value::Value::IntValue(0)),
            kv("finish_reason", s("stop")),
            kv("message", kvlist_value(vec![kv("role", s("assistant")), kv("content", s("4"))])),
        ]);
        // Sent out of order: the choice first, the system message with its event name in the
        // `event.name` attribute (the older SDK event API).
        let mut system = record("", 10, Some(AnyValue { value: Some(s("Be brief.")) }));
        system.attributes.push(kv("event.name", s("gen_ai.system.message")));
        let logs = convert_ok(vec![
            record("gen_ai.choice", 30, Some(choice)),
            record("gen_ai.user.message", 20, Some(user)),
            system,
        ])
        .logs;
        assert_eq!(logs[0].trace_id, hex::encode(TRACE));
        let c = contribution(&logs);
        assert_eq!(
            Value::Object(c.inputs),
            json!({"messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "2+2?"},
            ]})
        );
        assert_eq!(
            Value::Object(c.output),
            json!({"choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}
            ]})
        );
    }

    #[test]
    fn duplicates_count_once_and_equal_times_keep_request_order() {
        let records = || {
            vec![
                record("gen_ai.user.message", 5, Some(kvlist(vec![kv("content", s("a"))]))),
                record("gen_ai.assistant.message", 5, Some(kvlist(vec![kv("content", s("b"))]))),
            ]
        };
        let logs = convert_ok(records()).logs;
        assert_ne!(logs[0].id, logs[1].id);
        // The same request converted again gives the same ids: a retry is a duplicate.
        let again = convert_ok(records()).logs;
        assert_eq!(again, logs);
        let twice: Vec<OtelLog> = logs.iter().chain(again.iter().rev()).cloned().collect();
        assert_eq!(
            contribution(&twice).inputs["messages"],
            json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
        );
    }

    #[test]
    fn inference_details_use_the_span_attribute_keys() {
        let mut rec = record(DETAILS_EVENT, 1, None);
        rec.attributes = vec![
            kv(
                "gen_ai.input.messages",
                s(r#"[{"role":"user","parts":[{"type":"text","content":"hi"}]}]"#),
            ),
            kv("gen_ai.output.messages", s(r#"[{"role":"assistant","parts":[]}]"#)),
            kv("gen_ai.system_instructions", s(r#"[{"type":"text","content":"sys"}]"#)),
        ];
        let c = contribution(&convert_ok(vec![rec]).logs);
        assert_eq!(c.inputs["gen_ai.input.messages"][0]["parts"][0]["content"], "hi");
        assert_eq!(c.inputs["gen_ai.system_instructions"][0]["content"], "sys");
        assert_eq!(c.output["gen_ai.output.messages"][0]["role"], "assistant");
    }

    fn call(inputs: &str, output: Option<&str>) -> Call {
        Call {
            id: hex::encode(SPAN),
            project_id: project(),
            op_name: "op".into(),
            display_name: None,
            trace_id: hex::encode(TRACE),
            parent_id: None,
            thread_id: None,
            turn_id: None,
            started_at: crate::time::Micros(0),
            ended_at: None,
            attributes: RawValue::from_string("{}".into()).unwrap(),
            inputs: RawValue::from_string(inputs.into()).unwrap(),
            output: output.map(|o| RawValue::from_string(o.into()).unwrap()),
            exception: None,
            summary: json!({}),
            otel_dump: None,
            wb_user_id: None,
            wb_username: None,
            wb_run_id: None,
            wb_run_step: None,
            wb_run_step_end: None,
            deleted_at: None,
            expire_at: None,
            storage_size_bytes: None,
            total_storage_size_bytes: None,
        }
    }

    #[test]
    fn the_spans_own_values_win_when_merging() {
        let logs = convert_ok(vec![
            record("gen_ai.user.message", 1, Some(kvlist(vec![kv("content", s("q"))]))),
            record(
                "gen_ai.choice",
                2,
                Some(kvlist(vec![kv("index", any_value::Value::IntValue(0))])),
            ),
        ])
        .logs;
        let mut c = call(r#"{"model": "m"}"#, None);
        assert!(is_span_call(&c));
        merge_into_call(&mut c, &logs, true, true);
        assert_eq!(c.inputs.get(), r#"{"model":"m","messages":[{"role":"user","content":"q"}]}"#);
        assert_eq!(c.output.as_ref().unwrap().get(), r#"{"choices":[{"index":0}]}"#);

        let mut c = call(r#"{"messages":"mine"}"#, Some(r#""text""#));
        merge_into_call(&mut c, &logs, true, true);
        assert_eq!(c.inputs.get(), r#"{"messages":"mine"}"#);
        assert_eq!(c.output.as_ref().unwrap().get(), r#""text""#);

        // A projection without inputs or output gets neither filled in.
        let mut c = call("{}", None);
        merge_into_call(&mut c, &logs, false, false);
        assert_eq!((c.inputs.get(), c.output.is_none()), ("{}", true));
    }

    #[test]
    fn records_without_a_span_and_bad_records() {
        let mut orphan = record("app.log", 1, Some(AnyValue { value: Some(s("hello")) }));
        orphan.trace_id.clear();
        orphan.span_id = vec![0; 8];
        let mut short = record("gen_ai.user.message", 1, None);
        short.span_id = vec![1, 2, 3];
        let mut long_key = record("x", 1, None);
        long_key.attributes.push(kv(&"k".repeat(2000), s("v")));
        let big =
            record("x", 1, Some(AnyValue { value: Some(s(&"x".repeat(MAX_LOG_RECORD_BYTES))) }));
        let out = convert_ok(vec![orphan, short, long_key, big]);
        assert_eq!(out.logs.len(), 1);
        assert_eq!((out.logs[0].trace_id.as_str(), out.logs[0].span_id.as_str()), ("", ""));
        assert_eq!(out.logs[0].to_json()["body"], "hello");
        assert_eq!(out.rejected, 3);
        let message = out.response().partial_success.unwrap().error_message;
        assert!(message.contains("span_id must be 8 bytes"), "{message}");
        assert!(message.contains("longer than the limit"), "{message}");
        assert!(message.contains("more than the limit of"), "{message}");
    }

    #[test]
    fn the_project_comes_from_the_header_or_the_resource() {
        let req = request(vec![record("x", 1, None)]);
        assert!(convert(&req, None, None).unwrap_err().to_string().contains("no project"));
        let mut req = req;
        req.resource_logs[0].resource = Some(Resource {
            attributes: vec![kv("wandb.entity", s("ent")), kv("wandb.project", s("proj"))],
            ..Default::default()
        });
        let out = convert(&req, None, None).unwrap();
        assert_eq!(out.logs[0].project.as_str(), "ent/proj");
        assert_eq!(out.projects.len(), 1);
    }

    #[test]
    fn json_bodies_in_either_style() {
        let camel = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [{
            "timeUnixNano": 1700000000000000000u64, "severityNumber": "SEVERITY_NUMBER_INFO",
            "traceId": hex::encode(TRACE), "spanId": hex::encode(SPAN), "eventName": "gen_ai.user.message",
            "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "hi"}}]}}
        }]}]}]});
        let snake = json!({"resource_logs": [{"scope_logs": [{"log_records": [{
            "time_unix_nano": "1700000000000000000", "severity_number": 9,
            "trace_id": hex::encode(TRACE), "span_id": hex::encode(SPAN), "event_name": "gen_ai.user.message",
            "body": {"kvlist_value": {"values": [{"key": "content", "value": {"string_value": "hi"}}]}}
        }]}]}]});
        for body in [camel, snake] {
            let req = decode_json(body.to_string().as_bytes()).unwrap();
            let log = &convert(&req, Some(&project()), None).unwrap().logs[0];
            assert_eq!(log.severity_number, 9);
            assert_eq!(log.time_unix_nano, 1_700_000_000_000_000_000);
            assert_eq!(log.body, r#"{"content":"hi"}"#);
        }
        assert!(decode_json(b"[]").is_err());
    }

    #[test]
    fn too_many_records_are_refused_before_decoding() {
        let many = request(vec![LogRecord::default(); MAX_LOG_RECORDS_PER_REQUEST + 1]);
        let err = decode_protobuf(&many.encode_to_vec()).unwrap_err();
        assert!(err.to_string().contains("more than 50000 log records"), "{err}");
        let few = request(vec![LogRecord::default(); 3]);
        assert_eq!(decode_protobuf(&few.encode_to_vec()).unwrap(), few);
    }
}
