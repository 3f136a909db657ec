//! An OTLP trace request read in place (docs/otlp.md, "Decoding"): every string and byte field
//! borrows from the body. prost copies each into an allocation of its own, and those copies,
//! their UTF-8 checks and their frees were most of decoding, a sixth of the ingest role's CPU.
//!
//! The types mirror `opentelemetry_proto`'s, with the fields conversion reads. Fields it does not
//! read (schema URLs, dropped counts of spans, the scope's attributes, entity refs, string-table
//! indexes) are skipped unread, as unknown fields are. For the fields it reads, decoding follows
//! prost: the last of a repeated scalar wins, a message field sent twice is merged, a field of the
//! wrong wire type or a string that is not UTF-8 fails the request. A request prost decoded
//! (OTLP/JSON) is read through the same types with `From`.

use opentelemetry_proto::tonic::collector::trace::v1 as pb_collector;
use opentelemetry_proto::tonic::common::v1 as pb_common;
use opentelemetry_proto::tonic::resource::v1 as pb_resource;
use opentelemetry_proto::tonic::trace::v1 as pb;
use std::borrow::Cow;

use super::wire::{Field, MAX_NESTING, WireError as Error, next_field};
use crate::ProtoError;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Request<'a> {
    pub resource_spans: Vec<ResourceSpans<'a>>,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct ResourceSpans<'a> {
    pub resource: Option<Resource<'a>>,
    pub scope_spans: Vec<ScopeSpans<'a>>,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Resource<'a> {
    pub attributes: Vec<KeyValue<'a>>,
    pub dropped_attributes_count: u32,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct ScopeSpans<'a> {
    pub scope: Option<Scope<'a>>,
    pub spans: Vec<Span<'a>>,
}

/// The span's instrumentation scope, kept in `otel_dump`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Scope<'a> {
    pub name: &'a str,
    pub version: &'a str,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Span<'a> {
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub trace_state: &'a str,
    pub parent_span_id: &'a [u8],
    pub name: &'a str,
    pub kind: i32,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub attributes: Vec<KeyValue<'a>>,
    pub events: Vec<Event<'a>>,
    pub links: Vec<Link<'a>>,
    pub status: Option<Status<'a>>,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Event<'a> {
    pub time_unix_nano: u64,
    pub name: &'a str,
    pub attributes: Vec<KeyValue<'a>>,
    pub dropped_attributes_count: u32,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Link<'a> {
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub trace_state: &'a str,
    pub attributes: Vec<KeyValue<'a>>,
    pub dropped_attributes_count: u32,
    pub flags: u32,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Status<'a> {
    pub message: &'a str,
    pub code: i32,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct KeyValue<'a> {
    pub key: &'a str,
    pub value: Option<AnyValue<'a>>,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct AnyValue<'a> {
    pub value: Option<Value<'a>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    String(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Array(Vec<AnyValue<'a>>),
    Kvlist(Vec<KeyValue<'a>>),
    Bytes(&'a [u8]),
    /// An index into a profiles string table: meaningless in traces.
    StringIndex(i32),
}

impl<'a> Request<'a> {
    /// Decodes an `ExportTraceServiceRequest` body. Its size is not bounded here: callers count
    /// it first ([`super::decode_protobuf`]).
    pub fn decode(body: &'a [u8]) -> Result<Request<'a>, ProtoError> {
        let mut req = Request::default();
        req.merge(body, 0).map_err(super::wire::malformed)?;
        Ok(req)
    }
}

// ---- decoding ----

const WRONG_WIRE_TYPE: Error = Cow::Borrowed("invalid wire type");

/// A field's value read as the type its tag has in the schema.
impl<'a> Field<'a> {
    fn bytes(self) -> Result<&'a [u8], Error> {
        match self {
            Field::Bytes(b) => Ok(b),
            _ => Err(WRONG_WIRE_TYPE),
        }
    }

    fn str(self) -> Result<&'a str, Error> {
        let bytes = self.bytes()?;
        // Most strings of a request are short ASCII: keys, names, short values. simdutf8 hands
        // strings under 64 bytes to std's check, which reads them mostly a byte at a time;
        // ASCII is checked here a word at a time instead (docs/benchmarks.md, "Short strings
        // checked as ASCII").
        if bytes.len() < 64 && bytes.is_ascii() {
            // SAFETY: ASCII is UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        simdutf8::basic::from_utf8(bytes)
            .map_err(|_| "invalid string value: data is not UTF-8 encoded".into())
    }

    fn varint(self) -> Result<u64, Error> {
        match self {
            Field::Varint(v) => Ok(v),
            _ => Err(WRONG_WIRE_TYPE),
        }
    }

    fn fixed64(self) -> Result<u64, Error> {
        match self {
            Field::Fixed64(v) => Ok(v),
            _ => Err(WRONG_WIRE_TYPE),
        }
    }

    fn fixed32(self) -> Result<u32, Error> {
        match self {
            Field::Fixed32(v) => Ok(v),
            _ => Err(WRONG_WIRE_TYPE),
        }
    }

    /// A nested message, one level below `depth`.
    fn message<M: Message<'a>>(self, into: &mut M, depth: usize) -> Result<(), Error> {
        if depth + 1 > MAX_NESTING {
            return Err("recursion limit reached".into());
        }
        into.merge(self.bytes()?, depth + 1)
    }

    /// A nested message appended to `list`: read in place, not moved in once read (a span is
    /// some hundred bytes, and lists of them and of attributes are most of a request).
    fn push<M: Message<'a> + Default>(self, list: &mut Vec<M>, depth: usize) -> Result<(), Error> {
        list.push(M::default());
        let read = self.message(list.last_mut().expect("just pushed"), depth);
        if read.is_err() {
            list.pop();
        }
        read
    }
}

/// Calls `each` with every field of the message `buf`, in order.
fn fields<'a>(
    mut buf: &'a [u8],
    mut each: impl FnMut(u32, Field<'a>) -> Result<(), Error>,
) -> Result<(), Error> {
    while !buf.is_empty() {
        let (tag, field) = next_field(&mut buf)?;
        each(tag, field)?;
    }
    Ok(())
}

/// A message read from the wire: its fields merged into `self`, as prost merges.
trait Message<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error>;
}

impl<'a> Message<'a> for Request<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| match tag {
            1 => f.push(&mut self.resource_spans, depth),
            _ => Ok(()),
        })
    }
}

