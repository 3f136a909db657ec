//! Calls: request bodies as the SDK sends them (docs/api/calls.md,
//! docs/api/calls.md#complete-calls-v2, docs/api/calls.md#start-and-end-v2), the normalised
//! [`CallPart`] every write path produces, the [`Call`] row every read path returns, and the field
//! catalog of the query language.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::ProtoError;
use crate::ids::{ProjectId, new_call_id};
use crate::limits;
use crate::member;
use crate::time::Micros;
use heddle_ql::{Catalog, SortBy, ValueType, split_path};

// ---------------------------------------------------------------------------------------------
// Requests

#[derive(Debug, Clone, Deserialize)]
pub struct StartedCall {
    pub project_id: ProjectId,
    pub id: Option<String>,
    pub trace_id: Option<String>,
    pub op_name: String,
    pub display_name: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_at: Micros,
    pub attributes: Option<Box<RawValue>>,
    pub inputs: Option<Box<RawValue>>,
    pub otel_dump: Option<Box<RawValue>>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EndedCall {
    pub project_id: ProjectId,
    pub id: String,
    pub ended_at: Micros,
    pub summary: Option<Box<RawValue>>,
    pub output: Option<Box<RawValue>>,
    pub exception: Option<String>,
    pub trace_id: Option<String>,
    pub wb_run_step_end: Option<i64>,
    /// The TypeScript SDK may name the call when it ends (docs/api/calls.md#end-a-call).
    pub display_name: Option<String>,
}

/// One item of `/v2/{entity}/{project}/calls/complete`: the fields of [`StartedCall`] and the
/// end's, side by side. They are spelled out rather than `#[serde(flatten)]`ed: flattening
/// buffers every value of the item into an intermediate tree and reads it a second time, which
/// was a third of parsing a batch.
#[derive(Debug, Clone, Deserialize)]
pub struct CompleteCall {
    pub project_id: ProjectId,
    pub id: Option<String>,
    pub trace_id: Option<String>,
    pub op_name: String,
    pub display_name: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_at: Micros,
    pub attributes: Option<Box<RawValue>>,
    pub inputs: Option<Box<RawValue>>,
    pub otel_dump: Option<Box<RawValue>>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
    pub ended_at: Micros,
    pub summary: Option<Box<RawValue>>,
    pub output: Option<Box<RawValue>>,
    pub exception: Option<String>,
    pub wb_run_step_end: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct CallStartReq {
    pub start: StartedCall,
}

#[derive(Debug, Deserialize)]
pub struct CallEndReq {
    pub end: EndedCall,
}

#[derive(Debug, Deserialize)]
pub struct CallsCompleteReq {
    pub batch: Vec<CompleteCall>,
}

/// An `/call/upsert_batch` item; `mode` may be omitted, then the key present decides.
#[derive(Debug, Deserialize)]
pub struct UpsertItem {
    pub mode: Option<String>,
    pub req: UpsertReq,
}

#[derive(Debug, Deserialize)]
pub struct UpsertReq {
    pub start: Option<StartedCall>,
    pub end: Option<EndedCall>,
}

#[derive(Debug, Deserialize)]
pub struct UpsertBatchReq {
    pub batch: Vec<UpsertItem>,
}

#[derive(Debug, Serialize)]
pub struct CallStartRes {
    pub id: String,
    pub trace_id: String,
}

#[derive(Debug, Deserialize)]
pub struct CallsDeleteReq {
    pub project_id: ProjectId,
    pub call_ids: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct CallUpdateReq {
    pub project_id: ProjectId,
    pub call_id: String,
    pub display_name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct CallReadReq {
    pub project_id: ProjectId,
    pub id: String,
}

/// The calls filter (docs/api/calls.md#calls-filter). Lists are OR, fields are AND; `None` means no
/// constraint.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CallsFilter {
    pub op_names: Option<Vec<String>>,
    pub input_refs: Option<Vec<String>>,
    pub output_refs: Option<Vec<String>>,
    pub parent_ids: Option<Vec<String>>,
    pub trace_ids: Option<Vec<String>>,
    pub call_ids: Option<Vec<String>>,
    pub thread_ids: Option<Vec<String>>,
    pub turn_ids: Option<Vec<String>>,
    pub wb_user_ids: Option<Vec<String>>,
    pub wb_run_ids: Option<Vec<String>>,
    pub trace_roots_only: Option<bool>,
}

impl CallsFilter {
    /// The column memberships the filter asks for, as `(column, values)`. An empty list means
    /// no constraint, except for thread and turn ids, where the reference server matches
    /// nothing.
    pub fn memberships(&self) -> impl Iterator<Item = (&'static str, &[String])> {
        [
            ("parent_id", &self.parent_ids, false),
            ("trace_id", &self.trace_ids, false),
            ("id", &self.call_ids, false),
            ("wb_user_id", &self.wb_user_ids, false),
            ("wb_run_id", &self.wb_run_ids, false),
            ("thread_id", &self.thread_ids, true),
            ("turn_id", &self.turn_ids, true),
        ]
        .into_iter()
        .filter_map(|(col, list, empty_matches_nothing)| match list {
            Some(l) if !l.is_empty() || empty_matches_nothing => Some((col, l.as_slice())),
            _ => None,
        })
    }

