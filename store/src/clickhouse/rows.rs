//! Rows as they travel to and from ClickHouse (RowBinary via the `clickhouse` crate), and the
//! write-side preparation of JSON members for the query language.

use clickhouse::Row;
use heddle_proto::calls::{Call, CallPart, derive_summary};
use heddle_proto::feedback::{NewFeedback, StoredFeedback};
use heddle_proto::time::Micros;
use heddle_proto::{ProjectId, ProtoError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// `kind` of a `call_parts` row (Enum8 in the schema).
pub const KIND_PART: i8 = 0;
pub const KIND_RENAME: i8 = 1;
pub const KIND_DELETE: i8 = 2;

/// One row of `call_parts`. Columns of a half the row does not carry keep their defaults.
#[derive(Debug, Default, Row, Serialize)]
pub struct PartRow {
    pub project_id: String,
    pub id: String,
    pub version: u64,
    pub kind: i8,
    pub has_start: u8,
    pub has_end: u8,
    pub trace_id: Option<String>,
    pub op_name: String,
    pub display_name: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_at: i64,
    pub attributes: String,
    pub attributes_q: String,
    pub inputs: String,
    pub inputs_q: String,
    pub input_refs: Vec<String>,
    pub otel_dump: Option<String>,
    pub wb_user_id: Option<String>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
    pub ended_at: i64,
    pub summary: String,
    pub summary_q: String,
    pub output: Option<String>,
    pub output_q: String,
    pub output_refs: Vec<String>,
    pub exception: Option<String>,
    pub wb_run_step_end: Option<i64>,
    pub deleted_at: i64,
}

impl PartRow {
    pub fn from_part(p: CallPart, version: u64) -> PartRow {
        let mut row = PartRow {
            project_id: p.project.as_str().to_owned(),
            id: p.id,
            version,
            kind: KIND_PART,
            trace_id: p.trace_id,
            ..PartRow::default()
        };
        if let Some(s) = p.start {
            let inputs = index_json(&s.inputs);
            row.has_start = 1;
            row.op_name = s.op_name;
            row.display_name = s.display_name.filter(|d| !d.is_empty());
            row.parent_id = s.parent_id;
            row.thread_id = s.thread_id;
            row.turn_id = s.turn_id;
            row.started_at = s.started_at.0;
            row.attributes_q = index_json(&s.attributes).q;
            row.attributes = s.attributes;
            row.inputs_q = inputs.q;
            row.input_refs = inputs.refs;
            row.inputs = s.inputs;
            row.otel_dump = s.otel_dump;
            row.wb_user_id = s.wb_user_id;
            row.wb_run_id = s.wb_run_id;
            row.wb_run_step = s.wb_run_step;
        }
        if let Some(e) = p.end {
            let output = e.output.as_deref().map(index_json).unwrap_or_default();
            row.has_end = 1;
            row.ended_at = e.ended_at.0;
            row.summary_q = index_json(&e.summary).q;
            row.summary = e.summary;
            row.output_q = output.q;
            row.output_refs = output.refs;
            row.output = e.output;
            row.exception = e.exception;
            row.wb_run_step_end = e.wb_run_step_end;
        }
        row
    }

    pub fn rename(project: &ProjectId, id: &str, name: &str, version: u64) -> PartRow {
        PartRow {
            project_id: project.as_str().to_owned(),
            id: id.to_owned(),
            version,
            kind: KIND_RENAME,
            display_name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            ..PartRow::default()
        }
    }

    pub fn delete(project: &ProjectId, id: String, at: Micros, version: u64) -> PartRow {
        PartRow {
            project_id: project.as_str().to_owned(),
            id,
            version,
            kind: KIND_DELETE,
            deleted_at: at.0,
            ..PartRow::default()
        }
    }
}

/// What the query language needs of a JSON member beyond its text.
#[derive(Debug, Default, PartialEq)]
pub struct Indexed {
    /// `''`, or the member with every number replaced by a JSON string of its exact text, when
    /// some number's text would not survive ClickHouse's JSON functions (`1.0` reads back as
    /// `1`, `1e-05` as `0.00001`, `10**20` not at all). The query language reads numbers as
    /// their JSON text (CONTRACT §2), and only a string keeps the text.
    pub q: String,
    /// Weave refs anywhere in the member (the `input_refs` / `output_refs` filters).
    pub refs: Vec<String>,
}

pub fn index_json(text: &str) -> Indexed {
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return Indexed::default();
    };
    let mut out = Indexed::default();
    let mut lossy = false;
    scan(&value, &mut lossy, &mut out.refs);
    if lossy {
        quote_numbers(&mut value);
        out.q = serde_json::to_string(&value).expect("JSON values always serialise");
    }
    out
}