impl<'a> Message<'a> for ResourceSpans<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| match tag {
            1 => f.message(self.resource.get_or_insert_default(), depth),
            2 => f.push(&mut self.scope_spans, depth),
            _ => Ok(()),
        })
    }
}

impl<'a> Message<'a> for Resource<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| {
            match tag {
                1 => f.push(&mut self.attributes, depth)?,
                2 => self.dropped_attributes_count = f.varint()? as u32,
                _ => {}
            }
            Ok(())
        })
    }
}

impl<'a> Message<'a> for ScopeSpans<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| match tag {
            1 => f.message(self.scope.get_or_insert_default(), depth),
            2 => f.push(&mut self.spans, depth),
            _ => Ok(()),
        })
    }
}

impl<'a> Message<'a> for Scope<'a> {
    fn merge(&mut self, buf: &'a [u8], _depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| {
            match tag {
                1 => self.name = f.str()?,
                2 => self.version = f.str()?,
                _ => {}
            }
            Ok(())
        })
    }
}

impl<'a> Message<'a> for Span<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| {
            match tag {
                1 => self.trace_id = f.bytes()?,
                2 => self.span_id = f.bytes()?,
                3 => self.trace_state = f.str()?,
                4 => self.parent_span_id = f.bytes()?,
                5 => self.name = f.str()?,
                6 => self.kind = f.varint()? as i32,
                7 => self.start_time_unix_nano = f.fixed64()?,
                8 => self.end_time_unix_nano = f.fixed64()?,
                9 => f.push(&mut self.attributes, depth)?,
                11 => f.push(&mut self.events, depth)?,
                13 => f.push(&mut self.links, depth)?,
                15 => f.message(self.status.get_or_insert_default(), depth)?,
                _ => {}
            }
            Ok(())
        })
    }
}

