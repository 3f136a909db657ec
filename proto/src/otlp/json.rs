//! OTLP/JSON. The generated types' serde support reads the canonical encoding (lowerCamelCase
//! names, hex ids, enums as integers). Exporters also send what the protobuf JSON mapping
//! allows besides: original snake_case field names, enum names (`"SPAN_KIND_SERVER"`), and
//! 64-bit integers as numbers or strings. A small pass over the parsed JSON brings those to the
//! canonical form first.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::SeverityNumber;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::{Map, Value};

use crate::ProtoError;
use crate::limits::{MAX_ITEMS_PER_MESSAGE, MAX_SPANS_PER_REQUEST, MAX_VALUES_PER_REQUEST};

/// Decodes an OTLP/JSON body.
pub fn decode_json(body: &[u8]) -> Result<ExportTraceServiceRequest, ProtoError> {
    let bad = |e: serde_json::Error| ProtoError::invalid(format!("invalid OTLP/JSON body: {e}"));
    check_shape(body)?;
    let mut v: Value = serde_json::from_slice(body).map_err(bad)?;
    if !v.is_object() {
        return Err(ProtoError::invalid("invalid OTLP/JSON body: expected an object"));
    }
    check_counts(&v)?;
    canonicalise(&mut v, "");
    serde_json::from_value(v).map_err(bad)
}

/// The bounds an OTLP/JSON body is held to in its text, before it is parsed: parsing itself is
/// where empty objects grow 30-fold, and where one array of a million numbers grows by doubling
/// into tens of megabytes (docs/limits.md, "OpenTelemetry"). No list of OTLP is longer than a
/// request's spans or log records may be.
pub(super) fn check_shape(body: &[u8]) -> Result<(), ProtoError> {
    check_json_shape(&crate::limits::json_shape(body, crate::limits::MAX_JSON_DEPTH))
}

/// [`check_shape`] on a shape already counted: the ingest endpoints count it once to charge the
/// body, and refuse it by these bounds before it takes any of the memory budget.
pub fn check_json_shape(shape: &crate::limits::JsonShape) -> Result<(), ProtoError> {
    if shape.containers > MAX_VALUES_PER_REQUEST {
        return Err(too_many_values());
    }
    let longest = MAX_SPANS_PER_REQUEST.max(crate::limits::MAX_LOG_RECORDS_PER_REQUEST);
    if shape.widest > longest {
        return Err(ProtoError::invalid(format!(
            "one array or object of the request holds more than {longest} items: no list of \
             OTLP is that long"
        )));
    }
    Ok(())
}

/// The bound of [`crate::limits`] on spans, checked on the parsed JSON before it is converted
/// into the (larger) OTLP structs; values were counted in the text already.
fn check_counts(v: &Value) -> Result<(), ProtoError> {
    if count_lists(v, &["spans"])? > MAX_SPANS_PER_REQUEST {
        return Err(ProtoError::invalid(format!(
            "the request has more than {MAX_SPANS_PER_REQUEST} spans: send fewer per request"
        )));
    }
    Ok(())
}

/// The items of the lists under `keys` (a request's spans, or its log records, under either
/// field-name style) anywhere in a parsed OTLP/JSON body. Every object's other lists are held
/// to the bound on one message's items ([`MAX_ITEMS_PER_MESSAGE`]), together.
pub(super) fn count_lists(v: &Value, keys: &[&str]) -> Result<usize, ProtoError> {
    let mut counted = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                let mut items = 0usize;
                for (key, value) in map {
                    let Value::Array(list) = value else { continue };
                    if keys.contains(&key.as_str()) {
                        counted += list.len();
                    } else {
                        items += list.len();
                    }
                }
                if items > MAX_ITEMS_PER_MESSAGE {
                    return Err(ProtoError::invalid(format!(
                        "one object of the request holds more than {MAX_ITEMS_PER_MESSAGE} \
                         attributes, events, links or values in its lists: send them in \
                         smaller parts"
                    )));
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    Ok(counted)
}

pub(super) fn too_many_values() -> ProtoError {
    ProtoError::invalid(format!(
        "the request has more than {MAX_VALUES_PER_REQUEST} attributes, events, links and \
         values together: send fewer spans per request"
    ))
}

fn camel_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn enum_value(field: &str, name: &str) -> Option<i32> {
    match field {
        "kind" => SpanKind::from_str_name(name).map(|k| k as i32),
        "code" => StatusCode::from_str_name(name).map(|c| c as i32),
        "severityNumber" => SeverityNumber::from_str_name(name).map(|s| s as i32),
        _ => None,
    }
}

/// Rewrites `v` (found under `field`) in place into the canonical form.
pub(super) fn canonicalise(v: &mut Value, field: &str) {
    match v {
        Value::Object(map) => {
            let fields = std::mem::take(map);
            let mut out = Map::with_capacity(fields.len());
            for (k, mut child) in fields {
                let k = if k.contains('_') { camel_case(&k) } else { k };
                canonicalise(&mut child, &k);
                out.insert(k, child);
            }
            *map = out;
        }
        Value::Array(items) => items.iter_mut().for_each(|i| canonicalise(i, field)),
        // 64-bit integers travel as strings: the generated deserialisers accept that form
        // whatever the JSON number representation.
        Value::Number(n) if field.ends_with("UnixNano") || field == "intValue" => {
            *v = Value::String(n.to_string());
        }
        Value::String(s) => {
            if let Some(i) = enum_value(field, s) {
                *v = Value::from(i);
            }
        }
        _ => {}
    }
}
