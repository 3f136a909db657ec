//! Feedback (docs/api/feedback.md, docs/api/feedback.md#batch-create-feedback): request bodies, the
//! normalised [`NewFeedback`] every write path stores, the [`StoredFeedback`] row reads return, the
//! feedback field catalog of the query language, and the id-only query `/feedback/purge` accepts.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::time::Micros;
use heddle_ql::{
    Catalog, CmpOp, Direction, Expr, Operand, Query, SortBy, TExpr, ValueType, split_path,
};

/// Largest stored payload (JSON text), as the reference server caps it.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// Most feedback items one `/feedback/batch/create` may carry.
pub const MAX_BATCH: usize = 1000;

// ---------------------------------------------------------------------------------------------
// Requests

/// `FeedbackCreate` (docs/api/feedback.md). Unknown keys are ignored; `null` means absent.
#[derive(Debug, Clone, Deserialize)]
pub struct FeedbackCreateReq {
    pub project_id: ProjectId,
    pub weave_ref: String,
    pub feedback_type: String,
    pub payload: Map<String, Value>,
    pub id: Option<String>,
    pub creator: Option<String>,
    pub annotation_ref: Option<String>,
    pub runnable_ref: Option<String>,
    pub call_ref: Option<String>,
    pub trigger_ref: Option<String>,
    pub queue_id: Option<String>,
    pub scorer_tags: Option<Vec<String>>,
    pub scorer_tag_reasons: Option<BTreeMap<String, String>>,
    pub scorer_tag_confidences: Option<BTreeMap<String, f64>>,
    pub scorer_ratings: Option<BTreeMap<String, f64>>,
    pub scorer_rating_reasons: Option<BTreeMap<String, String>>,
    pub scorer_rating_confidences: Option<BTreeMap<String, f64>>,
    pub span_agent_name: Option<String>,
    pub span_agent_version: Option<String>,
    pub span_conversation_id: Option<String>,
    pub span_trace_id: Option<String>,
    pub scorer_trace_id: Option<String>,
    pub span_status_code: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct FeedbackBatchCreateReq {
    pub batch: Vec<FeedbackCreateReq>,
}

#[derive(Debug, Deserialize)]
pub struct FeedbackReplaceReq {
    #[serde(flatten)]
    pub create: FeedbackCreateReq,
    pub feedback_id: String,
}

#[derive(Debug, Deserialize)]
pub struct FeedbackQueryReq {
    pub project_id: ProjectId,
    pub fields: Option<Vec<String>>,
    pub query: Option<Query>,
    #[serde(default, deserialize_with = "heddle_ql::sort_list")]
    pub sort_by: Option<Vec<SortBy>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct FeedbackPurgeReq {
    pub project_id: ProjectId,
    pub query: Query,
}

/// Why a create is refused: the caller's fault either way, but an oversized payload is a 413.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateError {
    Invalid(ProtoError),
    TooLarge(String),
}

impl From<ProtoError> for CreateError {
    fn from(e: ProtoError) -> Self {
        CreateError::Invalid(e)
    }
}

// ---------------------------------------------------------------------------------------------
// Records

/// A feedback row to store, validated, with JSON members serialised.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFeedback {
    pub project: ProjectId,
    pub id: String,
    pub weave_ref: String,
    pub feedback_type: String,
    pub creator: Option<String>,
    /// JSON object text.
    pub payload: String,
    pub created_at: Micros,
    pub wb_user_id: String,
    pub annotation_ref: Option<String>,
    pub runnable_ref: Option<String>,
    pub call_ref: Option<String>,
    pub trigger_ref: Option<String>,
    pub queue_id: Option<String>,
    /// JSON object text of the `scorer_*` / `span_*` members, defaults filled in.
    pub extra: String,
}

/// A stored feedback row, as backends return it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFeedback {
    pub project: ProjectId,
    pub id: String,
    pub weave_ref: String,
    pub feedback_type: String,
    pub creator: Option<String>,
    pub payload: String,
    pub created_at: Micros,
    pub wb_user_id: Option<String>,
    pub annotation_ref: Option<String>,
    pub runnable_ref: Option<String>,
    pub call_ref: Option<String>,
    pub trigger_ref: Option<String>,
    pub queue_id: Option<String>,
    pub extra: String,
}