impl<'a> Message<'a> for Event<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| {
            match tag {
                1 => self.time_unix_nano = f.fixed64()?,
                2 => self.name = f.str()?,
                3 => f.push(&mut self.attributes, depth)?,
                4 => self.dropped_attributes_count = f.varint()? as u32,
                _ => {}
            }
            Ok(())
        })
    }
}

impl<'a> Message<'a> for Link<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| {
            match tag {
                1 => self.trace_id = f.bytes()?,
                2 => self.span_id = f.bytes()?,
                3 => self.trace_state = f.str()?,
                4 => f.push(&mut self.attributes, depth)?,
                5 => self.dropped_attributes_count = f.varint()? as u32,
                6 => self.flags = f.fixed32()?,
                _ => {}
            }
            Ok(())
        })
    }
}

impl<'a> Message<'a> for Status<'a> {
    fn merge(&mut self, buf: &'a [u8], _depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| {
            match tag {
                2 => self.message = f.str()?,
                3 => self.code = f.varint()? as i32,
                _ => {}
            }
            Ok(())
        })
    }
}

impl<'a> Message<'a> for KeyValue<'a> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| match tag {
            1 => {
                self.key = f.str()?;
                Ok(())
            }
            2 => f.message(self.value.get_or_insert_default(), depth),
            _ => Ok(()),
        })
    }
}

/// The `values` (field 1) of an `ArrayValue` or a `KeyValueList`.
struct List<'l, T>(&'l mut Vec<T>);

impl<'a, T: Message<'a> + Default> Message<'a> for List<'_, T> {
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| match tag {
            1 => f.push(self.0, depth),
            _ => Ok(()),
        })
    }
}

impl<'a> Message<'a> for AnyValue<'a> {
    /// A oneof: each field replaces the value, except that a list sent again where a list of
    /// its kind is merges into it (prost's rule).
    fn merge(&mut self, buf: &'a [u8], depth: usize) -> Result<(), Error> {
        fields(buf, |tag, f| {
            let value = match tag {
                1 => Value::String(f.str()?),
                2 => Value::Bool(f.varint()? != 0),
                3 => Value::Int(f.varint()? as i64),
                4 => Value::Double(f64::from_bits(f.fixed64()?)),
                5 => {
                    if !matches!(self.value, Some(Value::Array(_))) {
                        self.value = Some(Value::Array(Vec::new()));
                    }
                    let Some(Value::Array(list)) = &mut self.value else {
                        unreachable!("set above")
                    };
                    return f.message(&mut List(list), depth);
                }
                6 => {
                    if !matches!(self.value, Some(Value::Kvlist(_))) {
                        self.value = Some(Value::Kvlist(Vec::new()));
                    }
                    let Some(Value::Kvlist(list)) = &mut self.value else {
                        unreachable!("set above")
                    };
                    return f.message(&mut List(list), depth);
                }
                7 => Value::Bytes(f.bytes()?),
                8 => Value::StringIndex(f.varint()? as i32),
                _ => return Ok(()),
            };
            self.value = Some(value);
            Ok(())
        })
    }
}

// ---- a request prost decoded, read through the same types ----

/// Attributes that prost decoded (a JSON request's, the logs' records'), read as these types.
pub fn key_values(kvs: &[pb_common::KeyValue]) -> Vec<KeyValue<'_>> {
    kvs.iter().map(KeyValue::from).collect()
}

impl<'a> From<&'a pb_collector::ExportTraceServiceRequest> for Request<'a> {
    fn from(r: &'a pb_collector::ExportTraceServiceRequest) -> Self {
        Request { resource_spans: r.resource_spans.iter().map(ResourceSpans::from).collect() }
    }
}

