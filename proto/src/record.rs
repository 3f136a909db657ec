//! The Kafka record: a batch of call parts in a compact protobuf encoding (prost). The schema is
//! written out as message structs here rather than in a `.proto` file so the build needs no
//! `protoc`; field numbers are the wire contract between ingest and consume: only ever add fields.
//!
//! ```proto
//! message CallPartBatch { repeated CallPartRecord parts = 1;
//!                         repeated FileRecord files = 2; repeated OpRecord ops = 3;
//!                         repeated LogRecordRecord logs = 4; }
//! message CallPartRecord { string project_id = 1; string id = 2; optional string trace_id = 3;
//!                          optional StartRecord start = 4; optional EndRecord end = 5;
//!                          optional BlobRef offloaded = 6; }
//! message BlobRef { string digest = 1; uint64 size = 2; }
//! message FileRecord { string project_id = 1; string digest = 2; bytes content = 3; }
//! message OpRecord { string project_id = 1; string object_id = 2; string digest = 3;
//!                    string val = 4; optional string wb_user_id = 5; }
//! message LogRecordRecord { string project_id = 1; string trace_id = 2; string span_id = 3;
//!                           sint64 time_unix_nano = 4; int64 seq = 5; string id = 6;
//!                           string event_name = 7; int32 severity_number = 8;
//!                           string severity_text = 9; string body = 10; string attributes = 11;
//!                           string dump = 12; optional string wb_user_id = 13; }
//! ```
//!
//! **OTLP log records.** `logs` carries the records of `/otel/v1/logs`
//! ([`crate::otlp::logs::OtelLog`]); a record of them holds nothing else. Each is at most
//! [`crate::limits::MAX_LOG_RECORD_BYTES`], so none needs offloading.
//!
//! **Placeholder ops.** `files` and `ops` carry the writes of [`crate::otlp::op::OpWrites`]: the
//! placeholder op objects OTLP spans need, and their source file (docs/distributed.md,
//! "Placeholder ops"). A record carries them, call parts, or both; the consumer stores the files
//! and ops of a record before its parts. Records written before these fields existed simply
//! have none.
//!
//! **Offloaded parts.** A part too large for a Kafka record travels as a *reference*: its whole
//! encoded `CallPartRecord` is written to the store first, as a blob of its project named by the
//! digest of its bytes ([`offload`]), and the record carries only the project, ids and that
//! [`BlobRef`]. The consumer reads the blob back and stores the full call ([`resolve`]), so
//! reads never see references and the Kafka record size never limits the call size
//! (docs/distributed.md).

use prost::Message;

use crate::ProtoError;
use crate::calls::{CallPart, EndPart, OtelDump, StartPart};
use crate::digest::bytes_digest;
use crate::ids::ProjectId;
use crate::lazy_part::{LazyMember, LazyPart};
use crate::member::write::Text;
use crate::otlp::logs::OtelLog;
use crate::otlp::op::{FileWrite, OpWrite, OpWrites};
use crate::time::Micros;

#[derive(Clone, PartialEq, Message)]
pub struct CallPartBatch {
    #[prost(message, repeated, tag = "1")]
    pub parts: Vec<CallPartRecord>,
    #[prost(message, repeated, tag = "2")]
    pub files: Vec<FileRecord>,
    #[prost(message, repeated, tag = "3")]
    pub ops: Vec<OpRecord>,
    #[prost(message, repeated, tag = "4")]
    pub logs: Vec<LogRecordRecord>,
}

/// An OTLP log record ([`OtelLog`]).
#[derive(Clone, PartialEq, Message)]
pub struct LogRecordRecord {
    #[prost(string, tag = "1")]
    pub project_id: String,
    #[prost(string, tag = "2")]
    pub trace_id: String,
    #[prost(string, tag = "3")]
    pub span_id: String,
    #[prost(sint64, tag = "4")]
    pub time_unix_nano: i64,
    #[prost(int64, tag = "5")]
    pub seq: i64,
    #[prost(string, tag = "6")]
    pub id: String,
    #[prost(string, tag = "7")]
    pub event_name: String,
    #[prost(int32, tag = "8")]
    pub severity_number: i32,
    #[prost(string, tag = "9")]
    pub severity_text: String,
    #[prost(string, tag = "10")]
    pub body: String,
    #[prost(string, tag = "11")]
    pub attributes: String,
    #[prost(string, tag = "12")]
    pub dump: String,
    #[prost(string, optional, tag = "13")]
    pub wb_user_id: Option<String>,
}