impl From<NewFeedback> for StoredFeedback {
    fn from(f: NewFeedback) -> Self {
        StoredFeedback {
            project: f.project,
            id: f.id,
            weave_ref: f.weave_ref,
            feedback_type: f.feedback_type,
            creator: f.creator,
            payload: f.payload,
            created_at: f.created_at,
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

fn parse_object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The keys of a full row other than the `extra` ones, in output order.
const COLUMN_KEYS: &[&str] = &[
    "id",
    "project_id",
    "weave_ref",
    "creator",
    "feedback_type",
    "payload",
    "annotation_ref",
    "runnable_ref",
    "call_ref",
    "trigger_ref",
    "queue_id",
    "wb_user_id",
    "created_at",
];

/// Defaults of the `extra` members (what the SDK's model defaults to).
fn extra_defaults() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("scorer_tags".into(), Value::Array(vec![]));
    for k in [
        "scorer_tag_reasons",
        "scorer_tag_confidences",
        "scorer_ratings",
        "scorer_rating_reasons",
        "scorer_rating_confidences",
    ] {
        m.insert(k.into(), Value::Object(Map::new()));
    }
    for k in [
        "span_agent_name",
        "span_agent_version",
        "span_conversation_id",
        "span_trace_id",
        "scorer_trace_id",
    ] {
        m.insert(k.into(), Value::String(String::new()));
    }
    m.insert("span_status_code".into(), Value::String("UNSET".into()));
    m
}

impl StoredFeedback {
    pub fn payload_value(&self) -> Value {
        Value::Object(parse_object(&self.payload))
    }

    /// The full row of `/feedback/query` (every FeedbackCreate field plus `id`, `created_at`,
    /// `wb_user_id`) and of `summary.weave.feedback`.
    pub fn to_json(&self) -> Map<String, Value> {
        let opt = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        let mut m = Map::new();
        m.insert("id".into(), self.id.clone().into());
        m.insert("project_id".into(), self.project.as_str().into());
        m.insert("weave_ref".into(), self.weave_ref.clone().into());
        m.insert("creator".into(), opt(&self.creator));
        m.insert("feedback_type".into(), self.feedback_type.clone().into());
        m.insert("payload".into(), self.payload_value());
        m.insert("annotation_ref".into(), opt(&self.annotation_ref));
        m.insert("runnable_ref".into(), opt(&self.runnable_ref));
        m.insert("call_ref".into(), opt(&self.call_ref));
        m.insert("trigger_ref".into(), opt(&self.trigger_ref));
        m.insert("queue_id".into(), opt(&self.queue_id));
        m.insert("wb_user_id".into(), opt(&self.wb_user_id));
        m.insert("created_at".into(), self.created_at.to_rfc3339().into());
        let mut extra = extra_defaults();
        for (k, v) in parse_object(&self.extra) {
            if extra.contains_key(&k) {
                extra.insert(k, v);
            }
        }
        m.extend(extra);
        m
    }

    /// `{id, created_at, wb_user_id, payload}` (FeedbackCreateResult).
    pub fn create_result(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "created_at": self.created_at,
            "wb_user_id": self.wb_user_id,
            "payload": self.payload_value(),
        })
    }
}

/// Checks a `fields` projection up front: full-row keys and `payload.<path>`.
pub fn check_projection(fields: &[String]) -> Result<(), ProtoError> {
    for f in fields {
        let known = COLUMN_KEYS.contains(&f.as_str())
            || extra_defaults().contains_key(f)
            || f.strip_prefix("payload.").is_some_and(|p| !p.is_empty());
        if !known {
            return Err(ProtoError::invalid(format!("unknown feedback field {f:?} in fields")));
        }
    }
    Ok(())
}

/// A row reduced to `fields`; `payload.<path>` keys hold the value at the path (null if none).
pub fn project_row(row: &Map<String, Value>, fields: &[String]) -> Map<String, Value> {
    let mut out = Map::new();
    for f in fields {
        let v = match f.strip_prefix("payload.") {
            Some(path) => {
                let mut cur = row.get("payload");
                for seg in split_path(path) {
                    cur = match cur {
                        Some(Value::Object(m)) => m.get(&seg),
                        Some(Value::Array(a)) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
                        _ => None,
                    };
                }
                cur.cloned().unwrap_or(Value::Null)
            }
            None => row.get(f).cloned().unwrap_or(Value::Null),
        };
        out.insert(f.clone(), v);
    }
    out
}

/// Feedback ids are opaque strings, but bounded and printable.
fn check_id(what: &str, id: &str) -> Result<(), ProtoError> {
    if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(ProtoError::invalid(format!("invalid {what} {id:?}")));
    }
    Ok(())
}