/// An integer ClickHouse reads as Int64/UInt64 and writes back with the same text.
fn exact_in_clickhouse(n: &serde_json::Number) -> bool {
    let text = n.to_string();
    !text.contains(['.', 'e', 'E'])
        && text != "-0"
        && (text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok())
}

fn is_ref(s: &str) -> bool {
    s.starts_with("weave:///") || s.starts_with("weave-trace-internal:///")
}

fn scan(v: &Value, lossy: &mut bool, refs: &mut Vec<String>) {
    match v {
        Value::Number(n) => *lossy |= !exact_in_clickhouse(n),
        Value::String(s) if is_ref(s) && !refs.contains(s) => refs.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|x| scan(x, lossy, refs)),
        Value::Object(map) => map.values().for_each(|x| scan(x, lossy, refs)),
        _ => {}
    }
}

fn quote_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => *v = Value::String(n.to_string()),
        Value::Array(items) => items.iter_mut().for_each(quote_numbers),
        Value::Object(map) => map.values_mut().for_each(quote_numbers),
        _ => {}
    }
}

/// A call row as `sql::call_columns` selects it.
#[derive(Debug, Row, Deserialize)]
pub struct CallRow {
    pub id: String,
    pub project_id: String,
    pub op_name: String,
    pub display_name: Option<String>,
    pub trace_id: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_us: i64,
    pub ended_us: Option<i64>,
    pub attributes_out: Option<String>,
    pub inputs_out: Option<String>,
    pub output_out: Option<String>,
    pub exception: Option<String>,
    pub summary: String,
    pub otel_dump_out: Option<String>,
    pub wb_user_id: Option<String>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
    pub wb_run_step_end: Option<i64>,
}

fn raw(json: Option<String>) -> Result<Option<Box<RawValue>>, String> {
    json.map(|s| RawValue::from_string(s).map_err(|e| format!("stored JSON is invalid: {e}")))
        .transpose()
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("valid JSON")
}

impl CallRow {
    pub fn into_call(self) -> Result<Call, String> {
        let started_at = Micros(self.started_us);
        let ended_at = self.ended_us.map(Micros);
        let summary = derive_summary(
            Some(self.summary.as_str()).filter(|s| !s.is_empty()),
            self.display_name.as_deref(),
            &self.op_name,
            started_at,
            ended_at,
            self.exception.is_some(),
        );
        Ok(Call {
            id: self.id,
            project_id: ProjectId::parse(&self.project_id)
                .map_err(|e: ProtoError| e.to_string())?,
            op_name: self.op_name,
            display_name: self.display_name,
            trace_id: self.trace_id.unwrap_or_default(),
            parent_id: self.parent_id,
            thread_id: self.thread_id,
            turn_id: self.turn_id,
            started_at,
            ended_at,
            attributes: raw(self.attributes_out)?.unwrap_or_else(empty_object),
            inputs: raw(self.inputs_out)?.unwrap_or_else(empty_object),
            output: raw(self.output_out)?,
            exception: self.exception,
            summary,
            otel_dump: raw(self.otel_dump_out)?,
            wb_user_id: self.wb_user_id,
            wb_username: None,
            wb_run_id: self.wb_run_id,
            wb_run_step: self.wb_run_step,
            wb_run_step_end: self.wb_run_step_end,
            // Deleted calls are never returned.
            deleted_at: None,
            expire_at: None,
            storage_size_bytes: None,
            total_storage_size_bytes: None,
        })
    }
}