impl From<OtelLog> for LogRecordRecord {
    fn from(l: OtelLog) -> Self {
        LogRecordRecord {
            project_id: l.project.as_str().to_owned(),
            trace_id: l.trace_id,
            span_id: l.span_id,
            time_unix_nano: l.time_unix_nano,
            seq: l.seq,
            id: l.id,
            event_name: l.event_name,
            severity_number: l.severity_number,
            severity_text: l.severity_text,
            body: l.body,
            attributes: l.attributes,
            dump: l.dump,
            wb_user_id: l.wb_user_id,
        }
    }
}

impl TryFrom<LogRecordRecord> for OtelLog {
    type Error = ProtoError;

    /// Checked against the same bounds as a request.
    fn try_from(r: LogRecordRecord) -> Result<Self, ProtoError> {
        let log = OtelLog {
            project: ProjectId::parse(&r.project_id)?,
            trace_id: r.trace_id,
            span_id: r.span_id,
            time_unix_nano: r.time_unix_nano,
            seq: r.seq,
            id: r.id,
            event_name: r.event_name,
            severity_number: r.severity_number,
            severity_text: r.severity_text,
            body: r.body,
            attributes: r.attributes,
            dump: r.dump,
            wb_user_id: r.wb_user_id,
        };
        log.check()?;
        Ok(log)
    }
}

/// A content-addressed file ([`FileWrite`]).
#[derive(Clone, PartialEq, Message)]
pub struct FileRecord {
    #[prost(string, tag = "1")]
    pub project_id: String,
    #[prost(string, tag = "2")]
    pub digest: String,
    #[prost(bytes = "vec", tag = "3")]
    pub content: Vec<u8>,
}

/// A content-addressed op object ([`OpWrite`]).
#[derive(Clone, PartialEq, Message)]
pub struct OpRecord {
    #[prost(string, tag = "1")]
    pub project_id: String,
    #[prost(string, tag = "2")]
    pub object_id: String,
    #[prost(string, tag = "3")]
    pub digest: String,
    #[prost(string, tag = "4")]
    pub val: String,
    #[prost(string, optional, tag = "5")]
    pub wb_user_id: Option<String>,
}

impl From<&FileWrite> for FileRecord {
    fn from(f: &FileWrite) -> Self {
        FileRecord {
            project_id: f.project.as_str().to_owned(),
            digest: f.digest.clone(),
            content: f.content.clone(),
        }
    }
}

