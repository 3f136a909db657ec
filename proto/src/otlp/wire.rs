//! Counting an OTLP/protobuf trace (or logs) request before decoding it. A message that is
//! empty on the wire (two bytes) decodes into a struct of 60–300 bytes, so a 32 MiB body of
//! empty spans or attributes would decode into gigabytes. This pass walks the wire format
//! without allocating, counts spans and nested values (in the request, and in each message's
//! lists), and refuses the request when they exceed the bounds of [`crate::limits`] — before
//! anything is built.
//!
//! Only the fields that hold nested messages are followed (the trace and logs schemas');
//! everything else is skipped by its wire type. Whatever the decoder would reject as malformed
//! is left for it to report: this pass only fails on counts, or on input too broken to walk.
//!
//! [`next_field`], which splits a message into its fields, is also how a trace request is read
//! in place (`super::request`).

use std::borrow::Cow;

use prost::encoding::{WireType, decode_key, decode_varint};

use crate::ProtoError;
use crate::limits::{
    MAX_ITEMS_PER_MESSAGE, MAX_LOG_RECORDS_PER_REQUEST, MAX_SPANS_PER_REQUEST,
    MAX_VALUES_PER_REQUEST,
};

/// prost's own nesting limit, which the in-place reading keeps too: deeper input fails to
/// decode anyway.
pub(super) const MAX_NESTING: usize = 100;

/// Why a message's fields cannot be split (prost's wording where prost reports it).
pub(super) type WireError = Cow<'static, str>;

/// One field's value as the wire holds it.
#[derive(Clone, Copy)]
pub(super) enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// The next field of the message `buf` (which must not be empty): its tag and value, `buf` left
/// after it. Groups fail: OTLP never uses them.
///
/// Always inlined, with [`key`] and [`varint`]: called once per field of a span, it was left a
/// call of its own by the compiler, and each reader's loop then branched on a returned enum it
/// had just built (docs/benchmarks.md, "Hot calls inlined").
#[inline(always)]
pub(super) fn next_field<'a>(buf: &mut &'a [u8]) -> Result<(u32, Field<'a>), WireError> {
    let (tag, wire) = key(buf)?;
    let field = match wire {
        WireType::Varint => Field::Varint(varint(buf)?),
        WireType::SixtyFourBit => Field::Fixed64(u64::from_le_bytes(take(buf)?)),
        WireType::ThirtyTwoBit => Field::Fixed32(u32::from_le_bytes(take(buf)?)),
        WireType::LengthDelimited => {
            let len = varint(buf)?;
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= buf.len())
                .ok_or(Cow::Borrowed("buffer underflow"))?;
            let (field, rest) = buf.split_at(len);
            *buf = rest;
            Field::Bytes(field)
        }
        WireType::StartGroup | WireType::EndGroup => {
            return Err(Cow::Borrowed("groups are not part of OTLP"));
        }
    };
    Ok((tag, field))
}

#[cold]
fn decoded(e: prost::DecodeError) -> WireError {
    Cow::Owned(e.to_string())
}

/// A key that is not one byte, or broken: prost reads it (cold, so the inlined [`key`] stays
/// small).
#[cold]
#[inline(never)]
fn long_key(buf: &mut &[u8]) -> Result<(u32, WireType), WireError> {
    decode_key(buf).map_err(decoded)
}

/// A varint of three bytes or more, or broken: prost reads it.
#[cold]
#[inline(never)]
fn long_varint(buf: &mut &[u8]) -> Result<u64, WireError> {
    decode_varint(buf).map_err(decoded)
}

/// A field's key. Every key of the OTLP schemas is one byte (tags below 16), read here; anything
/// else, and every error, is prost's [`decode_key`].
#[inline(always)]
fn key(buf: &mut &[u8]) -> Result<(u32, WireType), WireError> {
    if let Some((&b, rest)) = buf.split_first()
        && (8..0x80).contains(&b)
        && let Ok(wire) = WireType::try_from(u64::from(b & 7))
    {
        *buf = rest;
        return Ok((u32::from(b >> 3), wire));
    }
    long_key(buf)
}

/// A varint. Lengths and small numbers take one or two bytes, read here; longer ones, and every
/// error, are prost's [`decode_varint`].
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Result<u64, WireError> {
    match **buf {
        [b, ref rest @ ..] if b < 0x80 => {
            *buf = rest;
            Ok(u64::from(b))
        }
        [b0, b1, ref rest @ ..] if b1 < 0x80 => {
            *buf = rest;
            Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7)
        }
        _ => long_varint(buf),
    }
}

