//! The OTLP/protobuf wire format: splitting a message into its fields ([`next_field`]), and the
//! bounds of [`crate::limits`] on what a request holds ([`Counts::add`]).
//!
//! A message that is empty on the wire (two bytes) decodes into a struct of 60–300 bytes, so a
//! 32 MiB body of empty spans or attributes would decode into gigabytes. Every nested message is
//! therefore counted before it is built, and the request refused at the first one past a bound:
//! a trace request by its reader as it reads (`super::request`), a logs request, which prost
//! decodes, by [`count_logs`], a walk over the wire that allocates nothing.
//!
//! The walk follows only the fields that hold nested messages (the logs schema's); everything
//! else is skipped by its wire type. Whatever the decoder would reject as malformed is left for
//! it to report: the walk only fails on counts, or on input too broken to walk.

use std::borrow::Cow;

use prost::encoding::{WireType, decode_key, decode_varint};

use crate::ProtoError;
use crate::limits::{MAX_LOG_RECORDS_PER_REQUEST, MAX_SPANS_PER_REQUEST, MAX_VALUES_PER_REQUEST};

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
#[inline]
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

fn decoded(e: prost::DecodeError) -> WireError {
    Cow::Owned(e.to_string())
}

/// A field's key. Every key of the OTLP schemas is one byte (tags below 16), read here; anything
/// else, and every error, is prost's [`decode_key`].
#[inline]
fn key(buf: &mut &[u8]) -> Result<(u32, WireType), WireError> {
    if let Some((&b, rest)) = buf.split_first()
        && (8..0x80).contains(&b)
        && let Ok(wire) = WireType::try_from(u64::from(b & 7))
    {
        *buf = rest;
        return Ok((u32::from(b >> 3), wire));
    }
    decode_key(buf).map_err(decoded)
}

/// A varint. Lengths and small numbers take one or two bytes, read here; longer ones, and every
/// error, are prost's [`decode_varint`].
#[inline]
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
        _ => decode_varint(buf).map_err(decoded),
    }
}

fn take<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], WireError> {
    let (head, rest) = buf.split_first_chunk::<N>().ok_or(Cow::Borrowed("buffer underflow"))?;
    *buf = rest;
    Ok(*head)
}

/// The message types of the logs schema that contain other messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Resource,
    Scope,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
    LogsRequest,
    ResourceLogs,
    ScopeLogs,
    LogRecord,
}