impl From<&OpWrite> for OpRecord {
    fn from(o: &OpWrite) -> Self {
        OpRecord {
            project_id: o.project.as_str().to_owned(),
            object_id: o.object_id.clone(),
            digest: o.digest.clone(),
            val: o.val.clone(),
            wb_user_id: o.wb_user_id.clone(),
        }
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct CallPartRecord {
    #[prost(string, tag = "1")]
    pub project_id: String,
    #[prost(string, tag = "2")]
    pub id: String,
    #[prost(string, optional, tag = "3")]
    pub trace_id: Option<String>,
    #[prost(message, optional, tag = "4")]
    pub start: Option<StartRecord>,
    #[prost(message, optional, tag = "5")]
    pub end: Option<EndRecord>,
    /// Set (and `start`/`end` absent) when the part was offloaded to a blob.
    #[prost(message, optional, tag = "6")]
    pub offloaded: Option<BlobRef>,
}

/// Where an offloaded part is: the project's blob with this digest ([`bytes_digest`] of the
/// blob) and size.
#[derive(Clone, PartialEq, Message)]
pub struct BlobRef {
    #[prost(string, tag = "1")]
    pub digest: String,
    #[prost(uint64, tag = "2")]
    pub size: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct StartRecord {
    #[prost(string, tag = "1")]
    pub op_name: String,
    #[prost(string, optional, tag = "2")]
    pub display_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub parent_id: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub thread_id: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub turn_id: Option<String>,
    #[prost(sint64, tag = "6")]
    pub started_at_us: i64,
    #[prost(string, tag = "7")]
    pub attributes: String,
    #[prost(string, tag = "8")]
    pub inputs: String,
    #[prost(string, optional, tag = "9")]
    pub otel_dump: Option<String>,
    #[prost(string, optional, tag = "10")]
    pub wb_user_id: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub wb_run_id: Option<String>,
    #[prost(int64, optional, tag = "12")]
    pub wb_run_step: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct EndRecord {
    #[prost(sint64, tag = "1")]
    pub ended_at_us: i64,
    #[prost(string, tag = "2")]
    pub summary: String,
    #[prost(string, optional, tag = "3")]
    pub output: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub exception: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub wb_run_step_end: Option<i64>,
    /// Added after the first release: records written before it decode with `None`.
    #[prost(string, optional, tag = "6")]
    pub display_name: Option<String>,
}

impl From<&CallPart> for CallPartRecord {
    fn from(p: &CallPart) -> Self {
        CallPartRecord::from(p.clone())
    }
}

impl From<CallPart> for CallPartRecord {
    fn from(p: CallPart) -> Self {
        CallPartRecord {
            project_id: p.project.as_str().to_owned(),
            id: p.id,
            trace_id: p.trace_id,
            start: p.start.map(|s| StartRecord {
                op_name: s.op_name,
                display_name: s.display_name,
                parent_id: s.parent_id,
                thread_id: s.thread_id,
                turn_id: s.turn_id,
                started_at_us: s.started_at.0,
                attributes: s.attributes,
                inputs: s.inputs,
                otel_dump: s.otel_dump.map(OtelDump::into_string),
                wb_user_id: s.wb_user_id,
                wb_run_id: s.wb_run_id,
                wb_run_step: s.wb_run_step,
            }),
            end: p.end.map(|e| EndRecord {
                ended_at_us: e.ended_at.0,
                summary: e.summary,
                output: e.output,
                exception: e.exception,
                wb_run_step_end: e.wb_run_step_end,
                display_name: e.display_name,
            }),
            offloaded: None,
        }
    }
}

impl TryFrom<CallPartRecord> for CallPart {
    type Error = ProtoError;

    /// A record is outside input like any request: it is checked against the same bounds.
    fn try_from(r: CallPartRecord) -> Result<Self, ProtoError> {
        let part = CallPart {
            project: ProjectId::parse(&r.project_id)?,
            id: r.id,
            trace_id: r.trace_id,
            start: r.start.map(|s| StartPart {
                op_name: s.op_name,
                display_name: s.display_name,
                parent_id: s.parent_id,
                thread_id: s.thread_id,
                turn_id: s.turn_id,
                started_at: Micros(s.started_at_us),
                attributes: s.attributes,
                inputs: s.inputs,
                otel_dump: s.otel_dump.map(OtelDump::from),
                wb_user_id: s.wb_user_id,
                wb_run_id: s.wb_run_id,
                wb_run_step: s.wb_run_step,
            }),
            end: r.end.map(|e| EndPart {
                ended_at: Micros(e.ended_at_us),
                summary: e.summary,
                output: e.output,
                exception: e.exception,
                wb_run_step_end: e.wb_run_step_end,
                display_name: e.display_name.filter(|d| !d.is_empty()),
            }),
        };
        part.check()?;
        Ok(part)
    }
}

/// Encodes parts as one record value.
pub fn encode_parts<'a>(parts: impl IntoIterator<Item = &'a CallPart>) -> Vec<u8> {
    encode_records(parts.into_iter().map(CallPartRecord::from))
}

/// Encodes part records (inline or references) as one record value.
pub fn encode_records(parts: impl IntoIterator<Item = CallPartRecord>) -> Vec<u8> {
    CallPartBatch { parts: parts.into_iter().collect(), ..Default::default() }.encode_to_vec()
}

/// Appends `rec` to a record value of call parts: the value [`encode_records`] makes of some
/// parts and then `rec` (a repeated field is its elements' encodings, one after another).
pub fn append_record(value: &mut Vec<u8>, rec: &CallPartRecord) {
    prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, value);
    rec.encode_length_delimited(value).expect("a Vec grows as needed");
}

/// Appends `part` to a record value of call parts: the bytes [`append_record`] appends for the
/// [`CallPart`] it becomes ([`LazyPart::into_part`]), with each member written straight into
/// `value` instead of into a string of its own first. Returns the length of the part's
/// `CallPartRecord`. On an error (a member nests too deep), `value` is left as it was.
pub fn append_lazy(value: &mut Vec<u8>, part: &LazyPart) -> Result<usize, ProtoError> {
    let at = value.len();
    let written = delimited(value, 1, part.size(), |v| write_lazy(v, part));
    match written {
        Ok(len) => Ok(len),
        Err(e) => {
            value.truncate(at);
            Err(e)
        }
    }
}

/// A [`CallPartRecord`] field by field, in the order of its tags as prost writes them: a plain
/// string field is left out when empty, an optional one written when set. This is the schema's
/// second writer: a field added to the schema is added here too, and the OTLP mapping tests and
/// the protobuf fuzz target compare the two byte for byte.
fn write_lazy(v: &mut Vec<u8>, part: &LazyPart) -> Result<(), ProtoError> {
    use prost::encoding::{int64, sint64};
    put_str(v, 1, part.project.as_str());
    put_str(v, 2, part.id);
    put_opt(v, 3, Some(part.trace_id));
    let (s, e) = (&part.start, &part.end);
    let start_size = s.attributes.size + s.inputs.size + s.otel_dump.as_ref().map_or(0, |m| m.size);
    delimited(v, 4, start_size + 192, |v| {
        put_str(v, 1, s.op_name);
        put_opt(v, 2, s.display_name);
        put_opt(v, 3, s.parent_id);
        put_opt(v, 4, s.thread_id);
        put_opt(v, 5, s.turn_id);
        if s.started_at.0 != 0 {
            sint64::encode(6, &s.started_at.0, v);
        }
        put_member(v, 7, &s.attributes)?;
        put_member(v, 8, &s.inputs)?;
        s.otel_dump.as_ref().map(|m| put_member(v, 9, m)).transpose()?;
        put_opt(v, 10, s.wb_user_id);
        put_opt(v, 11, s.wb_run_id);
        if let Some(step) = s.wb_run_step {
            int64::encode(12, &step, v);
        }
        Ok(())
    })?;
    let end_size = e.summary.size + e.output.as_ref().map_or(0, |m| m.size);
    delimited(v, 5, end_size + 32, |v| {
        if e.ended_at.0 != 0 {
            sint64::encode(1, &e.ended_at.0, v);
        }
        put_member(v, 2, &e.summary)?;
        e.output.as_ref().map(|m| put_member(v, 3, m)).transpose()?;
        put_opt(v, 4, e.exception);
        if let Some(step) = e.wb_run_step_end {
            int64::encode(5, &step, v);
        }
        Ok(())
    })?;
    Ok(())
}

fn put_str(v: &mut Vec<u8>, tag: u32, s: &str) {
    if !s.is_empty() {
        put_opt(v, tag, Some(s));
    }
}

fn put_opt(v: &mut Vec<u8>, tag: u32, s: Option<&str>) {
    if let Some(s) = s {
        prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, v);
        prost::encoding::encode_varint(s.len() as u64, v);
        v.extend_from_slice(s.as_bytes());
    }
}

/// A member written in place. JSON text is never empty, so the field is always written, as
/// prost writes a string that is not empty.
fn put_member(v: &mut Vec<u8>, tag: u32, m: &LazyMember) -> Result<(), ProtoError> {
    delimited(v, tag, m.size, |v| {
        let mut text = Text::after(std::mem::take(v));
        let written = m.write(&mut text);
        *v = text.into_bytes();
        written
    })
    .map(|len| debug_assert!(len > 0, "an empty member"))
}

/// A length-delimited field whose length is known only once `write` has written it. Its length
/// is given the varint width of `guess`; when the length needs another width, the bytes written
/// are moved by the difference (rare: most members' sizes are known to the byte, and one width
/// covers 128 bytes to 16 KiB). Returns the length.
fn delimited(
    v: &mut Vec<u8>,
    tag: u32,
    guess: usize,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), ProtoError>,
) -> Result<usize, ProtoError> {
    use prost::encoding::{encode_varint, encoded_len_varint};
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, v);
    let at = v.len();
    let width = encoded_len_varint(guess as u64);
    v.resize(at + width, 0);
    write(v)?;
    let len = v.len() - at - width;
    let needed = encoded_len_varint(len as u64);
    if needed != width {
        let end = v.len();
        if needed > width {
            v.resize(end + needed - width, 0);
        }
        v.copy_within(at + width..end, at + needed);
        v.truncate(at + needed + len);
    }
    encode_varint(len as u64, &mut &mut v[at..at + needed]);
    Ok(len)
}