fn take<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], WireError> {
    let (head, rest) = buf.split_first_chunk::<N>().ok_or(Cow::Borrowed("buffer underflow"))?;
    *buf = rest;
    Ok(*head)
}

/// The message types of the trace and logs schemas that contain other messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Request,
    ResourceSpans,
    Resource,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
    LogsRequest,
    ResourceLogs,
    ScopeLogs,
    LogRecord,
    /// A message with no nested messages of interest (`Status`): its fields are walked only to
    /// refuse a group among them, as the reader does.
    Leaf,
}

/// The message type of field `tag` of `parent`, when it is a message.
fn child(parent: Msg, tag: u32) -> Option<Msg> {
    use Msg::*;
    Some(match (parent, tag) {
        (Request, 1) => ResourceSpans,
        (ResourceSpans, 1) => Resource,
        (ResourceSpans, 2) => ScopeSpans,
        (Resource, 1) => KeyValue,
        (ScopeSpans, 1) => Scope,
        (ScopeSpans, 2) => Span,
        (Scope, 3) => KeyValue,
        (Span, 9) => KeyValue,
        (Span, 11) => Event,
        (Span, 13) => Link,
        (Span, 15) => Leaf,
        (Event, 3) | (Link, 4) | (KeyValueList, 1) => KeyValue,
        (KeyValue, 2) | (ArrayValue, 1) => AnyValue,
        (AnyValue, 5) => ArrayValue,
        (AnyValue, 6) => KeyValueList,
        (LogsRequest, 1) => ResourceLogs,
        (ResourceLogs, 1) => Resource,
        (ResourceLogs, 2) => ScopeLogs,
        (ScopeLogs, 1) => Scope,
        (ScopeLogs, 2) => LogRecord,
        (LogRecord, 5) => AnyValue,
        (LogRecord, 6) => KeyValue,
        _ => return None,
    })
}

/// Whether field `tag` of `parent` (a nested message, [`child`]) is a repeated field: a list
/// entry, not a message's one resource, scope, status or value.
fn repeated(parent: Msg, tag: u32) -> bool {
    use Msg::*;
    !matches!(
        (parent, tag),
        (ResourceSpans, 1)
            | (ScopeSpans, 1)
            | (Span, 15)
            | (KeyValue, 2)
            | (AnyValue, 5 | 6)
            | (ResourceLogs, 1)
            | (ScopeLogs, 1)
            | (LogRecord, 5)
    )
}

/// What a request holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub spans: usize,
    pub log_records: usize,
    /// Every other nested message: resources, scopes, attributes, values, events, links.
    pub values: usize,
}

/// A body that does not decode, and why.
pub(super) fn malformed(e: impl std::fmt::Display) -> ProtoError {
    ProtoError::invalid(format!("invalid OTLP protobuf body: {e}"))
}

/// Counts the spans and values of an `ExportTraceServiceRequest` body.
pub fn count(body: &[u8]) -> Result<Counts, ProtoError> {
    walk(body, Msg::Request)
}

/// Counts the log records and values of an `ExportLogsServiceRequest` body.
pub fn count_logs(body: &[u8]) -> Result<Counts, ProtoError> {
    walk(body, Msg::LogsRequest)
}