    /// `op_names` as exact names and the prefixes of `:*` wildcards (up to the `:`), or `None`
    /// when it is absent or empty (no constraint).
    pub fn op_name_patterns(&self) -> Option<(Vec<String>, Vec<&str>)> {
        let ops = self.op_names.as_ref().filter(|o| !o.is_empty())?;
        let (wild, exact): (Vec<&String>, Vec<&String>) =
            ops.iter().partition(|o| o.ends_with(":*"));
        let prefixes = wild.into_iter().map(|w| &w[..w.len() - 1]).collect();
        Some((exact.into_iter().cloned().collect(), prefixes))
    }

    /// At most [`limits::MAX_FILTER_IDS`] values in all lists together: each is a bound
    /// parameter of the query.
    pub fn check(&self) -> Result<(), ProtoError> {
        let lists = [
            &self.op_names,
            &self.input_refs,
            &self.output_refs,
            &self.parent_ids,
            &self.trace_ids,
            &self.call_ids,
            &self.thread_ids,
            &self.turn_ids,
            &self.wb_user_ids,
            &self.wb_run_ids,
        ];
        let n: usize = lists.iter().map(|l| l.as_ref().map_or(0, Vec::len)).sum();
        if n > limits::MAX_FILTER_IDS {
            return Err(ProtoError::invalid(format!(
                "the filter lists {n} values: at most {} are accepted",
                limits::MAX_FILTER_IDS
            )));
        }
        Ok(())
    }
}

/// The body of `/calls/stream_query` and `/calls/query_stats` (the latter ignores sorting,
/// paging and projection).
#[derive(Debug, Clone, Deserialize)]
pub struct CallsQueryReq {
    pub project_id: ProjectId,
    pub filter: Option<CallsFilter>,
    pub query: Option<heddle_ql::Query>,
    #[serde(default, deserialize_with = "heddle_ql::sort_list")]
    pub sort_by: Option<Vec<SortBy>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub columns: Option<Vec<String>>,
    /// Dot paths whose ref values are resolved ([`crate::expand`]); only
    /// [`CallsQueryReq::plan`] looks at them.
    pub expand_columns: Option<Vec<String>>,
    /// `false`: use `expand_columns` for filtering and sorting only, return refs unexpanded.
    pub return_expanded_column_values: Option<bool>,
    /// Add `summary.weave.feedback` to each row (handled by the query layer, not the store).
    pub include_feedback: Option<bool>,
    /// Adds `summary.weave.costs` (computed after the rows are read: `crate::costs`).
    pub include_costs: Option<bool>,
}

// ---------------------------------------------------------------------------------------------
// The normalised write record

/// The start half of a call, validated, with JSON members already serialised.
#[derive(Debug, Clone, PartialEq)]
pub struct StartPart {
    pub op_name: String,
    pub display_name: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_at: Micros,
    pub attributes: String,
    pub inputs: String,
    pub otel_dump: Option<OtelDump>,
    pub wb_user_id: Option<String>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
}

/// A call's `otel_dump` text, and where the value of its top-level `resource` member lies in
/// it when the converter that wrote it kept the place. The SQLite store keeps each project's
/// resources once (docs/storage.md#otlp-resources); without the place it parses the whole dump
/// to find the member, which was an eighth of the embedded OTLP path's request threads. Any
/// change to the text goes through [`OtelDump::edit`], which forgets the place, so a place is
/// never stale. Two dumps are equal when their texts are.
#[derive(Debug, Clone)]
pub struct OtelDump {
    text: String,
    resource: Option<Range<usize>>,
}

impl OtelDump {
    /// `text` with `resource` as the place of its top-level `resource` member's value; the
    /// caller wrote both.
    pub(crate) fn with_resource(text: String, resource: Option<Range<usize>>) -> OtelDump {
        debug_assert!(resource.as_ref().is_none_or(|r| text.get(r.clone()).is_some()));
        OtelDump { text, resource }
    }

    pub fn into_string(self) -> String {
        self.text
    }

    /// Where the value of the top-level `resource` member lies, when that is known without
    /// reading the text.
    pub fn resource(&self) -> Option<Range<usize>> {
        self.resource.clone()
    }