/// Encodes placeholder-op writes as one record value.
pub fn encode_ops(files: Vec<FileRecord>, ops: Vec<OpRecord>) -> Vec<u8> {
    CallPartBatch { files, ops, ..Default::default() }.encode_to_vec()
}

/// Encodes OTLP log records as one record value.
pub fn encode_logs(logs: Vec<LogRecordRecord>) -> Vec<u8> {
    CallPartBatch { logs, ..Default::default() }.encode_to_vec()
}

/// A decoded record value: the op writes to store first, then the call parts and log records.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decoded {
    pub ops: OpWrites,
    pub parts: Vec<RecordPart>,
    pub logs: Vec<OtelLog>,
}

/// One part of a decoded record: the part itself, or where to find it.
// Nearly every part is inline; boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum RecordPart {
    Inline(CallPart),
    Offloaded(Offloaded),
}

/// A reference to an offloaded part: the project's blob `digest` of `size` bytes holds the
/// encoded `CallPartRecord` of call `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Offloaded {
    pub project: ProjectId,
    pub id: String,
    pub digest: String,
    pub size: u64,
}

/// A part moved out of its Kafka record: the blob to store (before the record is produced) and
/// the small reference record that replaces the part.
#[derive(Debug, Clone)]
pub struct Offload {
    pub project: ProjectId,
    pub digest: String,
    pub blob: Vec<u8>,
    pub reference: CallPartRecord,
}