fn walk(body: &[u8], root: Msg) -> Result<Counts, ProtoError> {
    let items = if root == Msg::LogsRequest { "log records" } else { "spans" };
    let mut counts = Counts::default();
    // (message type, bytes left of it, nested messages met in it so far), innermost last; the
    // body itself is the outermost.
    let mut stack: Vec<(Msg, &[u8], usize)> = vec![(root, body, 0)];
    'messages: while let Some((msg, mut buf, mut held)) = stack.pop() {
        // The fields of `msg`, up to its first nested message of interest.
        while !buf.is_empty() {
            let (tag, m, field) = match next_field(&mut buf).map_err(malformed)? {
                (tag, Field::Bytes(field)) => match child(msg, tag) {
                    Some(m) => (tag, m, field),
                    None => continue,
                },
                _ => continue,
            };
            match m {
                Msg::Span => counts.spans += 1,
                Msg::LogRecord => counts.log_records += 1,
                _ => {
                    counts.values += 1;
                    // Each repeated field decodes into a list grown by doubling, on whichever
                    // thread decodes it: past a few thousand entries only a bomb has that many,
                    // and its growth is memory the allocator keeps resident for a while.
                    held += usize::from(repeated(msg, tag));
                    if held > MAX_ITEMS_PER_MESSAGE {
                        let holder = match msg {
                            Msg::Request | Msg::LogsRequest => "the request".to_owned(),
                            m => format!("one {m:?} of the request"),
                        };
                        return Err(ProtoError::invalid(format!(
                            "{holder} holds more than {MAX_ITEMS_PER_MESSAGE} attributes, \
                             events, links or values in its lists: send them in smaller parts"
                        )));
                    }
                }
            }
            if counts.spans > MAX_SPANS_PER_REQUEST {
                return Err(ProtoError::invalid(format!(
                    "the request has more than {MAX_SPANS_PER_REQUEST} spans: send fewer per \
                     request"
                )));
            }
            if counts.log_records > MAX_LOG_RECORDS_PER_REQUEST {
                return Err(ProtoError::invalid(format!(
                    "the request has more than {MAX_LOG_RECORDS_PER_REQUEST} log records: send \
                     fewer per request"
                )));
            }
            if counts.values > MAX_VALUES_PER_REQUEST {
                return Err(ProtoError::invalid(format!(
                    "the request has more than {MAX_VALUES_PER_REQUEST} attributes, events, \
                     links and values together: send fewer {items} per request"
                )));
            }
            // The open messages, this one's rest included.
            if stack.len() + 1 > MAX_NESTING {
                return Err(malformed("nesting is deeper than 100 levels"));
            }
            // The rest of this message waits below its child, which is walked next: the stack
            // holds at most one entry per level.
            stack.push((msg, buf, held));
            stack.push((m, field, 0));
            continue 'messages;
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span::Event};
    use prost::Message;

    use super::*;

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn request(spans: Vec<Span>) -> Vec<u8> {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    /// A span whose one attribute nests `levels` lists.
    fn nested_span(levels: usize) -> Span {
        let mut value = any_value::Value::IntValue(1);
        for _ in 0..levels {
            value = any_value::Value::ArrayValue(ArrayValue {
                values: vec![AnyValue { value: Some(value) }],
            });
        }
        Span { name: "s".into(), attributes: vec![kv("deep", value)], ..Default::default() }
    }

    #[test]
    fn nesting_past_prosts_limit_is_refused_as_prost_would() {
        // Around prost's limit the walk refuses exactly what prost would.
        for levels in 40..56 {
            let body = request(vec![nested_span(levels)]);
            let prost = ExportTraceServiceRequest::decode(&body[..]);
            match count(&body) {
                Ok(_) => assert!(prost.is_ok(), "{levels}"),
                Err(e) => {
                    assert!(e.to_string().contains("nesting is deeper than 100 levels"), "{e}");
                    assert!(prost.is_err(), "{levels}");
                }
            }
        }
        assert!(count(&request(vec![nested_span(46)])).is_ok());
        assert!(count(&request(vec![nested_span(48)])).is_err());
    }

    #[test]
    fn counts_spans_and_nested_values() {
        let list = any_value::Value::ArrayValue(ArrayValue {
            values: vec![AnyValue { value: Some(any_value::Value::IntValue(1)) }; 3],
        });
        let span = Span {
            name: "s".into(),
            attributes: vec![kv("a", any_value::Value::StringValue("x".into())), kv("l", list)],
            events: vec![Event { name: "e".into(), ..Default::default() }],
            ..Default::default()
        };
        let counts = count(&request(vec![span.clone(), span])).unwrap();
        assert_eq!(counts.spans, 2);
        // Per span: 2 KeyValues, 2 AnyValues, 1 ArrayValue, 3 elements, 1 event; plus the
        // ResourceSpans and ScopeSpans around them.
        assert_eq!(counts.values, 2 * 9 + 2);
    }

    #[test]
    fn a_group_in_a_status_is_refused_as_the_reader_refuses_it() {
        // A span whose status (field 15) holds an empty group (field 5): prost skips it as an
        // unknown field; the reader refuses groups, so the count must too (found by fuzzing).
        let mut span = Span { name: "s".into(), ..Default::default() }.encode_to_vec();
        span.extend_from_slice(&[15 << 3 | 2, 2, 5 << 3 | 3, 5 << 3 | 4]);
        let body = body_of_scope(&field(2, &span));
        ExportTraceServiceRequest::decode(&body[..]).unwrap();
        let err = count(&body).unwrap_err();
        assert!(err.to_string().contains("groups are not part of OTLP"), "{err}");
        assert!(super::super::request::Request::decode(&body).is_err());
    }

    #[test]
    fn empty_spans_past_the_bound_are_refused_before_decoding() {
        // Two bytes per empty span on the wire: field 2 of ScopeSpans, length 0.
        let mut scope = Vec::new();
        for _ in 0..=MAX_SPANS_PER_REQUEST {
            scope.extend_from_slice(&[0x12, 0x00]);
        }
        let err = count(&body_of_scope(&scope)).unwrap_err();
        assert!(err.to_string().contains("more than 50000 spans"), "{err}");
    }

    /// Field `tag` holding `bytes`.
    fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![tag << 3 | 2];
        prost::encoding::encode_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(bytes);
        out
    }

    /// A request of one resource whose one scope's fields are `scope`.
    fn body_of_scope(scope: &[u8]) -> Vec<u8> {
        field(1, &field(2, scope))
    }

    #[test]
    fn one_message_holds_a_bounded_number_of_items() {
        // Attributes `a` without a value (field 9 of a span): five bytes each.
        let span = |attributes: usize| {
            let mut body = Vec::new();
            for _ in 0..attributes {
                body.extend_from_slice(&[0x4a, 0x03, 0x0a, 0x01, b'a']);
            }
            body
        };
        let wrap = |tag: u8, inner: Vec<u8>| {
            let mut out = vec![tag];
            prost::encoding::encode_varint(inner.len() as u64, &mut out);
            out.extend(inner);
            out
        };
        let body = |n| wrap(0x0a, wrap(0x12, wrap(0x12, span(n))));
        assert_eq!(count(&body(MAX_ITEMS_PER_MESSAGE)).unwrap().spans, 1);
        let err = count(&body(MAX_ITEMS_PER_MESSAGE + 1)).unwrap_err().to_string();
        assert!(err.contains("one Span of the request holds more than 10000"), "{err}");
        // Spread over spans, as many attributes are fine.
        let spans: Vec<u8> = (0..4).flat_map(|_| wrap(0x12, span(MAX_ITEMS_PER_MESSAGE))).collect();
        assert_eq!(count(&wrap(0x0a, wrap(0x12, spans))).unwrap().spans, 4);
        // A list value counts its elements the same way.
        let list: Vec<u8> = [0x0a, 0x00].repeat(MAX_ITEMS_PER_MESSAGE + 1);
        let value = wrap(0x2a, list); // AnyValue.array_value
        let attribute = wrap(0x12, value); // KeyValue.value
        let err = count(&wrap(0x0a, wrap(0x12, wrap(0x12, wrap(0x4a, attribute)))))
            .unwrap_err()
            .to_string();
        assert!(err.contains("one ArrayValue of the request"), "{err}");
    }

    #[test]
    fn keys_and_varints_read_as_prost_reads_them() {
        let mut r = fastrand::Rng::with_seed(11);
        let bytes = [0x00, 0x01, 0x07, 0x08, 0x0a, 0x0e, 0x0f, 0x7f, 0x80, 0x81, 0xff];
        for _ in 0..50_000 {
            let input: Vec<u8> =
                (0..r.usize(0..12)).map(|_| bytes[r.usize(..bytes.len())]).collect();
            let (mut ours, mut theirs) = (&input[..], &input[..]);
            assert_eq!(key(&mut ours), decode_key(&mut theirs).map_err(decoded), "{input:?}");
            assert_eq!(ours, theirs, "{input:?}");
            let (mut ours, mut theirs) = (&input[..], &input[..]);
            assert_eq!(varint(&mut ours), decode_varint(&mut theirs).map_err(decoded), "{input:?}");
            assert_eq!(ours, theirs, "{input:?}");
        }
    }

    #[test]
    fn broken_input_fails_cleanly() {
        for body in [&b"\x0a\xff\xff\xff\xff\x0f"[..], b"\x0b", b"\x0a\x05\x12"] {
            assert!(count(body).is_err(), "{body:?}");
        }
        assert_eq!(count(b"").unwrap(), Counts::default());
    }
}
