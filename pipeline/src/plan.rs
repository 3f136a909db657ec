//! How a write becomes Kafka records (docs/distributed.md, "Write path"): pure code, so it
//! is tested without a broker.
//!
//! Call parts: one record per (request, partition), not one per call. tansu and small Kafka
//! clusters sustain tens of thousands of records per second, while the SDK sends up to 1000
//! calls per request; grouping keeps the record rate per request bounded by the partition count.
//! The partition is chosen from the trace id, so all parts of a trace stay on one partition. A
//! part whose encoded size exceeds `max_record_bytes` is offloaded: it travels as a reference to
//! a blob that is stored before the record is produced.
//!
//! Placeholder ops: the records of one project go to the partition of its id, each carrying the
//! project's files along with its ops, so every record can be stored on its own.
//!
//! OTLP log records: grouped by the partition of their trace (of their project when they name
//! none) and cut at `max_record_bytes`, like call parts. One log record is at most
//! `heddle_proto::limits::MAX_LOG_RECORD_BYTES`, so none is offloaded.

use std::collections::BTreeMap;

use heddle_proto::calls::CallPart;
use heddle_proto::lazy_part::LazyPart;
use heddle_proto::otlp::logs::OtelLog;
use heddle_proto::otlp::op::OpWrites;
use heddle_proto::record::{
    CallPartRecord, FileRecord, LogRecordRecord, Offload, OpRecord, append_lazy, append_record,
    encode_logs, encode_ops, offload, partition_of,
};
use heddle_proto::{ProjectId, ProtoError};
use prost::Message;

use crate::SinkError;

/// One Kafka record to produce.
pub(crate) struct Record {
    pub(crate) partition: i32,
    pub(crate) key: String,
    pub(crate) payload: Vec<u8>,
}

/// What one request becomes: the blobs to store first, then the records.
pub(crate) struct Plan {
    pub(crate) blobs: Vec<Offload>,
    pub(crate) records: Vec<Record>,
}

/// Splits parts into records: grouped by partition (all parts of a trace on one), cut at
/// `max_record_bytes`; a part larger than that is offloaded and travels as a reference.
pub(crate) fn plan(
    parts: Vec<CallPart>,
    partitions: u32,
    max_record_bytes: usize,
) -> Result<Plan, SinkError> {
    let mut planner = Planner::new(partitions, max_record_bytes);
    for part in parts {
        planner.push(part)?;
    }
    Ok(planner.finish())
}

/// What a record's buffer starts at.
const FIRST_RESERVE: usize = 64 * 1024;
/// The most a part's field header takes: its tag and its length.
const FIELD_HEADER: usize = 1 + 10;

/// Why a part was not planned.
pub(crate) enum Unplaced {
    /// The part's own fault (a member nests too deep): nothing of it was written.
    Refused(ProtoError),
    Failed(SinkError),
}

impl From<SinkError> for Unplaced {
    fn from(e: SinkError) -> Self {
        Unplaced::Failed(e)
    }
}

/// [`plan`] a part at a time: each part is encoded into its partition's record as it comes, so
/// that a caller making parts one by one hands each over while it is still in the cache, and
/// its memory is reused for the next (docs/benchmarks.md, "Calls staged where they are made").
/// A record's bytes are those of encoding its parts together: a repeated field is its
/// elements' encodings, one after another.
pub(crate) struct Planner {
    partitions: u32,
    max_record_bytes: usize,
    /// Per partition, the record being filled.
    open: Vec<OpenRecord>,
    plan: Plan,
}

#[derive(Default)]
struct OpenRecord {
    /// Its first part's trace id (or id), the record's key.
    key: Option<String>,
    payload: Vec<u8>,
    /// The encoded size of its parts, without their field headers: what is cut at.
    size: usize,
}

impl Planner {
    pub(crate) fn new(partitions: u32, max_record_bytes: usize) -> Planner {
        let open = (0..partitions.max(1)).map(|_| OpenRecord::default()).collect();
        Planner {
            partitions,
            max_record_bytes,
            open,
            plan: Plan { blobs: vec![], records: vec![] },
        }
    }