/// The message type of field `tag` of `parent`, when it is a message.
fn child(parent: Msg, tag: u32) -> Option<Msg> {
    use Msg::*;
    Some(match (parent, tag) {
        (Resource, 1) | (Scope, 3) | (KeyValueList, 1) => KeyValue,
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

/// What a request holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub spans: usize,
    pub log_records: usize,
    /// Every other nested message: resources, scopes, attributes, values, events, links.
    pub values: usize,
}

/// What a nested message counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Item {
    Span,
    LogRecord,
    Value,
}

impl Counts {
    /// Counts one more `item`; past its bound (docs/limits.md, "OpenTelemetry") the request is
    /// to be refused, with [`too_many`].
    #[inline]
    pub(super) fn add(&mut self, item: Item) -> Result<(), Item> {
        let (n, bound) = match item {
            Item::Span => (&mut self.spans, MAX_SPANS_PER_REQUEST),
            Item::LogRecord => (&mut self.log_records, MAX_LOG_RECORDS_PER_REQUEST),
            Item::Value => (&mut self.values, MAX_VALUES_PER_REQUEST),
        };
        *n += 1;
        if *n > bound { Err(item) } else { Ok(()) }
    }
}

/// Why a request holding more of `item` than its bound is refused. `items` names what the
/// request carries, for the advice to send fewer.
#[cold]
pub(super) fn too_many(item: Item, items: &str) -> ProtoError {
    ProtoError::invalid(match item {
        Item::Span => {
            format!(
                "the request has more than {MAX_SPANS_PER_REQUEST} spans: send fewer per request"
            )
        }
        Item::LogRecord => format!(
            "the request has more than {MAX_LOG_RECORDS_PER_REQUEST} log records: send fewer per \
             request"
        ),
        Item::Value => format!(
            "the request has more than {MAX_VALUES_PER_REQUEST} attributes, events, links and \
             values together: send fewer {items} per request"
        ),
    })
}

/// A body that does not decode, and why.
pub(super) fn malformed(e: impl std::fmt::Display) -> ProtoError {
    ProtoError::invalid(format!("invalid OTLP protobuf body: {e}"))
}

/// Counts the log records and values of an `ExportLogsServiceRequest` body.
pub fn count_logs(body: &[u8]) -> Result<Counts, ProtoError> {
    walk(body, Msg::LogsRequest)
}

fn walk(body: &[u8], root: Msg) -> Result<Counts, ProtoError> {
    let mut counts = Counts::default();
    // (message type, bytes left of it), innermost last; the body itself is the outermost.
    let mut stack: Vec<(Msg, &[u8])> = vec![(root, body)];
    'messages: while let Some((msg, mut buf)) = stack.pop() {
        // The fields of `msg`, up to its first nested message of interest.
        while !buf.is_empty() {
            let (m, field) = match next_field(&mut buf).map_err(malformed)? {
                (tag, Field::Bytes(field)) => match child(msg, tag) {
                    Some(m) => (m, field),
                    None => continue,
                },
                _ => continue,
            };
            let item = if m == Msg::LogRecord { Item::LogRecord } else { Item::Value };
            counts.add(item).map_err(|item| too_many(item, "log records"))?;
            // The open messages, this one's rest included.
            if stack.len() + 1 > MAX_NESTING {
                return Err(malformed("nesting is deeper than 100 levels"));
            }
            // The rest of this message waits below its child, which is walked next: the
            // stack holds at most one entry per level.
            stack.push((msg, buf));
            stack.push((m, field));
            continue 'messages;
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message;

    use super::*;

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn request(log_records: Vec<LogRecord>) -> Vec<u8> {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs { log_records, ..Default::default() }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    /// A record whose body nests `levels` lists.
    fn nested_record(levels: usize) -> LogRecord {
        let mut value = any_value::Value::IntValue(1);
        for _ in 0..levels {
            value = any_value::Value::ArrayValue(ArrayValue {
                values: vec![AnyValue { value: Some(value) }],
            });
        }
        LogRecord { body: Some(AnyValue { value: Some(value) }), ..Default::default() }
    }

    #[test]
    fn nesting_past_prosts_limit_is_refused_as_prost_would() {
        // Around prost's limit the walk refuses exactly what prost would.
        for levels in 40..56 {
            let body = request(vec![nested_record(levels)]);
            let prost = ExportLogsServiceRequest::decode(&body[..]);
            match count_logs(&body) {
                Ok(_) => assert!(prost.is_ok(), "{levels}"),
                Err(e) => {
                    assert!(e.to_string().contains("nesting is deeper than 100 levels"), "{e}");
                    assert!(prost.is_err(), "{levels}");
                }
            }
        }
    }

    #[test]
    fn counts_log_records_and_nested_values() {
        let list = any_value::Value::ArrayValue(ArrayValue {
            values: vec![AnyValue { value: Some(any_value::Value::IntValue(1)) }; 3],
        });
        let record = LogRecord {
            attributes: vec![kv("a", any_value::Value::StringValue("x".into())), kv("l", list)],
            ..Default::default()
        };
        let counts = count_logs(&request(vec![record.clone(), record])).unwrap();
        assert_eq!(counts.log_records, 2);
        // Per record: 2 KeyValues, 2 AnyValues, 1 ArrayValue, 3 elements; plus the
        // ResourceLogs and ScopeLogs around them.
        assert_eq!(counts.values, 2 * 8 + 2);
    }

    #[test]
    fn empty_records_past_the_bound_are_refused_before_decoding() {
        // Two bytes per empty record on the wire: field 2 of ScopeLogs, length 0.
        let mut scope = Vec::new();
        for _ in 0..=MAX_LOG_RECORDS_PER_REQUEST {
            scope.extend_from_slice(&[0x12, 0x00]);
        }
        let mut rl = vec![0x12];
        prost::encoding::encode_varint(scope.len() as u64, &mut rl);
        rl.extend(scope);
        let mut body = vec![0x0a];
        prost::encoding::encode_varint(rl.len() as u64, &mut body);
        body.extend(rl);
        let err = count_logs(&body).unwrap_err();
        assert!(err.to_string().contains("more than 50000 log records"), "{err}");
    }

    #[test]
    fn each_bound_admits_its_value_and_refuses_one_more() {
        for (item, bound) in [
            (Item::Span, MAX_SPANS_PER_REQUEST),
            (Item::LogRecord, MAX_LOG_RECORDS_PER_REQUEST),
            (Item::Value, MAX_VALUES_PER_REQUEST),
        ] {
            let mut counts = Counts::default();
            for _ in 0..bound {
                counts.add(item).unwrap();
            }
            let err = too_many(counts.add(item).unwrap_err(), "spans").to_string();
            assert!(err.contains(&format!("more than {bound} ")), "{err}");
        }
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
            assert!(count_logs(body).is_err(), "{body:?}");
        }
        assert_eq!(count_logs(b"").unwrap(), Counts::default());
    }
}