impl<'a> From<&'a pb::ResourceSpans> for ResourceSpans<'a> {
    fn from(r: &'a pb::ResourceSpans) -> Self {
        ResourceSpans {
            resource: r.resource.as_ref().map(Resource::from),
            scope_spans: r.scope_spans.iter().map(ScopeSpans::from).collect(),
        }
    }
}

impl<'a> From<&'a pb_resource::Resource> for Resource<'a> {
    fn from(r: &'a pb_resource::Resource) -> Self {
        Resource {
            attributes: key_values(&r.attributes),
            dropped_attributes_count: r.dropped_attributes_count,
        }
    }
}

impl<'a> From<&'a pb::ScopeSpans> for ScopeSpans<'a> {
    fn from(s: &'a pb::ScopeSpans) -> Self {
        ScopeSpans {
            scope: s.scope.as_ref().map(|s| Scope { name: &s.name, version: &s.version }),
            spans: s.spans.iter().map(Span::from).collect(),
        }
    }
}

impl<'a> From<&'a pb::Span> for Span<'a> {
    fn from(s: &'a pb::Span) -> Self {
        Span {
            trace_id: &s.trace_id,
            span_id: &s.span_id,
            trace_state: &s.trace_state,
            parent_span_id: &s.parent_span_id,
            name: &s.name,
            kind: s.kind,
            start_time_unix_nano: s.start_time_unix_nano,
            end_time_unix_nano: s.end_time_unix_nano,
            attributes: key_values(&s.attributes),
            events: s
                .events
                .iter()
                .map(|e| Event {
                    time_unix_nano: e.time_unix_nano,
                    name: &e.name,
                    attributes: key_values(&e.attributes),
                    dropped_attributes_count: e.dropped_attributes_count,
                })
                .collect(),
            links: s
                .links
                .iter()
                .map(|l| Link {
                    trace_id: &l.trace_id,
                    span_id: &l.span_id,
                    trace_state: &l.trace_state,
                    attributes: key_values(&l.attributes),
                    dropped_attributes_count: l.dropped_attributes_count,
                    flags: l.flags,
                })
                .collect(),
            status: s.status.as_ref().map(|st| Status { message: &st.message, code: st.code }),
        }
    }
}

impl<'a> From<&'a pb_common::KeyValue> for KeyValue<'a> {
    fn from(kv: &'a pb_common::KeyValue) -> Self {
        KeyValue { key: &kv.key, value: kv.value.as_ref().map(AnyValue::from) }
    }
}