    pub(crate) fn push(&mut self, part: CallPart) -> Result<(), SinkError> {
        let mut rec = CallPartRecord::from(part);
        if rec.encoded_len() > self.max_record_bytes {
            rec = self.offload(rec)?;
        }
        let len = rec.encoded_len();
        let key = rec.trace_id.as_deref().unwrap_or(&rec.id);
        let placed = self.place(key, len, |payload| {
            append_record(payload, &rec);
            Ok(len)
        });
        placed.map_err(|e| match e {
            Unplaced::Refused(e) => SinkError::internal("encoding a call part", e),
            Unplaced::Failed(e) => e,
        })
    }

    /// [`Planner::push`] of a part whose members are written straight into its record
    /// ([`append_lazy`]).
    pub(crate) fn push_lazy(&mut self, part: &LazyPart) -> Result<(), Unplaced> {
        self.place(part.trace_id, part.size(), |payload| append_lazy(payload, part))
    }

    /// Writes a part into the record of the partition of `key`: `write` appends its field to a
    /// record value and returns the length of its `CallPartRecord`, about `size` bytes. Records
    /// are cut by that length, as [`Planner::push`] cuts them.
    fn place(
        &mut self,
        key: &str,
        size: usize,
        write: impl FnOnce(&mut Vec<u8>) -> Result<usize, ProtoError>,
    ) -> Result<(), Unplaced> {
        let partition = partition_of(key, self.partitions) as usize;
        if size > self.max_record_bytes {
            // Likely to be offloaded: written on its own, not into a record it would outgrow.
            let mut own = Vec::with_capacity(size + FIELD_HEADER);
            let len = write(&mut own).map_err(Unplaced::Refused)?;
            return self.place_written(partition, key, own, len);
        }
        if self.open[partition].size + size > self.most() {
            self.cut(partition);
        }
        self.reserve(partition, size);
        let open = &mut self.open[partition];
        let at = open.payload.len();
        let len = write(&mut open.payload).map_err(Unplaced::Refused)?;
        if len > self.max_record_bytes
            || (open.key.is_some() && open.size + len > self.max_record_bytes)
        {
            // Past what the record holds: moved out, into the next record or a blob.
            let own = open.payload.split_off(at);
            return self.place_written(partition, key, own, len);
        }
        open.size += len;
        open.key.get_or_insert_with(|| key.to_owned());
        Ok(())
    }

    /// Places a part written into `own` (its field; its `CallPartRecord` is the last `len`
    /// bytes), offloaded when larger than a record holds.
    fn place_written(
        &mut self,
        partition: usize,
        key: &str,
        own: Vec<u8>,
        len: usize,
    ) -> Result<(), Unplaced> {
        let (own, len) = if len > self.max_record_bytes {
            let rec = CallPartRecord::decode(&own[own.len() - len..])
                .map_err(|e| SinkError::internal("reading back a call part", e))?;
            let reference = self.offload(rec)?;
            let mut field = Vec::new();
            append_record(&mut field, &reference);
            (field, reference.encoded_len())
        } else {
            (own, len)
        };
        if self.open[partition].size + len > self.max_record_bytes {
            self.cut(partition);
        }
        self.reserve(partition, len);
        let open = &mut self.open[partition];
        open.payload.extend_from_slice(&own);
        open.size += len;
        open.key.get_or_insert_with(|| key.to_owned());
        Ok(())
    }

    /// Moves `rec` into a blob to store before the records; returns the reference to it.
    fn offload(&mut self, rec: CallPartRecord) -> Result<CallPartRecord, SinkError> {
        let off = offload(rec).map_err(|e| SinkError::internal("offloading a call part", e))?;
        let reference = off.reference.clone();
        self.plan.blobs.push(off);
        Ok(reference)
    }

    /// The most a record's buffer holds: `max_record_bytes`, its parts' field headers and room
    /// for a part whose size was guessed low.
    fn most(&self) -> usize {
        self.max_record_bytes + self.max_record_bytes / 16
    }

    /// Ends the open record of `partition`, if it holds a part.
    fn cut(&mut self, partition: usize) {
        let open = &mut self.open[partition];
        if open.key.is_some() {
            let full = std::mem::take(open);
            self.plan.records.push(full.record(partition));
        }
    }