    /// The text, to change: the resource's place is forgotten.
    pub fn edit(&mut self) -> &mut String {
        self.resource = None;
        &mut self.text
    }
}

impl std::ops::Deref for OtelDump {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl From<String> for OtelDump {
    fn from(text: String) -> OtelDump {
        OtelDump { text, resource: None }
    }
}

impl PartialEq for OtelDump {
    fn eq(&self, other: &OtelDump) -> bool {
        self.text == other.text
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EndPart {
    pub ended_at: Micros,
    pub summary: String,
    pub output: Option<String>,
    pub exception: Option<String>,
    pub wb_run_step_end: Option<i64>,
    /// A display name given at the end: it outranks the start's, a `/call/update` rename
    /// outranks it (docs/api/calls.md#end-a-call). Never empty (an empty name is no name).
    pub display_name: Option<String>,
}

/// What every write path (HTTP call endpoints, OTLP, Kafka) hands to storage: one call's
/// start, end, or both. Applying parts is an upsert by `(project, id)`, commutative across
/// halves and idempotent within one, which is what makes any arrival order and any number of
/// retries converge to the same call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPart {
    pub project: ProjectId,
    pub id: String,
    pub trace_id: Option<String>,
    pub start: Option<StartPart>,
    pub end: Option<EndPart>,
}

impl CallPart {
    /// Checks what a part built outside the HTTP parser (OTLP conversion, a Kafka record) could
    /// get wrong: ids, and JSON members that must read back (well formed, at most
    /// [`limits::MAX_MEMBER_DEPTH`] deep).
    pub fn check(&self) -> Result<(), ProtoError> {
        check_id("call id", &self.id)?;
        check_opt_id("trace id", &self.trace_id)?;
        if let Some(s) = &self.start {
            check_opt_id("parent id", &s.parent_id)?;
            limits::check_json_text("attributes", &s.attributes)?;
            limits::check_json_text("inputs", &s.inputs)?;
            if let Some(dump) = &s.otel_dump {
                limits::check_json_text("otel_dump", dump)?;
            }
        }
        if let Some(e) = &self.end {
            limits::check_json_text("summary", &e.summary)?;
            if let Some(output) = &e.output {
                limits::check_json_text("output", output)?;
            }
        }
        Ok(())
    }
}

/// Call ids are opaque strings, but bounded and printable.
fn check_id(what: &str, id: &str) -> Result<(), ProtoError> {
    if id.is_empty() || id.len() > 256 || has_control(id) {
        return Err(ProtoError::invalid(format!("invalid {what} {id:?}")));
    }
    Ok(())
}

/// Whether `s` holds a control character (`char::is_control`). Ids are nearly always printable
/// ASCII, which is told without decoding characters one by one: that was 2.6% of reading a
/// calls batch (`calls_parse`).
fn has_control(s: &str) -> bool {
    // Sixteen bytes at a time, each a test without a branch: printable ASCII is 0x20..=0x7e.
    let printable =
        |chunk: &[u8]| chunk.iter().fold(true, |ok, b| ok & (b.wrapping_sub(0x20) < 0x5f));
    if s.as_bytes().chunks(16).all(printable) {
        return false;
    }
    s.chars().any(char::is_control)
}

fn check_opt_id(what: &str, id: &Option<String>) -> Result<(), ProtoError> {
    id.as_deref().map_or(Ok(()), |id| check_id(what, id))
}

impl StartedCall {
    /// Validates and normalises; generates the id and trace id when absent
    /// (docs/api/calls.md#start-a-call).
    pub fn into_part(self, wb_user_id: Option<&str>) -> Result<CallPart, ProtoError> {
        let id = self.id.filter(|s| !s.is_empty()).unwrap_or_else(new_call_id);
        let trace_id = self.trace_id.filter(|s| !s.is_empty()).unwrap_or_else(new_call_id);
        check_id("call id", &id)?;
        check_id("trace id", &trace_id)?;
        check_opt_id("parent id", &self.parent_id)?;
        if self.op_name.is_empty() {
            return Err(ProtoError::invalid("op_name must not be empty"));
        }
        Ok(CallPart {
            project: self.project_id,
            id,
            trace_id: Some(trace_id),
            start: Some(StartPart {
                op_name: self.op_name,
                display_name: self.display_name,
                parent_id: self.parent_id.filter(|p| !p.is_empty()),
                thread_id: self.thread_id,
                turn_id: self.turn_id,
                started_at: self.started_at,
                attributes: member::object_text("attributes", self.attributes)?,
                inputs: member::object_text("inputs", self.inputs)?,
                otel_dump: member::value_text("otel_dump", self.otel_dump)?.map(OtelDump::from),
                wb_user_id: wb_user_id.map(str::to_owned),
                wb_run_id: self.wb_run_id,
                wb_run_step: self.wb_run_step,
            }),
            end: None,
        })
    }
}

fn end_part(
    ended_at: Micros,
    summary: Option<Box<RawValue>>,
    output: Option<Box<RawValue>>,
    exception: Option<String>,
    wb_run_step_end: Option<i64>,
    display_name: Option<String>,
) -> Result<EndPart, ProtoError> {
    Ok(EndPart {
        ended_at,
        summary: member::object_text("summary", summary)?,
        output: member::value_text("output", output)?,
        exception,
        wb_run_step_end,
        display_name: display_name.filter(|d| !d.is_empty()),
    })
}

impl EndedCall {
    pub fn into_part(self) -> Result<CallPart, ProtoError> {
        check_id("call id", &self.id)?;
        check_opt_id("trace id", &self.trace_id)?;
        Ok(CallPart {
            project: self.project_id,
            id: self.id,
            trace_id: self.trace_id.filter(|s| !s.is_empty()),
            start: None,
            end: Some(end_part(
                self.ended_at,
                self.summary,
                self.output,
                self.exception,
                self.wb_run_step_end,
                self.display_name,
            )?),
        })
    }
}

impl CompleteCall {
    pub fn into_part(self, wb_user_id: Option<&str>) -> Result<CallPart, ProtoError> {
        let start = StartedCall {
            project_id: self.project_id,
            id: self.id,
            trace_id: self.trace_id,
            op_name: self.op_name,
            display_name: self.display_name,
            parent_id: self.parent_id,
            thread_id: self.thread_id,
            turn_id: self.turn_id,
            started_at: self.started_at,
            attributes: self.attributes,
            inputs: self.inputs,
            otel_dump: self.otel_dump,
            wb_run_id: self.wb_run_id,
            wb_run_step: self.wb_run_step,
        };
        // One item carries one display name, the start's: it is stored as the start's.
        let mut part = start.into_part(wb_user_id)?;
        part.end = Some(end_part(
            self.ended_at,
            self.summary,
            self.output,
            self.exception,
            self.wb_run_step_end,
            None,
        )?);
        Ok(part)
    }
}

impl UpsertItem {
    pub fn into_part(self, wb_user_id: Option<&str>) -> Result<CallPart, ProtoError> {
        match (self.mode.as_deref(), self.req.start, self.req.end) {
            (Some("start") | None, Some(start), None) => start.into_part(wb_user_id),
            (Some("end") | None, None, Some(end)) => end.into_part(),
            (mode, _, _) => Err(ProtoError::invalid(format!(
                "upsert_batch item must carry exactly one of req.start / req.end matching mode \
                 (mode {mode:?})"
            ))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The read record

/// A call row as returned by `/call/read` and `/calls/stream_query`
/// (docs/api/calls.md#call-object). Stored JSON members pass through as raw text; only `summary` is
/// rebuilt (derived `weave` block).
#[derive(Debug, Serialize)]
pub struct Call {
    pub id: String,
    pub project_id: ProjectId,
    pub op_name: String,
    pub display_name: Option<String>,
    pub trace_id: String,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub started_at: Micros,
    pub ended_at: Option<Micros>,
    pub attributes: Box<RawValue>,
    pub inputs: Box<RawValue>,
    pub output: Option<Box<RawValue>>,
    pub exception: Option<String>,
    pub summary: Value,
    pub otel_dump: Option<Box<RawValue>>,
    pub wb_user_id: Option<String>,
    pub wb_username: Option<String>,
    pub wb_run_id: Option<String>,
    pub wb_run_step: Option<i64>,
    pub wb_run_step_end: Option<i64>,
    pub deleted_at: Option<Micros>,
    pub expire_at: Option<Micros>,
    pub storage_size_bytes: Option<i64>,
    pub total_storage_size_bytes: Option<i64>,
}

/// `summary.weave.status` (docs/api/calls.md#call-object).
pub fn derive_status(exception: bool, ended: bool, summary: &Value) -> &'static str {
    // Two lookups, not `pointer`: it splits its path and unescapes each part on every call, and
    // every call read derives its status.
    let errors = summary.get("status_counts").and_then(|c| c.get("error")).and_then(Value::as_f64);
    status_of(exception, ended, errors)
}

/// The rule of `summary.weave.status`: `errors` is the summary's `status_counts.error` when it
/// is a number.
fn status_of(exception: bool, ended: bool, errors: Option<f64>) -> &'static str {
    if exception {
        "error"
    } else if !ended {
        "running"
    } else if errors.is_some_and(|e| e > 0.0) {
        "descendant_error"
    } else {
        "success"
    }
}

impl EndPart {
    /// `summary.weave.status` of the call once this end is applied: an end part carries
    /// everything the status depends on. The embedded store keeps it with the end
    /// (docs/storage.md#indexes). `None` when the summary repeats a key on the way to
    /// `status_counts.error`, which member texts never do (docs/storage.md#json-members): the
    /// store then computes the status from the stored text, as for rows stored before it.
    pub fn status(&self) -> Option<&'static str> {
        let errors = status_errors(&self.summary).ok()?;
        Some(status_of(self.exception.is_some(), true, errors))
    }
}

/// `status_counts.error` of a summary's text, when it is a number. Only the members on the way
/// to it are captured, borrowed from the text; every other member is skipped, not built, so a
/// large summary costs one pass over its bytes, whatever its shape.
fn status_errors(summary: &str) -> serde_json::Result<Option<f64>> {
    #[derive(Deserialize)]
    struct Summary<'a> {
        #[serde(borrow)]
        status_counts: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Counts<'a> {
        #[serde(borrow)]
        error: Option<&'a RawValue>,
    }
    let Some(counts) = serde_json::from_str::<Summary>(summary)?.status_counts else {
        return Ok(None);
    };
    if !counts.get().starts_with('{') {
        return Ok(None);
    }
    let Some(error) = serde_json::from_str::<Counts>(counts.get())?.error else {
        return Ok(None);
    };
    // As `Value::as_f64` reads a number; anything else is no count.
    Ok(serde_json::from_str::<serde_json::Number>(error.get()).ok().and_then(|n| n.as_f64()))
}

/// `summary.weave.trace_name`'s op part: the name between `/op/` and `:` of an op ref, or the
/// raw op name when it is not a ref.
pub fn op_display_name(op_name: &str) -> &str {
    if let Some(rest) = op_name.strip_prefix("weave:///")
        && let Some(idx) = rest.find("/op/")
    {
        let name = &rest[idx + 4..];
        return name.split(':').next().unwrap_or(name);
    }
    op_name
}

/// Recomputes the derived keys of `summary.weave`, keeping the user's other keys.
pub fn derive_summary(
    stored: Option<&str>,
    display_name: Option<&str>,
    op_name: &str,
    started_at: Micros,
    ended_at: Option<Micros>,
    exception: bool,
) -> Value {
    let mut summary = stored
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    let status = derive_status(exception, ended_at.is_some(), &summary);
    let obj = summary.as_object_mut().expect("checked is_object");
    let weave = obj.entry("weave").or_insert_with(|| Value::Object(Map::new()));
    if !weave.is_object() {
        *weave = Value::Object(Map::new());
    }
    let weave = weave.as_object_mut().expect("just made an object");
    weave.insert("status".into(), status.into());
    match ended_at {
        Some(end) => weave.insert("latency_ms".into(), ((end.0 - started_at.0) / 1000).into()),
        None => weave.remove("latency_ms"),
    };
    let trace_name = match display_name {
        Some(d) if !d.is_empty() => d,
        _ => op_display_name(op_name),
    };
    weave.insert("trace_name".into(), trace_name.into());
    match display_name {
        Some(d) if !d.is_empty() => weave.insert("display_name".into(), d.into()),
        _ => weave.remove("display_name"),
    };
    summary
}

// ---------------------------------------------------------------------------------------------
// Field catalog

/// Plain columns of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallColumn {
    Id,
    ProjectId,
    OpName,
    DisplayName,
    TraceId,
    ParentId,
    ThreadId,
    TurnId,
    Exception,
    WbUserId,
    WbRunId,
    WbRunStep,
    WbRunStepEnd,
    StartedAt,
    EndedAt,
    DeletedAt,
}

impl CallColumn {
    /// The column's name in both backends' call tables.
    pub fn name(self) -> &'static str {
        use CallColumn::*;
        match self {
            Id => "id",
            ProjectId => "project_id",
            OpName => "op_name",
            DisplayName => "display_name",
            TraceId => "trace_id",
            ParentId => "parent_id",
            ThreadId => "thread_id",
            TurnId => "turn_id",
            Exception => "exception",
            WbUserId => "wb_user_id",
            WbRunId => "wb_run_id",
            WbRunStep => "wb_run_step",
            WbRunStepEnd => "wb_run_step_end",
            StartedAt => "started_at",
            EndedAt => "ended_at",
            DeletedAt => "deleted_at",
        }
    }