/// One row of `objects`.
#[derive(Debug, Row, Serialize)]
pub struct ObjectRow {
    pub project_id: String,
    pub object_id: String,
    pub digest: String,
    pub version_index: i64,
    pub kind: String,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
    pub val: String,
    pub created_at: i64,
    pub deleted_at: Option<i64>,
    pub wb_user_id: Option<String>,
    pub row_version: u64,
}

/// A version's metadata as `sql::select_object` and `sql::select_objects` select it.
#[derive(Debug, Row, Deserialize)]
pub struct ObjectMetaRow {
    pub object_id: String,
    pub digest: String,
    pub version_index: i64,
    pub is_latest: u8,
    pub kind: String,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
    pub created_us: i64,
    pub deleted_us: Option<i64>,
    pub wb_user_id: Option<String>,
    pub size_bytes: Option<i64>,
}

/// What `sql::live_object_versions` selects.
#[derive(Debug, Row, Deserialize)]
pub struct LiveVersionRow {
    pub digest: String,
    pub version_index: i64,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
}

/// What `sql::select_object_vals` selects.
#[derive(Debug, Row, Deserialize)]
pub struct ObjectValRow {
    pub object_id: String,
    pub digest: String,
    pub val_text: String,
}

/// What `sql::object_state` selects.
#[derive(Debug, Row, Deserialize)]
pub struct ObjectStateRow {
    pub versions: u64,
    pub max_index: i64,
    pub found: u8,
    /// (version_index, created_at µs, deleted, wb_user_id) of the digest's newest row.
    pub mine: (i64, i64, u8, Option<String>),
    /// Base class of the newest live version (meaningless when `live_versions` is 0).
    pub live_base: (Option<String>,),
    pub live_versions: u64,
}

/// A file row; `content` is empty unless the file predates chunking.
#[derive(Debug, Row, Serialize)]
pub struct FileRow {
    pub project_id: String,
    pub digest: String,
    pub size_bytes: u64,
    pub content: Blob,
    pub created_at: i64,
    pub n_chunks: u32,
}

/// What `sql::select_file` selects.
#[derive(Debug, Row, Deserialize)]
pub struct FileMetaRow {
    pub size_bytes: u64,
    pub n_chunks: u32,
    pub content: Blob,
}

/// What `sql::select_file_chunks` selects.
#[derive(Debug, Row, Deserialize)]
pub struct ChunkDataRow {
    pub data: Blob,
}

#[derive(Debug, Row, Serialize)]
pub struct FileChunkRow {
    pub project_id: String,
    pub digest: String,
    pub chunk_index: u32,
    pub data: Blob,
}

impl FileChunkRow {
    /// The chunk rows of `content` (files and blobs are stored alike).
    pub fn split(project: &str, digest: &str, content: &bytes::Bytes) -> Vec<FileChunkRow> {
        crate::files::chunks(content)
            .map(|(chunk_index, data)| FileChunkRow {
                project_id: project.to_owned(),
                digest: digest.to_owned(),
                chunk_index,
                data: Blob(data),
            })
            .collect()
    }
}

/// One row of `table_rows`.
#[derive(Debug, Row, Serialize)]
pub struct TableRowRow {
    pub project_id: String,
    pub digest: String,
    pub val: String,
    pub size_bytes: u64,
    pub created_at: i64,
}

/// One row of `tables`.
#[derive(Debug, Row, Serialize)]
pub struct TableListRow {
    pub project_id: String,
    pub digest: String,
    pub row_count: u64,
    pub row_digests: Vec<String>,
    pub created_at: i64,
}

/// What `sql::table_slice` selects.
#[derive(Debug, Row, Deserialize)]
pub struct TableSliceRow {
    pub row_count: u64,
    /// The requested slice of `row_digests`.
    pub page: Vec<String>,
}

/// What `sql::select_table_rows` selects.
#[derive(Debug, Row, Deserialize)]
pub struct StoredRowRow {
    pub digest: String,
    pub size_bytes: u64,
    pub val: String,
}