    /// Makes room for a part of about `len` bytes in the open record of `partition`. A record
    /// grown by doubling copied its bytes about once more, which cancelled what encoding parts
    /// in the cache saved. It starts small, for a request of a few calls, and then grows once
    /// to the most it can hold.
    fn reserve(&mut self, partition: usize, len: usize) {
        let most = self.most();
        let payload = &mut self.open[partition].payload;
        let room = len + FIELD_HEADER;
        if payload.capacity() - payload.len() < room {
            let target = if payload.is_empty() { FIRST_RESERVE.min(most) } else { most };
            payload.reserve_exact(target.saturating_sub(payload.len()).max(room));
        }
    }

    /// Whether no part was pushed.
    pub(crate) fn is_empty(&self) -> bool {
        self.plan.records.is_empty() && self.open.iter().all(|o| o.key.is_none())
    }

    pub(crate) fn finish(mut self) -> Plan {
        for (partition, open) in self.open.into_iter().enumerate() {
            if open.key.is_some() {
                self.plan.records.push(open.record(partition));
            }
        }
        self.plan
    }
}

impl OpenRecord {
    fn record(self, partition: usize) -> Record {
        Record {
            partition: partition as i32,
            key: self.key.expect("a record holds a part"),
            payload: self.payload,
        }
    }
}
/// Splits placeholder-op writes into records: one partition per project, cut at
/// `max_record_bytes`, each record with the project's files (a few hundred bytes) so it can be
/// stored on its own.
pub(crate) fn plan_ops(writes: OpWrites, partitions: u32, max_record_bytes: usize) -> Vec<Record> {
    let mut projects: BTreeMap<ProjectId, (Vec<FileRecord>, Vec<OpRecord>)> = BTreeMap::new();
    for f in &writes.files {
        projects.entry(f.project.clone()).or_default().0.push(FileRecord::from(f));
    }
    for op in &writes.ops {
        projects.entry(op.project.clone()).or_default().1.push(OpRecord::from(op));
    }
    let mut records = Vec::new();
    for (project, (files, ops)) in projects {
        let partition = partition_of(project.as_str(), partitions) as i32;
        let key = project.as_str().to_owned();
        let files_len: usize = files.iter().map(Message::encoded_len).sum();
        let mut chunk: Vec<OpRecord> = Vec::new();
        let mut size = files_len;
        let cut = |chunk: Vec<OpRecord>| Record {
            partition,
            key: key.clone(),
            payload: encode_ops(files.clone(), chunk),
        };
        let mut project_records = Vec::new();
        for op in ops {
            let len = op.encoded_len();
            if !chunk.is_empty() && size + len > max_record_bytes {
                project_records.push(cut(std::mem::take(&mut chunk)));
                size = files_len;
            }
            chunk.push(op);
            size += len;
        }
        if !chunk.is_empty() || project_records.is_empty() {
            project_records.push(cut(chunk));
        }
        records.extend(project_records);
    }
    records
}