/// Moves a part record into a blob: content-addressed, so the same part always gives the same
/// digest and bytes, and storing it twice changes nothing.
pub fn offload(rec: CallPartRecord) -> Result<Offload, ProtoError> {
    let project = ProjectId::parse(&rec.project_id)?;
    let blob = rec.encode_to_vec();
    let digest = bytes_digest(&blob);
    let reference = CallPartRecord {
        project_id: rec.project_id,
        id: rec.id,
        trace_id: rec.trace_id,
        start: None,
        end: None,
        offloaded: Some(BlobRef { digest: digest.clone(), size: blob.len() as u64 }),
    };
    Ok(Offload { project, digest, blob, reference })
}

/// Decodes a record value; a corrupt record is a data error (it goes to the dead-letter topic).
pub fn decode_record(bytes: &[u8]) -> Result<Decoded, ProtoError> {
    let batch = CallPartBatch::decode(bytes)
        .map_err(|e| ProtoError::invalid(format!("undecodable call record: {e}")))?;
    let files = batch
        .files
        .into_iter()
        .map(|f| {
            Ok(FileWrite {
                project: ProjectId::parse(&f.project_id)?,
                digest: f.digest,
                content: f.content,
            })
        })
        .collect::<Result<_, ProtoError>>()?;
    let ops = batch
        .ops
        .into_iter()
        .map(|o| {
            Ok(OpWrite {
                project: ProjectId::parse(&o.project_id)?,
                object_id: o.object_id,
                digest: o.digest,
                val: o.val,
                wb_user_id: o.wb_user_id,
            })
        })
        .collect::<Result<_, ProtoError>>()?;
    let ops = OpWrites { files, ops };
    ops.check()?;
    let parts = batch
        .parts
        .into_iter()
        .map(|r| match r.offloaded {
            None => CallPart::try_from(r).map(RecordPart::Inline),
            Some(_) if r.start.is_some() || r.end.is_some() => Err(ProtoError::invalid(format!(
                "call record {}: a reference must not carry the part itself",
                r.id
            ))),
            Some(blob) => Ok(RecordPart::Offloaded(Offloaded {
                project: ProjectId::parse(&r.project_id)?,
                id: r.id,
                digest: blob.digest,
                size: blob.size,
            })),
        })
        .collect::<Result<_, ProtoError>>()?;
    let logs = batch.logs.into_iter().map(OtelLog::try_from).collect::<Result<_, _>>()?;
    Ok(Decoded { ops, parts, logs })
}

/// Decodes a record value that holds only call parts, none of them references (tests, tools).
pub fn decode_parts(bytes: &[u8]) -> Result<Vec<CallPart>, ProtoError> {
    let decoded = decode_record(bytes)?;
    if !decoded.ops.is_empty() || !decoded.logs.is_empty() {
        return Err(ProtoError::invalid("the record holds placeholder ops or log records"));
    }
    decoded
        .parts
        .into_iter()
        .map(|p| match p {
            RecordPart::Inline(p) => Ok(p),
            RecordPart::Offloaded(o) => {
                Err(ProtoError::invalid(format!("call record {} is offloaded", o.id)))
            }
        })
        .collect()
}