#[derive(Debug, Row, Serialize)]
pub struct KeyRow {
    pub key_hash: String,
    pub entity: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Row, Deserialize)]
pub struct KeyEntityRow {
    pub entity: Option<String>,
}

/// What `sql::key_infos` selects.
#[derive(Debug, Row, Deserialize)]
pub struct KeyInfoRow {
    pub key_hash: String,
    pub entity: Option<String>,
    pub created_us: i64,
    pub revoked_us: Option<i64>,
}

impl KeyInfoRow {
    pub fn into_info(self) -> crate::KeyInfo {
        crate::KeyInfo {
            id: crate::key_id(&self.key_hash).to_owned(),
            entity: self.entity,
            created_at: Micros(self.created_us),
            revoked_at: self.revoked_us.map(Micros),
        }
    }
}

#[derive(Debug, Row, Serialize)]
pub struct KeyRevocationRow {
    pub key_hash: String,
    pub revoked_at: i64,
}

/// Binary content of a `String` column (serde's bytes, not a sequence of numbers).
#[derive(Debug, Default)]
pub struct Blob(pub bytes::Bytes);

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Blob;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Blob, E> {
                Ok(Blob(bytes::Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(v.into()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Blob, E> {
                Ok(Blob(bytes::Bytes::copy_from_slice(v.as_bytes())))
            }
        }
        d.deserialize_byte_buf(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_clickhouse_would_rewrite_get_a_string_copy() {
        let plain = index_json(r#"{"n": 5, "m": -12, "u": 18446744073709551615, "s": "1.0"}"#);
        assert_eq!(plain.q, "", "integers survive ClickHouse's JSON functions");
        for (text, q) in [
            (r#"{"f": 1.0}"#, r#"{"f":"1.0"}"#),
            (r#"{"a": [1e-05, 2, true, null]}"#, r#"{"a":["1e-05","2",true,null]}"#),
            (r#"{"z": -0}"#, r#"{"z":"-0"}"#),
            (r#"{"big": 100000000000000000000}"#, r#"{"big":"100000000000000000000"}"#),
            ("2.5", r#""2.5""#),
        ] {
            assert_eq!(index_json(text).q, q, "{text}");
        }
    }

    #[test]
    fn refs_anywhere_in_the_member() {
        let i = index_json(
            r#"{"a": {"b": ["weave:///e/p/object/x:1", "weave:///e/p/object/x:1"]},
                "c": "weave:///e/p/op/f:2", "d": "not a ref", "e": "weave-trace-internal:///x"}"#,
        );
        assert_eq!(
            i.refs,
            ["weave:///e/p/object/x:1", "weave:///e/p/op/f:2", "weave-trace-internal:///x"]
        );
        assert_eq!(index_json("not json"), Indexed::default());
    }
}

/// A row of `feedback`, as inserted.
#[derive(Debug, Row, Serialize)]
pub struct FeedbackRow {
    pub project_id: String,
    pub id: String,
    pub weave_ref: String,
    pub feedback_type: String,
    pub creator: Option<String>,
    pub payload: String,
    pub payload_q: String,
    pub created_at: i64,
    pub wb_user_id: Option<String>,
    pub annotation_ref: Option<String>,
    pub runnable_ref: Option<String>,
    pub call_ref: Option<String>,
    pub trigger_ref: Option<String>,
    pub queue_id: Option<String>,
    pub extra: String,
}

impl FeedbackRow {
    pub fn from_new(f: NewFeedback) -> FeedbackRow {
        FeedbackRow {
            project_id: f.project.as_str().to_owned(),
            payload_q: index_json(&f.payload).q,
            id: f.id,
            weave_ref: f.weave_ref,
            feedback_type: f.feedback_type,
            creator: f.creator,
            payload: f.payload,
            created_at: f.created_at.0,
            wb_user_id: Some(f.wb_user_id),
            annotation_ref: f.annotation_ref,
            runnable_ref: f.runnable_ref,
            call_ref: f.call_ref,
            trigger_ref: f.trigger_ref,
            queue_id: f.queue_id,
            extra: f.extra,
        }
    }
}

/// A feedback row as `sql::FEEDBACK_COLUMNS` selects it.
#[derive(Debug, Row, Deserialize)]
pub struct FeedbackReadRow {
    pub project_id: String,
    pub id: String,
    pub weave_ref: String,
    pub feedback_type: String,
    pub creator: Option<String>,
    pub payload: String,
    pub created_us: i64,
    pub wb_user_id: Option<String>,
    pub annotation_ref: Option<String>,
    pub runnable_ref: Option<String>,
    pub call_ref: Option<String>,
    pub trigger_ref: Option<String>,
    pub queue_id: Option<String>,
    pub extra: String,
}

impl FeedbackReadRow {
    pub fn into_stored(self) -> Result<StoredFeedback, ProtoError> {
        Ok(StoredFeedback {
            project: ProjectId::parse(&self.project_id)?,
            id: self.id,
            weave_ref: self.weave_ref,
            feedback_type: self.feedback_type,
            creator: self.creator,
            payload: self.payload,
            created_at: Micros(self.created_us),
            wb_user_id: self.wb_user_id,
            annotation_ref: self.annotation_ref,
            runnable_ref: self.runnable_ref,
            call_ref: self.call_ref,
            trigger_ref: self.trigger_ref,
            queue_id: self.queue_id,
            extra: self.extra,
        })
    }
}

/// A row of `llm_token_prices` (see migrations/0006_costs.sql), written and read alike
/// (timestamps as microseconds: `sql::select_costs` converts them).
#[derive(Debug, Default, Row, Serialize, Deserialize)]
pub struct CostRow {
    pub project_id: String,
    pub id: String,
    pub row_version: u64,
    pub deleted: u8,
    pub llm_id: String,
    pub provider_id: String,
    pub prompt_token_cost: f64,
    pub completion_token_cost: f64,
    pub prompt_token_cost_unit: String,
    pub completion_token_cost_unit: String,
    pub cache_read_input_token_cost: f64,
    pub cache_creation_input_token_cost: f64,
    pub effective_date: i64,
    pub created_at: i64,
    pub created_by: Option<String>,
}

impl CostRow {
    pub fn from_record(c: heddle_proto::costs::CostRecord, row_version: u64) -> CostRow {
        CostRow {
            project_id: c.project.as_str().to_owned(),
            id: c.id,
            row_version,
            deleted: 0,
            llm_id: c.llm_id,
            provider_id: c.provider_id,
            prompt_token_cost: c.prompt_token_cost,
            completion_token_cost: c.completion_token_cost,
            prompt_token_cost_unit: c.prompt_token_cost_unit,
            completion_token_cost_unit: c.completion_token_cost_unit,
            cache_read_input_token_cost: c.cache_read_input_token_cost,
            cache_creation_input_token_cost: c.cache_creation_input_token_cost,
            effective_date: c.effective_date.0,
            created_at: c.created_at.0,
            created_by: c.created_by,
        }
    }

    pub fn into_record(self, project: &ProjectId) -> heddle_proto::costs::CostRecord {
        heddle_proto::costs::CostRecord {
            id: self.id,
            project: project.clone(),
            llm_id: self.llm_id,
            provider_id: self.provider_id,
            prompt_token_cost: self.prompt_token_cost,
            completion_token_cost: self.completion_token_cost,
            prompt_token_cost_unit: self.prompt_token_cost_unit,
            completion_token_cost_unit: self.completion_token_cost_unit,
            cache_read_input_token_cost: self.cache_read_input_token_cost,
            cache_creation_input_token_cost: self.cache_creation_input_token_cost,
            effective_date: Micros(self.effective_date),
            created_at: Micros(self.created_at),
            created_by: self.created_by,
        }
    }
}

/// What `sql::select_threads` selects.
#[derive(Debug, Row, Deserialize)]
pub struct ThreadRow {
    pub thread_id: String,
    pub turn_count: u64,
    pub start_time_us: i64,
    pub last_updated_us: i64,
    pub first_turn_id: String,
    pub last_turn_id: String,
    pub p50_turn_duration_ms: Option<f64>,
    pub p99_turn_duration_ms: Option<f64>,
}