    fn parse(name: &str) -> Option<CallColumn> {
        use CallColumn::*;
        Some(match name {
            "id" => Id,
            "project_id" => ProjectId,
            "op_name" => OpName,
            "display_name" => DisplayName,
            "trace_id" => TraceId,
            "parent_id" => ParentId,
            "thread_id" => ThreadId,
            "turn_id" => TurnId,
            "exception" => Exception,
            "wb_user_id" => WbUserId,
            "wb_run_id" => WbRunId,
            "wb_run_step" => WbRunStep,
            "wb_run_step_end" => WbRunStepEnd,
            "started_at" => StartedAt,
            "ended_at" => EndedAt,
            "deleted_at" => DeletedAt,
            _ => return None,
        })
    }

    pub fn value_type(self) -> ValueType {
        use CallColumn::*;
        match self {
            WbRunStep | WbRunStepEnd => ValueType::Int,
            StartedAt | EndedAt | DeletedAt => ValueType::Timestamp,
            _ => ValueType::String,
        }
    }
}

/// The JSON members of a call that paths can reach into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonRoot {
    Inputs,
    Output,
    Attributes,
    Summary,
}

/// A `$getField` / `sort_by.field` name of the calls catalog, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallField {
    Column(CallColumn),
    /// A path into a JSON member; string semantics (docs/api/query.md#typing). Empty path = the
    /// member.
    Json(JsonRoot, Vec<String>),
    Status,
    LatencyMs,
    TraceName,
    /// `feedback.[<type>].…`: the call's feedback (docs/api/query.md#calls-fields).
    Feedback(FeedbackSel),
}

impl heddle_ql::sql::FieldKind for CallField {
    fn is_json(&self) -> bool {
        matches!(self, CallField::Json(..) | CallField::Feedback(_))
    }
    fn is_json_path(&self) -> bool {
        matches!(self, CallField::Json(..))
    }
}

/// A value from the feedback on a call (rows whose `weave_ref` is the call's ref): of the rows
/// of `feedback_type` (`None` = `*`, any type), the newest one where the value is non-empty;
/// `''` when there is none, like a missing JSON path. Unlike other JSON paths, a payload path
/// holding an object or array reads as its JSON text (the SDK's `scored_by` tests a scorer's
/// `payload.output`, usually a dict, for non-emptiness).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackSel {
    pub feedback_type: Option<String>,
    pub target: FeedbackTarget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedbackTarget {
    /// A path into the payload (string semantics).
    Payload(Vec<String>),
    RunnableRef,
    TriggerRef,
}

/// `feedback.[<type>].payload.<path>`, `feedback.[<type>].runnable_ref`,
/// `feedback.[<type>].trigger_ref`; the type may contain dots, and is `*` for any type.
fn parse_feedback_field(name: &str) -> Result<FeedbackSel, ProtoError> {
    let bad = || {
        ProtoError::invalid(format!(
            "invalid feedback field {name:?}: expected feedback.[<type>].payload.<path>, .runnable_ref or .trigger_ref"
        ))
    };
    let rest = name.strip_prefix("feedback.[").ok_or_else(bad)?;
    let (ty, path) = rest.split_once("].").ok_or_else(bad)?;
    if ty.is_empty() {
        return Err(bad());
    }
    let target = match path {
        "runnable_ref" => FeedbackTarget::RunnableRef,
        "trigger_ref" => FeedbackTarget::TriggerRef,
        p => {
            let p = p.strip_prefix("payload.").ok_or_else(bad)?;
            let segs = split_path(p);
            crate::feedback::check_segments(name, &segs)?;
            FeedbackTarget::Payload(segs)
        }
    };
    Ok(FeedbackSel { feedback_type: (ty != "*").then(|| ty.to_owned()), target })
}

pub struct CallCatalog;

impl Catalog for CallCatalog {
    type Field = CallField;
    type Error = ProtoError;