/// Splits OTLP log records into records: grouped by partition (a trace's records on one), cut
/// at `max_record_bytes`.
pub(crate) fn plan_logs(
    logs: Vec<OtelLog>,
    partitions: u32,
    max_record_bytes: usize,
) -> Vec<Record> {
    let mut groups: BTreeMap<u32, Vec<LogRecordRecord>> = BTreeMap::new();
    for log in logs {
        let key = if log.trace_id.is_empty() { log.project.as_str() } else { &log.trace_id };
        groups.entry(partition_of(key, partitions)).or_default().push(LogRecordRecord::from(log));
    }
    let mut records = Vec::new();
    for (partition, group) in groups {
        let mut chunk: Vec<LogRecordRecord> = Vec::new();
        let mut size = 0;
        let cut = |chunk: Vec<LogRecordRecord>| {
            let key = match chunk[0].trace_id.as_str() {
                "" => chunk[0].project_id.clone(),
                trace => trace.to_owned(),
            };
            Record { partition: partition as i32, key, payload: encode_logs(chunk) }
        };
        for rec in group {
            let len = rec.encoded_len();
            if !chunk.is_empty() && size + len > max_record_bytes {
                records.push(cut(std::mem::take(&mut chunk)));
                size = 0;
            }
            chunk.push(rec);
            size += len;
        }
        if !chunk.is_empty() {
            records.push(cut(chunk));
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use heddle_proto::ProjectId;
    use heddle_proto::otlp::op::placeholder_writes;
    use heddle_proto::record::{RecordPart, decode_record, resolve};

    use super::*;

    fn part(id: &str, trace: &str, input_bytes: usize) -> CallPart {
        let inputs = format!("{{\"x\":\"{}\"}}", "a".repeat(input_bytes));
        crate::test_parts::started(id, trace, &inputs)
    }

    #[test]
    fn large_parts_are_offloaded_and_every_part_arrives_once() {
        let max = 10_000;
        let mut parts: Vec<CallPart> =
            (0..40).map(|i| part(&format!("s{i}"), &format!("t{}", i % 5), 900)).collect();
        parts.push(part("big", "t1", 50_000));
        parts.push(part("edge", "t2", max)); // just over the limit once encoded
        let plan = plan(parts.clone(), 3, max).unwrap();
        assert_eq!(plan.blobs.len(), 2);
        let mut seen = Vec::new();
        for r in &plan.records {
            assert!(r.payload.len() <= max + 64, "record of {} bytes", r.payload.len());
            for p in decode_record(&r.payload).unwrap().parts {
                let p = match p {
                    RecordPart::Inline(p) => p,
                    RecordPart::Offloaded(o) => {
                        let blob = plan.blobs.iter().find(|b| b.digest == o.digest).unwrap();
                        resolve(&o, &blob.blob).unwrap()
                    }
                };
                let key = p.trace_id.as_deref().unwrap();
                assert_eq!(partition_of(key, 3), r.partition as u32, "a trace stays together");
                seen.push(p);
            }
        }
        seen.sort_by(|a, b| a.id.cmp(&b.id));
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(seen, parts);
    }

    #[test]
    fn records_filled_part_by_part_are_their_parts_encoded_together() {
        use heddle_proto::record::{CallPartBatch, encode_records};
        // Records past the first reserve, so that each grows once.
        let max = 200_000;
        let parts: Vec<CallPart> = (0..300)
            .map(|i| part(&format!("p{i}"), &format!("t{}", i % 7), 1_500 + i * 7))
            .collect();
        let plan = plan(parts.clone(), 2, max).unwrap();
        assert!(plan.blobs.is_empty() && plan.records.len() > 2, "{}", plan.records.len());
        assert!(plan.records.iter().any(|r| r.payload.len() > FIRST_RESERVE));
        let mut seen = 0;
        for r in &plan.records {
            assert!(r.payload.len() <= max + max / 16, "{}", r.payload.len());
            let batch = CallPartBatch::decode(&r.payload[..]).unwrap();
            seen += batch.parts.len();
            assert_eq!(r.payload, encode_records(batch.parts));
        }
        assert_eq!(seen, parts.len());
    }

    #[test]
    fn parts_written_in_place_are_planned_as_their_parts_are() {
        use heddle_proto::lazy_part::{LazyEnd, LazyMember, LazyStart};
        use heddle_proto::member::write::Raw;
        use heddle_proto::time::Micros;
        let max = 10_000;
        let project = ProjectId::parse("e/p").unwrap();
        let calls: Vec<(String, String, String)> = (0..90)
            .map(|i| {
                // Two parts larger than a record, one just over it once encoded.
                let len = match i {
                    7 => 50_000,
                    8 => max,
                    _ => 300 + i * 37,
                };
                let inputs = format!("{{\"x\":\"{}\"}}", "a".repeat(len));
                (format!("s{i}"), format!("t{}", i % 4), inputs)
            })
            .collect();
        let (mut in_place, mut as_parts) = (Planner::new(3, max), Planner::new(3, max));
        let empty = Raw("{}");
        for (i, (id, trace, inputs)) in calls.iter().enumerate() {
            let inputs = Raw(inputs);
            // The inputs' size guessed low, to the byte, and past what a record holds.
            let size = [10, inputs.0.len(), 3 * max][i % 3];
            let member = |what, value, size| LazyMember { what, value, size, bounded: true };
            let part = LazyPart {
                project: &project,
                id,
                trace_id: trace,
                start: LazyStart {
                    op_name: "op",
                    display_name: None,
                    parent_id: Some("p"),
                    thread_id: None,
                    turn_id: None,
                    started_at: Micros(i as i64),
                    attributes: member("attributes", &empty, 2),
                    inputs: member("inputs", &inputs, size),
                    otel_dump: None,
                    wb_user_id: Some("u"),
                    wb_run_id: None,
                    wb_run_step: None,
                },
                end: LazyEnd {
                    ended_at: Micros(i as i64 + 5),
                    summary: member("summary", &empty, 2),
                    output: None,
                    exception: None,
                    wb_run_step_end: Some(3),
                },
            };
            assert!(in_place.push_lazy(&part).is_ok());
            as_parts.push(part.into_part().unwrap()).unwrap();
        }
        let (in_place, as_parts) = (in_place.finish(), as_parts.finish());
        assert_eq!(in_place.blobs.len(), 2);
        let blobs = |p: &Plan| p.blobs.iter().map(|b| b.digest.clone()).collect::<Vec<_>>();
        assert_eq!(blobs(&in_place), blobs(&as_parts));
        let records = |p: &Plan| {
            p.records.iter().map(|r| (r.partition, r.key.clone(), r.payload.clone())).collect()
        };
        let records: (Vec<_>, Vec<_>) = (records(&in_place), records(&as_parts));
        assert!(records.0.len() > 3, "cut by size: {} records", records.0.len());
        assert_eq!(records.0, records.1);
    }

    #[test]
    fn log_records_are_cut_by_size_and_a_trace_stays_together() {
        use heddle_proto::otlp::logs::convert;
        use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
        use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
        use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
        let records = (0..60u8)
            .map(|i| LogRecord {
                time_unix_nano: u64::from(i) + 1,
                trace_id: if i % 10 == 0 { Vec::new() } else { vec![i % 4 + 1; 16] },
                span_id: vec![i + 1; 8],
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("x".repeat(300))),
                }),
                ..Default::default()
            })
            .collect();
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs { log_records: records, ..Default::default() }],
                ..Default::default()
            }],
        };
        let logs = convert(&req, Some(&ProjectId::parse("e/p").unwrap()), None).unwrap().logs;
        let records = plan_logs(logs.clone(), 3, 2_000);
        assert!(records.len() > 3, "cut by size: {} records", records.len());
        let mut seen = Vec::new();
        for r in &records {
            assert!(r.payload.len() <= 2_000, "record of {} bytes", r.payload.len());
            for log in decode_record(&r.payload).unwrap().logs {
                let key = if log.trace_id.is_empty() { "e/p" } else { log.trace_id.as_str() };
                assert_eq!(partition_of(key, 3), r.partition as u32);
                seen.push(log);
            }
        }
        seen.sort_by_key(|l| l.seq);
        assert_eq!(seen, logs);
    }

    #[test]
    fn op_records_stand_alone_and_carry_every_op_once() {
        let names = (0..300)
            .map(|i| (ProjectId::parse(&format!("e/p{}", i % 3)).unwrap(), format!("span {i}")))
            .collect();
        let writes = placeholder_writes(&names, Some("u"));
        let records = plan_ops(writes.clone(), 4, 2_000);
        assert!(records.len() > 3, "cut by size: {} records", records.len());
        let mut ops = Vec::new();
        for r in &records {
            assert!(r.payload.len() <= 2_000, "record of {} bytes", r.payload.len());
            let decoded = decode_record(&r.payload).unwrap();
            assert!(decoded.parts.is_empty());
            // Each record holds its project's file, and only that project's ops.
            let project = decoded.ops.files[0].project.clone();
            assert_eq!(decoded.ops.files.len(), 1);
            assert!(decoded.ops.ops.iter().all(|o| o.project == project));
            assert_eq!(r.partition as u32, partition_of(project.as_str(), 4));
            ops.extend(decoded.ops.ops);
        }
        ops.sort_by(|a, b| (&a.project, &a.object_id).cmp(&(&b.project, &b.object_id)));
        let mut want = writes.ops;
        want.sort_by(|a, b| (&a.project, &a.object_id).cmp(&(&b.project, &b.object_id)));
        assert_eq!(ops, want);
        assert!(plan_ops(OpWrites::default(), 4, 2_000).is_empty());
    }
}