impl<'a> From<&'a pb_common::AnyValue> for AnyValue<'a> {
    fn from(v: &'a pb_common::AnyValue) -> Self {
        use pb_common::any_value::Value as V;
        AnyValue {
            value: v.value.as_ref().map(|v| match v {
                V::StringValue(s) => Value::String(s),
                V::BoolValue(b) => Value::Bool(*b),
                V::IntValue(i) => Value::Int(*i),
                V::DoubleValue(d) => Value::Double(*d),
                V::ArrayValue(a) => Value::Array(a.values.iter().map(AnyValue::from).collect()),
                V::KvlistValue(kv) => Value::Kvlist(key_values(&kv.values)),
                V::BytesValue(b) => Value::Bytes(b),
                V::StringValueStrindex(i) => Value::StringIndex(*i),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, InstrumentationScope, any_value};
    use opentelemetry_proto::tonic::trace::v1::span;
    use prost::Message as _;

    use super::*;

    fn kv(key: &str, value: any_value::Value) -> pb_common::KeyValue {
        pb_common::KeyValue {
            key: key.into(),
            value: Some(pb_common::AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    /// A request with every field conversion reads set, and every kind of value.
    fn full() -> pb_collector::ExportTraceServiceRequest {
        use any_value::Value as V;
        let values = vec![
            kv("s", V::StringValue("héllo".into())),
            kv("b", V::BoolValue(true)),
            kv("i", V::IntValue(-7)),
            kv("d", V::DoubleValue(0.5)),
            kv("y", V::BytesValue(vec![0, 1, 2])),
            kv("x", V::StringValueStrindex(3)),
            kv(
                "a",
                V::ArrayValue(ArrayValue {
                    values: vec![pb_common::AnyValue { value: Some(V::IntValue(1)) }],
                }),
            ),
            kv(
                "k",
                V::KvlistValue(pb_common::KeyValueList { values: vec![kv("n", V::IntValue(2))] }),
            ),
            pb_common::KeyValue { key: "none".into(), value: None, ..Default::default() },
        ];
        let span = pb::Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            trace_state: "t=1".into(),
            parent_span_id: vec![3; 8],
            name: "chat".into(),
            kind: 3,
            start_time_unix_nano: 1_700_000_000_000_000_000,
            end_time_unix_nano: 1_700_000_001_000_000_000,
            attributes: values.clone(),
            events: vec![span::Event {
                time_unix_nano: 5,
                name: "exception".into(),
                attributes: values.clone(),
                dropped_attributes_count: 1,
            }],
            links: vec![span::Link {
                trace_id: vec![4; 16],
                span_id: vec![5; 8],
                trace_state: "l".into(),
                attributes: values.clone(),
                dropped_attributes_count: 2,
                flags: 0x101,
            }],
            status: Some(pb::Status { message: "bad".into(), code: 2 }),
            ..Default::default()
        };
        pb_collector::ExportTraceServiceRequest {
            resource_spans: vec![pb::ResourceSpans {
                resource: Some(pb_resource::Resource {
                    attributes: values,
                    dropped_attributes_count: 4,
                    ..Default::default()
                }),
                scope_spans: vec![pb::ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "lib".into(),
                        version: "1.0".into(),
                        ..Default::default()
                    }),
                    spans: vec![span.clone(), pb::Span { status: None, ..span }],
                    schema_url: "https://schema".into(),
                }],
                schema_url: String::new(),
            }],
        }
    }

    #[test]
    fn a_body_reads_as_prost_decodes_it() {
        let req = full();
        let body = req.encode_to_vec();
        let read = Request::decode(&body).unwrap();
        assert_eq!(read, Request::from(&req));
        // Spot checks that `From` is not wrong the same way.
        let span = &read.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.attributes[0].value.as_ref().unwrap().value, Some(Value::String("héllo")));
        assert_eq!(span.status, Some(Status { message: "bad", code: 2 }));
        assert_eq!(span.links[0].flags, 0x101);
        assert_eq!(
            read.resource_spans[0].scope_spans[0].scope,
            Some(Scope { name: "lib", version: "1.0" })
        );
    }

    #[test]
    fn fields_sent_twice_merge_as_prost_merges_them() {
        use any_value::Value as V;
        let first = pb::Span {
            name: "first".into(),
            attributes: vec![kv("a", V::IntValue(1))],
            status: Some(pb::Status { message: "m".into(), code: 0 }),
            ..Default::default()
        };
        let second = pb::Span {
            name: "second".into(),
            attributes: vec![kv("b", V::IntValue(2))],
            status: Some(pb::Status { message: String::new(), code: 2 }),
            ..Default::default()
        };
        // One span message made of both: concatenated protobuf messages merge.
        let mut span = first.encode_to_vec();
        span.extend(second.encode_to_vec());
        // A list value sent twice merges; a scalar after it replaces it.
        let list = |n| {
            pb_common::AnyValue {
                value: Some(V::ArrayValue(ArrayValue {
                    values: vec![pb_common::AnyValue { value: Some(V::IntValue(n)) }],
                })),
            }
            .encode_to_vec()
        };
        let mut value = list(1);
        value.extend(list(2));
        let mut scalar_last = value.clone();
        scalar_last.extend(pb_common::AnyValue { value: Some(V::BoolValue(true)) }.encode_to_vec());
        for bytes in [span.as_slice(), &value, &scalar_last] {
            let by_prost = pb::Span::decode(bytes).ok();
            let mut read = Span::default();
            if let Some(by_prost) = &by_prost {
                read.merge(bytes, 0).unwrap();
                assert_eq!(read, Span::from(by_prost));
            }
            let by_prost = pb_common::AnyValue::decode(bytes).ok();
            let mut read = AnyValue::default();
            if let Some(by_prost) = &by_prost {
                read.merge(bytes, 0).unwrap();
                assert_eq!(read, AnyValue::from(by_prost));
            }
        }
        let mut read = Span::default();
        read.merge(&span, 0).unwrap();
        assert_eq!(read.name, "second");
        assert_eq!(read.attributes.len(), 2);
        // An empty string is not sent at all, so the first message stays.
        assert_eq!(read.status, Some(Status { message: "m", code: 2 }));
        let mut read = AnyValue::default();
        read.merge(&value, 0).unwrap();
        let Some(Value::Array(items)) = read.value else { panic!("a list") };
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn broken_fields_that_are_read_fail_and_unread_ones_are_skipped() {
        // Span name (field 5) as a varint: the wrong wire type.
        assert!(Span::default().merge(&[5 << 3, 1], 0).is_err());
        // Span name that is not UTF-8.
        assert!(Span::default().merge(&[5 << 3 | 2, 2, 0xff, 0xfe], 0).is_err());
        // Truncated: a length past the end.
        assert!(Span::default().merge(&[5 << 3 | 2, 9, b'a'], 0).is_err());
        // Span flags (field 16, fixed32) sent as a string that is not UTF-8: not read.
        let mut read = Span::default();
        read.merge(&[0x82, 0x01, 2, 0xff, 0xfe, 5 << 3 | 2, 1, b'n'], 0).unwrap();
        assert_eq!(read.name, "n");
    }

    #[test]
    fn span_names_are_checked_as_utf8_at_every_length() {
        // Short ASCII takes its own check; the rest, simdutf8's. Around the 64 bytes between
        // them: ASCII, wider characters, a byte that is not UTF-8 at either end, a cut character.
        for len in [0, 1, 7, 8, 15, 16, 62, 63, 64, 65, 130] {
            let ascii = vec![b'a'; len];
            let mut wide = "é".repeat(len / 2).into_bytes();
            wide.truncate(len);
            let mut bad_last = ascii.clone();
            bad_last.push(0xff);
            let mut bad_first = vec![0x80];
            bad_first.extend(&ascii);
            for name in [ascii, wide, bad_last, bad_first] {
                let mut span = vec![5 << 3 | 2];
                prost::encoding::encode_varint(name.len() as u64, &mut span);
                span.extend(&name);
                let by_prost = pb::Span::decode(&span[..]);
                let mut read = Span::default();
                let ours = read.merge(&span, 0);
                assert_eq!(ours.is_ok(), by_prost.is_ok(), "{name:?}");
                if let Ok(by_prost) = by_prost {
                    assert_eq!(read.name, by_prost.name);
                }
            }
        }
    }

    #[test]
    fn values_nested_past_prosts_limit_fail() {
        // Each list is two messages deep (the value and its `ArrayValue`).
        let nested = |lists: usize| {
            let mut value = pb_common::AnyValue { value: Some(any_value::Value::IntValue(1)) };
            for _ in 0..lists {
                value = pb_common::AnyValue {
                    value: Some(any_value::Value::ArrayValue(ArrayValue { values: vec![value] })),
                };
            }
            value.encode_to_vec()
        };
        for (lists, decodes) in [(49, true), (50, true), (51, false)] {
            let body = nested(lists);
            assert_eq!(pb_common::AnyValue::decode(&body[..]).is_ok(), decodes, "prost, {lists}");
            assert_eq!(AnyValue::default().merge(&body, 0).is_ok(), decodes, "read, {lists}");
        }
    }
}