    fn resolve(&self, name: &str) -> Result<(CallField, ValueType), ProtoError> {
        if let Some(col) = CallColumn::parse(name) {
            return Ok((CallField::Column(col), col.value_type()));
        }
        let field = match name {
            "summary.weave.status" => return Ok((CallField::Status, ValueType::String)),
            "summary.weave.latency_ms" => return Ok((CallField::LatencyMs, ValueType::Int)),
            "summary.weave.trace_name" => return Ok((CallField::TraceName, ValueType::String)),
            "storage_size_bytes" | "total_storage_size_bytes" => {
                return Err(ProtoError::Forbidden(format!("field {name:?} is not filterable")));
            }
            _ => {
                let mut segs = split_path(name);
                let root = match segs[0].as_str() {
                    "inputs" if segs.len() > 1 => JsonRoot::Inputs,
                    "output" => JsonRoot::Output,
                    "attributes" if segs.len() > 1 => JsonRoot::Attributes,
                    "summary" if segs.len() > 1 => JsonRoot::Summary,
                    "feedback" => {
                        return Ok((
                            CallField::Feedback(parse_feedback_field(name)?),
                            ValueType::String,
                        ));
                    }
                    _ => return Err(ProtoError::invalid(format!("unknown call field {name:?}"))),
                };
                if segs.iter().skip(1).any(|s| s.is_empty() || s.contains(['"', '\\'])) {
                    return Err(ProtoError::invalid(format!(
                        "invalid path {name:?}: segments must be non-empty, without '\"' or '\\'"
                    )));
                }
                segs.remove(0);
                CallField::Json(root, segs)
            }
        };
        Ok((field, ValueType::String))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn control_characters_are_found_in_ascii_and_beyond() {
        for c in (0..0x250u32).filter_map(char::from_u32) {
            for s in [c.to_string(), format!("id-{c}"), format!("{c}é"), format!("é{c}-x")] {
                assert_eq!(has_control(&s), s.chars().any(char::is_control), "{s:?}");
            }
        }
    }

    /// Whatever changes a dump's text (redaction) forgets its resource's place.
    #[test]
    fn an_edited_dump_forgets_its_resource() {
        let text = r#"{"name":"x","resource":{"a":1}}"#;
        let mut dump = OtelDump::with_resource(text.to_owned(), Some(23..30));
        assert_eq!(&dump[dump.resource().unwrap()], r#"{"a":1}"#);
        dump.edit().insert(1, ' ');
        assert_eq!(dump.resource(), None);
        assert_eq!(dump, OtelDump::from(format!(" {text}").replacen(" {", "{ ", 1)));
    }

    #[test]
    fn trace_name_from_op_refs() {
        assert_eq!(op_display_name("weave:///e/p/op/my_op:abc"), "my_op");
        assert_eq!(op_display_name("weave:///e/p/op/my_op"), "my_op");
        assert_eq!(op_display_name("plain.name"), "plain.name");
    }

    #[test]
    fn derived_status_rules() {
        let s = json!({"status_counts": {"error": 1}});
        assert_eq!(derive_status(true, true, &s), "error");
        assert_eq!(derive_status(false, false, &s), "running");
        assert_eq!(derive_status(false, true, &s), "descendant_error");
        assert_eq!(derive_status(false, true, &json!({})), "success");
    }

    #[test]
    fn an_end_part_has_the_status_its_call_is_read_with() {
        let summaries = [
            r#"{}"#,
            r#"{"status_counts": {"error": 2, "success": 1}}"#,
            r#"{"status_counts": {"error": 0.5}}"#,
            r#"{"status_counts": {"error": 0}}"#,
            r#"{"status_counts": {"error": -1}}"#,
            r#"{"status_counts": {"error": "3"}}"#,
            r#"{"status_counts": {"error": true}}"#,
            r#"{"status_counts": {"error": null}}"#,
            r#"{"status_counts": 7}"#,
            r#"{"status_counts": [1, 2]}"#,
            r#"{"status_counts": {"error": [1]}}"#,
            r#"{"status_counts": null, "usage": {"m": {"requests": 1}}}"#,
            r#"{"weave": {"status": "error"}, "status_counts": {"error": 1e2}}"#,
        ];
        for summary in summaries {
            for exception in [None, Some("boom".to_owned())] {
                let end = EndPart {
                    ended_at: Micros(1),
                    summary: summary.to_owned(),
                    output: None,
                    exception: exception.clone(),
                    wb_run_step_end: None,
                    display_name: None,
                };
                let value: Value = serde_json::from_str(summary).unwrap();
                assert_eq!(
                    end.status(),
                    Some(derive_status(exception.is_some(), true, &value)),
                    "{summary}"
                );
            }
        }
    }

    #[test]
    fn an_end_part_whose_summary_repeats_a_key_leaves_the_status_to_the_store() {
        for summary in [
            r#"{"status_counts": {"error": 1}, "status_counts": {"error": 1}}"#,
            r#"{"status_counts": {"error": 1, "error": 1}}"#,
        ] {
            let end = EndPart {
                ended_at: Micros(1),
                summary: summary.to_owned(),
                output: None,
                exception: None,
                wb_run_step_end: None,
                display_name: None,
            };
            assert_eq!(end.status(), None, "{summary}");
        }
    }

    #[test]
    fn derived_summary_keeps_user_keys() {
        let s = derive_summary(
            Some(r#"{"weave": {"views": 1, "status": "bogus"}, "usage": {}}"#),
            None,
            "weave:///e/p/op/f:d",
            Micros(1_000_000),
            Some(Micros(1_250_000)),
            false,
        );
        assert_eq!(
            s,
            json!({"weave": {"views": 1, "status": "success", "latency_ms": 250, "trace_name": "f"},
                   "usage": {}})
        );
    }

    #[test]
    fn catalog_resolves_fields() {
        let c = CallCatalog;
        assert_eq!(c.resolve("started_at").unwrap().1, ValueType::Timestamp);
        assert_eq!(
            c.resolve("inputs.a.0").unwrap().0,
            CallField::Json(JsonRoot::Inputs, vec!["a".into(), "0".into()])
        );
        assert_eq!(c.resolve("output").unwrap().0, CallField::Json(JsonRoot::Output, vec![]));
        assert_eq!(c.resolve("summary.weave.status").unwrap().0, CallField::Status);
        assert!(matches!(c.resolve("storage_size_bytes"), Err(ProtoError::Forbidden(_))));
        assert_eq!(
            c.resolve("feedback.[wandb.runnable.s].payload.output.a").unwrap().0,
            CallField::Feedback(FeedbackSel {
                feedback_type: Some("wandb.runnable.s".into()),
                target: FeedbackTarget::Payload(vec!["output".into(), "a".into()]),
            })
        );
        assert_eq!(
            c.resolve("feedback.[*].runnable_ref").unwrap().0,
            CallField::Feedback(FeedbackSel {
                feedback_type: None,
                target: FeedbackTarget::RunnableRef
            })
        );
        for bad in [
            "inputs",
            "nope",
            "inputs..a",
            "feedback.[x].payload",
            "feedback.x",
            "feedback.[].runnable_ref",
            "feedback.[x].creator",
        ] {
            assert!(matches!(c.resolve(bad), Err(ProtoError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn parts_from_requests() {
        let start: StartedCall = serde_json::from_value(json!({
            "project_id": "e/p", "id": null, "op_name": "f", "started_at": "2026-01-01T00:00:00Z",
            "attributes": {}, "inputs": {"x": 1}, "unknown_key": 5, "parent_id": null
        }))
        .unwrap();
        let part = start.into_part(Some("u")).unwrap();
        assert_eq!(part.id.len(), 36);
        assert!(part.trace_id.is_some());
        assert_eq!(part.start.unwrap().inputs, r#"{"x":1}"#);

        let item: UpsertItem = serde_json::from_value(json!({
            "req": {"end": {"project_id": "e/p", "id": "c", "ended_at": "2026-01-01T00:00:00Z",
                            "summary": {}, "output": null}}
        }))
        .unwrap();
        let part = item.into_part(None).unwrap();
        assert_eq!(part.end.unwrap().output, None);

        let both: UpsertItem = serde_json::from_value(json!({"mode": "end", "req": {}})).unwrap();
        assert!(both.into_part(None).is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// Validated query

/// A calls query after validation: fields resolved, types checked, paging bounded. Storage
/// backends render this; they never see the raw request.
#[derive(Debug, Clone)]
pub struct CallsQuery {
    pub project: ProjectId,
    pub filter: CallsFilter,
    pub expr: Option<heddle_ql::TExpr<CallField>>,
    /// Always ends with `id` so paging is deterministic.
    pub sort: Vec<(CallField, heddle_ql::Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
    /// Which large JSON members to return; `None` = all.
    pub columns: Option<Columns>,
}

/// The large members a projection can leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    pub inputs: bool,
    pub output: bool,
    pub attributes: bool,
    pub otel_dump: bool,
}

impl CallsQueryReq {
    /// Every call of `project_id`: no filter, query, order, page or extra columns. A caller sets
    /// what it needs with `CallsQueryReq { .., ..CallsQueryReq::for_project(p) }`.
    pub fn for_project(project_id: ProjectId) -> CallsQueryReq {
        CallsQueryReq {
            project_id,
            filter: None,
            query: None,
            sort_by: None,
            limit: None,
            offset: None,
            columns: None,
            expand_columns: None,
            return_expanded_column_values: None,
            include_feedback: None,
            include_costs: None,
        }
    }

    /// The query as SQL sees it; `expand_columns` play no part (see [`CallsQueryReq::plan`]).
    pub fn validate(self) -> Result<CallsQuery, ProtoError> {
        use heddle_ql::Direction;
        let expr = self.query.as_ref().map(|q| q.typed(&CallCatalog)).transpose()?;
        if let Some(f) = &self.filter {
            f.check()?;
        }
        let mut sort = Vec::new();
        for s in self.sort_by.unwrap_or_default() {
            let (field, _) = CallCatalog.resolve(&s.field)?;
            sort.push((field, s.direction));
        }
        if sort.is_empty() {
            sort.push((CallField::Column(CallColumn::StartedAt), Direction::Asc));
        }
        if !sort.iter().any(|(f, _)| *f == CallField::Column(CallColumn::Id)) {
            sort.push((CallField::Column(CallColumn::Id), Direction::Asc));
        }
        let non_negative = |what: &str, v: Option<i64>| match v {
            Some(n) if n < 0 => Err(ProtoError::invalid(format!("{what} must be >= 0, got {n}"))),
            v => Ok(v.map(|n| n as u64)),
        };
        let columns = self.columns.map(|cols| {
            let has =
                |name: &str| cols.iter().any(|c| c == name || c.split('.').next() == Some(name));
            Columns {
                inputs: has("inputs"),
                output: has("output"),
                attributes: has("attributes"),
                otel_dump: has("otel_dump"),
            }
        });
        Ok(CallsQuery {
            project: self.project_id,
            filter: self.filter.unwrap_or_default(),
            expr,
            sort,
            limit: non_negative("limit", self.limit)?,
            offset: non_negative("offset", self.offset)?.unwrap_or(0),
            columns,
        })
    }
}
