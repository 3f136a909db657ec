//! The Kafka record: a batch of call parts in a compact protobuf encoding (prost). The schema is
//! written out as message structs here rather than in a `.proto` file so the build needs no
//! `protoc`; field numbers are the wire contract between ingest and consume: only ever add fields.
//!
//! ```proto
//! message CallPartBatch { repeated CallPartRecord parts = 1; }
//! message CallPartRecord { string project_id = 1; string id = 2; optional string trace_id = 3;
//!                          optional StartRecord start = 4; optional EndRecord end = 5; }
//! ```

use prost::Message;

use crate::ProtoError;
use crate::calls::{CallPart, EndPart, StartPart};
use crate::ids::ProjectId;
use crate::time::Micros;

#[derive(Clone, PartialEq, Message)]
pub struct CallPartBatch {
    #[prost(message, repeated, tag = "1")]
    pub parts: Vec<CallPartRecord>,
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
}

impl From<&CallPart> for CallPartRecord {
    fn from(p: &CallPart) -> Self {
        CallPartRecord {
            project_id: p.project.as_str().to_owned(),
            id: p.id.clone(),
            trace_id: p.trace_id.clone(),
            start: p.start.as_ref().map(|s| StartRecord {
                op_name: s.op_name.clone(),
                display_name: s.display_name.clone(),
                parent_id: s.parent_id.clone(),
                thread_id: s.thread_id.clone(),
                turn_id: s.turn_id.clone(),
                started_at_us: s.started_at.0,
                attributes: s.attributes.clone(),
                inputs: s.inputs.clone(),
                otel_dump: s.otel_dump.clone(),
                wb_user_id: s.wb_user_id.clone(),
                wb_run_id: s.wb_run_id.clone(),
                wb_run_step: s.wb_run_step,
            }),
            end: p.end.as_ref().map(|e| EndRecord {
                ended_at_us: e.ended_at.0,
                summary: e.summary.clone(),
                output: e.output.clone(),
                exception: e.exception.clone(),
                wb_run_step_end: e.wb_run_step_end,
            }),
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
                otel_dump: s.otel_dump,
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
            }),
        };
        part.check()?;
        Ok(part)
    }
}

/// Encodes parts as one record value.
pub fn encode_parts<'a>(parts: impl IntoIterator<Item = &'a CallPart>) -> Vec<u8> {
    CallPartBatch { parts: parts.into_iter().map(CallPartRecord::from).collect() }.encode_to_vec()
}

/// Decodes a record value; a corrupt record is a data error (it goes to the dead-letter topic).
pub fn decode_parts(bytes: &[u8]) -> Result<Vec<CallPart>, ProtoError> {
    let batch = CallPartBatch::decode(bytes)
        .map_err(|e| ProtoError::invalid(format!("undecodable call record: {e}")))?;
    batch.parts.into_iter().map(CallPart::try_from).collect()
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
    fn corrupt_records_are_data_errors() {
        assert!(decode_parts(b"\xff\xff\xff").is_err());
        let bad_project = CallPartBatch {
            parts: vec![CallPartRecord { project_id: "nope".into(), ..Default::default() }],
        };
        assert!(decode_parts(&bad_project.encode_to_vec()).is_err());
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