/// The project a weave ref points into: `weave:///<entity>/<project>/<kind>/...`. Feedback
/// targets include kinds `/refs/read_batch` cannot parse (agent refs), so only the prefix counts.
fn ref_project(uri: &str) -> Result<ProjectId, ProtoError> {
    let bad = || ProtoError::invalid(format!("invalid weave_ref {uri:?}"));
    let rest = uri.strip_prefix(crate::refs::SCHEME).ok_or_else(bad)?;
    let mut parts = rest.splitn(4, '/');
    let (entity, project, kind, tail) =
        (parts.next(), parts.next(), parts.next(), parts.next().unwrap_or(""));
    match (entity, project, kind) {
        (Some(e), Some(p), Some(k)) if !k.is_empty() && !tail.is_empty() => {
            ProjectId::from_parts(e, p).map_err(|_| bad())
        }
        _ => Err(bad()),
    }
}

impl FeedbackCreateReq {
    /// Validates and normalises (docs/api/feedback.md): the target ref must be in the request's
    /// project, the payload at most [`MAX_PAYLOAD_BYTES`]; the client id is kept, else a new one is
    /// made.
    pub fn into_new(self, wb_user_id: &str, now: Micros) -> Result<NewFeedback, CreateError> {
        let target = ref_project(&self.weave_ref)?;
        if target != self.project_id {
            return Err(ProtoError::invalid(format!(
                "weave_ref {:?} is not in project {}",
                self.weave_ref, self.project_id
            ))
            .into());
        }
        if self.feedback_type.is_empty() || self.feedback_type.len() > 256 {
            return Err(ProtoError::invalid("feedback_type must be 1 to 256 characters").into());
        }
        let payload = serde_json::to_string(&self.payload).expect("JSON values serialise");
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(CreateError::TooLarge(format!(
                "feedback payload is {} bytes, more than the limit of {MAX_PAYLOAD_BYTES}",
                payload.len()
            )));
        }
        let id = match self.id.filter(|s| !s.is_empty()) {
            Some(id) => {
                check_id("feedback id", &id)?;
                id
            }
            None => crate::ids::new_call_id(),
        };
        let mut extra = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                extra.insert(k.to_owned(), v);
            }
        };
        fn val<T: serde::Serialize>(v: &Option<T>) -> Option<Value> {
            v.as_ref().map(|v| serde_json::to_value(v).unwrap_or(Value::Null))
        }
        put("scorer_tags", val(&self.scorer_tags));
        put("scorer_tag_reasons", val(&self.scorer_tag_reasons));
        put("scorer_tag_confidences", val(&self.scorer_tag_confidences));
        put("scorer_ratings", val(&self.scorer_ratings));
        put("scorer_rating_reasons", val(&self.scorer_rating_reasons));
        put("scorer_rating_confidences", val(&self.scorer_rating_confidences));
        for (k, v) in [
            ("span_agent_name", &self.span_agent_name),
            ("span_agent_version", &self.span_agent_version),
            ("span_conversation_id", &self.span_conversation_id),
            ("span_trace_id", &self.span_trace_id),
            ("scorer_trace_id", &self.scorer_trace_id),
            ("span_status_code", &self.span_status_code),
        ] {
            put(k, v.clone().map(Value::String));
        }
        Ok(NewFeedback {
            project: self.project_id,
            id,
            weave_ref: self.weave_ref,
            feedback_type: self.feedback_type,
            creator: self.creator,
            payload,
            created_at: now,
            wb_user_id: wb_user_id.to_owned(),
            annotation_ref: self.annotation_ref,
            runnable_ref: self.runnable_ref,
            call_ref: self.call_ref,
            trigger_ref: self.trigger_ref,
            queue_id: self.queue_id,
            extra: serde_json::to_string(&extra).expect("JSON values serialise"),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Field catalog and validated query

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedbackColumn {
    Id,
    ProjectId,
    WeaveRef,
    FeedbackType,
    Creator,
    CreatedAt,
    WbUserId,
    AnnotationRef,
    RunnableRef,
    CallRef,
    TriggerRef,
    QueueId,
}

impl FeedbackColumn {
    fn parse(name: &str) -> Option<FeedbackColumn> {
        use FeedbackColumn::*;
        Some(match name {
            "id" => Id,
            "project_id" => ProjectId,
            "weave_ref" => WeaveRef,
            "feedback_type" => FeedbackType,
            "creator" => Creator,
            "created_at" => CreatedAt,
            "wb_user_id" => WbUserId,
            "annotation_ref" => AnnotationRef,
            "runnable_ref" => RunnableRef,
            "call_ref" => CallRef,
            "trigger_ref" => TriggerRef,
            "queue_id" => QueueId,
            _ => return None,
        })
    }

    /// The column's name in both backends' `feedback` tables.
    pub fn name(self) -> &'static str {
        use FeedbackColumn::*;
        match self {
            Id => "id",
            ProjectId => "project_id",
            WeaveRef => "weave_ref",
            FeedbackType => "feedback_type",
            Creator => "creator",
            CreatedAt => "created_at",
            WbUserId => "wb_user_id",
            AnnotationRef => "annotation_ref",
            RunnableRef => "runnable_ref",
            CallRef => "call_ref",
            TriggerRef => "trigger_ref",
            QueueId => "queue_id",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedbackField {
    Column(FeedbackColumn),
    /// A path into the payload; string semantics (docs/api/query.md#typing).
    Payload(Vec<String>),
}

impl heddle_ql::sql::FieldKind for FeedbackField {
    fn is_json(&self) -> bool {
        matches!(self, FeedbackField::Payload(_))
    }
    fn is_json_path(&self) -> bool {
        self.is_json()
    }
}

/// Path segments must be non-empty and free of characters the dialects quote with.
pub fn check_segments(name: &str, segs: &[String]) -> Result<(), ProtoError> {
    if segs.is_empty() || segs.iter().any(|s| s.is_empty() || s.contains(['"', '\\'])) {
        return Err(ProtoError::invalid(format!(
            "invalid path {name:?}: segments must be non-empty, without '\"' or '\\'"
        )));
    }
    Ok(())
}

pub struct FeedbackCatalog;

impl Catalog for FeedbackCatalog {
    type Field = FeedbackField;
    type Error = ProtoError;

    fn resolve(&self, name: &str) -> Result<(FeedbackField, ValueType), ProtoError> {
        if let Some(c) = FeedbackColumn::parse(name) {
            let t = if c == FeedbackColumn::CreatedAt {
                ValueType::Timestamp
            } else {
                ValueType::String
            };
            return Ok((FeedbackField::Column(c), t));
        }
        if let Some(path) = name.strip_prefix("payload.") {
            let segs = split_path(path);
            check_segments(name, &segs)?;
            return Ok((FeedbackField::Payload(segs), ValueType::String));
        }
        Err(ProtoError::invalid(format!("unknown feedback field {name:?}")))
    }
}

#[derive(Debug, Clone)]
pub struct FeedbackQuery {
    pub project: ProjectId,
    pub expr: Option<TExpr<FeedbackField>>,
    /// Always ends with `id`, so paging is deterministic.
    pub sort: Vec<(FeedbackField, Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
}

impl FeedbackQueryReq {
    /// The validated query and the projection.
    pub fn validate(self) -> Result<(FeedbackQuery, Option<Vec<String>>), ProtoError> {
        let expr = self.query.as_ref().map(|q| q.typed(&FeedbackCatalog)).transpose()?;
        let mut sort = Vec::new();
        for s in self.sort_by.unwrap_or_default() {
            sort.push((FeedbackCatalog.resolve(&s.field)?.0, s.direction));
        }
        if sort.is_empty() {
            sort.push((FeedbackField::Column(FeedbackColumn::CreatedAt), Direction::Asc));
        }
        let id = FeedbackField::Column(FeedbackColumn::Id);
        if !sort.iter().any(|(f, _)| *f == id) {
            sort.push((id, Direction::Asc));
        }
        let non_negative = |what: &str, v: Option<i64>| match v {
            Some(n) if n < 0 => Err(ProtoError::invalid(format!("{what} must be >= 0, got {n}"))),
            v => Ok(v.map(|n| n as u64)),
        };
        if let Some(fields) = &self.fields {
            check_projection(fields)?;
        }
        let q = FeedbackQuery {
            project: self.project_id,
            expr,
            sort,
            limit: non_negative("limit", self.limit)?,
            offset: non_negative("offset", self.offset)?.unwrap_or(0),
        };
        Ok((q, self.fields))
    }
}

/// The ids a `/feedback/purge` query names. Only `$eq` of `id` with a string literal, `$in` of
/// `id` with string literals, or `$or` of those are accepted [upstream]: a purge never deletes
/// by anything but id.
pub fn purge_ids(q: &Query) -> Result<Vec<String>, ProtoError> {
    fn is_id(o: &Operand) -> bool {
        matches!(o, Operand::Field(f) if f == "id")
    }
    fn lit(o: &Operand) -> Option<String> {
        match o {
            Operand::Literal(Value::String(s)) => Some(s.clone()),
            _ => None,
        }
    }
    fn walk(e: &Expr, top: bool, out: &mut Vec<String>) -> bool {
        match e {
            Expr::Cmp(CmpOp::Eq, a, b) => {
                let id = if is_id(a) {
                    lit(b)
                } else if is_id(b) {
                    lit(a)
                } else {
                    None
                };
                id.map(|id| out.push(id)).is_some()
            }
            Expr::In(a, bs) if is_id(a) => {
                bs.iter().all(|b| lit(b).map(|id| out.push(id)).is_some())
            }
            Expr::Or(xs) if top => xs.iter().all(|x| walk(x, false, out)),
            _ => false,
        }
    }
    let mut ids = Vec::new();
    if !walk(&q.expr, true, &mut ids) {
        return Err(ProtoError::invalid(
            "feedback purge accepts only queries on ids: $eq of id with a string literal, $in of \
             id with string literals, or $or of those",
        ));
    }
    ids.dedup();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn create(v: Value) -> FeedbackCreateReq {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn create_validates_ref_project_and_size() {
        let base = json!({"project_id": "e/p", "weave_ref": "weave:///e/p/call/c1",
                          "feedback_type": "wandb.note.1", "payload": {"note": "hi"},
                          "id": "fid", "scorer_tags": ["x"], "span_status_code": null});
        let f = create(base.clone()).into_new("u", Micros(5)).unwrap();
        assert_eq!(f.id, "fid");
        assert_eq!(f.payload, r#"{"note":"hi"}"#);
        let row = StoredFeedback::from(f).to_json();
        assert_eq!(row["scorer_tags"], json!(["x"]));
        assert_eq!(row["span_status_code"], json!("UNSET"));
        assert_eq!(row["created_at"], json!("1970-01-01T00:00:00.000005Z"));

        for bad_ref in ["weave:///e/other/call/c1", "weave:///e/p", "nope", "weave:///e/p/call/"] {
            let mut v = base.clone();
            v["weave_ref"] = json!(bad_ref);
            let err = create(v).into_new("u", Micros(5)).unwrap_err();
            assert!(matches!(err, CreateError::Invalid(_)), "{bad_ref}: {err:?}");
        }
        let mut big = base.clone();
        big["payload"] = json!({"x": "a".repeat(MAX_PAYLOAD_BYTES)});
        assert!(matches!(create(big).into_new("u", Micros(5)), Err(CreateError::TooLarge(_))));
        let mut no_id = base;
        no_id["id"] = Value::Null;
        assert_eq!(create(no_id).into_new("u", Micros(5)).unwrap().id.len(), 36);
    }

    #[test]
    fn purge_accepts_only_id_queries() {
        let q = |v: Value| Query::parse(&json!({ "$expr": v })).unwrap();
        let eq = |id: &str| json!({"$eq": [{"$getField": "id"}, {"$literal": id}]});
        assert_eq!(purge_ids(&q(eq("a"))).unwrap(), ["a"]);
        assert_eq!(purge_ids(&q(json!({"$or": [eq("a"), eq("b")]}))).unwrap(), ["a", "b"]);
        assert_eq!(
            purge_ids(&q(json!({"$in": [{"$getField": "id"}, [{"$literal": "a"}]]}))).unwrap(),
            ["a"]
        );
        for bad in [
            json!({"$eq": [{"$getField": "weave_ref"}, {"$literal": "a"}]}),
            json!({"$eq": [{"$literal": "1"}, {"$literal": "1"}]}),
            json!({"$and": [eq("a")]}),
            json!({"$or": [eq("a"), {"$eq": [{"$getField": "feedback_type"}, {"$literal": "x"}]}]}),
            json!({"$not": [eq("a")]}),
            json!({"$or": [{"$or": [eq("a")]}]}),
        ] {
            assert!(purge_ids(&q(bad.clone())).is_err(), "{bad}");
        }
    }

    #[test]
    fn catalog_and_projection() {
        let c = FeedbackCatalog;
        assert_eq!(c.resolve("created_at").unwrap().1, ValueType::Timestamp);
        assert_eq!(
            c.resolve("payload.a.0").unwrap().0,
            FeedbackField::Payload(vec!["a".into(), "0".into()])
        );
        for bad in ["payload", "payload.", "nope", "payload.a..b"] {
            assert!(c.resolve(bad).is_err(), "{bad}");
        }
        let row = json!({"id": "x", "payload": {"a": [1, {"b": 2}]}});
        let row = row.as_object().unwrap();
        let fields = vec!["id".to_owned(), "payload.a.1.b".to_owned(), "payload.zz".to_owned()];
        assert_eq!(
            Value::Object(project_row(row, &fields)),
            json!({"id": "x", "payload.a.1.b": 2, "payload.zz": null})
        );
        assert!(check_projection(&["bogus".to_owned()]).is_err());
    }
}