/// The part an offloaded reference names, from the blob read back: the blob must be the one
/// named (digest and size) and hold exactly that call of that project.
pub fn resolve(o: &Offloaded, blob: &[u8]) -> Result<CallPart, ProtoError> {
    if blob.len() as u64 != o.size || bytes_digest(blob) != o.digest {
        return Err(ProtoError::invalid(format!(
            "blob {} of call {} does not match its reference",
            o.digest, o.id
        )));
    }
    let rec = CallPartRecord::decode(blob)
        .map_err(|e| ProtoError::invalid(format!("undecodable blob {}: {e}", o.digest)))?;
    if rec.project_id != o.project.as_str() || rec.id != o.id || rec.offloaded.is_some() {
        return Err(ProtoError::invalid(format!(
            "blob {} does not hold call {} of {}",
            o.digest, o.id, o.project
        )));
    }
    CallPart::try_from(rec)
}

/// The partition of a trace: a stable hash (FNV-1a) of its id, so every part of one trace lands
/// on one partition whatever process produced it.
pub fn partition_of(trace_key: &str, partitions: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in trace_key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(partitions.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(id: &str, start: bool, end: bool) -> CallPart {
        CallPart {
            project: ProjectId::parse("e/p").unwrap(),
            id: id.into(),
            trace_id: Some("t".into()),
            start: start.then(|| StartPart {
                op_name: "weave:///e/p/op/f:d".into(),
                display_name: None,
                parent_id: Some("parent".into()),
                thread_id: None,
                turn_id: Some("turn".into()),
                started_at: Micros(-5),
                attributes: "{}".into(),
                inputs: r#"{"x":100000000000000000000}"#.into(),
                otel_dump: None,
                wb_user_id: Some("u".into()),
                wb_run_id: None,
                wb_run_step: Some(3),
            }),
            end: end.then(|| EndPart {
                ended_at: Micros(1_700_000_000_000_000),
                summary: "{}".into(),
                output: Some("1.50".into()),
                exception: None,
                wb_run_step_end: None,
                display_name: Some("named at the end".into()),
            }),
        }
    }

    #[test]
    fn parts_round_trip_exactly() {
        let parts = vec![part("a", true, true), part("b", true, false), part("c", false, true)];
        let bytes = encode_parts(&parts);
        assert_eq!(decode_parts(&bytes).unwrap(), parts);
    }

    #[test]
    fn parts_appended_one_by_one_make_the_record_encoded_at_once() {
        let parts = [part("a", true, true), part("b", true, false), part("c", false, true)];
        let records: Vec<CallPartRecord> = parts.iter().map(CallPartRecord::from).collect();
        let mut appended = Vec::new();
        for rec in &records {
            append_record(&mut appended, rec);
        }
        assert_eq!(appended, encode_records(records));
    }

    #[test]
    fn corrupt_records_are_data_errors() {
        assert!(decode_parts(b"\xff\xff\xff").is_err());
        let bad_project = CallPartBatch {
            parts: vec![CallPartRecord { project_id: "nope".into(), ..Default::default() }],
            ..Default::default()
        };
        assert!(decode_parts(&bad_project.encode_to_vec()).is_err());
    }

    #[test]
    fn offloaded_parts_travel_as_references_and_resolve_exactly() {
        let big = part("big", true, true);
        let small = part("small", true, false);
        let off = offload(CallPartRecord::from(&big)).unwrap();
        assert_eq!(off.digest, bytes_digest(&off.blob));
        // Content-addressed: the same part gives the same blob and digest.
        assert_eq!(offload(CallPartRecord::from(&big)).unwrap().blob, off.blob);
        let bytes = encode_records([CallPartRecord::from(&small), off.reference.clone()]);
        let decoded = decode_record(&bytes).unwrap().parts;
        let RecordPart::Offloaded(o) = &decoded[1] else { panic!("{decoded:?}") };
        assert_eq!(decoded[0], RecordPart::Inline(small));
        assert_eq!((o.id.as_str(), o.size), ("big", off.blob.len() as u64));
        assert_eq!(resolve(o, &off.blob).unwrap(), big);
        assert!(decode_parts(&bytes).is_err(), "decode_parts refuses references");
    }

    #[test]
    fn a_blob_that_is_not_the_referenced_part_is_refused() {
        let off = offload(CallPartRecord::from(&part("a", true, true))).unwrap();
        let other = offload(CallPartRecord::from(&part("b", true, true))).unwrap();
        let RecordPart::Offloaded(o) =
            decode_record(&encode_records([off.reference.clone()])).unwrap().parts.remove(0)
        else {
            panic!("a reference")
        };
        // Another call's blob, a truncated blob, and a forged reference to another call.
        assert!(resolve(&o, &other.blob).is_err());
        assert!(resolve(&o, &off.blob[..off.blob.len() - 1]).is_err());
        let forged = Offloaded { id: "b".into(), ..o.clone() };
        assert!(resolve(&forged, &off.blob).unwrap_err().to_string().contains("does not hold"));
        // A reference that also carries the part is malformed.
        let mut both = CallPartRecord::from(&part("a", true, true));
        both.offloaded = off.reference.offloaded.clone();
        assert!(decode_record(&encode_records([both])).is_err());
    }

    /// The encoding of a record written before records carried placeholder ops, as it was
    /// produced then: the field numbers of the parts must keep their meaning.
    #[test]
    fn records_without_ops_still_decode() {
        #[derive(Clone, PartialEq, Message)]
        struct OldBatch {
            #[prost(message, repeated, tag = "1")]
            parts: Vec<CallPartRecord>,
        }
        let parts = vec![part("a", true, true), part("b", false, true)];
        let old = OldBatch { parts: parts.iter().map(CallPartRecord::from).collect() };
        let decoded = decode_record(&old.encode_to_vec()).unwrap();
        assert!(decoded.ops.is_empty());
        assert_eq!(decode_parts(&old.encode_to_vec()).unwrap(), parts);
        assert_eq!(encode_parts(&parts), old.encode_to_vec(), "parts-only records are unchanged");
    }

    #[test]
    fn placeholder_ops_round_trip_and_are_checked() {
        use crate::otlp::op::placeholder_writes;
        let names = [(ProjectId::parse("e/p").unwrap(), "span name".to_owned())].into();
        let writes = placeholder_writes(&names, Some("u"));
        let files: Vec<FileRecord> = writes.files.iter().map(FileRecord::from).collect();
        let ops: Vec<OpRecord> = writes.ops.iter().map(OpRecord::from).collect();
        let decoded = decode_record(&encode_ops(files.clone(), ops.clone())).unwrap();
        assert_eq!(decoded, Decoded { ops: writes, ..Default::default() });
        assert!(decode_parts(&encode_ops(files.clone(), ops.clone())).is_err());
        // A record claiming a digest for other content is a data error.
        let mut forged = ops;
        forged[0].val = r#"{"_type":"CustomWeaveType","weave_type":{"type":"Op"}}"#.into();
        assert!(decode_record(&encode_ops(files, forged)).is_err());
    }

    #[test]
    fn log_records_round_trip_and_are_checked() {
        use crate::otlp::logs::convert;
        use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
        use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
        let rec = LogRecord { time_unix_nano: 5, span_id: vec![1; 8], ..Default::default() };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs { log_records: vec![rec], ..Default::default() }],
                ..Default::default()
            }],
        };
        let project = ProjectId::parse("e/p").unwrap();
        let logs = convert(&req, Some(&project), Some("u")).unwrap().logs;
        let bytes = encode_logs(logs.iter().cloned().map(LogRecordRecord::from).collect());
        assert_eq!(
            decode_record(&bytes).unwrap(),
            Decoded { logs: logs.clone(), ..Default::default() }
        );
        assert!(decode_parts(&bytes).is_err());
        // A record whose body is not JSON is a data error.
        let mut bad = LogRecordRecord::from(logs[0].clone());
        bad.body = "{".into();
        assert!(decode_record(&encode_logs(vec![bad])).is_err());
    }

    #[test]
    fn partitions_are_stable_and_in_range() {
        assert_eq!(partition_of("trace-1", 8), partition_of("trace-1", 8));
        assert!((0..1000).all(|i| partition_of(&format!("t{i}"), 3) < 3));
        let used: std::collections::HashSet<u32> =
            (0..1000).map(|i| partition_of(&format!("t{i}"), 4)).collect();
        assert_eq!(used.len(), 4);
    }
}
